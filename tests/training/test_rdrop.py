# coding=utf-8
"""--rdrop_alpha (bert_mgpu/training/rdrop.py): the divergences against NumPy's KL, and each
head's training loss against NumPy's R-Drop loss of the two passes it ran (fetched in the same
session run, so with the same dropout masks); the runs end to end are in
tests/commands/test_fine_tuning_techniques.py."""

import copy

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import model as classifier_model
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import model as ner_model
from bert_mgpu.training import rdrop
from tiny_model import NUM_LABELS, SEQ, TINY_CONFIG, random_batch

# Large, so that the divergence of near-zero initial logits weighs in the loss.
ALPHA = 400.0


def softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def kl(p, q):
  return (p * np.log(p / q)).sum(-1)


def test_the_divergences_are_the_two_kls_summed():
  rng = np.random.RandomState(0)
  a, b = rng.randn(6, 5).astype(np.float32), rng.randn(6, 5).astype(np.float32)
  p, q = softmax(a.astype(np.float64)), softmax(b.astype(np.float64))
  # Bernoulli per element: the two outcomes as a distribution of two.
  sp, sq = 1 / (1 + np.exp(-a.astype(np.float64))), 1 / (1 + np.exp(-b.astype(np.float64)))
  bp, bq = np.stack([sp, 1 - sp], -1), np.stack([sq, 1 - sq], -1)
  with tf.Graph().as_default(), tf.Session() as sess:
    categorical, bernoulli, same = sess.run([
        rdrop.categorical_divergence(a, b), rdrop.bernoulli_divergence(a, b),
        rdrop.categorical_divergence(a, a)])
  np.testing.assert_allclose(categorical, kl(p, q) + kl(q, p), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(bernoulli, kl(bp, bq) + kl(bq, bp), rtol=1e-5, atol=1e-6)
  assert np.all(categorical > 0) and np.all(same == 0)


@pytest.mark.parametrize("alpha", [-1.0, float("inf"), float("nan")])
def test_a_weight_out_of_range_is_refused(alpha):
  with pytest.raises(UsageError, match="--rdrop_alpha=.*give a weight of 0 or more"):
    rdrop.check_alpha(alpha)


def dropout_config(dropout):
  config = copy.deepcopy(TINY_CONFIG)
  config.hidden_dropout_prob = config.attention_probs_dropout_prob = dropout
  return config


def loss_and_passes(monkeypatch, model_fn, features, divergence_name):
  """The training loss of `model_fn` and the logits of its two passes (None, None when it
  ran one), from one session run."""
  seen = []
  original = getattr(rdrop, divergence_name)

  def recording(logits_a, logits_b):
    seen.append((logits_a, logits_b))
    return original(logits_a, logits_b)

  monkeypatch.setattr(rdrop, divergence_name, recording)
  with tf.Graph().as_default():
    tf.set_random_seed(3)
    loss = model_fn({k: tf.constant(v) for k, v in features.items()}, True)["loss"]
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      if not seen:
        return sess.run(loss), None, None
      return sess.run([loss, seen[0][0], seen[0][1]])


def classifier_cross_entropy(logits, labels, multi_label):
  if multi_label:
    p = 1 / (1 + np.exp(-logits.astype(np.float64)))
    return -(labels * np.log(p) + (1 - labels) * np.log(1 - p)).mean(-1).mean()
  p = softmax(logits.astype(np.float64))
  return -np.log(p[np.arange(len(labels)), labels]).mean()


@pytest.mark.parametrize("multi_label", [False, True])
def test_the_classifier_loss_is_r_drops_of_its_two_passes(monkeypatch, multi_label):
  features = random_batch(np.random.RandomState(5), 6)
  if multi_label:
    features["label_ids"] = (np.random.RandomState(6).rand(6, NUM_LABELS) > 0.5).astype(
        np.int32)
  name = "bernoulli_divergence" if multi_label else "categorical_divergence"
  model_fn = classifier_model.create_model_fn(dropout_config(0.3), NUM_LABELS, multi_label,
                                              rdrop_alpha=ALPHA)
  loss, first, second = loss_and_passes(monkeypatch, model_fn, features, name)
  assert np.abs(first - second).max() > 1e-3  # each pass draws its own dropout masks
  labels = features["label_ids"]
  if multi_label:
    p1, p2 = 1 / (1 + np.exp(-first.astype(np.float64))), 1 / (1 + np.exp(-second))
    d1, d2 = np.stack([p1, 1 - p1], -1), np.stack([p2, 1 - p2], -1)
    divergence = (kl(d1, d2) + kl(d2, d1)).mean(-1).mean()
  else:
    p1, p2 = softmax(first.astype(np.float64)), softmax(second.astype(np.float64))
    divergence = (kl(p1, p2) + kl(p2, p1)).mean()
  expected = (0.5 * (classifier_cross_entropy(first, labels, multi_label) +
                     classifier_cross_entropy(second, labels, multi_label)) +
              ALPHA / 4 * divergence)
  np.testing.assert_allclose(loss, expected, rtol=1e-5)
  assert ALPHA / 4 * divergence > 1e-3 * expected  # the divergence term counts


def test_without_dropout_the_loss_is_plain_cross_entropy_and_off_runs_one_pass(monkeypatch):
  features = random_batch(np.random.RandomState(5), 6)
  with_rdrop, first, second = loss_and_passes(
      monkeypatch, classifier_model.create_model_fn(dropout_config(0.0), NUM_LABELS,
                                                    rdrop_alpha=ALPHA),
      features, "categorical_divergence")
  np.testing.assert_array_equal(first, second)
  plain, none, _ = loss_and_passes(
      monkeypatch, classifier_model.create_model_fn(dropout_config(0.0), NUM_LABELS),
      features, "categorical_divergence")
  assert none is None
  # The two cross-entropies are averaged, not summed.
  np.testing.assert_allclose(with_rdrop, plain, rtol=1e-6)


def test_the_ner_loss_weights_each_tokens_divergence_like_its_cross_entropy(monkeypatch):
  rng = np.random.RandomState(8)
  num_tags = 5
  features = random_batch(rng, 4)
  del features["label_ids"]
  tag_mask = (rng.rand(4, SEQ) > 0.3).astype(np.int32) * features["input_mask"]
  features.update(tag_ids=rng.randint(0, num_tags, size=[4, SEQ]).astype(np.int32),
                  tag_mask=tag_mask,
                  # Rows weighted differently, so each row's weight must meet its own tokens.
                  loss_weight=((rng.rand(4) + 0.5) / tag_mask.sum()).astype(np.float32))
  model_fn = ner_model.create_model_fn(dropout_config(0.3), num_tags, rdrop_alpha=ALPHA)
  loss, first, second = loss_and_passes(monkeypatch, model_fn, features,
                                        "categorical_divergence")
  assert np.abs(first - second).max() > 1e-3
  mask, weight = tag_mask.astype(np.float64), features["loss_weight"][:, None]

  def token_loss(logits):
    p = softmax(logits.astype(np.float64))
    picked = np.take_along_axis(p, features["tag_ids"][..., None], -1)[..., 0]
    return (-np.log(picked) * mask * weight).sum()

  p1, p2 = softmax(first.astype(np.float64)), softmax(second.astype(np.float64))
  divergence = ((kl(p1, p2) + kl(p2, p1)) * mask * weight).sum()
  expected = 0.5 * (token_loss(first) + token_loss(second)) + ALPHA / 4 * divergence
  np.testing.assert_allclose(loss, expected, rtol=1e-5)
  assert ALPHA / 4 * divergence > 1e-3 * expected


def test_the_crf_head_refuses_r_drop():
  with pytest.raises(ValueError, match="--rdrop_alpha=400.0 with --use_crf"):
    ner_model.create_model_fn(TINY_CONFIG, 5, use_crf=True, rdrop_alpha=ALPHA)
