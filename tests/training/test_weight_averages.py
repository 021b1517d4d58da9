# coding=utf-8
"""--ema_decay (bert_mgpu/training/weight_averages.py): the shadows against a NumPy average
of the weights step by step, on towers and replicas as on one device, a skipped fp16 update,
and the one rule every reader of a checkpoint follows (its averages under the plain names);
the runs end to end are in tests/commands/test_fine_tuning_techniques.py."""

import glob
import os
import shutil

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu.data import tfrecord_io
from bert_mgpu.errors import UsageError
from bert_mgpu.training import checkpoints
from bert_mgpu.training import run_settings
from bert_mgpu.training import runner
from bert_mgpu.training import weight_averages
import multigpu
from tiny_model import (FEATURE_SPEC, batch_placeholders, classifier_model_fn, cpu_plan,  # pylint: disable=g-multiple-import
                        random_batch, relative_update_difference, train_dataset_fn,
                        train_steps, write_records)

DECAY = 0.5  # far from 1, so a few steps leave the average far from the weights
REPLICATED = multigpu.DevicePlan(["/cpu:0", "/cpu:1"], "/cpu:0", num_cpu_devices=2,
                                 variable_update="replicated")


def averages_of(values):
  """The shadows in train_steps' all_values, under their weights' names."""
  return {name[:-len(weight_averages.SUFFIX)]: value for name, value in values.items()
          if name.endswith(weight_averages.SUFFIX) and not name.startswith("replica_")}


def test_the_average_follows_numpy_after_each_update():
  rng = np.random.RandomState(21)
  batches = [random_batch(rng, 8) for _ in range(3)]
  plan = cpu_plan(1)
  with tf.Graph().as_default():
    tf.set_random_seed(1)
    placeholders = batch_placeholders(batches[0])
    ops = multigpu.build_training(plan, classifier_model_fn(), placeholders, 1e-2, 100, 0,
                                  ema_decay=DECAY)
    start = weight_averages.build_start()
    trained = tf.trainable_variables()
    shadows = [weight_averages.shadow_of(v) for v in trained]
    assert all(s is not None for s in shadows)
    assert not set(shadows) & set(tf.trainable_variables())
    with tf.Session(config=plan.session_config()) as sess:
      sess.run(tf.global_variables_initializer())
      sess.run(start)
      expected = sess.run(trained)
      np.testing.assert_array_equal(sess.run(shadows)[0], expected[0])
      for batch in batches:
        sess.run(ops.train_op, {placeholders[k]: v for k, v in batch.items()})
        weights = sess.run(trained)
        expected = [DECAY * s + (1 - DECAY) * w for s, w in zip(expected, weights)]
        got = sess.run(shadows)
        for variable, want, have, weight in zip(trained, expected, got, weights):
          np.testing.assert_allclose(have, want, rtol=1e-6, atol=1e-7, err_msg=variable.op.name)
      # After three steps the average is not the weights.
      assert max(np.abs(w - s).max() for w, s in zip(weights, got)) > 1e-3


def test_towers_accumulation_and_replicas_give_one_devices_step_with_both_techniques():
  """--ema_decay and --layerwise_lr_decay together (dropout off): 2 towers, 2 accumulated
  micro-batches and 2 replicas give one device's weights and averages."""
  rng = np.random.RandomState(23)
  batches = [random_batch(rng, 8) for _ in range(2)]
  both = dict(layerwise_lr_decay=0.5, ema_decay=DECAY)
  initial, one_device_weights, values, _ = train_steps(cpu_plan(1), batches, "adamw", **both)
  one_device = averages_of(values)
  assert sorted(one_device) == sorted(initial)
  for plan, accumulation in ((cpu_plan(2), 1), (cpu_plan(2), 2),
                             (REPLICATED, 1)):
    _, weights, values, _ = train_steps(plan, batches, "adamw", initial, accumulation, **both)
    assert relative_update_difference(initial, one_device_weights, weights) <= 1e-5
    towers = averages_of(values)
    assert relative_update_difference(initial, one_device, towers) <= 1e-5, (
        plan.describe(), accumulation)
    if plan.replicated:  # every replica keeps the same average of its own copy
      for name, value in towers.items():
        np.testing.assert_allclose(
            values[multigpu.replica_variable_name(weight_averages.average_name(name), 1)],
            value, rtol=1e-6, atol=1e-7, err_msg=name)
  # The comparison can fail: without layer-wise rates the average moves otherwise.
  _, _, values, _ = train_steps(cpu_plan(1), batches, "adamw", initial, ema_decay=DECAY)
  assert relative_update_difference(initial, one_device, averages_of(values)) > 1e-2


def test_a_skipped_update_leaves_the_average_exactly():
  with tf.Graph().as_default():
    weight = tf.get_variable("w", initializer=tf.constant([1.0, -2.0]), use_resource=True)
    applied = tf.placeholder(tf.bool, [])
    move = weight_averages.build_update([weight], 0.9, applied)
    start = weight_averages.build_start()
    shadow = weight_averages.shadow_of(weight)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      sess.run(start)
      sess.run(weight.assign([3.0, 0.5]))
      sess.run(move, {applied: False})
      np.testing.assert_array_equal(sess.run(shadow), [1.0, -2.0])
      sess.run(move, {applied: True})
      np.testing.assert_allclose(sess.run(shadow), [1.2, -1.75], rtol=1e-6)


def test_an_fp16_update_that_overflows_moves_no_average():
  """A good step (the averages now differ from the weights), then one whose loss is
  infinite: loss scaling skips it, and the averages keep their bits."""
  batch = random_batch(np.random.RandomState(3), 8)
  plan = cpu_plan(1)
  with tf.Graph().as_default():
    tf.set_random_seed(1)
    loss_factor = tf.placeholder_with_default(1.0, [])
    model_fn = classifier_model_fn()

    def poisonable_model_fn(features, is_training):
      outputs = model_fn(features, is_training)
      outputs["loss"] = outputs["loss"] * loss_factor
      return outputs

    features = {k: tf.constant(v) for k, v in batch.items()}
    ops = multigpu.build_training(plan, poisonable_model_fn, features, 1e-2, 100, 0,
                                  precision="fp16", ema_decay=DECAY)
    start = weight_averages.build_start()
    trained = tf.trainable_variables()
    shadows = weight_averages.used_variables(trained)
    with tf.Session(config=plan.session_config()) as sess:
      sess.run(tf.global_variables_initializer())
      sess.run(start)
      sess.run(ops.train_op)
      weights, averages = sess.run([trained, shadows])
      assert max(np.abs(w - a).max() for w, a in zip(weights, averages)) > 1e-4
      _, norm = sess.run([ops.train_op, ops.global_norm], {loss_factor: np.inf})
      assert not np.isfinite(norm) and sess.run(ops.global_step) == 1
      for variable, before, after in zip(trained, averages, sess.run(shadows)):
        np.testing.assert_array_equal(after, before, err_msg=variable.op.name)


# ---------------------------------------------------------------------------
# Reading a checkpoint: the averages under the plain names
# ---------------------------------------------------------------------------

WEIGHT = np.array([[1.0, 2.0]], np.float32)
AVERAGE = np.array([[0.5, 1.5]], np.float32)


@pytest.fixture
def averaged_checkpoint(tmp_path):
  return checkpoints.write_arrays({
      "bert/pooler/dense/kernel": WEIGHT, "bert/pooler/dense/kernel/ExponentialMovingAverage":
      AVERAGE, "output_bias": np.array([3.0], np.float32),
      "output_bias/adam_m": np.array([9.0], np.float32)}, str(tmp_path / "ema" / "model.ckpt"))


def test_every_reader_gets_the_average_where_there_is_one(averaged_checkpoint):
  assert weight_averages.has_averages(averaged_checkpoint)
  reader = tf.train.load_checkpoint(averaged_checkpoint)
  weights = weight_averages.read_weights(reader, ["bert/pooler/dense/kernel", "output_bias"])
  np.testing.assert_array_equal(weights["bert/pooler/dense/kernel"], AVERAGE)
  np.testing.assert_array_equal(weights["output_bias"], [3.0])
  np.testing.assert_array_equal(
      weight_averages.read_weight(averaged_checkpoint, "bert/pooler/dense/kernel"), AVERAGE)
  with tf.Graph().as_default():
    kernel = tf.get_variable("bert/pooler/dense/kernel", [1, 2], use_resource=True)
    bias = tf.get_variable("output_bias", [1], use_resource=True)
    saver = weight_averages.restore_saver(averaged_checkpoint, [kernel, bias])
    with tf.Session() as sess:
      saver.restore(sess, averaged_checkpoint)
      np.testing.assert_array_equal(sess.run(kernel), AVERAGE)
      np.testing.assert_array_equal(sess.run(bias), [3.0])


def test_init_checkpoint_starts_from_the_averages(averaged_checkpoint):
  with tf.Graph().as_default():
    kernel = tf.get_variable("bert/pooler/dense/kernel", [1, 2], use_resource=True)
    missing = checkpoints.init_from_checkpoint(averaged_checkpoint)
    assert missing == []
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      np.testing.assert_array_equal(sess.run(kernel), AVERAGE)


def test_a_checkpoint_without_averages_is_read_as_it_is(tmp_path):
  path = checkpoints.write_arrays({"output_bias": np.array([3.0], np.float32)},
                                  str(tmp_path / "plain" / "model.ckpt"))
  assert not weight_averages.has_averages(path)
  assert weight_averages.checkpoint_weight_names({"output_bias"}, ["output_bias"]) == {
      "output_bias": "output_bias"}


def test_resuming_needs_the_same_choice(averaged_checkpoint, tmp_path):
  plain = checkpoints.write_arrays({"output_bias": np.array([3.0], np.float32)},
                                   str(tmp_path / "plain" / "model.ckpt"))
  weight_averages.check_resume(averaged_checkpoint, 0.99)
  weight_averages.check_resume(plain, 0.0)
  with pytest.raises(UsageError, match=r"--ema_decay=0.99: .*plain/model.ckpt was trained "
                     r"without it and has no weight averages to continue"):
    weight_averages.check_resume(plain, 0.99)
  with pytest.raises(UsageError, match=r"ema/model.ckpt was trained with --ema_decay and holds "
                     r"weight averages that this run would drop"):
    weight_averages.check_resume(averaged_checkpoint, 0.0)


@pytest.mark.parametrize("decay", [-0.1, 1.0, 1.5])
def test_a_decay_outside_zero_one_is_refused(decay):
  with pytest.raises(UsageError, match=r"--ema_decay=%s: give a factor in \[0, 1\)" % decay):
    weight_averages.check_decay(decay)


# ---------------------------------------------------------------------------
# The runner: evaluation in the training session, resuming bit-exactly
# ---------------------------------------------------------------------------

def run_config(output_dir, num_train_steps, **fields):
  return run_settings.RunConfig(
      output_dir=str(output_dir), n_gpus=2, train_batch_size=4, eval_batch_size=4,
      num_train_steps=num_train_steps, plan=cpu_plan(2), learning_rate=1e-2,
      num_warmup_steps=1, log_steps=1, save_checkpoints_steps=2, random_seed=9, **fields)


def all_values(checkpoint):
  reader = tf.train.load_checkpoint(checkpoint)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def test_a_resumed_run_continues_the_averages_bit_exactly(tmp_path):
  """Killed after saving step 2 of 5 and resumed: the same bits, averages included."""
  record_file = str(tmp_path / "train.tf_record")
  write_records(record_file, random_batch(np.random.RandomState(2), 24))

  def train(name):
    return runner.train(run_config(tmp_path / name, 5, ema_decay=DECAY),
                        classifier_model_fn(), train_dataset_fn(record_file, 8))

  straight = train("straight")
  resumed_dir = str(tmp_path / "resumed")
  shutil.copytree(str(tmp_path / "straight"), resumed_dir)
  for path in glob.glob(os.path.join(resumed_dir, "model.ckpt-[45]*")):
    os.remove(path)
  tf.train.update_checkpoint_state(resumed_dir, os.path.join(resumed_dir, "model.ckpt-2"))
  resumed = train("resumed")
  a, b = all_values(straight), all_values(resumed)
  assert set(a) == set(b) and "output_weights/ExponentialMovingAverage" in a
  for name in a:
    np.testing.assert_array_equal(a[name], b[name], err_msg=name)
  assert np.abs(a["output_weights"] - a["output_weights/ExponentialMovingAverage"]).max() > 1e-3


def test_dev_evaluation_in_the_training_session_sees_the_averages(tmp_path):
  """The eval towers of the training graph give what infer() gives on the checkpoint (which
  restores the averages), and not what the raw weights give."""
  record_file = str(tmp_path / "train.tf_record")
  write_records(record_file, random_batch(np.random.RandomState(5), 16))
  seen = []

  def metrics_fn(outputs):
    seen.append(outputs["probabilities"])
    return {"score": float(len(seen))}

  def dev_dataset():
    return tfrecord_io.make_dataset([record_file], FEATURE_SPEC, 8, False)

  spec = runner.EvalSpec(dev_dataset, metrics_fn, None, None)
  config = run_config(tmp_path / "model", 4, ema_decay=DECAY)
  last = runner.train(config, classifier_model_fn(), train_dataset_fn(record_file, 8), spec)
  in_session = seen[-1]
  averaged = runner.infer(config, classifier_model_fn(), dev_dataset, 8, last)["probabilities"]
  np.testing.assert_allclose(in_session, averaged, rtol=1e-5, atol=1e-6)
  raw_dir = tmp_path / "raw"
  raw = checkpoints.write_arrays(
      {name: value for name, value in all_values(last).items()
       if not weight_averages.is_average(name)}, str(raw_dir / "model.ckpt"))
  raw_outputs = runner.infer(config, classifier_model_fn(), dev_dataset, 8, raw)
  assert np.abs(raw_outputs["probabilities"] - in_session).max() > 1e-3
