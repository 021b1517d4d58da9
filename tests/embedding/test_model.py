# coding=utf-8
"""Tests of bert_mgpu/embedding/model.py: each pooling against a direct computation from
modeling.BertModel's outputs in the same graph (the same variables, each text run alone
with no padding at all, the pooling done in NumPy), the model_fn's outputs, and
unsupervised SimCSE's two copies of a one-text record: identical without dropout,
different with it.
"""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu.distributed import global_batch
from bert_mgpu.embedding import losses
from bert_mgpu.embedding import model as embedding_model
import modeling

SEQ = 8
HIDDEN = 16


def tiny_config(dropout=0.0):
  # initializer_range 0.3: clearly different outputs per token and per layer.
  return modeling.BertConfig(
      vocab_size=30, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=2,
      intermediate_size=32, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
      max_position_embeddings=16, type_vocab_size=2, initializer_range=0.3)


def records_of(lengths, seed=0):
  """Features of records [batch, texts, SEQ]: text (b, t) has lengths[b][t] tokens,
  [CLS] ... [SEP], then padding; text_ids [batch, 2 * texts] (distinct)."""
  rng = np.random.RandomState(seed)
  batch, texts = len(lengths), len(lengths[0])
  input_ids = np.zeros([batch, texts, SEQ], np.int32)
  input_mask = np.zeros([batch, texts, SEQ], np.int32)
  for b in range(batch):
    for t in range(texts):
      n = lengths[b][t]
      input_ids[b, t, :n] = [2] + list(rng.randint(5, 30, size=n - 2)) + [3]
      input_mask[b, t, :n] = 1
  text_ids = np.arange(batch * texts * 2, dtype=np.int32).reshape([batch, texts * 2])
  return {"input_ids": input_ids, "input_mask": input_mask,
          "segment_ids": np.zeros_like(input_ids), "text_ids": text_ids}


def constants(features):
  return {k: tf.constant(v) for k, v in features.items()}


LENGTHS = [[3, 8], [5, 4], [8, 2]]  # padding in all but two texts


@pytest.fixture(scope="module")
def pooled_and_direct():
  """Per pooling: the model_fn's inference embeddings [3, 2, hidden], and per text the
  direct BertModel outputs of that text alone (sequence, first layer, pooled, pooler
  weights), all in one graph sharing the variables."""
  features = records_of(LENGTHS)
  config = tiny_config()
  with tf.Graph().as_default():
    tf.set_random_seed(3)
    outputs = {}
    for pooling in embedding_model.POOLINGS:
      with tf.variable_scope(tf.get_variable_scope(), reuse=tf.AUTO_REUSE):
        model_fn = embedding_model.create_model_fn(config, pooling, texts=2)
        outputs[pooling] = model_fn(constants(features), False)
    direct = {}
    with tf.variable_scope(tf.get_variable_scope(), reuse=True):
      for b, row in enumerate(LENGTHS):
        for t, n in enumerate(row):
          model = modeling.BertModel(
              config, False, tf.constant(features["input_ids"][b, t, :n][None]),
              tf.constant(features["input_mask"][b, t, :n][None]),
              tf.constant(features["segment_ids"][b, t, :n][None]), scope="bert")
          layers = model.get_all_encoder_layers()
          direct[b, t] = {"sequence": model.get_sequence_output()[0],
                          "first": layers[0][0], "last": layers[-1][0],
                          "pooled": model.get_pooled_output()[0]}
      kernel = tf.get_variable("bert/pooler/dense/kernel")
      bias = tf.get_variable("bert/pooler/dense/bias")
    assert len(tf.trainable_variables()) == len(
        [v for v in tf.trainable_variables() if v.op.name.startswith("bert/")])
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      return sess.run((outputs, direct, kernel, bias))


def expected_embedding(pooling, direct, kernel, bias):
  sequence = direct["sequence"].astype(np.float64)
  if pooling == embedding_model.MEAN:
    return sequence.mean(axis=0)  # the text alone: every position is a token
  if pooling == embedding_model.CLS:
    return sequence[0]
  if pooling == embedding_model.POOLER:
    return np.tanh(sequence[0].dot(kernel) + bias)
  return ((direct["first"] + direct["last"]) / 2.0).astype(np.float64).mean(axis=0)


@pytest.mark.parametrize("pooling", embedding_model.POOLINGS)
def test_pooling_matches_bert_outputs_of_the_text_alone(pooled_and_direct, pooling):
  outputs, direct, kernel, bias = pooled_and_direct
  embeddings = outputs[pooling]["embeddings"]
  assert embeddings.shape == (3, 2, HIDDEN) and embeddings.dtype == np.float32
  for (b, t), values in direct.items():
    np.testing.assert_allclose(embeddings[b, t], expected_embedding(pooling, values, kernel,
                                                                    bias),
                               rtol=1e-5, atol=1e-5, err_msg="%s text (%d, %d)" % (pooling, b, t))
  # The pooler's own output is that formula too.
  np.testing.assert_allclose(outputs[embedding_model.POOLER]["embeddings"][0, 0],
                             direct[0, 0]["pooled"], rtol=1e-5, atol=1e-6)


def test_the_poolings_differ_and_padding_would_matter(pooled_and_direct):
  outputs, direct, _, _ = pooled_and_direct
  vectors = {p: outputs[p]["embeddings"] for p in embedding_model.POOLINGS}
  for a in embedding_model.POOLINGS:
    for b in embedding_model.POOLINGS:
      if a < b:
        assert np.max(np.abs(vectors[a] - vectors[b])) > 1e-2, (a, b)
  # Text (0, 0) has 3 tokens and 5 pads: the mean over all 8 positions of its padded
  # sequence is another vector, so the test would see padding counted.
  sequence = direct[0, 0]["sequence"]
  assert sequence.shape == (3, HIDDEN)
  assert np.max(np.abs(vectors[embedding_model.MEAN][0, 0] - sequence.sum(0) / SEQ)) > 1e-2


def test_inference_outputs_carry_the_features():
  features = records_of([[4, 6, 3], [5, 5, 2]])
  features["score"] = np.array([0.5, 4.0], np.float32)
  with tf.Graph().as_default():
    model_fn = embedding_model.create_model_fn(tiny_config(), embedding_model.MEAN, texts=3)
    outputs = model_fn(constants(features), False)
    assert outputs["embeddings"].shape.as_list() == [2, 3, HIDDEN]
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      values = sess.run(outputs)
  assert sorted(values) == ["embeddings", "score", "text_ids"]
  np.testing.assert_array_equal(values["score"], features["score"])
  np.testing.assert_array_equal(values["text_ids"],
                                features["text_ids"].reshape([2, 3, 2]).astype(np.float32))


@pytest.mark.parametrize("loss, rows", [
    (losses.COSENT, ["score", "texts"]), (losses.IN_BATCH, ["text_ids", "texts"]),
    (losses.SOFTMAX, ["example_loss"])])
def test_training_outputs_are_the_rows_of_the_global_batch_loss(loss, rows):
  # The training records of each loss (task.py's feature spec): a score for cosent, a
  # label for softmax.
  features = records_of([[4, 6], [5, 5], [3, 3]])
  if loss == losses.COSENT:
    features["score"] = np.array([0.0, 1.0, 1.0], np.float32)
  if loss == losses.SOFTMAX:
    features["label_ids"] = np.array([0, 1, 1], np.int32)
  with tf.Graph().as_default():
    model_fn = embedding_model.create_model_fn(tiny_config(), embedding_model.CLS, texts=2,
                                               loss=loss, num_labels=2)
    outputs = model_fn(constants(features), True)
    assert global_batch.has_batch_loss(outputs)
    assert sorted(outputs[global_batch.ROWS]) == rows
    # Static batch rows: the workers join static shapes.
    for tensor in outputs[global_batch.ROWS].values():
      assert tensor.shape[0] == 3
    loss_value = outputs[global_batch.BATCH_LOSS](outputs[global_batch.ROWS])
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      assert np.isfinite(sess.run(loss_value))
    names = [v.op.name for v in tf.trainable_variables()]
    assert (embedding_model.SOFTMAX_VARIABLES[0] in names) == (loss == losses.SOFTMAX)


def unsupervised_rows(dropout, seed):
  """Training rows of one-text records read as texts = 2, and the inference embeddings of
  the same records with the same weights."""
  features = records_of([[5], [8], [3], [6]], seed=seed)
  assert features["text_ids"].shape == (4, 2)
  with tf.Graph().as_default():
    tf.set_random_seed(seed)
    model_fn = embedding_model.create_model_fn(tiny_config(dropout), embedding_model.MEAN,
                                               texts=2, loss=losses.IN_BATCH)
    with tf.variable_scope(tf.get_variable_scope(), reuse=tf.AUTO_REUSE):
      rows = model_fn(constants(features), True)[global_batch.ROWS]
      inference = model_fn(constants(features), False)["embeddings"]
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      return sess.run((rows, inference))


def test_unsupervised_copies_are_identical_without_dropout():
  rows, inference = unsupervised_rows(0.0, seed=1)
  texts = rows["texts"]
  assert texts.shape == (4, 2, HIDDEN) and inference.shape == (4, 1, HIDDEN)
  np.testing.assert_allclose(texts[:, 0], texts[:, 1], rtol=0, atol=1e-6)
  np.testing.assert_allclose(texts[:, 0], inference[:, 0], rtol=1e-5, atol=1e-6)
  # Both copies carry the record's text id: each anchor's positive is its own copy.
  np.testing.assert_array_equal(rows["text_ids"][:, 0], rows["text_ids"][:, 1])
  assert len(set(map(tuple, rows["text_ids"][:, 0]))) == 4


@pytest.mark.parametrize("dropout", [0.1, 0.3])
def test_unsupervised_copies_differ_with_dropout(dropout):
  rows, inference = unsupervised_rows(dropout, seed=2)
  texts = rows["texts"]
  for b in range(4):  # every record's two copies got their own dropout masks
    assert np.max(np.abs(texts[b, 0] - texts[b, 1])) > 1e-3, b
  # Inference has no dropout: neither copy is the inference embedding.
  assert np.max(np.abs(inference[:, 0] - texts[:, 0])) > 1e-3
  assert np.max(np.abs(inference[:, 0] - texts[:, 1])) > 1e-3
  np.testing.assert_array_equal(rows["text_ids"][:, 0], rows["text_ids"][:, 1])
