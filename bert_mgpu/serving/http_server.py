# coding=utf-8
"""The HTTP endpoint of predict_text.py --serve (docs/SERVING.md): JSON in and out, requests
micro-batched, a drain on SIGTERM.

  POST /predict  the kind's request -> the kind's reply (serving/kinds.py; a classifier's
                 {"texts": [...], "texts_b": [...]} -> {"labels", "probabilities",
                 "truncated"})
  GET  /labels   the kind's metadata ({"labels": [...]})
  GET  /healthz  503 {"status": "loading"} until the model is ready, then 200 with counters,
                 503 {"status": "draining"} after SIGTERM
  POST /<route>  a kind's own routes (TextPredictor.routes()), e.g. a search
"""

import http.server
import json
import logging
import os
import sys
import threading
import time

from bert_mgpu.data import text_files
from bert_mgpu.errors import UsageError, signal_name
from bert_mgpu.serving import batching
from bert_mgpu.serving import kinds
from bert_mgpu.serving import model_inputs
from bert_mgpu import signals

# TensorFlow's logger (tf.get_logger() is this logger on TF 1.15 and 2.x); no TensorFlow
# import, for predict_text.py --backend=onnxruntime.
_LOGGER = logging.getLogger("tensorflow")

# Largest POST body accepted, in bytes.
MAX_REQUEST_BYTES = 16 << 20

# Paths the server answers itself, which a kind's route cannot take.
RESERVED_PATHS = ("/predict", "/labels", "/healthz")


# ---------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------

# The kinds' request errors: 400 and 413 with {"error": message}.
BadRequest = kinds.BadRequest
TooManyTexts = kinds.TooManyTexts


def parse_request(body, predictor, limits):
  """The inputs of a POST /predict body, as the predictor's kind reads them
  (TextPredictor.parse_request; by default (texts, texts_b or None)).

  Raises:
    BadRequest: not JSON, or not the JSON the kind takes.
    TooManyTexts: more than limits.max_texts texts (kinds.InputLimits), or more than the
      kind takes.
  """
  return predictor.parse_request(decode_json(body), limits)


def decode_json(body):
  """The decoded JSON of a POST body. Raises BadRequest: not JSON in UTF-8, or a string no
  UTF-8 reply could carry."""
  try:
    request = text_files.parse_json(body.decode("utf-8"))
  except text_files.DuplicateKeyError as e:
    raise BadRequest('the key "%s" is given twice in one object: keep one' % e.args[0])
  except (UnicodeDecodeError, ValueError) as e:
    raise BadRequest("the body is not JSON in UTF-8 (%s)" % e)
  except RecursionError:
    raise BadRequest("the JSON is nested too deeply")
  surrogate = _first_surrogate(request)
  if surrogate:
    raise BadRequest("a string holds an unpaired surrogate \\u%04x (a broken \\u escape; a "
                     "character outside the BMP is a pair, e.g. \\ud83d\\ude00)" %
                     ord(surrogate))
  return request


def _first_surrogate(value):
  """The first unpaired surrogate in the strings of a decoded JSON value, or None: no UTF-8
  reply could carry it back."""
  if isinstance(value, str):
    found = text_files.find_surrogate(value)
    return found[0] if found else None
  items = (list(value.keys()) + list(value.values()) if isinstance(value, dict) else
           value if isinstance(value, list) else [])
  for item in items:
    found = _first_surrogate(item)
    if found:
      return found
  return None


class ServingState(object):
  """What the request threads share: the predictor and batcher once loaded, the requests
  being answered (which a drain waits for), and counters."""

  def __init__(self, chunk_size, limits):
    """Args: chunk_size: texts featurized and queued at a time; limits: kinds.InputLimits
    of a request."""
    self.predictor = None
    self.batcher = None
    self.chunk_size = chunk_size
    self.limits = limits
    self.truncated = 0
    self.requests = 0  # POSTs (/predict and the kind's routes) answered by the model
    self.routes = {}  # the kind's own POST routes, checked (ready())
    self.draining = False
    self._active = 0  # requests past parsing whose reply is not written yet
    self._idle = threading.Condition()

  def ready(self, predictor, batcher):
    """Takes the loaded predictor and its batcher. Raises UsageError for a kind's route that
    could not be served (no leading /, or a path the server answers itself)."""
    routes = dict(predictor.routes())
    for path in routes:
      if not path.startswith("/") or path in RESERVED_PATHS:
        raise UsageError("%s declares the HTTP route %r: a kind's route starts with / and "
                         "is none of %s." % (type(predictor).__name__, path,
                                             ", ".join(RESERVED_PATHS)))
    self.routes = routes
    self.batcher = batcher
    self.predictor = predictor

  def post_paths(self):
    """The POST paths: /predict, then the kind's own (known once the model is loaded)."""
    return ["/predict"] + sorted(self.routes)

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

  def predict(self, inputs):
    """The reply to a POST /predict of parsed inputs (parse_request): the kind's
    (TextPredictor.reply).

    The inputs are featurized and queued `chunk_size` texts at a time, so a large request
    holds the arrays of one chunk only and other requests' batches run between its chunks.

    Raises:
      BadRequest: a text has no tokens.
    """
    predictor = self.predictor
    records, truncated = [], 0
    for start in range(0, predictor.request_size(inputs), self.chunk_size):
      featurized = predictor.featurize_request(inputs, start, self.chunk_size)
      truncated += int(featurized.features.truncated.sum())
      records.extend(predictor.decode(featurized,
                                      self.batcher.predict(featurized.features)))
    with self._idle:  # counted once answered, as /healthz promises
      self.truncated += truncated
      self.requests += 1
    return predictor.reply(records, truncated, inputs)

  def run_route(self, route, request):
    """The reply of a kind's own route (TextPredictor.routes()) to a decoded JSON request.

    Raises:
      BadRequest, TooManyTexts: as the route raises them.
    """
    reply = route(request, self.batcher.predict, self.limits)
    try:
      json.dumps(reply)
    except (TypeError, ValueError) as e:  # e.g. a NumPy value left in it
      raise ValueError("the route's reply is not JSON (%s)" % e)
    with self._idle:
      self.requests += 1
    return reply


# ---------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------

# Seconds a client may take for each read of its request (and an idle keep-alive connection
# stays open); short, since a stalled client holds a thread.
READ_TIMEOUT_SECONDS = 10


class _Handler(http.server.BaseHTTPRequestHandler):
  """GET /healthz, GET /labels, POST /predict and the kind's POST routes; JSON in and out,
  HTTP/1.1 with keep-alive."""

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
      _LOGGER.debug("%s left before the %d reply (%s)", self.address_string(), code, e)

  def do_GET(self):  # pylint: disable=invalid-name
    if self.path == "/healthz":
      self._reply(*self.state.health())
    elif self.path == "/labels":
      if self.state.predictor is None:
        self._reply(503, {"error": "the model is still loading"})
      else:
        self._reply(200, self.state.predictor.metadata())
    else:
      self._reply(404, {"error": "no such path: use POST /predict, GET /labels or /healthz"})

  def _read_body(self):
    """The request body, or None after replying with an error (the connection then closes,
    since the body was not read)."""
    # While the model loads, its kind's routes are not known yet: any path gets 503.
    if self.path not in self.state.post_paths() and self.state.predictor is not None:
      self._reply(404, {"error": "no such path: use POST %s" %
                                 " or ".join(self.state.post_paths())}, close=True)
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
    route = self.state.routes.get(self.path)  # None: /predict
    try:
      if route is None:
        inputs = parse_request(body, self.state.predictor, self.state.limits)
      else:
        inputs = decode_json(body)
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
        reply = (self.state.predict(inputs) if route is None else
                 self.state.run_route(route, inputs))
      except BadRequest as e:
        self._reply(400, {"error": str(e)})
        return
      except TooManyTexts as e:
        self._reply(413, {"error": str(e)})
        return
      except Exception as e:  # pylint: disable=broad-except
        _LOGGER.error("POST %s failed: %s", self.path, e)
        self._reply(500, {"error": "prediction failed: %s" % e})
        return
      self._reply(200, reply)
    finally:
      self.state.end()

  def log_message(self, format_string, *args):  # pylint: disable=arguments-differ
    _LOGGER.debug("%s %s", self.address_string(), format_string % args)


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
      _LOGGER.debug("%s: connection lost (%s)", client_address[0], sys.exc_info()[1])
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


# ---------------------------------------------------------------------------
# Signals: the first drains, a second exits at once
# ---------------------------------------------------------------------------

class _DrainOnSignals(signals.SignalCatcher):
  """The first SIGTERM or Ctrl-C sets `stop` (the main thread then drains); a second one
  exits at once."""

  def __init__(self, stop):
    super(_DrainOnSignals, self).__init__()
    self._stop = stop

  def on_first_signal(self, signum):
    _LOGGER.info("Received %s: draining the requests in flight, then exiting (again to "
                 "exit at once).", signal_name(signum))
    self._stop.set()

  def on_later_signal(self, signum):
    sys.stderr.write("Received a second %s: exiting without draining.\n" % signal_name(signum))
    sys.stderr.flush()
    os._exit(128 + signum)  # pylint: disable=protected-access


# ---------------------------------------------------------------------------
# Serving until SIGTERM, then draining
# ---------------------------------------------------------------------------

def serve(host, port, load_predictor, batch_window_seconds, max_batch, limits,
          drain_seconds):
  """--serve: answers HTTP until SIGTERM or Ctrl-C, then drains and returns.

  Args:
    host, port: where to listen (port 0: any free one; the log names it).
    load_predictor: returns the loaded kinds.TextPredictor;
      called once listening, so that /healthz says 503 meanwhile. Raises UsageError.
    batch_window_seconds, max_batch: the batching.MicroBatcher's (a larger request runs in
      chunks of max_batch texts).
    limits: kinds.InputLimits of a request (more texts, or a kind's larger input: 413).
    drain_seconds: after SIGTERM, the most to wait for the requests being answered.

  Raises:
    UsageError: the port is taken, or the model does not load.
  """
  state = ServingState(max_batch, limits)
  stop = threading.Event()
  # Around the shutdown too: a second signal while draining still exits at once.
  with _DrainOnSignals(stop):
    server = make_server(host, port, state)
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
      batcher = batching.MicroBatcher(predictor.predict, batch_window_seconds, max_batch)
      state.ready(predictor, batcher)
      _LOGGER.info("Ready: the model answers on http://%s:%d (POST %s)", host, port,
                   ", ".join(state.post_paths()))
      while not stop.wait(0.2):
        pass
    finally:
      _shut_down(server, state, predictor, batcher, drain_seconds)


def _shut_down(server, state, predictor, batcher, drain_seconds):
  """Drains within --drain_seconds, then stops listening and closes the model."""
  deadline = time.time() + drain_seconds
  # Still accepting while draining, so new requests get a quick 503 rather than a hang.
  unanswered = state.drain(drain_seconds)
  server.shutdown()
  server.server_close()
  if unanswered:
    _LOGGER.warning("Gave up after --drain_seconds=%d with %d request(s) unanswered.",
                    drain_seconds, unanswered)
  if batcher is not None:
    if not batcher.stop(max(0.0, deadline - time.time())):
      return  # the batcher thread still runs the model: the session ends with the process
    _LOGGER.info("Stopped after %d request(s) (%d text(s)) in %d batch(es).",
                 state.requests, batcher.stats["texts"], batcher.stats["batches"])
    model_inputs.log_truncated(state.truncated, batcher.stats["texts"],
                               predictor.max_seq_length)
  if predictor is not None:
    predictor.close()
