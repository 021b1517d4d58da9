# coding=utf-8
"""The parallel run of create_pretraining_data.py: the documents in chunks, each chunk
tokenized and cut into instances by a pool of worker processes, and the progress log.

Each worker takes a contiguous shard of the chunk with its own random stream; with one
worker the instances come from the run's one stream, in Google's order. The workers are
forked afresh for each step of a chunk, inherit the chunk (not pickled where fork exists)
and leave stopping to the main process (`signals.leave_stopping_to_parent`).
"""

import itertools
import os
import random
import time

import tensorflow.compat.v1 as tf

from bert_mgpu.data import processes
from bert_mgpu.pretraining import record_writing
from bert_mgpu.pretraining import text_input
from bert_mgpu.pretraining import training_instances
from bert_mgpu import progress
from bert_mgpu import signals

DEFAULT_PROGRESS_INTERVAL_SECONDS = 30.0
# How often the main process looks at the workers' progress counters.
_POLL_SECONDS = 0.5


def iter_chunks(items, chunk_size):
  """Yields lists of `chunk_size` consecutive items (the last may be shorter).

  Args:
    items: iterable, consumed only as far as the chunk being yielded.
    chunk_size: int; 0 means all items in one chunk.
  """
  iterator = iter(items)
  while True:
    chunk = list(itertools.islice(iterator, chunk_size or None))
    if not chunk:
      return
    yield chunk


def format_bytes(num_bytes):
  """A byte count for people: "812.4 KB", "3.2 MB", "1.25 GB"."""
  if num_bytes >= 1e9:
    return "%.2f GB" % (num_bytes / 1e9)
  if num_bytes >= 1e6:
    return "%.1f MB" % (num_bytes / 1e6)
  return "%.1f KB" % (num_bytes / 1e3)


class ProgressLog(object):
  """Logs how far the run is, at most once per interval.

  The ETA extrapolates the time so far over the input bytes not yet done. A
  chunk's bytes count as done in proportion to its documents' passes that have
  given their instances (tokenizing and writing are counted in the time, not
  in the share), so the ETA settles once the first chunk is under way.

  Attributes (set by the caller as the run goes):
    bytes_read: int, input bytes read.
    documents_read: int, documents read.
    bytes_done: float, input bytes whose instances are made.
    instances_written: int.
  """

  def __init__(self, total_bytes, interval_seconds=DEFAULT_PROGRESS_INTERVAL_SECONDS,
               clock=time.time, log_function=None):
    """Creates the log.

    Args:
      total_bytes: int, the size of all input files.
      interval_seconds: float, the least time between two progress lines.
      clock: function returning seconds.
      log_function: function(format, *args); tf.logging.info by default.
    """
    self.total_bytes = total_bytes
    self._clock = clock
    self._log_function = log_function or tf.logging.info
    self._timing = progress.Progress(total_bytes, interval_seconds, clock)
    self.bytes_read = 0
    self.documents_read = 0
    self.bytes_done = 0.0
    self.instances_written = 0

  def eta_seconds(self, now):
    """Seconds left at time `now`, or None before anything is done."""
    return self._timing.eta_seconds(self.bytes_done, now)

  def message(self, now):
    """The progress line for time `now`."""
    eta = self.eta_seconds(now)
    share = 100.0 * self.bytes_done / self.total_bytes if self.total_bytes else 100.0
    return ("Progress: %.1f%% done; read %s of %s, %d documents; %d instances written "
            "(%.1f/s); elapsed %s, ETA %s" % (
                share, format_bytes(self.bytes_read), format_bytes(self.total_bytes),
                self.documents_read, self.instances_written,
                self.instances_written / max(self._timing.elapsed(now), 1e-9),
                progress.format_duration(self._timing.elapsed(now)),
                "unknown" if eta is None else progress.format_duration(eta)))

  def maybe_log(self):
    """Logs the progress line if the interval has passed since the last one."""
    now = self._clock()
    if self._timing.due(now):
      self._log_function("%s", self.message(now))


# The state of a worker process, set by `_init_worker`.
_WORKER_STATE = {}


def _init_worker(state, parent_pid):
  """Pool initializer: keeps `state` (documents, tokenizer, settings, counters).

  Only the main process decides when to stop: a worker ignores Ctrl-C and ends at
  once on SIGTERM (`signals.leave_stopping_to_parent`), sent by pool.terminate() and,
  through PR_SET_PDEATHSIG, by Linux when the parent dies (`processes.die_with_parent`).

  Where fork exists the state is inherited, not pickled; jieba, loaded by the
  parent, comes along. Elsewhere the segmenter is loaded here.
  """
  signals.leave_stopping_to_parent()
  processes.die_with_parent(parent_pid)
  _WORKER_STATE.clear()
  _WORKER_STATE.update(state)
  _WORKER_STATE["segment"] = text_input.load_chinese_segmenter(state["settings"].chinese_segmenter)


def _run_in_pool(context, num_workers, state, function, tasks, on_wait):
  """Runs `function` over `tasks` in `num_workers` fresh processes.

  Args:
    context: a multiprocessing context.
    num_workers: int.
    state: dict for `_init_worker`.
    function: a module-level function of one task.
    tasks: list.
    on_wait: function called about every _POLL_SECONDS while waiting.

  Returns:
    list of the results, in task order.
  """
  pool = context.Pool(num_workers, initializer=_init_worker,
                      initargs=(state, os.getpid()))
  try:
    result = pool.map_async(function, tasks, chunksize=1)
    while not result.ready():
      result.wait(_POLL_SECONDS)
      on_wait()
    return result.get()
  finally:
    pool.terminate()
    pool.join()


def _split_range(length, num_parts):
  """Cuts range(length) into `num_parts` contiguous (start, end) pairs of near equal size."""
  bounds = [length * i // num_parts for i in range(num_parts + 1)]
  return [(bounds[i], bounds[i + 1]) for i in range(num_parts)]


def _tokenize_shard(shard):
  """Worker: tokenizes raw documents [start, end) of the chunk.

  Args:
    shard: (shard_index, start, end).

  Returns:
    list of token-list documents (empty ones included, to be counted).
  """
  shard_index, start, end = shard
  tokenizer = _WORKER_STATE["tokenizer"]
  settings = _WORKER_STATE["settings"]
  counter = _WORKER_STATE["counter"]
  documents = []
  for item in _WORKER_STATE["documents"][start:end]:
    documents.append(text_input.tokenize_item(tokenizer, item, settings,
                                              _WORKER_STATE["segment"]))
    counter[shard_index] += 1
  return documents


def tokenize_chunk(raw_documents, tokenizer, settings, segment, num_workers, context,
                   progress):
  """Tokenizes a chunk of documents, in `num_workers` processes if more than one.

  Args:
    raw_documents: list of documents as lists of lines (see `text_input.read_raw_documents`).
    tokenizer: tokenization.FullTokenizer.
    settings: data_settings.InstanceSettings.
    segment: the Chinese segmenter function or None.
    num_workers: int >= 1.
    context: multiprocessing context (unused for one worker).
    progress: ProgressLog.

  Returns:
    list of tokenized documents (lists of token lists), in input order; a
    document without tokens gives an empty list.
  """
  num_workers = min(num_workers, len(raw_documents))
  if num_workers <= 1:
    documents = []
    for item in raw_documents:
      documents.append(text_input.tokenize_item(tokenizer, item, settings, segment))
      progress.maybe_log()
    return documents
  counter = context.RawArray("q", num_workers)
  state = {"documents": raw_documents, "tokenizer": tokenizer, "settings": settings,
           "counter": counter}
  shards = [(index, start, end)
            for index, (start, end) in enumerate(_split_range(len(raw_documents), num_workers))]
  results = _run_in_pool(context, num_workers, state, _tokenize_shard, shards,
                         progress.maybe_log)
  return [document for shard_documents in results for document in shard_documents]


def _create_shard_records(documents, start, end, rng, settings, tokenizer, vocab_words,
                          on_document_done, num_to_log):
  """The serialized instances of documents [start, end) over all passes, in order made.

  Args:
    documents: list of tokenized documents (the chunk); random next sentences
      may come from any of them.
    start, end: int, the documents to cut into instances.
    rng: random.Random.
    settings: data_settings.InstanceSettings.
    tokenizer: tokenization.FullTokenizer.
    vocab_words: list of str, the vocab in id order.
    on_document_done: function called after each document of each pass.
    num_to_log: int, how many of the first instances to return as text.

  Returns:
    (list of bytes, number of the documents that gave no instance, list of the
    first `num_to_log` instances as text).
  """
  records = []
  instances_per_document = [0] * (end - start)
  logged = []
  for _ in range(settings.dupe_factor):
    for document_index in range(start, end):
      instances = training_instances.create_instances(documents, document_index, settings,
                                                      vocab_words, rng)
      instances_per_document[document_index - start] += len(instances)
      for instance in instances:
        if len(logged) < num_to_log:
          logged.append(str(instance))
        records.append(record_writing.serialize_instance(
            instance, tokenizer, settings.max_seq_length, settings.max_predictions_per_seq))
      on_document_done()
  return records, instances_per_document.count(0), logged


def _shard_rng(random_seed, chunk_index, shard_index):
  # A string seed is hashed with SHA-512: the same stream on every Python version.
  return random.Random("%d/%d/%d" % (random_seed, chunk_index, shard_index))


def _create_records_of_shard(shard):
  """Worker: `_create_shard_records` for (shard_index, start, end) of the chunk."""
  shard_index, start, end = shard
  settings = _WORKER_STATE["settings"]
  tokenizer = _WORKER_STATE["tokenizer"]
  counter = _WORKER_STATE["counter"]

  def count_document():
    counter[shard_index] += 1

  return _create_shard_records(
      _WORKER_STATE["documents"], start, end,
      _shard_rng(settings.random_seed, _WORKER_STATE["chunk_index"], shard_index), settings,
      tokenizer, list(tokenizer.vocab.keys()), count_document, _WORKER_STATE["num_to_log"])


def create_chunk_records(documents, chunk_index, tokenizer, settings, num_workers, rng,
                         context, progress, num_to_log):
  """Creates the shuffled, serialized instances of one chunk of documents.

  The documents are shuffled with `rng`. With one worker every instance is
  drawn from `rng`, in Google's order. With more, the documents are cut into
  contiguous shards, one per worker, each with its own stream seeded by
  (random_seed, chunk_index, shard). Random next sentences come from the
  whole chunk. The records are then shuffled with `rng`.

  Args:
    documents: list of tokenized, non-empty documents; shuffled in place.
    chunk_index: int, the chunk's number, counted from 0.
    tokenizer: tokenization.FullTokenizer.
    settings: data_settings.InstanceSettings.
    num_workers: int >= 1; 1 means Google's single random stream.
    rng: random.Random, the run's main stream.
    context: multiprocessing context.
    progress: ProgressLog; bytes_done is moved through the chunk's bytes.
    num_to_log: int, how many of the first instances to return as text.

  Returns:
    (list of bytes, number of documents that gave no instance, list of str: the
    first `num_to_log` instances).
  """
  rng.shuffle(documents)
  total_passes = float(len(documents) * settings.dupe_factor)
  chunk_start_bytes = progress.bytes_done
  chunk_bytes = progress.bytes_read - chunk_start_bytes

  def report(passes_done):
    progress.bytes_done = chunk_start_bytes + chunk_bytes * passes_done / total_passes
    progress.maybe_log()

  passes_done = [0]

  def count_document():
    passes_done[0] += 1
    report(passes_done[0])

  vocab_words = list(tokenizer.vocab.keys())
  num_shards = min(num_workers, len(documents))
  if num_workers == 1:
    records, without_instances, logged = _create_shard_records(
        documents, 0, len(documents), rng, settings, tokenizer, vocab_words, count_document,
        num_to_log)
  elif num_shards == 1:
    records, without_instances, logged = _create_shard_records(
        documents, 0, len(documents), _shard_rng(settings.random_seed, chunk_index, 0),
        settings, tokenizer, vocab_words, count_document, num_to_log)
  else:
    shards = [(index, start, end)
              for index, (start, end) in enumerate(_split_range(len(documents), num_shards))]
    counter = context.RawArray("q", num_shards)
    state = {"documents": documents, "tokenizer": tokenizer, "settings": settings,
             "counter": counter, "chunk_index": chunk_index, "num_to_log": num_to_log}
    results = _run_in_pool(context, num_shards, state, _create_records_of_shard, shards,
                           lambda: report(sum(counter)))
    records = []
    without_instances = 0
    logged = []
    for shard_records, shard_without_instances, shard_logged in results:
      records.extend(shard_records)
      without_instances += shard_without_instances
      logged.extend(shard_logged)
    del results
    logged = logged[:num_to_log]
  report(total_passes)
  rng.shuffle(records)
  return records, without_instances, logged
