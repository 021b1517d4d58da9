# coding=utf-8
"""Mixed precision: the compute dtypes of --precision, and dynamic loss scaling for fp16.

Master weights stay float32 and keep Google's names; towers read them cast to the compute
dtype (multigpu.py), while LayerNorm, the attention softmax and the losses stay float32
(modeling.py and the heads). bfloat16 has float32's exponent range, so it needs no loss
scaling. float16 does: small gradients underflow to 0 unless the loss is scaled up before
differentiation and the gradients scaled back down after, and a scale that is too large
overflows to inf. DynamicLossScale finds the largest scale that does not overflow.
"""

import collections

import tensorflow.compat.v1 as tf

PRECISIONS = collections.OrderedDict([
    ("fp32", tf.float32), ("bf16", tf.bfloat16), ("fp16", tf.float16)])

# Substrings of the variables that stay float32 in every precision: layer_norm computes
# in float32 and reads its gamma and beta as they are (the optimizer's weight-decay
# exclusions use the same names). The word embedding table is read float32 too:
# modeling.embedding_lookup gathers float32 rows and casts only those, instead of casting
# the whole [vocab, hidden] table every step; BertModel.get_embedding_table() returns it
# in the compute dtype for the tied masked-LM output.
FLOAT32_VARIABLE_PATTERNS = ("LayerNorm", "layer_norm", "word_embeddings")


def compute_dtype(precision):
  """The dtype the towers compute in for --precision ("fp32", "bf16" or "fp16")."""
  if precision not in PRECISIONS:
    raise ValueError("unknown precision %r: use one of %s" % (precision, ", ".join(PRECISIONS)))
  return PRECISIONS[precision]


def cast_for_compute(value, variable_name, dtype):
  """`value` (a variable's float32 read) cast to `dtype`, unless it must stay float32."""
  if dtype == tf.float32 or value.dtype.base_dtype != tf.float32:
    return value
  if any(pattern in variable_name for pattern in FLOAT32_VARIABLE_PATTERNS):
    return value
  return tf.cast(value, dtype)


class DynamicLossScale(object):
  """The loss scale of fp16 training, kept in two checkpointed variables.

  Each update: if the unscaled gradients are all finite, the update is applied and a
  counter of good steps grows; after `growth_interval` good steps in a row the scale
  doubles. If any gradient is inf or NaN, the update is skipped (global_step does not
  move), the scale halves (not below `minimum`) and the counter restarts.

  Variables (not trainable, saved with the model so a resumed run keeps its scale):
    loss_scaling/scale (float32), loss_scaling/good_steps (int64), and
    loss_scaling/steps_attempted (int64): updates applied or skipped. A skipped update
    still consumed its batches, so a resumed run skips steps_attempted batches of data,
    not global_step.
  """

  def __init__(self, initial_scale=2.0 ** 15, growth_interval=2000, minimum=1.0):
    self.growth_interval = growth_interval
    self.minimum = minimum
    with tf.variable_scope("loss_scaling", reuse=tf.AUTO_REUSE):
      self.scale = tf.get_variable(
          "scale", [], tf.float32, tf.constant_initializer(initial_scale), trainable=False,
          use_resource=True)
      self.good_steps = tf.get_variable(
          "good_steps", [], tf.int64, tf.zeros_initializer(), trainable=False,
          use_resource=True)
      self.steps_attempted = tf.get_variable(
          "steps_attempted", [], tf.int64, tf.zeros_initializer(), trainable=False,
          use_resource=True)

  def scale_loss(self, loss):
    return loss * self.scale

  def unscale(self, grad):
    """A gradient of the scaled loss, divided by the scale (IndexedSlices stay sparse)."""
    if grad is None:
      return None
    inverse = 1.0 / self.scale
    if isinstance(grad, tf.IndexedSlices):
      return tf.IndexedSlices(grad.values * inverse, grad.indices, grad.dense_shape)
    return grad * inverse

  def update(self, grads_finite):
    """The op that moves the scale after an update; `grads_finite` is a bool scalar."""
    good = self.good_steps.read_value() + 1
    grow = tf.logical_and(grads_finite, good >= self.growth_interval)
    new_scale = tf.where_v2(
        grads_finite,
        tf.where_v2(grow, self.scale.read_value() * 2.0, self.scale.read_value()),
        tf.maximum(self.scale.read_value() * 0.5, self.minimum))
    new_good = tf.where_v2(tf.logical_and(grads_finite, tf.logical_not(grow)), good,
                           tf.zeros_like(good))
    return tf.group(self.scale.assign(new_scale, read_value=False),
                    self.good_steps.assign(new_good, read_value=False),
                    self.steps_attempted.assign_add(1, read_value=False))


STEPS_ATTEMPTED_VARIABLE = "loss_scaling/steps_attempted"
