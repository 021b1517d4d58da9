# coding=utf-8
"""Where BERT runs: the device plan and the towers.

This is the one module that knows about devices, towers and gradient reduction (with its
package side, bert_mgpu/distributed/collectives.py, which builds the all-reduce ops). It
builds graphs; the loop that runs them is bert_mgpu/training/runner.py.
"""

import collections
import contextlib
import os
import re

import tensorflow.compat.v1 as tf

from bert_mgpu.distributed import collectives
from bert_mgpu.distributed import global_batch
from bert_mgpu.distributed.collectives import all_reduce_packed, collective_sum
from bert_mgpu.training import adversarial
from bert_mgpu.training import layerwise_lr
from bert_mgpu.training import mixed_precision
from bert_mgpu.training import weight_averages
import optimization

# ---------------------------------------------------------------------------
# The device plan
# ---------------------------------------------------------------------------

# Ops that create variable storage. They go to the variable device; every other op of a tower
# goes to the tower's device (reads of resource variables are colocated with the handle by TF).
_VARIABLE_OP_TYPES = frozenset(
    ["Variable", "VariableV2", "VarHandleOp", "AutoReloadVariable", "_VarHandlesOp"])

# --variable_update, after TF's tf_cnn_benchmarks:
#   host: one copy of the variables on the host CPU; towers send it their gradients, it
#     averages them and applies the update, towers read the weights back every step.
#   gpu0: the same, on GPU 0 (the old --variables_on_gpu).
#   replicated: every device keeps a copy; the gradients are summed by a collective
#     all-reduce (NCCL on GPUs, ring on CPUs) and every copy applies the same update.
VARIABLE_UPDATES = ("host", "gpu0", "replicated")

# Replica r > 0 of a variable is named REPLICA_PREFIX % r + its plain name; replica 0 keeps
# the plain name, and only replica 0 is saved, so checkpoints keep Google's names.
REPLICA_PREFIX = "replica_%d/"
_REPLICA_NAME = re.compile(r"^replica_\d+/")

# Collective groups: every replica of every worker, and one device (CPU 0) per worker for the
# worker-level variables (global_step, the loss scale) and flags.
_GROUP_REPLICAS = 1
_GROUP_WORKERS = 2


class DevicePlan(object):
  """Where each tower runs, where the variables live, and which processes take part.

  Attributes:
    tower_devices: list of device strings, one per tower of this process (a GPU may hold
      several towers).
    variable_update: "host", "gpu0" or "replicated".
    variable_device: the variables' device (host, gpu0); with replicated, the device of
      replica 0, which also holds global_step and the learning rate.
    num_cpu_devices: logical CPU devices the session must create (None: TF's default of one).
    num_workers, worker_index: processes of a multi-worker run and this one's index
      (worker 0 is the chief).
  """

  def __init__(self, tower_devices, variable_device, num_cpu_devices=None,
               variable_update="host", num_workers=1, worker_index=0):
    self.tower_devices = list(tower_devices)
    self.variable_device = variable_device
    self.num_cpu_devices = num_cpu_devices
    self.variable_update = variable_update
    self.num_workers = num_workers
    self.worker_index = worker_index

  @property
  def num_towers(self):
    return len(self.tower_devices)

  @property
  def replicated(self):
    return self.variable_update == "replicated"

  @property
  def on_gpu(self):
    return any("gpu" in device.lower() for device in self.tower_devices)

  @property
  def replica_devices(self):
    """The devices holding a copy of the variables, in order (one per device, not per
    tower: NCCL takes one rank per GPU)."""
    if not self.replicated:
      return [self.variable_device]
    return sorted(set(self.tower_devices), key=self.tower_devices.index)

  def replica_of_tower(self, tower_index):
    """The index of the replica (in replica_devices) whose variables tower `tower_index`
    reads."""
    if not self.replicated:
      return 0
    return self.replica_devices.index(self.tower_devices[tower_index])

  @property
  def group_size(self):
    """Replicas over all workers: the ranks of the all-reduce."""
    return len(self.replica_devices) * self.num_workers

  def worker_device(self, worker_index=None):
    """CPU 0 of a worker: the worker-level collectives run there."""
    index = self.worker_index if worker_index is None else worker_index
    return _device_name("CPU", 0, index if self.num_workers > 1 else None)

  def session_config(self):
    """A ConfigProto that creates the devices this plan names (and, for several workers,
    names the collective group leader, without which an all-reduce hangs silently)."""
    config = tf.ConfigProto(allow_soft_placement=True)
    config.gpu_options.allow_growth = True
    if self.num_cpu_devices:
      config.device_count["CPU"] = self.num_cpu_devices
    if self.num_workers > 1:
      config.experimental.collective_group_leader = "/job:worker/replica:0/task:0"
    if self.replicated and self.on_gpu and (not collectives.ALL_REDUCE_TAKES_HINT or
                                            tf.__version__.startswith("1.")):
      # TF 1.15 picks NCCL for GPU all-reduces through the config (some of its releases lack
      # communication_hint); setting it as well as the hint does no harm.
      config.experimental.collective_nccl = True
    return config

  def describe(self):
    """One line per tower, for the start-of-run log."""
    lines = ["tower %d -> %s" % (i, d) for i, d in enumerate(self.tower_devices)]
    if self.replicated:
      lines.append("variables: one copy on each of %s; gradients summed by %s all-reduce "
                   "over %d replica(s)%s" % (
                       ", ".join(self.replica_devices), "an NCCL" if self.on_gpu else "a ring",
                       self.group_size,
                       " on %d workers (this is worker %d%s)" % (
                           self.num_workers, self.worker_index,
                           ", the chief" if self.worker_index == 0 else "")
                       if self.num_workers > 1 else ""))
    else:
      lines.append("variables, gradient averaging and update -> %s" % self.variable_device)
    return lines

  def for_inference(self):
    """This process's towers with one shared copy of the variables (plain names, as in
    checkpoints), for evaluation and prediction outside the training graph."""
    local_towers = [_local_device_name(d) for d in self.tower_devices]
    variable_device = ("/cpu:0" if self.variable_update == "host" or not self.on_gpu
                       else local_towers[0])
    return DevicePlan(local_towers, variable_device, self.num_cpu_devices,
                      "host" if variable_device == "/cpu:0" else "gpu0")


def _device_name(kind, index, worker_index=None):
  """"/gpu:1", or "/job:worker/replica:0/task:2/device:GPU:1" in a multi-worker run."""
  if worker_index is None:
    return "/%s:%d" % (kind.lower(), index)
  return "/job:worker/replica:0/task:%d/device:%s:%d" % (worker_index, kind, index)


def _local_device_name(device):
  """"/job:worker/.../device:GPU:1" -> "/gpu:1"; plain names are returned as they are."""
  match = re.search(r"device:(CPU|GPU):(\d+)$", device)
  return _device_name(match.group(1), int(match.group(2))) if match else device


def count_visible_gpus():
  """GPUs this process may use (CUDA_VISIBLE_DEVICES applies)."""
  return len(tf.config.experimental.list_physical_devices("GPU"))


def check_variable_update(variable_update, variables_on_gpu=False, num_workers=1):
  """The --variable_update to use (None: "gpu0" with the old --variables_on_gpu, else
  "host"). Needs no TensorFlow runtime, so a run can check it before anything starts.

  Raises:
    ValueError: an unknown value, or one that does not fit the other flags.
  """
  if variable_update is None:
    variable_update = "gpu0" if variables_on_gpu else "host"
  if variable_update not in VARIABLE_UPDATES:
    raise ValueError("--variable_update=%s: use one of %s." % (
        variable_update, ", ".join(VARIABLE_UPDATES)))
  if variables_on_gpu and variable_update != "gpu0":
    raise ValueError("--variables_on_gpu is the old name of --variable_update=gpu0; it "
                     "cannot go with --variable_update=%s. Drop one." % variable_update)
  if num_workers > 1 and variable_update != "replicated":
    raise ValueError("--variable_update=%s: several workers (--worker_hosts) need "
                     "--variable_update=replicated, which keeps a copy of the variables on "
                     "every device of every worker." % variable_update)
  return variable_update


def plan_devices(n_gpus, towers_per_gpu=1, variables_on_gpu=False, visible_gpus=None,
                 variable_update=None, num_workers=1, worker_index=0):
  """Maps towers to devices.

  Args:
    n_gpus: GPUs to use (--n_gpus), on each worker.
    towers_per_gpu: towers on each GPU (--towers_per_gpu).
    variables_on_gpu: the old name of variable_update="gpu0".
    visible_gpus: number of visible GPUs; None asks TensorFlow.
    variable_update: "host", "gpu0" or "replicated" (None: "gpu0" with variables_on_gpu,
      else "host").
    num_workers, worker_index: processes of a multi-worker run (--worker_hosts) and this
      one's index (--task_index). Several workers need "replicated".

  Returns:
    A DevicePlan. With no GPU visible, each of the n_gpus * towers_per_gpu towers gets a
    logical CPU device of its own, so the same graph runs on a laptop, in CI and on a cluster.

  Raises:
    ValueError: n_gpus or towers_per_gpu < 1, n_gpus > visible GPUs, or a variable_update
      that does not fit (the message names the flag; the runner shows it as a usage error).
  """
  if n_gpus < 1:
    raise ValueError("--n_gpus=%d: it must be at least 1." % n_gpus)
  if towers_per_gpu < 1:
    raise ValueError("--towers_per_gpu=%d: it must be at least 1." % towers_per_gpu)
  variable_update = check_variable_update(variable_update, variables_on_gpu, num_workers)
  if visible_gpus is None:
    visible_gpus = count_visible_gpus()
  worker = worker_index if num_workers > 1 else None
  num_towers = n_gpus * towers_per_gpu
  if visible_gpus == 0:
    tf.logging.warning(
        "No GPU is visible: running %d tower(s) on %d logical CPU devices instead.",
        num_towers, num_towers)
    towers = [_device_name("CPU", i, worker) for i in range(num_towers)]
    return DevicePlan(towers, towers[0], num_cpu_devices=num_towers,
                      variable_update=variable_update, num_workers=num_workers,
                      worker_index=worker_index)
  if n_gpus > visible_gpus:
    raise ValueError(
        "--n_gpus=%d but only %d GPU(s) are visible (CUDA_VISIBLE_DEVICES=%s): lower --n_gpus "
        "or make more GPUs visible." %
        (n_gpus, visible_gpus, os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")))
  towers = [_device_name("GPU", g, worker) for g in range(n_gpus) for _ in range(towers_per_gpu)]
  variable_device = (_device_name("CPU", 0, worker) if variable_update == "host"
                     else towers[0])
  return DevicePlan(towers, variable_device, variable_update=variable_update,
                    num_workers=num_workers, worker_index=worker_index)


def _device_function(tower_device, variable_device):
  """Places variable storage on `variable_device` and everything else on `tower_device`."""
  def choose(op):
    if op.type in _VARIABLE_OP_TYPES:
      return variable_device
    return tower_device
  return choose


def replica_variable_name(name, replica_index):
  """The name of replica `replica_index`'s copy of the variable called `name`."""
  return name if replica_index == 0 else (REPLICA_PREFIX % replica_index) + name


def saveable_variables():
  """The global variables that checkpoints hold: every variable but the replicas' copies
  (replica 0's, which carry Google's plain names)."""
  return [v for v in tf.global_variables() if not _REPLICA_NAME.match(v.op.name)]


@contextlib.contextmanager
def _tower_scope(plan, tower_index, compute_dtype=tf.float32, use_xla=False,
                 read_averages=False, perturbation=None):
  """Enters tower `tower_index`: its device, a name scope, and the shared variable scope.

  Variables keep their plain names (no tower prefix), so checkpoints stay Google-compatible:
  name scopes only prefix ops, and every tower reuses the variables the first one created
  (with replicated variables: the first tower of its device; replica r > 0 names its copies
  "replica_<r>/<plain name>").
  Resource variables: with ref variables, assign-based updates race with other towers' reads.
  The tower reads float32 variables cast to `compute_dtype` (mixed precision) and, with
  `use_xla`, its ops are marked for XLA, which compiles them in clusters (on TF 1.15 the ops
  XLA has no type for, like dropout's int16 bitcast, stay TensorFlow ops between clusters).
  With `read_averages`, it reads each variable's average where it has one (--ema_decay).
  With `perturbation` (float32, the table's shape), it reads the token-embedding table plus
  it (--adversarial; the variable itself is not written).
  """
  tower_device = plan.tower_devices[tower_index]
  replica = plan.replica_of_tower(tower_index)
  device = _device_function(tower_device, plan.replica_devices[replica])
  with tf.device(device), tf.name_scope("tower_%d" % tower_index) as tower_name_scope:

    def read_on_tower(getter, name, *args, **kwargs):
      # The tower uses its own copy of each variable's value. Gradients from several uses
      # (the tied embedding's lookup and output projection) are then summed on the tower's
      # device, not per tower on the variable device.
      variable = getter(replica_variable_name(name, replica), *args, **kwargs)
      if read_averages:
        variable = weight_averages.used_variables([variable])[0]
      with tf.device(tower_device), tf.name_scope(tower_name_scope):
        value = tf.identity(variable, name="read_" + variable.op.name.replace("/", "_"))
        if perturbation is not None and name == adversarial.TABLE_NAME:
          value = adversarial.perturbed(value, perturbation)  # float32, before any cast
        return mixed_precision.cast_for_compute(value, name, compute_dtype)

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


def worker_slice(features, plan):
  """This worker's share of a global batch: every worker reads the same global batches and
  takes its own contiguous slice, so the towers of all workers together see the same rows
  as the towers of one process would."""
  if plan.num_workers == 1:
    return features
  return split_for_towers(features, plan.num_workers)[plan.worker_index]


# ---------------------------------------------------------------------------
# The tower builder: training
# ---------------------------------------------------------------------------

TrainOps = collections.namedtuple(
    "TrainOps", ["train_op", "loss", "learning_rate", "global_norm", "global_step",
                 "accumulate_op", "loss_scale", "update_loss", "stop_request", "stop_agreed"])
TrainOps.__doc__ = """The ops of a training step (build_training).

Fields:
  train_op: applies one update (and increments global_step after it).
  loss: the mean loss over this process's towers (with accumulation: of the current
    micro-batch).
  learning_rate, global_norm, global_step: scalars to log; global_norm is of the
    unscaled gradients, before clipping (non-finite on a skipped fp16 step).
  accumulate_op: adds one micro-batch's gradients (None without accumulation).
  loss_scale: the DynamicLossScale of fp16 training, else None.
  update_loss: fetched with train_op: the mean loss of everything the update averaged (all
    towers, all workers, all micro-batches).
  stop_request: a float32 scalar placeholder (default 0) to feed with train_op: 1 asks the
    run to stop after this update.
  stop_agreed: fetched with train_op: > 0 when any worker fed stop_request=1, so every
    worker stops after the same update.
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


def _replica_trainable_variables(replica_index, plain_names=None):
  """Replica `replica_index`'s trainable variables, in the order of `plain_names` (replica
  0's names; None: replica 0's own list in creation order)."""
  if plain_names is None:
    return [v for v in tf.trainable_variables() if not _REPLICA_NAME.match(v.op.name)]
  by_name = {v.op.name: v for v in tf.trainable_variables()}
  return [by_name[replica_variable_name(n, replica_index)] for n in plain_names]


def _build_towers(plan, model_fn, features, precision, use_xla, loss_scale, attack=None):
  """Runs `model_fn` on each tower's slice of the batch and differentiates its loss there
  (with `attack`, the clean and the adversarial passes: _add_adversarial_gradients).

  Returns:
    (losses, grads, tvars): per tower, its float32 loss, the gradient of each of its
    replica's trainable variables (None where the loss does not depend on one), and those
    variables (the same list for every tower unless variables are replicated).
  """
  dtype = mixed_precision.compute_dtype(precision)
  tower_features = split_for_towers(features, plan.num_towers)

  def tower_pass(i, variables=None, perturbation=None):
    """(loss, gradients, variables) of tower i; variables None: its replica's trained ones
    (a global-batch loss: (outputs, None, variables), its gradients taken after)."""
    with _tower_scope(plan, i, dtype, use_xla, perturbation=perturbation):
      outputs = model_fn(tower_features[i], True)
      if variables is None:
        plain_names = [v.op.name for v in _replica_trainable_variables(0)]
        variables = _replica_trainable_variables(plan.replica_of_tower(i), plain_names)
      if global_batch.has_batch_loss(outputs):
        return outputs, None, variables
      scaled_loss = loss_scale.scale_loss(outputs["loss"]) if loss_scale else outputs["loss"]
      grads = tf.gradients(scaled_loss, variables, colocate_gradients_with_ops=True)
      return outputs["loss"], grads, variables

  # Per tower: its loss, its gradients, its variables.
  losses, grads, tvars = map(list, zip(*[tower_pass(i) for i in range(plan.num_towers)]))
  if grads[0] is None:  # the towers' rows meet in one loss over the global batch
    return global_batch.tower_losses_and_grads(plan, losses, tvars, loss_scale,
                                               _GROUP_WORKERS, attack) + (tvars,)
  if attack is not None:
    grads = _add_adversarial_gradients(plan, attack, tower_pass, grads, tvars, loss_scale)
  return losses, grads, tvars


def _global_table_gradients(plan, tower_table_grads, loss_scale, step):
  """The global batch's gradient of the token-embedding table, dense and unscaled, on
  each replica device (host and gpu0 plans: one, on the variable device).

  Rows that several towers gather are summed before anyone takes a norm; a replicated
  plan all-reduces its replicas' sums, [vocab, hidden] float32 each, over every worker.
  """
  if not plan.replicated:
    with tf.device(plan.variable_device), tf.name_scope("adversarial_gradient_step_%d" % step):
      grad = tf.convert_to_tensor(average_gradients(tower_table_grads, plan.num_towers))
      return [loss_scale.unscale(grad) if loss_scale else grad]
  scale = 1.0 / (plan.num_towers * plan.num_workers)
  local_sums = []
  for r, device in enumerate(plan.replica_devices):
    with tf.device(device), tf.name_scope("adversarial_gradient_step_%d_replica_%d" % (step, r)):
      local_sum = tf.add_n([tf.convert_to_tensor(g) for i, g in enumerate(tower_table_grads)
                            if plan.replica_of_tower(i) == r]) * scale
      # Unscaled before the sum: every replica divides by the same loss scale.
      local_sums.append([loss_scale.unscale(local_sum) if loss_scale else local_sum])
  reduced = all_reduce_packed(local_sums, plan.replica_devices, plan.group_size,
                              _GROUP_REPLICAS, plan.on_gpu)
  return [grad for (grad,) in reduced]


def _add_adversarial_gradients(plan, attack, tower_pass, grads, tvars, loss_scale):
  """Each tower's clean gradients plus those of its last adversarial pass (the arithmetic:
  bert_mgpu/training/adversarial.py).

  Every attack step reduces the table's gradient over the global batch, so k towers
  perturb the table exactly as one device with the whole batch would; PGD's intermediate
  passes differentiate the table alone.

  Args:
    plan: DevicePlan.
    attack: adversarial.Attack.
    tower_pass: function(tower index, variables, perturbation) -> (loss, gradients of the
      variables, variables), the tower's pass reading the table plus the perturbation.
    grads, tvars: per tower, its clean gradients and their variables (_build_towers').
    loss_scale: fp16's DynamicLossScale, or None.

  Returns:
    Per tower, the gradient of each of its variables: clean plus adversarial.
  """
  table = adversarial.table_index(tvars[0])
  table_grads = [tower_grads[table] for tower_grads in grads]
  perturbations = [None] * len(plan.replica_devices)
  for step in range(attack.passes):
    global_grads = _global_table_gradients(plan, table_grads, loss_scale, step)
    for r, device in enumerate(plan.replica_devices):
      with tf.device(device), tf.name_scope("adversarial_step_%d_replica_%d" % (step, r)):
        perturbations[r] = adversarial.next_perturbation(attack, perturbations[r],
                                                         global_grads[r])
    tower_perturbations = [perturbations[plan.replica_of_tower(i)]
                           for i in range(plan.num_towers)]
    if step < attack.passes - 1:  # an intermediate PGD pass: the table's gradient alone
      table_grads = [tower_pass(i, [tvars[i][table]], r)[1][0]
                     for i, r in enumerate(tower_perturbations)]
  last_grads = [tower_pass(i, tvars[i], r)[1] for i, r in enumerate(tower_perturbations)]
  # clean + adversarial (average_gradients over 1 concatenates the table's rows).
  return [[average_gradients([clean, adv], 1) for clean, adv in zip(grads[i], last_grads[i])]
          for i in range(plan.num_towers)]


def build_tower_losses_and_grads(plan, model_fn, features, precision="fp32", use_xla=False,
                                 loss_scale=None, attack=None):
  """The towers of a host or gpu0 plan, averaged on the variable device.

  Args:
    plan: DevicePlan (not replicated).
    model_fn: function(features_dict, is_training) -> dict with "loss" (float32 scalar, mean
      over the tower's examples), or with "rows" and "batch_loss" for one loss over the
      global batch (global_batch.py). It creates its variables with tf.get_variable.
    features: dict name -> tensor [global_batch, ...].
    precision: "fp32", "bf16" or "fp16": the towers' compute dtype.
    use_xla: compile each tower's forward and backward pass with XLA.
    loss_scale: a mixed_precision.DynamicLossScale (fp16): each tower differentiates the
      scaled loss, and the averaged gradients are unscaled.
    attack: an adversarial.Attack: each tower's gradient adds its adversarial pass's.

  Returns:
    (mean loss over towers (the clean loss), list of (averaged gradient, variable)).
  """
  losses, tower_grads, tvars = _build_towers(plan, model_fn, features, precision, use_xla,
                                             loss_scale, attack)
  with tf.device(plan.variable_device), tf.name_scope("average_towers"):
    mean_loss = tf.add_n(losses) / float(plan.num_towers)
    grads_and_vars = []
    for j, var in enumerate(tvars[0]):
      grad = average_gradients([tower[j] for tower in tower_grads], plan.num_towers)
      grads_and_vars.append((loss_scale.unscale(grad) if loss_scale else grad, var))
  return mean_loss, grads_and_vars


def _local_accumulators(values, names, shapes, device, accumulation_steps):
  """Local (never saved) float32 variables of `shapes` that sum `values` (tensors or
  IndexedSlices) over the micro-batches of an update, each pre-scaled by
  1/accumulation_steps.

  Returns:
    (accumulate_op, list of accumulator variables).
  """
  accumulate, accumulators = [], []
  scale = 1.0 / accumulation_steps
  with tf.device(device), tf.name_scope("accumulate"):
    for value, name, shape in zip(values, names, shapes):
      # A local variable: never saved, so checkpoints keep Google's variable set.
      acc = tf.get_variable(name + "/accumulated_grad", shape, tf.float32,
                            tf.zeros_initializer(), trainable=False,
                            collections=[tf.GraphKeys.LOCAL_VARIABLES], use_resource=True)
      if isinstance(value, tf.IndexedSlices):
        # [rows, hidden] added into the dense [vocab, hidden] accumulator, row by row.
        accumulate.append(acc.scatter_add(tf.IndexedSlices(value.values * scale,
                                                           value.indices)))
      else:
        accumulate.append(acc.assign_add(value * scale))
      accumulators.append(acc)
  return tf.group(*accumulate), accumulators


def _accumulate(values, names, shapes, devices, accumulation_steps):
  """Gradient accumulation, the same for every --variable_update.

  With accumulation_steps > 1, each device's values go through local accumulators that
  accumulate_op adds a micro-batch into; the update reads the accumulated values and must
  clear them after it. With 1, the values pass through as they are.

  Args:
    values: per device (the variable device, or each replica's), its gradients and, last,
      its loss.
    names, shapes: per device, a name and shape per value (the variables' ones; [] for the
      loss).
    devices: where each device's accumulators live.
    accumulation_steps: micro-batches per update.

  Returns:
    (accumulate_op or None, per device the values the update reads, the accumulators to
    clear after the update).
  """
  if accumulation_steps <= 1:
    return None, values, []
  accumulate_ops, reads, clear = [], [], []
  for device_values, device_names, device_shapes, device in zip(values, names, shapes,
                                                                 devices):
    op, accumulators = _local_accumulators(device_values, device_names, device_shapes,
                                           device, accumulation_steps)
    accumulate_ops.append(op)
    clear += accumulators
    with tf.device(device):
      reads.append([acc.read_value() for acc in accumulators])
  return tf.group(*accumulate_ops), reads, clear


def _clear_after(accumulators, dependencies):
  """An op that zeroes `accumulators` once `dependencies` have run."""
  with tf.control_dependencies(dependencies):
    return tf.group(*[acc.assign(tf.zeros_like(acc)) for acc in accumulators])


def build_training(plan, model_fn, features, init_lr, num_train_steps, num_warmup_steps,
                   optimizer_name="adamw", clip_norm=1.0, accumulation_steps=1, precision="fp32",
                   use_xla=False, adam_bias_correction=False, layerwise_lr_decay=1.0,
                   ema_decay=0.0, ema_rule=weight_averages.BIAS_CORRECTED, attack=None):
  """Builds the multi-tower training step.

  Each tower gets an equal slice of the batch; the tower losses and gradients are averaged and
  one update is applied, after which global_step grows by one. With dropout off, k towers x
  batch b give the same update as 1 tower x batch k*b.

  host and gpu0 plans average on the variable device and update its one copy. A replicated
  plan sums the towers of each device locally, all-reduces the sums over every device of
  every worker (packed, dense), and every replica applies the same update to its copy.

  With accumulation_steps = N > 1 the step is split in two ops: `accumulate_op` adds the
  gradient of one micro-batch (scaled by 1/N) to non-trainable accumulators, and `train_op`
  applies the accumulated gradient and clears them. The loop runs accumulate_op N times, then
  train_op once; a replicated plan all-reduces once per update, in train_op.

  With precision="fp16" the loss is scaled dynamically (mixed_precision.DynamicLossScale):
  an update whose gradients overflow is skipped (global_step stays) and the scale halves.
  Replicas decide alike: they test the same all-reduced gradients, in which an overflow
  on any device is inf or NaN.

  Args:
    plan: DevicePlan.
    model_fn: see build_tower_losses_and_grads.
    features: dict name -> tensor [batch, ...]: this worker's share of a (micro-)batch.
    init_lr, num_train_steps, num_warmup_steps: the learning-rate schedule.
    optimizer_name: "adamw", "radam" or "lamb".
    clip_norm: global-norm clip applied to the averaged gradient.
    accumulation_steps: micro-batches per update.
    precision: "fp32", "bf16" or "fp16" (see build_tower_losses_and_grads).
    use_xla: compile each tower with XLA.
    adam_bias_correction: "adamw" with Adam's bias correction (torch.optim.AdamW); its step
      t is global_step + 1, so it counts applied updates (not micro-batches, nor skipped
      fp16 steps) and resumes with the checkpoint.
    layerwise_lr_decay: d < 1 scales each encoder layer's learning rate by d per layer
      below the head (bert_mgpu/training/layerwise_lr.py); 1.0: one rate.
    ema_decay: D > 0 keeps, per replica, an exponential moving average of each trained
      variable, moved after each applied update by ema_rule (weight_averages.py); 0: none.
    attack: an adversarial.Attack (--adversarial): the gradient of each (micro-)batch adds
      that of its adversarial pass, the perturbation taken from the global (micro-)batch's
      gradient; None: none. With accumulation, each micro-batch is attacked on its own.

  Returns:
    TrainOps. With accumulation, `loss` is the current micro-batch's loss and `global_norm`
    belongs to train_op; otherwise accumulate_op is None.
  """
  step_device = plan.worker_device() if plan.replicated else plan.variable_device
  with tf.device(step_device):
    global_step = tf.train.get_or_create_global_step()
    learning_rate = optimization.learning_rate_schedule(
        init_lr, num_train_steps, num_warmup_steps, global_step)
    loss_scale = mixed_precision.DynamicLossScale() if precision == "fp16" else None
    stop_request = tf.placeholder_with_default(0.0, [], name="stop_request")

  optimizer = optimization.make_optimizer(optimizer_name, learning_rate,
                                          adam_bias_correction=adam_bias_correction)

  def apply(pairs, increment_global_step=True):
    """The update of `pairs` (and of their averages) and its global norm."""
    return optimization.apply_gradients(
        pairs, learning_rate, global_step, optimizer, clip_norm,
        skip_non_finite=loss_scale is not None, increment_global_step=increment_global_step,
        learning_rate_scales=layerwise_lr.scales_of(pairs, layerwise_lr_decay),
        ema_decay=ema_decay, ema_rule=ema_rule)

  def finish(updates, global_norm):
    """global_step (and the fp16 loss scale) move once every replica has updated."""
    applied = tf.math.is_finite(global_norm) if loss_scale is not None else None
    with tf.device(step_device):
      train_op = optimization.increment_global_step_after(updates, global_step, applied)
      if loss_scale is not None:
        with tf.control_dependencies([train_op]):
          train_op = loss_scale.update(applied)
    return train_op

  if plan.replicated:
    return _build_replicated_training(
        plan, model_fn, features, accumulation_steps=accumulation_steps, precision=precision,
        use_xla=use_xla, loss_scale=loss_scale, apply=apply, finish=finish,
        step_tensors=(learning_rate, global_step, stop_request), attack=attack)

  loss, grads_and_vars = build_tower_losses_and_grads(plan, model_fn, features, precision,
                                                      use_xla, loss_scale, attack)
  pairs = [(g, v) for g, v in grads_and_vars if g is not None]
  accumulate_op, (values,), clear = _accumulate(
      [[g for g, _ in pairs] + [loss]], [[v.op.name for _, v in pairs] + ["loss"]],
      [[v.shape for _, v in pairs] + [[]]], [plan.variable_device], accumulation_steps)
  with tf.device(plan.variable_device):
    update_loss = tf.identity(values[-1])
    update, global_norm = apply(list(zip(values[:-1], [v for _, v in pairs])),
                                increment_global_step=False)
    train_op = finish([update], global_norm)
  if clear:
    train_op = _clear_after(clear, [train_op, update_loss])
  return TrainOps(train_op, loss, learning_rate, global_norm, global_step, accumulate_op,
                  loss_scale, update_loss, stop_request, stop_request)


def _build_replicated_training(plan, model_fn, features, accumulation_steps, precision,
                               use_xla, loss_scale, apply, finish, step_tensors, attack):
  """build_training for a replicated plan (see there); `apply` and `finish` are its update
  and its global-step increment, step_tensors (learning_rate, global_step, stop_request)."""
  learning_rate, global_step, stop_request = step_tensors
  losses, tower_grads, tower_vars = _build_towers(plan, model_fn, features, precision,
                                                  use_xla, loss_scale, attack)
  devices = plan.replica_devices
  # Every tower of every worker counts once in the mean.
  scale = 1.0 / (plan.num_towers * plan.num_workers)
  with_grads = [j for j, g in enumerate(tower_grads[0]) if g is not None]
  local_grads, local_losses, stops, replica_vars = [], [], [], []
  for r, device in enumerate(devices):
    towers = [i for i in range(plan.num_towers) if plan.replica_of_tower(i) == r]
    with tf.device(device), tf.name_scope("sum_towers_%d" % r):
      # Dense: the embedding's rows become a [vocab, hidden] gradient here, as the update
      # would make it anyway; one all-reduce of it is cheaper than gathering every row.
      local_grads.append([
          tf.add_n([tf.convert_to_tensor(tower_grads[i][j]) for i in towers]) * scale
          for j in with_grads])
      local_losses.append(tf.add_n([losses[i] for i in towers]) * scale)
      # The stop request counts once per worker.
      stops.append(stop_request if r == 0 else tf.zeros([]))
      replica_vars.append([tower_vars[towers[0]][j] for j in with_grads])

  accumulate_op, values, clear = _accumulate(
      [grads + [loss] for grads, loss in zip(local_grads, local_losses)],
      [[v.op.name for v in variables] + ["replica_%d_loss" % r]
       for r, variables in enumerate(replica_vars)],
      [[v.shape for v in variables] + [[]] for variables in replica_vars], devices,
      accumulation_steps)
  local_grads = [device_values[:-1] for device_values in values]
  local_losses = [device_values[-1] for device_values in values]

  stats = []
  for device, loss, stop in zip(devices, local_losses, stops):
    with tf.device(device):
      stats.append(tf.stack([loss, stop]))  # [this device's share of the loss, stop]
  reduced = all_reduce_packed([g + [s] for g, s in zip(local_grads, stats)], devices,
                              plan.group_size, _GROUP_REPLICAS, plan.on_gpu)
  updates, norms = [], []
  for r, device in enumerate(devices):
    with tf.device(device), tf.name_scope("update_replica_%d" % r):
      grads = reduced[r][:-1]
      if loss_scale is not None:
        grads = [loss_scale.unscale(g) for g in grads]
      update, norm = apply(list(zip(grads, replica_vars[r])), increment_global_step=False)
      updates.append(update)
      norms.append(norm)
  reduced_stats = [r[-1] for r in reduced]  # [mean loss of the update, stop votes]
  # Every replica's all-reduce must run in the step, or its peers wait for it.
  train_op = tf.group(finish(updates, norms[0]), *reduced_stats)
  if clear:
    train_op = _clear_after(clear, [train_op])
  mean_local_loss = tf.add_n(losses) / float(plan.num_towers)
  return TrainOps(train_op, mean_local_loss, learning_rate, norms[0], global_step,
                  accumulate_op, loss_scale, reduced_stats[0][0], stop_request,
                  reduced_stats[0][1])


def build_start_sync(plan):
  """Makes every replica of every worker start from the chief's replica 0.

  Run once after the chief has initialised or restored its variables: the other replicas
  (and all of a non-chief worker, which may not see the chief's output_dir) receive the
  chief's weights, optimizer slots, global_step and loss scale.

  The copy is an all-reduce to which only the chief's replica 0 contributes values (the
  others add zeros), with the same packing as the gradients.

  Returns:
    The op, or None for a plan whose variables are not replicated.
  """
  if not plan.replicated:
    return None
  saved = saveable_variables()
  trainable = set(v.op.name for v in _replica_trainable_variables(0))

  def per_replica(name):
    # The trainable variables and their optimizer slots (<name>/adam_m, ...).
    return name in trainable or any(name.startswith(t + "/") for t in trainable)

  replica_names = [v.op.name for v in saved if per_replica(v.op.name)]
  worker_vars = [v for v in saved if not per_replica(v.op.name)]
  by_name = {v.op.name: v for v in tf.global_variables()}
  is_chief = plan.worker_index == 0

  def contributions(variables, source):
    return [v.read_value() if source else tf.zeros(v.shape, v.dtype.base_dtype)
            for v in variables]

  replica_lists, inputs = [], []
  for r, device in enumerate(plan.replica_devices):
    with tf.device(device):
      variables = [by_name[replica_variable_name(n, r)] for n in replica_names]
      replica_lists.append(variables)
      inputs.append(contributions(variables, is_chief and r == 0))
  assigns = []
  if replica_names:
    reduced = all_reduce_packed(inputs, plan.replica_devices, plan.group_size,
                                _GROUP_REPLICAS, plan.on_gpu)
    for variables, values in zip(replica_lists, reduced):
      assigns += [v.assign(x, read_value=False) for v, x in zip(variables, values)]
  if plan.num_workers > 1 and worker_vars:
    device = plan.worker_device()
    with tf.device(device):
      values = all_reduce_packed([contributions(worker_vars, is_chief)], [device],
                                 plan.num_workers, _GROUP_WORKERS, on_gpu=False)[0]
      assigns += [v.assign(x, read_value=False) for v, x in zip(worker_vars, values)]
  return tf.group(*assigns)


def build_worker_check(plan, num_values):
  """Compares `num_values` int64 settings of every worker with the chief's, to check that
  every worker runs the same plan (the same steps, batches and checkpoints, or their
  collectives would pair up wrongly and wait forever).

  Two all-reduces (TF 1.15's all-reduce only adds or multiplies): the chief's values reach
  everyone (the others add zeros), then the count of workers that differ, per setting.
  Build it first: its collective keys then do not depend on the settings it checks.

  Returns:
    (values, chief_values, differing): an int64 placeholder [num_values] to feed, the
    chief's values, and per setting the number of workers whose value differs from the
    chief's, to fetch together.
  """
  device = plan.worker_device()
  with tf.device(device):
    values = tf.placeholder(tf.int64, [num_values], name="worker_settings")
    if plan.num_workers == 1:
      return values, tf.identity(values), tf.zeros([num_values], tf.int64)
    mine = values if plan.worker_index == 0 else tf.zeros_like(values)
    chief_values = collective_sum(mine, plan.num_workers, _GROUP_WORKERS,
                                  collectives.next_instance_key(), on_gpu=False)
    differs = tf.cast(tf.not_equal(values, chief_values), tf.int64)
    differing = collective_sum(differs, plan.num_workers, _GROUP_WORKERS,
                               collectives.next_instance_key(), on_gpu=False)
  return values, chief_values, differing


def build_worker_vote(plan):
  """A flag every worker feeds and all of them read summed: how workers agree to stop (the
  chief found nothing to train, or stopped early). Like every all-reduce, it waits until
  every worker has fed its vote.

  Returns:
    (vote, votes): a float32 scalar placeholder (default 0) and the sum of every worker's
    vote, to fetch together; with one worker, votes is the vote itself.
  """
  device = plan.worker_device()
  with tf.device(device):
    vote = tf.placeholder_with_default(0.0, [], name="worker_vote")
    if plan.num_workers == 1:
      return vote, tf.identity(vote)
    votes = all_reduce_packed([[vote]], [device], plan.num_workers, _GROUP_WORKERS,
                              on_gpu=False)[0][0]
  return vote, votes


# ---------------------------------------------------------------------------
# The tower builder: evaluation and prediction
# ---------------------------------------------------------------------------

def build_inference(plan, model_fn, features, global_batch_size, precision="fp32",
                    use_xla=False, read_averages=False):
  """Runs `model_fn` (is_training=False) on every tower and gathers per-example outputs.

  A batch of n rows is padded up to the next multiple of the tower count so each tower gets
  an equal slice (a short last batch or a one-text request computes at most num_towers - 1
  extra rows), and the padding rows are cut off the outputs again. No example is dropped or
  counted twice. With XLA, every batch is padded to global_batch_size instead: one shape
  means one compiled program.

  Args:
    plan: DevicePlan.
    model_fn: function(features_dict, is_training) -> dict name -> per-example tensor
      [tower_batch, ...] (a scalar "loss" entry, if any, is ignored).
    features: dict name -> tensor [n, ...] with n <= global_batch_size.
    global_batch_size: per-tower batch size x towers.
    precision, use_xla: as for build_training.
    read_averages: read each variable's weight average where the graph has one (the
      training graph of a run with --ema_decay).

  Returns:
    dict name -> tensor [n, ...], the towers' outputs in input order.
  """
  first = next(iter(features.values()))
  num_real = tf.shape(first)[0]
  towers = plan.num_towers
  padded_size = (global_batch_size if use_xla else
                 (num_real + towers - 1) // towers * towers)
  padded = {}
  for name, tensor in features.items():
    rank = len(tensor.shape)
    padding = [[0, padded_size - num_real]] + [[0, 0]] * (rank - 1)
    padded[name] = tf.pad(tensor, padding)
    padded[name].set_shape([global_batch_size if use_xla else None] +
                           tensor.shape.as_list()[1:])
  tower_features = split_for_towers(padded, towers)
  tower_outputs = []
  dtype = mixed_precision.compute_dtype(precision)
  for i in range(towers):
    with _tower_scope(plan, i, dtype, use_xla, read_averages):
      outputs = model_fn(tower_features[i], False)
      tower_outputs.append({k: v for k, v in outputs.items() if len(v.shape) > 0})
  with tf.device(plan.variable_device):
    return {name: tf.concat([o[name] for o in tower_outputs], axis=0)[:num_real]
            for name in tower_outputs[0]}
