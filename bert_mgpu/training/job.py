# coding=utf-8
"""One job of any task, written once: read the data, claim output_dir, featurize, train with
evaluation in the training session, evaluate and predict, export.

A task unit (bert_mgpu/classifier/task.py, ner/task.py, squad/task.py, pretraining/task.py)
subclasses `Task` and says what is particular to it; `run_job` runs the steps in the order
every run script needs:

  1. read and check every input (nothing written yet);
  2. start the featurizing processes, then the device check (make_run_config): processes
     must fork before TensorFlow starts its GPU runtime;
  3. check the checkpoint to start from, claim output_dir, write the model files (chief);
  4. featurize (or reuse the feature cache);
  5. train, evaluating the dev set at each checkpoint (runner.train);
  6. on the chief: evaluate and predict with the best (else latest) checkpoint, export.
"""

import contextlib

from bert_mgpu.data import output_files
from bert_mgpu.data import tfrecord_io
from bert_mgpu.training import run_settings
from bert_mgpu.training import runner


class Task(object):
  """What a task tells the job. The defaults do nothing; a unit overrides what it needs.

  Attributes:
    job: run_settings.JobSettings of the run (output_dir, do_train, batch sizes, ...).
  """

  def __init__(self, job):
    self.job = job

  def read_inputs(self):
    """Reads and checks every input the run asks for. Raises UsageError; writes nothing."""

  def train_size(self):
    """(number of training examples, their noun for the messages) for the step count."""
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

  def model_fn(self):
    """function(features, is_training) -> dict of outputs ("loss" when training)."""
    raise NotImplementedError

  def train_dataset(self, config):
    """function(skip_batches) -> the training tf.data.Dataset in micro-batches."""
    raise NotImplementedError

  def log_before_training(self, config):
    """Logs what the run should know before its first step (e.g. the label skew)."""

  def inference(self, config, model_fn):
    """The runner.Inference for evaluating and predicting after training, or None."""
    del config, model_fn
    return None

  def eval_spec(self, config, inference):
    """The runner.EvalSpec for evaluating during training, or None."""
    del config, inference
    return None

  def evaluate_and_predict(self, config, model_fn, inference):
    """On the chief, after any training: writes the eval results and the predictions."""

  def export(self):
    """Exports the trained model to the run's export_dir (when it has one)."""


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


def run_job(task, export_dir=None):
  """Runs a task's job (see the module docstring for the steps).

  Args:
    task: a Task.
    export_dir: where the chief exports the trained model at the end, or None.
  """
  job = task.job
  task.read_inputs()
  num_train_examples, example_noun = task.train_size()
  with task.featurizing_processes(run_settings.planned_cache_dir(job)):
    config = run_settings.make_run_config(job, num_train_examples, example_noun)
    task.check_start(config)
    output_files.claim_output_dir(config)
    if job.do_train and config.is_chief:
      task.write_model_files()
    task.featurize(config)
  model_fn = task.model_fn()
  inference = task.inference(config, model_fn)
  if job.do_train:
    task.log_before_training(config)
    runner.train(config, model_fn, task.train_dataset(config),
                 task.eval_spec(config, inference), inference)
    if not config.is_chief:
      return  # the chief evaluates, predicts and exports
  task.evaluate_and_predict(config, model_fn, inference)
  if export_dir:
    task.export()
