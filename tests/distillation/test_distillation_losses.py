# coding=utf-8
"""Knowledge distillation's loss (--teacher_dir, bert_mgpu/distillation/losses.py and the
classifier head's use of it in bert_mgpu/classifier/model.py) against a NumPy reference
written here from the formulas, in float64:

  labelled example     a * T^2 * KL(teacher_T || student_T) + (1 - a) * CE(gold)
  unlabelled example   T^2 * KL(teacher_T || student_T)

X_T is softmax(logits / T), or for multi-label each label's Bernoulli sigmoid(logits / T),
its KL averaged over the labels as the binary cross-entropy is; the batch loss is the mean
over the examples.

The divergences are checked for several temperatures, with saturated logits (values and
gradients finite), and their gradients against the closed form T * (q - p). The head's
loss is checked on a one-layer BERT without dropout: the student's logits are fetched in
the same session run as its loss. The teacher's logits are chosen far from the student's and
alpha > 0, and each test asserts that the teacher's term moves the expected loss far beyond
the tolerance, so a loss without it fails.
"""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import model as classifier_model
from bert_mgpu.distillation import losses
from bert_mgpu.distillation import options
import modeling
from tiny_model import NUM_LABELS, random_batch

TEMPERATURES = [1.0, 2.0, 4.0]

# One layer, hidden size 16, no dropout: is_training=True computes what inference does.
CONFIG = modeling.BertConfig(
    vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
    intermediate_size=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    max_position_embeddings=16, type_vocab_size=2)

BATCH = 6
# Which rows of the batch are labelled (1) or unlabelled (0).
LABEL_WEIGHT = np.array([1, 0, 1, 1, 0, 1], np.float32)


# ---------------------------------------------------------------------------
# The NumPy reference (float64, from the formulas).

def log_softmax(x):
  x = np.asarray(x, np.float64)
  shifted = x - x.max(-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def log_sigmoid(x):
  """log(1 / (1 + exp(-x))) = -log(1 + exp(-x)), without overflow."""
  return -np.logaddexp(0.0, -np.asarray(x, np.float64))


def sigmoid(x):
  return np.exp(log_sigmoid(x))


def reference_categorical(teacher, student, temperature):
  """T^2 * sum_k p_k (log p_k - log q_k), p = softmax(teacher / T), q = softmax(student / T)."""
  log_p = log_softmax(np.asarray(teacher, np.float64) / temperature)
  log_q = log_softmax(np.asarray(student, np.float64) / temperature)
  return temperature ** 2 * (np.exp(log_p) * (log_p - log_q)).sum(-1)


def reference_bernoulli(teacher, student, temperature):
  """T^2 * (p log(p / q) + (1 - p) log((1 - p) / (1 - q))) per element, p = sigmoid(t / T),
  q = sigmoid(s / T); log(1 - sigmoid(x)) = log_sigmoid(-x)."""
  t = np.asarray(teacher, np.float64) / temperature
  s = np.asarray(student, np.float64) / temperature
  p = sigmoid(t)
  kl = p * (log_sigmoid(t) - log_sigmoid(s)) + (1 - p) * (log_sigmoid(-t) - log_sigmoid(-s))
  return temperature ** 2 * kl


def reference_cross_entropy(logits, labels, multi_label):
  """[batch]: -log softmax at the gold label, or the binary cross-entropy averaged over the
  labels."""
  if multi_label:
    labels = np.asarray(labels, np.float64)
    return -(labels * log_sigmoid(logits) + (1 - labels) * log_sigmoid(-logits)).mean(-1)
  return -log_softmax(logits)[np.arange(len(labels)), labels]


def reference_example_losses(divergence, cross_entropy, label_weight, alpha):
  """Row by row: labelled a * KL + (1 - a) * CE, unlabelled KL alone."""
  return np.array([alpha * d + (1 - alpha) * ce if w == 1 else d
                   for d, ce, w in zip(divergence, cross_entropy, label_weight)])


def reference_distillation_loss(teacher, student, labels, label_weight, temperature, alpha,
                                multi_label):
  """The batch's mean distillation loss."""
  if multi_label:
    divergence = reference_bernoulli(teacher, student, temperature).mean(-1)
  else:
    divergence = reference_categorical(teacher, student, temperature)
  cross_entropy = reference_cross_entropy(student, labels, multi_label)
  return reference_example_losses(divergence, cross_entropy, label_weight, alpha).mean()


# ---------------------------------------------------------------------------
# The divergences.

def run(tensors):
  with tf.Session() as sess:
    return sess.run(tensors)


def divergence_and_gradient(divergence_fn, teacher, student, temperature):
  """A divergence's values and their summed gradient with respect to the student."""
  with tf.Graph().as_default():
    t, s = tf.constant(teacher), tf.constant(student)
    divergence = divergence_fn(t, s, temperature)
    gradient = tf.gradients(tf.reduce_sum(divergence), s)[0]
    return run([divergence, gradient])


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_categorical_divergence_is_t2_times_the_kl_of_the_softened_softmaxes(temperature):
  rng = np.random.RandomState(0)
  teacher = (rng.randn(7, 5) * 3).astype(np.float32)
  student = rng.randn(7, 5).astype(np.float32)
  # Large logits: exp() overflows float32 without the log-softmax.
  teacher[5] = [80.0, -60.0, 0.0, 40.0, -90.0]
  student[5] = [-70.0, 90.0, 10.0, 0.0, 50.0]
  student[6] = teacher[6]  # the same predictions: no divergence
  got, got_gradient = divergence_and_gradient(losses.categorical_divergence, teacher, student,
                                              temperature)
  expected = reference_categorical(teacher, student, temperature)
  assert got.shape == (7,) and np.all(np.isfinite(got)), got
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
  assert expected[5] > 10 and expected[:5].min() > 1e-2 and abs(got[6]) < 1e-6
  # d/ds of T^2 KL(p || q) = T (q - p).
  p = np.exp(log_softmax(teacher.astype(np.float64) / temperature))
  q = np.exp(log_softmax(student.astype(np.float64) / temperature))
  np.testing.assert_allclose(got_gradient, temperature * (q - p), rtol=1e-4, atol=1e-5)


def test_categorical_divergence_reduces_only_the_last_axis():
  rng = np.random.RandomState(1)
  teacher, student = rng.randn(2, 3, 4).astype(np.float32), rng.randn(2, 3, 4).astype(
      np.float32)
  with tf.Graph().as_default():
    got = run(losses.categorical_divergence(teacher, student, 2.0))
  assert got.shape == (2, 3)
  np.testing.assert_allclose(got, reference_categorical(teacher, student, 2.0), rtol=1e-5,
                             atol=1e-6)


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_bernoulli_divergence_is_t2_times_each_labels_kl_and_stable_when_saturated(
    temperature):
  rng = np.random.RandomState(2)
  teacher = (rng.randn(4, 6) * 3).astype(np.float32)
  student = rng.randn(4, 6).astype(np.float32)
  # Saturated sigmoids in float32 (sigmoid(40) rounds to 1): both sides, opposite signs,
  # and equal saturated logits (no divergence: not 0 * log 0 = NaN).
  teacher[3] = [60.0, -60.0, 90.0, -90.0, 100.0, -100.0]
  student[3] = [-60.0, 60.0, 30.0, -30.0, 100.0, -100.0]
  got, got_gradient = divergence_and_gradient(losses.bernoulli_divergence, teacher, student,
                                              temperature)
  expected = reference_bernoulli(teacher, student, temperature)
  assert got.shape == (4, 6) and np.all(np.isfinite(got)), got
  assert np.all(np.isfinite(got_gradient)), got_gradient
  # float32 logits / T: a relative 1e-7 of 100 is an absolute 1e-5 in each log.
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4 * temperature ** 2)
  assert expected[3, 0] > 10 and expected[:3].min() > 1e-4 and abs(got[3, 4:]).max() < 1e-5
  # d/ds of T^2 KL(p || q) = T (q - p).
  p = sigmoid(teacher.astype(np.float64) / temperature)
  q = sigmoid(student.astype(np.float64) / temperature)
  np.testing.assert_allclose(got_gradient, temperature * (q - p), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------
# Each example's loss.

@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0])
def test_example_losses_mix_the_teachers_term_and_the_gold_labels_only_where_labelled(alpha):
  rng = np.random.RandomState(3)
  divergence = (rng.rand(BATCH) * 5 + 1).astype(np.float32)
  # Far from the divergence, and large on unlabelled rows, where it must not count.
  cross_entropy = (rng.rand(BATCH) * 5 + 20).astype(np.float32)
  cross_entropy[LABEL_WEIGHT == 0] = 1e6
  with tf.Graph().as_default():
    got = run(losses.example_losses(tf.constant(divergence), tf.constant(cross_entropy),
                                    tf.constant(LABEL_WEIGHT), alpha))
  expected = reference_example_losses(divergence, cross_entropy, LABEL_WEIGHT, alpha)
  np.testing.assert_allclose(got, expected, rtol=1e-6)
  # Unlabelled rows are the divergence alone, whatever alpha; labelled ones with alpha > 0
  # differ from their cross-entropy by more than the tolerance (the teacher's term counts).
  np.testing.assert_allclose(got[LABEL_WEIGHT == 0], divergence[LABEL_WEIGHT == 0])
  if alpha > 0:
    labelled = LABEL_WEIGHT == 1
    assert np.abs(expected[labelled] - (1 - alpha) * cross_entropy[labelled]).min() > 0.1


# ---------------------------------------------------------------------------
# The classifier head's training loss.

def distillation_options(temperature, alpha):
  return options.DistillationOptions(teacher_dir="teacher", temperature=temperature,
                                     alpha=alpha, unlabeled_file=None, teacher_layers=None)


def head_batch(multi_label, seed=5):
  """A batch of random inputs and labels, the teacher's logits (large, so far from a new
  head's near-zero logits) and the label weights."""
  rng = np.random.RandomState(seed)
  features = random_batch(rng, BATCH)
  if multi_label:
    features["label_ids"] = (rng.rand(BATCH, NUM_LABELS) > 0.5).astype(np.int32)
  features[losses.TEACHER_LOGITS] = (rng.randn(BATCH, NUM_LABELS) * 6).astype(np.float32)
  features[losses.LABEL_WEIGHT] = LABEL_WEIGHT
  return features


def head_outputs(model_fn, features, is_training):
  """loss, per_example_loss and logits of one session run."""
  with tf.Graph().as_default():
    tf.set_random_seed(3)
    outputs = model_fn({k: tf.constant(v) for k, v in features.items()}, is_training)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      return sess.run({k: outputs[k] for k in ("loss", "per_example_loss", "logits")})


@pytest.mark.parametrize("multi_label", [False, True])
@pytest.mark.parametrize("temperature,alpha", [(1.0, 0.3), (2.0, 0.0), (4.0, 0.7), (2.0, 1.0)])
def test_the_classifiers_training_loss_is_the_mean_distillation_loss(multi_label, temperature,
                                                                      alpha):
  features = head_batch(multi_label)
  model_fn = classifier_model.create_model_fn(CONFIG, NUM_LABELS, multi_label,
                                              distillation=distillation_options(temperature,
                                                                                alpha))
  got = head_outputs(model_fn, features, True)
  student, labels = got["logits"], features["label_ids"]
  expected = reference_distillation_loss(features[losses.TEACHER_LOGITS], student, labels,
                                         LABEL_WEIGHT, temperature, alpha, multi_label)
  np.testing.assert_allclose(got["loss"], expected, rtol=1e-5)
  # per_example_loss stays the cross-entropy (the metrics').
  cross_entropy = reference_cross_entropy(student, labels, multi_label)
  np.testing.assert_allclose(got["per_example_loss"], cross_entropy, rtol=1e-5, atol=1e-6)
  # The teacher's term counts: without it the loss would be far outside the tolerance.
  without_teacher = reference_example_losses(np.zeros(BATCH), cross_entropy, LABEL_WEIGHT,
                                             alpha).mean()
  assert abs(expected - without_teacher) > 0.01 * abs(expected), (expected, without_teacher)
  assert abs(expected - cross_entropy.mean()) > 0.01 * abs(expected)


@pytest.mark.parametrize("multi_label", [False, True])
def test_without_the_teachers_logits_or_outside_training_the_loss_is_the_cross_entropy(
    multi_label):
  features = head_batch(multi_label)
  model_fn = classifier_model.create_model_fn(CONFIG, NUM_LABELS, multi_label,
                                              distillation=distillation_options(2.0, 0.5))
  plain = {k: v for k, v in features.items()
           if k not in (losses.TEACHER_LOGITS, losses.LABEL_WEIGHT)}
  for batch, is_training in ((plain, True), (features, False)):
    got = head_outputs(model_fn, batch, is_training)
    cross_entropy = reference_cross_entropy(got["logits"], features["label_ids"], multi_label)
    np.testing.assert_allclose(got["loss"], cross_entropy.mean(), rtol=1e-5)
    # ... and that differs clearly from the distillation loss of the same logits.
    distilled = reference_distillation_loss(features[losses.TEACHER_LOGITS], got["logits"],
                                            features["label_ids"], LABEL_WEIGHT, 2.0, 0.5,
                                            multi_label)
    assert abs(distilled - cross_entropy.mean()) > 0.01 * distilled


def test_without_distillation_settings_the_teachers_logits_are_ignored():
  features = head_batch(False)
  got = head_outputs(classifier_model.create_model_fn(CONFIG, NUM_LABELS), features, True)
  cross_entropy = reference_cross_entropy(got["logits"], features["label_ids"], False)
  np.testing.assert_allclose(got["loss"], cross_entropy.mean(), rtol=1e-5)
