# coding=utf-8
"""Writing the instances of create_pretraining_data.py: the tf.train.Example features
Google's run_pretraining reads (docs/FORMATS.md 6; bert_mgpu/pretraining/records.py reads
them back), and the output files, written round-robin through temporary files.
"""

import collections

import tensorflow.compat.v1 as tf

from bert_mgpu.data import tfrecord_io


def _float_feature(values):
  return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def instance_to_example(instance, tokenizer, max_seq_length, max_predictions_per_seq):
  """Turns an instance into the tf.train.Example Google's run_pretraining reads.

  Args:
    instance: training_instances.TrainingInstance.
    tokenizer: tokenization.FullTokenizer (for the vocab).
    max_seq_length: int, length of input_ids, input_mask and segment_ids.
    max_predictions_per_seq: int, length of the masked_lm_* features.

  Returns:
    tf.train.Example with input_ids, input_mask, segment_ids, masked_lm_positions,
    masked_lm_ids, masked_lm_weights and (unless is_random_next is None, the mlm
    task) next_sentence_labels, zero padded.
  """
  input_ids = tokenizer.convert_tokens_to_ids(instance.tokens)
  num_tokens = len(input_ids)
  assert num_tokens <= max_seq_length
  pad = [0] * (max_seq_length - num_tokens)
  masked_lm_ids = tokenizer.convert_tokens_to_ids(instance.masked_lm_labels)
  num_masked = len(masked_lm_ids)
  assert num_masked <= max_predictions_per_seq
  prediction_pad = [0] * (max_predictions_per_seq - num_masked)
  features = collections.OrderedDict()
  features["input_ids"] = tfrecord_io.int64_feature(input_ids + pad)
  features["input_mask"] = tfrecord_io.int64_feature([1] * num_tokens + pad)
  features["segment_ids"] = tfrecord_io.int64_feature(list(instance.segment_ids) + pad)
  features["masked_lm_positions"] = tfrecord_io.int64_feature(
      list(instance.masked_lm_positions) + prediction_pad)
  features["masked_lm_ids"] = tfrecord_io.int64_feature(masked_lm_ids + prediction_pad)
  features["masked_lm_weights"] = _float_feature([1.0] * num_masked + [0.0] * len(prediction_pad))
  if instance.is_random_next is not None:
    features["next_sentence_labels"] = tfrecord_io.int64_feature(
        [1 if instance.is_random_next else 0])
  return tf.train.Example(features=tf.train.Features(feature=features))


def serialize_instance(instance, tokenizer, max_seq_length, max_predictions_per_seq):
  """Returns the serialized tf.train.Example of an instance (see `instance_to_example`)."""
  example = instance_to_example(instance, tokenizer, max_seq_length, max_predictions_per_seq)
  # Map fields (the feature dict) serialize in hash order unless told otherwise,
  # which would make the bytes differ from run to run.
  return example.SerializeToString(deterministic=True)


class RoundRobinRecordWriter(object):
  """Writes records round-robin to TFRecord files, each through `<path>.tmp`.

  The files get their final names only in `commit`, so a run that fails or is
  killed leaves no half-written file under an output name.

  Attributes:
    output_files: list of the final paths.
    counts: list of int, the records written to each file.
  """

  def __init__(self, output_files):
    self.output_files = list(output_files)
    self.counts = [0] * len(self.output_files)
    self._temp_files = [path + ".tmp" for path in self.output_files]
    self._writers = []
    try:
      for temp_file in self._temp_files:
        self._writers.append(tf.io.TFRecordWriter(temp_file))
    except BaseException:
      self.abort()
      raise
    self._next = 0

  def write(self, record):
    """Writes one serialized Example to the next file in turn."""
    self._writers[self._next].write(record)
    self.counts[self._next] += 1
    self._next = (self._next + 1) % len(self._writers)

  def commit(self):
    """Closes the files and gives them their final names."""
    for writer in self._writers:
      writer.close()
    for temp_file, path in zip(self._temp_files, self.output_files):
      tf.gfile.Rename(temp_file, path, overwrite=True)

  def abort(self):
    """Closes and deletes the temporary files."""
    for writer in self._writers:
      writer.close()
    for temp_file in self._temp_files:
      if tf.gfile.Exists(temp_file):
        tf.gfile.Remove(temp_file)
