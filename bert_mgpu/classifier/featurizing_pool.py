# coding=utf-8
"""Featurizing a split into a TFRecord file: write_features, the FeaturizingPool of worker
processes and the progress lines.

The workers are forked (multiprocessing.Pool) and run _featurize_chunk of this module, each
with its own tokenizer built once; ClassifierTask (task.py) makes the pool before the device
check, since forking after TensorFlow has started its GPU runtime is not safe.
"""

import multiprocessing
import os

import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import class_labels
from bert_mgpu.classifier import featurizing
from bert_mgpu.classifier import input_examples
from bert_mgpu.classifier import records
from bert_mgpu.data import processes
from bert_mgpu.data import tfrecord_io
from bert_mgpu import progress
import tokenization

# Child of TensorFlow's logger: the messages appear next to tf.logging's and
# follow tf.logging.set_verbosity(). The classifier's data modules share it, under the
# name their log lines have always shown.
_LOGGER = tf.get_logger().getChild("classifier_data")

# Below this many examples, featurizing runs in this process: starting worker
# processes costs more than they save.
POOL_THRESHOLD = 2000

# Seconds between progress lines while featurizing.
PROGRESS_INTERVAL_SECONDS = 5.0


# State of a featurizing process: the tokenizer is built once per process.
_FEATURIZER = {}


def _init_featurizer(vocab_file, do_lower_case, label_map, max_seq_length, options):
  """Builds this process's tokenizer (the pool initializer; also used serially).

  It never raises: a pool whose initializer fails restarts the worker forever,
  so the error is kept and raised by the first _featurize_chunk call instead.
  """
  _FEATURIZER.clear()
  _FEATURIZER.update(label_map=label_map, max_seq_length=max_seq_length, options=options,
                     error=None)
  try:
    _FEATURIZER["tokenizer"] = tokenization.FullTokenizer(
        vocab_file=vocab_file, do_lower_case=do_lower_case,
        literal_special_tokens=options.literal_special_tokens)
  except Exception as e:  # pylint: disable=broad-except
    _FEATURIZER["error"] = e


def _featurize_chunk(examples):
  """Featurizes a list of examples.

  Returns:
    (list of serialized tf.train.Examples in input order, number of examples
    whose texts were truncated).
  """
  if _FEATURIZER["error"] is not None:
    raise _FEATURIZER["error"]
  tokenizer = _FEATURIZER["tokenizer"]
  label_map = _FEATURIZER["label_map"]
  max_seq_length = _FEATURIZER["max_seq_length"]
  serialized = []
  num_truncated = 0
  options = _FEATURIZER["options"]
  for example in examples:
    if options.long_text == "windows":
      record, truncated = records.windowed_record(example, label_map, max_seq_length,
                                                  tokenizer, options)
    else:
      features, truncated = featurizing.convert_example_counting_truncation(
          example, label_map, max_seq_length, tokenizer, options)
      record = records.serialize_features(features)
    serialized.append(record)
    num_truncated += int(truncated)
  return serialized, num_truncated


class _Progress(object):
  """Logs "n/total, rate, ETA" at most every PROGRESS_INTERVAL_SECONDS."""

  def __init__(self, total, what):
    self._what = what
    self._timing = progress.Progress(total, PROGRESS_INTERVAL_SECONDS)

  def update(self, done):
    if not self._timing.due():
      return
    total = self._timing.total
    _LOGGER.info("%s: %d/%d examples (%.0f%%), %.0f examples/s, ETA %s", self._what, done,
                 total, 100.0 * done / total, self._timing.rate(done),
                 progress.format_duration(self._timing.eta_seconds(done) or 0))

  def elapsed(self):
    return self._timing.elapsed()


def _chunks(items, size):
  for start in range(0, len(items), size):
    yield items[start:start + size]


class FeaturizingPool(object):
  """The processes that featurize a run's splits, forked once.

  The classifier makes it before the device check (task.featurizing_processes): forking after
  TensorFlow has started its GPU runtime (and its threads) is not safe. Each worker builds
  its tokenizer once; examples travel in chunks and come back in input order. With one
  worker, or when no split to featurize (cached ones are not) is large enough to gain from
  processes, no process is forked and featurizing runs here; both give byte-identical
  files.

  A context manager: leaving it ends the workers.
  """

  def __init__(self, vocab_file, do_lower_case, label_list, max_seq_length, num_workers=None,
               largest_split=None, pool_threshold=POOL_THRESHOLD,
               options=input_examples.FeatureOptions()):
    """Args:
      vocab_file, do_lower_case, label_list, max_seq_length, options: as in write_features.
      num_workers: worker processes; None: one per available CPU.
      largest_split: the most examples of a split that will be featurized
        (largest_split_to_featurize; None: unknown, fork anyway).
      pool_threshold: smallest number of examples that uses the processes.
    """
    label_map = dict((label, index) for index, label in enumerate(label_list))
    self.init_args = (vocab_file, do_lower_case, label_map, max_seq_length, options)
    self.num_workers = num_workers or processes.available_cpus()
    self.pool_threshold = max(pool_threshold, 1)
    self._pool = None
    if self.num_workers > 1 and (largest_split is None or largest_split >= self.pool_threshold):
      self._pool = multiprocessing.Pool(self.num_workers, initializer=_init_featurizer,
                                        initargs=self.init_args)

  def __enter__(self):
    return self

  def __exit__(self, *unused_exc):
    self.close()

  def close(self):
    if self._pool is not None:
      self._pool.terminate()
      self._pool.join()
      self._pool = None

  def uses_processes(self, num_examples):
    return self._pool is not None and num_examples >= self.pool_threshold

  def featurize(self, examples):
    """Yields (serialized records, number truncated) per chunk of `examples`, in order."""
    if self.uses_processes(len(examples)):
      # Chunks: big enough to amortize pickling, small enough to balance the workers.
      chunk_size = max(1, min(512, len(examples) // (8 * self.num_workers)))
      return self._pool.imap(_featurize_chunk, _chunks(examples, chunk_size))
    _init_featurizer(*self.init_args)
    return (_featurize_chunk(chunk) for chunk in _chunks(examples, 512))


def write_features(examples, label_list, max_seq_length, vocab_file, do_lower_case,
                   output_file, num_workers=None, pool_threshold=POOL_THRESHOLD, pool=None,
                   options=input_examples.FeatureOptions()):
  """Featurizes examples into a TFRecord file, written through a temp file and a rename.

  Args:
    examples: list of InputExample.
    label_list: the labels in label-id order.
    max_seq_length: sequence length of the records.
    vocab_file: the WordPiece vocab.
    do_lower_case: whether the tokenizer lower-cases.
    output_file: the TFRecord file to write.
    num_workers, pool_threshold: for a FeaturizingPool made for this call alone.
    pool: a FeaturizingPool made with the same vocab, labels, max_seq_length and options;
      None makes one for this call.
    options: FeatureOptions.

  Returns:
    The number of records written.

  Raises:
    UsageError: unknown label, unusable vocab, too small max_seq_length, or a refused write.
  """
  featurizing.check_featurizing_inputs(max_seq_length, vocab_file)
  class_labels.check_labels(examples, label_list)
  if pool is not None:
    return _write_features_with(pool, examples, max_seq_length, output_file)
  with FeaturizingPool(vocab_file, do_lower_case, label_list, max_seq_length, num_workers,
                       len(examples), pool_threshold, options) as own_pool:
    return _write_features_with(own_pool, examples, max_seq_length, output_file)


def _write_features_with(pool, examples, max_seq_length, output_file):
  """write_features() through a FeaturizingPool."""
  what = "featurizing %s" % os.path.basename(output_file)
  if pool.uses_processes(len(examples)):
    _LOGGER.info("%s: %d examples with %d processes", what, len(examples), pool.num_workers)
  reporter = _Progress(len(examples), what)
  num_truncated = [0]

  def serialized_records(record_chunks):
    num_done = 0
    for chunk_records, chunk_truncated in record_chunks:
      for record in chunk_records:
        yield record
      num_done += len(chunk_records)
      num_truncated[0] += chunk_truncated
      reporter.update(num_done)

  try:
    num_written = tfrecord_io.write_records_atomically(
        output_file, serialized_records(pool.featurize(examples)))
  finally:
    _FEATURIZER.clear()
  num_truncated = num_truncated[0]
  options = pool.init_args[-1]
  if options.long_text == "windows":
    cut = ("did not fit in max_windows=%d windows of max_seq_length=%d (or had a text_b "
           "longer than half a window) and lost text" % (options.max_windows, max_seq_length))
    log = _LOGGER.warning if num_truncated else _LOGGER.info
  else:
    cut = "were longer than max_seq_length=%d and %s" % (
        max_seq_length, "lost their middle" if options.long_text == "head_tail" else
        "truncated")
    log = _LOGGER.info
  log("%s: wrote %d records to %s in %.1fs; %d examples (%.1f%%) %s", what, num_written,
      output_file, reporter.elapsed(), num_truncated,
      100.0 * num_truncated / max(num_written, 1), cut)
  return num_written
