# coding=utf-8
"""Where BERT runs: the device plan and the towers.

This is the one module that knows about devices, towers and gradient reduction. It
builds graphs; the loop that runs them is runner.py.
"""

import collections
import contextlib
import os

import tensorflow.compat.v1 as tf

import mixed_precision
import optimization

# ---------------------------------------------------------------------------
# The device plan
# ---------------------------------------------------------------------------

# Ops that create variable storage. They go to the variable device; every other op of a tower
# goes to the tower's device (reads of resource variables are colocated with the handle by TF).
_VARIABLE_OP_TYPES = frozenset(
    ["Variable", "VariableV2", "VarHandleOp", "AutoReloadVariable", "_VarHandlesOp"])


class DevicePlan(object):
  """Where each tower runs and where the shared variables live.

  Attributes:
    tower_devices: list of device strings, one per tower (a GPU may hold several towers).
    variable_device: device of the variables, the gradient averaging and the update.
    num_cpu_devices: logical CPU devices the session must create (None: TF's default of one).
  """

  def __init__(self, tower_devices, variable_device, num_cpu_devices=None):
    self.tower_devices = list(tower_devices)
    self.variable_device = variable_device
    self.num_cpu_devices = num_cpu_devices

  @property
  def num_towers(self):
    return len(self.tower_devices)

  def session_config(self):
    """A ConfigProto that creates the devices this plan names."""
    config = tf.ConfigProto(allow_soft_placement=True)
    config.gpu_options.allow_growth = True
    if self.num_cpu_devices:
      config.device_count["CPU"] = self.num_cpu_devices
    return config

  def describe(self):
    """One line per tower, for the start-of-run log."""
    lines = ["tower %d -> %s" % (i, d) for i, d in enumerate(self.tower_devices)]
    lines.append("variables, gradient averaging and update -> %s" % self.variable_device)
    return lines


def count_visible_gpus():
  """GPUs this process may use (CUDA_VISIBLE_DEVICES applies)."""
  return len(tf.config.experimental.list_physical_devices("GPU"))


def plan_devices(n_gpus, towers_per_gpu=1, variables_on_gpu=False, visible_gpus=None):
  """Maps towers to devices.

  Args:
    n_gpus: GPUs to use (--n_gpus).
    towers_per_gpu: towers on each GPU (--towers_per_gpu).
    variables_on_gpu: put variables, averaging and update on GPU 0 instead of the host CPU.
    visible_gpus: number of visible GPUs; None asks TensorFlow.

  Returns:
    A DevicePlan. With no GPU visible, each of the n_gpus * towers_per_gpu towers gets a
    logical CPU device of its own, so the same graph runs on a laptop, in CI and on a cluster.

  Raises:
    ValueError: n_gpus or towers_per_gpu < 1, or n_gpus > visible GPUs (the message names
      the flag; the runner shows it as a usage error).
  """
  if n_gpus < 1:
    raise ValueError("--n_gpus=%d: it must be at least 1." % n_gpus)
  if towers_per_gpu < 1:
    raise ValueError("--towers_per_gpu=%d: it must be at least 1." % towers_per_gpu)
  if visible_gpus is None:
    visible_gpus = count_visible_gpus()
  num_towers = n_gpus * towers_per_gpu
  if visible_gpus == 0:
    tf.logging.warning(
        "No GPU is visible: running %d tower(s) on %d logical CPU devices instead.",
        num_towers, num_towers)
    plan = DevicePlan(["/cpu:%d" % i for i in range(num_towers)], "/cpu:0",
                      num_cpu_devices=num_towers)
  elif n_gpus > visible_gpus:
    raise ValueError(
        "--n_gpus=%d but only %d GPU(s) are visible (CUDA_VISIBLE_DEVICES=%s): lower --n_gpus "
        "or make more GPUs visible." %
        (n_gpus, visible_gpus, os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")))
  else:
    towers = ["/gpu:%d" % g for g in range(n_gpus) for _ in range(towers_per_gpu)]
    plan = DevicePlan(towers, "/gpu:0" if variables_on_gpu else "/cpu:0")
  return plan


def _device_function(tower_device, variable_device):
  """Places variable storage on `variable_device` and everything else on `tower_device`."""
  def choose(op):
    if op.type in _VARIABLE_OP_TYPES:
      return variable_device
    return tower_device
  return choose


@contextlib.contextmanager
def _tower_scope(plan, tower_index, compute_dtype=tf.float32, use_xla=False):
  """Enters tower `tower_index`: its device, a name scope, and the shared variable scope.

  Variables keep their plain names (no tower prefix), so checkpoints stay Google-compatible:
  name scopes only prefix ops, and every tower reuses the variables the first one created.
  Resource variables: with ref variables, assign-based updates race with other towers' reads.
  The tower reads float32 variables cast to `compute_dtype` (mixed precision) and, with
  `use_xla`, its ops are compiled by XLA as one cluster.
  """
  tower_device = plan.tower_devices[tower_index]
  device = _device_function(tower_device, plan.variable_device)
  with tf.device(device), tf.name_scope("tower_%d" % tower_index) as tower_name_scope:

    def read_on_tower(getter, *args, **kwargs):
      # The tower uses its own copy of each variable's value. Gradients from several uses
      # (the tied embedding's lookup and output projection) are then summed on the tower's
      # device, not per tower on the variable device.
      variable = getter(*args, **kwargs)
      with tf.device(tower_device), tf.name_scope(tower_name_scope):
        value = tf.identity(variable, name="read_" + variable.op.name.replace("/", "_"))
        return mixed_precision.cast_for_compute(value, variable.op.name, compute_dtype)

    with tf.variable_scope(tf.get_variable_scope(), reuse=tf.AUTO_REUSE, use_resource=True,
                           custom_getter=read_on_tower), _xla_scope(use_xla):
      yield


@contextlib.contextmanager
def _xla_scope(use_xla):
  """Marks the ops made inside for XLA compilation (a no-op without use_xla)."""
  if not use_xla:
    yield
    return
  with tf.xla.experimental.jit_scope(compile_ops=True, separate_compiled_gradients=False):
    yield


def split_for_towers(features, num_towers):
  """Splits every tensor of `features` into `num_towers` equal slices along the batch axis.

  Args:
    features: dict name -> tensor [global_batch, ...]; global_batch divisible by num_towers.
    num_towers: number of slices.

  Returns:
    A list of num_towers dicts name -> tensor [global_batch / num_towers, ...].
  """
  sliced = {name: tf.split(tensor, num_towers, axis=0) for name, tensor in features.items()}
  return [{name: parts[i] for name, parts in sliced.items()} for i in range(num_towers)]


# ---------------------------------------------------------------------------
# The tower builder: training
# ---------------------------------------------------------------------------

TrainOps = collections.namedtuple(
    "TrainOps", ["train_op", "loss", "learning_rate", "global_norm", "global_step",
                 "accumulate_op", "loss_scale"])
TrainOps.__doc__ = """The ops of a training step (build_training).

Fields:
  train_op: applies one update (and increments global_step after it).
  loss: the mean loss over towers (with accumulation: of the current micro-batch).
  learning_rate, global_norm, global_step: scalars to log; global_norm is of the
    unscaled gradients, before clipping (non-finite on a skipped fp16 step).
  accumulate_op: adds one micro-batch's gradients (None without accumulation).
  loss_scale: the DynamicLossScale of fp16 training, else None.
"""


def average_gradients(tower_grads, num_towers):
  """Averages one variable's gradients over towers.

  Dense gradients are summed and scaled. IndexedSlices (the embedding gather) are concatenated:
  the rows of every tower with values scaled by 1/num_towers, which is the same sum without
  building a dense [vocab, hidden] tensor per tower.

  Args:
    tower_grads: list (one per tower) of Tensor, IndexedSlices or None.
    num_towers: the divisor.

  Returns:
    The averaged gradient, or None when no tower has one.
  """
  grads = [g for g in tower_grads if g is not None]
  if not grads:
    return None
  scale = 1.0 / num_towers
  if all(isinstance(g, tf.IndexedSlices) for g in grads):
    values = tf.concat([g.values for g in grads], axis=0) * scale
    indices = tf.concat([g.indices for g in grads], axis=0)
    return tf.IndexedSlices(values, indices, grads[0].dense_shape)
  return tf.add_n([tf.convert_to_tensor(g) for g in grads]) * scale


def build_tower_losses_and_grads(plan, model_fn, features, precision="fp32", use_xla=False,
                                 loss_scale=None):
  """Runs `model_fn` on each tower's slice of the batch and differentiates its loss there.

  Args:
    plan: DevicePlan.
    model_fn: function(features_dict, is_training) -> dict with "loss" (float32 scalar, mean
      over the tower's examples). It creates its variables with tf.get_variable.
    features: dict name -> tensor [global_batch, ...].
    precision: "fp32", "bf16" or "fp16": the towers' compute dtype.
    use_xla: compile each tower's forward and backward pass with XLA.
    loss_scale: a mixed_precision.DynamicLossScale (fp16): each tower differentiates the
      scaled loss, and the averaged gradients are unscaled.

  Returns:
    (mean loss over towers, list of (averaged gradient, variable)).
  """
  dtype = mixed_precision.compute_dtype(precision)
  tower_features = split_for_towers(features, plan.num_towers)
  losses, all_grads, tvars = [], [], None
  for i in range(plan.num_towers):
    with _tower_scope(plan, i, dtype, use_xla):
      loss = model_fn(tower_features[i], True)["loss"]
      if tvars is None:
        tvars = tf.trainable_variables()
      scaled_loss = loss_scale.scale_loss(loss) if loss_scale else loss
      all_grads.append(tf.gradients(scaled_loss, tvars, colocate_gradients_with_ops=True))
      losses.append(loss)
  with tf.device(plan.variable_device), tf.name_scope("average_towers"):
    mean_loss = tf.add_n(losses) / float(plan.num_towers)
    grads_and_vars = []
    for j, var in enumerate(tvars):
      grad = average_gradients([tower[j] for tower in all_grads], plan.num_towers)
      grads_and_vars.append((loss_scale.unscale(grad) if loss_scale else grad, var))
  return mean_loss, grads_and_vars


def build_training(plan, model_fn, features, init_lr, num_train_steps, num_warmup_steps,
                   optimizer_name="adamw", clip_norm=1.0, accumulation_steps=1, precision="fp32",
                   use_xla=False):
  """Builds the multi-tower training step.

  Each tower gets an equal slice of the global batch; the tower losses and gradients are
  averaged on the variable device and one update is applied, after which global_step grows by
  one. With dropout off, k towers x batch b give the same update as 1 tower x batch k*b.

  With accumulation_steps = N > 1 the step is split in two ops: `accumulate_op` adds the
  averaged gradient of one micro-batch (scaled by 1/N) to non-trainable accumulators, and
  `train_op` applies the accumulated gradient and clears them. The loop runs accumulate_op N
  times, then train_op once.

  With precision="fp16" the loss is scaled dynamically (mixed_precision.DynamicLossScale):
  an update whose gradients overflow is skipped (global_step stays) and the scale halves.

  Args:
    plan: DevicePlan.
    model_fn: see build_tower_losses_and_grads.
    features: dict name -> tensor [global_batch, ...] (one micro-batch when accumulating).
    init_lr, num_train_steps, num_warmup_steps: the learning-rate schedule.
    optimizer_name: "adamw", "radam" or "lamb".
    clip_norm: global-norm clip applied to the averaged gradient.
    accumulation_steps: micro-batches per update.
    precision: "fp32", "bf16" or "fp16" (see build_tower_losses_and_grads).
    use_xla: compile each tower with XLA.

  Returns:
    TrainOps. With accumulation, `loss` is the current micro-batch's loss and `global_norm`
    belongs to train_op; otherwise accumulate_op is None.
  """
  with tf.device(plan.variable_device):
    global_step = tf.train.get_or_create_global_step()
    learning_rate = optimization.learning_rate_schedule(
        init_lr, num_train_steps, num_warmup_steps, global_step)
    loss_scale = mixed_precision.DynamicLossScale() if precision == "fp16" else None
  loss, grads_and_vars = build_tower_losses_and_grads(plan, model_fn, features, precision,
                                                      use_xla, loss_scale)

  def apply(pairs):
    """The update of `pairs`, with the loss scale's own update for fp16."""
    train_op, global_norm = optimization.apply_gradients(
        pairs, learning_rate, global_step, optimizer_name, clip_norm,
        skip_non_finite=loss_scale is not None)
    if loss_scale is not None:
      with tf.control_dependencies([train_op]):
        train_op = loss_scale.update(tf.math.is_finite(global_norm))
    return train_op, global_norm

  if accumulation_steps <= 1:
    with tf.device(plan.variable_device):
      train_op, global_norm = apply(grads_and_vars)
    return TrainOps(train_op, loss, learning_rate, global_norm, global_step, None, loss_scale)

  with tf.device(plan.variable_device), tf.name_scope("accumulate"):
    accumulators, accumulate, pairs = [], [], []
    scale = 1.0 / accumulation_steps
    for grad, var in grads_and_vars:
      if grad is None:
        continue
      name = var.op.name + "/accumulated_grad"
      # A local variable: never saved, so checkpoints keep Google's variable set.
      acc = tf.get_variable(name, var.shape, tf.float32, tf.zeros_initializer(),
                            trainable=False, collections=[tf.GraphKeys.LOCAL_VARIABLES],
                            use_resource=True)
      if isinstance(grad, tf.IndexedSlices):
        # [rows, hidden] added into the dense [vocab, hidden] accumulator, row by row.
        accumulate.append(acc.scatter_add(tf.IndexedSlices(grad.values * scale, grad.indices)))
      else:
        accumulate.append(acc.assign_add(grad * scale))
      accumulators.append(acc)
      pairs.append((acc, var))
    accumulate_op = tf.group(*accumulate)
    train_op, global_norm = apply([(acc.read_value(), var) for acc, var in pairs])
    with tf.control_dependencies([train_op]):
      train_op = tf.group(*[acc.assign(tf.zeros_like(acc)) for acc in accumulators])
  return TrainOps(train_op, loss, learning_rate, global_norm, global_step, accumulate_op,
                  loss_scale)


# ---------------------------------------------------------------------------
# The tower builder: evaluation and prediction
# ---------------------------------------------------------------------------

def build_inference(plan, model_fn, features, global_batch_size, precision="fp32",
                    use_xla=False):
  """Runs `model_fn` (is_training=False) on every tower and gathers per-example outputs.

  The last batch of a dataset may be partial: it is padded up to global_batch_size so each tower
  gets an equal slice, and the padding rows are cut off the outputs again. No example is dropped
  or counted twice.

  Args:
    plan: DevicePlan.
    model_fn: function(features_dict, is_training) -> dict name -> per-example tensor
      [tower_batch, ...] (a scalar "loss" entry, if any, is ignored).
    features: dict name -> tensor [n, ...] with n <= global_batch_size.
    global_batch_size: per-tower batch size x towers.
    precision, use_xla: as for build_training.

  Returns:
    dict name -> tensor [n, ...], the towers' outputs in input order.
  """
  first = next(iter(features.values()))
  num_real = tf.shape(first)[0]
  padded = {}
  for name, tensor in features.items():
    rank = len(tensor.shape)
    padding = [[0, global_batch_size - num_real]] + [[0, 0]] * (rank - 1)
    padded[name] = tf.pad(tensor, padding)
    padded[name].set_shape([global_batch_size] + tensor.shape.as_list()[1:])
  tower_features = split_for_towers(padded, plan.num_towers)
  tower_outputs = []
  dtype = mixed_precision.compute_dtype(precision)
  for i in range(plan.num_towers):
    with _tower_scope(plan, i, dtype, use_xla):
      outputs = model_fn(tower_features[i], False)
      tower_outputs.append({k: v for k, v in outputs.items() if len(v.shape) > 0})
  with tf.device(plan.variable_device):
    return {name: tf.concat([o[name] for o in tower_outputs], axis=0)[:num_real]
            for name in tower_outputs[0]}

