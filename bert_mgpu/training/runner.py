# coding=utf-8
"""The loop under every run_*_mgpu.py script: train(), infer() and evaluate().

The run skeleton (job.py) builds a RunConfig with run_settings.make_run_config() (the batch
and step arithmetic and the device check), claims output_dir, and hands a task's model_fn
and datasets to the functions here. Devices and towers are multigpu.py's; checkpoints and best/ are
checkpoints.py's; the other workers of a multi-worker run are behind peers.Peers.
"""

import collections
import os
import socket
import time

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu.data import output_files
from bert_mgpu.data import tfrecord_io
from bert_mgpu.distributed.peers import Peers
from bert_mgpu.errors import TrainingDiverged, UsageError, write_error
from bert_mgpu import progress
from bert_mgpu.training import checkpoints
from bert_mgpu.training import phases
from bert_mgpu.training import preemption
from bert_mgpu.training import weight_averages
import modeling
import multigpu

EvalSpec = collections.namedtuple(
    "EvalSpec", ["make_dataset", "metrics_fn", "best_metric", "patience"])
EvalSpec.__doc__ = """Evaluation during training, at every checkpoint.

Fields:
  make_dataset: function() -> tf.data.Dataset of the dev set in global batches of
    config.global_eval_batch_size (is_training=False); called inside the graph being built.
  metrics_fn: function(dict name -> np.ndarray of per-example outputs) -> dict name -> float.
  best_metric: key of metrics_fn's result to maximise; its best checkpoint is kept in
    output_dir/best. None: keep no best checkpoint.
  patience: stop after this many evaluations without a new best (None or 0: never).
"""


def train(config, model_fn, make_train_dataset, eval_spec=None, inference=None):
  """Trains on every tower until global_step == config.num_train_steps; resumes where it
  stopped.

  If output_dir holds a checkpoint, training resumes from it (global step, optimizer slots and
  so the learning-rate schedule) and skips the batches it already trained on; the
  init_checkpoint is used only when it does not. A checkpoint is written every
  save_checkpoints_steps and at the end; with eval_spec, the dev set is evaluated at each one.
  SIGTERM or Ctrl-C stops after the current step with a checkpoint that is not evaluated.

  With several workers, every worker calls this with the same config; the chief alone
  restores, saves, evaluates and writes summaries, and all stop at the same step (peers.py).

  Args:
    config: run_settings.RunConfig.
    model_fn: function(features, is_training) -> dict with "loss" and per-example outputs.
    make_train_dataset: function(skip_batches) -> tf.data.Dataset of micro-batches of
      config.micro_batch_size that first skips `skip_batches` (an int64 scalar tensor).
    eval_spec: EvalSpec or None (used on the chief only).
    inference: an Inference, or None. A single-process run builds its datasets' towers
      into the training graph and, once training ends, runs them in the training session
      on the checkpoint Inference chooses (one graph per job); Inference.outputs() then
      returns those outputs. Other runs leave it to build a graph of its own.

  Returns:
    Path of the last checkpoint (None on a worker that is not the chief).

  Raises:
    TrainingDiverged: non-finite loss; the last good checkpoint is left as it was.
    Preempted: stopped by a signal after saving a checkpoint.
    WorkerLost: another worker died or cannot be reached.
    UsageError: a checkpoint, best/ copy or summary could not be written.
  """
  start = _StartState(config, eval_spec if config.is_chief else None)
  if start.finished and config.cluster is None:
    return start.latest
  for line in config.describe_training():
    tf.logging.info("Training: %s", line)
  with phases.timed("build"):
    graph = _build_training_graph(config, model_fn, make_train_dataset, start, inference)
  peers = graph.peers
  # In the graph: TF 2.x's v1 Saver and FileWriter refuse to work eagerly.
  with graph.graph.as_default(), peers.session(graph.graph) as sess, \
      preemption.StopSignals() as stop, phases.timed("train"):
    step = _open_training(sess, graph, start)
    if step is None:
      return start.latest  # the chief found nothing to train (several workers)
    with _Checkpointing(config, sess, graph, start, step) as saving:
      step_log = _Progress(config, saving.writer)
      health = _StepHealth(config, sess, graph.ops)
      early_stopped = False
      while step < config.num_train_steps and not peers.stopping(stop):
        result = _run_update(sess, graph, stop, step + 1)
        if not health.update_applied(result, step + 1, saving.last_path):
          continue  # fp16 overflow: the update was skipped
        step += 1
        step_log.add(step, result)
        if step % config.save_checkpoints_steps == 0 or step == config.num_train_steps:
          early_stopped = saving.save_and_evaluate(step)
          # The chief's verdict reaches every worker (they wait here while it evaluates).
          if peers.vote(sess, early_stopped):
            early_stopped = True
            break
          step_log.restart()
      peers.leave()
      if peers.stopping(stop):
        saving.save_unless_saved(step)  # not evaluated: best/ is left as it is
    if graph.inference_towers and stop.signum is None:
      _infer_in_training_session(sess, graph, inference, saving.last_path)
  if peers.stopping(stop) or stop.signum is not None:
    raise preemption.preempted(config, stop.signum, step, saving.last_path, early_stopped)
  return saving.last_path


# ---------------------------------------------------------------------------
# Before the first step
# ---------------------------------------------------------------------------

class _StartState(object):
  """Where training starts (read from output_dir on the chief).

  Attributes:
    latest: the checkpoint to resume from, or None.
    best: a checkpoints.BestCheckpoint when the dev metric is tracked, else None.
    finished: the plan's last step is reached, or early stopping ended training.
    eval_spec: the EvalSpec (None on a worker that is not the chief).
  """

  def __init__(self, config, eval_spec):
    self.eval_spec = eval_spec
    self.latest, self.best, self.finished = None, None, False
    if not config.is_chief:
      return
    self.latest = checkpoints.latest_checkpoint(config.output_dir)
    if checkpoints.training_finished(config):
      self.finished = True
      return
    if eval_spec is not None and eval_spec.best_metric:
      self.best = checkpoints.BestCheckpoint(config.output_dir, eval_spec.best_metric,
                                             resuming=self.latest is not None)
      if self.best.stopped_early(eval_spec.patience):
        tf.logging.info("%s stopped early (no better %s in %d evaluations): nothing to "
                        "train.", config.output_dir, self.best.metric,
                        self.best.evals_since_best)
        self.finished = True


_TrainingGraph = collections.namedtuple("_TrainingGraph", [
    "graph", "config", "ops", "fetches", "peers", "train_iterator", "skip_batches",
    "eval_iterator", "eval_outputs", "saver", "global_init", "start_averages", "local_init",
    "inference_towers", "weights_saver"])


def _input_iterator(dataset):
  """An initializable iterator over `dataset`, with tf.data's autotuning off
  (tfrecord_io.without_autotune: otherwise closing a session can wait up to a minute)."""
  return tf.data.make_initializable_iterator(tfrecord_io.without_autotune(dataset))


def _build_training_graph(config, model_fn, make_train_dataset, start, inference=None):
  """Builds the towers, the update, the eval towers and the saver in a new graph, and
  sets up the init checkpoint (when there is no checkpoint to resume from). With an
  Inference in a single-process run, also the towers of its datasets."""
  plan = config.plan
  graph = tf.Graph()
  with graph.as_default(), tf.device(plan.worker_device() if config.cluster else None), \
      modeling.weight_initializer(config.initializer):
    peers = Peers(config, plan)  # first: see Peers
    if config.random_seed is not None:
      tf.set_random_seed(config.random_seed)
    skip_batches = tf.placeholder(tf.int64, [], name="skip_batches")
    train_iterator = _input_iterator(make_train_dataset(skip_batches))
    features = multigpu.worker_slice(train_iterator.get_next(), plan)
    if config.random_seed is not None and config.cluster is not None:
      # Every worker reads the same shuffled batches (the seed above), but draws its own
      # dropout masks, as the towers of one process do; initial values come from the chief.
      tf.set_random_seed(config.random_seed + config.cluster.task_index)
    ops = multigpu.build_training(
        plan, model_fn, features, init_lr=config.learning_rate,
        num_train_steps=config.num_train_steps, num_warmup_steps=config.num_warmup_steps,
        **config.training_options())
    peers.build_start()
    eval_iterator = eval_outputs = None
    if start.eval_spec is not None:
      eval_iterator = _input_iterator(start.eval_spec.make_dataset())
      eval_outputs = multigpu.build_inference(
          plan, model_fn, eval_iterator.get_next(), config.global_eval_batch_size,
          config.devices.precision, config.devices.use_xla, read_averages=True)
    inference_towers = weights_saver = None
    if inference is not None and config.cluster is None:
      inference_towers = _build_inference_towers(config, model_fn, inference, start.eval_spec,
                                                 (eval_iterator, eval_outputs))
      weights_saver = tf.train.Saver(weight_averages.used_variables(_model_weights()),
                                     save_relative_paths=True)
    if config.is_chief and not start.latest:
      checkpoints.set_up_init_checkpoint(config)
    # Replica 0's variables: Google's plain names, whatever --variable_update.
    saver = tf.train.Saver(multigpu.saveable_variables(), max_to_keep=config.keep_checkpoint_max,
                           save_relative_paths=True)
    fetches = {"train_op": ops.train_op, "loss": ops.update_loss, "lr": ops.learning_rate,
               "global_norm": ops.global_norm, "stop": ops.stop_agreed}
    training_graph = _TrainingGraph(
        graph, config, ops, fetches, peers, train_iterator, skip_batches, eval_iterator,
        eval_outputs, saver, tf.global_variables_initializer(), weight_averages.build_start(),
        tf.local_variables_initializer(), inference_towers, weights_saver)
    graph.finalize()
  return training_graph


def _build_inference_towers(config, model_fn, inference, eval_spec, eval_towers):
  """The iterator and per-example outputs of each of `inference`'s datasets, on the
  training towers; a dataset that is the eval_spec's (the same make_dataset at the eval
  batch size) reuses the eval towers.

  Returns:
    dict name -> (iterator, outputs).
  """
  towers = collections.OrderedDict()
  for name, (make_dataset, batch_size) in inference.datasets.items():
    if (eval_spec is not None and make_dataset is eval_spec.make_dataset and
        batch_size == config.global_eval_batch_size):
      towers[name] = eval_towers
      continue
    iterator = _input_iterator(make_dataset())
    towers[name] = (iterator, multigpu.build_inference(
        config.plan, model_fn, iterator.get_next(), batch_size, config.devices.precision,
        config.devices.use_xla, read_averages=True))
  return towers


def _model_weights():
  """The trainable variables under their plain names (replicated: replica 0's, which the
  start sync copies); predicting towers read them or their averages (used_variables)."""
  trainable = set(v.op.name for v in tf.trainable_variables())
  return [v for v in multigpu.saveable_variables() if v.op.name in trainable]


def _infer_in_training_session(sess, graph, inference, last_saved):
  """Runs `inference`'s datasets on the training session's towers, with the weights of the
  checkpoint it chooses (restored unless it is the one the session just saved)."""
  checkpoint, why = inference.checkpoint()
  tf.logging.info("Evaluating and predicting in the training session with %s (%s).",
                  checkpoint, why)
  if os.path.abspath(checkpoint) != os.path.abspath(last_saved or ""):
    with phases.timed("restore"):
      graph.weights_saver.restore(sess, checkpoint)
      graph.peers.sync_start(sess)
  for name, (iterator, outputs) in graph.inference_towers.items():
    with phases.timed(name):
      inference.set_outputs(name, _run_to_end(sess, iterator, outputs))


def _open_training(sess, graph, start):
  """Checks the workers agree, restores or initialises, starts every replica from the
  chief's variables and positions the input after the batches already trained on.

  Returns:
    The step training resumes at, or None when the chief found nothing to train.
  """
  config, peers = graph.config, graph.peers
  peers.agree_on_settings(sess)
  if start.latest:
    tf.logging.info("Resuming from %s (step %d of %d); the init checkpoint is not used.",
                    start.latest, checkpoints.checkpoint_global_step(start.latest),
                    config.num_train_steps)
    checkpoints.restore(graph.saver, sess, start.latest, config.output_dir)
  else:
    sess.run(graph.global_init)
    if graph.start_averages is not None:
      sess.run(graph.start_averages)  # the averages start from the initial weights
  sess.run(graph.local_init)
  peers.sync_start(sess)
  if peers.vote(sess, start.finished):
    return None
  sess.run(graph.train_iterator.initializer,
           {graph.skip_batches: _batches_consumed(sess, graph.ops, config)})
  return int(sess.run(graph.ops.global_step))  # the chief's, on every worker


def _batches_consumed(sess, ops, config):
  """Micro-batches of training data that the run up to its current global_step consumed.

  global_step x accumulation_steps, except with fp16, whose skipped updates consumed their
  batches without moving global_step: there the loss scale counts the updates attempted.
  Read from the session (after the chief's variables reached every worker), so a worker
  that does not see the chief's checkpoint resumes at the same data position.
  """
  counter = ops.loss_scale.steps_attempted if ops.loss_scale is not None else ops.global_step
  return int(sess.run(counter)) * config.accumulation_steps


# ---------------------------------------------------------------------------
# During training
# ---------------------------------------------------------------------------

def _run_update(sess, graph, stop, step):
  """Update `step`: the accumulation micro-batches, then the step that applies them. That
  step carries this worker's stop request, read after the micro-batches so a signal during
  them is not an update late."""
  if graph.ops.accumulate_op is not None:
    for _ in range(graph.config.accumulation_steps):
      sess.run(graph.ops.accumulate_op)
  peers = graph.peers
  result = peers.run(sess, graph.fetches, peers.step_feed(stop, graph.ops, step))
  peers.record_step(result)
  return result


class _StepHealth(object):
  """Checks each step's result: fp16 overflows (skipped updates) and divergence."""

  def __init__(self, config, sess, ops):
    self.sess, self.ops = sess, ops
    self.overflows_at_minimum_scale = 0
    # What the messages call the last good checkpoint before this run saved one.
    self.no_checkpoint = "none" if config.is_chief else "the chief's latest"

  def update_applied(self, result, step, last_path):
    """False for an fp16 update skipped for overflowing gradients (the loss scale halves
    and the next batch tries again).

    Raises:
      TrainingDiverged: the loss or the gradients are not finite (and, with fp16, stay so
        with the loss scale at its minimum).
    """
    last_good = last_path or self.no_checkpoint
    if self.ops.loss_scale is not None and not np.isfinite(result["global_norm"]):
      scale = float(self.sess.run(self.ops.loss_scale.scale))  # after the halving
      self.overflows_at_minimum_scale = (self.overflows_at_minimum_scale + 1
                                         if scale <= 1.0 else 0)
      tf.logging.info("step %d overflowed in fp16 (loss %s): update skipped, loss scale now "
                      "%g", step, result["loss"], scale)
      if self.overflows_at_minimum_scale >= 2:
        raise TrainingDiverged(
            "The gradients are not finite at step %d even with the fp16 loss scale at 1; "
            "stopped without saving, so the last good checkpoint (%s) is intact. Lower "
            "--learning_rate, check the input data, or use --precision=bf16 or fp32." %
            (step, last_good))
      return False
    self.overflows_at_minimum_scale = 0
    # A non-finite gradient norm means this update wrote NaN/inf into the weights.
    if not (np.isfinite(result["loss"]) and np.isfinite(result["global_norm"])):
      raise TrainingDiverged(
          "The training loss is %s and the gradient norm %s at step %d; stopped without "
          "saving, so the last good checkpoint (%s) is intact. Lower --learning_rate or "
          "check the input data." % (result["loss"], result["global_norm"], step, last_good))
    return True


class _Checkpointing(object):
  """The chief's writes during training: checkpoints, dev evaluations, best/ and
  TensorBoard events. On a worker that is not the chief, it writes nothing."""

  def __init__(self, config, sess, graph, start, start_step):
    self.config, self.sess, self.graph, self.start = config, sess, graph, start
    self.last_path = start.latest
    self.saved_step = start_step  # the checkpoint resumed from (or none at step 0)
    self.writer = self.eval_writer = None
    if config.is_chief:
      self.writer = _SummaryWriter(config.output_dir)
      if start.eval_spec is not None:
        try:
          self.eval_writer = _SummaryWriter(os.path.join(config.output_dir, "eval"))
        except UsageError:
          self.writer.close(raise_errors=False)
          raise

  def __enter__(self):
    return self

  def __exit__(self, exc_type, *unused_exc):
    for writer in (self.writer, self.eval_writer):
      if writer is not None:
        writer.close(raise_errors=exc_type is None)

  def save_and_evaluate(self, step):
    """Saves a checkpoint and evaluates it; returns True when early stopping says stop."""
    if not self.config.is_chief:
      return False
    self.save_unless_saved(step)
    spec = self.start.eval_spec
    if spec is None:
      return False
    try:
      return self._evaluate(step, spec)
    except UsageError:
      # A write refused while recording the evaluation (disk full): the checkpoint goes
      # too, so that the rerun trains this stretch again and evaluates it, instead of
      # resuming past an evaluation that best/ and early stopping never saw.
      checkpoints.discard(self.graph.saver, self.config.output_dir, self.last_path)
      raise

  def _evaluate(self, step, spec):
    """Evaluates the checkpoint just saved; returns True when early stopping says stop."""
    metrics = spec.metrics_fn(_run_to_end(self.sess, self.graph.eval_iterator,
                                          self.graph.eval_outputs))
    self.eval_writer.scalars(step, metrics)
    tf.logging.info("eval at step %d: %s", step, "  ".join(
        "%s = %.4f" % kv for kv in sorted(metrics.items())))
    best = self.start.best
    if best is None:
      return False
    if best.update(self.last_path, metrics):
      tf.logging.info("New best %s = %.4f, kept in %s", best.metric, best.best, best.directory)
    if best.stopped_early(spec.patience):
      tf.logging.info("Early stopping: no better %s in %d evaluations.", best.metric,
                      best.evals_since_best)
      return True
    return False

  def save_unless_saved(self, step):
    if self.config.is_chief and self.saved_step != step:
      self.last_path = checkpoints.save(self.graph.saver, self.sess, self.config.output_dir, step)
      self.saved_step = step


class _SummaryWriter(object):
  """TensorBoard scalars, written and flushed in the calling thread, so a write the file
  system refuses stops the run with one line (TF's FileWriter writes in a thread: TF 1.15's
  drops a refused write silently, 2.x's raises a RuntimeError and prints the thread's
  traceback). The events file is then cut back to its last whole event, or removed."""

  def __init__(self, directory):
    # FileWriter's name, which TensorBoard and tf.train.summary_iterator read.
    # The pid too: a rerun in the same second must not overwrite this run's events.
    self.path = os.path.join(directory, "events.out.tfevents.%010d.%s.%d" % (
        int(time.time()), socket.gethostname(), os.getpid()))
    self.writer, self.whole_bytes = None, 0
    try:
      os.makedirs(directory, exist_ok=True)
      self.writer = tf.io.TFRecordWriter(self.path)
    except (tf.errors.OpError, OSError) as e:
      raise write_error(self.path, e)
    self._write(tf.Event(wall_time=time.time(), file_version="brain.Event:2"))

  def _write(self, event):
    record = event.SerializeToString()
    try:
      self.writer.write(record)
      self.writer.flush()
    except (tf.errors.OpError, OSError) as e:
      self._discard_partial_event()
      raise write_error(self.path, e)
    self.whole_bytes += len(record) + 16  # a TFRecord's length, CRCs and data

  def _discard_partial_event(self):
    try:
      self.writer.close()
    except (tf.errors.OpError, OSError):
      pass  # the write that failed is the error to report
    self.writer = None
    try:
      if self.whole_bytes:
        os.truncate(self.path, self.whole_bytes)
      else:
        os.remove(self.path)
    except OSError:
      pass

  def scalars(self, step, values):
    summary = tf.Summary(value=[tf.Summary.Value(tag=tag, simple_value=float(value))
                                for tag, value in sorted(values.items())])
    self._write(tf.Event(wall_time=time.time(), step=step, summary=summary))

  def close(self, raise_errors=True):
    if self.writer is None:
      return
    writer, self.writer = self.writer, None
    try:
      writer.close()
    except (tf.errors.OpError, OSError) as e:
      if raise_errors:
        raise write_error(self.path, e)


class _Progress(object):
  """The progress line and TensorBoard scalars, every config.log_steps steps."""

  def __init__(self, config, writer):
    self.config, self.writer = config, writer  # writer: None on a worker but the chief
    self.timing = progress.Progress(config.num_train_steps)
    # Windows until the technique's step time is logged: once, after the warm-up window.
    self.cost_countdown = None if config.extra_passes() is None else 2
    self.restart()

  def restart(self):
    """Starts a new timing window (saving and evaluating are not training speed)."""
    self.timing.restart()
    self.steps, self.loss = 0, 0.0

  def add(self, step, result):
    self.steps += 1
    self.loss += result["loss"]
    if step % self.config.log_steps and step != self.config.num_train_steps:
      return
    steps_per_sec = self.timing.rate(self.steps)
    examples_per_sec = steps_per_sec * self.config.global_batch_size
    mean_loss = self.loss / self.steps
    if self.cost_countdown is not None:
      self.cost_countdown -= 1
      if self.cost_countdown == 0:
        tf.logging.info("%s, %.3f s per step", self.config.extra_passes(), 1 / steps_per_sec)
    tf.logging.info(
        "step %d/%d  loss %.4f  lr %.3g  grad_norm %.3f  examples/sec %.1f  ETA %s", step,
        self.config.num_train_steps, mean_loss, result["lr"], result["global_norm"],
        examples_per_sec,
        progress.format_duration((self.config.num_train_steps - step) / steps_per_sec))
    if self.writer is not None:
      self.writer.scalars(step, {
          "loss": mean_loss, "learning_rate": result["lr"],
          "examples_per_sec": examples_per_sec, "global_norm": result["global_norm"]})
    self.restart()


# ---------------------------------------------------------------------------
# Evaluation and prediction
# ---------------------------------------------------------------------------

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


def infer(config, model_fn, make_dataset, batch_size, checkpoint_path):
  """Runs the model (is_training=False) over one pass of a dataset on every tower.

  Args:
    config: RunConfig (for the device plan).
    model_fn: function(features, is_training) -> dict of per-example outputs.
    make_dataset: function() -> tf.data.Dataset in global batches of `batch_size`.
    batch_size: its batch size over all towers.
    checkpoint_path: the weights to use.

  Returns:
    dict name -> np.ndarray [num_examples, ...], in input order.

  Raises:
    UsageError: the checkpoint lacks variables of this model (another task's checkpoint).
  """
  plan = config.plan.for_inference()
  graph = tf.Graph()
  with graph.as_default(), phases.timed("build"):
    iterator = _input_iterator(make_dataset())
    outputs = multigpu.build_inference(plan, model_fn, iterator.get_next(), batch_size,
                                       config.devices.precision, config.devices.use_xla)
    missing = checkpoints.missing_variables(checkpoint_path, tf.global_variables())
    if missing:
      raise checkpoints.lacking_variables_error(
          checkpoint_path, missing, "this model's", "it is not a model trained for this "
          "task. Evaluate or predict with a checkpoint from --do_train.")
    saver = weight_averages.restore_saver(checkpoint_path, tf.global_variables())
    graph.finalize()
  with graph.as_default(), tf.Session(config=plan.session_config()) as sess:
    with phases.timed("restore"):
      saver.restore(sess, checkpoint_path)
    return _run_to_end(sess, iterator, outputs)


def write_eval_results(output_dir, metrics, checkpoint, report=None):
  """The eval files of every unit: output_dir/eval_results.txt, `metrics` with the
  checkpoint's global_step added, and with `report` eval_report.txt and .json.

  Args:
    report: function(metrics with global_step) -> output_files.EvalReport, or None.

  Returns:
    The path of eval_results.txt.
  """
  metrics["global_step"] = checkpoints.checkpoint_global_step(checkpoint)
  path = os.path.join(output_dir, output_files.EVAL_RESULTS_FILE)
  output_files.atomic_write_text(path, output_files.format_key_values(metrics))
  tf.logging.info("Eval results of %s, in %s:", checkpoint, path)
  for key in sorted(metrics):
    tf.logging.info("  %s = %s", key, metrics[key])
  if report is not None:
    output_files.write_eval_report(output_dir, report(metrics))
  return path


def evaluate(config, model_fn, make_dataset, checkpoint, metrics_fn):
  """The evaluation tail: infers the eval set, scores it and writes eval_results.txt.

  Args:
    config: RunConfig; the dataset comes in global batches of config.global_eval_batch_size.
    model_fn, make_dataset: as for infer().
    checkpoint: the weights to evaluate.
    metrics_fn: function(per-example outputs) -> dict name -> number.

  Returns:
    (metrics with global_step, the per-example outputs).
  """
  outputs = infer(config, model_fn, make_dataset, config.global_eval_batch_size, checkpoint)
  metrics = metrics_fn(outputs)
  write_eval_results(config.output_dir, metrics, checkpoint)
  return metrics, outputs


class Inference(object):
  """Evaluation and prediction after training, in the training graph when there is one.

  A run script makes one before train() with every dataset it will run the model over
  once training ends, and hands it to train(). A single-process run that trains builds
  their towers into the training graph and, when training ends, runs them in the training
  session with the weights of choose_checkpoint() (best/, else the latest): one graph per
  job. Otherwise (evaluate or predict only, several workers, nothing left to train)
  outputs() builds a graph of its own and restores the checkpoint into it (infer()). The
  outputs are the same either way.

  Args:
    config: RunConfig.
    model_fn: function(features, is_training) -> dict of per-example outputs.
    datasets: dict name -> (make_dataset, global batch size); the name is the phase its
      time counts to ("eval", "predict"). A make_dataset that is the EvalSpec's, at
      config.global_eval_batch_size, shares the towers that evaluate during training.
    choose_checkpoint: function() -> (checkpoint path, a phrase saying why), called once,
      after training.
  """

  def __init__(self, config, model_fn, datasets, choose_checkpoint):
    self.config, self.model_fn = config, model_fn
    self.datasets = collections.OrderedDict(datasets)
    self.choose_checkpoint = choose_checkpoint
    self._checkpoint = None
    self._outputs = {}

  def checkpoint(self):
    """(path, why): the weights the outputs come from."""
    if self._checkpoint is None:
      self._checkpoint = self.choose_checkpoint()
    return self._checkpoint

  @property
  def in_training_session(self):
    """True when train() computed the outputs in its own session."""
    return bool(self._outputs)

  def set_outputs(self, name, outputs):
    self._outputs[name] = outputs

  def outputs(self, name):
    """The per-example outputs of dataset `name` (dict name -> np.ndarray, input order)."""
    if name not in self._outputs:
      make_dataset, batch_size = self.datasets[name]
      with phases.timed(name):
        self._outputs[name] = infer(self.config, self.model_fn, make_dataset, batch_size,
                                    self.checkpoint()[0])
    return self._outputs[name]

  def evaluate(self, name, metrics_fn):
    """evaluate() on dataset `name`: scores it and writes eval_results.txt.

    Returns:
      (metrics with global_step, the per-example outputs).
    """
    outputs = self.outputs(name)
    metrics = metrics_fn(outputs)
    write_eval_results(self.config.output_dir, metrics, self.checkpoint()[0])
    return metrics, outputs



def dev_and_test_inference(config, model_fn, make_dataset, do_eval, do_predict):
  """The Inference of a run script's dev set (with do_eval) and test set (with do_predict),
  named "eval" and "predict", on output_dir/best, else the latest checkpoint, else
  config.init_checkpoint.

  Args:
    config: RunConfig.
    model_fn: the script's model function.
    make_dataset: function(split, batch_size) -> function() -> tf.data.Dataset, for the
      splits "dev" and "test". The dev set's dataset at config.global_eval_batch_size is
      also the one to give the EvalSpec (inference.datasets["eval"][0]), so that the
      towers that evaluate during training are shared.
    do_eval, do_predict: the flags.
  """
  datasets = {}
  if do_eval:
    datasets["eval"] = (make_dataset("dev", config.global_eval_batch_size),
                        config.global_eval_batch_size)
  if do_predict:
    datasets["predict"] = (make_dataset("test", config.global_predict_batch_size),
                           config.global_predict_batch_size)
  return Inference(config, model_fn, datasets, lambda: checkpoints.checkpoint_for_inference(
      config.output_dir, config.init_checkpoint, best_subdir=checkpoints.BEST_SUBDIR))


__all__ = ["EvalSpec", "Inference", "dev_and_test_inference", "train", "infer", "evaluate",
           "write_eval_results", "UsageError"]
