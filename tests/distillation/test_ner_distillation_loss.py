# coding=utf-8
"""The tag head's distillation loss (bert_mgpu/ner/model.py with --teacher_dir) against a
NumPy reference written here, in float64: per labelled token (tag_mask),

  labelled window     a * T^2 * KL(softmax(t/T) || softmax(s/T)) + (1 - a) * CE(gold tag)
  unlabelled window   T^2 * KL(softmax(t/T) || softmax(s/T))

summed over each window's tokens and weighted like the token cross-entropy (loss_weight:
the batch's token mean). The batch is cut shorter (6 positions) than the records
(max_seq_length 8), so the teacher's stored logits must be cut to the batch. The teacher's
logits sit far from the student's and a > 0 or an unlabelled window is present, so a loss
without the teacher's term misses the reference by far more than the tolerance.
"""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu.distillation import losses
from bert_mgpu.distillation import options
from bert_mgpu.ner import model as ner_model
import modeling

CONFIG = modeling.BertConfig(
    vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
    intermediate_size=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    max_position_embeddings=16, type_vocab_size=2)
BATCH, SEQ, MAX_SEQ, TAGS = 4, 6, 8, 5


def batch(seed):
  rng = np.random.RandomState(seed)
  lengths = np.array([6, 4, 5, 3])
  positions = np.arange(SEQ)[None, :]
  input_mask = (positions < lengths[:, None]).astype(np.int64)
  tag_mask = input_mask.copy()
  tag_mask[:, 0] = 0  # [CLS]
  tag_mask[np.arange(BATCH), lengths - 1] = 0  # [SEP]
  tag_mask[0, 2] = 0  # a piece that is not a word's first
  return {
      "input_ids": rng.randint(1, CONFIG.vocab_size, size=(BATCH, SEQ)) * input_mask,
      "input_mask": input_mask, "segment_ids": np.zeros((BATCH, SEQ), np.int64),
      "tag_ids": rng.randint(0, TAGS, size=(BATCH, SEQ)) * tag_mask, "tag_mask": tag_mask,
      "loss_weight": np.full([BATCH], 1.0 / tag_mask.sum(), np.float32),
      losses.TEACHER_LOGITS: (rng.randn(BATCH, MAX_SEQ * TAGS) * 4).astype(np.float32),
      losses.LABEL_WEIGHT: np.array([1.0, 0.0, 1.0, 0.0], np.float32)}


def log_softmax(x):
  x = x - x.max(axis=-1, keepdims=True)
  return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def reference(student, features, temperature, alpha, with_teacher=True):
  """The loss from the student's logits [batch, seq, tags], in float64."""
  teacher = features[losses.TEACHER_LOGITS].reshape(BATCH, MAX_SEQ, TAGS)[:, :SEQ]
  student = student.astype(np.float64)
  log_p = log_softmax(teacher.astype(np.float64) / temperature)
  log_q = log_softmax(student / temperature)
  kl = temperature ** 2 * (np.exp(log_p) * (log_p - log_q)).sum(axis=-1)  # [batch, seq]
  log_probs = log_softmax(student)
  ce = -np.take_along_axis(log_probs, features["tag_ids"][..., None], axis=-1)[..., 0]
  if not with_teacher:
    kl = np.zeros_like(kl)
  weight = features[losses.LABEL_WEIGHT].astype(np.float64)[:, None]
  per_token = weight * (alpha * kl + (1 - alpha) * ce) + (1 - weight) * kl
  rows = (per_token * features["tag_mask"]).sum(axis=1)
  return float((rows * features["loss_weight"]).sum())


@pytest.mark.parametrize("temperature,alpha", [(1.0, 0.3), (2.0, 0.0), (4.0, 1.0)])
def test_the_tag_heads_loss_is_the_per_token_distillation_loss(temperature, alpha):
  features = batch(seed=int(temperature * 10 + alpha * 10))
  distillation = options.DistillationOptions("teacher", temperature, alpha, None, None)
  with tf.Graph().as_default():
    tf.set_random_seed(1)
    model_fn = ner_model.create_model_fn(CONFIG, TAGS, max_seq_length=MAX_SEQ,
                                         distillation=distillation, emit_logits=True)
    outputs = model_fn({name: tf.constant(value) for name, value in features.items()}, True)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      loss, logits = sess.run([outputs["loss"], outputs["logits"]])
  student = logits[:, :SEQ]  # padded back to max_seq_length
  expected = reference(student, features, temperature, alpha)
  np.testing.assert_allclose(loss, expected, rtol=1e-5)
  without = reference(student, features, temperature, alpha, with_teacher=False)
  assert abs(without - expected) > 0.01 * abs(expected)


def test_without_the_teachers_logits_or_outside_training_the_loss_is_the_token_mean():
  features = batch(seed=3)
  plain = {name: value for name, value in features.items()
           if name not in (losses.TEACHER_LOGITS, losses.LABEL_WEIGHT)}
  distillation = options.DistillationOptions("teacher", 2.0, 0.5, None, None)
  with tf.Graph().as_default():
    tf.set_random_seed(1)
    model_fn = ner_model.create_model_fn(CONFIG, TAGS, max_seq_length=MAX_SEQ,
                                         distillation=distillation, emit_logits=True)
    training = model_fn({name: tf.constant(value) for name, value in plain.items()}, True)
    with tf.variable_scope(tf.get_variable_scope(), reuse=True):
      inference = model_fn({name: tf.constant(value) for name, value in features.items()},
                           False)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      results = sess.run([training["loss"], training["logits"], inference["loss"]])
  loss, logits, inference_loss = results
  all_labelled = dict(features, **{losses.LABEL_WEIGHT: np.ones([BATCH], np.float32)})
  token_mean = reference(logits[:, :SEQ], all_labelled, 1.0, 0.0)
  np.testing.assert_allclose([loss, inference_loss], [token_mean, token_mean], rtol=1e-5)
