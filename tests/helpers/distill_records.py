# coding=utf-8
"""The records a run that distills keeps in its output_dir (distill-<key>.tf_record,
bert_mgpu/distillation/teacher_outputs.py), read back for the command-line tests."""

import glob
import os

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu.data import tfrecord_io


def distill_records(output_dir):
  """(teacher_logits [n, flattened logits], label_weight [n]) of output_dir's records; there
  must be exactly one such file (a stale one is removed)."""
  paths = glob.glob(os.path.join(output_dir, "distill-*.tf_record"))
  assert len(paths) == 1, paths
  logits, weights = [], []
  for record in tfrecord_io.read_records(paths[0]):
    feature = tf.train.Example.FromString(record).features.feature
    logits.append(list(feature["teacher_logits"].float_list.value))
    weights.append(feature["label_weight"].float_list.value[0])
  return np.array(logits), np.array(weights)
