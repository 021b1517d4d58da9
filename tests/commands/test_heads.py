# coding=utf-8
"""The task units' heads (bert_mgpu/<task>/model.py) are importable together, without
flags, and build on features alone (what the benchmark, the export and the predictor
need)."""

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import model as classifier_model
from bert_mgpu.pretraining import model as pretraining_model
from bert_mgpu.squad import model as squad_model
import modeling

CONFIG = modeling.BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1,
                             num_attention_heads=2, intermediate_size=32,
                             max_position_embeddings=32)
BATCH, SEQ = 3, 10


def text_features(with_labels):
  rng = np.random.RandomState(0)
  features = {"input_ids": tf.constant(rng.randint(0, 30, [BATCH, SEQ]), tf.int32),
              "input_mask": tf.ones([BATCH, SEQ], tf.int32),
              "segment_ids": tf.zeros([BATCH, SEQ], tf.int32)}
  if with_labels:
    features["label_ids"] = tf.constant([0, 1, 2], tf.int32)
  return features


def run(outputs):
  with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    return sess.run(outputs)


def test_importing_the_scripts_defines_no_flags():
  names = set(tf.flags.FLAGS)
  for flag in ("n_gpus", "data_dir", "train_file", "input_file", "max_predictions_per_seq"):
    assert flag not in names


def test_classifier_head_predicts_without_labels():
  with tf.Graph().as_default():
    model_fn = classifier_model.create_model_fn(CONFIG, num_labels=3)
    outputs = model_fn(text_features(with_labels=False), False)
    assert sorted(outputs) == ["probabilities"]
    values = run(outputs)
  assert values["probabilities"].shape == (BATCH, 3)
  np.testing.assert_allclose(values["probabilities"].sum(axis=1), 1.0, rtol=1e-5)


def test_classifier_head_with_labels_has_a_loss():
  with tf.Graph().as_default():
    outputs = classifier_model.create_model_fn(CONFIG, 3)(text_features(True), True)
    values = run(outputs)
  assert np.isfinite(values["loss"]) and values["per_example_loss"].shape == (BATCH,)
  np.testing.assert_allclose(values["loss"], values["per_example_loss"].mean(), rtol=1e-5)


def test_squad_and_pretraining_heads_build():
  with tf.Graph().as_default():
    features = dict(text_features(False), unique_ids=tf.constant([1, 2, 3], tf.int32))
    squad = run(squad_model.create_model_fn(CONFIG)(features, False))
  assert squad["start_logits"].shape == squad["end_logits"].shape == (BATCH, SEQ)
  assert "loss" not in squad
  with tf.Graph().as_default():
    features = dict(text_features(False),
                    masked_lm_positions=tf.constant([[1, 2]] * BATCH, tf.int32),
                    masked_lm_ids=tf.constant([[4, 5]] * BATCH, tf.int32),
                    masked_lm_weights=tf.ones([BATCH, 2]),
                    next_sentence_labels=tf.constant([[0], [1], [0]], tf.int32))
    pretraining = run(pretraining_model.create_model_fn(CONFIG)(features, True))
  assert np.isfinite(pretraining["loss"])
