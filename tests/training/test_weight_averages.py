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


FROM_START = weight_averages.Rule(bias_correction=False, recorded=True)
WARMUP = weight_averages.Rule(bias_correction=True, recorded=True, warmup=True)
FROM_START_WARMUP = weight_averages.Rule(bias_correction=False, recorded=True, warmup=True)


def step_decays(rule, decay, t):
  """D_1 ... D_t: D, or with warmup min(D, (1 + i) / (10 + i)) (TF's num_updates rule)."""
  return [min(decay, (1.0 + i) / (10.0 + i)) if rule.warmup else decay
          for i in range(1, t + 1)]


def corrected_average(weights, decay):
  """bert4keras's bias-corrected average after len(weights) updates, in its closed form:
  sum_i (1 - D) D^(t-i) w_i / (1 - D^t), the weights after each update (float64)."""
  t = len(weights)
  total = sum((1 - decay) * decay ** (t - i) * np.asarray(w, np.float64)
              for i, w in enumerate(weights, 1))
  return total / (1 - decay ** t)


def from_start_average(initial, weights, decay):
  """The rule without the correction: D^t of the start weights stays in (float64)."""
  average = np.asarray(initial, np.float64)
  for w in weights:
    average = decay * average + (1 - decay) * np.asarray(w, np.float64)
  return average


def expected_average(rule, initial, weights, decay):
  """The average after len(weights) updates by `rule`, summed term by term (float64): each
  update i weighs (1 - D_i) D_(i+1) ... D_t; the start weights D_1 ... D_t, or, corrected,
  nothing, with the weights' sum normalised to 1."""
  decays = step_decays(rule, decay, len(weights))
  shares = [(1 - d) * np.prod(decays[i + 1:]) for i, d in enumerate(decays)]
  start_share = np.prod(decays)
  total = sum(s * np.asarray(w, np.float64) for s, w in zip(shares, weights))
  if rule.bias_correction:
    return total / (1 - start_share)
  return total + start_share * np.asarray(initial, np.float64)


def test_the_term_by_term_average_is_the_closed_forms():
  """expected_average (no warmup) against the closed forms above (independent arithmetic)."""
  rng = np.random.RandomState(3)
  initial, weights = rng.randn(4), [rng.randn(4) for _ in range(5)]
  np.testing.assert_allclose(expected_average(weight_averages.BIAS_CORRECTED, initial, weights,
                                              0.7), corrected_average(weights, 0.7), rtol=1e-12)
  np.testing.assert_allclose(expected_average(FROM_START, initial, weights, 0.7),
                             from_start_average(initial, weights, 0.7), rtol=1e-12)


@pytest.mark.parametrize("rule", [weight_averages.BIAS_CORRECTED, FROM_START, WARMUP,
                                  FROM_START_WARMUP],
                         ids=["bias_corrected", "from_start", "warmup", "from_start_warmup"])
def test_the_average_follows_numpy_after_each_update(rule):
  rng = np.random.RandomState(21)
  batches = [random_batch(rng, 8) for _ in range(3)]
  plan = cpu_plan(1)
  with tf.Graph().as_default():
    tf.set_random_seed(1)
    placeholders = batch_placeholders(batches[0])
    ops = multigpu.build_training(plan, classifier_model_fn(), placeholders, 1e-2, 100, 0,
                                  ema_decay=DECAY, ema_rule=rule)
    start = weight_averages.build_start()
    trained = tf.trainable_variables()
    shadows = [weight_averages.shadow_of(v) for v in trained]
    assert all(s is not None for s in shadows)
    assert not set(shadows) & set(tf.trainable_variables())
    with tf.Session(config=plan.session_config()) as sess:
      sess.run(tf.global_variables_initializer())
      sess.run(start)
      initial = sess.run(trained)
      np.testing.assert_array_equal(sess.run(shadows)[0], initial[0])
      history = []
      for t, batch in enumerate(batches, 1):
        sess.run(ops.train_op, {placeholders[k]: v for k, v in batch.items()})
        history.append(sess.run(trained))
        got = sess.run(shadows)
        if t == 1 and rule.bias_correction:  # r_1 = 1: the first update's weights, exactly
          for variable, have, weight in zip(trained, got, history[0]):
            np.testing.assert_array_equal(have, weight, err_msg=variable.op.name)
        for j, (variable, have) in enumerate(zip(trained, got)):
          want = expected_average(rule, initial[j], [w[j] for w in history], DECAY)
          np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-7,
                                     err_msg="%s, update %d" % (variable.op.name, t))
      # After three steps the average is neither the weights nor another rule's.
      weights = history[-1]
      assert max(np.abs(w - s).max() for w, s in zip(weights, got)) > 1e-3
      for other in (weight_averages.Rule(not rule.bias_correction, True, rule.warmup),
                    weight_averages.Rule(rule.bias_correction, True, not rule.warmup)):
        assert max(np.abs(expected_average(other, initial[j], [w[j] for w in history],
                                           DECAY) - got[j]).max()
                   for j in range(len(trained))) > 1e-4, other


def test_the_recurrence_is_bert4keras_corrected_average():
  """move_rate's r_t applied step by step gives the closed form (independent arithmetic),
  and r_t falls to 1 - D."""
  rng = np.random.RandomState(4)
  weights = [rng.randn(3) for _ in range(6)]
  with tf.Graph().as_default():
    step = tf.placeholder(tf.int64, [])
    rate = weight_averages.move_rate(0.9, step, bias_correction=True)
    with tf.Session() as sess:
      rates = [sess.run(rate, {step: t - 1}) for t in range(1, 7)] + [
          sess.run(rate, {step: 10 ** 6})]
  assert rates[0] == 1.0
  np.testing.assert_allclose(rates[-1], 0.1, rtol=1e-12)
  average = np.zeros(3)
  for t, w in enumerate(weights, 1):
    average = average * (1 - rates[t - 1]) + w * rates[t - 1]
    np.testing.assert_allclose(average, corrected_average(weights[:t], 0.9), rtol=1e-12)


@pytest.mark.parametrize("decay", [0.999, 0.9, 0.05])
@pytest.mark.parametrize("bias_correction", [True, False])
def test_the_warmup_rate_against_a_step_by_step_product(decay, bias_correction):
  """move_rate with warmup (log D_1 ... D_t in closed form) against D_t and the running
  product computed update by update, across the end of the warmup (t = 80 at D = 0.9,
  8,991 at 0.999; none at 0.05) and far beyond it."""
  rule = weight_averages.Rule(bias_correction, True, warmup=True)
  last = 20000
  decays = step_decays(rule, decay, last)
  products = np.cumprod(decays)
  checked = sorted(set(list(range(1, 200)) + [8990, 8991, 8992, 9000, last]))
  with tf.Graph().as_default():
    step = tf.placeholder(tf.int64, [])
    rate = weight_averages.move_rate(decay, step, bias_correction, warmup=True)
    with tf.Session() as sess:
      got = [sess.run(rate, {step: t - 1}) for t in checked]
  for t, have in zip(checked, got):
    want = (1 - decays[t - 1]) / (1 - products[t - 1]) if bias_correction else 1 - decays[t - 1]
    np.testing.assert_allclose(have, want, rtol=1e-9, err_msg="t = %d" % t)
  if bias_correction:
    assert got[0] == 1.0  # the first update's weights, as without warmup
  # Far beyond the warmup the rate is 1 - D, the rule without warmup.
  np.testing.assert_allclose(got[-1], 1 - decay, rtol=1e-9)


@pytest.mark.parametrize("rule", [weight_averages.BIAS_CORRECTED, WARMUP],
                         ids=["bias_corrected", "warmup"])
def test_towers_accumulation_and_replicas_give_one_devices_step_with_both_techniques(rule):
  """--ema_decay and --layerwise_lr_decay together (dropout off): 2 towers, 2 accumulated
  micro-batches and 2 replicas give one device's weights and averages, and one device's
  averages are the bias-corrected average of its weights after each update."""
  rng = np.random.RandomState(23)
  batches = [random_batch(rng, 8) for _ in range(2)]
  both = dict(layerwise_lr_decay=0.5, ema_decay=DECAY, ema_rule=rule)
  history = []
  initial, one_device_weights, values, _ = train_steps(cpu_plan(1), batches, "adamw",
                                                       weights_after_each=history, **both)
  one_device = averages_of(values)
  assert sorted(one_device) == sorted(initial)
  for name, value in one_device.items():
    np.testing.assert_allclose(
        value, expected_average(rule, initial[name], [w[name] for w in history], DECAY),
        rtol=1e-5, atol=1e-7, err_msg=name)
  for plan, accumulation in ((cpu_plan(2), 1), (cpu_plan(2), 2),
                             (REPLICATED, 1), (REPLICATED, 2)):
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
    # One record of the rule, whatever the replicas.
    assert values[weight_averages.RECORDED_DECAY] == np.float32(DECAY)
    assert values[weight_averages.RECORDED_CORRECTION] == 1.0
    assert values.get(weight_averages.RECORDED_WARMUP, 0.0) == float(rule.warmup)
  # The comparison can fail: without layer-wise rates the average moves otherwise.
  _, _, values, _ = train_steps(cpu_plan(1), batches, "adamw", initial, ema_decay=DECAY,
                                ema_rule=rule)
  assert relative_update_difference(initial, one_device, averages_of(values)) > 1e-2


def test_a_skipped_update_leaves_the_average_and_its_step_count_exactly():
  """A skipped update moves nothing; the next applied one is t = global_step + 1 (the
  skip did not count): r_1 = 1 takes the weights, then r_2 = 0.1 / 0.19."""
  with tf.Graph().as_default():
    weight = tf.get_variable("w", initializer=tf.constant([1.0, -2.0]), use_resource=True)
    global_step = tf.train.get_or_create_global_step()
    applied = tf.placeholder(tf.bool, [])
    move = weight_averages.build_update([weight], 0.9, global_step, applied)
    start = weight_averages.build_start()
    shadow = weight_averages.shadow_of(weight)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      sess.run(start)
      sess.run(weight.assign([3.0, 0.5]))
      sess.run(move, {applied: False})
      np.testing.assert_array_equal(sess.run(shadow), [1.0, -2.0])
      sess.run(move, {applied: True})
      np.testing.assert_array_equal(sess.run(shadow), [3.0, 0.5])
      sess.run([weight.assign([5.0, 1.5]), global_step.assign(1)])
      sess.run(move, {applied: True})
      rate = 0.1 / 0.19
      np.testing.assert_allclose(sess.run(shadow), [3.0 + 2.0 * rate, 0.5 + rate], rtol=1e-6)


def test_an_fp16_update_that_overflows_moves_no_average_nor_counts():
  """A good step (the averages now differ from the weights), then one whose loss is
  infinite: loss scaling skips it, and the averages keep their bits; the next good step
  moves them as update t = 2."""
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
      initial = sess.run(trained)
      sess.run(ops.train_op)
      weights, averages = sess.run([trained, shadows])
      assert max(np.abs(w - a).max() for w, a in zip(initial, averages)) > 1e-4
      _, norm = sess.run([ops.train_op, ops.global_norm], {loss_factor: np.inf})
      assert not np.isfinite(norm) and sess.run(ops.global_step) == 1
      for variable, before, after in zip(trained, averages, sess.run(shadows)):
        np.testing.assert_array_equal(after, before, err_msg=variable.op.name)
      sess.run(ops.train_op)
      later = sess.run(trained)
      for j, (variable, have) in enumerate(zip(trained, sess.run(shadows))):
        np.testing.assert_allclose(have, corrected_average([weights[j], later[j]], DECAY),
                                   rtol=1e-5, atol=1e-7, err_msg=variable.op.name)


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


def recorded_checkpoint(directory, decay, correction, warmup=None):
  arrays = {"output_bias": np.array([3.0], np.float32),
            "output_bias/ExponentialMovingAverage": np.array([2.0], np.float32),
            weight_averages.RECORDED_DECAY: np.array(decay, np.float32),
            weight_averages.RECORDED_CORRECTION: np.array(correction, np.float32)}
  if warmup is not None:
    arrays[weight_averages.RECORDED_WARMUP] = np.array(warmup, np.float32)
  return checkpoints.write_arrays(arrays, str(directory / "model.ckpt"))


def test_resuming_needs_the_same_choice(averaged_checkpoint, tmp_path):
  plain = checkpoints.write_arrays({"output_bias": np.array([3.0], np.float32)},
                                   str(tmp_path / "plain" / "model.ckpt"))
  assert weight_averages.check_resume(plain, 0.0, warmup=False) == (
      weight_averages.BIAS_CORRECTED)
  assert weight_averages.check_resume(plain, 0.0) == WARMUP  # not given: the default
  with pytest.raises(UsageError, match=r"--ema_decay=0.99: .*plain/model.ckpt was trained "
                     r"without it and has no weight averages to continue"):
    weight_averages.check_resume(plain, 0.99)
  with pytest.raises(UsageError, match=r"ema/model.ckpt was trained with --ema_decay and holds "
                     r"weight averages that this run would drop"):
    weight_averages.check_resume(averaged_checkpoint, 0.0)


def test_a_checkpoint_from_before_the_record_continues_by_its_rule(averaged_checkpoint):
  """Averages with no record were kept by the rule before the correction: a resume
  continues by it, without a record (whatever D and --ema_bias_correction say)."""
  legacy = weight_averages.Rule(bias_correction=False, recorded=False)
  assert weight_averages.check_resume(averaged_checkpoint, 0.99) == legacy
  assert weight_averages.check_resume(averaged_checkpoint, 0.5, False) == legacy


def test_a_resume_keeps_the_recorded_warmup(tmp_path):
  """--ema_warmup is recorded only when on: a checkpoint without the record (every one
  written before it existed) has none, and a changed choice is refused either way."""
  warm = recorded_checkpoint(tmp_path / "warm", 0.999, 1.0, warmup=1.0)
  corrected = recorded_checkpoint(tmp_path / "corrected", 0.999, 1.0)
  assert weight_averages.check_resume(warm, 0.999, True, True) == WARMUP
  assert weight_averages.check_resume(corrected, 0.999, True, False).warmup is False
  # Not given (None): the checkpoint's rule, whichever it is.
  assert weight_averages.check_resume(warm, 0.999, True, None) == WARMUP
  assert weight_averages.check_resume(corrected, 0.999, True, None) == (
      weight_averages.BIAS_CORRECTED)
  with pytest.raises(UsageError, match=r"^--ema_warmup=false: .*warm/model.ckpt kept its "
                     r"weight averages with --ema_warmup=true\. Resume with it"):
    weight_averages.check_resume(warm, 0.999, True, False)
  with pytest.raises(UsageError, match=r"^--ema_warmup=true: .*corrected/model.ckpt kept its "
                     r"weight averages with --ema_warmup=false\. Resume with it"):
    weight_averages.check_resume(corrected, 0.999, True, True)


def test_a_checkpoint_from_before_the_record_refuses_warmup(averaged_checkpoint):
  with pytest.raises(UsageError, match=r"^--ema_warmup: .*ema/model.ckpt kept its weight "
                     r"averages without warmup \(it was written before the rule was "
                     r"recorded\)\. Resume without --ema_warmup"):
    weight_averages.check_resume(averaged_checkpoint, 0.999, True, True)


def test_a_resume_keeps_the_recorded_decay_and_rule(tmp_path):
  corrected = recorded_checkpoint(tmp_path / "corrected", 0.999, 1.0)
  from_start = recorded_checkpoint(tmp_path / "from_start", 0.99, 0.0)
  assert weight_averages.check_resume(corrected, 0.999) == weight_averages.BIAS_CORRECTED
  assert weight_averages.check_resume(from_start, 0.99, False) == FROM_START
  with pytest.raises(UsageError, match=r"^--ema_decay=0.99: .*corrected/model.ckpt kept its "
                     r"weight averages with --ema_decay=0.999, and their bias correction holds "
                     r"for that D only. Resume with --ema_decay=0.999, or train into a new "
                     r"--output_dir.$"):
    weight_averages.check_resume(corrected, 0.99)
  with pytest.raises(UsageError, match=r"^--ema_bias_correction=false: .*corrected/model.ckpt "
                     r"kept its weight averages with --ema_bias_correction=true\. Resume"):
    weight_averages.check_resume(corrected, 0.999, False)
  with pytest.raises(UsageError, match=r"^--ema_bias_correction=true: .*from_start/model.ckpt "
                     r"kept its weight averages with --ema_bias_correction=false\. Resume"):
    weight_averages.check_resume(from_start, 0.99)


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


@pytest.mark.parametrize("warmup", [False, True], ids=["no_warmup", "warmup"])
def test_a_resumed_run_continues_the_averages_bit_exactly(tmp_path, warmup):
  """Killed after saving step 2 of 5 and resumed: the same bits, averages included."""
  record_file = str(tmp_path / "train.tf_record")
  write_records(record_file, random_batch(np.random.RandomState(2), 24))

  def train(name):
    return runner.train(run_config(tmp_path / name, 5, ema_decay=DECAY, ema_warmup=warmup),
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
  assert a[weight_averages.RECORDED_DECAY] == np.float32(DECAY)
  assert a[weight_averages.RECORDED_CORRECTION] == 1.0
  assert (weight_averages.RECORDED_WARMUP in a) == warmup
  # The resumed run counted on from t = 3: update 5 moved the averages by r_5.
  four = all_values(os.path.join(resumed_dir, "model.ckpt-4"))
  decays = step_decays(WARMUP if warmup else weight_averages.BIAS_CORRECTED, DECAY, 5)
  rate = (1 - decays[-1]) / (1 - np.prod(decays))
  for name in ("output_weights", "bert/pooler/dense/kernel"):
    average = weight_averages.average_name(name)
    np.testing.assert_allclose(b[average], four[average] * (1 - rate) + b[name] * rate,
                               rtol=1e-5, atol=1e-7, err_msg=name)


def test_a_checkpoint_from_before_the_record_resumes_by_its_rule(tmp_path):
  """A run as before the correction (no record), stopped after step 2 of 5 and resumed with
  the rule check_resume gives: bit for bit the straight run, still without a record."""
  record_file = str(tmp_path / "train.tf_record")
  write_records(record_file, random_batch(np.random.RandomState(2), 24))

  def train(name, **rule):
    return runner.train(run_config(tmp_path / name, 5, ema_decay=DECAY, **rule),
                        classifier_model_fn(), train_dataset_fn(record_file, 8))

  straight = all_values(train("straight", ema_bias_correction=False, ema_rule_recorded=False,
                              ema_warmup=False))
  assert weight_averages.RECORDED_DECAY not in straight
  resumed_dir = str(tmp_path / "resumed")
  shutil.copytree(str(tmp_path / "straight"), resumed_dir)
  for path in glob.glob(os.path.join(resumed_dir, "model.ckpt-[45]*")):
    os.remove(path)
  stopped = os.path.join(resumed_dir, "model.ckpt-2")
  tf.train.update_checkpoint_state(resumed_dir, stopped)
  bias_correction, recorded, warmup = weight_averages.check_resume(stopped, DECAY)
  resumed = all_values(train("resumed", ema_bias_correction=bias_correction,
                             ema_rule_recorded=recorded, ema_warmup=warmup))
  assert set(resumed) == set(straight)
  for name in straight:
    np.testing.assert_array_equal(resumed[name], straight[name], err_msg=name)


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
