# coding=utf-8
"""The ops of the leaner training step (issue #22) match the formulations they replaced.

Each rewritten op is compared with the old formulation, kept here as the reference:
the GELU and LayerNorm with their written-out gradients (modeling.py), the attention
scale moved onto the queries, the float32 word-embedding lookup under bf16
(mixed_precision.py), and AdamW through TensorFlow's fused ResourceApplyAdam
(optimization.py). float32 results must agree to 1e-5 relative (plus a floor of 1e-6 of
the array's largest value, for sums of nearly cancelling terms), on TF 1.15 and 2.x.
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

import math

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu.training import mixed_precision
import modeling
import optimization

RTOL = 1e-5


def assert_close(actual, expected, what, rtol=RTOL):
  floor = 1e-6 * float(np.max(np.abs(expected)))
  np.testing.assert_allclose(actual, expected, rtol=rtol, atol=floor, err_msg=what)


# The old formulations (modeling.py and optimization.py before issue #22).

def old_gelu(x):
  return 0.5 * x * (1.0 + tf.math.erf(x / math.sqrt(2.0)))


def old_layer_norm(input_tensor, gamma, beta):
  x = tf.cast(input_tensor, tf.float32)
  mean = tf.reduce_mean(x, axis=-1, keepdims=True)
  centered = x - mean
  variance = tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True)
  normalized = centered * tf.math.rsqrt(variance + 1e-12)
  return tf.cast(normalized * gamma + beta, input_tensor.dtype)


def old_adamw(param, m, v, grad, lr, weight_decay_rate, beta_1=0.9, beta_2=0.999, eps=1e-6):
  next_m = beta_1 * m + (1.0 - beta_1) * grad
  next_v = beta_2 * v + (1.0 - beta_2) * tf.square(grad)
  update = next_m / (tf.sqrt(next_v) + eps) + weight_decay_rate * param
  return param - lr * update, next_m, next_v


def run_value_and_grads(build, inputs, seed=0):
  """sess.run of (output, d output . dy / d inputs) for new and old builders."""
  rng = np.random.RandomState(seed)
  with tf.Graph().as_default():
    tensors = [tf.constant(value) for value in inputs]
    results = []
    for fn in build:
      output = fn(*tensors)
      dy = tf.constant(rng.randn(*output.shape.as_list()).astype(np.float32))
      grads = tf.gradients(output, tensors, grad_ys=tf.cast(dy, output.dtype))
      results.append((output, grads))
      rng = np.random.RandomState(seed)  # the same dy for both
    with tf.Session() as sess:
      return sess.run(results)


def test_gelu_value_and_gradient_match_old_formulation():
  x = np.linspace(-8.0, 8.0, 4001).astype(np.float32).reshape(1, -1)
  (new, (new_grad,)), (old, (old_grad,)) = run_value_and_grads(
      [modeling.gelu, old_gelu], [x])
  assert_close(new, old, "gelu")
  assert_close(new_grad, old_grad, "gelu gradient")
  assert modeling.get_activation("gelu") is modeling.gelu


def test_gelu_gradient_is_the_written_out_one():
  """The custom gradient is what the graph uses: no Erf gradient ops appear."""
  with tf.Graph().as_default() as graph:
    x = tf.constant(np.ones([2, 3], np.float32))
    tf.gradients(modeling.gelu(x), [x])
    types = [op.type for op in graph.get_operations()]
  assert types.count("Erf") == 1 and types.count("Exp") == 1


@pytest.mark.parametrize("shape", [(6, 16), (2, 5, 32)])
def test_layer_norm_value_and_gradients_match_old_formulation(shape):
  rng = np.random.RandomState(1)
  # Rows with different scales and offsets, as after residual additions.
  x = (rng.randn(*shape) * rng.uniform(0.1, 30.0, shape[:-1] + (1,)) +
       rng.uniform(-5, 5, shape[:-1] + (1,))).astype(np.float32)
  gamma = rng.uniform(0.5, 1.5, shape[-1:]).astype(np.float32)
  beta = rng.randn(shape[-1]).astype(np.float32)
  (new, new_grads), (old, old_grads) = run_value_and_grads(
      # pylint: disable=protected-access
      [modeling._layer_norm_with_gradient, old_layer_norm], [x, gamma, beta])
  assert_close(new, old, "layer norm")
  for name, got, want in zip(("x", "gamma", "beta"), new_grads, old_grads):
    assert got.shape == want.shape
    assert_close(got, want, "layer norm gradient of " + name)


def test_layer_norm_bf16_keeps_dtypes_and_float32_statistics():
  rng = np.random.RandomState(2)
  x = (rng.randn(4, 64) * 10 + 3).astype(np.float32)
  with tf.Graph().as_default():
    x16 = tf.cast(tf.constant(x), tf.bfloat16)
    with tf.variable_scope("new"):
      new = modeling.layer_norm(x16)
    beta, gamma = tf.trainable_variables()  # created in this order
    old = old_layer_norm(x16, gamma, beta)
    new_grads = tf.gradients(new, [x16, gamma, beta])
    old_grads = tf.gradients(old, [x16, gamma, beta])
    assert new.dtype == tf.bfloat16 and new_grads[0].dtype == tf.bfloat16
    assert new_grads[1].dtype == tf.float32
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      got, want, got_grads, want_grads = sess.run([
          tf.cast(new, tf.float32), tf.cast(old, tf.float32),
          [tf.cast(g, tf.float32) for g in new_grads],
          [tf.cast(g, tf.float32) for g in old_grads]])
  np.testing.assert_array_equal(got, want)  # the forward pass is the same ops
  for got_grad, want_grad in zip(got_grads, want_grads):
    np.testing.assert_allclose(got_grad, want_grad, rtol=2e-2, atol=2e-2)


def test_attention_scale_on_queries_matches_old_formulation():
  """Scaling the queries equals scaling the scores (dropout off, with a padding mask)."""
  rng = np.random.RandomState(3)
  batch, seq, heads, size = 2, 7, 3, 6  # 1/sqrt(6) is not exact: real rounding
  x = rng.randn(batch * seq, heads * size).astype(np.float32)
  mask = np.ones([batch, seq, seq], np.float32)
  mask[1, :, 5:] = 0.0
  with tf.Graph().as_default():
    tf.set_random_seed(1)
    from_tensor = tf.constant(x)
    new = modeling.attention_layer(
        from_tensor, from_tensor, tf.constant(mask), num_attention_heads=heads,
        size_per_head=size, do_return_2d_tensor=True, batch_size=batch,
        from_seq_length=seq, to_seq_length=seq)
    variables = dict((v.op.name, v) for v in tf.trainable_variables())

    def project(name):
      out = tf.matmul(from_tensor, variables[name + "/kernel"]) + variables[name + "/bias"]
      return tf.transpose(tf.reshape(out, [batch, seq, heads, size]), [0, 2, 1, 3])

    scores = tf.matmul(project("query"), project("key"), transpose_b=True)
    scores *= 1.0 / math.sqrt(float(size))
    scores += (1.0 - tf.expand_dims(mask, 1)) * -10000.0
    context = tf.matmul(tf.nn.softmax(scores), project("value"))
    old = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [-1, heads * size])
    grads = tf.gradients(new, [from_tensor]) + tf.gradients(old, [from_tensor])
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      got, want, got_grad, want_grad = sess.run([new, old] + grads)
  assert_close(got, want, "attention output")
  assert_close(got_grad, want_grad, "attention gradient")


def test_bf16_gathers_float32_word_embeddings_and_casts_only_the_rows():
  config = modeling.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=32)

  def cast_on_read(getter, name, *args, **kwargs):
    return mixed_precision.cast_for_compute(getter(name, *args, **kwargs).read_value(), name,
                                            tf.bfloat16)

  with tf.Graph().as_default() as graph:
    ids = tf.constant(np.arange(12, dtype=np.int32).reshape(2, 6))
    with tf.variable_scope("", custom_getter=cast_on_read, use_resource=True):
      model = modeling.BertModel(config, False, ids)
    gathers = [op for op in graph.get_operations() if op.type in ("GatherV2", "Gather",
                                                                   "ResourceGather")]
    assert gathers and all(op.inputs[0].dtype == tf.float32 for op in gathers)
    assert model.get_embedding_output().dtype == tf.bfloat16
    assert model.get_pooled_output().dtype == tf.bfloat16
    # The tied masked-LM output multiplies with the table in the compute dtype.
    assert model.get_embedding_table().dtype == tf.bfloat16
    table = [v for v in tf.global_variables() if "word_embeddings" in v.op.name][0]
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      rows, first = sess.run([tf.cast(tf.gather(tf.cast(table, tf.bfloat16),
                                                tf.reshape(ids, [-1])), tf.float32),
                              tf.cast(model.get_embedding_table(), tf.float32)])
    # Casting the gathered rows equals gathering from the cast table.
    np.testing.assert_array_equal(first[:12], rows)


def test_fp32_embedding_table_is_the_variable():
  config = modeling.BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=16)
  with tf.Graph().as_default():
    model = modeling.BertModel(config, False, tf.zeros([1, 4], tf.int32))
    assert model.get_embedding_table() in tf.global_variables()


@pytest.mark.parametrize("clip_norm,weight_decay_rate", [(1.0, 0.01), (None, 0.0),
                                                         (0.05, 0.3)])
def test_fused_adamw_matches_old_formulation(clip_norm, weight_decay_rate):
  rng = np.random.RandomState(4)
  shapes = {"dense/kernel": (5, 7), "dense/bias": (7,), "LayerNorm/gamma": (7,)}
  init = dict((name, rng.randn(*shape).astype(np.float32)) for name, shape in shapes.items())
  grads_by_step = [dict((name, (rng.randn(*shape) * 0.1).astype(np.float32))
                        for name, shape in shapes.items()) for _ in range(6)]
  lr = 0.01
  with tf.Graph().as_default() as graph:
    variables = [tf.get_variable(name, initializer=value, use_resource=True)
                 for name, value in sorted(init.items())]
    placeholders = [tf.placeholder(tf.float32, v.shape) for v in variables]
    step = tf.train.get_or_create_global_step()
    train_op, _ = optimization.apply_gradients(
        list(zip(placeholders, variables)), lr, step, clip_norm=clip_norm,
        weight_decay_rate=weight_decay_rate)
    assert "ResourceApplyAdam" in [op.type for op in graph.get_operations()]
    slots = [optimization.get_or_create_moment_slots(v) for v in variables]
    # The reference: the old elementwise update, in float32 TensorFlow ops.
    old_inputs = [[tf.placeholder(tf.float32, v.shape) for _ in range(4)] for v in variables]
    scale = tf.placeholder(tf.float32, [])
    old_steps = []
    for (param, m, v, grad), var in zip(old_inputs, variables):
      decay = weight_decay_rate if "kernel" in var.op.name else 0.0
      old_steps.append(old_adamw(param, m, v, grad * scale, lr, decay))
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      want = [[init[v.op.name], np.zeros(v.shape, np.float32), np.zeros(v.shape, np.float32)]
              for v in variables]
      for grads in grads_by_step:
        values = [grads[v.op.name] for v in variables]
        sess.run(train_op, dict(zip(placeholders, values)))
        norm = np.sqrt(sum(np.sum(np.square(g.astype(np.float64))) for g in values))
        feed = {scale: 1.0 if clip_norm is None else clip_norm / max(norm, clip_norm)}
        for inputs, state, value in zip(old_inputs, want, values):
          feed.update(zip(inputs, state + [value]))
        want = [list(result) for result in sess.run(old_steps, feed)]
      got = sess.run([[v] + list(s) for v, s in zip(variables, slots)])
  for var, got_values, want_values in zip(variables, got, want):
    for what, got_value, want_value in zip(("param", "adam_m", "adam_v"), got_values,
                                           want_values):
      assert_close(got_value, want_value, "%s %s" % (what, var.op.name))


def test_clip_scale_matches_clip_by_global_norm():
  with tf.Graph().as_default():
    grads = [tf.constant([3.0, 4.0]), tf.constant([[12.0]])]
    norm = tf.global_norm(grads)
    clipped, _ = tf.clip_by_global_norm(grads, 2.0, use_norm=norm)
    with tf.Session() as sess:
      scale, want, infinite = sess.run([
          optimization.clip_scale(norm, 2.0), clipped,
          optimization.clip_scale(tf.constant(np.inf), 2.0)])
  np.testing.assert_allclose(scale * np.array([3.0, 4.0]), want[0], rtol=1e-7)
  assert np.isnan(infinite)
