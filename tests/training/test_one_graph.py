# coding=utf-8
"""Tests of one graph per job (runner.Inference handed to runner.train): evaluation and
prediction after training run in the training session, on the checkpoint a fresh restore
would use (best/ when it exists), and give what a fresh restore gives."""

import os

import numpy as np
import pytest

from bert_mgpu.data import tfrecord_io
from bert_mgpu.training import checkpoints
from bert_mgpu.training import phases
from bert_mgpu.training import run_settings
from bert_mgpu.training import runner
from tiny_model import (FEATURE_SPEC, classifier_model_fn, random_batch,  # pylint: disable=g-multiple-import
                        train_dataset_fn, write_records)

TOWERS = 2
BATCH = 8


@pytest.fixture(scope="module")
def record_files(tmp_path_factory):
  directory = tmp_path_factory.mktemp("one_graph")
  files = {}
  for split, seed, count in (("train", 1, 32), ("dev", 2, 13), ("test", 3, 21)):
    files[split] = str(directory / (split + ".tf_record"))
    write_records(files[split], random_batch(np.random.RandomState(seed), count))
  return files


def run_config(output_dir, variable_update="host", **fields):
  plan = run_settings.multigpu.plan_devices(TOWERS, visible_gpus=0,
                                            variable_update=variable_update)
  return run_settings.RunConfig(
      output_dir=str(output_dir), n_gpus=TOWERS, train_batch_size=BATCH // TOWERS,
      eval_batch_size=BATCH // TOWERS, predict_batch_size=BATCH // TOWERS, num_train_steps=4,
      save_checkpoints_steps=2, learning_rate=1e-2, log_steps=1, random_seed=3,
      variable_update=variable_update, plan=plan, **fields)


def eval_dataset(path):
  return lambda: tfrecord_io.make_dataset([path], FEATURE_SPEC, BATCH, False)


def best_first_eval_spec(make_dataset):
  """An EvalSpec whose metric is best at its first evaluation: best/ then holds step 2
  while training goes on to step 4."""
  calls = []

  def metrics_fn(outputs):
    calls.append(len(outputs["probabilities"]))
    return {"score": 1.0 / len(calls)}
  return runner.EvalSpec(make_dataset, metrics_fn, "score", None)


def make_inference(config, files, make_dev):
  return runner.Inference(
      config, classifier_model_fn(),
      {"eval": (make_dev, config.global_eval_batch_size),
       "predict": (eval_dataset(files["test"]), config.global_predict_batch_size)},
      lambda: checkpoints.checkpoint_for_inference(config.output_dir, None,
                                                   checkpoints.BEST_SUBDIR))


def fresh_outputs(config, files, checkpoint):
  return {name: runner.infer(config, classifier_model_fn(), eval_dataset(files[split]),
                             BATCH, checkpoint)
          for name, split in (("eval", "dev"), ("predict", "test"))}


def assert_same_outputs(shared, fresh):
  for name in ("eval", "predict"):
    assert set(shared[name]) == set(fresh[name])
    for key in fresh[name]:
      np.testing.assert_allclose(shared[name][key], fresh[name][key], rtol=1e-6, atol=1e-7,
                                 err_msg="%s %s" % (name, key))


@pytest.mark.parametrize("variable_update", ["host", "replicated"])
def test_shared_graph_predicts_with_best_as_a_fresh_restore_does(tmp_path, record_files,
                                                                 variable_update,
                                                                 monkeypatch):
  config = run_config(tmp_path / "model", variable_update)
  make_dev = eval_dataset(record_files["dev"])
  inference = make_inference(config, record_files, make_dev)
  built = []
  monkeypatch.setattr(runner, "infer", lambda *args: built.append(args))
  last = runner.train(config, classifier_model_fn(), train_dataset_fn(record_files["train"],
                                                                      BATCH),
                      best_first_eval_spec(make_dev), inference)
  monkeypatch.undo()
  assert inference.in_training_session
  shared = {name: inference.outputs(name) for name in ("eval", "predict")}
  assert not built  # no graph was built after training
  checkpoint, why = inference.checkpoint()
  assert os.path.basename(last) == "model.ckpt-4"
  assert checkpoint == os.path.join(config.output_dir, "best", "model.ckpt-2"), why
  assert len(shared["eval"]["probabilities"]) == 13
  assert len(shared["predict"]["probabilities"]) == 21
  fresh = fresh_outputs(config, record_files, checkpoint)
  assert_same_outputs(shared, fresh)
  # The weights restored were best/'s, not the session's last (step 4) ones.
  later = runner.infer(config, classifier_model_fn(), eval_dataset(record_files["test"]),
                       BATCH, last)
  assert not np.allclose(later["probabilities"],
                         shared["predict"]["probabilities"], rtol=0, atol=1e-6)


def test_without_best_the_latest_checkpoint_needs_no_restore(tmp_path, record_files):
  config = run_config(tmp_path / "model")
  inference = make_inference(config, record_files, eval_dataset(record_files["dev"]))
  phases.reset()
  last = runner.train(config, classifier_model_fn(),
                      train_dataset_fn(record_files["train"], BATCH), None, inference)
  assert inference.in_training_session and inference.checkpoint()[0] == last
  timer = phases._TIMER  # pylint: disable=protected-access
  assert "restore" not in timer.seconds  # the session already holds the latest weights
  assert {"build", "train", "eval", "predict"} <= set(timer.seconds)
  shared = {name: inference.outputs(name) for name in ("eval", "predict")}
  assert_same_outputs(shared, fresh_outputs(config, record_files, last))


def test_a_run_with_nothing_to_train_builds_its_own_inference_graph(tmp_path, record_files):
  config = run_config(tmp_path / "model")
  runner.train(config, classifier_model_fn(), train_dataset_fn(record_files["train"], BATCH))
  inference = make_inference(config, record_files, eval_dataset(record_files["dev"]))
  runner.train(config, classifier_model_fn(), train_dataset_fn(record_files["train"], BATCH),
               None, inference)
  assert not inference.in_training_session
  assert len(inference.outputs("predict")["probabilities"]) == 21
  metrics, _ = inference.evaluate("eval", lambda outputs: {"n": len(outputs["label_ids"])})
  assert metrics == {"n": 13, "global_step": 4}
  with open(os.path.join(config.output_dir, "eval_results.txt")) as f:
    assert "global_step = 4" in f.read()


def test_phase_timer_counts_nested_phases_once(monkeypatch):
  timer = phases.PhaseTimer(start_time=0.0)
  clock = iter([10.0, 11.0, 13.0, 14.0, 20.0])
  monkeypatch.setattr(phases.time, "time", lambda: next(clock))
  with timer.timed("predict"):
    with timer.timed("build"):
      pass
  assert timer.seconds == {"predict": 2.0, "build": 2.0}
  lines = timer.summary_lines()  # at t = 20: 16 s of other
  monkeypatch.undo()
  assert lines[2].split()[:2] == ["other", "16.00"]
  assert lines[0].split()[0] == "build" and lines[-1].split()[0] == "total"


def autotune_setting(dataset):
  """tf.data's autotune option of `dataset`: None (the default: on), True or False."""
  options = dataset.options()
  if hasattr(options, "autotune"):
    return options.autotune.enabled
  return options.experimental_optimization.autotune


def test_every_iterator_runs_without_tf_data_autotuning(tmp_path, record_files, monkeypatch):
  # Its thread can hold up closing a session for up to a minute (tfrecord_io.without_autotune).
  iterated = []
  make_iterator = runner.tf.data.make_initializable_iterator

  def spy(dataset):
    iterated.append(autotune_setting(dataset))  # in the dataset's graph
    return make_iterator(dataset)
  monkeypatch.setattr(runner.tf.data, "make_initializable_iterator", spy)
  config = run_config(tmp_path / "model")
  make_dev = eval_dataset(record_files["dev"])
  inference = make_inference(config, record_files, eval_dataset(record_files["dev"]))
  phases.reset()
  last = runner.train(config, classifier_model_fn(),
                      train_dataset_fn(record_files["train"], BATCH),
                      best_first_eval_spec(make_dev), inference)
  assert len(iterated) == 4  # training, evaluation during training, eval and predict
  runner.infer(config, classifier_model_fn(), make_dev, BATCH, last)  # a graph of its own
  assert len(iterated) == 5
  assert iterated == [False] * 5
  assert "close" in phases._TIMER.seconds  # pylint: disable=protected-access
