# coding=utf-8
"""One job of any task, written once: read the data, claim output_dir, featurize, train with
evaluation in the training session, evaluate and predict, export.

A task unit (bert_mgpu/classifier/task.py, ner/task.py, squad/task.py, pretraining/task.py)
subclasses `Task` and says what is particular to it; `run_job` calls its hooks in this order,
each hook relying on what the earlier ones kept on the task:

  1. read_inputs: read and check every input, the BERT config and vocab
     (bert_mgpu/bert_files.py) among them (nothing written yet);
  2. train_size: the training examples, for the step count;
  3. featurizing_processes (entered) and then make_run_config, the device check: processes
     must fork before TensorFlow starts its GPU runtime;
  4. check_start: the checkpoint to start from or predict with, and its head (by the
     variable names of the unit's model.py), after the job's own check that a checkpoint
     to resume has weight averages if and only if --ema_decay asks for them, with the D and
     rule it recorded (which the resumed averages keep following); then the chief compares
     the training flags with output_dir's record (training_flags.py), and output_dir is
     claimed;
  5. the chief, when training: records the training flags, write_model_files; then
     featurize (or reuse the feature cache);
  6. make_model_fn, make_inference; when training: log_before_training, make_train_dataset,
     eval_spec, and runner.train (a worker that is not the chief stops there);
  7. evaluate_and_predict, then export when the run has an export_dir.

Adding a task: copy a unit. A settings class for its options, the paths of the BERT files
among them; a model.py with its head and the names of its variables; a Task subclass
constructed as (job_settings, settings), like every unit (a layout test holds them to it),
that overrides at least read_inputs (the config and vocab through bert_files),
make_model_fn, make_train_dataset (and train_size when steps are counted from epochs), plus
make_inference, eval_spec and evaluate_and_predict together when it evaluates or predicts,
and check_start (model.py's check_head) when it predicts with a fine-tuned head. A unit whose
model serves defines its servable kind (serving/kinds.py) in its serving.py and overrides
check_head and model_files_to_export: export then works as for the others. labels.txt is
written by data/label_files.write_label_file, the eval files by runner.write_eval_results,
and the best checkpoint lives in checkpoints.BEST_SUBDIR. A run script of about 100 lines
defines the flags, checks them, builds the settings and calls run_job (with --export_dir:
command_line.run_or_export, which exports alone when the run only exports); it loads no
model file itself.
"""

import contextlib

import tensorflow.compat.v1 as tf

from bert_mgpu.data import output_files
from bert_mgpu.data import tfrecord_io
from bert_mgpu.training import checkpoints
from bert_mgpu.training import run_settings
from bert_mgpu.training import runner
from bert_mgpu.training import training_flags
from bert_mgpu.training import weight_averages


class Task(object):
  """What a task tells the job. The defaults do nothing; a unit overrides what it needs.

  Every unit is constructed alike, as Unit(job_settings, settings), and reads its files
  (the BERT config and vocab among them: bert_mgpu/bert_files.py) in read_inputs.

  Attributes:
    job_settings: run_settings.JobSettings of the run (output_dir, do_train, batch sizes...).
    settings: the unit's own options (its settings class: paths, lengths, flags' values).
  """

  def __init__(self, job_settings, settings):
    self.job_settings = job_settings
    self.settings = settings

  def read_inputs(self):
    """Reads and checks every input the run asks for. Raises UsageError; writes nothing."""

  def train_size(self):
    """(number of training examples, their noun for the messages) for the step count; only
    read when training and the steps are counted from epochs."""
    if self.job_settings.do_train and self.job_settings.num_train_steps is None:
      raise NotImplementedError("%s counts its steps from epochs: it must say how many "
                                "training examples it has (train_size)" %
                                type(self).__name__)
    return None, "training examples"

  def featurizing_processes(self, cache_dir):
    """A context manager around the device check and featurizing: processes forked on
    entering (before TensorFlow's GPU runtime starts) and ended on leaving."""
    del cache_dir
    return contextlib.nullcontext()

  def check_start(self, config):
    """Checks the checkpoint the run starts from, before output_dir is claimed."""

  def write_model_files(self):
    """Writes what serving the trained model needs into output_dir (chief, --do_train)."""

  def featurize(self, config):
    """Writes (or reuses) the records of every split into config.cache_dir."""

  def make_model_fn(self):
    """function(features, is_training) -> dict of outputs ("loss" when training)."""
    raise NotImplementedError

  def make_train_dataset(self, config):
    """function(skip_batches) -> the training tf.data.Dataset in micro-batches."""
    raise NotImplementedError

  def log_before_training(self, config):
    """Logs what the run should know before its first step (e.g. the label skew)."""

  def make_inference(self, config, model_fn):
    """The runner.Inference for evaluating and predicting after training, or None."""
    del config, model_fn
    return None

  def eval_spec(self, config, inference):
    """The runner.EvalSpec for evaluating during training, or None."""
    del config, inference
    return None

  def evaluate_and_predict(self, config, model_fn, inference):
    """On the chief, after any training: writes the eval results and the predictions."""

  def check_head(self, checkpoint, model_settings):
    """Raises UsageError unless `checkpoint` holds this task's head (the variable names its
    model.py defines) as the model_settings.json dict `model_settings` describes it. A unit
    that exports must say (export calls it)."""
    raise NotImplementedError("%s does not check its head" % type(self).__name__)

  def model_files_to_export(self):
    """The serving/model_files.ModelFiles of the model trained in output_dir; a task whose
    model serves (a servable kind, serving/kinds.py) overrides it."""
    raise NotImplementedError("%s has no export" % type(self).__name__)

  def export(self, export_dir):
    """Exports the best (else latest) checkpoint of output_dir into export_dir (a new
    version directory there), as self.settings.export_format says; a run with --export_dir
    and no --do_* calls this alone.

    Returns:
      The version directory written.
    """
    # Here, not at the top: no module of training/ loads serving (a layout test checks).
    from bert_mgpu.serving import export  # pylint: disable=import-outside-toplevel
    from bert_mgpu.serving import predictor  # pylint: disable=import-outside-toplevel
    files = self.model_files_to_export()
    checkpoint, why = checkpoints.checkpoint_for_inference(
        self.job_settings.output_dir, None, best_subdir=checkpoints.BEST_SUBDIR)
    self.check_head(checkpoint, files.settings)
    export_format = self.settings.export_format
    path = export.export_model(export_dir, predictor.load_model(files, checkpoint, checkpoint),
                               export_format)
    tf.logging.info("Exported %s (%s) as %s to %s", checkpoint, why,
                    export.format_description(export_format), path)
    return path


def record_file_inference(config, model_fn, record_files, spec, do_eval, do_predict):
  """The runner.Inference of a task whose dev and test sets are one TFRecord file each.

  Args:
    config: RunConfig.
    model_fn: the task's model function.
    record_files: dict split ("dev", "test") -> TFRecord path, for the splits asked for.
    spec: the records' feature spec.
    do_eval, do_predict: whether the run evaluates (dev) and predicts (test).
  """
  def make_dataset(split, batch_size):
    return lambda: tfrecord_io.make_dataset([record_files[split]], spec, batch_size,
                                            is_training=False,
                                            length_multiple=config.length_multiple)
  return runner.dev_and_test_inference(config, model_fn, make_dataset, do_eval, do_predict)


def _check_resume(config):
  """Refuses to resume a checkpoint whose weight averages --ema_decay does not match, and
  sets the rule they follow (a resumed run keeps its checkpoint's; --ema_warmup, when not
  given, takes its default for a new run).

  Every worker that sees output_dir's checkpoint decides alike; one that does not (another
  machine) takes the flags' rule, and the workers' settings check refuses a difference.
  """
  latest = checkpoints.latest_checkpoint(config.output_dir)
  given_warmup = config.ema_warmup  # None: --ema_warmup not given
  config.ema_warmup = weight_averages.warmup_or_default(given_warmup)
  if latest:
    rule = weight_averages.check_resume(latest, config.ema_decay, config.ema_bias_correction,
                                        given_warmup)
    config.ema_bias_correction, config.ema_rule_recorded, config.ema_warmup = rule
    if config.ema_decay > 0 and not rule.recorded:
      tf.logging.warning(
          "%s was written before weight averages were bias-corrected: this run continues "
          "its averages by that rule (from the start weights, moved by 1 - D). A new run "
          "corrects them (docs/TRAINING.md).", latest)
    elif config.ema_decay > 0 and given_warmup is None and not rule.warmup:
      tf.logging.info("%s kept its weight averages without --ema_warmup: this run continues "
                      "them so (a new run warms the decay up by default).", latest)
  for name, value in (("ema_bias_correction", config.ema_bias_correction),
                      ("ema_warmup", config.ema_warmup)):
    if name in (config.training_flags or {}):
      # Compared and recorded as the rule in effect (a checkpoint's from before the record
      # keeps the old one, whatever the flags say).
      config.training_flags[name] = value


def _check_training_flags(config):
  """Refuses a resume whose training flags differ from output_dir's record, unless allowed
  (the chief, which holds the record; the workers' settings check compares the others'
  flags with its own). After the task's own checks, whose refusals say more.

  Returns:
    What to log once output_dir is claimed, before the record is written.
  """
  if not config.is_chief:
    return []
  return training_flags.check_resume(config,
                                     checkpoints.latest_checkpoint(config.output_dir))


def _record_training_flags(config, messages):
  """Logs what the resume check found and records the run's training flags (the chief,
  once output_dir is claimed)."""
  for level, message in messages:
    getattr(tf.logging, level)(message)
  training_flags.write_record(config.output_dir, training_flags.record_of(config))


def run_job(task, export_dir=None):
  """Runs a task's job (see the module docstring for the steps).

  Args:
    task: a Task.
    export_dir: where the chief exports the trained model at the end, or None.
  """
  job_settings = task.job_settings
  task.read_inputs()
  num_train_examples, example_noun = task.train_size()
  with task.featurizing_processes(run_settings.planned_cache_dir(job_settings)):
    config = run_settings.make_run_config(job_settings, num_train_examples, example_noun)
    if job_settings.do_train:
      _check_resume(config)
    task.check_start(config)
    if job_settings.do_train:
      resume_messages = _check_training_flags(config)
    output_files.claim_output_dir(config)
    if job_settings.do_train and config.is_chief:
      _record_training_flags(config, resume_messages)
      task.write_model_files()
    task.featurize(config)
  model_fn = task.make_model_fn()
  inference = task.make_inference(config, model_fn)
  if job_settings.do_train:
    task.log_before_training(config)
    runner.train(config, model_fn, task.make_train_dataset(config),
                 task.eval_spec(config, inference), inference)
    if not config.is_chief:
      return  # the chief evaluates, predicts and exports
  task.evaluate_and_predict(config, model_fn, inference)
  if export_dir:
    task.export(export_dir)
