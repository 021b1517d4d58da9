# coding=utf-8
"""The classifier's head: BERT's pooled output, a softmax over the labels (Google's) or one
sigmoid per label (--multi_label), and its loss.

run_classifier_mgpu.py trains it (bert_mgpu/classifier/task.py); predict_text.py, the
export (bert_mgpu/serving/export.py) and the benchmarks build it from a trained model's
files (model_fn_of).
"""

import contextlib

import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import multi_label as multi_label_lib
from bert_mgpu.classifier import window_pooling as window_pooling_lib
from bert_mgpu.distillation import losses as distillation_losses
from bert_mgpu.training import rdrop
import modeling

# The variable scope of the multi-label head (docs/FORMATS.md): its variables differ in name
# from the softmax head's, so neither kind of checkpoint loads silently into the other.
MULTI_LABEL_SCOPE = "multi_label"

# The head's variables by their names in transformers' BertForSequenceClassification
# (convert_checkpoint.py). Both frameworks lay them out [labels, hidden] and [labels].
TRANSFORMERS_NAMES = {"output_weights": "classifier.weight", "output_bias": "classifier.bias"}
MULTI_LABEL_TRANSFORMERS_NAMES = {MULTI_LABEL_SCOPE + "/" + name: transformers_name
                                  for name, transformers_name in TRANSFORMERS_NAMES.items()}


def create_model_fn(bert_config, num_labels, multi_label=False, window_pooling=None,
                    rdrop_alpha=0.0, distillation=None):
  """Returns model_fn(features, is_training): BERT + a classifier head on the pooled output.

  With window_pooling ("max" or "mean", --long_text=windows) the inputs are
  [batch, windows, seq]: every window goes through BERT and the windows' pooled vectors of a
  document are combined into one (window_pooling.py's pool_windows) before the one head.

  One label per example: Google's softmax head, with Google's top-level `output_weights`
  [num_labels, hidden] and `output_bias` [num_labels], so checkpoints load in Google's
  run_classifier.py. With multi_label: one sigmoid per label, variables
  `multi_label/output_weights` and `multi_label/output_bias`, the loss the binary
  cross-entropy averaged over the labels (as PyTorch's BCEWithLogitsLoss) and then over the
  examples. Without a "label_ids" feature (serving), the model returns only the
  probabilities. With rdrop_alpha > 0, training runs two passes and adds their divergence
  (bert_mgpu/training/rdrop.py); "per_example_loss" is the first pass's cross-entropy.
  With distillation (distillation/options.DistillationOptions: its temperature and alpha),
  training batches that carry the teacher's logits (distillation/teacher_outputs.py) are trained
  on the distillation loss (distillation/losses.py), averaged over the examples;
  "per_example_loss" stays the cross-entropy. With labels, "logits" is the float32
  [batch, num_labels] before the softmax or sigmoids (what the teacher pass stores).
  """
  def logits_of(features, is_training):
    """[batch, num_labels] float32, whatever the compute precision."""
    if window_pooling:
      pooled = window_pooling_lib.pooled_output_of_windows(bert_config, features, is_training,
                                                           window_pooling)
    else:
      model = modeling.BertModel(
          config=bert_config, is_training=is_training, input_ids=features["input_ids"],
          input_mask=features["input_mask"], token_type_ids=features["segment_ids"])
      pooled = model.get_pooled_output()  # [batch, hidden]
    with (tf.variable_scope(MULTI_LABEL_SCOPE) if multi_label else contextlib.nullcontext()):
      output_weights = tf.get_variable(
          "output_weights", [num_labels, bert_config.hidden_size],
          initializer=modeling.create_initializer(0.02))
      output_bias = tf.get_variable("output_bias", [num_labels],
                                    initializer=tf.zeros_initializer())
    if is_training:
      pooled = modeling.dropout(pooled, bert_config.hidden_dropout_prob)
    return tf.cast(tf.nn.bias_add(tf.matmul(pooled, output_weights, transpose_b=True),
                                  output_bias), tf.float32)

  def model_fn(features, is_training):
    logits = logits_of(features, is_training)
    outputs = {"probabilities": tf.sigmoid(logits) if multi_label else tf.nn.softmax(logits)}
    if "label_ids" in features:
      outputs["logits"] = logits  # records only: the teacher pass reads them
      per_example_loss = _per_example_loss(logits, features["label_ids"], multi_label)
      loss = tf.reduce_mean(per_example_loss)
      if (is_training and distillation is not None and
          distillation_losses.TEACHER_LOGITS in features):
        loss = tf.reduce_mean(_distillation_loss(logits, features, per_example_loss,
                                                 multi_label, distillation))
      if is_training and rdrop_alpha > 0:
        with rdrop.second_pass_scope():
          second = logits_of(features, is_training)  # its own dropout masks
        divergence = (tf.reduce_mean(rdrop.bernoulli_divergence(logits, second), axis=-1)
                      if multi_label else rdrop.categorical_divergence(logits, second))
        loss = rdrop.combined_loss(
            loss, tf.reduce_mean(_per_example_loss(second, features["label_ids"],
                                                   multi_label)),
            tf.reduce_mean(divergence), rdrop_alpha)
      outputs.update(loss=loss, per_example_loss=per_example_loss,
                     label_ids=features["label_ids"])
    return outputs
  return model_fn


def _per_example_loss(logits, label_ids, multi_label):
  """[batch]: the cross-entropy of float32 logits [batch, labels] against label ids [batch],
  or, multi-label, the binary cross-entropy against multi-hot [batch, labels] averaged over
  the labels."""
  if multi_label:
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.cast(label_ids, tf.float32), logits=logits), axis=-1)
  one_hot_labels = tf.one_hot(label_ids, depth=logits.shape[-1], dtype=tf.float32)
  return -tf.reduce_sum(one_hot_labels * tf.nn.log_softmax(logits, axis=-1), axis=-1)


def _distillation_loss(logits, features, cross_entropy, multi_label, distillation):
  """Each example's distillation loss (distillation/losses.py): the KL over the classes, or
  the Bernoulli KL averaged over the labels (as the binary cross-entropy).

  Args:
    logits: the student's, float32 [batch, num_labels].
    features: the batch, with the teacher's logits [batch, num_labels] and the label weight
      [batch] (distillation/teacher_outputs.py).
    cross_entropy: float32 [batch], each example's loss against its gold label(s).
    multi_label: sigmoids per label instead of one softmax.
    distillation: the DistillationOptions (temperature, alpha).

  Returns:
    float32 [batch].
  """
  teacher_logits = features[distillation_losses.TEACHER_LOGITS]  # [batch, num_labels]
  temperature = distillation.temperature
  if multi_label:
    divergence = tf.reduce_mean(distillation_losses.bernoulli_divergence(
        teacher_logits, logits, temperature), axis=-1)
  else:
    divergence = distillation_losses.categorical_divergence(teacher_logits, logits,
                                                            temperature)
  return distillation_losses.example_losses(divergence, cross_entropy,
                                            features[distillation_losses.LABEL_WEIGHT],
                                            distillation.alpha)


def model_fn_of(files, bert_config):
  """The model_fn of a trained model's model_files.ModelFiles (single- or multi-label, windows
  or not)."""
  settings = files.settings
  return create_model_fn(bert_config, len(files.labels),
                         bool(settings.get("multi_label", False)),
                         settings.get("window_pooling") if settings.get("long_text") ==
                         "windows" else None)


def check_head(checkpoint, is_multi_label):
  """Refuses a fine-tuned checkpoint whose head is the other kind's (multi_label.check_head)."""
  multi_label_lib.check_head(
      checkpoint, [name for name, _ in tf.train.list_variables(checkpoint)], is_multi_label,
      MULTI_LABEL_SCOPE)
