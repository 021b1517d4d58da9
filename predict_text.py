# coding=utf-8
"""Raw text in, labels or entities out: runs a trained classifier or NER model on texts from
a file, stdin or HTTP.

The model is an export (--export_dir: the base directory, meaning its newest version, or one
version directory) or a trained output_dir (--output_dir: its best checkpoint, else the
latest) of run_classifier_mgpu.py or run_ner_mgpu.py; its model_settings.json says which.
It is loaded once and runs on every tower (--n_gpus x --towers_per_gpu).

Input (--input_file, else stdin): UTF-8, one text per line; with --text_b, each line is
`text_a<TAB>text_b`. An empty line, or one with no tokens (only control or invisible
characters), is an error (the message names the file and line).

Output (--output_file, else stdout): one line per input line, in input order:
`label<TAB>probability<TAB>p_1<TAB>...<TAB>p_k`, the probabilities in labels.txt order. A
multi-label classifier writes `labels<TAB>p_1<TAB>...<TAB>p_k`, its predicted labels (those
reaching their thresholds.json thresholds) joined by its separator, empty for none.

An NER model reads the same lines (no --text_b), each character one token as in CLUENER;
a line longer than max_seq_length - 2 pieces is cut into windows doc_stride pieces apart
(the model's settings), as run_ner_mgpu.py does. Output: one predict_entities.jsonl line
per input line, in input order: {"text", "entities": [{"type", "start", "end", "text"}]}
with character offsets into the line, `end` exclusive.

With --serve=PORT it answers HTTP instead (docs/SERVING.md):
  POST /predict  {"texts": [...], "texts_b": [...]} -> {"labels", "probabilities", "truncated"}
                 (a multi-label classifier: "labels" holds a list of labels per text)
                 (NER: {"texts": [...]} -> {"entities": [[...], ...]}, one list per text)
  GET  /labels   {"labels": [...]}
  GET  /healthz  503 {"status": "loading"} until the model is ready, then 200 with counters,
                 503 {"status": "draining"} after SIGTERM
Requests that arrive within --batch_window_ms of each other run as one batch (at most
--max_batch texts; a larger request runs in chunks of that many).
"""

import http.server
import json
import os
import signal
import sys
import threading
import time

import tensorflow.compat.v1 as tf

from bert_mgpu import command_line
from bert_mgpu.ner import serving as ner_serving
import run_classifier_mgpu
from bert_mgpu.training import run_settings
from bert_mgpu.serving import predictor as serving
from bert_mgpu.errors import UsageError
from bert_mgpu.data.output_files import atomic_write_text
from bert_mgpu.data import text_files
from bert_mgpu.data.text_files import line_error, read_text_file

FLAGS = tf.flags.FLAGS

# Largest POST body accepted, in bytes.
MAX_REQUEST_BYTES = 16 << 20


def define_flags():
  """Defines the flags; called only under __main__, so the module imports anywhere."""
  flags = tf.flags
  flags.DEFINE_string("export_dir", None, "A SavedModel export of run_classifier_mgpu.py or "
                      "run_ner_mgpu.py: its base directory (the newest version is used) or "
                      "one version.")
  flags.DEFINE_string("output_dir", None, "Or a run_classifier_mgpu.py or run_ner_mgpu.py "
                      "--do_train output_dir (its best checkpoint, else the latest).")
  flags.DEFINE_string("input_file", None, "Texts, one per line (UTF-8); default: stdin.")
  flags.DEFINE_string("output_file", None, "Where to write the predictions; default: stdout.")
  flags.DEFINE_bool("text_b", False, "Each input line is text_a<TAB>text_b (sentence pairs).")
  command_line.define_device_flags()
  flags.DEFINE_integer("predict_batch_size", 32, "Texts (NER: windows) per tower per step.")
  flags.DEFINE_integer("serve", None, "Answer HTTP on this port instead of reading texts "
                       "(0: any free port; the log names it).")
  flags.DEFINE_string("host", "127.0.0.1", "With --serve: the address to bind (0.0.0.0: all).")
  flags.DEFINE_integer("batch_window_ms", 5, "With --serve: requests arriving within this "
                       "many milliseconds of the first waiting one run as one batch.")
  flags.DEFINE_integer("max_batch", 256, "With --serve: at most this many texts per batch; "
                       "a larger request runs in chunks of this many.")
  flags.DEFINE_integer("max_request_texts", 4096, "With --serve: at most this many texts per "
                       "request (more: 413).")
  flags.DEFINE_integer("drain_seconds", 30, "With --serve: after SIGTERM, wait at most this "
                       "long for the requests being answered.")


def check_flags():
  """Raises UsageError for flags that cannot work together."""
  if bool(FLAGS.export_dir) == bool(FLAGS.output_dir):
    raise UsageError("give exactly one of --export_dir (a SavedModel export) and --output_dir "
                     "(a trained run_classifier_mgpu.py or run_ner_mgpu.py output_dir).")
  command_line.check_positive(FLAGS, ("max_batch", "max_request_texts"))
  for name in ("batch_window_ms", "drain_seconds"):
    if getattr(FLAGS, name) < 0:
      raise UsageError("--%s=%d: use 0 or more." % (name, getattr(FLAGS, name)))
  if FLAGS.serve is not None and not 0 <= FLAGS.serve <= 65535:
    raise UsageError("--serve=%d: give a port from 0 (any free one) to 65535." % FLAGS.serve)
  if FLAGS.serve is not None and (FLAGS.input_file or FLAGS.output_file):
    raise UsageError("--serve answers HTTP requests: drop --input_file and --output_file.")


# ---------------------------------------------------------------------------
# Input and output
# ---------------------------------------------------------------------------

def decode_utf8(name, data):
  """Decodes bytes read from stdin, or raises UsageError naming the line (as for files)."""
  return text_files.decode_utf8(name, data, "send UTF-8 text (e.g. through `iconv -f GB18030 "
                                "-t UTF-8`)")


def parse_lines(name, text, with_text_b):
  """Texts of the input, one per line.

  Args:
    name: the file name, or <stdin>, for the messages.
    text: the decoded input.
    with_text_b: lines are text_a<TAB>text_b.

  Returns:
    (texts_a, texts_b or None).

  Raises:
    UsageError: an empty line, a missing or extra tab, naming the file and line.
  """
  lines = text.split("\n")
  if lines and lines[-1] == "":
    lines.pop()  # the newline that ends the last line
  texts_a, texts_b = [], []
  for line_number, line in enumerate(lines, 1):
    line = line[:-1] if line.endswith("\r") else line
    fields = line.split("\t")
    if with_text_b and len(fields) != 2:
      raise line_error(name, line_number, "expected text_a<TAB>text_b, found %d tab(s)" %
                       (len(fields) - 1), "write one pair per line with one tab between")
    if not with_text_b and len(fields) > 1:
      raise line_error(name, line_number, "the line holds a tab",
                       "pass --text_b for text_a<TAB>text_b pairs, or remove the tab")
    for index, field in enumerate(fields):
      if not field.strip():
        raise line_error(name, line_number, "the line is empty" if len(fields) == 1 else
                         "text_%s is empty" % "ab"[index], "put a text there or remove the line")
    texts_a.append(fields[0])
    texts_b.extend(fields[1:])
  return texts_a, (texts_b if with_text_b else None)


def read_input():
  """The texts of --input_file or stdin: (texts_a, texts_b or None)."""
  if FLAGS.input_file:
    return parse_lines(FLAGS.input_file, read_text_file(FLAGS.input_file), FLAGS.text_b)
  return parse_lines("<stdin>", decode_utf8("<stdin>", sys.stdin.buffer.read()), FLAGS.text_b)


def format_predictions(probabilities, predictor):
  """One line per row of [n, num_labels]: label<TAB>probability<TAB>all probabilities; for a
  multi-label classifier, its labels joined by its separator<TAB>all probabilities."""
  lines = []
  separator = predictor.model.files.settings.get("label_separator")
  for row, labels in zip(probabilities, predictor.predicted_labels(probabilities)):
    if separator is None:
      head = [labels, str(row[predictor.labels.index(labels)])]
    else:
      head = [separator.join(labels)]
    lines.append("\t".join(head + [str(p) for p in row]) + "\n")
  return "".join(lines)


def write_output(text):
  if FLAGS.output_file:
    atomic_write_text(FLAGS.output_file, text)
  else:
    sys.stdout.write(text)
    sys.stdout.flush()


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------

def load_predictor():
  """Loads the model of --export_dir or --output_dir onto every tower: a serving.Predictor
  of a classifier or an ner_serving.NerPredictor. Raises UsageError."""
  if FLAGS.export_dir:
    model = serving.load_export(FLAGS.export_dir, ner_serving.ANY_KIND)
  else:
    model = serving.load_output_dir(FLAGS.output_dir, ner_serving.ANY_KIND)
  if is_ner(model) and FLAGS.text_b:
    raise UsageError("--text_b: %s is an NER model, which reads one text per line; drop "
                     "--text_b." % (FLAGS.export_dir or FLAGS.output_dir))
  devices = run_settings.device_settings_from_flags(FLAGS).check()
  if is_ner(model):
    predictor = ner_serving.NerPredictor(model, devices, FLAGS.predict_batch_size)
  else:
    model_fn = run_classifier_mgpu.model_fn_of(model.files, model.bert_config)
    predictor = serving.Predictor(model, model_fn, devices, FLAGS.predict_batch_size)
  tf.logging.info("Loaded %s on %d tower(s): %s, precision %s", model.description,
                  devices.num_towers, ", ".join(devices.plan.tower_devices), devices.precision)
  return predictor


def is_ner(model_or_predictor):
  """Whether a serving.LoadedModel or a predictor is an NER model's."""
  if isinstance(model_or_predictor, serving.LoadedModel):
    return model_or_predictor.files.settings["model"] == serving.NER_KIND
  return getattr(model_or_predictor, "kind", None) == serving.NER_KIND


def format_entities(records):
  """predict_entities.jsonl lines of entity records."""
  return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)


def predict_entities_file(texts, predictor):
  """File mode of an NER model: predict_entities.jsonl lines of the texts."""
  start = time.time()
  features = predictor.featurize(texts)
  records = predictor.entities(features, predictor.predict(features.features))
  elapsed = time.time() - start
  write_output(format_entities(records))
  tf.logging.info("Found %d entities in %d text(s) (%d window(s)) in %.2f s (%.1f texts/s).",
                  sum(len(r["entities"]) for r in records), len(texts),
                  len(features.features.truncated), elapsed, len(texts) / max(elapsed, 1e-9))
  predictor.close()


def log_truncated(count, total, max_seq_length):
  if count:
    tf.logging.warning("%d of %d text(s) had more than max_seq_length=%d tokens and were "
                       "truncated to it.", count, total, max_seq_length)


def predict_file():
  """File mode: reads every text first (bad input stops before the model loads)."""
  texts_a, texts_b = read_input()
  predictor = load_predictor()
  if is_ner(predictor):
    predict_entities_file(texts_a, predictor)
    return
  start = time.time()
  try:
    features = predictor.featurize(texts_a, texts_b)
  except serving.NoTokensError as e:
    # A line is one text, so the row names the line.
    raise line_error(FLAGS.input_file or "<stdin>", e.row + 1,
                     "%s has no tokens (only spaces, control or invisible characters)" %
                     ("the line" if texts_b is None else "text_" + e.field),
                     "put a text there or remove the line")
  featurized = time.time()
  probabilities = predictor.predict(features)
  elapsed = time.time() - start
  write_output(format_predictions(probabilities, predictor))
  tf.logging.info("Predicted %d text(s) in %.2f s (%.1f texts/s; tokenizing %.2f s).",
                  len(texts_a), elapsed, len(texts_a) / max(elapsed, 1e-9),
                  featurized - start)
  log_truncated(int(features.truncated.sum()), len(texts_a), predictor.max_seq_length)
  predictor.close()


# ---------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------

class BadRequest(Exception):
  """A request the server answers with 400 and {"error": message}."""


class TooManyTexts(Exception):
  """A request the server answers with 413 and {"error": message}."""


def _text_list(request, key):
  texts = request.get(key)
  if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
    raise BadRequest('"%s" must be a list of strings' % key)
  for index, text in enumerate(texts):
    if not text.strip():
      raise BadRequest('%s[%d] is empty: send a text' % (key, index))
  return texts


def parse_request(body, max_texts):
  """The texts of a POST /predict body: (texts, texts_b or None).

  Raises:
    BadRequest: not the JSON we take.
    TooManyTexts: more than `max_texts` texts.
  """
  try:
    request = json.loads(body.decode("utf-8"))
  except (UnicodeDecodeError, ValueError) as e:
    raise BadRequest("the body is not JSON in UTF-8 (%s)" % e)
  except RecursionError:
    raise BadRequest("the JSON is nested too deeply")
  if not isinstance(request, dict) or "texts" not in request:
    raise BadRequest('send a JSON object with "texts": a list of strings (and "texts_b" for '
                     'pairs)')
  if isinstance(request["texts"], list) and len(request["texts"]) > max_texts:
    raise TooManyTexts("the request has %d texts; send at most %d per request "
                       "(--max_request_texts)" % (len(request["texts"]), max_texts))
  texts = _text_list(request, "texts")
  if "texts_b" not in request:
    return texts, None
  texts_b = _text_list(request, "texts_b")
  if len(texts_b) != len(texts):
    raise BadRequest('"texts_b" has %d texts but "texts" has %d: send one text_b per text' %
                     (len(texts_b), len(texts)))
  return texts, texts_b


class ServingState(object):
  """What the request threads share: the predictor and batcher once loaded, the requests
  being answered (which a drain waits for), and counters."""

  def __init__(self, chunk_size, max_request_texts):
    """Args: chunk_size: texts featurized and queued at a time; max_request_texts."""
    self.predictor = None
    self.batcher = None
    self.chunk_size = chunk_size
    self.max_request_texts = max_request_texts
    self.truncated = 0
    self.requests = 0  # POST /predict answered with probabilities
    self.draining = False
    self._active = 0  # requests past parsing whose reply is not written yet
    self._idle = threading.Condition()

  def ready(self, predictor, batcher):
    self.batcher = batcher
    self.predictor = predictor

  def health(self):
    if self.draining:
      return 503, {"status": "draining"}
    if self.predictor is None:
      return 503, {"status": "loading"}
    return 200, dict(self.batcher.stats, status="ready", requests=self.requests,
                     truncated=self.truncated)

  def begin(self):
    """Counts a request the drain must wait for; False when draining (refuse it)."""
    with self._idle:
      if self.draining:
        return False
      self._active += 1
      return True

  def end(self):
    with self._idle:
      self._active -= 1
      self._idle.notify_all()

  def drain(self, timeout):
    """Refuses new requests, then waits up to `timeout` s for those begun; returns how many
    are still unanswered."""
    deadline = time.time() + timeout
    with self._idle:
      self.draining = True
      while self._active and time.time() < deadline:
        self._idle.wait(min(0.2, max(0.0, deadline - time.time())))
      return self._active

  def predict(self, texts, texts_b):
    """The reply to a POST /predict of parsed texts.

    Texts are featurized and queued `chunk_size` at a time, so a large request holds the
    arrays of one chunk only and other requests' batches run between its chunks.

    Raises:
      BadRequest: a text has no tokens (a classifier), or "texts_b" sent to an NER model.
    """
    if is_ner(self.predictor):
      return self._predict_entities(texts, texts_b)
    probabilities, truncated = [], 0
    for start in range(0, len(texts), self.chunk_size):
      chunk_b = texts_b[start:start + self.chunk_size] if texts_b is not None else None
      try:
        features = self.predictor.featurize(texts[start:start + self.chunk_size], chunk_b)
      except serving.NoTokensError as e:
        raise BadRequest("%s[%d] has no tokens (only spaces, control or invisible "
                         "characters): send a text" %
                         ("texts" if e.field == "a" else "texts_b", start + e.row))
      truncated += int(features.truncated.sum())
      probabilities.extend(self.batcher.predict(features))
    with self._idle:  # counted once answered, as /healthz promises
      self.truncated += truncated
      self.requests += 1
    return {"labels": self.predictor.predicted_labels(probabilities),
            "probabilities": [[float(p) for p in row] for row in probabilities],
            "truncated": truncated}

  def _predict_entities(self, texts, texts_b):
    """The reply of an NER model: {"entities": [[entity, ...] per text]}, chunk by chunk."""
    if texts_b is not None:
      raise BadRequest('this is an NER model: send "texts" only (no "texts_b")')
    entities = []
    for start in range(0, len(texts), self.chunk_size):
      features = self.predictor.featurize(texts[start:start + self.chunk_size])
      tag_ids = self.batcher.predict(features.features)
      entities.extend(r["entities"] for r in self.predictor.entities(features, tag_ids))
    with self._idle:
      self.requests += 1
    return {"entities": entities}


# Seconds a client may take for each read of its request (and an idle keep-alive connection
# stays open); short, since a stalled client holds a thread.
READ_TIMEOUT_SECONDS = 10


class _Handler(http.server.BaseHTTPRequestHandler):
  """GET /healthz, GET /labels, POST /predict; JSON in and out, HTTP/1.1 with keep-alive."""

  state = None  # the ServingState, set on a subclass by make_server()
  timeout = READ_TIMEOUT_SECONDS
  protocol_version = "HTTP/1.1"  # also answers `Expect: 100-continue`

  def _reply(self, code, value, close=False):
    """Sends a JSON reply; `close` ends the connection after it (a body left unread)."""
    body = json.dumps(value, ensure_ascii=False).encode("utf-8")
    if close:
      self.close_connection = True
    try:
      self.send_response(code)
      self.send_header("Content-Type", "application/json; charset=utf-8")
      self.send_header("Content-Length", str(len(body)))
      if self.close_connection:
        self.send_header("Connection", "close")
      self.end_headers()
      self.wfile.write(body)
    except (BrokenPipeError, ConnectionResetError) as e:
      # The client went away (its own timeout, Ctrl-C): nothing failed here.
      self.close_connection = True
      tf.logging.debug("%s left before the %d reply (%s)", self.address_string(), code, e)

  def do_GET(self):  # pylint: disable=invalid-name
    if self.path == "/healthz":
      self._reply(*self.state.health())
    elif self.path == "/labels":
      if self.state.predictor is None:
        self._reply(503, {"error": "the model is still loading"})
      else:
        self._reply(200, {"labels": self.state.predictor.labels})
    else:
      self._reply(404, {"error": "no such path: use POST /predict, GET /labels or /healthz"})

  def _read_body(self):
    """The request body, or None after replying with an error (the connection then closes,
    since the body was not read)."""
    if self.path != "/predict":
      self._reply(404, {"error": "no such path: use POST /predict"}, close=True)
    elif self.state.draining:
      self._reply(503, {"error": "the server is shutting down"}, close=True)
    elif self.state.predictor is None:
      self._reply(503, {"error": "the model is still loading; retry when /healthz says 200"},
                  close=True)
    else:
      try:
        length = int(self.headers.get("Content-Length", ""))
      except ValueError:
        self._reply(411, {"error": "send a Content-Length header"}, close=True)
        return None
      if length < 0:
        self._reply(400, {"error": "Content-Length is %d: send the body's length in bytes" %
                                   length}, close=True)
      elif length > MAX_REQUEST_BYTES:
        self._reply(413, {"error": "the body has %d bytes; send at most %d per request" %
                                   (length, MAX_REQUEST_BYTES)}, close=True)
      else:
        body = self.rfile.read(length)
        if len(body) == length:
          return body
        self.close_connection = True  # the client closed early: nobody to answer
    return None

  def do_POST(self):  # pylint: disable=invalid-name
    body = self._read_body()
    if body is None:
      return
    try:
      texts, texts_b = parse_request(body, self.state.max_request_texts)
    except BadRequest as e:
      self._reply(400, {"error": str(e)})
      return
    except TooManyTexts as e:
      self._reply(413, {"error": str(e)})
      return
    if not self.state.begin():
      self._reply(503, {"error": "the server is shutting down"}, close=True)
      return
    try:
      try:
        reply = self.state.predict(texts, texts_b)
      except BadRequest as e:
        self._reply(400, {"error": str(e)})
        return
      except Exception as e:  # pylint: disable=broad-except
        tf.logging.error("POST /predict failed: %s", e)
        self._reply(500, {"error": "prediction failed: %s" % e})
        return
      self._reply(200, reply)
    finally:
      self.state.end()

  def log_message(self, format_string, *args):  # pylint: disable=arguments-differ
    tf.logging.debug("%s %s", self.address_string(), format_string % args)


class _Server(http.server.ThreadingHTTPServer):
  """One daemon thread per connection, tracked here and forgotten when it ends.

  Daemon threads, so a stalled client cannot hold the process at exit (the drain waits for
  the requests being answered through ServingState instead); our own bookkeeping, since
  Python 3.7's ThreadingMixIn keeps every non-daemon thread object forever (bpo-37193).
  """

  daemon_threads = True
  block_on_close = False

  def __init__(self, *args, **kwargs):
    self._connections = set()
    self._connections_lock = threading.Lock()
    http.server.ThreadingHTTPServer.__init__(self, *args, **kwargs)

  def process_request(self, request, client_address):
    thread = threading.Thread(target=self._serve_connection, args=(request, client_address))
    thread.daemon = True
    with self._connections_lock:
      self._connections.add(thread)
    thread.start()

  def _serve_connection(self, request, client_address):
    try:
      self.process_request_thread(request, client_address)
    finally:
      with self._connections_lock:
        self._connections.discard(threading.current_thread())

  def open_connections(self):
    """How many connections have a thread now."""
    with self._connections_lock:
      return len(self._connections)

  def handle_error(self, request, client_address):
    if isinstance(sys.exc_info()[1], ConnectionError):
      tf.logging.debug("%s: connection lost (%s)", client_address[0], sys.exc_info()[1])
    else:
      http.server.ThreadingHTTPServer.handle_error(self, request, client_address)


def make_server(host, port, state):
  """A bound, not yet serving, HTTP server. Raises UsageError when the port is taken."""
  handler = type("Handler", (_Handler,), {"state": state})
  try:
    return _Server((host, port), handler)
  except OSError as e:
    raise UsageError("--host=%s --serve=%d: cannot listen there (%s); choose another port "
                     "(0: any free one)." % (host, port, e.strerror or e))


def _stop_on_signals(stop):
  """The first SIGTERM or Ctrl-C sets `stop` (the main thread then drains); a second one
  exits at once."""
  def handle(signum, unused_frame):
    name = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"
    if stop.is_set():
      sys.stderr.write("Received a second %s: exiting without draining.\n" % name)
      sys.stderr.flush()
      os._exit(128 + signum)  # pylint: disable=protected-access
    tf.logging.info("Received %s: draining the requests in flight, then exiting (again to "
                    "exit at once).", name)
    stop.set()
  for signum in (signal.SIGTERM, signal.SIGINT):
    signal.signal(signum, handle)


def serve():
  """--serve: answers HTTP until SIGTERM or Ctrl-C, then drains and returns."""
  state = ServingState(FLAGS.max_batch, FLAGS.max_request_texts)
  stop = threading.Event()
  _stop_on_signals(stop)
  server = make_server(FLAGS.host, FLAGS.serve, state)
  host, port = server.server_address[:2]
  # Listening before the model loads, so /healthz can say 503 meanwhile.
  thread = threading.Thread(target=server.serve_forever, name="http")
  thread.daemon = True
  thread.start()
  sys.stderr.write("Serving on http://%s:%d (POST /predict, GET /labels, GET /healthz)\n" %
                   (host, port))
  sys.stderr.flush()
  predictor = batcher = None
  try:
    predictor = load_predictor()
    batcher = serving.MicroBatcher(predictor.predict, FLAGS.batch_window_ms / 1000.0,
                                   FLAGS.max_batch)
    state.ready(predictor, batcher)
    tf.logging.info("Ready: the model answers on http://%s:%d", host, port)
    while not stop.wait(0.2):
      pass
  finally:
    _shut_down(server, state, predictor, batcher)


def _shut_down(server, state, predictor, batcher):
  """Drains within --drain_seconds, then stops listening and closes the model."""
  deadline = time.time() + FLAGS.drain_seconds
  # Still accepting while draining, so new requests get a quick 503 rather than a hang.
  unanswered = state.drain(FLAGS.drain_seconds)
  server.shutdown()
  server.server_close()
  if unanswered:
    tf.logging.warning("Gave up after --drain_seconds=%d with %d request(s) unanswered.",
                       FLAGS.drain_seconds, unanswered)
  if batcher is not None:
    if not batcher.stop(max(0.0, deadline - time.time())):
      return  # the batcher thread still runs the model: the session ends with the process
    tf.logging.info("Stopped after %d request(s) (%d text(s)) in %d batch(es).",
                    state.requests, batcher.stats["texts"], batcher.stats["batches"])
    log_truncated(state.truncated, batcher.stats["texts"], predictor.max_seq_length)
  if predictor is not None:
    predictor.close()


def main(_):
  check_flags()
  if FLAGS.serve is not None:
    serve()
  else:
    predict_file()


if __name__ == "__main__":
  define_flags()
  command_line.run_main(main)
