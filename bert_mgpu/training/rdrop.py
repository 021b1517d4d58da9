# coding=utf-8
"""R-Drop (--rdrop_alpha=a): two forward passes with independent dropout, their losses
averaged, plus a times the symmetric KL divergence of their predictions.

  loss = (CE_1 + CE_2) / 2 + a / 4 * (KL(P_1 || P_2) + KL(P_2 || P_1))

This is half the R-Drop paper's loss (CE_1 + CE_2 + a / 2 * (KL + KL)), as bert4keras
writes it: `a` keeps the paper's meaning, and with a = 0 the gradient is the average of two
passes of plain training's, not twice it, so plain's learning rate still fits. The KL terms
are per example (per token for NER), reduced like the task's cross-entropy:

  softmax classifier    KL over the classes, mean over examples
  multi-label           the Bernoulli KL of each label's sigmoid, mean over labels, then
                        over examples (as the binary cross-entropy)
  NER (tag head)        KL over the tags of each labelled token, weighted like the token
                        cross-entropy (loss_weight: the mean over the global batch's tokens)

Each head runs its two passes itself (its model_fn with is_training and labels); evaluation
and prediction run one. The passes are two graphs over the same rows, not one doubled batch:
nothing needs halving, and k towers still give one device's loss, as each tower's share is
reduced like the cross-entropy.
"""

import tensorflow.compat.v1 as tf

from bert_mgpu.errors import UsageError


def check_alpha(alpha):
  """Raises UsageError unless alpha >= 0 (and finite)."""
  if not 0.0 <= alpha < float("inf"):
    raise UsageError("--rdrop_alpha=%s: give a weight of 0 or more, e.g. 4 for classifiers "
                     "(0: off)." % alpha)


def categorical_divergence(logits_a, logits_b):
  """KL(P_a || P_b) + KL(P_b || P_a) of two softmax distributions over the last axis.

  Args:
    logits_a, logits_b: float32 [..., classes].

  Returns:
    float32 [...].
  """
  log_p = tf.nn.log_softmax(logits_a, axis=-1)
  log_q = tf.nn.log_softmax(logits_b, axis=-1)
  # KL(p || q) + KL(q || p) = sum (p - q)(log p - log q).
  return tf.reduce_sum((tf.exp(log_p) - tf.exp(log_q)) * (log_p - log_q), axis=-1)


def bernoulli_divergence(logits_a, logits_b):
  """KL(P_a || P_b) + KL(P_b || P_a) of the Bernoulli distributions sigmoid(logits), per
  element.

  Args:
    logits_a, logits_b: float32 [...].

  Returns:
    float32 [...].
  """
  # For Bernoulli p, q: KL + KL = (p - q)(logit p - logit q), and logit sigmoid(x) = x.
  return (tf.sigmoid(logits_a) - tf.sigmoid(logits_b)) * (logits_a - logits_b)


def second_pass_scope():
  """The scope of a head's second pass: the first pass's variables (and the tower's getter),
  reused; the ops stay in the current name scope."""
  return tf.variable_scope(tf.get_variable_scope(), reuse=True, auxiliary_name_scope=False)


def combined_loss(loss_a, loss_b, divergence, alpha):
  """(loss_a + loss_b) / 2 + alpha / 4 * divergence, where divergence is the symmetric KL
  (both directions summed) already reduced like the losses."""
  return 0.5 * (loss_a + loss_b) + 0.25 * alpha * divergence
