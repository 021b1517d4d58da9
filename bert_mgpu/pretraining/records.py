# coding=utf-8
"""Pre-training records as run_pretraining_mgpu.py reads them: the feature spec, the checks
of the files against the flags (which task they hold), and the eval metrics.

The records are create_pretraining_data.py's (docs/FORMATS.md 6).
"""

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu.errors import UsageError


# ---------------------------------------------------------------------------
# Input
# ---------------------------------------------------------------------------

def input_feature_spec(max_seq_length, max_predictions_per_seq, next_sentence=True):
  """The features create_pretraining_data.py writes (docs/FORMATS.md 6); without
  next_sentence_labels when `next_sentence` is False (--pretraining_task=mlm)."""
  spec = {
      "input_ids": tf.FixedLenFeature([max_seq_length], tf.int64),
      "input_mask": tf.FixedLenFeature([max_seq_length], tf.int64),
      "segment_ids": tf.FixedLenFeature([max_seq_length], tf.int64),
      "masked_lm_positions": tf.FixedLenFeature([max_predictions_per_seq], tf.int64),
      "masked_lm_ids": tf.FixedLenFeature([max_predictions_per_seq], tf.int64),
      "masked_lm_weights": tf.FixedLenFeature([max_predictions_per_seq], tf.float32),
      "next_sentence_labels": tf.FixedLenFeature([1], tf.int64),
  }
  if not next_sentence:
    del spec["next_sentence_labels"]
  return spec


def check_record_lengths(path, feature_spec):
  """Checks the first record of `path` against the feature lengths the flags ask for.

  next_sentence_labels, whether in `feature_spec` or not, is checked when the record
  holds it.

  Returns:
    bool, whether the record holds next_sentence_labels.

  Raises:
    UsageError: a feature is missing or has another length (the data was written with
      another --max_seq_length or --max_predictions_per_seq), or the file is not TFRecord.
  """
  try:
    record = next(iter(tf.python_io.tf_record_iterator(path)), None)
  except tf.errors.OpError as e:
    raise UsageError("%s is not a readable TFRecord file (%s). --input_file takes the output "
                     "of create_pretraining_data.py." % (path, e.message.split("\n")[0]))
  if record is None:
    raise UsageError("%s holds no record. Re-create it with create_pretraining_data.py."
                     % path)
  example = tf.train.Example.FromString(record)
  has_next_sentence = "next_sentence_labels" in example.features.feature
  if has_next_sentence:
    feature_spec = dict(feature_spec,
                        next_sentence_labels=tf.FixedLenFeature([1], tf.int64))
  for name, spec in sorted(feature_spec.items()):
    if name not in example.features.feature:
      raise UsageError("%s, record 1: no feature %s. --input_file takes the output of "
                       "create_pretraining_data.py." % (path, name))
    feature = example.features.feature[name]
    values = feature.float_list.value if spec.dtype == tf.float32 else feature.int64_list.value
    if len(values) != spec.shape[0]:
      flag = ("--max_predictions_per_seq" if name.startswith("masked_lm")
              else "--max_seq_length" if name != "next_sentence_labels" else None)
      hint = (" Set %s=%d to match the data (or re-create it)." % (flag, len(values))
              if flag else "")
      raise UsageError("%s, record 1: feature %s has %d values, expected %d.%s" %
                       (path, name, len(values), spec.shape[0], hint))
  return has_next_sentence


def records_task(input_files, max_seq_length, max_predictions_per_seq):
  """Checks every input file's first record; returns whether they train next sentences.

  Returns:
    bool: True when the records hold next_sentence_labels (nsp, pair_span), False
    when they do not (mlm).

  Raises:
    UsageError: a file does not fit the flags, or some files hold next_sentence_labels
      and others do not (both named).
  """
  spec = input_feature_spec(max_seq_length, max_predictions_per_seq, next_sentence=False)
  with_labels, without_labels = [], []
  for path in input_files:
    (with_labels if check_record_lengths(path, spec) else without_labels).append(path)
  if with_labels and without_labels:
    raise UsageError("%s holds next_sentence_labels but %s does not: all input files must be "
                     "of one --pretraining_task (nsp/pair_span, or mlm)."
                     % (with_labels[0], without_labels[0]))
  return bool(with_labels)


# ---------------------------------------------------------------------------
# Metrics and output files
# ---------------------------------------------------------------------------

def pretraining_metrics(outputs):
  """Google's pre-training eval metrics from per-example outputs (NumPy).

  Masked-LM figures are weighted by masked_lm_weights (padding slots do not count);
  loss is masked_lm_loss + next_sentence_loss. Without next_sentence_labels in
  `outputs` (the masked LM alone), the keys are masked_lm_accuracy, masked_lm_loss and
  loss = masked_lm_loss.
  """
  weights = outputs["masked_lm_weights"].astype(np.float64)  # [n, max_pred]
  total_weight = max(float(weights.sum()), 1e-12)
  correct = (outputs["masked_lm_predictions"] == outputs["masked_lm_ids"]).astype(np.float64)
  mlm_accuracy = float((weights * correct).sum() / total_weight)
  mlm_loss = float(-(weights * outputs["masked_lm_log_probs"]).sum() / total_weight)
  if "next_sentence_labels" not in outputs:
    return {"masked_lm_accuracy": mlm_accuracy, "masked_lm_loss": mlm_loss, "loss": mlm_loss}
  nsp_accuracy = float(np.mean(outputs["next_sentence_predictions"] ==
                               outputs["next_sentence_labels"]))
  nsp_loss = float(-np.mean(outputs["next_sentence_log_probs"]))
  return {"masked_lm_accuracy": mlm_accuracy, "masked_lm_loss": mlm_loss,
          "next_sentence_accuracy": nsp_accuracy, "next_sentence_loss": nsp_loss,
          "loss": mlm_loss + nsp_loss}
