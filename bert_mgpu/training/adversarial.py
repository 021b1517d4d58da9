# coding=utf-8
"""Adversarial training on the token-embedding table (--adversarial=fgm|pgd).

The attack perturbs bert/embeddings/word_embeddings alone (as bert4keras does), by a step
along g / ||g||, where g is the loss gradient with respect to the table over the whole
global batch: every tower of every worker together, rows that several towers share summed
before the norm. multigpu.py builds the passes and reduces g; this module holds the
arithmetic.

FGM (one adversarial pass):
  r = epsilon * g / ||g||                     g at the clean weights
  gradient = clean gradient + gradient of the loss at table + r

PGD with K steps (K adversarial passes), as UER-py's PGD:
  r_0 = 0;  r_t = P(r_(t-1) + alpha * g_(t-1) / ||g_(t-1)||),  t = 1..K
  g_0 at the clean weights, g_t at table + r_t (for t < K only the table's gradient is taken)
  P scales r back onto the ball ||r|| <= epsilon when it leaves it
  gradient = clean gradient + gradient of the loss at table + r_K
  (only the last adversarial gradient is added; g_1..g_(K-1) only steer the attack)

The table is never written: a pass reads table + r through the tower's variable getter, so
nothing is restored and the weights are bit-identical after the step. A zero or non-finite
||g|| gives r = 0 (under fp16 the update with such a gradient is skipped anyway); g is taken
after fp16's loss scale is divided out.
"""

import collections

import tensorflow.compat.v1 as tf

from bert_mgpu.errors import UsageError

METHODS = ("none", "fgm", "pgd")

# The perturbed variable, by its plain (Google) name.
TABLE_NAME = "bert/embeddings/word_embeddings"


class Attack(collections.namedtuple("Attack", ["method", "epsilon", "alpha", "steps"])):
  """An adversarial method and its settings.

  Fields:
    method: "fgm" or "pgd".
    epsilon: FGM's step, PGD's radius (--adversarial_epsilon).
    alpha: PGD's step (--adversarial_alpha).
    steps: PGD's steps (--adversarial_steps); FGM takes one.
  """

  @property
  def passes(self):
    """Adversarial forward and backward passes per (micro-)batch, after the clean one."""
    return 1 if self.method == "fgm" else self.steps

  def describe(self):
    """For the start-of-run log."""
    if self.method == "fgm":
      return "adversarial training FGM on the token embeddings (epsilon %g)" % self.epsilon
    return ("adversarial training PGD on the token embeddings (%d steps of %g in a ball of "
            "radius %g)" % (self.steps, self.alpha, self.epsilon))


def make_attack(method, epsilon=1.0, alpha=0.3, steps=3):
  """The Attack of the --adversarial flags, or None for "none".

  Raises:
    UsageError: an unknown method, or a setting out of range.
  """
  if method not in METHODS:
    raise UsageError("--adversarial=%s: use one of %s." % (method, "|".join(METHODS)))
  if not 0 < epsilon < float("inf"):
    raise UsageError("--adversarial_epsilon=%s: give a positive size, e.g. 1.0." % epsilon)
  if not 0 < alpha <= (epsilon if method == "pgd" else float("inf")):
    raise UsageError("--adversarial_alpha=%s: PGD's step must be positive and at most "
                     "--adversarial_epsilon=%s, e.g. %g." % (alpha, epsilon,
                                                             min(0.3, epsilon)))
  if steps < 1:
    raise UsageError("--adversarial_steps=%s: PGD takes at least 1 step, e.g. 3." % steps)
  if method == "none":
    return None
  return Attack(method, float(epsilon), float(alpha), int(steps))


# The gradient of perturbed(): the table's as it comes. TF 1.15's Add gradient would turn the
# gathered rows (IndexedSlices) into a dense [vocab, hidden] tensor; TF 2.x's keeps them.
_PASS_THROUGH_GRADIENT = "BertMgpuPerturbedTableGradient"


@tf.RegisterGradient(_PASS_THROUGH_GRADIENT)
def _pass_through_gradient(unused_op, grad):
  return grad, None


def perturbed(value, perturbation):
  """value + perturbation, differentiable in value alone, its gradient passed through as it
  comes (sparse rows stay sparse on both TensorFlows)."""
  with tf.get_default_graph().gradient_override_map({"Add": _PASS_THROUGH_GRADIENT,
                                                       "AddV2": _PASS_THROUGH_GRADIENT}):
    return tf.add(value, tf.stop_gradient(perturbation))


def table_index(variables):
  """The index of the token-embedding table in a tower's trained variables (tower 0's:
  plain names, also under a replicated plan).

  Raises:
    ValueError: the model has no such table.
  """
  for index, variable in enumerate(variables):
    if variable.op.name == TABLE_NAME:
      return index
  raise ValueError("Adversarial training perturbs %s, which this model does not train." %
                   TABLE_NAME)


def next_perturbation(attack, perturbation, gradient):
  """One attack step.

  Args:
    attack: the Attack.
    perturbation: r_(t-1), float32 [vocab, hidden], or None before the first step.
    gradient: g_(t-1), the global batch's gradient of the loss with respect to the table
      at r_(t-1), dense float32 [vocab, hidden], unscaled.

  Returns:
    r_t, float32 [vocab, hidden].
  """
  norm = tf.norm(gradient)
  usable = tf.logical_and(tf.math.is_finite(norm), norm > 0)
  size = attack.epsilon if attack.method == "fgm" else attack.alpha
  factor = tf.where(usable, size / tf.where(usable, norm, 1.0), 0.0)
  # multiply_no_nan: a factor of 0 zeroes even an infinite or NaN gradient.
  step = tf.math.multiply_no_nan(gradient, factor)
  if attack.method == "fgm":
    return step
  moved = step if perturbation is None else perturbation + step
  moved_norm = tf.norm(moved)
  return moved * tf.minimum(1.0, attack.epsilon / tf.maximum(moved_norm, 1e-30))
