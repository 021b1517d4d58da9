# coding=utf-8
"""Micro-batching: concurrent requests run through the predictor as one batch."""

import logging
import queue
import threading
import time

from bert_mgpu.serving import model_inputs

# TensorFlow's logger (tf.get_logger() is this logger on TF 1.15 and 2.x); no TensorFlow
# import, for predict_text.py --backend=onnxruntime.
_LOGGER = logging.getLogger("tensorflow")


class _Request(object):
  def __init__(self, features):
    self.features = features
    self.size = len(features.truncated)
    self.done = threading.Event()
    self.outputs = None
    self.error = None


_STOP = object()


class MicroBatcher(object):
  """A queue and one thread: requests that arrive within `window_seconds` of the first one
  waiting run through the predictor as one batch of at most `max_batch` texts.

  A request that would take a batch past `max_batch` starts the next one; a request larger
  than `max_batch` runs alone (callers that mind its latency send chunks instead).

  Attributes:
    stats: dict batches / requests / texts run so far, and in_flight (submitted, unanswered).
  """

  def __init__(self, predict_fn, window_seconds, max_batch):
    """Args: predict_fn: Features -> the model's outputs, dict name -> [n, ...] (a
    TextPredictor's predict); window_seconds; max_batch."""
    self._predict = predict_fn
    self._window = window_seconds
    self._max_batch = max_batch
    self._queue = queue.Queue()
    self._lock = threading.Lock()
    self.stats = {"batches": 0, "requests": 0, "texts": 0, "in_flight": 0}
    self._thread = threading.Thread(target=self._run, name="micro-batcher")
    self._thread.daemon = True
    self._thread.start()

  def _count(self, **deltas):
    with self._lock:
      for key, delta in deltas.items():
        self.stats[key] += delta

  def predict(self, features):
    """Queues the rows and waits for their outputs (called by request threads).

    Raises:
      Whatever the predictor raised for the batch.
    """
    request = _Request(features)
    self._count(in_flight=1)
    self._queue.put(request)
    request.done.wait()
    self._count(in_flight=-1)
    if request.error is not None:
      raise request.error
    return request.outputs

  def _collect(self, first):
    """The requests to run with `first`.

    Returns:
      (batch, the request that did not fit and starts the next batch or None, whether a
      stop came while waiting).
    """
    batch, size = [first], first.size
    deadline = time.time() + self._window
    while size < self._max_batch:
      timeout = deadline - time.time()
      if timeout <= 0:
        break
      try:
        item = self._queue.get(timeout=timeout)
      except queue.Empty:
        break
      if item is _STOP:
        return batch, None, True
      if size + item.size > self._max_batch:
        return batch, item, False
      batch.append(item)
      size += item.size
    return batch, None, False

  def _run_batch(self, batch):
    try:
      outputs = self._predict(
          model_inputs.concatenate_features([r.features for r in batch]))
    except Exception as e:  # pylint: disable=broad-except
      for request in batch:
        request.error = e
        request.done.set()
      return
    texts = sum(request.size for request in batch)
    # Counted and logged before any reply is released, so that a client that has its answer
    # finds the batch in the counters and the log.
    self._count(batches=1, requests=len(batch), texts=texts)
    _LOGGER.info("micro-batch %d: %d request(s), %d text(s)", self.stats["batches"],
                 len(batch), texts)
    start = 0
    for request in batch:
      request.outputs = {name: output[start:start + request.size]
                         for name, output in outputs.items()}
      start += request.size
      request.done.set()

  def _run(self):
    carried, stopping = None, False
    while carried is not None or not stopping:
      first, carried = carried, None
      if first is None:
        first = self._queue.get()
        if first is _STOP:
          break
      batch, carried, stop_seen = self._collect(first)
      stopping = stopping or stop_seen
      self._run_batch(batch)

  def stop(self, timeout=None):
    """Runs what is queued, then ends the thread.

    Args:
      timeout: seconds to wait for that, or None (no limit).

    Returns:
      Whether the thread ended.
    """
    self._queue.put(_STOP)
    self._thread.join(timeout)
    return not self._thread.is_alive()
