# coding=utf-8
"""Tests for modeling.py against NumPy references (tests/helpers/numpy_bert.py)."""

import json
import math
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf


from bert_mgpu.training import checkpoints  # pylint: disable=g-import-not-at-top
import modeling  # pylint: disable=g-import-not-at-top
import multigpu  # pylint: disable=g-import-not-at-top
import numpy_bert  # pylint: disable=g-import-not-at-top


BATCH = 3
SEQ = 7


def tiny_config(**overrides):
  fields = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=32, hidden_act="gelu",
                hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                max_position_embeddings=24, type_vocab_size=2,
                initializer_range=0.02)
  fields.update(overrides)
  return modeling.BertConfig(**fields)


def tiny_inputs(seed=0):
  """Ids, a mask with padding in two examples, and both token types."""
  rng = np.random.RandomState(seed)
  input_ids = rng.randint(0, 50, size=[BATCH, SEQ]).astype(np.int32)
  input_mask = np.ones([BATCH, SEQ], dtype=np.int32)
  input_mask[1, 4:] = 0
  input_mask[2, 2:] = 0
  token_type_ids = np.zeros([BATCH, SEQ], dtype=np.int32)
  token_type_ids[0, 3:] = 1
  token_type_ids[1, 2:4] = 1
  return input_ids, input_mask, token_type_ids


def placeholders():
  """int32 placeholders with an unknown batch dimension."""
  return (tf.placeholder(tf.int32, [None, SEQ], name="input_ids"),
          tf.placeholder(tf.int32, [None, SEQ], name="input_mask"),
          tf.placeholder(tf.int32, [None, SEQ], name="token_type_ids"))


def variable_name(var):
  return var.name.split(":")[0]


def load_weights(sess, weights):
  """Assigns NumPy values to the graph's global variables of the same name."""
  by_name = {variable_name(v): v for v in tf.global_variables()}
  assert set(by_name) == set(weights)
  sess.run([by_name[name].assign(value) for name, value in weights.items()])


# ---------------------------------------------------------------- BertConfig

RELEASED_CHINESE_CONFIG = {
    "attention_probs_dropout_prob": 0.1,
    "directionality": "bidi",
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 768,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 512,
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "pooler_fc_size": 768,
    "pooler_num_attention_heads": 12,
    "pooler_num_fc_layers": 3,
    "pooler_size_per_head": 128,
    "pooler_type": "first_token_transform",
    "type_vocab_size": 2,
    "vocab_size": 21128,
}


def test_config_from_dict_keeps_unknown_keys():
  config = modeling.BertConfig.from_dict(
      dict(RELEASED_CHINESE_CONFIG, my_extra={"nested": [1, 2]}))
  assert config.vocab_size == 21128
  assert config.type_vocab_size == 2
  assert config.directionality == "bidi"
  assert config.pooler_type == "first_token_transform"
  assert config.my_extra == {"nested": [1, 2]}
  assert config.to_dict() == dict(RELEASED_CHINESE_CONFIG, my_extra={"nested": [1, 2]})
  assert json.loads(config.to_json_string()) == config.to_dict()


def test_config_constructor_keeps_extra_fields_and_defaults():
  config = modeling.BertConfig(vocab_size=10, pooler_type="x")
  d = config.to_dict()
  assert d["pooler_type"] == "x"
  assert d["hidden_size"] == 768 and d["type_vocab_size"] == 16
  assert d["hidden_act"] == "gelu" and d["initializer_range"] == 0.02
  # to_dict returns a copy.
  d["hidden_size"] = 1
  assert config.hidden_size == 768


def test_config_json_file_round_trip(tmp_path):
  path = str(tmp_path / "bert_config.json")
  with open(path, "w") as f:
    json.dump(RELEASED_CHINESE_CONFIG, f)
  config = modeling.BertConfig.from_json_file(path)
  assert config.to_dict() == RELEASED_CHINESE_CONFIG

  path2 = str(tmp_path / "again.json")
  with open(path2, "w") as f:
    f.write(config.to_json_string())
  assert modeling.BertConfig.from_json_file(path2).to_dict() == RELEASED_CHINESE_CONFIG


def test_config_json_file_missing(tmp_path):
  path = str(tmp_path / "nope" / "bert_config.json")
  with pytest.raises(ValueError) as e:
    modeling.BertConfig.from_json_file(path)
  assert path in str(e.value)
  assert "does not exist" in str(e.value)


def test_config_json_file_is_directory(tmp_path):
  with pytest.raises(ValueError) as e:
    modeling.BertConfig.from_json_file(str(tmp_path))
  assert str(tmp_path) in str(e.value)
  assert "directory" in str(e.value)


def test_config_json_file_invalid_json_names_line_and_column(tmp_path):
  path = str(tmp_path / "bert_config.json")
  with open(path, "w") as f:
    f.write('{\n  "vocab_size": 21128,\n  "hidden_size": 768,,\n}\n')
  with pytest.raises(ValueError) as e:
    modeling.BertConfig.from_json_file(path)
  message = str(e.value)
  assert path in message
  assert "line 3" in message
  assert "column 22" in message


def test_config_json_file_not_an_object(tmp_path):
  path = str(tmp_path / "bert_config.json")
  with open(path, "w") as f:
    f.write("[1, 2]")
  with pytest.raises(ValueError) as e:
    modeling.BertConfig.from_json_file(path)
  assert path in str(e.value) and "JSON object" in str(e.value)


@pytest.mark.parametrize("fields,expected", [
    ({"hidden_size": 768}, "vocab_size"),
    ({"vocab_size": 10, "hidden_size": "768"}, "hidden_size"),
    ({"vocab_size": 10, "num_hidden_layers": 2.5}, "num_hidden_layers"),
    ({"vocab_size": 10, "hidden_dropout_prob": 1.5}, "hidden_dropout_prob"),
    ({"vocab_size": 10, "hidden_act": "swishy"}, "swishy"),
])
def test_config_json_file_bad_fields(tmp_path, fields, expected):
  path = str(tmp_path / "bert_config.json")
  with open(path, "w") as f:
    json.dump(fields, f)
  with pytest.raises(ValueError) as e:
    modeling.BertConfig.from_json_file(path)
  assert path in str(e.value)
  assert expected in str(e.value)


# ---------------------------------------------------------- small functions

def test_gelu_and_gelu_new_match_numpy():
  x_value = np.linspace(-6.0, 6.0, 241).astype(np.float32)
  with tf.Graph().as_default():
    x = tf.constant(x_value)
    with tf.Session() as sess:
      exact, approx = sess.run([modeling.gelu(x), modeling.gelu_new(x)])
  np.testing.assert_allclose(exact, numpy_bert.gelu_exact(x_value), atol=1e-6)
  np.testing.assert_allclose(approx, numpy_bert.gelu_tanh(x_value), atol=1e-6)
  # The two forms differ by up to ~5e-4 here; make sure they were not swapped.
  assert np.max(np.abs(numpy_bert.gelu_exact(x_value) -
                       numpy_bert.gelu_tanh(x_value))) > 1e-4
  # The defining values: gelu(1) = Phi(1).
  assert abs(exact[np.argmin(np.abs(x_value - 1.0))] -
             0.5 * (1.0 + math.erf(1.0 / math.sqrt(2.0)))) < 1e-6


def test_get_activation():
  assert modeling.get_activation("gelu") is modeling.gelu
  assert modeling.get_activation("GELU") is modeling.gelu
  assert modeling.get_activation("gelu_new") is modeling.gelu_new
  assert modeling.get_activation("relu") is tf.nn.relu
  assert modeling.get_activation("tanh") is tf.tanh
  assert modeling.get_activation("linear") is None
  assert modeling.get_activation(None) is None
  assert modeling.get_activation("") is None
  fn = lambda t: t * 2.0
  assert modeling.get_activation(fn) is fn
  with pytest.raises(ValueError) as e:
    modeling.get_activation("swish")
  for name in ("gelu", "gelu_new", "relu", "tanh", "linear"):
    assert name in str(e.value)
  assert "swish" in str(e.value)


def test_layer_norm_matches_numpy():
  rng = np.random.RandomState(1)
  x_value = (3.0 * rng.randn(2, 5, 8) + 2.0).astype(np.float32)
  gamma = (1.0 + 0.2 * rng.randn(8)).astype(np.float32)
  beta = (0.3 * rng.randn(8)).astype(np.float32)
  with tf.Graph().as_default():
    out = modeling.layer_norm(tf.constant(x_value))
    names = sorted(variable_name(v) for v in tf.global_variables())
    assert names == ["LayerNorm/beta", "LayerNorm/gamma"]
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      # Initial values: gamma ones, beta zeros.
      init_out = sess.run(out)
      load_weights(sess, {"LayerNorm/gamma": gamma, "LayerNorm/beta": beta})
      loaded_out = sess.run(out)
  np.testing.assert_allclose(
      init_out, numpy_bert.layer_norm(x_value, np.ones(8), np.zeros(8)), atol=1e-5)
  np.testing.assert_allclose(
      loaded_out, numpy_bert.layer_norm(x_value, gamma, beta), atol=1e-5)


def test_layer_norm_named_scope():
  with tf.Graph().as_default():
    modeling.layer_norm(tf.zeros([2, 4]), name="my_norm")
    names = sorted(variable_name(v) for v in tf.global_variables())
  assert names == ["my_norm/beta", "my_norm/gamma"]


def test_attention_mask_matches_numpy():
  _, input_mask, _ = tiny_inputs()
  with tf.Graph().as_default():
    from_tensor = tf.placeholder(tf.float32, [None, SEQ, 4])
    to_mask = tf.placeholder(tf.int32, [None, SEQ])
    mask = modeling.create_attention_mask_from_input_mask(from_tensor, to_mask)
    with tf.Session() as sess:
      value = sess.run(mask, {from_tensor: np.zeros([BATCH, SEQ, 4]),
                              to_mask: input_mask})
  assert value.dtype == np.float32
  np.testing.assert_array_equal(value, numpy_bert.attention_mask(input_mask, SEQ))


@pytest.mark.parametrize("rank", [2, 3])
def test_dense_layer_matches_numpy(rank):
  rng = np.random.RandomState(2)
  shape = [4, 6] if rank == 2 else [2, 3, 6]
  x_value = rng.randn(*shape).astype(np.float32)
  kernel = rng.randn(6, 5).astype(np.float32)
  bias = rng.randn(5).astype(np.float32)
  with tf.Graph().as_default():
    x = tf.placeholder(tf.float32, [None] + shape[1:])
    out = modeling.dense_layer(x, 5, activation=tf.tanh, name="proj")
    assert out.shape.as_list() == [None] + shape[1:-1] + [5]
    shapes = {variable_name(v): v.shape.as_list() for v in tf.global_variables()}
    assert shapes == {"proj/kernel": [6, 5], "proj/bias": [5]}
    with tf.Session() as sess:
      load_weights(sess, {"proj/kernel": kernel, "proj/bias": bias})
      value = sess.run(out, {x: x_value})
  np.testing.assert_allclose(value, np.tanh(x_value.dot(kernel) + bias), atol=1e-5)


def test_dropout_function():
  with tf.Graph().as_default():
    x = tf.ones([1000])
    assert modeling.dropout(x, None) is x
    assert modeling.dropout(x, 0.0) is x
    dropped = modeling.dropout(x, 0.5)
    with tf.Session() as sess:
      value = sess.run(dropped)
  # Inverted dropout: kept values are scaled by 1 / (1 - rate).
  assert set(np.unique(value).tolist()) == {0.0, 2.0}
  assert 300 < np.sum(value == 0.0) < 700


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16, tf.float16])
@pytest.mark.parametrize("rate", [0.1, 0.3])
@pytest.mark.parametrize("width", [999, 1000])  # an odd and an even number of values
def test_dropout_drops_at_the_rate_in_every_dtype(dtype, rate, width):
  """The drop rate is the configured one to 8e-4 (5 standard errors), in bfloat16 too
  (tf.nn.dropout's bfloat16 uniform drops 10.16% for 0.1), the scale 1 / (1 - rate)
  rounded to the dtype, the shape kept, and every draw differs."""
  with tf.Graph().as_default():
    x = tf.ones([501, width], dtype)
    dropped = modeling.dropout(x, rate)
    assert dropped.shape.as_list() == [501, width] and dropped.dtype == dtype
    value32 = tf.cast(dropped, tf.float32)
    with tf.Session() as sess:
      values = np.stack([sess.run(value32) for _ in range(8)])  # 4e6 draws
  dropped_share = np.mean(values == 0.0)
  assert abs(dropped_share - rate) < 8e-4, dropped_share
  kept = np.unique(values[values != 0.0])
  np.testing.assert_allclose(kept, [1.0 / (1.0 - rate)], rtol=4e-3)  # bfloat16 rounds it
  assert np.mean(values[0] == values[1]) < 0.9  # new bits every run
  # Neighbouring values (the two halves of one 32-bit draw) are not correlated.
  per_run = values.reshape(8, -1)
  pairs = per_run[:, :(per_run.shape[1] // 2) * 2].reshape(8, -1, 2) == 0.0
  assert abs(np.mean(pairs[..., 0] & pairs[..., 1]) - rate * rate) < 8e-4


@pytest.mark.parametrize("shape", [[None, 32], [None, None], None])
def test_dropout_of_tensors_with_unknown_dimensions(shape):
  """A placeholder's unknown dimensions (TF 1.15 returns Dimension(None) for them)."""
  with tf.Graph().as_default():
    x = tf.placeholder(tf.float32, shape)
    dropped = modeling.dropout(x, 0.5)
    with tf.Session() as sess:
      for rows, width in ((3, 32), (5, 32)):
        value = sess.run(dropped, {x: np.ones([rows, width], np.float32)})
        assert value.shape == (rows, width)
        assert set(np.unique(value).tolist()) <= {0.0, 2.0}


def test_dropout_at_the_ends_of_the_range():
  with tf.Graph().as_default():
    x = tf.ones([64, 32])
    assert modeling.dropout(x, 1e-6) is x  # under 2^-17: no dropout
    almost_all = modeling.dropout(x, 0.999999)  # 65535 of 65536 dropped
    with pytest.raises(ValueError):
      modeling.dropout(x, 1.0)
    with tf.Session() as sess:
      value = sess.run(almost_all)
  assert np.sum(value != 0.0) <= 3 and set(np.unique(value).tolist()) <= {0.0, 65536.0}


def op_types_run_by_tensorflow(metadata):
  """The op types TensorFlow's executors ran in a traced step; ops compiled into an XLA
  cluster ran inside its _XlaRun and are not among them."""
  op_types = {node.name: node.op for graph in metadata.partition_graphs for node in graph.node}
  # TF 1.15's step stats also hold "name:OpType" and "Populate Inputs" entries: skipped.
  return {op_types[stats.node_name]
          for device in metadata.step_stats.dev_stats for stats in device.node_stats
          if stats.node_name in op_types}


def run_dropout_traced(use_xla, steps):
  """Runs dropout of an odd and an even size `steps` times, inside --use_xla's scope or not,
  and traces the last run. Returns each run's two values and the op types TensorFlow ran."""
  with tf.Graph().as_default():
    # 255 * 33 values: an odd size, so the odd path's slice drops one value (of an even size
    # it keeps all, and grappler removes it).
    odd = tf.ones([255, 33])
    even = tf.ones([256, 32])
    # The scope --use_xla puts each tower in (multigpu._tower_scope).
    with multigpu._xla_scope(use_xla):  # pylint: disable=protected-access
      dropped = [modeling.dropout(odd, 0.25), modeling.dropout(even, 0.25)]
    metadata = tf.RunMetadata()
    trace = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE, output_partition_graphs=True)
    with tf.Session() as sess:
      values = [sess.run(dropped) for _ in range(steps - 1)]
      # Traced last: by then a lazily compiled cluster has been compiled.
      values.append(sess.run(dropped, options=trace, run_metadata=metadata))
  return values, op_types_run_by_tensorflow(metadata)


def test_dropout_compiles_with_xla():
  """Under --use_xla's scope XLA compiles dropout and keeps the rate. On TF 2.x the bitcast
  to a narrower type and the odd size's slice run inside the compiled cluster; TF 1.15's XLA
  has no int16, so there the bitcast stays a TensorFlow op and only the float part (the
  slice among it) is compiled."""
  _, ran_plain = run_dropout_traced(use_xla=False, steps=1)
  # Without XLA the ops looked for below run as TensorFlow ops: not optimized away.
  assert {"Bitcast", "StridedSlice"} <= ran_plain and "_XlaRun" not in ran_plain, sorted(ran_plain)
  values, ran = run_dropout_traced(use_xla=True, steps=20)
  assert "_XlaCompile" in ran and "_XlaRun" in ran, "no compiled cluster ran: %s" % sorted(ran)
  # A cluster XLA did not compile runs its function through this fallback call instead.
  assert not ran & {"PartitionedCall", "StatefulPartitionedCall"}, sorted(ran)
  outside_xla = ran & {"Bitcast", "StridedSlice"}
  if tf.__version__.startswith("1."):
    # TF 1.15's XLA types lack int16 (no XLA_CPU_JIT kernel takes T=DT_INT16).
    assert outside_xla == {"Bitcast"}, sorted(ran)
  else:
    assert not outside_xla, "ran outside XLA: %s" % sorted(outside_xla)
  for index in (0, 1):
    share = np.mean([np.mean(v[index] == 0.0) for v in values])
    assert abs(share - 0.25) < 0.01, share


def test_dropout_gradient_is_the_mask_times_the_scale():
  with tf.Graph().as_default():
    x = tf.ones([64, 33])
    dropped = modeling.dropout(x, 0.25)
    gradient = tf.gradients(dropped, x, grad_ys=tf.fill([64, 33], 3.0))[0]
    with tf.Session() as sess:
      value, grad = sess.run([dropped, gradient])
  np.testing.assert_allclose(grad, 3.0 * value, rtol=1e-6)
  assert 0 < np.sum(value == 0.0) < value.size


def test_get_shape_list_and_assert_rank():
  with tf.Graph().as_default():
    x = tf.placeholder(tf.float32, [None, 5, 3])
    shape = modeling.get_shape_list(x, expected_rank=3)
    assert isinstance(shape[0], tf.Tensor) and shape[1:] == [5, 3]
    assert modeling.get_shape_list(tf.zeros([2, 4])) == [2, 4]
    with pytest.raises(ValueError) as e:
      modeling.assert_rank(x, 2, name="my_tensor")
    assert "my_tensor" in str(e.value) and "rank 3" in str(e.value)
    modeling.assert_rank(x, [2, 3])
    matrix = modeling.reshape_to_matrix(x)
    assert matrix.shape.as_list() == [None, 3]
    back = modeling.reshape_from_matrix(matrix, shape)
    assert back.shape.as_list() == [None, 5, 3]


# ------------------------------------------------------------- BertModel

def test_variable_names_and_shapes_match_the_checkpoint_format():
  config = tiny_config()
  with tf.Graph().as_default():
    ids, mask, types = placeholders()
    model = modeling.BertModel(config, True, ids, mask, types)
    shapes = {variable_name(v): v.shape.as_list() for v in tf.global_variables()}
    trainable = {variable_name(v) for v in tf.trainable_variables()}
    assert model.get_embedding_table().shape.as_list() == [50, 16]
    assert variable_name(model.get_embedding_table()) == "bert/embeddings/word_embeddings"
    assert model.get_pooled_output().shape.as_list() == [None, 16]
    assert model.get_sequence_output().shape.as_list() == [None, SEQ, 16]
    assert model.get_embedding_output().shape.as_list() == [None, SEQ, 16]
    assert len(model.get_all_encoder_layers()) == 2
  assert shapes == numpy_bert.variable_shapes(config)
  assert trainable == set(shapes)


@pytest.mark.parametrize("use_one_hot_embeddings,hidden_act", [
    (False, "gelu"), (True, "gelu"), (False, "gelu_new")])
def test_forward_pass_matches_numpy(use_one_hot_embeddings, hidden_act):
  config = tiny_config(hidden_act=hidden_act)
  weights = numpy_bert.random_weights(config, seed=3)
  input_ids, input_mask, token_type_ids = tiny_inputs()
  with tf.Graph().as_default():
    ids, mask, types = placeholders()
    model = modeling.BertModel(config, False, ids, mask, types,
                               use_one_hot_embeddings=use_one_hot_embeddings)
    fetches = {"embedding_output": model.get_embedding_output(),
               "all_layers": model.get_all_encoder_layers(),
               "sequence_output": model.get_sequence_output(),
               "pooled_output": model.get_pooled_output()}
    with tf.Session() as sess:
      load_weights(sess, weights)
      got = sess.run(fetches, {ids: input_ids, mask: input_mask,
                               types: token_type_ids})
  activation = {"gelu": numpy_bert.gelu_exact,
                "gelu_new": numpy_bert.gelu_tanh}[hidden_act]
  want = numpy_bert.bert_forward(weights, config, input_ids, input_mask,
                                 token_type_ids, activation=activation)
  np.testing.assert_allclose(got["embedding_output"], want["embedding_output"], atol=1e-5)
  for got_layer, want_layer in zip(got["all_layers"], want["all_layers"]):
    np.testing.assert_allclose(got_layer, want_layer, atol=1e-5)
  np.testing.assert_allclose(got["sequence_output"], want["sequence_output"], atol=1e-5)
  np.testing.assert_allclose(got["pooled_output"], want["pooled_output"], atol=1e-5)
  # The padding really matters: the oracle without the mask gives other values.
  unmasked = numpy_bert.bert_forward(weights, config, input_ids,
                                     np.ones_like(input_mask), token_type_ids,
                                     activation=activation)
  assert np.max(np.abs(unmasked["pooled_output"][1:] - want["pooled_output"][1:])) > 1e-3


def test_default_mask_and_token_types():
  config = tiny_config()
  weights = numpy_bert.random_weights(config, seed=4)
  input_ids, _, _ = tiny_inputs()
  with tf.Graph().as_default():
    ids = tf.placeholder(tf.int32, [None, SEQ])
    model = modeling.BertModel(config, False, ids)
    with tf.Session() as sess:
      load_weights(sess, weights)
      got = sess.run(model.get_pooled_output(), {ids: input_ids})
  want = numpy_bert.bert_forward(weights, config, input_ids,
                                 np.ones_like(input_ids), np.zeros_like(input_ids))
  np.testing.assert_allclose(got, want["pooled_output"], atol=1e-5)


@pytest.mark.parametrize("use_one_hot_embeddings", [False, True])
def test_embedding_gradient_type(use_one_hot_embeddings):
  config = tiny_config()
  with tf.Graph().as_default():
    ids, mask, types = placeholders()
    model = modeling.BertModel(config, True, ids, mask, types,
                               use_one_hot_embeddings=use_one_hot_embeddings)
    loss = tf.reduce_sum(model.get_pooled_output())
    grad = tf.gradients(loss, [model.get_embedding_table()])[0]
  if use_one_hot_embeddings:
    assert isinstance(grad, tf.Tensor)
  else:
    assert isinstance(grad, tf.IndexedSlices)


def _pooled_twice(config, is_training):
  input_ids, input_mask, token_type_ids = tiny_inputs()
  with tf.Graph().as_default():
    tf.set_random_seed(5)
    ids, mask, types = placeholders()
    model = modeling.BertModel(config, is_training, ids, mask, types)
    feed = {ids: input_ids, mask: input_mask, types: token_type_ids}
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      first = sess.run(model.get_sequence_output(), feed)
      second = sess.run(model.get_sequence_output(), feed)
  return first, second


def test_no_dropout_when_not_training():
  config = tiny_config(hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3)
  first, second = _pooled_twice(config, is_training=False)
  np.testing.assert_array_equal(first, second)
  # The caller's config is untouched.
  assert config.hidden_dropout_prob == 0.3
  assert config.attention_probs_dropout_prob == 0.3


def test_dropout_when_training():
  config = tiny_config(hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3)
  first, second = _pooled_twice(config, is_training=True)
  assert np.max(np.abs(first - second)) > 1e-3


def test_sequence_longer_than_position_table():
  config = tiny_config(max_position_embeddings=6)
  with tf.Graph().as_default():
    ids = tf.placeholder(tf.int32, [None, 7])
    with pytest.raises(ValueError) as e:
      modeling.BertModel(config, False, ids)
  assert "7" in str(e.value) and "6" in str(e.value)
  assert "max_position_embeddings" in str(e.value)


def test_hidden_size_not_divisible_by_heads():
  config = tiny_config(hidden_size=18, num_attention_heads=4)
  with tf.Graph().as_default():
    ids = tf.placeholder(tf.int32, [None, SEQ])
    with pytest.raises(ValueError) as e:
      modeling.BertModel(config, False, ids)
  assert "18" in str(e.value) and "4" in str(e.value)
  with tf.Graph().as_default():
    with pytest.raises(ValueError) as e:
      modeling.transformer_model(tf.zeros([2, SEQ, 18]), hidden_size=18,
                                 num_attention_heads=4)
  assert "18" in str(e.value) and "num_attention_heads 4" in str(e.value)


def _build_towers(config, ids, mask, types, reuse, one_outer_scope):
  """Builds two towers the way a tower builder does; returns their pooled outputs."""
  pooled = []
  if one_outer_scope:
    # One reusing scope around every tower: a scope opened with default_name
    # would come out as "bert_1" in the second tower here.
    with tf.variable_scope(tf.get_variable_scope(), reuse=tf.AUTO_REUSE,
                           use_resource=True):
      for tower in range(2):
        with tf.name_scope("tower_%d" % tower):
          model = modeling.BertModel(config, False, ids, mask, types)
          pooled.append(model.get_pooled_output())
    return pooled
  for tower in range(2):
    # The first tower must create the variables, so it uses AUTO_REUSE;
    # later towers use the requested mode.
    mode = tf.AUTO_REUSE if tower == 0 else reuse
    with tf.variable_scope(tf.get_variable_scope(), reuse=mode, use_resource=True):
      with tf.name_scope("tower_%d" % tower):
        model = modeling.BertModel(config, False, ids, mask, types)
        pooled.append(model.get_pooled_output())
  return pooled


@pytest.mark.parametrize("reuse,one_outer_scope", [
    (tf.AUTO_REUSE, False), (True, False), (tf.AUTO_REUSE, True)])
def test_towers_share_one_set_of_variables(reuse, one_outer_scope):
  config = tiny_config()
  input_ids, input_mask, token_type_ids = tiny_inputs()

  with tf.Graph().as_default():
    ids, mask, types = placeholders()
    modeling.BertModel(config, True, ids, mask, types)
    names_once = [variable_name(v) for v in tf.global_variables()]

  with tf.Graph().as_default():
    ids, mask, types = placeholders()
    pooled = _build_towers(config, ids, mask, types, reuse, one_outer_scope)
    names_twice = [variable_name(v) for v in tf.global_variables()]
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      out0, out1 = sess.run(pooled, {ids: input_ids, mask: input_mask,
                                     types: token_type_ids})

  assert len(names_twice) == len(names_once)
  assert names_twice == names_once
  assert all(name.startswith("bert/") for name in names_twice)
  np.testing.assert_array_equal(out0, out1)


# ------------------------------------------------------------- checkpoints

def _write_checkpoint(directory, weights, extra=None):
  """Saves variables named like Google's checkpoint in a graph of its own."""
  values = dict(weights)
  values.update(extra or {})
  return checkpoints.write_arrays(values, os.path.join(directory, "bert_model.ckpt"))


def test_checkpoint_with_google_names_loads(tmp_path):
  config = tiny_config()
  weights = numpy_bert.random_weights(config, seed=6)
  rng = np.random.RandomState(7)
  extra = {
      "cls/predictions/output_bias": rng.randn(50).astype(np.float32),
      "cls/seq_relationship/output_weights": rng.randn(2, 16).astype(np.float32),
      "bert/pooler/dense/kernel/adam_m": rng.randn(16, 16).astype(np.float32),
      "global_step": np.array(1000, dtype=np.int64),
  }
  checkpoint = _write_checkpoint(str(tmp_path), weights, extra)
  input_ids, input_mask, token_type_ids = tiny_inputs()

  with tf.Graph().as_default():
    ids, mask, types = placeholders()
    with tf.variable_scope(tf.get_variable_scope(), use_resource=True):
      model = modeling.BertModel(config, False, ids, mask, types)
    tvars = tf.trainable_variables()
    assignment_map, initialized = modeling.get_assignment_map_from_checkpoint(
        tvars, checkpoint)
    tf.train.init_from_checkpoint(checkpoint, assignment_map)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      loaded = dict(zip([variable_name(v) for v in tvars], sess.run(tvars)))
      pooled = sess.run(model.get_pooled_output(),
                        {ids: input_ids, mask: input_mask, types: token_type_ids})

  model_names = {variable_name(v) for v in tvars}
  assert set(assignment_map) == model_names
  assert all(key == value for key, value in assignment_map.items())
  for name in model_names:
    assert initialized[name] == 1 and initialized[name + ":0"] == 1
  assert not any(name.startswith("cls/") or name == "global_step"
                 for name in initialized)
  for name, value in weights.items():
    np.testing.assert_array_equal(loaded[name], value)
  want = numpy_bert.bert_forward(weights, config, input_ids, input_mask, token_type_ids)
  np.testing.assert_allclose(pooled, want["pooled_output"], atol=1e-5)


def test_checkpoint_shape_mismatch_names_the_variable(tmp_path):
  saved_config = tiny_config(intermediate_size=24)
  checkpoint = _write_checkpoint(
      str(tmp_path), numpy_bert.random_weights(saved_config, seed=8))
  with tf.Graph().as_default():
    ids, mask, types = placeholders()
    modeling.BertModel(tiny_config(intermediate_size=32), False, ids, mask, types)
    with pytest.raises(ValueError) as e:
      modeling.get_assignment_map_from_checkpoint(tf.trainable_variables(), checkpoint)
  message = str(e.value)
  assert "intermediate/dense" in message
  assert "[16, 24]" in message or "[24]" in message
  assert "[16, 32]" in message or "[32]" in message
  assert "config does not match the checkpoint" in message


def test_missing_checkpoint_names_the_path(tmp_path):
  path = str(tmp_path / "no_such" / "bert_model.ckpt")
  with tf.Graph().as_default():
    ids, mask, types = placeholders()
    modeling.BertModel(tiny_config(), False, ids, mask, types)
    with pytest.raises(ValueError) as e:
      modeling.get_assignment_map_from_checkpoint(tf.trainable_variables(), path)
  assert path in str(e.value)


# ---------------------------------------------------------------- initializers


def _initial_weights(initializer=None, seed=7):
  """The initial values of a BertModel of a 400-piece vocab, hidden 64, by name."""
  config = tiny_config(vocab_size=400, hidden_size=64, num_attention_heads=4,
                       intermediate_size=128)
  with tf.Graph().as_default():
    tf.set_random_seed(seed)
    ids = tf.ones([1, SEQ], tf.int32)
    if initializer is None:
      modeling.BertModel(config, is_training=False, input_ids=ids)
    else:
      with modeling.weight_initializer(initializer):
        modeling.BertModel(config, is_training=False, input_ids=ids)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      return {variable_name(v): sess.run(v) for v in tf.global_variables()}


def _kernels_and_tables(weights):
  """Every weight the initializer draws (kernels and embedding tables), flattened."""
  return np.concatenate([value.ravel() for name, value in weights.items()
                         if name.endswith(("/kernel", "_embeddings"))])


def test_default_initializer_is_googles_truncated_normal():
  weights = _initial_weights()
  values = _kernels_and_tables(weights)
  assert np.abs(values).max() <= 2 * 0.02 + 1e-7  # cut at two stddev
  assert abs(values.std() - 0.88 * 0.02) < 0.0005  # so its real stddev is 0.88 x 0.02
  assert np.abs(weights["bert/embeddings/word_embeddings"][modeling.PAD_ID]).max() > 0
  # The context's own default draws the very same values (same ops, same seeds).
  same = _initial_weights("truncated_normal")
  for name, value in weights.items():
    np.testing.assert_array_equal(same[name], value, err_msg=name)


def test_normal_initializer_draws_transformers_distribution_with_a_zero_pad_row():
  weights = _initial_weights("normal")
  values = _kernels_and_tables(weights)
  assert abs(values.std() - 0.02) < 0.0005  # the untruncated stddev is initializer_range
  assert np.mean(np.abs(values) > 2 * 0.02) > 0.03  # the tails beyond two stddev (4.6%)
  table = weights["bert/embeddings/word_embeddings"]
  np.testing.assert_array_equal(table[modeling.PAD_ID], np.zeros(table.shape[1]))
  assert np.all(np.abs(table[modeling.PAD_ID + 1:]).max(axis=1) > 0)
  # LayerNorm and biases start as in Google's model.
  assert np.all(weights["bert/embeddings/LayerNorm/gamma"] == 1)
  assert np.all(weights["bert/encoder/layer_0/output/dense/bias"] == 0)


def test_initializer_context_is_restored_and_checks_its_name():
  with modeling.weight_initializer("normal"):
    assert isinstance(modeling.create_initializer(), tf.random_normal_initializer)
  assert isinstance(modeling.create_initializer(), tf.truncated_normal_initializer)
  with pytest.raises(ValueError, match="uniform"):
    with modeling.weight_initializer("uniform"):
      pass
