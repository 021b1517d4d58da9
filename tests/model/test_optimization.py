# coding=utf-8
"""Tests for optimization.py against straightforward NumPy (float64) references."""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function


import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import optimization  # pylint: disable=g-import-not-at-top
# "adamw" with adam_bias_correction=True, as the tests parametrize it.
from tiny_model import ADAMW_BIAS_CORRECTED as BIAS_CORRECTED_ADAMW  # pylint: disable=g-import-not-at-top

RTOL = 1e-5
BETA_1 = 0.9
BETA_2 = 0.999
EPSILON = 1e-6
NO_DECAY_PATTERNS = ("LayerNorm", "layer_norm", "bias")

# name -> shape; "bias" and "LayerNorm"/"layer_norm" names get no weight decay.
VARIABLE_SHAPES = [
    ("dense/kernel", (3, 4)),
    ("dense/bias", (4,)),
    ("encoder/LayerNorm/gamma", (4,)),
    ("encoder/layer_norm/beta", (4,)),
    ("cls/output_bias", (2,)),  # starts at 0: LAMB's ||p|| = 0 case (ratio 1)
]


# ----------------------------------------------------------------------------
# NumPy references (written from the formulas, independent of the TF code).
# ----------------------------------------------------------------------------


def np_learning_rate(step, init_lr, num_train_steps, num_warmup_steps):
  """Warmup init_lr*step/warmup, else init_lr*(1 - min(step, N)/N)."""
  if num_warmup_steps > 0 and step < num_warmup_steps:
    return init_lr * step / num_warmup_steps
  return init_lr * (1.0 - min(step, num_train_steps) / num_train_steps)


def np_clip(grads, clip_norm):
  """Returns (clipped grads, pre-clip global norm), like tf.clip_by_global_norm."""
  norm = np.sqrt(sum(np.sum(np.square(g)) for g in grads))
  if clip_norm is None:
    return list(grads), norm
  scale = clip_norm / max(norm, clip_norm)
  return [g * scale for g in grads], norm


def np_rho(t):
  rho_inf = 2.0 / (1.0 - BETA_2) - 1.0
  return rho_inf - 2.0 * t * BETA_2 ** t / (1.0 - BETA_2 ** t), rho_inf


def np_torch_adamw(param, m, v, grad, lr, t, weight_decay_rate):
  """One step of torch.optim.AdamW (its single-tensor loop, amsgrad off) in float64.
  Returns (param, m, v)."""
  param = param * (1.0 - lr * weight_decay_rate)
  m = BETA_1 * m + (1.0 - BETA_1) * grad
  v = BETA_2 * v + (1.0 - BETA_2) * grad * grad
  bias_correction1 = 1.0 - BETA_1 ** t
  bias_correction2 = 1.0 - BETA_2 ** t
  denom = np.sqrt(v) / np.sqrt(bias_correction2) + EPSILON
  return param - (lr / bias_correction1) * m / denom, m, v


def np_update(optimizer, param, m, v, grad, lr, t, weight_decay_rate):
  """One step of `optimizer` in float64. Returns (param, m, v)."""
  if optimizer == BIAS_CORRECTED_ADAMW:
    return np_torch_adamw(param, m, v, grad, lr, t, weight_decay_rate)
  m = BETA_1 * m + (1.0 - BETA_1) * grad
  v = BETA_2 * v + (1.0 - BETA_2) * grad * grad
  if optimizer == "adamw":
    update = m / (np.sqrt(v) + EPSILON)
  elif optimizer == "radam":
    m_hat = m / (1.0 - BETA_1 ** t)
    v_hat = v / (1.0 - BETA_2 ** t)
    rho_t, rho_inf = np_rho(t)
    if rho_t >= 5.0:
      r_t = np.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf /
                    ((rho_inf - 4) * (rho_inf - 2) * rho_t))
      update = r_t * m_hat / (np.sqrt(v_hat) + EPSILON)
    else:
      update = m_hat
  elif optimizer == "lamb":
    m_hat = m / (1.0 - BETA_1 ** t)
    v_hat = v / (1.0 - BETA_2 ** t)
    update = m_hat / (np.sqrt(v_hat) + EPSILON)
  else:
    raise ValueError(optimizer)
  update = update + weight_decay_rate * param
  if optimizer == "lamb":
    param_norm = np.linalg.norm(param)
    update_norm = np.linalg.norm(update)
    ratio = param_norm / update_norm if param_norm > 0 and update_norm > 0 else 1.0
    update = ratio * update
  return param - lr * update, m, v


def assert_close(actual, expected, what):
  """Relative 1e-5, plus an absolute floor of 1e-6 x the array's largest value.

  The floor covers elements that are sums of nearly cancelling terms (e.g.
  m = 0.9 m + 0.1 g close to 0), whose float32 error is relative to the terms.
  """
  floor = 1e-6 * float(np.max(np.abs(expected)))
  np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=floor, err_msg=what)


# ----------------------------------------------------------------------------
# Learning rate
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("num_warmup_steps", [0, 4])
def test_learning_rate_schedule_matches_reference(num_warmup_steps):
  init_lr, num_train_steps = 0.1, 10
  steps = [0, 1, 2, 4, 5, 7, 9, 10, 13, 100]
  with tf.Graph().as_default():
    step_ph = tf.placeholder(tf.int64, [])
    lr = optimization.learning_rate_schedule(init_lr, num_train_steps, num_warmup_steps,
                                             global_step=step_ph)
    assert lr.dtype == tf.float32
    with tf.Session() as sess:
      got = [sess.run(lr, {step_ph: s}) for s in steps]
  want = [np_learning_rate(s, init_lr, num_train_steps, num_warmup_steps) for s in steps]
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
  # Spot values written out, so the reference itself is checked too.
  if num_warmup_steps == 4:
    np.testing.assert_allclose(got[:4], [0.0, 0.025, 0.05, 0.06], rtol=1e-6)
  else:
    np.testing.assert_allclose(got[:2], [0.1, 0.09], rtol=1e-6)
  assert got[-3:] == [0.0, 0.0, 0.0]  # at and past the end


def test_learning_rate_schedule_uses_global_step_and_validates():
  with tf.Graph().as_default():
    lr = optimization.learning_rate_schedule(1.0, 4, 0)
    global_step = tf.train.get_global_step()
    assert global_step is not None
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      sess.run(global_step.assign(1))
      np.testing.assert_allclose(sess.run(lr), 0.75, rtol=1e-6)
    with pytest.raises(ValueError, match="num_train_steps"):
      optimization.learning_rate_schedule(1.0, 0, 0, global_step)
    with pytest.raises(ValueError, match="num_warmup_steps"):
      optimization.learning_rate_schedule(1.0, 10, -1, global_step)


# ----------------------------------------------------------------------------
# The three optimizers against NumPy, through apply_gradients
# ----------------------------------------------------------------------------


def _make_variables(rng, use_resource):
  initial = {}
  variables = {}
  with tf.variable_scope("model", use_resource=use_resource):
    for name, shape in VARIABLE_SHAPES:
      value = rng.uniform(0.5, 1.5, size=shape) * rng.choice([-1.0, 1.0], size=shape)
      if name.endswith("output_bias"):
        value = np.zeros(shape)
      initial["model/" + name] = value.astype(np.float32)
      variables["model/" + name] = tf.get_variable(
          name, shape, initializer=tf.constant_initializer(value.astype(np.float32)))
  return initial, variables


def _optimizer_argument(optimizer, learning_rate, weight_decay_rate):
  """What apply_gradients takes for a parametrized name: the name, or the bias-corrected
  AdamW object."""
  if optimizer == BIAS_CORRECTED_ADAMW:
    return optimization.make_optimizer("adamw", learning_rate, weight_decay_rate,
                                       adam_bias_correction=True)
  return optimizer


# skip_non_finite: the elementwise update under an fp16 skip condition; without it, resource
# variables take AdamW's fused kernel and ref variables the elementwise update.
# Per-variable learning-rate factors (layer-wise decay): the reference multiplies the
# schedule's rate by them; one variable keeps 1.
LEARNING_RATE_SCALES = {"model/dense/kernel": 0.25, "model/dense/bias": 0.5,
                        "model/encoder/LayerNorm/gamma": 0.125, "model/cls/output_bias": 0.75}


@pytest.mark.parametrize("use_resource, skip_non_finite, scaled", [
    (True, False, False), (False, False, False), (True, True, False), (True, False, True),
    (False, False, True), (True, True, True)])
@pytest.mark.parametrize("optimizer", ["adamw", "radam", "lamb", BIAS_CORRECTED_ADAMW])
def test_optimizer_matches_numpy(optimizer, use_resource, skip_non_finite, scaled):
  num_steps = 8  # RAdam: steps 1-5 momentum only, 6-8 rectified
  init_lr, num_train_steps, num_warmup_steps = 0.05, 10, 3
  weight_decay_rate = 0.1
  rng = np.random.RandomState(1234)

  rectified = [np_rho(t)[0] >= 5.0 for t in range(1, num_steps + 1)]
  assert any(rectified) and not all(rectified)

  with tf.Graph().as_default():
    initial, variables = _make_variables(rng, use_resource)
    names = sorted(variables)
    global_step = tf.train.get_or_create_global_step()
    lr = optimization.learning_rate_schedule(init_lr, num_train_steps, num_warmup_steps)
    grad_phs = {n: tf.placeholder(tf.float32, variables[n].shape) for n in names}
    train_op, global_norm = optimization.apply_gradients(
        [(grad_phs[n], variables[n]) for n in names], lr, global_step,
        optimizer=_optimizer_argument(optimizer, lr, weight_decay_rate), clip_norm=1.0,
        weight_decay_rate=weight_decay_rate, skip_non_finite=skip_non_finite,
        learning_rate_scales=LEARNING_RATE_SCALES if scaled else None)
    slots = {n: (tf.global_variables(n + "/adam_m")[0], tf.global_variables(n + "/adam_v")[0])
             for n in names}

    params = {n: initial[n].astype(np.float64) for n in names}
    ms = {n: np.zeros_like(params[n]) for n in names}
    vs = {n: np.zeros_like(params[n]) for n in names}
    applied = 0  # updates applied: the step number t is applied + 1
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      for step in range(num_steps):
        # Alternate small and large gradients: both unclipped and clipped steps.
        scale = 0.05 if step % 2 == 0 else 2.0
        grads = {n: (rng.randn(*params[n].shape) * scale).astype(np.float32) for n in names}
        overflow = skip_non_finite and step == 2  # an fp16 overflow: the update is skipped
        if overflow:
          grads[names[0]].flat[0] = np.inf
        _, norm_value = sess.run([train_op, global_norm],
                                 {grad_phs[n]: grads[n] for n in names})
        if overflow:
          assert not np.isfinite(norm_value)
        else:
          clipped, want_norm = np_clip([grads[n].astype(np.float64) for n in names], 1.0)
          np.testing.assert_allclose(norm_value, want_norm, rtol=RTOL)
          lr_value = np_learning_rate(applied, init_lr, num_train_steps, num_warmup_steps)
          for n, grad in zip(names, clipped):
            decay = 0.0 if any(p in n for p in NO_DECAY_PATTERNS) else weight_decay_rate
            var_lr = lr_value * (LEARNING_RATE_SCALES.get(n, 1.0) if scaled else 1.0)
            params[n], ms[n], vs[n] = np_update(optimizer, params[n], ms[n], vs[n], grad,
                                                var_lr, applied + 1, decay)
          applied += 1

        got = sess.run({n: (variables[n], slots[n][0], slots[n][1]) for n in names})
        for n in names:
          where = "%s step %d %s" % (optimizer, step + 1, n)
          assert_close(got[n][0], params[n], "param " + where)
          assert_close(got[n][1], ms[n], "adam_m " + where)
          assert_close(got[n][2], vs[n], "adam_v " + where)
      assert sess.run(global_step) == applied == num_steps - int(skip_non_finite)


def test_radam_rectifier_is_accurate_over_many_steps():
  """r_t (0 while not rectified) and bias corrections against float64 NumPy.

  Near the threshold r_t is tiny and its effect on the parameters is below the
  1e-5 tolerance of the test above, so it is checked directly: computing
  rho_t in float32 would be off by ~0.5% at t = 5-7.
  """
  steps = [1, 4, 5, 6, 7, 10, 50, 1000, 100000]
  with tf.Graph().as_default():
    step_ph = tf.placeholder(tf.int64, [])
    constants = optimization.RAdamOptimizer(0.1)._step_constants(step_ph)  # pylint: disable=protected-access
    with tf.Session() as sess:
      got = [sess.run(constants, {step_ph: t - 1}) for t in steps]
  for t, values in zip(steps, got):
    rho_t, rho_inf = np_rho(t)
    if rho_t >= 5.0:
      r_t = np.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
      want_adaptive, want_momentum = r_t, 0.0
    else:
      want_adaptive, want_momentum = 0.0, 1.0
    np.testing.assert_allclose(values["adaptive_scale"], want_adaptive, rtol=1e-6, err_msg=str(t))
    assert values["momentum_scale"] == want_momentum, t
    np.testing.assert_allclose(values["m_correction"], 1.0 / (1.0 - BETA_1 ** t), rtol=1e-6)
    np.testing.assert_allclose(values["v_correction"], 1.0 / (1.0 - BETA_2 ** t), rtol=1e-6)
  assert [v["momentum_scale"] for v in got[:4]] == [1.0, 1.0, 1.0, 0.0]  # t = 6 is first


def test_bias_corrected_adamw_step_constants_match_float64():
  """The step scale sqrt(1 - b2^t) / (1 - b1^t) and epsilon * sqrt(1 - b2^t), over t."""
  steps = [1, 2, 10, 100, 1000, 100000]
  with tf.Graph().as_default():
    step_ph = tf.placeholder(tf.int64, [])
    optimizer = optimization.make_optimizer("adamw", 0.1, adam_bias_correction=True)
    constants = optimizer._step_constants(step_ph)  # pylint: disable=protected-access
    with tf.Session() as sess:
      got = [sess.run(constants, {step_ph: t - 1}) for t in steps]
  for t, values in zip(steps, got):
    root = np.sqrt(1.0 - BETA_2 ** t)
    np.testing.assert_allclose(values["step_scale"], root / (1.0 - BETA_1 ** t), rtol=1e-6,
                               err_msg=str(t))
    np.testing.assert_allclose(values["scaled_epsilon"], EPSILON * root, rtol=1e-6, err_msg=str(t))
  # Google's uncorrected update is 1 / step_scale times this one: the figures.
  np.testing.assert_allclose([1.0 / got[i]["step_scale"] for i in (0, 2, 3, 4)],
                             [3.1623, 6.5279, 3.2408, 1.2576], rtol=1e-4)


@pytest.mark.parametrize("use_resource", [True, False])
def test_bias_corrected_adamw_first_step_moves_each_weight_by_the_learning_rate(use_resource):
  """Adam's first corrected step is lr * g / (|g| + eps): about lr against the gradient's
  sign, whatever its size (Google's uncorrected one is sqrt(1000) / 10 = 3.16 times it)."""
  lr = 0.01
  grad_values = np.array([[3.0, -0.02], [0.5, -7.0]], np.float32)
  with tf.Graph().as_default():
    with tf.variable_scope("model", use_resource=use_resource):
      var = tf.get_variable("w", [2, 2], initializer=tf.ones_initializer())
    global_step = tf.train.get_or_create_global_step()
    update = optimization.make_optimizer(
        "adamw", lr, weight_decay_rate=0.0, adam_bias_correction=True).apply_gradients(
            [(tf.constant(grad_values), var)], global_step)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      sess.run(update)
      moved = 1.0 - sess.run(var)
  want = lr * grad_values / (np.abs(grad_values) + EPSILON)
  np.testing.assert_allclose(moved, want, rtol=1e-5)
  np.testing.assert_allclose(np.abs(moved), lr, rtol=1e-4)


@pytest.mark.parametrize("use_resource", [True, False])
def test_bias_correction_counts_steps_from_the_global_step(use_resource):
  """A run resumed at global step 41 applies step t = 42 (torch's count), not t = 1."""
  start_step, num_steps, lr, weight_decay_rate = 41, 3, 0.02, 0.1
  rng = np.random.RandomState(77)
  with tf.Graph().as_default():
    initial, variables = _make_variables(rng, use_resource)
    names = sorted(variables)
    global_step = tf.train.get_or_create_global_step()
    grad_phs = {n: tf.placeholder(tf.float32, variables[n].shape) for n in names}
    train_op, _ = optimization.apply_gradients(
        [(grad_phs[n], variables[n]) for n in names], lr, global_step,
        optimizer=_optimizer_argument(BIAS_CORRECTED_ADAMW, lr, weight_decay_rate),
        clip_norm=None)
    slots = {n: [tf.global_variables(n + suffix)[0] for suffix in ("/adam_m", "/adam_v")]
             for n in names}
    # Moments as a run that stopped at step 41 left them.
    ms = {n: rng.randn(*initial[n].shape) * 0.1 for n in names}
    vs = {n: rng.rand(*initial[n].shape) * 0.01 for n in names}
    params = {n: initial[n].astype(np.float64) for n in names}
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      global_step.load(start_step, sess)
      for n in names:
        slots[n][0].load(ms[n].astype(np.float32), sess)
        slots[n][1].load(vs[n].astype(np.float32), sess)
      for step in range(num_steps):
        grads = {n: rng.randn(*params[n].shape).astype(np.float32) for n in names}
        sess.run(train_op, {grad_phs[n]: grads[n] for n in names})
        for n in names:
          decay = 0.0 if any(p in n for p in NO_DECAY_PATTERNS) else weight_decay_rate
          params[n], ms[n], vs[n] = np_torch_adamw(params[n], ms[n], vs[n], grads[n], lr,
                                                   start_step + step + 1, decay)
      got = sess.run(variables)
  for n in names:
    # Relative to the steps taken (each about lr): the fused kernel reads the loaded adam_m as
    # k m (AdamWeightDecayOptimizer._fused_update), 6.4e-6 off, and a weight that three steps
    # bring near 0 shows it relative to itself.
    np.testing.assert_allclose(got[n], params[n], rtol=1e-5, atol=1e-5 * lr * num_steps,
                               err_msg=n)


@pytest.mark.parametrize("optimizer", ["radam", "lamb"])
def test_adam_bias_correction_is_refused_for_optimizers_that_correct_already(optimizer):
  with pytest.raises(ValueError, match="--adam_bias_correction is for --optimizer=adamw"):
    optimization.make_optimizer(optimizer, 0.1, adam_bias_correction=True)
  with tf.Graph().as_default():
    with pytest.raises(ValueError, match="--optimizer=%s corrects" % optimizer):
      optimization.create_optimizer(tf.constant(1.0), 0.1, 10, 1, optimizer=optimizer,
                                    adam_bias_correction=True)


def test_exclusions_really_skip_weight_decay():
  """With zero gradients, AdamW changes only the decayed kernel (by lr*wd*p)."""
  with tf.Graph().as_default():
    _, variables = _make_variables(np.random.RandomState(0), use_resource=True)
    global_step = tf.train.get_or_create_global_step()
    opt = optimization.make_optimizer("adamw", 0.5, weight_decay_rate=0.1)
    update = opt.apply_gradients(
        [(tf.zeros_like(var), var) for var in variables.values()], global_step)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      before = sess.run(variables)
      sess.run(update)
      after = sess.run(variables)
      assert sess.run(global_step) == 0  # the optimizer object never touches it
  for name in variables:
    if name == "model/dense/kernel":
      assert_close(after[name], before[name] * (1.0 - 0.5 * 0.1), name)
    else:
      np.testing.assert_array_equal(after[name], before[name], err_msg=name)


# ----------------------------------------------------------------------------
# Clipping, IndexedSlices, None gradients, global step, ordering
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("clip_norm", [1.0, None])
def test_clipping_scales_large_gradient_and_returns_preclip_norm(clip_norm):
  grad_value = np.array([3.0, 4.0, 0.0], np.float32)  # norm 5
  with tf.Graph().as_default():
    with tf.variable_scope("m", use_resource=True):
      var = tf.get_variable("w", [3], initializer=tf.ones_initializer())
    global_step = tf.train.get_or_create_global_step()
    train_op, global_norm = optimization.apply_gradients(
        [(tf.constant(grad_value), var)], 0.0, global_step, clip_norm=clip_norm)
    m_slot = tf.global_variables("m/w/adam_m")[0]
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      _, norm_value = sess.run([train_op, global_norm])
      m_value = sess.run(m_slot)
  np.testing.assert_allclose(norm_value, 5.0, rtol=RTOL)
  # After one step adam_m = (1 - beta_1) * the gradient actually applied.
  applied = m_value / (1.0 - BETA_1)
  want = grad_value / 5.0 if clip_norm is not None else grad_value
  np.testing.assert_allclose(applied, want, rtol=RTOL)
  if clip_norm is not None:
    np.testing.assert_allclose(np.linalg.norm(applied), 1.0, rtol=RTOL)


def test_small_gradient_is_not_clipped():
  grad_value = np.array([0.3, -0.4], np.float32)
  with tf.Graph().as_default():
    var = tf.get_variable("w", [2], initializer=tf.ones_initializer(), use_resource=True)
    global_step = tf.train.get_or_create_global_step()
    train_op, _ = optimization.apply_gradients([(tf.constant(grad_value), var)], 0.0,
                                               global_step)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      sess.run(train_op)
      m_value = sess.run(tf.global_variables("w/adam_m")[0])
  np.testing.assert_allclose(m_value / (1.0 - BETA_1), grad_value, rtol=RTOL)


def _run_sparse_or_dense(optimizer, sparse, grads_per_step):
  """Runs two steps on an embedding table + a kernel; returns final values."""
  with tf.Graph().as_default():
    with tf.variable_scope("bert", use_resource=True):
      table = tf.get_variable("embeddings/word_embeddings", [5, 3],
                              initializer=tf.constant_initializer(
                                  np.arange(15, dtype=np.float32).reshape(5, 3) / 7.0 - 1.0))
      kernel = tf.get_variable("dense/kernel", [3],
                               initializer=tf.constant_initializer([0.5, -1.0, 2.0]))
    global_step = tf.train.get_or_create_global_step()
    lr = optimization.learning_rate_schedule(0.1, 10, 1)
    values_ph = tf.placeholder(tf.float32, [None, 3])
    indices_ph = tf.placeholder(tf.int32, [None])
    dense_ph = tf.placeholder(tf.float32, [5, 3])
    kernel_grad = tf.placeholder(tf.float32, [3])
    if sparse:
      # Rows from two "towers", concatenated as the tower builder does.
      table_grad = tf.IndexedSlices(values_ph, indices_ph, tf.constant([5, 3]))
    else:
      table_grad = dense_ph
    train_op, _ = optimization.apply_gradients(
        [(table_grad, table), (kernel_grad, kernel)], lr, global_step, optimizer=optimizer)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      for values, indices, kernel_value in grads_per_step:
        if sparse:
          feed = {values_ph: values, indices_ph: indices}
        else:
          dense = np.zeros([5, 3], np.float32)
          np.add.at(dense, indices, values)
          feed = {dense_ph: dense}
        feed[kernel_grad] = kernel_value
        sess.run(train_op, feed)
      return sess.run([table, kernel] + tf.global_variables("bert/embeddings/"))


@pytest.mark.parametrize("optimizer", ["adamw", "radam", "lamb"])
def test_indexed_slices_with_duplicates_equal_dense(optimizer):
  rng = np.random.RandomState(7)
  grads_per_step = []
  for scale in (1.5, 0.2):  # first step is clipped, second is not
    # Row 1 appears twice and row 3 twice; rows 2 and 4 get no gradient.
    indices = np.array([1, 3, 0, 1, 3], np.int32)
    values = (rng.randn(5, 3) * scale).astype(np.float32)
    grads_per_step.append((values, indices, (rng.randn(3) * scale).astype(np.float32)))
  sparse = _run_sparse_or_dense(optimizer, True, grads_per_step)
  dense = _run_sparse_or_dense(optimizer, False, grads_per_step)
  assert len(sparse) == 5  # table, kernel, table again, table/adam_m, table/adam_v
  for got, want in zip(sparse, dense):
    np.testing.assert_array_equal(got, want)


def test_none_gradients_are_dropped_and_global_step_counts_runs():
  with tf.Graph().as_default():
    used = tf.get_variable("used", [2], initializer=tf.ones_initializer(), use_resource=True)
    unused = tf.get_variable("unused", [2], initializer=tf.ones_initializer(), use_resource=True)
    global_step = tf.train.get_or_create_global_step()
    train_op, _ = optimization.apply_gradients(
        [(tf.constant([0.1, 0.2]), used), (None, unused)], 0.1, global_step)
    assert not tf.global_variables("unused/")  # no slots for a variable without gradient
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      for _ in range(5):
        sess.run(train_op)
      assert sess.run(global_step) == 5
      np.testing.assert_array_equal(sess.run(unused), [1.0, 1.0])
      assert not np.allclose(sess.run(used), [1.0, 1.0])
    with pytest.raises(ValueError, match="no variable has a gradient"):
      optimization.apply_gradients([(None, used)], 0.1, global_step)


def _ancestors(op):
  """All ops `op` depends on, through data inputs and control inputs."""
  seen = set()
  stack = [op]
  while stack:
    current = stack.pop()
    for parent in [t.op for t in current.inputs] + list(current.control_inputs):
      if parent not in seen:
        seen.add(parent)
        stack.append(parent)
  return seen


def test_update_waits_for_every_gradient_and_step_increments_after():
  with tf.Graph().as_default():
    a = tf.get_variable("a", [2], initializer=tf.ones_initializer(), use_resource=True)
    b = tf.get_variable("b", [2], initializer=tf.ones_initializer(), use_resource=True)
    grad_a = tf.placeholder(tf.float32, [2], name="grad_a")
    grad_b = tf.placeholder(tf.float32, [2], name="grad_b")
    global_step = tf.train.get_or_create_global_step()
    # No clipping: then nothing but the explicit control dependency links a's
    # update to b's gradient.
    train_op, _ = optimization.apply_gradients(
        [(grad_a, a), (grad_b, b)], 0.1, global_step, optimizer="radam", clip_norm=None)
    graph = tf.get_default_graph()
    reads_of_a = [op for op in graph.get_operations()
                  if op.type == "ReadVariableOp" and op.inputs[0].op is a.op
                  and op.name.startswith("apply_gradients/")]
    writes_of_a = [op for op in graph.get_operations()
                   if op.type == "AssignVariableOp" and op.inputs[0].op is a.op
                   and op.name.startswith("apply_gradients/")]
    assert reads_of_a and writes_of_a
    for op in reads_of_a + writes_of_a:
      assert grad_b.op in _ancestors(op), op.name
    train_ancestors = _ancestors(train_op)
    for op in writes_of_a:
      assert op in train_ancestors, op.name


# ----------------------------------------------------------------------------
# Slots
# ----------------------------------------------------------------------------


def test_slot_names_ignore_caller_scopes_and_are_reused():
  with tf.Graph().as_default():
    with tf.variable_scope("bert", use_resource=True):
      kernel = tf.get_variable("encoder/dense/kernel", [2, 2])
      bias = tf.get_variable("encoder/dense/bias", [2], use_resource=False)
    global_step = tf.train.get_or_create_global_step()
    grads_and_vars = [(tf.ones([2, 2]), kernel), (tf.ones([2]), bias)]
    with tf.variable_scope("outer", reuse=tf.AUTO_REUSE), tf.name_scope("tower_0"):
      optimization.apply_gradients(grads_and_vars, 0.1, global_step)
    count = len(tf.global_variables())
    with tf.variable_scope("another"):
      optimization.apply_gradients(grads_and_vars, 0.1, global_step, optimizer="lamb")
    assert len(tf.global_variables()) == count  # second call reused the slots

    slot_names = sorted(v.name for v in tf.global_variables() if "/adam_" in v.name)
    assert slot_names == [
        "bert/encoder/dense/bias/adam_m:0", "bert/encoder/dense/bias/adam_v:0",
        "bert/encoder/dense/kernel/adam_m:0", "bert/encoder/dense/kernel/adam_v:0",
    ]
    trainable = set(v.name for v in tf.trainable_variables())
    for var in tf.global_variables():
      if "/adam_" in var.name:
        assert var.name not in trainable
        assert var.dtype.base_dtype == tf.float32
        # Placed with the variable it belongs to.
        owner = kernel if "kernel" in var.name else bias
        assert var.op.colocation_groups() == owner.op.colocation_groups()
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      assert not np.any(sess.run(tf.global_variables("bert/encoder/dense/kernel/adam_v")[0]))


def test_slots_follow_the_variable_device_not_the_callers():
  with tf.Graph().as_default():
    with tf.device("/cpu:0"):
      pinned = tf.get_variable("pinned", [2], use_resource=True)
    free = tf.get_variable("free", [2], use_resource=True)
    global_step = tf.train.get_or_create_global_step()
    with tf.device("/device:GPU:3"):
      optimization.apply_gradients([(tf.ones([2]), pinned), (tf.ones([2]), free)], 0.1,
                                   global_step)
    for name in ("pinned/adam_m", "pinned/adam_v"):
      assert tf.global_variables(name)[0].device == pinned.device
    for name in ("free/adam_m", "free/adam_v"):
      assert tf.global_variables(name)[0].device == ""


# ----------------------------------------------------------------------------
# create_optimizer and errors
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("optimizer", ["adamw", "radam", "lamb"])
def test_create_optimizer_trains_least_squares(optimizer):
  rng = np.random.RandomState(3)
  features = rng.randn(32, 3).astype(np.float32)
  targets = (features.dot(np.array([1.0, -2.0, 0.5])) + 0.3).astype(np.float32)
  with tf.Graph().as_default():
    tf.set_random_seed(0)
    with tf.variable_scope("ls", use_resource=True):
      weights = tf.get_variable("kernel", [3], initializer=tf.zeros_initializer())
      bias = tf.get_variable("bias", [], initializer=tf.zeros_initializer())
    predictions = tf.tensordot(tf.constant(features), weights, 1) + bias
    loss = tf.reduce_mean(tf.square(predictions - targets))
    train_op = optimization.create_optimizer(loss, 0.1, 200, 10, optimizer=optimizer)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      first = sess.run(loss)
      # 200 steps: RAdam's rectifier r_t is only ~0.15 at t = 50 (it warms up
      # over ~2/(1-beta_2) steps), so it needs longer than AdamW and LAMB.
      for _ in range(200):
        sess.run(train_op)
      last = sess.run(loss)
      assert sess.run(tf.train.get_global_step()) == 200
  assert last < 0.05 * first, (first, last)


def test_create_optimizer_rejects_tpu_and_unknown_names():
  with tf.Graph().as_default():
    var = tf.get_variable("w", [1], use_resource=True)
    loss = tf.reduce_sum(var * var)
    with pytest.raises(ValueError, match="TPU"):
      optimization.create_optimizer(loss, 0.1, 10, 1, use_tpu=True)
    with pytest.raises(ValueError, match="'adamw', 'radam', 'lamb'"):
      optimization.create_optimizer(loss, 0.1, 10, 1, optimizer="sgd")
    with pytest.raises(ValueError, match="unknown optimizer 'adam'"):
      optimization.make_optimizer("adam", 0.1)
    with pytest.raises(ValueError, match="unknown optimizer"):
      optimization.apply_gradients([(tf.ones([1]), var)], 0.1,
                                   tf.train.get_or_create_global_step(), optimizer="Adam")


def test_optimizer_classes_are_exposed():
  assert isinstance(optimization.make_optimizer("adamw", 0.1),
                    optimization.AdamWeightDecayOptimizer)
  assert isinstance(optimization.make_optimizer("radam", 0.1), optimization.RAdamOptimizer)
  assert isinstance(optimization.make_optimizer("lamb", 0.1), optimization.LAMBOptimizer)
  assert optimization.RAdamOptimizer(0.1).rectify_threshold == 5.0
  with pytest.raises(ValueError, match="beta_2"):
    optimization.make_optimizer("lamb", 0.1, beta_2=1.0)
