# coding=utf-8
"""Mixed precision and XLA: bf16 training follows fp32, fp16's dynamic loss scaling skips
overflowing steps, the towers compile with XLA, and a precision the platform lacks is
refused with one line."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu import errors
from bert_mgpu.training import mixed_precision
from bert_mgpu.training import run_settings
import multigpu
import optimization
from tiny_model import batch_placeholders, classifier_model_fn, cpu_plan, random_batch

TF2 = tf.__version__.startswith("2")


def train_losses(precision, steps=32, use_xla=False, learning_rate=3e-3):
  """Trains the tiny classifier on 2 towers over fixed batches; returns the step losses,
  the dtypes of its matmuls and the variables' dtypes and names."""
  rng = np.random.RandomState(0)
  batches = [random_batch(rng, 8) for _ in range(4)]
  plan = cpu_plan(2)
  with tf.Graph().as_default():
    tf.set_random_seed(1)
    placeholders = batch_placeholders(batches[0])
    ops = multigpu.build_training(plan, classifier_model_fn(), placeholders, learning_rate,
                                  1000, 0, precision=precision, use_xla=use_xla)
    matmul_dtypes = {op.outputs[0].dtype.name for op in tf.get_default_graph().get_operations()
                     if op.type in ("MatMul", "BatchMatMulV2", "BatchMatMul")}
    variables = {v.op.name: v.dtype.base_dtype.name for v in tf.global_variables()}
    losses = []
    with tf.Session(config=plan.session_config()) as sess:
      sess.run(tf.global_variables_initializer())
      for step in range(steps):
        batch = batches[step % len(batches)]
        losses.append(sess.run([ops.train_op, ops.loss],
                               {placeholders[k]: v for k, v in batch.items()})[1])
  return np.array(losses), matmul_dtypes, variables


@pytest.mark.skipif(not TF2, reason="bf16 needs TF 2.x (TF 1.15 is refused, tested below)")
def test_bf16_training_follows_fp32():
  fp32, fp32_matmuls, fp32_variables = train_losses("fp32")
  bf16, bf16_matmuls, bf16_variables = train_losses("bf16")
  assert fp32_matmuls == {"float32"} and bf16_matmuls == {"bfloat16"}
  # Master weights stay float32 under their plain names: checkpoints do not change.
  assert bf16_variables == fp32_variables
  assert {dtype for name, dtype in bf16_variables.items() if name != "global_step"} == {
      "float32"}
  # Training works in bf16: the loss falls as far as fp32's ...
  assert fp32[-4:].mean() < 0.5 * fp32[:4].mean()
  assert bf16[-4:].mean() < 0.5 * bf16[:4].mean()
  # ... and its curve follows fp32's: the mean loss of every pass over the 4 batches is
  # within 0.05 of fp32's (single steps differ more: bf16 keeps 8 bits of mantissa).
  passes = lambda losses: losses.reshape(-1, 4).mean(axis=1)
  assert np.max(np.abs(passes(bf16) - passes(fp32))) < 0.05, (passes(bf16), passes(fp32))
  assert np.max(np.abs(bf16 - fp32)) > 0  # it really computed in another precision


def loss_scale_graph(inject_inf):
  """A float32 variable trained by apply_gradients(skip_non_finite) under a loss scale,
  with a gradient that is inf when `inject_inf` is fed True."""
  global_step = tf.train.get_or_create_global_step()
  weight = tf.get_variable("weight", [3], initializer=tf.ones_initializer(), use_resource=True)
  loss_scale = mixed_precision.DynamicLossScale(initial_scale=8.0, growth_interval=2)
  scaled_loss = loss_scale.scale_loss(tf.reduce_sum(weight * weight))
  grad = tf.gradients(scaled_loss, [weight])[0]
  grad = tf.where_v2(inject_inf, grad * np.inf, grad)
  unscaled = loss_scale.unscale(grad)
  train_op, global_norm = optimization.apply_gradients([(unscaled, weight)], 0.1, global_step,
                                                       skip_non_finite=True)
  with tf.control_dependencies([train_op]):
    train_op = loss_scale.update(tf.math.is_finite(global_norm))
  return train_op, weight, global_step, loss_scale, unscaled


def test_fp16_loss_scaling_skips_an_overflowing_step_and_adapts_the_scale():
  with tf.Graph().as_default():
    inject_inf = tf.placeholder(tf.bool, [])
    train_op, weight, global_step, loss_scale, unscaled = loss_scale_graph(inject_inf)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      # The unscaled gradient is the true one: d/dw sum(w^2) = 2w.
      np.testing.assert_allclose(sess.run(unscaled, {inject_inf: False}), [2.0, 2.0, 2.0])
      sess.run(train_op, {inject_inf: False})
      after_good = sess.run(weight)
      assert sess.run(global_step) == 1 and sess.run(loss_scale.scale) == 8.0
      sess.run(train_op, {inject_inf: True})  # inf gradient: skipped, scale halved
      np.testing.assert_array_equal(sess.run(weight), after_good)
      assert sess.run(global_step) == 1
      assert sess.run(loss_scale.scale) == 4.0 and sess.run(loss_scale.good_steps) == 0
      slots = [v for v in tf.global_variables() if "adam" in v.op.name]
      assert all(np.all(np.isfinite(sess.run(slot))) for slot in slots) and slots
      for _ in range(2):  # growth_interval good steps double the scale
        sess.run(train_op, {inject_inf: False})
      assert sess.run(global_step) == 3 and sess.run(loss_scale.scale) == 8.0
      # Every attempt counts for the data position, skipped or not.
      assert sess.run(loss_scale.steps_attempted) == 4
      for _ in range(10):  # repeated overflows never take the scale below its minimum
        sess.run(train_op, {inject_inf: True})
      assert sess.run(loss_scale.scale) == 1.0 and sess.run(global_step) == 3


def test_fp16_training_builds_and_runs_with_loss_scaling():
  # On this CPU float16 is emulated: a correctness check, not a speed one.
  fp32, _, _ = train_losses("fp32", steps=8)
  fp16, matmuls, variables = train_losses("fp16", steps=8)
  assert matmuls == {"float16"}
  assert "loss_scaling/scale" in variables and "loss_scaling/steps_attempted" in variables
  assert np.all(np.isfinite(fp16)) and np.max(np.abs(fp16 - fp32)) < 0.05


def xla_compile_attr(op):
  try:
    return op.get_attr("_XlaCompile")
  except ValueError:
    return False


def test_towers_compile_with_xla():
  rng = np.random.RandomState(0)
  plan = cpu_plan(2)
  with tf.Graph().as_default():
    features = {k: tf.constant(v) for k, v in random_batch(rng, 8).items()}
    ops = multigpu.build_training(plan, classifier_model_fn(), features, 1e-3, 100, 0,
                                  use_xla=True)
    marked = [op for op in tf.get_default_graph().get_operations()
              if op.name.startswith("tower_") and xla_compile_attr(op)]
    assert marked, "no tower op marked for XLA"
    metadata = tf.RunMetadata()
    with tf.Session(config=plan.session_config()) as sess:
      sess.run(tf.global_variables_initializer())
      sess.run([ops.train_op, ops.loss], options=tf.RunOptions(
          trace_level=tf.RunOptions.FULL_TRACE), run_metadata=metadata)
  ran = {node.node_name for device in metadata.step_stats.dev_stats
         for node in device.node_stats}
  assert any(name.startswith("cluster_") for name in ran), sorted(ran)[:20]


def test_a_precision_the_platform_lacks_is_refused():
  with pytest.raises(errors.UsageError, match=r"^--precision=fp16 needs a GPU"):
    run_settings.check_precision("fp16", cpu_plan(1))
  if TF2:
    run_settings.check_precision("bf16", cpu_plan(1))
  else:
    with pytest.raises(errors.UsageError, match=r"^--precision=bf16 needs TensorFlow 2\.x"):
      run_settings.check_precision("bf16", cpu_plan(1))
