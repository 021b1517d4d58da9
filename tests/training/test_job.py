# coding=utf-8
"""bert_mgpu/training/job.py, the one run skeleton: the order of a task's hooks, what a worker
that is not the chief skips, runs without training, and the export at the end.

The device check, output_dir and the loop are replaced by recorders here (they have their own
tests); the run scripts' end-to-end tests run the real ones through this skeleton."""

import contextlib

import pytest

from bert_mgpu.training import job
from bert_mgpu.training import run_settings
from bert_mgpu.training import runner


class FakeConfig(object):
  def __init__(self, is_chief):
    self.is_chief = is_chief


class RecordingTask(job.Task):
  """Every hook appends its name to `calls`; the loop and the checks are recorded too."""

  def __init__(self, job_settings, calls):
    super(RecordingTask, self).__init__(job_settings, None)
    self.calls = calls

  def read_inputs(self):
    self.calls.append("read_inputs")

  def train_size(self):
    self.calls.append("train_size")
    return 64, "training examples"

  @contextlib.contextmanager
  def featurizing_processes(self, cache_dir):
    self.calls.append("processes forked")
    yield
    self.calls.append("processes ended")

  def check_start(self, config):
    self.calls.append("check_start")

  def write_model_files(self):
    self.calls.append("write_model_files")

  def featurize(self, config):
    self.calls.append("featurize")

  def make_model_fn(self):
    self.calls.append("make_model_fn")
    return "model_fn"

  def make_train_dataset(self, config):
    self.calls.append("make_train_dataset")
    return "train_dataset"

  def log_before_training(self, config):
    self.calls.append("log_before_training")

  def make_inference(self, config, model_fn):
    self.calls.append("make_inference")
    return "inference"

  def eval_spec(self, config, inference):
    self.calls.append("eval_spec")
    return "eval_spec"

  def evaluate_and_predict(self, config, model_fn, inference):
    self.calls.append("evaluate_and_predict")

  def export(self, export_dir):
    self.calls.append("export to %s" % export_dir)


def run(monkeypatch, do_train=True, is_chief=True, export_dir=None):
  calls = []

  def make_run_config(job_settings, num_train_examples, example_noun):
    calls.append("device check (%s %s)" % (num_train_examples, example_noun))
    return FakeConfig(is_chief)

  def train(config, model_fn, make_train_dataset, eval_spec, inference):
    calls.append("train(%s, %s, %s, %s)" % (model_fn, make_train_dataset, eval_spec, inference))

  monkeypatch.setattr(run_settings, "make_run_config", make_run_config)
  monkeypatch.setattr(job.output_files, "claim_output_dir",
                      lambda config: calls.append("claim_output_dir"))
  monkeypatch.setattr(runner, "train", train)
  monkeypatch.setattr(job, "_check_resume", lambda config: calls.append("resume check"))
  monkeypatch.setattr(job, "_check_training_flags",
                      lambda config: calls.append("training flags check") or ["a message"])
  monkeypatch.setattr(job, "_record_training_flags",
                      lambda config, messages: calls.append("record %s" % messages))
  job_settings = run_settings.JobSettings("out", do_train=do_train)
  job.run_job(RecordingTask(job_settings, calls), export_dir)
  return calls


def test_a_chief_that_trains_runs_every_step_in_order(monkeypatch):
  assert run(monkeypatch, export_dir="exports") == [
      "read_inputs", "train_size", "processes forked",
      "device check (64 training examples)",  # after the fork, before anything is written
      "resume check", "check_start", "training flags check", "claim_output_dir",
      "record ['a message']",
      "write_model_files", "featurize", "processes ended",
      "make_model_fn", "make_inference", "log_before_training", "make_train_dataset",
      "eval_spec", "train(model_fn, train_dataset, eval_spec, inference)",
      "evaluate_and_predict", "export to exports"]


def test_a_worker_that_is_not_the_chief_stops_after_training(monkeypatch):
  calls = run(monkeypatch, is_chief=False, export_dir="exports")
  # Every worker checks the resume; the chief alone writes output_dir's files.
  assert "resume check" in calls
  assert "write_model_files" not in calls and not [c for c in calls if c.startswith("record")]
  assert calls[-1].startswith("train(")
  assert "evaluate_and_predict" not in calls and "export to exports" not in calls


def test_without_training_the_job_evaluates_and_predicts_only(monkeypatch):
  calls = run(monkeypatch, do_train=False)
  assert not [c for c in calls if c.startswith(("train(", "record")) or c in (
      "resume check", "training flags check", "write_model_files", "log_before_training",
      "make_train_dataset",
      "eval_spec")]
  assert calls[-1] == "evaluate_and_predict"  # no export_dir: no export


def test_a_task_that_counts_epochs_must_say_its_training_size():
  task = job.Task(run_settings.JobSettings("out", do_train=True), None)
  with pytest.raises(NotImplementedError, match="train_size"):
    task.train_size()
  # Given steps (pretraining) need no count.
  assert job.Task(run_settings.JobSettings("out", do_train=True, num_train_steps=10), None
                  ).train_size()[0] is None
