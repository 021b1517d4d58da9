# coding=utf-8
"""Knowledge distillation's loss (--teacher_dir): the student learns the teacher's softened
predictions beside the gold labels, or instead of them on unlabelled examples.

  labelled example     a * T^2 * KL(teacher_T || student_T) + (1 - a) * CE(gold)
  unlabelled example   T^2 * KL(teacher_T || student_T)

X_T is softmax(logits / T) for one label per example; for multi-label, each label's
sigmoid(logits / T) as a Bernoulli, the KL averaged over the labels as the binary
cross-entropy is. T^2 keeps the gradient's size as T changes (Hinton et al., 2015). Each
head reduces the per-example losses as it reduces its cross-entropy, so k towers still give
one device's loss.
"""

import tensorflow.compat.v1 as tf

# The features a distillation record adds: the teacher's logits [labels] (float32) and the
# label weight (1.0: labelled, 0.0: unlabelled).
TEACHER_LOGITS = "teacher_logits"
LABEL_WEIGHT = "label_weight"


def categorical_divergence(teacher_logits, student_logits, temperature):
  """T^2 * KL(softmax(teacher / T) || softmax(student / T)) over the last axis.

  Args:
    teacher_logits, student_logits: float32 [..., classes].
    temperature: T > 0.

  Returns:
    float32 [...].
  """
  log_p = tf.nn.log_softmax(teacher_logits / temperature, axis=-1)
  log_q = tf.nn.log_softmax(student_logits / temperature, axis=-1)
  return temperature ** 2 * tf.reduce_sum(tf.exp(log_p) * (log_p - log_q), axis=-1)


def bernoulli_divergence(teacher_logits, student_logits, temperature):
  """T^2 * KL(p || q) per element, for the Bernoulli p = sigmoid(teacher / T) and
  q = sigmoid(student / T).

  Args:
    teacher_logits, student_logits: float32 [...].
    temperature: T > 0.

  Returns:
    float32 [...].
  """
  teacher, student = teacher_logits / temperature, student_logits / temperature
  p = tf.sigmoid(teacher)
  # log(1 - sigmoid(x)) = log_sigmoid(-x): stable where the probabilities saturate.
  divergence = (p * (tf.log_sigmoid(teacher) - tf.log_sigmoid(student)) +
                (1.0 - p) * (tf.log_sigmoid(-teacher) - tf.log_sigmoid(-student)))
  return temperature ** 2 * divergence


def example_losses(divergence, cross_entropy, label_weight, alpha):
  """Each example's distillation loss.

  Args:
    divergence: float32 [batch], T^2 * KL already reduced over the classes (or labels).
    cross_entropy: float32 [batch], the loss against the gold label (unlabelled rows
      carry label id 0: a finite value that their weight of 0 removes).
    label_weight: float32 [batch], 1 for a labelled example, 0 for an unlabelled one.
    alpha: the teacher's share of a labelled example's loss.

  Returns:
    float32 [batch].
  """
  labelled = alpha * divergence + (1.0 - alpha) * cross_entropy
  return label_weight * labelled + (1.0 - label_weight) * divergence
