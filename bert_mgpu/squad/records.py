# coding=utf-8
"""The TFRecord files of SQuAD-style windows (squad/data.py's InputFeatures): Google's
feature names (docs/FORMATS.md 6), written atomically, and their feature spec.
"""

import collections

import tensorflow.compat.v1 as tf

from bert_mgpu.data import tfrecord_io


def serialize_features(feature, is_training):
  """A tf.train.Example of one window (Google's SQuAD feature names)."""
  fields = collections.OrderedDict([
      ("unique_ids", tfrecord_io.int64_feature([feature.unique_id])),
      ("input_ids", tfrecord_io.int64_feature(feature.input_ids)),
      ("input_mask", tfrecord_io.int64_feature(feature.input_mask)),
      ("segment_ids", tfrecord_io.int64_feature(feature.segment_ids)),
  ])
  if is_training:
    fields["start_positions"] = tfrecord_io.int64_feature([feature.start_position])
    fields["end_positions"] = tfrecord_io.int64_feature([feature.end_position])
    fields["is_impossible"] = tfrecord_io.int64_feature([int(feature.is_impossible)])
  return tf.train.Example(features=tf.train.Features(feature=fields)).SerializeToString()


def input_feature_spec(max_seq_length, is_training):
  """The feature spec of serialize_features' records."""
  spec = {
      "unique_ids": tf.FixedLenFeature([], tf.int64),
      "input_ids": tf.FixedLenFeature([max_seq_length], tf.int64),
      "input_mask": tf.FixedLenFeature([max_seq_length], tf.int64),
      "segment_ids": tf.FixedLenFeature([max_seq_length], tf.int64),
  }
  if is_training:
    spec["start_positions"] = tf.FixedLenFeature([], tf.int64)
    spec["end_positions"] = tf.FixedLenFeature([], tf.int64)
    spec["is_impossible"] = tf.FixedLenFeature([], tf.int64)
  return spec


def write_features(features, path, is_training, keep_metadata):
  """Writes features to a TFRecord file (atomically: tfrecord_io.write_records_atomically).

  Args:
    features: iterable of InputFeatures.
    path: the TFRecord file.
    is_training: write the targets.
    keep_metadata: return the features without their id lists (for prediction).

  Returns:
    (number written, list of InputFeatures kept, or []).
  """
  kept = []

  def serialized_records():
    for feature in features:
      yield serialize_features(feature, is_training)
      if keep_metadata:
        del feature.input_ids, feature.input_mask, feature.segment_ids
        kept.append(feature)

  count = tfrecord_io.write_records_atomically(path, serialized_records())
  return count, kept
