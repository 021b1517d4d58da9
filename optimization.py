# coding=utf-8
"""Learning-rate schedule, gradient update and optimizers (AdamW, RAdam, LAMB).

`create_optimizer` keeps the signature of Google's BERT `optimization.py` and, with
the default "adamw", performs the same update: the same learning-rate schedule,
the same "AdamWeightDecay" formula (no bias correction), clipping by global norm
1.0 and the same slot names (`<var>/adam_m`, `<var>/adam_v`), so checkpoints move
freely between Google's code and this one. "adamw" with bias_correction=True is
torch.optim.AdamW's arithmetic with the same slots, decay and exclusions.

The multi-GPU tower builder averages gradients itself and then calls
`apply_gradients`, which does the rest: densify, wait for every gradient, clip,
update, and only then increment the global step.

The optimizers are plain classes (not tf.train.Optimizer subclasses). Each has
`apply_gradients(grads_and_vars, global_step)`, which updates parameters and
slots but never touches the global step; it only reads it to learn the step
number t = global_step + 1 of the update being applied.
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

import math
import numbers
import re

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu.training import weight_averages

OPTIMIZER_NAMES = ("adamw", "radam", "lamb")

# Substrings (searched with re.search, as Google does) of variable names that get
# no weight decay: LayerNorm gammas/betas and biases.
DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")


def learning_rate_schedule(init_lr, num_train_steps, num_warmup_steps, global_step=None):
  """Google's BERT learning rate: linear warmup, then linear decay to zero.

  While step < num_warmup_steps (and num_warmup_steps > 0) the rate is
  `init_lr * step / num_warmup_steps`. Otherwise it is
  `init_lr * (1 - min(step, num_train_steps) / num_train_steps)`: a power-1
  polynomial decay counted from step 0 (not from the end of warmup) that stays
  at 0 past the end.

  Args:
    init_lr: Python float, the peak learning rate.
    num_train_steps: Positive int, the step at which the rate reaches 0.
    num_warmup_steps: Int >= 0, the number of warmup steps (0 = no warmup).
    global_step: Integer scalar tensor or variable holding the current step.
      None uses `tf.train.get_or_create_global_step()`.

  Returns:
    float32 scalar tensor, the learning rate for the current step.

  Raises:
    ValueError: if an argument is out of range.
  """
  init_lr = _check_number("init_lr", init_lr, minimum=0.0)
  _check_int("num_train_steps", num_train_steps, minimum=1)
  _check_int("num_warmup_steps", num_warmup_steps, minimum=0)
  if global_step is None:
    global_step = tf.train.get_or_create_global_step()

  with tf.name_scope("learning_rate"):
    step = tf.cast(global_step, tf.float32)
    # (N - min(step, N)) is exact for integer steps below 2**24, so the only
    # rounding is one division: the rate matches a float64 reference to ~1e-7.
    steps_left = float(num_train_steps) - tf.minimum(step, float(num_train_steps))
    decayed_lr = init_lr * (steps_left / float(num_train_steps))
    if num_warmup_steps == 0:
      return tf.identity(decayed_lr, name="learning_rate")
    warmup_lr = init_lr * (step / float(num_warmup_steps))
    is_warmup = step < float(num_warmup_steps)
    return tf.where_v2(is_warmup, warmup_lr, decayed_lr, name="learning_rate")


def variable_base_name(var):
  """Returns the name of `var` without the ":0" output suffix."""
  match = re.match(r"^(.*):\d+$", var.name)
  if match is not None:
    return match.group(1)
  return var.name


def get_or_create_moment_slots(var):
  """Returns the (adam_m, adam_v) slot variables of `var`, creating them once.

  The slots are float32 zeros, non-trainable resource variables named
  `<var name>/adam_m` and `<var name>/adam_v` exactly, whatever variable scope,
  name scope, custom getter, partitioner or control dependencies the caller is
  in: they are created in a fresh root variable scope with AUTO_REUSE, so a
  second call for the same variable returns the same slots. Each slot is
  colocated with its variable.

  Args:
    var: A float32 tf.Variable (resource or ref).

  Returns:
    Tuple (adam_m, adam_v) of variables with the shape of `var`.
  """
  base_name = variable_base_name(var)
  shape = var.get_shape()
  if not shape.is_fully_defined():
    raise ValueError(
        "optimization.py: variable %r has shape %s, which is not fully defined; "
        "optimizer slots need a static shape." % (base_name, shape))
  root_scope = tf.VariableScope(reuse=tf.AUTO_REUSE, name="")
  # control_dependencies(None): the slot initializers must not wait for (and
  # so require feeding of) the gradients that the caller may be waiting on.
  # colocate_with alone is not enough: variable creation re-applies the caller's
  # device scope, so the slot's device is also set to the variable's own (None
  # clears the caller's device scope when the variable has no device).
  with tf.variable_scope(root_scope), tf.control_dependencies(None), \
      var.op.graph.colocate_with(var.op), tf.device(var.device or None):
    slots = []
    for suffix in ("adam_m", "adam_v"):
      slots.append(tf.get_variable(
          name=base_name + "/" + suffix,
          shape=shape,
          dtype=tf.float32,
          initializer=tf.zeros_initializer(),
          trainable=False,
          use_resource=True))
  return slots[0], slots[1]


class _MomentOptimizer(object):
  """Shared plumbing of the three optimizers (slots, weight decay, assigns).

  Subclasses implement `_step_constants` (scalars that depend only on the step
  number) and `_update_direction` (the update before the learning rate is
  applied), and may override `_scale_update`.
  """

  default_name = "MomentOptimizer"

  def __init__(self, learning_rate, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999,
               epsilon=1e-6, exclude_from_weight_decay=DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
               name=None):
    """Stores the hyper-parameters.

    Args:
      learning_rate: Python float or float32 scalar tensor.
      weight_decay_rate: Float >= 0, decoupled weight decay factor.
      beta_1: Float in [0, 1), decay rate of the first moment.
      beta_2: Float in [0, 1), decay rate of the second moment.
      epsilon: Float >= 0 added to the root of the second moment.
      exclude_from_weight_decay: Sequence of patterns (re.search) for variable
        names that get no weight decay.
      name: Name scope of the update ops.
    """
    self.learning_rate = learning_rate
    self.weight_decay_rate = _check_number("weight_decay_rate", weight_decay_rate, minimum=0.0)
    self.beta_1 = _check_number("beta_1", beta_1, minimum=0.0, below=1.0)
    self.beta_2 = _check_number("beta_2", beta_2, minimum=0.0, below=1.0)
    self.epsilon = _check_number("epsilon", epsilon, minimum=0.0)
    if isinstance(exclude_from_weight_decay, str):
      raise ValueError(
          "optimization.py: exclude_from_weight_decay must be a list of patterns, "
          "got the string %r; wrap it in a list." % exclude_from_weight_decay)
    self.exclude_from_weight_decay = tuple(exclude_from_weight_decay or ())
    self.name = name or self.default_name

  def uses_weight_decay(self, var_name):
    """True unless weight decay is 0 or `var_name` matches an excluded pattern."""
    if self.weight_decay_rate == 0.0:
      return False
    for pattern in self.exclude_from_weight_decay:
      if re.search(pattern, var_name) is not None:
        return False
    return True

  def apply_gradients(self, grads_and_vars, global_step=None, apply_if=None, grad_scale=None,
                      learning_rate_scales=None):
    """Updates every variable and its slots; does NOT change `global_step`.

    Args:
      grads_and_vars: Iterable of (gradient, variable). Pairs whose gradient is
        None are skipped; tf.IndexedSlices gradients are made dense.
      global_step: Integer scalar variable/tensor; the update applied is step
        t = global_step + 1. Only read (bias correction, rectification).
      apply_if: optional bool scalar Tensor; when False, every variable and
        slot keeps its value (a skipped fp16 step whose gradients overflowed).
      grad_scale: optional float32 scalar Tensor every gradient is multiplied by
        first (the global-norm clip, see clip_scale).
      learning_rate_scales: optional dict variable name (var.op.name) -> float: the
        variable's learning rate is the schedule's times this (1 for a name not in it).
        It multiplies the whole step, weight decay included, after LAMB's trust ratio
        (which therefore does not see it); slots are updated as without it.

    Returns:
      An op that performs all parameter and slot assignments.
    """
    pairs = [(grad, var) for grad, var in grads_and_vars if grad is not None]
    with tf.name_scope(self.name):
      learning_rate = tf.convert_to_tensor(self.learning_rate, dtype=tf.float32,
                                           name="learning_rate")
      constants = self._step_constants(global_step)
      assign_ops = []
      for grad, var in pairs:
        _check_float32_variable(var)
        grad = tf.convert_to_tensor(grad)  # IndexedSlices become dense here
        var_name = variable_base_name(var)
        m_slot, v_slot = get_or_create_moment_slots(var)
        var_learning_rate = learning_rate
        lr_scale = (learning_rate_scales or {}).get(var.op.name, 1.0)
        if lr_scale != 1.0:
          var_learning_rate = learning_rate * lr_scale
        fused = self._fused_update(grad, var, (m_slot, v_slot), var_learning_rate, apply_if,
                                   grad_scale, constants)
        if fused is not None:
          assign_ops.append(fused)
          continue
        if grad_scale is not None:
          grad = grad * grad_scale

        # Each value is read once; the new values are computed from these reads.
        param = var.read_value()
        next_m = self.beta_1 * m_slot.read_value() + (1.0 - self.beta_1) * grad
        next_v = self.beta_2 * v_slot.read_value() + (1.0 - self.beta_2) * tf.square(grad)

        update = self._update_direction(next_m, next_v, constants)
        if self.uses_weight_decay(var_name):
          # Decoupled weight decay (Loshchilov & Hutter): added to the update,
          # never to the gradient, so it is not scaled by the Adam denominator.
          update += self.weight_decay_rate * param
        update = self._scale_update(update, param)
        next_param = param - var_learning_rate * update
        if apply_if is not None:
          # Selects, so NaN from inf gradients never reaches the kept values.
          next_param = tf.where_v2(apply_if, next_param, param)
          next_m = tf.where_v2(apply_if, next_m, m_slot.read_value())
          next_v = tf.where_v2(apply_if, next_v, v_slot.read_value())

        assign_ops.extend([
            var.assign(next_param, read_value=False),
            m_slot.assign(next_m, read_value=False),
            v_slot.assign(next_v, read_value=False),
        ])
      return tf.group(*assign_ops, name="update")

  def _step_constants(self, global_step):
    """Returns a dict of float32 scalars that depend only on the step number."""
    del global_step
    return {}

  def _fused_update(self, grad, var, slots, learning_rate, apply_if, grad_scale, constants):
    """Hook: an op doing the whole update of `var` with fused kernels, or None (then the
    update is built from elementwise ops)."""
    del grad, var, slots, learning_rate, apply_if, grad_scale, constants
    return None

  def _update_direction(self, next_m, next_v, constants):
    """Returns the update (before weight decay and learning rate)."""
    raise NotImplementedError

  def _scale_update(self, update, param):
    """Hook for per-variable scaling of the full update (LAMB's trust ratio)."""
    del param
    return update

  def _bias_corrections(self, global_step):
    """Returns (t, 1/(1-beta_1^t), 1/(1-beta_2^t), beta_2^t) as float64 scalars.

    Computed in float64: in float32, 1 - beta_2^t for beta_2 = 0.999 and small t
    keeps only ~4 significant digits, which RAdam's rho_t would amplify.
    """
    if global_step is None:
      raise ValueError(
          "optimization.py: %s needs global_step to know the step number for bias "
          "correction; pass the global step variable." % type(self).__name__)
    step = tf.cast(global_step, tf.float64) + 1.0  # t, the step being applied
    beta_1_power = tf.pow(tf.constant(self.beta_1, tf.float64), step)
    beta_2_power = tf.pow(tf.constant(self.beta_2, tf.float64), step)
    return step, 1.0 / (1.0 - beta_1_power), 1.0 / (1.0 - beta_2_power), beta_2_power


class AdamWeightDecayOptimizer(_MomentOptimizer):
  """Google's BERT "AdamWeightDecay": Adam with decoupled weight decay and NO
  bias correction; with bias_correction=True, torch.optim.AdamW.

  For gradient g and parameter p (lr = learning rate, wd = weight_decay_rate,
  wd = 0 for names matching exclude_from_weight_decay):

    m = beta_1 * m + (1 - beta_1) * g
    v = beta_2 * v + (1 - beta_2) * g^2
    u = m / (sqrt(v) + epsilon) + wd * p
    p = p - lr * u

  Without bias_correction the global step is not used, and the first updates are
  (1 - beta_1^t) / sqrt(1 - beta_2^t) times a corrected Adam's (3.2x at t = 1,
  6.5x at t = 10, 1.3x at t = 1000), which can keep a model trained from random
  weights on the class-prior plateau (docs/TRAINING.md).

  With bias_correction, at step t = global_step + 1 (torch.optim.AdamW):

    m_hat = m / (1 - beta_1^t);  v_hat = v / (1 - beta_2^t)
    u = m_hat / (sqrt(v_hat) + epsilon) + wd * p

  computed as the same identity written with the raw moments,
  u = c * m / (sqrt(v) + epsilon * s) + wd * p with s = sqrt(1 - beta_2^t) and
  c = s / (1 - beta_1^t) (float64 scalars), so the fused kernel below serves both.
  """

  default_name = "AdamWeightDecay"

  def __init__(self, learning_rate, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999,
               epsilon=1e-6, exclude_from_weight_decay=DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
               name=None, bias_correction=False):
    """See _MomentOptimizer.__init__; bias_correction: Adam's (torch.optim.AdamW)."""
    super(AdamWeightDecayOptimizer, self).__init__(
        learning_rate, weight_decay_rate=weight_decay_rate, beta_1=beta_1, beta_2=beta_2,
        epsilon=epsilon, exclude_from_weight_decay=exclude_from_weight_decay, name=name)
    self.bias_correction = bool(bias_correction)

  def _step_constants(self, global_step):
    """Without bias correction: step scale 1 and the epsilon given (Python floats, so the
    graph is Google's). With it: c and epsilon * s of the class docstring."""
    if not self.bias_correction:
      return {"step_scale": 1.0, "scaled_epsilon": self.epsilon}
    _, m_correction, v_correction, _ = self._bias_corrections(global_step)
    root_v_correction = tf.sqrt(v_correction)  # 1 / s
    return {
        "step_scale": tf.cast(m_correction / root_v_correction, tf.float32),
        "scaled_epsilon": tf.cast(self.epsilon / root_v_correction, tf.float32),
    }

  def _update_direction(self, next_m, next_v, constants):
    direction = next_m / (tf.sqrt(next_v) + constants["scaled_epsilon"])
    if self.bias_correction:
      direction *= constants["step_scale"]
    return direction

  def _fused_update(self, grad, var, slots, learning_rate, apply_if, grad_scale, constants):
    """The same update with TensorFlow's fused Adam kernel (CPU and GPU), for resource
    variables without a skip condition (not fp16).

    p - lr * (m / (sqrt(v) + eps) + wd * p) is computed as the weight decay
    p' = p * (1 - lr * wd), then ResourceApplyAdam on p' with beta_1^t = beta_2^t = 0, which
    turns its bias-correction factor sqrt(1 - beta_2^t) / (1 - beta_1^t) into exactly 1:
    p' - lr * m / (sqrt(v) + eps), m and v updated in the same pass. One kernel reads and
    writes p, m, v and g once, where the elementwise formula takes about 15 passes.

    The kernel computes 1 - beta_2 in float32, and 1 - 0.999f is 1.3e-5 away from 0.001, so
    the gradient is scaled by k = sqrt((1 - beta_2) / (1 - beta_2 in float32)) (in the same
    multiplication as the clip): v then gets exactly (1 - beta_2) g^2. m gets k (1 - beta_1) g,
    so the adam_m slot holds k m (k - 1 = 6.4e-6 for beta_2 = 0.999; below the 1e-5 relative
    tolerance), and the kernel's learning rate is lr / k, which makes the step on p exact.

    With bias correction the kernel's own correction stays off (its beta powers would be
    float32, 1 - 0.999f^1 off by 1.3e-5): the step scale c multiplies its learning rate and
    epsilon * s is its epsilon, both from float64 (see the class docstring).
    """
    if apply_if is not None or getattr(var, "handle", None) is None:
      return None
    m_slot, v_slot = slots
    one_minus_beta_2 = float(np.float32(1.0) - np.float32(self.beta_2))  # exact in float32
    if one_minus_beta_2 == 0.0:
      return None
    compensation = math.sqrt((1.0 - self.beta_2) / one_minus_beta_2)
    scale = compensation if grad_scale is None else grad_scale * compensation
    decay = []
    if self.uses_weight_decay(variable_base_name(var)):
      decay = [var.assign(var.read_value() * (1.0 - learning_rate * self.weight_decay_rate),
                          read_value=False)]
    kernel_lr = learning_rate / compensation
    if self.bias_correction:
      kernel_lr *= constants["step_scale"]
    with tf.control_dependencies(decay):
      zero = tf.constant(0.0, tf.float32)
      return tf.raw_ops.ResourceApplyAdam(
          var=var.handle, m=m_slot.handle, v=v_slot.handle, beta1_power=zero,
          beta2_power=zero, lr=kernel_lr,
          beta1=tf.constant(self.beta_1, tf.float32), beta2=tf.constant(self.beta_2, tf.float32),
          epsilon=tf.convert_to_tensor(constants["scaled_epsilon"], tf.float32),
          grad=grad * scale, use_locking=False, use_nesterov=False)


class RAdamOptimizer(_MomentOptimizer):
  """Rectified Adam (Liu et al. 2019, "On the Variance of the Adaptive Learning
  Rate and Beyond") with decoupled weight decay.

  At step t = global_step + 1 (wd = 0 for excluded names):

    m = beta_1 * m + (1 - beta_1) * g
    v = beta_2 * v + (1 - beta_2) * g^2
    m_hat = m / (1 - beta_1^t)
    rho_inf = 2 / (1 - beta_2) - 1
    rho_t = rho_inf - 2 t beta_2^t / (1 - beta_2^t)
    if rho_t >= rectify_threshold:
      r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t))
      u = r_t * m_hat / (sqrt(v / (1 - beta_2^t)) + epsilon)
    else:
      u = m_hat                       (plain momentum while the variance of the
                                       adaptive rate is not yet tractable)
    u = u + wd * p
    p = p - lr * u

  rectify_threshold defaults to 5, the threshold of the authors' reference code
  (`N_sma >= 5`, "more conservative since it's an approximated value"); the
  paper's text uses rho_t > 4. For small t, rho_t ~ t - (1 - beta_2) t^2 / 6;
  with beta_2 = 0.999, rho_5 = 4.996 and rho_6 = 5.994, so steps 1-5 use
  momentum and adaptive steps start at t = 6.
  """

  default_name = "RAdam"

  def __init__(self, learning_rate, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999,
               epsilon=1e-6, exclude_from_weight_decay=DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
               name=None, rectify_threshold=5.0):
    """See _MomentOptimizer.__init__; rectify_threshold must be >= 4 (r_t is
    only real for rho_t >= 4)."""
    super(RAdamOptimizer, self).__init__(
        learning_rate, weight_decay_rate=weight_decay_rate, beta_1=beta_1, beta_2=beta_2,
        epsilon=epsilon, exclude_from_weight_decay=exclude_from_weight_decay, name=name)
    self.rectify_threshold = _check_number("rectify_threshold", rectify_threshold, minimum=4.0)

  def _step_constants(self, global_step):
    step, m_correction, v_correction, beta_2_power = self._bias_corrections(global_step)
    rho_inf = 2.0 / (1.0 - self.beta_2) - 1.0
    rho_t = rho_inf - 2.0 * step * beta_2_power * v_correction
    rectified = rho_t >= self.rectify_threshold
    # Clamped so the unused branch stays finite (rho_t < 4 has no real r_t).
    safe_rho = tf.maximum(rho_t, self.rectify_threshold)
    rectifier = tf.sqrt(
        (safe_rho - 4.0) * (safe_rho - 2.0) * rho_inf /
        ((rho_inf - 4.0) * (rho_inf - 2.0) * safe_rho))
    zero = tf.constant(0.0, tf.float64)
    one = tf.constant(1.0, tf.float64)
    return {
        "m_correction": tf.cast(m_correction, tf.float32),
        "v_correction": tf.cast(v_correction, tf.float32),
        # Exactly one of these is non-zero: r_t when rectified, else 1 for
        # the momentum-only update.
        "adaptive_scale": tf.cast(tf.where_v2(rectified, rectifier, zero), tf.float32),
        "momentum_scale": tf.cast(tf.where_v2(rectified, zero, one), tf.float32),
    }

  def _update_direction(self, next_m, next_v, constants):
    m_hat = next_m * constants["m_correction"]
    v_hat = next_v * constants["v_correction"]
    return m_hat * (constants["adaptive_scale"] / (tf.sqrt(v_hat) + self.epsilon) +
                    constants["momentum_scale"])


class LAMBOptimizer(_MomentOptimizer):
  """LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning:
  Training BERT in 76 minutes"): bias-corrected Adam with decoupled weight decay
  and a per-variable trust ratio.

  At step t = global_step + 1 (wd = 0 for excluded names):

    m = beta_1 * m + (1 - beta_1) * g
    v = beta_2 * v + (1 - beta_2) * g^2
    m_hat = m / (1 - beta_1^t);  v_hat = v / (1 - beta_2^t)
    u = m_hat / (sqrt(v_hat) + epsilon) + wd * p
    r = ||p|| / ||u||  if ||p|| > 0 and ||u|| > 0, else 1   (L2 norms over the
                                                           whole variable)
    p = p - lr * r * u
  """

  default_name = "LAMB"

  def _step_constants(self, global_step):
    _, m_correction, v_correction, _ = self._bias_corrections(global_step)
    return {
        "m_correction": tf.cast(m_correction, tf.float32),
        "v_correction": tf.cast(v_correction, tf.float32),
    }

  def _update_direction(self, next_m, next_v, constants):
    m_hat = next_m * constants["m_correction"]
    v_hat = next_v * constants["v_correction"]
    return m_hat / (tf.sqrt(v_hat) + self.epsilon)

  def _scale_update(self, update, param):
    param_norm = tf.norm(param)
    update_norm = tf.norm(update)
    both_positive = tf.logical_and(param_norm > 0.0, update_norm > 0.0)
    safe_update_norm = tf.where_v2(both_positive, update_norm, tf.ones_like(update_norm))
    trust_ratio = tf.where_v2(both_positive, param_norm / safe_update_norm,
                           tf.ones_like(param_norm))
    return trust_ratio * update


_OPTIMIZER_CLASSES = {
    "adamw": AdamWeightDecayOptimizer,
    "radam": RAdamOptimizer,
    "lamb": LAMBOptimizer,
}


ADAM_BIAS_CORRECTION_ONLY_ADAMW = (
    "--adam_bias_correction is for --optimizer=adamw; --optimizer=%s corrects the bias "
    "already: drop one of the two flags.")


def make_optimizer(name, learning_rate, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999,
                   epsilon=1e-6, exclude_from_weight_decay=DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
                   adam_bias_correction=False):
  """Builds one of the optimizers by name.

  Args:
    name: "adamw" (Google's AdamWeightDecay), "radam" or "lamb".
    learning_rate: Python float or float32 scalar tensor.
    weight_decay_rate: Decoupled weight decay factor.
    beta_1: First-moment decay rate.
    beta_2: Second-moment decay rate.
    epsilon: Added to the root of the second moment.
    exclude_from_weight_decay: Patterns of variable names with no weight decay.
    adam_bias_correction: "adamw" only: Adam's bias correction (torch.optim.AdamW's
      arithmetic); radam and lamb always correct.

  Returns:
    An optimizer object with `.apply_gradients(grads_and_vars, global_step)`.

  Raises:
    ValueError: if `name` is not one of OPTIMIZER_NAMES, or adam_bias_correction is asked
      of another optimizer.
  """
  if name not in _OPTIMIZER_CLASSES:
    raise ValueError(
        "optimization.py: unknown optimizer %r; choose one of %s." %
        (name, ", ".join(repr(choice) for choice in OPTIMIZER_NAMES)))
  kwargs = {}
  if adam_bias_correction:
    if name != "adamw":
      raise ValueError(ADAM_BIAS_CORRECTION_ONLY_ADAMW % name)
    kwargs["bias_correction"] = True
  return _OPTIMIZER_CLASSES[name](
      learning_rate, weight_decay_rate=weight_decay_rate, beta_1=beta_1, beta_2=beta_2,
      epsilon=epsilon, exclude_from_weight_decay=exclude_from_weight_decay, **kwargs)



def apply_gradients(grads_and_vars, learning_rate, global_step, optimizer="adamw", clip_norm=1.0,
                    weight_decay_rate=0.01, skip_non_finite=False, increment_global_step=True,
                    learning_rate_scales=None, ema_decay=0.0,
                    ema_rule=weight_averages.BIAS_CORRECTED):
  """Clips the gradients, updates the variables and then increments global_step.

  Steps, in order: drop pairs whose gradient is None; make tf.IndexedSlices
  dense (once, before clipping, so the clip sees the true global norm however
  the rows were split across towers); wait for every gradient; clip by global
  norm; apply the optimizer; and only after that update has run, add 1 to
  `global_step`.

  With skip_non_finite (fp16 loss scaling), a non-finite global norm skips the
  whole update and global_step stays. The check comes before clipping: an
  infinite norm turns every clipped gradient into NaN.

  Args:
    grads_and_vars: Iterable of (gradient, variable) pairs.
    learning_rate: Python float or float32 scalar tensor.
    global_step: The integer global step variable.
    optimizer: A name from OPTIMIZER_NAMES, or an optimizer object from
      make_optimizer (then weight_decay_rate is ignored).
    clip_norm: Maximum global norm of the gradients; None disables clipping.
    weight_decay_rate: Decoupled weight decay for a named optimizer.
    skip_non_finite: skip the update when a gradient is inf or NaN.
    increment_global_step: False leaves global_step to the caller (replicated
      variables: several copies are updated, and the step moves once after all).
    learning_rate_scales: optional dict variable name -> learning-rate factor (the
      optimizer's apply_gradients; layer-wise learning rates).
    ema_decay: D > 0 moves each variable's weight average after the update (not after a
      skipped one): bert_mgpu/training/weight_averages.py.
    ema_rule: the averages' weight_averages.Rule (bias-corrected by default).

  Returns:
    Tuple (train_op, global_norm): train_op is the global-step increment, which
    runs after the update (without increment_global_step: the update itself);
    global_norm is the float32 global norm of the
    gradients before clipping (finite exactly when the update was applied, with
    skip_non_finite).

  Raises:
    ValueError: if no variable has a gradient, or an argument is invalid.
  """
  if isinstance(optimizer, str):
    optimizer = make_optimizer(optimizer, learning_rate, weight_decay_rate=weight_decay_rate)
  # Duck-typed: under TF 2.x, resource variables are not tf.compat.v1.Variable.
  if not hasattr(global_step, "assign_add"):
    raise ValueError(
        "optimization.py: global_step must be a tf.Variable (it is incremented), "
        "got %r; use tf.train.get_or_create_global_step()." % (global_step,))
  if clip_norm is not None:
    _check_number("clip_norm", clip_norm, minimum=0.0)
    if clip_norm == 0.0:
      raise ValueError("optimization.py: clip_norm must be > 0 or None, got 0.")

  pairs = [(grad, var) for grad, var in grads_and_vars if grad is not None]
  if not pairs:
    raise ValueError(
        "optimization.py: no variable has a gradient (all gradients are None); "
        "check that the loss depends on the trainable variables.")

  with tf.name_scope("apply_gradients"):
    grads = []
    for grad, _ in pairs:
      if isinstance(grad, tf.IndexedSlices):
        # Duplicate indices are summed here, once, for all towers' rows.
        grad = tf.convert_to_tensor(grad)
      grads.append(grad)
    tvars = [var for _, var in pairs]

    # The update must not start before every gradient exists: otherwise it
    # races the backward pass of other towers (docs/FORMATS.md section 9).
    with tf.control_dependencies(grads):
      global_norm = tf.global_norm(grads, name="global_norm")
      grad_scale = None if clip_norm is None else clip_scale(global_norm, clip_norm)
      apply_if = tf.math.is_finite(global_norm) if skip_non_finite else None
      # The optimizer multiplies each gradient by the clip scale in its own update.
      update = optimizer.apply_gradients(list(zip(grads, tvars)), global_step,
                                         apply_if=apply_if, grad_scale=grad_scale,
                                         learning_rate_scales=learning_rate_scales)
    if ema_decay > 0:
      with tf.control_dependencies([update]):  # the averages see the updated weights
        update = weight_averages.build_update(tvars, ema_decay, global_step, apply_if,
                                              ema_rule)

    if not increment_global_step:
      return update, global_norm
    train_op = increment_global_step_after([update], global_step, apply_if)
  return train_op, global_norm


def clip_scale(global_norm, clip_norm):
  """What tf.clip_by_global_norm multiplies every gradient by: clip_norm / global_norm
  when that is below 1, else 1; NaN when global_norm is not finite."""
  with tf.name_scope("clip_by_global_norm"):
    scale_for_finite = clip_norm * tf.minimum(
        1.0 / global_norm, tf.constant(1.0, tf.float32) / clip_norm)
    return scale_for_finite + (global_norm - global_norm)


def increment_global_step_after(updates, global_step, applied=None):
  """global_step += 1, strictly after `updates` (ops) have run: one increment per update.

  Args:
    updates: the ops that apply the update (one per replica of the variables).
    global_step: the step variable.
    applied: None, or a boolean tensor: False for an update that was skipped (fp16
      overflow), which leaves global_step as it is.

  Returns:
    The increment op.
  """
  with tf.control_dependencies(updates):
    increment = 1 if applied is None else tf.cast(applied, global_step.dtype)
    return global_step.assign_add(increment, read_value=False, name="increment_global_step")


def create_optimizer(loss, init_lr, num_train_steps, num_warmup_steps, use_tpu=False,
                     optimizer="adamw", tvars=None, clip_norm=1.0, adam_bias_correction=False):
  """Google's `create_optimizer`: builds the whole training op for `loss`.

  Args:
    loss: float32 scalar tensor to minimize.
    init_lr: Peak learning rate.
    num_train_steps: Step at which the learning rate reaches 0.
    num_warmup_steps: Number of linear warmup steps.
    use_tpu: Must be False (kept for signature compatibility).
    optimizer: A name from OPTIMIZER_NAMES.
    tvars: Variables to train; None means tf.trainable_variables().
    clip_norm: Global-norm clip; None disables clipping.
    adam_bias_correction: with "adamw", torch.optim.AdamW's bias correction.

  Returns:
    The train op (increments the global step after the update).

  Raises:
    ValueError: on use_tpu=True, an unknown optimizer or invalid steps.
  """
  if use_tpu:
    raise ValueError(
        "TPUs are not supported by optimization.py (bert-mgpu trains on GPUs and "
        "CPUs); pass use_tpu=False.")
  make_optimizer(optimizer, 0.0, adam_bias_correction=adam_bias_correction)  # checks both
  global_step = tf.train.get_or_create_global_step()
  learning_rate = learning_rate_schedule(init_lr, num_train_steps, num_warmup_steps, global_step)
  if tvars is None:
    tvars = tf.trainable_variables()
  grads = tf.gradients(loss, tvars)
  train_op, _ = apply_gradients(
      list(zip(grads, tvars)), learning_rate, global_step, clip_norm=clip_norm,
      optimizer=make_optimizer(optimizer, learning_rate,
                               adam_bias_correction=adam_bias_correction))
  return train_op


def _check_float32_variable(var):
  """Raises ValueError unless `var` is a float32 variable."""
  if var.dtype.base_dtype != tf.float32:
    raise ValueError(
        "optimization.py: variable %r has dtype %s; the optimizers update float32 "
        "variables only (keep float32 master weights under mixed precision)." %
        (variable_base_name(var), var.dtype.base_dtype.name))


def _check_number(arg_name, value, minimum=None, below=None):
  """Returns `value` as a float after checking minimum <= value < below."""
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise ValueError("optimization.py: %s must be a number, got %r." % (arg_name, value))
  value = float(value)
  if math.isnan(value) or (minimum is not None and value < minimum) or \
      (below is not None and value >= below):
    bounds = []
    if minimum is not None:
      bounds.append(">= %g" % minimum)
    if below is not None:
      bounds.append("< %g" % below)
    raise ValueError("optimization.py: %s must be %s, got %r." %
                     (arg_name, " and ".join(bounds) or "a number", value))
  return value


def _check_int(arg_name, value, minimum):
  """Raises ValueError unless `value` is an int >= minimum."""
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
    raise ValueError("optimization.py: %s must be an integer >= %d, got %r." %
                     (arg_name, minimum, value))
