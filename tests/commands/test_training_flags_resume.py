# coding=utf-8
"""A rerun of a trained output_dir never changes how it trains silently (docs/TRAINING.md
"Resume"), end to end with run_classifier_mgpu.py: one short training run records its
flags; a rerun with another learning rate is refused in one line and writes nothing; the
same rerun with --allow_changed_training_flags and more epochs trains on, logs both changes
and records the new values; an output_dir without the record (trained before it existed)
resumes with one warning and gets it. The comparison flag by flag is unit-tested in
tests/training/test_training_flags.py, the workers' check in
tests/distributed/test_multiworker.py."""

import glob
import json
import os
import shutil

import pytest
import tensorflow.compat.v1 as tf

import cli
from classifier_runs import base_flags, run_classifier

RECORD = "training_flags.json"


def short_run_flags(demo_data, output_dir, **overrides):
  return base_flags(demo_data, output_dir, **dict(
      dict(n_gpus=1, do_eval=False, do_predict=False, num_train_epochs=1,
           save_checkpoints_steps=100), **overrides))


@pytest.fixture(scope="module")
def trained(demo_data, tmp_path_factory):
  """An output_dir trained for 1 epoch (its first run records its flags)."""
  output_dir = str(tmp_path_factory.mktemp("flags") / "model")
  cli.assert_succeeded(run_classifier(short_run_flags(demo_data, output_dir)))
  return output_dir


def read_record(output_dir):
  with open(os.path.join(output_dir, RECORD), encoding="utf-8") as f:
    return json.load(f)


def directory_state(directory):
  return sorted((path, os.path.getmtime(path), os.path.getsize(path)) for path in
                glob.glob(os.path.join(directory, "**"), recursive=True))


def test_the_first_run_records_its_flags(trained):
  record = read_record(trained)
  assert record["flags"]["learning_rate"] == 5e-3
  assert record["flags"]["train_batch_size"] == 4 and record["flags"]["n_gpus"] == 1
  assert record["num_workers"] == 1 and record["num_train_steps"] > 0
  assert "log_steps" not in record["flags"] and "num_train_epochs" not in record["flags"]


def test_a_changed_flag_is_refused_and_nothing_is_written(trained, demo_data):
  before = directory_state(trained)
  result = run_classifier(short_run_flags(demo_data, trained, learning_rate=4e-3,
                                          num_train_epochs=2))
  cli.assert_one_line_error(result, "%s was trained with other flags: --learning_rate=0.005 "
                            "(given 0.004)" % trained, "--allow_changed_training_flags")
  assert directory_state(trained) == before


def test_other_cadences_need_no_override(trained, demo_data):
  """Logging, checkpoint and evaluation cadences are free (training is over: nothing to
  train, and the rerun says so instead of refusing)."""
  result = run_classifier(short_run_flags(demo_data, trained, log_steps=2,
                                          save_checkpoints_steps=3, keep_checkpoint_max=2))
  cli.assert_succeeded(result)
  assert "was trained with other flags" not in result.stderr


def test_the_override_trains_on_and_records_the_new_values(trained, demo_data, tmp_path):
  output_dir = str(tmp_path / "changed")
  shutil.copytree(trained, output_dir)
  steps = read_record(output_dir)["num_train_steps"]
  latest = tf.train.latest_checkpoint(output_dir)
  result = run_classifier(short_run_flags(demo_data, output_dir, learning_rate=4e-3,
                                          num_train_epochs=2, log_steps=1,
                                          allow_changed_training_flags=True))
  cli.assert_succeeded(result)
  assert ("Resuming %s with changed flags (--allow_changed_training_flags): "
          "--learning_rate=0.005 (given 0.004). The new values are recorded." % output_dir
          ) in result.stderr
  record = read_record(output_dir)
  assert record["flags"]["learning_rate"] == 4e-3 and record["num_train_steps"] > steps
  assert "Training now ends at step %d (recorded: %d)" % (
      record["num_train_steps"], steps) in result.stderr
  assert tf.train.latest_checkpoint(output_dir) != latest


def test_an_output_dir_without_the_record_resumes_with_a_warning(trained, demo_data,
                                                                 tmp_path):
  output_dir = str(tmp_path / "before")
  shutil.copytree(trained, output_dir)
  os.remove(os.path.join(output_dir, RECORD))
  result = run_classifier(short_run_flags(demo_data, output_dir, num_train_epochs=2))
  cli.assert_succeeded(result)
  assert ("has no training_flags.json (it was trained before runs recorded their flags)"
          in result.stderr)
  assert read_record(output_dir)["flags"] == read_record(trained)["flags"]
