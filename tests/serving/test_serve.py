# coding=utf-8
"""predict_text.py --serve: a real HTTP server subprocess on 127.0.0.1 and real requests.

Readiness (/healthz), predictions equal to run_classifier's --do_predict, micro-batching of
concurrent requests, 400s that leave the server serving, and SIGTERM draining a request in
flight before the process exits 0. Every process has a deadline and is killed in cleanup.

The HTTP details (connections, broken clients, HTTP/1.1) are tested on the same server class
in this process, with a stub model, which lets a test hold a prediction as long as it needs.
"""

import http.client
import json
import logging
import re
import signal
import socket
import struct
import subprocess
import threading
import time
import types

import numpy as np
import pytest

import cli
from bert_mgpu import errors
from bert_mgpu.classifier import serving as classifier_serving
from bert_mgpu.serving import batching
from bert_mgpu.serving import http_server
from bert_mgpu.serving import kinds
from bert_mgpu.serving import model_inputs
import trained_classifier

# The module's server batches requests arriving within this window.
BATCH_WINDOW_MS = 300
REQUEST_TIMEOUT_SECONDS = 60
MAX_BATCH = 64
MAX_REQUEST_TEXTS = 160


def request(url, body=None):
  return cli.http_json(url, body, REQUEST_TIMEOUT_SECONDS)


def post_texts(base_url, texts, texts_b=None):
  payload = {"texts": texts}
  if texts_b is not None:
    payload["texts_b"] = texts_b
  return request(base_url + "/predict", json.dumps(payload).encode("utf-8"))


class Server(object):
  """predict_text.py --serve=0 in the background; `url` once it listens."""

  def __init__(self, export_dir, stderr_path, window_ms):
    self.running = cli.RunningScript(
        "predict_text.py", ["--export_dir=" + export_dir, "--serve=0",
                            "--batch_window_ms=%d" % window_ms, "--max_batch=%d" % MAX_BATCH,
                            "--max_request_texts=%d" % MAX_REQUEST_TEXTS], stderr_path)
    self.running.wait_for(lambda: re.search(r"Serving on (http://\S+)", self.running.stderr()),
                          "the server listening")
    self.url = re.search(r"Serving on (http://\S+)", self.running.stderr()).group(1)

  def wait_until_ready(self):
    """Polls /healthz until 200; returns the replies seen, in order."""
    replies = []
    def ready():
      replies.append(request(self.url + "/healthz"))
      return replies[-1][0] == 200
    self.running.wait_for(ready, "the model ready")
    return replies

  def stats(self):
    status, reply = request(self.url + "/healthz")
    assert status == 200, reply
    return reply

  def address(self):
    host, port = re.match(r"http://([^:]+):(\d+)", self.url).groups()
    return host, int(port)

  def exit_code_within(self, seconds):
    """The exit code, failing if the process runs `seconds` longer."""
    try:
      return self.running.process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
      raise AssertionError("still running %d s later:\n%s" % (seconds,
                                                               self.running.stderr()[-3000:]))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
  """A trained output_dir and its export (the base directory of version 1)."""
  return trained_classifier.train_and_export(str(tmp_path_factory.mktemp("serve")))


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
  _, export_dir = model
  stderr_path = str(tmp_path_factory.mktemp("server") / "stderr.txt")
  started = Server(export_dir, stderr_path, BATCH_WINDOW_MS)
  with started.running:
    started.first_replies = started.wait_until_ready()
    yield started


def test_healthz_says_loading_then_ready(server):
  codes = [code for code, _ in server.first_replies]
  assert codes[-1] == 200 and set(codes) <= {200, 503}
  # The port is printed before the model loads, which takes a graph build and a restore.
  assert codes[0] == 503, codes
  assert server.first_replies[0][1] == {"status": "loading"}
  assert server.first_replies[-1][1]["status"] == "ready"


def test_labels(server, model):
  trained, _ = model
  assert request(server.url + "/labels") == (200, {"labels": trained.labels})


def test_predictions_equal_do_predict_and_count_truncated_texts(server, model):
  trained, _ = model
  status, reply = post_texts(server.url, trained.texts)
  assert status == 200, reply
  np.testing.assert_allclose(reply["probabilities"], trained.probabilities, atol=1e-5)
  assert reply["labels"] == [trained.labels[i] for i in trained.probabilities.argmax(axis=1)]
  assert reply["truncated"] == trained_classifier.num_over_long(trained, trained.texts)
  assert reply["truncated"] >= trained_classifier.NUM_LONG_TEST


def test_pairs(server, model):
  trained, _ = model
  texts_a, texts_b = zip(*trained.pairs)
  status, reply = post_texts(server.url, list(texts_a), list(texts_b))
  assert status == 200, reply
  np.testing.assert_allclose(reply["probabilities"], trained.pair_probabilities, atol=1e-5)


def test_concurrent_requests_run_as_one_micro_batch(server, model):
  trained, _ = model
  num_requests = 8
  before = server.stats()
  barrier = threading.Barrier(num_requests)
  replies = [None] * num_requests

  def send(index):
    rows = [index, index + 8, index + 16][:1 + index % 3]
    barrier.wait(timeout=REQUEST_TIMEOUT_SECONDS)
    replies[index] = rows, post_texts(server.url, [trained.texts[r] for r in rows])

  threads = [threading.Thread(target=send, args=(i,)) for i in range(num_requests)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join(timeout=REQUEST_TIMEOUT_SECONDS)
  for rows, (status, reply) in replies:
    assert status == 200, reply
    np.testing.assert_allclose(reply["probabilities"], trained.probabilities[rows], atol=1e-5)
  after = server.stats()
  assert after["requests"] - before["requests"] == num_requests
  batches = after["batches"] - before["batches"]
  assert 1 <= batches < num_requests, (before, after)
  logged = [int(n) for n in re.findall(r"micro-batch \d+: (\d+) request", server.running.stderr())]
  assert max(logged) > 1


def test_bad_requests_get_400_and_the_server_keeps_serving(server, model):
  trained, _ = model
  for body, fragment in ((b"{not json", "not JSON"),
                         (b'{"text": ["a"]}', '"texts"'),
                         (b'{"texts": "a"}', "list of strings"),
                         (json.dumps({"texts": ["ok", " "]}).encode("utf-8"), "texts[1] is empty"),
                         (json.dumps({"texts": ["a", "b"], "texts_b": ["c"]}).encode("utf-8"),
                          '"texts_b" has 1')):
    status, reply = request(server.url + "/predict", body)
    assert status == 400 and fragment in reply["error"], (body, status, reply)
  status, reply = post_texts(server.url, trained.texts[:2])
  assert status == 200
  np.testing.assert_allclose(reply["probabilities"], trained.probabilities[:2], atol=1e-5)
  assert request(server.url + "/nowhere")[0] == 404


def test_a_large_request_runs_in_chunks_of_max_batch(server, model):
  trained, _ = model
  count = MAX_BATCH * 2 + 20
  rows = [i % len(trained.texts) for i in range(count)]
  log_before = len(server.running.stderr())
  before = server.stats()
  status, reply = post_texts(server.url, [trained.texts[r] for r in rows])
  assert status == 200, reply
  np.testing.assert_allclose(reply["probabilities"], trained.probabilities[rows], atol=1e-5)
  after = server.stats()
  assert after["requests"] - before["requests"] == 1
  assert after["batches"] - before["batches"] >= 3
  sizes = [int(n) for n in re.findall(r"micro-batch \d+: \d+ request\(s\), (\d+) text",
                                      server.running.stderr()[log_before:])]
  assert sum(sizes) == count and max(sizes) <= MAX_BATCH, sizes


def test_more_texts_than_max_request_texts_get_413(server):
  status, reply = post_texts(server.url, ["a"] * (MAX_REQUEST_TEXTS + 1))
  assert status == 413, reply
  assert "%d texts" % (MAX_REQUEST_TEXTS + 1) in reply["error"]
  assert "at most %d" % MAX_REQUEST_TEXTS in reply["error"]
  assert request(server.url + "/healthz")[0] == 200


def test_texts_without_tokens_get_400_naming_the_index(server, model):
  trained, _ = model
  invisible = "\u200b\u0001 \u200b"
  # Index 70 lies in the second chunk of MAX_BATCH: the index is the request's, not the chunk's.
  texts = [trained.texts[0]] * 70 + [invisible]
  status, reply = post_texts(server.url, texts)
  assert status == 400 and "texts[70] has no tokens" in reply["error"], reply
  status, reply = post_texts(server.url, trained.texts[:2], [trained.texts[3], invisible])
  assert status == 400 and "texts_b[1] has no tokens" in reply["error"], reply
  status, reply = post_texts(server.url, [invisible, "x"], trained.texts[:2])
  assert status == 400 and "texts[0] has no tokens" in reply["error"], reply
  before = server.stats()
  assert post_texts(server.url, trained.texts[:1])[0] == 200
  assert server.stats()["truncated"] == before["truncated"]  # nothing counted for the 400s


def stalled_client(address):
  """A connection that sent part of a request and then nothing."""
  client = socket.create_connection(address, timeout=REQUEST_TIMEOUT_SECONDS)
  client.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"te")
  return client


def test_sigterm_drains_the_request_in_flight_then_exits_0(model, tmp_path):
  trained, export_dir = model
  # A long window holds the request in the batcher's queue while SIGTERM arrives.
  server = Server(export_dir, str(tmp_path / "stderr.txt"), window_ms=2000)
  with server.running:
    server.wait_until_ready()
    # Neither a stalled client nor an idle keep-alive connection delays the exit.
    stalled = stalled_client(server.address())
    idle = http.client.HTTPConnection(*server.address(), timeout=REQUEST_TIMEOUT_SECONDS)
    idle.request("GET", "/labels")
    assert idle.getresponse().read()
    result = {}
    thread = threading.Thread(target=lambda: result.update(
        reply=post_texts(server.url, trained.texts[:3])))
    thread.start()
    server.running.wait_for(lambda: server.stats()["in_flight"] == 1, "the request in flight")
    server.running.signal(signal.SIGTERM)
    thread.join(timeout=REQUEST_TIMEOUT_SECONDS)
    status, reply = result["reply"]
    assert status == 200, reply
    np.testing.assert_allclose(reply["probabilities"], trained.probabilities[:3], atol=1e-5)
    assert server.exit_code_within(8) == 0
    stalled.close()
    idle.close()
    stderr = server.running.stderr()
    assert "Traceback" not in stderr
    assert "Stopped after 1 request(s) (3 text(s)) in 1 batch(es)." in stderr


def test_draining_says_503_and_a_second_sigterm_exits_at_once(model, tmp_path):
  trained, export_dir = model
  # The window outlasts the test: the drain would wait that long for the request.
  server = Server(export_dir, str(tmp_path / "stderr.txt"), window_ms=100000)
  with server.running:
    server.wait_until_ready()
    def send():
      try:
        post_texts(server.url, trained.texts[:1])
      except (OSError, http.client.HTTPException):
        pass  # the process exits under it
    thread = threading.Thread(target=send)
    thread.start()
    server.running.wait_for(lambda: server.stats()["in_flight"] == 1, "the request in flight")
    server.running.signal(signal.SIGTERM)
    server.running.wait_for(lambda: "Received SIGTERM" in server.running.stderr(), "the drain")
    assert request(server.url + "/healthz") == (503, {"status": "draining"})
    status, reply = post_texts(server.url, ["a"])
    assert status == 503 and "shutting down" in reply["error"], reply
    server.running.signal(signal.SIGTERM)
    assert server.exit_code_within(5) == 128 + signal.SIGTERM
    thread.join(timeout=REQUEST_TIMEOUT_SECONDS)
    assert "exiting without draining" in server.running.stderr()


# ---------------------------------------------------------------------------
# The server class in this process, with a stub model
# ---------------------------------------------------------------------------

class StubPredictor(classifier_serving.ClassifierPredictor):
  """The classifier's predictor with stub features of the right shape (every text is one
  token long) and no runner (the tests' batchers answer)."""

  def __init__(self):
    files = types.SimpleNamespace(labels=["x", "y"], assets={},
                                  settings={"model": "classifier", "max_seq_length": 4},
                                  kind=classifier_serving.ClassifierKind())
    super(StubPredictor, self).__init__(types.SimpleNamespace(files=files), None)

  def featurize(self, texts_a, texts_b=None):
    del texts_b
    arrays = {name: np.ones([len(texts_a), 4], np.int32)
              for name in ("input_ids", "input_mask", "segment_ids")}
    return classifier_serving.ClassifierFeatures(
        model_inputs.Features(arrays, np.zeros([len(texts_a)], np.bool_)))


class LocalServer(object):
  """http_server's server on 127.0.0.1 in a thread; predictions wait for `gate`."""

  def __init__(self):
    self.gate = threading.Event()
    self.gate.set()
    self.state = http_server.ServingState(chunk_size=4,
                                          limits=kinds.InputLimits(max_texts=10))
    self.batcher = batching.MicroBatcher(self._predict, 0, 4)
    self.state.ready(StubPredictor(), self.batcher)
    self.server = http_server.make_server("127.0.0.1", 0, self.state)
    self.address = self.server.server_address[:2]
    self.thread = threading.Thread(target=self.server.serve_forever)
    self.thread.start()

  def _predict(self, features):
    assert self.gate.wait(REQUEST_TIMEOUT_SECONDS)
    return {"probabilities": np.tile([[0.25, 0.75]], [len(features.truncated), 1]).astype(
        np.float32)}

  def wait_for(self, condition, what):
    deadline = time.time() + REQUEST_TIMEOUT_SECONDS
    while not condition():
      assert time.time() < deadline, "%s did not happen in time" % what
      time.sleep(0.01)

  def close(self):
    self.gate.set()
    self.server.shutdown()
    self.server.server_close()
    self.thread.join(REQUEST_TIMEOUT_SECONDS)
    assert self.batcher.stop(REQUEST_TIMEOUT_SECONDS)


@pytest.fixture
def local():
  started = LocalServer()
  yield started
  started.close()


class ListHandler(logging.Handler):
  def __init__(self):
    logging.Handler.__init__(self, logging.WARNING)
    self.records = []

  def emit(self, record):
    self.records.append(record)


@pytest.fixture
def tf_warnings():
  """The WARNING and ERROR records TensorFlow's logger gets during the test."""
  handler = ListHandler()
  logger = logging.getLogger("tensorflow")
  logger.addHandler(handler)
  yield handler.records
  logger.removeHandler(handler)


def raw_exchange(address, data, timeout=5):
  """Sends `data` on a new connection; returns what comes back until it closes."""
  with socket.create_connection(address, timeout=timeout) as client:
    client.sendall(data)
    chunks = []
    while True:
      chunk = client.recv(65536)
      if not chunk:
        return b"".join(chunks)
      chunks.append(chunk)


def read_reply(reader):
  """(status, headers dict, JSON body) of one HTTP reply from a socket's makefile("rb")."""
  status = int(reader.readline().split()[1])
  headers = {}
  for line in iter(reader.readline, b"\r\n"):
    name, value = line.decode("latin-1").split(":", 1)
    headers[name.strip().lower()] = value.strip()
  return status, headers, json.loads(reader.read(int(headers["content-length"])).decode("utf-8"))


def test_many_connections_leave_no_thread_bookkeeping_behind(local):
  threads_before = threading.active_count()
  for _ in range(300):
    connection = http.client.HTTPConnection(*local.address, timeout=REQUEST_TIMEOUT_SECONDS)
    connection.request("GET", "/healthz")
    assert connection.getresponse().status == 200
    connection.close()
  local.wait_for(lambda: local.server.open_connections() == 0, "the connections closed")
  kept = getattr(local.server, "_threads", None)  # ThreadingMixIn's own list, if any
  assert not isinstance(kept, list) or len(kept) <= 5, len(kept)
  assert threading.active_count() <= threads_before + 2


def test_a_client_leaving_before_the_reply_is_no_error(local, tf_warnings, capfd):
  local.gate.clear()
  body = b'{"texts": ["a", "b"]}'
  client = socket.create_connection(local.address, timeout=REQUEST_TIMEOUT_SECONDS)
  client.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" %
                 (len(body), body))
  local.wait_for(lambda: local.batcher.stats["in_flight"] == 1, "the request in flight")
  # Closing with SO_LINGER 0 resets the connection: the reply cannot be written.
  client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
  client.close()
  local.gate.set()
  local.wait_for(lambda: local.server.open_connections() == 0, "the handler done")
  assert local.state.requests == 1  # it was predicted
  assert [r.getMessage() for r in tf_warnings] == []
  assert "Traceback" not in capfd.readouterr().err
  connection = http.client.HTTPConnection(*local.address, timeout=REQUEST_TIMEOUT_SECONDS)
  connection.request("POST", "/predict", b'{"texts": ["c"]}')
  assert json.loads(connection.getresponse().read())["labels"] == ["y"]
  connection.close()


@pytest.mark.parametrize("headers,body,fragment", [
    ("Content-Length: -5\r\n", b"", "Content-Length is -5"),
    ("Content-Length: 100001\r\n", b"[" * 100001, "nested too deeply"),
])
def test_negative_lengths_and_deep_nesting_get_400(local, headers, body, fragment):
  reply = raw_exchange(local.address, b"POST /predict HTTP/1.1\r\nHost: x\r\n"
                       b"Connection: close\r\n%s\r\n%s" % (headers.encode("ascii"), body))
  assert reply.startswith(b"HTTP/1.1 400 "), reply[:200]
  assert fragment.encode("utf-8") in reply, reply[:300]


def test_a_missing_content_length_gets_411(local):
  reply = raw_exchange(local.address, b"POST /predict HTTP/1.1\r\nHost: x\r\n\r\n")
  assert reply.startswith(b"HTTP/1.1 411 "), reply[:200]


def test_expect_100_continue_and_keep_alive(local):
  body = b'{"texts": ["a", "b", "c", "d", "e", "f"]}'  # over chunk_size 4
  with socket.create_connection(local.address, timeout=5) as client:
    reader = client.makefile("rb")
    client.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                   b"Content-Length: %d\r\n\r\n" % len(body))
    # curl waits for this line (1 s) before it sends the body.
    assert reader.readline().startswith(b"HTTP/1.1 100 ")
    assert reader.readline() == b"\r\n"
    client.sendall(body)
    status, headers, reply = read_reply(reader)
    assert status == 200 and reply["labels"] == ["y"] * 6, reply
    assert headers.get("connection") != "close"
    # The same connection takes the next request.
    client.sendall(b"GET /labels HTTP/1.1\r\nHost: x\r\n\r\n")
    assert read_reply(reader)[::2] == (200, {"labels": ["x", "y"]})
    # An error that leaves the body unread closes the connection.
    client.sendall(b"POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    status, headers, _ = read_reply(reader)
    assert status == 404 and headers["connection"] == "close"
    assert reader.read() == b""
  assert local.batcher.stats["batches"] == 2  # 6 texts in chunks of 4


def test_too_many_texts_get_413_and_the_connection_stays_usable(local):
  connection = http.client.HTTPConnection(*local.address, timeout=REQUEST_TIMEOUT_SECONDS)
  connection.request("POST", "/predict", json.dumps({"texts": ["a"] * 11}).encode("utf-8"))
  response = connection.getresponse()
  assert response.status == 413 and "at most 10" in json.loads(response.read())["error"]
  connection.request("GET", "/labels")
  assert connection.getresponse().status == 200
  connection.close()


def test_healthz_says_draining_and_predict_gets_503(local):
  assert local.state.drain(REQUEST_TIMEOUT_SECONDS) == 0
  connection = http.client.HTTPConnection(*local.address, timeout=REQUEST_TIMEOUT_SECONDS)
  connection.request("GET", "/healthz")
  response = connection.getresponse()
  assert (response.status, json.loads(response.read())) == (503, {"status": "draining"})
  connection.request("POST", "/predict", b'{"texts": ["a"]}')
  assert connection.getresponse().status == 503
  connection.close()


def test_truncated_texts_are_counted_only_when_answered():
  state = http_server.ServingState(chunk_size=4, limits=kinds.InputLimits(max_texts=10))

  class FailingBatcher(object):
    stats = {}

    def predict(self, unused_features):
      raise RuntimeError("out of memory")

  class TruncatingPredictor(StubPredictor):
    def featurize(self, texts_a, texts_b=None):
      features = StubPredictor.featurize(self, texts_a, texts_b).features
      return classifier_serving.ClassifierFeatures(
          features._replace(truncated=np.ones([len(texts_a)], np.bool_)))

  state.ready(TruncatingPredictor(), FailingBatcher())
  with pytest.raises(RuntimeError):
    state.predict((["a", "b"], None))
  assert state.truncated == 0 and state.requests == 0


def test_micro_batches_stop_before_a_request_that_would_overflow():
  sizes = []
  def predict(features):
    sizes.append(len(features.truncated))
    return {"probabilities": np.zeros([len(features.truncated), 2], np.float32)}
  batcher = batching.MicroBatcher(predict, window_seconds=1.0, max_batch=4)
  try:
    def features(texts):
      return StubPredictor().featurize(texts).features
    threads = []
    for size in (3, 2, 1, 6):
      threads.append(threading.Thread(target=batcher.predict, args=(features(["a"] * size),)))
      threads[-1].start()
      time.sleep(0.05)  # queued in this order, all within the first window
    for thread in threads:
      thread.join(REQUEST_TIMEOUT_SECONDS)
  finally:
    assert batcher.stop(REQUEST_TIMEOUT_SECONDS)
  # 3 (2 would overflow), then 2 + 1 (6 would), then 6 alone.
  assert sizes == [3, 3, 6], sizes


def test_a_kinds_route_that_the_server_could_not_serve_is_refused_in_one_line():
  for path in ("/predict", "/healthz", "rank"):
    class Routed(StubPredictor):
      def routes(self, path=path):
        return {path: lambda request, predict, limits: {}}
    state = http_server.ServingState(chunk_size=4, limits=kinds.InputLimits(max_texts=10))
    with pytest.raises(errors.UsageError, match=r"^Routed declares the HTTP route '%s': a "
                       r"kind's route starts with / and is none of /predict, /labels, "
                       r"/healthz\.$" % re.escape(path)):
      state.ready(Routed(), None)
    assert state.predictor is None and state.routes == {}


def test_a_routes_reply_that_is_not_json_is_an_error_and_not_counted():
  state = http_server.ServingState(chunk_size=4, limits=kinds.InputLimits(max_texts=10))

  class Routed(StubPredictor):
    def routes(self):
      return {"/score": lambda request, predict, limits: {"score": np.float32(0.5)}}

  state.ready(Routed(), types.SimpleNamespace(predict=None))
  with pytest.raises(ValueError, match="the route's reply is not JSON"):
    state.run_route(state.routes["/score"], {})
  assert state.requests == 0


def test_joined_requests_of_a_windowed_model_pad_their_windows():
  # Two requests of a --long_text=windows classifier, 2 and 3 windows per text, in one
  # micro-batch: the first one's rows get an all-zero third window.
  def features(rows, windows, value):
    arrays = {name: np.full([rows, windows, 4], value, np.int32)
              for name in ("input_ids", "input_mask", "segment_ids")}
    return model_inputs.Features(arrays, np.zeros([rows], np.bool_))
  joined = model_inputs.concatenate_features([features(1, 2, 7), features(2, 3, 9)])
  assert joined.arrays["input_ids"].shape == (3, 3, 4)
  np.testing.assert_array_equal(joined.arrays["input_mask"][0], [[7] * 4, [7] * 4, [0] * 4])
  np.testing.assert_array_equal(joined.arrays["input_mask"][1:], 9)
  assert joined.truncated.shape == (3,)
