# coding=utf-8
"""TFRecord files: input globs, batches of the global batch size, and atomic writing."""

import os

import tensorflow.compat.v1 as tf

import output_files
from errors import UsageError, write_error

def _decode_record(record, feature_spec):
  """Parses one tf.train.Example; int64 becomes int32, which every device handles."""
  example = tf.parse_single_example(record, feature_spec)
  return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t
          for name, t in example.items()}


def expand_input_files(input_file_flag, directory_suffix=None):
  """The files an --input_file flag names: comma-separated globs (and directories).

  Args:
    input_file_flag: e.g. "a.txt,data/*.txt".
    directory_suffix: if given, a pattern that is a directory means its files ending in it
      (e.g. ".tfrecord").

  Returns:
    File paths, pattern by pattern in the order given, each pattern's matches sorted.

  Raises:
    UsageError: the flag is empty, or a pattern matches no file.
  """
  patterns = [p.strip() for p in (input_file_flag or "").split(",") if p.strip()]
  if not patterns:
    raise UsageError("--input_file is empty: give one or more files as comma-separated globs.")
  files = []
  for pattern in patterns:
    if directory_suffix and tf.gfile.IsDirectory(pattern):
      pattern = os.path.join(pattern, "*" + directory_suffix)
    try:
      matches = sorted(p for p in tf.gfile.Glob(pattern) if not tf.gfile.IsDirectory(p))
    except tf.errors.NotFoundError:  # TF 1.15, for a directory that does not exist
      matches = []
    except tf.errors.OpError as e:  # e.g. a path through a regular file, or no permission
      raise UsageError("--input_file: cannot list %s (%s). Check the path." %
                       (pattern, e.message.split("\n")[0]))
    if not matches:
      raise UsageError("--input_file: %s matches no file. Check the path." % pattern)
    files.extend(matches)
  return files


# The features with one value per token position: trimming cuts them all to one length.
SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids")


def trim_to_longest(features, length_multiple=1):
  """Cuts a batch's token-position features to its longest example.

  BERT's attention mask gives padding positions a zero weight, so the real tokens'
  outputs do not change (up to float rounding); only the compute spent on padding goes.

  Args:
    features: dict name -> Tensor; input_ids, input_mask and segment_ids are
      [batch, max_seq_length] with input_mask 1 on real tokens.
    length_multiple: round the length up to a multiple of this (XLA compiles one program
      per shape: a few lengths instead of one per length).

  Returns:
    The dict with the SEQUENCE_FEATURES cut to [batch, length], length <= max_seq_length.
  """
  mask = features["input_mask"]
  max_length = tf.shape(mask)[1]
  longest = tf.reduce_max(tf.reduce_sum(tf.cast(mask, tf.int32), axis=1))
  length = (tf.maximum(longest, 1) + length_multiple - 1) // length_multiple * length_multiple
  length = tf.minimum(length, max_length)
  trimmed = dict(features)
  for name in SEQUENCE_FEATURES:
    if name in features:
      trimmed[name] = features[name][:, :length]
  return trimmed


def make_dataset(input_files, feature_spec, global_batch_size, is_training, seed=None,
                 shuffle_buffer=10000, skip_batches=0, length_multiple=1):
  """Reads TFRecord files into batches of the *global* batch size.

  The global batch is formed before it is split across towers, so a seed gives the same
  sequence of global batches whatever the tower count. Each batch is then cut to its
  longest example (trim_to_longest), which does not change which examples form it.

  Args:
    input_files: list of TFRecord paths.
    feature_spec: dict name -> tf.FixedLenFeature.
    global_batch_size: examples per step over all towers.
    is_training: True: repeat forever, reshuffle every epoch with `seed`, drop the last partial
      batch. False: one pass in file order; the last batch may be partial.
    seed: shuffle seed.
    shuffle_buffer: examples in the shuffle buffer.
    skip_batches: batches to skip, an int or an int64 scalar tensor (a resumed run skips what
      it already trained on, so it sees the same data as a run that never stopped).
    length_multiple: trim each batch to its longest example rounded up to a multiple of
      this; None keeps every batch padded to the full length of the records.

  Returns:
    A tf.data.Dataset of dicts name -> tensor [batch, ...].
  """
  dataset = tf.data.TFRecordDataset(input_files)
  if is_training:
    dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.repeat()
    if isinstance(skip_batches, tf.Tensor) or skip_batches:
      dataset = dataset.skip(tf.cast(skip_batches, tf.int64) * global_batch_size)
  # Parallel parsing keeps the order (deterministic), so batches do not depend on it.
  dataset = dataset.map(lambda record: _decode_record(record, feature_spec),
                        num_parallel_calls=4)
  dataset = dataset.batch(global_batch_size, drop_remainder=is_training)
  if length_multiple:
    dataset = dataset.map(lambda batch: trim_to_longest(batch, length_multiple))
  return dataset.prefetch(2)


def int64_feature(values):
  """A tf.train.Feature of int64 values."""
  return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def write_records_atomically(path, records):
  """Writes serialized records to a TFRecord file through a temp file and a rename.

  A failure or a kill leaves the old file (or none), never half a file under `path`.

  Args:
    path: the TFRecord file.
    records: iterable of serialized tf.train.Example strings.

  Returns:
    The number of records written.

  Raises:
    UsageError: the file system refused a write (the message names `path` and the
      reason). Errors raised by `records` itself pass through unchanged.
  """
  count = 0
  with output_files.atomic_path(path) as tmp_path:
    try:
      writer = tf.python_io.TFRecordWriter(tmp_path)
    except (OSError, tf.errors.OpError) as e:
      raise write_error(path, e, tmp_path)
    try:
      for record in records:
        try:
          writer.write(record)
        except (OSError, tf.errors.OpError) as e:
          raise write_error(path, e, tmp_path)
        count += 1
    except BaseException:
      try:
        writer.close()
      except (OSError, tf.errors.OpError):
        pass  # The error that stopped the writing is the one to report.
      raise
    try:
      writer.close()
    except (OSError, tf.errors.OpError) as e:
      raise write_error(path, e, tmp_path)
  return count
