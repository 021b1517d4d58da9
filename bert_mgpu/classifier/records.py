# coding=utf-8
"""The classifier's TFRecords (docs/FORMATS.md 6): writing them, their parsing spec, and the
lengths and labels read back from them."""

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import featurizing
from bert_mgpu.classifier import long_text
from bert_mgpu.data import length_grouping
from bert_mgpu.data import tfrecord_io


def windowed_record(example, label_map, max_seq_length, tokenizer, options):
  """The serialized windowed record of one example (--long_text=windows), and whether text
  was left out (windows past max_windows, or the end of a text_b too long for a window)."""
  tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else None
  windows = long_text.document_windows(
      tokenizer.tokenize(example.text_a), tokens_b, max_seq_length, options.doc_stride,
      options.max_windows, tokenizer.convert_tokens_to_ids)
  feature_map = tfrecord_io.windowed_features(
      {name: getattr(windows, name) for name in tfrecord_io.MODEL_INPUTS})
  feature_map.update(_label_features(
      featurizing.example_label_ids(example, label_map, options.multi_label)))
  return _serialize(feature_map), bool(windows.windows_cut or windows.text_b_cut)


def _label_features(label_id):
  """label_ids ([] for one label, [num_labels] multi-hot with --multi_label) and
  is_real_example."""
  return {"label_ids": tfrecord_io.int64_feature(
              label_id if isinstance(label_id, list) else [label_id]),
          "is_real_example": tfrecord_io.int64_feature([1])}


def serialize_features(features):
  """Serializes InputFeatures as a tf.train.Example (docs/FORMATS.md 6)."""
  feature_map = {
      "input_ids": tfrecord_io.int64_feature(features.input_ids),
      "input_mask": tfrecord_io.int64_feature(features.input_mask),
      "segment_ids": tfrecord_io.int64_feature(features.segment_ids),
  }
  feature_map.update(_label_features(features.label_id))
  return _serialize(feature_map)


def _serialize(feature_map):
  example = tf.train.Example(features=tf.train.Features(feature=feature_map))
  # Deterministic: the same features give the same bytes in every process.
  return example.SerializeToString(deterministic=True)


def input_feature_spec(max_seq_length, multi_label_count=None, windows=False):
  """The feature dict that parses the records write_features writes.

  Args:
    max_seq_length: the records' sequence length.
    multi_label_count: None for one label id per record; with --multi_label, the number of
      labels (label_ids is then a multi-hot [multi_label_count]).
    windows: records of --long_text=windows (tfrecord_io.windowed_feature_spec).
  """
  spec = {
      "input_ids": tf.FixedLenFeature([max_seq_length], tf.int64),
      "input_mask": tf.FixedLenFeature([max_seq_length], tf.int64),
      "segment_ids": tf.FixedLenFeature([max_seq_length], tf.int64),
      "label_ids": tf.FixedLenFeature(
          [multi_label_count] if multi_label_count is not None else [], tf.int64),
      "is_real_example": tf.FixedLenFeature([], tf.int64),
  }
  return tfrecord_io.windowed_feature_spec(spec) if windows else spec


def read_lengths_and_label_ids(record_path):
  """Each record's length and label ids, read back from a feature file (write_features).

  A few seconds per 100k records (parsing them in Python).

  Args:
    record_path: a TFRecord file of features (windowed records too).

  Returns:
    (int64 array [n]: the sum of each record's input_mask, all its windows' tokens for
    windowed records; int64 array [n, m]: its label_ids, m = 1 for one label id, else
    the multi-hot [num_labels]).
  """
  lengths, label_ids = [], []
  for record in tfrecord_io.read_records(record_path):
    feature = tf.train.Example.FromString(record).features.feature
    lengths.append(sum(feature["input_mask"].int64_list.value))
    label_ids.append(list(feature["label_ids"].int64_list.value))
  if not lengths:
    return np.zeros([0], np.int64), np.zeros([0, 1], np.int64)
  return np.array(lengths, np.int64), np.array(label_ids, np.int64)


def label_skew_inputs(record_path, num_labels, multi_label, within_label):
  """What length_grouping.label_skew needs of a training feature file.

  Returns:
    (lengths int [n], targets float [n, num_labels]: the one-hot label or the multi-hot,
    strata int [n]: the labels when batches are grouped within each label, else None).
  """
  lengths, label_ids = read_lengths_and_label_ids(record_path)
  if multi_label:
    return lengths, label_ids.astype(np.float32), None
  targets = length_grouping.one_hot(label_ids[:, 0], num_labels)  # [n, num_labels]
  return lengths, targets, label_ids[:, 0] if within_label else None
