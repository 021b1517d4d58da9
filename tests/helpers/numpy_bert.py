# coding=utf-8
"""A plain NumPy BERT forward pass, the test oracle for modeling.py.

Written straight from the published description (docs/FORMATS.md section 3) with
explicit loops over examples and heads, in float64, so that it shares no code
and no structure with the TensorFlow implementation it checks. Weights are a
dict from checkpoint variable name (bert/encoder/layer_0/...) to array.
"""

import math

import numpy as np


def gelu_exact(x):
  """0.5 * x * (1 + erf(x / sqrt(2))), elementwise via math.erf."""
  x = np.asarray(x, dtype=np.float64)
  erf = np.vectorize(math.erf)
  return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
  """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
  x = np.asarray(x, dtype=np.float64)
  return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def layer_norm(x, gamma, beta, epsilon=1e-12):
  """Normalizes over the last axis, then scales by gamma and shifts by beta."""
  x = np.asarray(x, dtype=np.float64)
  mean = x.mean(axis=-1, keepdims=True)
  variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
  return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def softmax(scores):
  """Softmax over the last axis."""
  shifted = scores - scores.max(axis=-1, keepdims=True)
  exp = np.exp(shifted)
  return exp / exp.sum(axis=-1, keepdims=True)


def attention_mask(input_mask, from_seq_length):
  """mask[b, i, j] = input_mask[b, j] for every query position i."""
  input_mask = np.asarray(input_mask, dtype=np.float64)
  batch, to_seq = input_mask.shape
  mask = np.zeros([batch, from_seq_length, to_seq])
  for b in range(batch):
    for i in range(from_seq_length):
      mask[b, i, :] = input_mask[b]
  return mask


def _dense(weights, prefix, x):
  return x.dot(weights[prefix + "/kernel"]) + weights[prefix + "/bias"]


def _self_attention(weights, prefix, x, mask, num_heads):
  """Self-attention of one example: x [seq, hidden], mask [seq] of 0/1."""
  seq, hidden = x.shape
  head_size = hidden // num_heads
  q = _dense(weights, prefix + "/query", x)
  k = _dense(weights, prefix + "/key", x)
  v = _dense(weights, prefix + "/value", x)
  context = np.zeros([seq, hidden])
  for h in range(num_heads):
    cols = slice(h * head_size, (h + 1) * head_size)
    scores = q[:, cols].dot(k[:, cols].T) / math.sqrt(head_size)  # [seq, seq]
    scores = scores + (1.0 - mask[np.newaxis, :]) * -10000.0
    context[:, cols] = softmax(scores).dot(v[:, cols])
  return context


def bert_forward(weights, config, input_ids, input_mask, token_type_ids,
                 activation=gelu_exact):
  """Runs BERT without dropout.

  Args:
    weights: dict name -> np.ndarray using the checkpoint variable names.
    config: object with hidden_size, num_hidden_layers, num_attention_heads.
    input_ids, input_mask, token_type_ids: int arrays [batch, seq].
    activation: the feed-forward activation.

  Returns:
    dict with "embedding_output" [batch, seq, hidden], "all_layers" (list of
    [batch, seq, hidden]), "sequence_output" and "pooled_output" [batch, hidden].
  """
  w = {name: np.asarray(value, dtype=np.float64) for name, value in weights.items()}
  input_ids = np.asarray(input_ids)
  input_mask = np.asarray(input_mask, dtype=np.float64)
  token_type_ids = np.asarray(token_type_ids)
  batch, seq = input_ids.shape

  embedding_outputs = []
  layer_outputs = [[] for _ in range(config.num_hidden_layers)]
  pooled = []
  for b in range(batch):
    x = np.stack([
        w["bert/embeddings/word_embeddings"][input_ids[b, t]] +
        w["bert/embeddings/token_type_embeddings"][token_type_ids[b, t]] +
        w["bert/embeddings/position_embeddings"][t]
        for t in range(seq)])
    x = layer_norm(x, w["bert/embeddings/LayerNorm/gamma"],
                   w["bert/embeddings/LayerNorm/beta"])
    embedding_outputs.append(x)

    for i in range(config.num_hidden_layers):
      p = "bert/encoder/layer_%d" % i
      context = _self_attention(w, p + "/attention/self", x, input_mask[b],
                                config.num_attention_heads)
      a = layer_norm(_dense(w, p + "/attention/output/dense", context) + x,
                     w[p + "/attention/output/LayerNorm/gamma"],
                     w[p + "/attention/output/LayerNorm/beta"])
      inter = activation(_dense(w, p + "/intermediate/dense", a))
      x = layer_norm(_dense(w, p + "/output/dense", inter) + a,
                     w[p + "/output/LayerNorm/gamma"],
                     w[p + "/output/LayerNorm/beta"])
      layer_outputs[i].append(x)

    pooled.append(np.tanh(_dense(w, "bert/pooler/dense", x[0])))

  all_layers = [np.stack(outputs) for outputs in layer_outputs]
  return {
      "embedding_output": np.stack(embedding_outputs),
      "all_layers": all_layers,
      "sequence_output": all_layers[-1],
      "pooled_output": np.stack(pooled),
  }


def variable_shapes(config):
  """The checkpoint names and shapes of the `bert/` variables (docs/FORMATS.md section 2)."""
  h = config.hidden_size
  shapes = {
      "bert/embeddings/word_embeddings": [config.vocab_size, h],
      "bert/embeddings/token_type_embeddings": [config.type_vocab_size, h],
      "bert/embeddings/position_embeddings": [config.max_position_embeddings, h],
      "bert/embeddings/LayerNorm/beta": [h],
      "bert/embeddings/LayerNorm/gamma": [h],
      "bert/pooler/dense/kernel": [h, h],
      "bert/pooler/dense/bias": [h],
  }
  for i in range(config.num_hidden_layers):
    p = "bert/encoder/layer_%d/" % i
    for part in ("query", "key", "value"):
      shapes[p + "attention/self/%s/kernel" % part] = [h, h]
      shapes[p + "attention/self/%s/bias" % part] = [h]
    shapes[p + "attention/output/dense/kernel"] = [h, h]
    shapes[p + "attention/output/dense/bias"] = [h]
    shapes[p + "attention/output/LayerNorm/beta"] = [h]
    shapes[p + "attention/output/LayerNorm/gamma"] = [h]
    shapes[p + "intermediate/dense/kernel"] = [h, config.intermediate_size]
    shapes[p + "intermediate/dense/bias"] = [config.intermediate_size]
    shapes[p + "output/dense/kernel"] = [config.intermediate_size, h]
    shapes[p + "output/dense/bias"] = [h]
    shapes[p + "output/LayerNorm/beta"] = [h]
    shapes[p + "output/LayerNorm/gamma"] = [h]
  return shapes


def random_weights(config, seed):
  """Random float32 weights for every `bert/` variable.

  LayerNorm gammas are around 1 and betas, biases around 0 but not equal to
  them, so a test notices if any of them is ignored.
  """
  rng = np.random.RandomState(seed)
  weights = {}
  for name, shape in sorted(variable_shapes(config).items()):
    if name.endswith("/gamma"):
      value = 1.0 + 0.1 * rng.randn(*shape)
    elif name.endswith("/beta") or name.endswith("/bias"):
      value = 0.1 * rng.randn(*shape)
    else:
      value = 0.3 * rng.randn(*shape)
    weights[name] = value.astype(np.float32)
  return weights
