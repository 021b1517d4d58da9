# coding=utf-8
"""Runs BERT on every GPU of a machine: the device plan, the tower builder and the
train/eval/predict loop that all run_*_mgpu.py scripts share.

This is the one module that knows about towers and devices.
"""

import collections
import contextlib
import json
import os
import sys
import tempfile
import time

import numpy as np
import tensorflow.compat.v1 as tf

import modeling
import optimization
import tokenization


class UsageError(Exception):
  """Bad input or flags: main() prints the message on one line and exits 1.

  The message names the file, line and value where there is one, and says what
  to do about it.
  """


def _current_umask():
  """The process umask (reading it means setting it, so it is set straight back)."""
  mask = os.umask(0o022)
  os.umask(mask)
  return mask


def atomic_write_text(path, text):
  """Writes `text` (UTF-8) to `path` through a temp file and a rename.

  A crash leaves either the old file or the new one, never half a file.
  """
  directory = os.path.dirname(os.path.abspath(path))
  fd, tmp_path = tempfile.mkstemp(dir=directory, prefix=".tmp-" + os.path.basename(path))
  try:
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
      f.write(text)
    # mkstemp makes the file private (0600); give it the mode open() would give it.
    os.chmod(tmp_path, 0o666 & ~_current_umask())
    os.replace(tmp_path, path)
  except BaseException:
    if os.path.exists(tmp_path):
      os.remove(tmp_path)
    raise


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


def check_tower_counts(n_gpus, towers_per_gpu):
  """Raises UsageError unless both counts are at least 1 (no TensorFlow runtime needed)."""
  if n_gpus < 1:
    raise UsageError("--n_gpus=%d: it must be at least 1." % n_gpus)
  if towers_per_gpu < 1:
    raise UsageError("--towers_per_gpu=%d: it must be at least 1." % towers_per_gpu)


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
    UsageError: n_gpus or towers_per_gpu < 1, or n_gpus > visible GPUs.
  """
  check_tower_counts(n_gpus, towers_per_gpu)
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
    raise UsageError(
        "--n_gpus=%d but only %d GPU(s) are visible (CUDA_VISIBLE_DEVICES=%s): lower --n_gpus "
        "or make more GPUs visible." %
        (n_gpus, visible_gpus, os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")))
  else:
    towers = ["/gpu:%d" % g for g in range(n_gpus) for _ in range(towers_per_gpu)]
    plan = DevicePlan(towers, "/gpu:0" if variables_on_gpu else "/cpu:0")
  for line in plan.describe():
    tf.logging.info("device plan: %s", line)
  return plan


def _device_function(tower_device, variable_device):
  """Places variable storage on `variable_device` and everything else on `tower_device`."""
  def choose(op):
    if op.type in _VARIABLE_OP_TYPES:
      return variable_device
    return tower_device
  return choose


@contextlib.contextmanager
def _tower_scope(plan, tower_index):
  """Enters tower `tower_index`: its device, a name scope, and the shared variable scope.

  Variables keep their plain names (no tower prefix), so checkpoints stay Google-compatible:
  name scopes only prefix ops, and every tower reuses the variables the first one created.
  Resource variables: with ref variables, assign-based updates race with other towers' reads.
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
        return tf.identity(variable, name="read_" + variable.op.name.replace("/", "_"))

    with tf.variable_scope(tf.get_variable_scope(), reuse=tf.AUTO_REUSE, use_resource=True,
                           custom_getter=read_on_tower):
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
                 "accumulate_op"])


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


def build_tower_losses_and_grads(plan, model_fn, features):
  """Runs `model_fn` on each tower's slice of the batch and differentiates its loss there.

  Args:
    plan: DevicePlan.
    model_fn: function(features_dict, is_training) -> dict with "loss" (scalar, mean over the
      tower's examples). It creates its variables with tf.get_variable.
    features: dict name -> tensor [global_batch, ...].

  Returns:
    (mean loss over towers, list of (averaged gradient, variable)).
  """
  tower_features = split_for_towers(features, plan.num_towers)
  losses, all_grads, tvars = [], [], None
  for i in range(plan.num_towers):
    with _tower_scope(plan, i):
      loss = model_fn(tower_features[i], True)["loss"]
      if tvars is None:
        tvars = tf.trainable_variables()
      all_grads.append(tf.gradients(loss, tvars, colocate_gradients_with_ops=True))
      losses.append(loss)
  with tf.device(plan.variable_device), tf.name_scope("average_towers"):
    mean_loss = tf.add_n(losses) / float(plan.num_towers)
    grads_and_vars = [
        (average_gradients([tower[j] for tower in all_grads], plan.num_towers), var)
        for j, var in enumerate(tvars)]
  return mean_loss, grads_and_vars


def build_training(plan, model_fn, features, init_lr, num_train_steps, num_warmup_steps,
                   optimizer_name="adamw", clip_norm=1.0, accumulation_steps=1):
  """Builds the multi-tower training step.

  Each tower gets an equal slice of the global batch; the tower losses and gradients are
  averaged on the variable device and one update is applied, after which global_step grows by
  one. With dropout off, k towers x batch b give the same update as 1 tower x batch k*b.

  With accumulation_steps = N > 1 the step is split in two ops: `accumulate_op` adds the
  averaged gradient of one micro-batch (scaled by 1/N) to non-trainable accumulators, and
  `train_op` applies the accumulated gradient and clears them. The loop runs accumulate_op N
  times, then train_op once.

  Args:
    plan: DevicePlan.
    model_fn: see build_tower_losses_and_grads.
    features: dict name -> tensor [global_batch, ...] (one micro-batch when accumulating).
    init_lr, num_train_steps, num_warmup_steps: the learning-rate schedule.
    optimizer_name: "adamw", "radam" or "lamb".
    clip_norm: global-norm clip applied to the averaged gradient.
    accumulation_steps: micro-batches per update.

  Returns:
    TrainOps. With accumulation, `loss` is the current micro-batch's loss and `global_norm`
    belongs to train_op; otherwise accumulate_op is None.
  """
  with tf.device(plan.variable_device):
    global_step = tf.train.get_or_create_global_step()
    learning_rate = optimization.learning_rate_schedule(
        init_lr, num_train_steps, num_warmup_steps, global_step)
  loss, grads_and_vars = build_tower_losses_and_grads(plan, model_fn, features)
  if accumulation_steps <= 1:
    with tf.device(plan.variable_device):
      train_op, global_norm = optimization.apply_gradients(
          grads_and_vars, learning_rate, global_step, optimizer_name, clip_norm)
    return TrainOps(train_op, loss, learning_rate, global_norm, global_step, None)

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
    train_op, global_norm = optimization.apply_gradients(
        [(acc.read_value(), var) for acc, var in pairs], learning_rate, global_step,
        optimizer_name, clip_norm)
    with tf.control_dependencies([train_op]):
      train_op = tf.group(*[acc.assign(tf.zeros_like(acc)) for acc in accumulators])
  return TrainOps(train_op, loss, learning_rate, global_norm, global_step, accumulate_op)


# ---------------------------------------------------------------------------
# The tower builder: evaluation and prediction
# ---------------------------------------------------------------------------

def build_inference(plan, model_fn, features, global_batch_size):
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
  for i in range(plan.num_towers):
    with _tower_scope(plan, i):
      outputs = model_fn(tower_features[i], False)
      tower_outputs.append({k: v for k, v in outputs.items() if len(v.shape) > 0})
  with tf.device(plan.variable_device):
    return {name: tf.concat([o[name] for o in tower_outputs], axis=0)[:num_real]
            for name in tower_outputs[0]}


# ---------------------------------------------------------------------------
# Input pipeline
# ---------------------------------------------------------------------------

def _decode_record(record, feature_spec):
  """Parses one tf.train.Example; int64 becomes int32, which every device handles."""
  example = tf.parse_single_example(record, feature_spec)
  return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t
          for name, t in example.items()}


def expand_input_files(input_file_flag, directory_suffix=None):
  """The files an --input_file flag names: comma-separated globs (and directories).

  Args:
    input_file_flag: e.g. "a.txt,data/*.txt".
    directory_suffix: if given, a pattern that is a directory means its files ending in it
      (e.g. ".tfrecord").

  Returns:
    File paths, pattern by pattern in the order given, each pattern's matches sorted.

  Raises:
    UsageError: the flag is empty, or a pattern matches no file.
  """
  patterns = [p.strip() for p in (input_file_flag or "").split(",") if p.strip()]
  if not patterns:
    raise UsageError("--input_file is empty: give one or more files as comma-separated globs.")
  files = []
  for pattern in patterns:
    if directory_suffix and tf.gfile.IsDirectory(pattern):
      pattern = os.path.join(pattern, "*" + directory_suffix)
    try:
      matches = sorted(p for p in tf.gfile.Glob(pattern) if not tf.gfile.IsDirectory(p))
    except tf.errors.NotFoundError:  # TF 1.15, for a directory that does not exist
      matches = []
    if not matches:
      raise UsageError("--input_file: %s matches no file. Check the path." % pattern)
    files.extend(matches)
  return files


def make_dataset(input_files, feature_spec, global_batch_size, is_training, seed=None,
                 shuffle_buffer=10000, skip_batches=0):
  """Reads TFRecord files into batches of the *global* batch size.

  The global batch is formed before it is split across towers, so a seed gives the same
  sequence of global batches whatever the tower count.

  Args:
    input_files: list of TFRecord paths.
    feature_spec: dict name -> tf.FixedLenFeature.
    global_batch_size: examples per step over all towers.
    is_training: True: repeat forever, reshuffle every epoch with `seed`, drop the last partial
      batch. False: one pass in file order; the last batch may be partial.
    seed: shuffle seed.
    shuffle_buffer: examples in the shuffle buffer.
    skip_batches: batches to skip (a resumed run skips what it already trained on, so it sees
      the same data as a run that never stopped).

  Returns:
    A tf.data.Dataset of dicts name -> tensor [batch, ...].
  """
  dataset = tf.data.TFRecordDataset(input_files)
  if is_training:
    dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.repeat()
    if skip_batches:
      dataset = dataset.skip(skip_batches * global_batch_size)
  # Parallel parsing keeps the order (deterministic), so batches do not depend on it.
  dataset = dataset.map(lambda record: _decode_record(record, feature_spec),
                        num_parallel_calls=4)
  dataset = dataset.batch(global_batch_size, drop_remainder=is_training)
  return dataset.prefetch(2)


# ---------------------------------------------------------------------------
# The shared loop: train, evaluate, predict
# ---------------------------------------------------------------------------

class TrainingDiverged(UsageError):
  """The loss became NaN or infinite."""


EvalSpec = collections.namedtuple(
    "EvalSpec", ["make_dataset", "global_batch_size", "metrics_fn", "best_metric", "patience"])
EvalSpec.__doc__ = """Evaluation during training, at every checkpoint.

Fields:
  make_dataset: function() -> tf.data.Dataset of the dev set (make_dataset with
    is_training=False); called inside the graph being built.
  global_batch_size: its batch size over all towers.
  metrics_fn: function(dict name -> np.ndarray of per-example outputs) -> dict name -> float.
  best_metric: key of metrics_fn's result to maximise; its best checkpoint is kept in
    output_dir/best. None: keep no best checkpoint.
  patience: stop after this many evaluations without a new best (None or 0: never).
"""


def checkpoint_global_step(checkpoint_path):
  """The global_step stored in a checkpoint (0 for one without, like Google's releases)."""
  reader = tf.train.load_checkpoint(checkpoint_path)
  if reader.has_tensor("global_step"):
    return int(reader.get_tensor("global_step"))
  return 0


def _run_to_end(sess, iterator, outputs):
  """Runs `outputs` over one pass of `iterator`; returns dict name -> concatenated arrays."""
  sess.run(iterator.initializer)
  chunks = collections.defaultdict(list)
  while True:
    try:
      values = sess.run(outputs)
    except tf.errors.OutOfRangeError:
      break
    for name, value in values.items():
      chunks[name].append(value)
  return {name: np.concatenate(parts, axis=0) for name, parts in chunks.items()}


def init_from_checkpoint(init_checkpoint):
  """Initialises the graph's trainable variables that `init_checkpoint` holds.

  Returns:
    The names of the trainable variables it did not hold (a new task head, say).

  Raises:
    UsageError: missing checkpoint, or a variable whose shape differs from the checkpoint's.
  """
  tvars = tf.trainable_variables()
  try:
    assignment_map, initialized = modeling.get_assignment_map_from_checkpoint(
        tvars, init_checkpoint)
  except ValueError as e:
    raise UsageError("--init_checkpoint=%s: %s" % (init_checkpoint, e))
  tf.train.init_from_checkpoint(init_checkpoint, assignment_map)
  return [v.op.name for v in tvars if v.op.name not in initialized]


def _scalar_summary(writer, step, values):
  summary = tf.Summary(value=[tf.Summary.Value(tag=tag, simple_value=float(value))
                              for tag, value in sorted(values.items())])
  writer.add_summary(summary, step)
  writer.flush()


class _BestCheckpoint(object):
  """Keeps a copy of the best-scoring checkpoint in output_dir/best, across restarts."""

  def __init__(self, output_dir, metric, resuming):
    """Args: output_dir; metric: the key to maximise; resuming: whether training resumes.

    The stored state counts only when the run resumes with the same metric: a run from
    scratch, or one that maximises another metric, starts a new record (and best/ is
    overwritten by its first evaluation).
    """
    self.metric = metric
    self.directory = os.path.join(output_dir, "best")
    self.state_file = os.path.join(self.directory, "best_metric.json")
    self.best = None
    self.evals_since_best = 0
    if resuming and tf.gfile.Exists(self.state_file):
      with tf.gfile.GFile(self.state_file) as f:
        state = json.load(f)
      if state.get("metric") == metric:
        self.best, self.evals_since_best = state["value"], state["evals_since_best"]

  def update(self, checkpoint_path, metrics):
    """Records an evaluation; copies the checkpoint when it is a new best. Returns True then."""
    value = metrics[self.metric]
    improved = self.best is None or value > self.best
    if improved:
      tf.gfile.MakeDirs(self.directory)
      old = tf.train.latest_checkpoint(self.directory)
      for source in tf.gfile.Glob(checkpoint_path + ".*"):
        target = os.path.join(self.directory, os.path.basename(source))
        tf.gfile.Copy(source, target + ".tmp", overwrite=True)
        tf.gfile.Rename(target + ".tmp", target, overwrite=True)
      # A bare file name, so output_dir can be moved or copied (as save_relative_paths).
      name = os.path.basename(checkpoint_path)
      tf.train.update_checkpoint_state(self.directory, name, all_model_checkpoint_paths=[name])
      if old and os.path.basename(old) != os.path.basename(checkpoint_path):
        for stale in tf.gfile.Glob(old + ".*"):
          tf.gfile.Remove(stale)
      self.best, self.evals_since_best = value, 0
    else:
      self.evals_since_best += 1
    atomic_write_text(self.state_file, json.dumps(
        {"metric": self.metric, "value": self.best, "evals_since_best": self.evals_since_best,
         "checkpoint": os.path.basename(checkpoint_path) if improved else None}))
    return improved


def _format_eta(seconds):
  seconds = int(max(0, seconds))
  return "%d:%02d:%02d" % (seconds // 3600, seconds // 60 % 60, seconds % 60)


def train(plan, model_fn, make_train_dataset, output_dir, num_train_steps, num_warmup_steps,
          learning_rate, global_batch_size, optimizer_name="adamw", init_checkpoint=None,
          save_checkpoints_steps=1000, keep_checkpoint_max=5, log_steps=100, random_seed=None,
          accumulation_steps=1, eval_spec=None):
  """Trains on every tower until global_step == num_train_steps; resumes where it stopped.

  If output_dir holds a checkpoint, training resumes from it (global step, optimizer slots and
  so the learning-rate schedule) and skips the data it already saw; --init_checkpoint is used
  only when it does not. A checkpoint is written every save_checkpoints_steps and at the end;
  with eval_spec, the dev set is evaluated at each one.

  Args:
    plan: DevicePlan.
    model_fn: function(features, is_training) -> dict with "loss" and per-example outputs.
    make_train_dataset: function(skip_batches) -> tf.data.Dataset of global (micro-)batches.
    output_dir: checkpoints, TensorBoard events, best/.
    num_train_steps, num_warmup_steps, learning_rate: the schedule (steps are updates).
    global_batch_size: examples per micro-batch over all towers (for examples/sec).
    optimizer_name: "adamw", "radam" or "lamb".
    init_checkpoint: checkpoint to start from when output_dir has none.
    save_checkpoints_steps, keep_checkpoint_max, log_steps: checkpoint and log cadence.
    random_seed: graph-level seed (initialisation, dropout, shuffling).
    accumulation_steps: micro-batches per update.
    eval_spec: EvalSpec or None.

  Returns:
    Path of the last checkpoint.

  Raises:
    TrainingDiverged: non-finite loss; the last good checkpoint is left as it was.
  """
  tf.gfile.MakeDirs(output_dir)
  latest = tf.train.latest_checkpoint(output_dir)
  start_step = checkpoint_global_step(latest) if latest else 0
  if start_step >= num_train_steps:
    tf.logging.info("%s is already at step %d of %d: nothing to train.", latest, start_step,
                    num_train_steps)
    return latest
  best = None
  if eval_spec is not None and eval_spec.best_metric:
    best = _BestCheckpoint(output_dir, eval_spec.best_metric, resuming=latest is not None)
    if eval_spec.patience and best.evals_since_best >= eval_spec.patience:
      tf.logging.info("%s stopped early (no better %s in %d evaluations): nothing to train.",
                      output_dir, best.metric, best.evals_since_best)
      return latest

  graph = tf.Graph()
  with graph.as_default():
    if random_seed is not None:
      tf.set_random_seed(random_seed)
    dataset = make_train_dataset(start_step * accumulation_steps)
    features = tf.data.make_one_shot_iterator(dataset).get_next()
    ops = build_training(plan, model_fn, features, learning_rate, num_train_steps,
                         num_warmup_steps, optimizer_name, accumulation_steps=accumulation_steps)
    if eval_spec is not None:
      eval_iterator = tf.data.make_initializable_iterator(eval_spec.make_dataset())
      eval_outputs = build_inference(plan, model_fn, eval_iterator.get_next(),
                                     eval_spec.global_batch_size)
    if latest:
      tf.logging.info("Resuming from %s (step %d of %d); --init_checkpoint is not used.",
                      latest, start_step, num_train_steps)
    elif init_checkpoint:
      missing = init_from_checkpoint(init_checkpoint)
      tf.logging.info("Initialised from --init_checkpoint=%s; not in it, so freshly "
                      "initialised: %s", init_checkpoint, ", ".join(missing) or "nothing")
    else:
      tf.logging.info("No checkpoint in %s and no --init_checkpoint: training from scratch.",
                      output_dir)
    saver = tf.train.Saver(max_to_keep=keep_checkpoint_max, save_relative_paths=True)
    global_init = tf.global_variables_initializer()
    local_init = tf.local_variables_initializer()
    graph.finalize()

    with tf.Session(config=plan.session_config()) as sess:
      if latest:
        saver.restore(sess, latest)
        # Lets keep_checkpoint_max delete the checkpoints written before the restart too.
        saver.recover_last_checkpoints(
            tf.train.get_checkpoint_state(output_dir).all_model_checkpoint_paths)
      else:
        sess.run(global_init)
      sess.run(local_init)
      writer = tf.summary.FileWriter(output_dir)
      eval_writer = tf.summary.FileWriter(os.path.join(output_dir, "eval")) if eval_spec else None

      def save_and_evaluate(step):
        path = saver.save(sess, os.path.join(output_dir, "model.ckpt"), global_step=step,
                          write_meta_graph=False)
        tf.logging.info("Saved %s", path)
        if eval_spec is None:
          return path, False
        metrics = eval_spec.metrics_fn(_run_to_end(sess, eval_iterator, eval_outputs))
        _scalar_summary(eval_writer, step, metrics)
        tf.logging.info("eval at step %d: %s", step, "  ".join(
            "%s = %.4f" % kv for kv in sorted(metrics.items())))
        stop = False
        if best is not None:
          if best.update(path, metrics):
            tf.logging.info("New best %s = %.4f, kept in %s", best.metric, best.best,
                            best.directory)
          stop = bool(eval_spec.patience) and best.evals_since_best >= eval_spec.patience
          if stop:
            tf.logging.info("Early stopping: no better %s in %d evaluations.", best.metric,
                            best.evals_since_best)
        return path, stop

      step, last_path = start_step, latest
      window_start, window_steps, window_loss = time.time(), 0, 0.0
      examples_per_step = global_batch_size * accumulation_steps
      fetches = {"train_op": ops.train_op, "loss": ops.loss, "lr": ops.learning_rate,
                 "global_norm": ops.global_norm}
      while step < num_train_steps:
        if ops.accumulate_op is None:
          result = sess.run(fetches)
        else:
          micro_losses = [sess.run([ops.accumulate_op, ops.loss])[1]
                          for _ in range(accumulation_steps)]
          result = sess.run({k: v for k, v in fetches.items() if k != "loss"})
          result["loss"] = float(np.mean(micro_losses))
        step += 1
        # A non-finite gradient norm means this update wrote NaN/inf into the weights.
        if not (np.isfinite(result["loss"]) and np.isfinite(result["global_norm"])):
          raise TrainingDiverged(
              "The training loss is %s and the gradient norm %s at step %d; stopped without "
              "saving, so the last good checkpoint (%s) is intact. Lower --learning_rate or "
              "check the input data." %
              (result["loss"], result["global_norm"], step, last_path or "none"))
        window_steps += 1
        window_loss += result["loss"]
        if step % log_steps == 0 or step == num_train_steps:
          elapsed = time.time() - window_start
          examples_per_sec = window_steps * examples_per_step / max(elapsed, 1e-9)
          seconds_per_step = elapsed / window_steps
          tf.logging.info(
              "step %d/%d  loss %.4f  lr %.3g  grad_norm %.3f  examples/sec %.1f  ETA %s",
              step, num_train_steps, window_loss / window_steps, result["lr"],
              result["global_norm"], examples_per_sec,
              _format_eta(seconds_per_step * (num_train_steps - step)))
          _scalar_summary(writer, step, {
              "loss": window_loss / window_steps, "learning_rate": result["lr"],
              "examples_per_sec": examples_per_sec, "global_norm": result["global_norm"]})
          window_start, window_steps, window_loss = time.time(), 0, 0.0
        if step % save_checkpoints_steps == 0 or step == num_train_steps:
          last_path, stop = save_and_evaluate(step)
          if stop:
            break
          window_start = time.time()  # saving and evaluating are not training speed
      writer.close()
      if eval_writer:
        eval_writer.close()
  return last_path


def infer(plan, model_fn, make_dataset_fn, global_batch_size, checkpoint_path):
  """Runs the model (is_training=False) over one pass of `dataset` on every tower.

  Args:
    plan: DevicePlan.
    model_fn: function(features, is_training) -> dict of per-example outputs.
    make_dataset_fn: function() -> tf.data.Dataset (make_dataset with is_training=False).
    global_batch_size: its batch size over all towers.
    checkpoint_path: the weights to use.

  Returns:
    dict name -> np.ndarray [num_examples, ...], in input order.
  """
  graph = tf.Graph()
  with graph.as_default():
    iterator = tf.data.make_initializable_iterator(make_dataset_fn())
    outputs = build_inference(plan, model_fn, iterator.get_next(), global_batch_size)
    saved = tf.train.load_checkpoint(checkpoint_path).get_variable_to_shape_map()
    missing = [v.op.name for v in tf.global_variables() if v.op.name not in saved]
    if missing:
      raise UsageError(
          "%s lacks %d of this model's variables (%s): it is not a model trained for this task. "
          "Evaluate or predict with a checkpoint from --do_train." %
          (checkpoint_path, len(missing), ", ".join(missing[:3] + ["..."] * (len(missing) > 3))))
    saver = tf.train.Saver(tf.global_variables())
    graph.finalize()
    with tf.Session(config=plan.session_config()) as sess:
      saver.restore(sess, checkpoint_path)
      return _run_to_end(sess, iterator, outputs)


# ---------------------------------------------------------------------------
# Flags and main() shared by the run scripts
# ---------------------------------------------------------------------------

def define_multigpu_flags():
  """Defines the flags every run_*_mgpu.py script shares: ours, and Google's TPU flags.

  The TPU flags are accepted so that users' command lines parse; --use_tpu=true is refused
  by check_run_flags.
  """
  flags = tf.flags
  flags.DEFINE_bool("use_tpu", False, "Not supported; accepted so that command lines parse.")
  for name in ("tpu_name", "tpu_zone", "gcp_project", "master"):
    flags.DEFINE_string(name, None, "Accepted for Google compatibility; unused.")
  flags.DEFINE_integer("num_tpu_cores", 8, "Accepted for Google compatibility; unused.")
  flags.DEFINE_integer("iterations_per_loop", 1000, "Accepted for Google compatibility (TPU "
                       "only); unused.")
  flags.DEFINE_integer("n_gpus", 1, "GPUs to use. With none visible, towers run on logical "
                       "CPU devices.")
  flags.DEFINE_integer("towers_per_gpu", 1, "Model replicas (towers) on each GPU.")
  flags.DEFINE_bool("variables_on_gpu", False, "Keep variables, gradient averaging and the "
                    "update on GPU 0 instead of the host CPU.")
  flags.DEFINE_integer("random_seed", 12345, "Seed for initialisation, shuffling and dropout.")
  flags.DEFINE_enum("optimizer", "adamw", ["adamw", "radam", "lamb"], "The optimizer.")
  flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints to keep in output_dir.")
  flags.DEFINE_integer("log_steps", 100, "Log progress every this many steps.")
  flags.DEFINE_integer("accumulation_steps", 1, "Micro-batches whose gradients are averaged "
                       "into one update.")


def check_run_flags(flags_values, positive_flag_names):
  """Checks what every run script's flags share. Raises UsageError naming the flag.

  Args:
    flags_values: tf.flags.FLAGS.
    positive_flag_names: integer flags that must be at least 1.
  """
  if flags_values.use_tpu:
    raise UsageError("--use_tpu=true: bert-mgpu does not run on TPUs. Drop --use_tpu and set "
                     "--n_gpus to the GPUs to use.")
  check_tower_counts(flags_values.n_gpus, flags_values.towers_per_gpu)
  init_checkpoint = flags_values.init_checkpoint
  if init_checkpoint and not tf.gfile.Exists(init_checkpoint + ".index"):
    raise UsageError("--init_checkpoint=%s: no checkpoint there (expected %s.index). Give the "
                     "path without the .index/.data suffix, e.g. "
                     "chinese_L-12_H-768_A-12/bert_model.ckpt." %
                     (init_checkpoint, init_checkpoint))
  for name in positive_flag_names:
    if getattr(flags_values, name) < 1:
      raise UsageError("--%s=%d: it must be at least 1." % (name, getattr(flags_values, name)))


def load_bert_config(config_file, max_seq_length):
  """Reads bert_config.json and checks max_seq_length against it. Raises UsageError."""
  try:
    bert_config = modeling.BertConfig.from_json_file(config_file)
  except ValueError as e:
    raise UsageError(str(e))
  if max_seq_length > bert_config.max_position_embeddings:
    raise UsageError(
        "--max_seq_length=%d is longer than max_position_embeddings=%d in %s: use "
        "--max_seq_length=%d or less." % (max_seq_length, bert_config.max_position_embeddings,
                                          config_file, bert_config.max_position_embeddings))
  return bert_config


def require_file(flag_name, path):
  """Raises UsageError unless the file flag `flag_name` is set to an existing path."""
  if not path:
    raise UsageError("--%s is required." % flag_name)
  if not tf.gfile.Exists(path):
    raise UsageError("--%s=%s: no such file. Check the path." % (flag_name, path))


def load_tokenizer(vocab_file, do_lower_case, bert_config, bert_config_file):
  """The FullTokenizer of `vocab_file`, checked against the config's vocab_size.

  Raises:
    UsageError: the vocab file is unreadable or bigger than the model's vocab.
  """
  try:
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
  except ValueError as e:
    raise UsageError(str(e))
  if len(tokenizer.vocab) > bert_config.vocab_size:
    raise UsageError(
        "%s has %d tokens but vocab_size is %d in %s: the vocab and the config belong to "
        "different models. Use the vocab.txt that came with the checkpoint." %
        (vocab_file, len(tokenizer.vocab), bert_config.vocab_size, bert_config_file))
  return tokenizer


def checkpoint_for_inference(output_dir, init_checkpoint, best_subdir=None):
  """The weights to evaluate or predict with, and a phrase saying why.

  output_dir/<best_subdir> when given and holding a checkpoint, else the latest checkpoint
  in output_dir, else init_checkpoint.

  Raises:
    UsageError: none of them exists.
  """
  if best_subdir:
    best_dir = os.path.join(output_dir, best_subdir)
    best = tf.train.latest_checkpoint(best_dir) if tf.gfile.IsDirectory(best_dir) else None
    if best:
      return best, "the best dev checkpoint, kept in %s" % best_dir
  latest = tf.train.latest_checkpoint(output_dir)
  if latest:
    return latest, "the latest checkpoint in --output_dir"
  if init_checkpoint:
    return init_checkpoint, "--init_checkpoint (no checkpoint in --output_dir)"
  raise UsageError("No checkpoint in --output_dir=%s and no --init_checkpoint: train first "
                   "(--do_train) or point --output_dir at a trained model." % output_dir)


def available_cpus():
  """CPU cores this process may run on."""
  if hasattr(os, "sched_getaffinity"):
    return len(os.sched_getaffinity(0))
  return os.cpu_count() or 1


def int64_feature(values):
  """A tf.train.Feature of int64 values."""
  return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def write_records_atomically(path, records):
  """Writes serialized records to a TFRecord file through a temp file and a rename.

  A failure or a kill leaves the old file (or none), never half a file under `path`.

  Args:
    path: the TFRecord file.
    records: iterable of serialized tf.train.Example strings.

  Returns:
    The number of records written.
  """
  directory = os.path.dirname(os.path.abspath(path))
  fd, tmp_path = tempfile.mkstemp(dir=directory, prefix=".tmp-" + os.path.basename(path))
  os.close(fd)
  try:
    count = 0
    with tf.python_io.TFRecordWriter(tmp_path) as writer:
      for record in records:
        writer.write(record)
        count += 1
    os.replace(tmp_path, path)
  except BaseException:
    if os.path.exists(tmp_path):
      os.remove(tmp_path)
    raise
  return count


def format_key_values(values):
  """Google's eval_results.txt: `key = value` lines, keys sorted."""
  return "".join("%s = %s\n" % (key, values[key]) for key in sorted(values))


def run_main(main):
  """Runs `main(argv)` under tf.app.run; a UsageError becomes one line on stderr and exit 1."""
  def guarded(argv):
    try:
      main(argv)
    except UsageError as e:
      sys.stderr.write("error: %s\n" % e)
      sys.exit(1)
  tf.logging.set_verbosity(tf.logging.INFO)
  # TF 2.x hands each record to absl and to Python's root logger: print it once.
  tf.get_logger().propagate = False
  tf.app.run(guarded)
