# coding=utf-8
"""TFRecord files: input globs, batches of the global batch size, atomic writing and
reading back."""

import os
import struct

import tensorflow.compat.v1 as tf

# Also tfrecord_io's own names: its callers use tfrecord_io.MODEL_INPUTS and padded_length.
from bert_mgpu.data.batch_shapes import MODEL_INPUTS, padded_length  # pylint: disable=g-multiple-import,unused-import
from bert_mgpu.data import length_grouping
from bert_mgpu.data import output_files
from bert_mgpu.errors import UsageError, write_error

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


# Every feature with one value per token position: trimming cuts them all to one length
# (tag_ids and tag_mask: run_ner_mgpu.py's per-piece tags and first-piece mask).
SEQUENCE_FEATURES = MODEL_INPUTS + ("tag_ids", "tag_mask")


# Windowed records (a long text cut into windows, long_text.document_windows): each
# SEQUENCE_FEATURE holds the document's windows concatenated, NUM_WINDOWS their number.
NUM_WINDOWS = "num_windows"


def windowed_features(windows):
  """The features of one document's windows, for a windowed record.

  Args:
    windows: dict name -> list [windows][seq] of int, e.g. the input_ids, input_mask and
      segment_ids of a long_text.DocumentWindows; every name has the same windows.

  Returns:
    dict name -> tf.train.Feature: each name's windows as one flat int64 list
    [windows * seq], and NUM_WINDOWS: [windows].
  """
  counts = set(len(rows) for rows in windows.values())
  if len(counts) != 1:
    raise ValueError("the features have different window counts: %s" % sorted(counts))
  features = {name: int64_feature([value for row in rows for value in row])
              for name, rows in windows.items()}
  features[NUM_WINDOWS] = int64_feature([counts.pop()])
  return features


def windowed_feature_spec(feature_spec):
  """The spec that reads windowed records, from the spec of one-window records.

  Args:
    feature_spec: dict name -> tf.FixedLenFeature of unwindowed records; the
      SEQUENCE_FEATURES among them are [seq].

  Returns:
    The dict with each SEQUENCE_FEATURE read as [windows, seq] (the flat list cut into
    rows of seq) and NUM_WINDOWS added ([]). make_dataset pads each batch of such records
    to its most windows; padded windows are all zero (input_mask 0).
  """
  spec = dict(feature_spec)
  for name in SEQUENCE_FEATURES:
    if name in spec:
      spec[name] = tf.FixedLenSequenceFeature(spec[name].shape, spec[name].dtype,
                                              allow_missing=True)
  spec[NUM_WINDOWS] = tf.FixedLenFeature([], tf.int64)
  return spec


def trim_to_longest(features, length_multiple=1):
  """Cuts a batch's token-position features to its longest example.

  BERT's attention mask gives padding positions a zero weight, so the real tokens'
  outputs do not change (up to float rounding); only the compute spent on padding goes.
  Windowed features ([batch, windows, seq], see windowed_feature_spec) are cut on the seq
  axis to the batch's longest real window, and on the windows axis to its largest number
  of real windows.

  Args:
    features: dict name -> Tensor; input_ids, input_mask and segment_ids are
      [batch, max_seq_length] (or [batch, windows, max_seq_length]) with input_mask 1 on
      real tokens.
    length_multiple: round the length up to a multiple of this (XLA compiles one program
      per shape: a few lengths instead of one per length).

  Returns:
    The dict with the SEQUENCE_FEATURES cut to [batch, length] (or
    [batch, real windows, length]), length <= max_seq_length.
  """
  mask = tf.cast(features["input_mask"], tf.int32)
  max_length = tf.shape(mask)[-1]
  longest = tf.reduce_max(tf.reduce_sum(mask, axis=-1))
  length = (tf.maximum(longest, 1) + length_multiple - 1) // length_multiple * length_multiple
  length = tf.minimum(length, max_length)
  windowed = mask.shape.ndims == 3
  if windowed:  # real windows come first, padded ones are all zero
    real_windows = tf.reduce_sum(tf.reduce_max(mask, axis=-1), axis=1)  # [batch]
    windows = tf.maximum(tf.reduce_max(real_windows), 1)
  trimmed = dict(features)
  for name in SEQUENCE_FEATURES:
    if name in features:
      trimmed[name] = (features[name][:, :windows, :length] if windowed else
                       features[name][:, :length])
  return trimmed


# With group_by_length, each sorted chunk of the shuffled stream gives this many global
# batches (Hugging Face's group_by_length sorts "mega-batches" of 50 batches the same way).
GROUP_BATCHES = 50


def _decode(records, feature_spec):
  """Parses a dataset of serialized records (parallel parsing keeps the order)."""
  return records.map(lambda record: _decode_record(record, feature_spec),
                     num_parallel_calls=4)


def _batch(examples, batch_size, drop_remainder):
  """Batches parsed examples; windowed ones are zero-padded to the batch's most windows."""
  shapes = tf.data.get_output_shapes(examples)
  if all(shape.is_fully_defined() for shape in shapes.values()):
    return examples.batch(batch_size, drop_remainder=drop_remainder)
  return examples.padded_batch(batch_size, shapes, drop_remainder=drop_remainder)


def _length_ranks_within_strata(lengths, strata):
  """Each row's place by length among the rows of its stratum, as a share: (rank + 0.5) /
  the stratum's rows, in (0, 1). Sorting a chunk by it puts the strata's shortest rows
  first, in proportion, then their next shortest, and so on.

  Args:
    lengths: int [chunk].
    strata: int [chunk], e.g. each row's label id.

  Returns:
    float32 [chunk].
  """
  by_length = tf.argsort(lengths, stable=True)  # [chunk]
  _, stratum = tf.unique(tf.gather(strata, by_length))  # [chunk], in [0, strata)
  members = tf.one_hot(stratum, tf.reduce_max(stratum) + 1, dtype=tf.float32)  # [chunk, strata]
  # In length order, the rows of its stratum so far (itself included), and in all.
  seen = tf.reduce_sum(tf.cumsum(members, axis=0) * members, axis=1)  # [chunk]
  total = tf.reduce_sum(tf.reduce_sum(members, axis=0)[None, :] * members, axis=1)  # [chunk]
  ranks = (seen - 0.5) / total  # [chunk], in length order
  return tf.scatter_nd(by_length[:, None], ranks, tf.shape(ranks))  # back to chunk order


def _sort_chunk_into_batches(chunk, chunk_index, seed, group_batches, batch_size,
                             stratify_by=None):
  """Cuts one chunk of examples into `group_batches` batches of similar length.

  The rows are sorted by length (a stable sort: the chunk comes shuffled, so examples of
  equal length stay in random order), cut into consecutive batches, and then the batches'
  order and the rows within each batch are shuffled by a stateless draw keyed on (seed,
  chunk_index): the same chunk always gives the same batches, wherever a run starts.
  With `stratify_by` (a feature of one int per row, e.g. "label_ids"), the rows are
  sorted by their length rank within their stratum instead
  (_length_ranks_within_strata): each batch then holds the strata in about the chunk's
  proportions, each at the same place of its own length distribution, so batches are
  not skewed towards the label of their length where length goes with the label.

  Returns:
    dict name -> tensor [group_batches, batch_size, ...].
  """
  mask = tf.cast(chunk["input_mask"], tf.int32)  # [chunk, seq] or [chunk, windows, seq]
  lengths = tf.reduce_sum(tf.reshape(mask, [tf.shape(mask)[0], -1]), axis=1)
  if stratify_by is not None:
    strata = tf.reshape(chunk[stratify_by], [-1])  # [chunk]
    sort_keys = _length_ranks_within_strata(lengths, strata)
  else:
    sort_keys = lengths
  by_length = tf.reshape(tf.argsort(sort_keys, stable=True), [group_batches, batch_size])
  keys = tf.random.stateless_uniform([group_batches, batch_size + 1],
                                     seed=tf.stack([tf.constant(seed, tf.int64), chunk_index]))
  batch_order = tf.argsort(keys[:, 0])
  row_order = tf.argsort(keys[:, 1:], axis=1)
  rows = tf.gather(tf.gather(by_length, row_order, batch_dims=1), batch_order)
  return {name: tf.gather(tensor, rows) for name, tensor in chunk.items()}


def group_into_length_batches(records, feature_spec, batch_size, group_batches, seed,
                              skip_batches=0, stratify_by=None):
  """Global batches of examples of similar length, from an endless shuffled stream.

  The stream is read in chunks of group_batches x batch_size records; each chunk is
  sorted by length and cut into batches (_sort_chunk_into_batches). Grouping only
  reorders within a chunk, so every example still comes once per pass over the data
  (once per epoch), and the global batch is formed before it is split across towers:
  each tower gets a slice of one length group's batch. Skipping `skip_batches` skips the
  whole chunks before them unread and then the rest of the batches of the next chunk,
  so a resumed run sees the same batches as one that never stopped.

  Args:
    records: a dataset of serialized examples, shuffled and repeated.
    feature_spec: dict name -> tf.FixedLenFeature, with "input_mask" (or a
      windowed_feature_spec: lengths are a document's tokens over all its windows).
    batch_size, group_batches: the global batch size, and batches per chunk.
    seed: the seed of the batches' order (None: 0; the stream's shuffle has its own).
    skip_batches: batches to skip, an int or an int64 scalar tensor.
    stratify_by: None, or a feature of one int per record (single-label classification's
      "label_ids") whose values each batch holds in about the chunk's proportions.

  Returns:
    A dataset of dicts name -> tensor [batch_size, ...], padded to the records' length
    (windowed: to the chunk's most windows; trim_to_longest cuts them to the batch's).
  """
  if "input_mask" not in feature_spec:
    raise ValueError("group_by_length needs an input_mask feature to measure lengths")
  skip_batches = tf.cast(skip_batches, tf.int64)
  first_chunk = skip_batches // group_batches
  chunk_size = group_batches * batch_size
  chunks = _decode(records.skip(first_chunk * chunk_size), feature_spec)
  chunks = _batch(chunks, chunk_size, drop_remainder=True)
  chunks = tf.data.Dataset.zip((tf.data.Dataset.range(first_chunk, 2 ** 62), chunks))
  seed = 0 if seed is None else seed
  batches = chunks.flat_map(lambda index, chunk: tf.data.Dataset.from_tensor_slices(
      _sort_chunk_into_batches(chunk, index, seed, group_batches, batch_size, stratify_by)))
  return batches.skip(skip_batches - first_chunk * group_batches)


def log_label_skew(lengths, targets, batch_size, shuffle_buffer, noun="label", strata=None):
  """Logs how much --group_by_length skews the label mix of the training batches, as a
  warning when grouped batches are markedly more skewed than random ones
  (length_grouping.label_skew: a simulation with its own seed, not the run's batches).

  Args:
    lengths: int array [n], each training example's tokens (the sum of its input_mask).
    targets: float array [n, k], its label targets (length_grouping's module docstring).
    batch_size: the batch that make_dataset groups (config.micro_batch_size).
    shuffle_buffer: make_dataset's shuffle_buffer (it may make the chunks smaller).
    noun: "label", or "tag" for NER.
    strata: None, or int array [n]: the labels when make_dataset groups with
      stratify_by="label_ids".

  Returns:
    The length_grouping.LabelSkew.
  """
  skew = length_grouping.label_skew(
      lengths, targets, batch_size,
      length_grouping.chunk_batches(GROUP_BATCHES, shuffle_buffer, batch_size),
      strata=strata)
  log = tf.logging.warning if skew.warns else tf.logging.info
  log("%s", length_grouping.log_line(skew, noun))
  return skew


def make_dataset(input_files, feature_spec, global_batch_size, is_training, seed=None,
                 shuffle_buffer=10000, skip_batches=0, length_multiple=1,
                 group_by_length=False, group_batches=GROUP_BATCHES, stratify_by=None):
  """Reads TFRecord files into batches of the *global* batch size.

  The global batch is formed before it is split across towers, so a seed gives the same
  sequence of global batches whatever the tower count. Each batch is then cut to its
  longest example (trim_to_longest), which does not change which examples form it.

  Args:
    input_files: list of TFRecord paths.
    feature_spec: dict name -> tf.FixedLenFeature; or windowed_feature_spec(...) for
      windowed records: the token features come as [batch, windows, seq], each batch
      padded to its most windows with all-zero windows.
    global_batch_size: examples (documents) per step over all towers.
    is_training: True: repeat forever, reshuffle every epoch with `seed`, drop the last partial
      batch. False: one pass in file order; the last batch may be partial.
    seed: shuffle seed.
    shuffle_buffer: examples in the shuffle buffer.
    skip_batches: batches to skip, an int or an int64 scalar tensor (a resumed run skips what
      it already trained on, so it sees the same data as a run that never stopped).
    length_multiple: trim each batch to its longest example rounded up to a multiple of
      this; None keeps every batch padded to the full length of the records.
    group_by_length: training only: draw each global batch from examples of similar length
      (group_into_length_batches); needs an input_mask feature.
    group_batches: with group_by_length, the global batches cut from each sorted chunk of
      the shuffled stream (at most shuffle_buffer // global_batch_size).
    stratify_by: with group_by_length, a feature of one int per record (e.g. "label_ids")
      whose values every batch holds in about the data's proportions
      (_sort_chunk_into_batches).

  Returns:
    A tf.data.Dataset of dicts name -> tensor [batch, ...].
  """
  dataset = tf.data.TFRecordDataset(input_files)
  if is_training:
    dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.repeat()
  if is_training and group_by_length:
    group_batches = length_grouping.chunk_batches(group_batches, shuffle_buffer,
                                                  global_batch_size)
    dataset = group_into_length_batches(dataset, feature_spec, global_batch_size,
                                        group_batches, seed, skip_batches, stratify_by)
  else:
    if is_training and (isinstance(skip_batches, tf.Tensor) or skip_batches):
      dataset = dataset.skip(tf.cast(skip_batches, tf.int64) * global_batch_size)
    dataset = _decode(dataset, feature_spec)
    dataset = _batch(dataset, global_batch_size, drop_remainder=is_training)
  if length_multiple:
    dataset = dataset.map(lambda batch: trim_to_longest(batch, length_multiple))
  return dataset.prefetch(2)


def without_autotune(dataset):
  """`dataset` with tf.data's autotuning off.

  Our pipelines set their own parallelism and buffer sizes, so the autotuner has nothing to
  tune. On TF 2.x its thread sleeps between rounds, for up to 60 s once a job has run a few
  minutes, and destroying the iterator can wait for it to wake: closing the training
  session of an 8-epoch NER job took 17.8 s and 31.1 s in two of six measured runs (gdb:
  ~IteratorResource waiting for Model::OptimizeLoop; docs/experiments/session_close_stall.md,
  "The stall after prediction").
  """
  options = tf.data.Options()
  if hasattr(options, "autotune"):
    options.autotune.enabled = False  # TF 2.x
  else:
    options.experimental_optimization.autotune = False  # TF 1.15
  return dataset.with_options(options)


def int64_feature(values):
  """A tf.train.Feature of int64 values."""
  return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def read_records(path):
  """Yields the serialized records of an uncompressed TFRecord file.

  Read in Python, so TF 2.x logs no deprecation warning (tf_record_iterator's); the
  checksums are not verified.

  Raises:
    ValueError: the file ends inside a record.
  """
  with open(path, "rb") as f:
    while True:
      header = f.read(12)  # the record's length (uint64) and that length's checksum
      if not header:
        return
      length = struct.unpack("<Q", header[:8])[0] if len(header) == 12 else 0
      record = f.read(length)
      if len(header) != 12 or len(record) != length or len(f.read(4)) != 4:
        raise ValueError("%s: the TFRecord file ends inside a record" % path)
      yield record


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
      raise write_error(path, e)
    try:
      for record in records:
        try:
          writer.write(record)
        except (OSError, tf.errors.OpError) as e:
          raise write_error(path, e)
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
      raise write_error(path, e)
  return count
