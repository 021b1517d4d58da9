# coding=utf-8
"""The classifier's and NER's fine-tuning techniques end to end: --layerwise_lr_decay.

Two runs of run_classifier_mgpu.py on two towers from the same seed (same initial weights,
batches and dropout), one with --layerwise_lr_decay=0.5 and one without, on a 2-layer BERT,
each of 2 steps with all of them warmup: the first step's learning rate is 0, so both
checkpoints of step 1 hold the initial weights and the moments of the same first gradient,
and the second step's move of each variable must be the undecayed run's times its factor
(head and pooler 1, layer 1 d, layer 0 d^2, embeddings d^3), to float precision.
"""

import json
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cli
from classifier_runs import base_flags, run_classifier, write_json

DECAY = 0.5
NUM_LAYERS = 2


def expected_factor(name):
  if name.startswith("bert/embeddings/"):
    return DECAY ** (NUM_LAYERS + 1)
  for layer in range(NUM_LAYERS):
    if name.startswith("bert/encoder/layer_%d/" % layer):
      return DECAY ** (NUM_LAYERS - layer)
  return 1.0


def checkpoint_values(path):
  reader = tf.train.load_checkpoint(path)
  return {name: reader.get_tensor(name).astype(np.float64)
          for name in reader.get_variable_to_shape_map()
          if not name.endswith(("adam_m", "adam_v")) and name != "global_step"}


@pytest.fixture(scope="module")
def runs(demo_data, tmp_path_factory):
  """{decay: (checkpoint values at step 1, at step 2, stderr)} for DECAY and 1.0."""
  root = str(tmp_path_factory.mktemp("layerwise"))
  config_file = os.path.join(root, "bert_config.json")
  write_json(config_file, dict(demo_data.config, num_hidden_layers=NUM_LAYERS))
  results = {}
  for decay in (DECAY, 1.0):
    output_dir = os.path.join(root, "decay_%g" % decay)
    # 50 examples x 0.32 epochs / (2 towers x 4) = 2 steps, both warmup.
    flags = base_flags(demo_data, output_dir, bert_config_file=config_file, do_eval=False,
                       do_predict=False, num_train_epochs=0.32, warmup_proportion=1.0,
                       save_checkpoints_steps=1, keep_checkpoint_max=0, random_seed=7,
                       layerwise_lr_decay=decay)
    result = run_classifier(flags)
    cli.assert_succeeded(result)
    results[decay] = (checkpoint_values(os.path.join(output_dir, "model.ckpt-1")),
                      checkpoint_values(os.path.join(output_dir, "model.ckpt-2")),
                      result.stderr)
  return results


def test_each_layer_moves_by_its_factor_of_the_undecayed_step(runs):
  start, end, _ = runs[DECAY]
  plain_start, plain_end = runs[1.0][:2]
  assert sorted(start) == sorted(plain_start)
  factors = set()
  for name in start:
    # The first step's rate is 0: both runs still hold the same initial weights.
    np.testing.assert_array_equal(start[name], plain_start[name], err_msg=name)
    plain_move = plain_end[name] - plain_start[name]
    assert np.abs(plain_move).max() > 0, name
    # Moves are differences of float32 weights: exact to a few units in their last place.
    resolution = 4 * float(np.spacing(np.float32(np.abs(start[name]).max())))
    np.testing.assert_allclose(end[name] - start[name], expected_factor(name) * plain_move,
                               rtol=1e-4, atol=resolution, err_msg=name)
    # The factor changes the move by far more than that resolution, so a factor of 1 in
    # place of it would fail.
    assert np.abs(plain_move).max() * (1 - expected_factor(name)) > 10 * resolution or \
        expected_factor(name) == 1.0, name
    factors.add(expected_factor(name))
  assert factors == {1.0, DECAY, DECAY ** 2, DECAY ** 3}


def test_the_log_names_the_smallest_and_largest_factor(runs):
  stderr = runs[DECAY][2]
  assert "layer-wise learning-rate decay 0.5" in stderr
  assert ("Layer-wise learning rates: the schedule's times 0.125 for 5 variable(s) "
          "(bert/embeddings) ... 1 for 4 variable(s) (bert/pooler, output_bias, "
          "output_weights); 4 factors in all.") in stderr, stderr[-3000:]
  assert "Layer-wise learning rates" not in runs[1.0][2]


@pytest.mark.parametrize("script", ["run_classifier_mgpu.py", "run_ner_mgpu.py"])
@pytest.mark.parametrize("decay", ["0", "1.5"])
def test_a_factor_outside_zero_one_is_one_line(script, decay, tmp_path):
  task = ["--task_name=tsv"] if script == "run_classifier_mgpu.py" else []
  result = cli.run_script(script, ["--layerwise_lr_decay=" + decay, "--do_train",
                                   "--data_dir=" + str(tmp_path),
                                   "--output_dir=" + str(tmp_path / "out")] + task)
  cli.assert_one_line_error(result, "--layerwise_lr_decay=%s: give a factor in (0, 1]" %
                            float(decay))
  assert not os.path.exists(str(tmp_path / "out"))


def test_scripts_other_than_the_classifier_and_ner_do_not_take_it(tmp_path):
  result = cli.run_script("run_pretraining_mgpu.py", ["--layerwise_lr_decay=0.8"])
  assert result.returncode != 0
  assert "layerwise_lr_decay" in result.stderr
