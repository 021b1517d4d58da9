# coding=utf-8
"""The embedding task's TFRecords: one record per example, its texts one row each.

  input_ids, input_mask, segment_ids  int64 [texts, max_seq_length]: each text alone,
                                      [CLS] tokens [SEP], cut to max_seq_length
  text_ids                            int64 [texts, 2]: a 48-bit hash of each text's token
                                      ids in two 24-bit halves (exact in float32; the
                                      in-batch loss masks a candidate equal to the anchor's
                                      positive)
  score                               float [] (scored pairs)
  label_ids                           int64 [] (--loss=softmax)

Read as [batch, texts, seq], a batch is cut to its longest text (tfrecord_io's
trim_to_longest) and --group_by_length sorts by a record's tokens over all its texts.
"""

import hashlib

import tensorflow.compat.v1 as tf

from bert_mgpu.data import tfrecord_io
from bert_mgpu.embedding.text_rows import text_row


def text_id(input_ids):
  """The two 24-bit halves of a 48-bit hash of a text's token ids (as the model reads it:
  texts equal after lower-casing or cutting to max_seq_length are the same text)."""
  data = ",".join(str(i) for i in input_ids).encode("ascii")
  value = int.from_bytes(hashlib.blake2b(data, digest_size=6).digest(), "big")
  return [value >> 24, value & 0xFFFFFF]


def serialize(texts, tokenizer, max_seq_length, score=None, label_id=None):
  """The serialized record of one example's texts, and how many of them were cut."""
  rows = [text_row(text, tokenizer, max_seq_length) for text in texts]
  features = {name: tfrecord_io.int64_feature([v for row in rows for v in row[i]])
              for i, name in enumerate(tfrecord_io.MODEL_INPUTS)}
  features["text_ids"] = tfrecord_io.int64_feature(
      [v for row in rows for v in text_id(row[0][:sum(row[1])])])
  if score is not None:
    features["score"] = tf.train.Feature(float_list=tf.train.FloatList(value=[score]))
  if label_id is not None:
    features["label_ids"] = tfrecord_io.int64_feature([label_id])
  example = tf.train.Example(features=tf.train.Features(feature=features))
  return example.SerializeToString(deterministic=True), sum(row[3] for row in rows)


def feature_spec(texts, max_seq_length, scored=False, labelled=False):
  """The parsing spec of records of `texts` texts each."""
  spec = {name: tf.FixedLenFeature([texts, max_seq_length], tf.int64)
          for name in tfrecord_io.MODEL_INPUTS}
  spec["text_ids"] = tf.FixedLenFeature([texts * 2], tf.int64)
  if scored:
    spec["score"] = tf.FixedLenFeature([], tf.float32)
  if labelled:
    spec["label_ids"] = tf.FixedLenFeature([], tf.int64)
  return spec


def write_records(path, examples, tokenizer, max_seq_length):
  """Writes examples (texts, score or None, label id or None) atomically.

  Returns:
    (records written, texts cut to max_seq_length).
  """
  cut = [0]

  def serialized():
    for texts, score, label_id in examples:
      record, texts_cut = serialize(texts, tokenizer, max_seq_length, score, label_id)
      cut[0] += texts_cut
      yield record
  count = tfrecord_io.write_records_atomically(path, serialized())
  return count, cut[0]
