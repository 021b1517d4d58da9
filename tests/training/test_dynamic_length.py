# coding=utf-8
"""Batches padded only to their longest example give today's results: the same training
updates for the classifier and pretraining, the same SQuAD loss and span logits."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu.data import tfrecord_io
from bert_mgpu.pretraining import model as pretraining_model
from bert_mgpu.squad import model as squad_model
from bert_mgpu.training import run_settings
from bert_mgpu.training import runner
import modeling
from tiny_model import (FEATURE_SPEC, SEQ, TINY_CONFIG, classifier_model_fn, cpu_plan,  # pylint: disable=g-multiple-import
                        write_records)


def short_texts(rng, n):
  """A classifier batch whose real lengths are 2..5 of SEQ = 8 positions."""
  lengths = rng.randint(2, 6, size=n)
  input_mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
  return {
      "input_ids": rng.randint(1, TINY_CONFIG.vocab_size, size=[n, SEQ]).astype(np.int32)
                   * input_mask,
      "input_mask": input_mask,
      "segment_ids": ((rng.rand(n, SEQ) > 0.5) * input_mask).astype(np.int32),
      "label_ids": rng.randint(0, 3, size=[n]).astype(np.int32),
  }


def test_trim_to_longest_cuts_to_the_longest_rounded_up():
  mask = np.zeros([3, 16], np.int32)
  mask[0, :5] = mask[1, :3] = mask[2, :1] = 1
  with tf.Graph().as_default(), tf.Session() as sess:
    features = {"input_mask": tf.constant(mask), "input_ids": tf.constant(mask * 7),
                "label_ids": tf.constant([1, 2, 3])}
    exact, rounded = sess.run([tfrecord_io.trim_to_longest(features),
                               tfrecord_io.trim_to_longest(features, length_multiple=8)])
  assert exact["input_ids"].shape == (3, 5) and rounded["input_ids"].shape == (3, 8)
  np.testing.assert_array_equal(exact["input_mask"], mask[:, :5])
  np.testing.assert_array_equal(exact["label_ids"], [1, 2, 3])


def initial_checkpoint(tmp_path):
  """The tiny classifier's initial weights, so that every run starts from the same ones
  (initializers draw their seeds from the graph's op count, which the input ops change)."""
  path = str(tmp_path / "init" / "model.ckpt")
  with tf.Graph().as_default():
    tf.set_random_seed(3)
    features = short_texts(np.random.RandomState(0), 2)
    classifier_model_fn()({k: tf.constant(v) for k, v in features.items()}, False)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      tf.train.Saver().save(sess, path, write_meta_graph=False)
  return path


def final_weights(tmp_path, name, length_multiple, learning_rate=1e-2):
  record_file = str(tmp_path / "train.tf_record")
  config = run_settings.RunConfig(output_dir=str(tmp_path / name), n_gpus=2, train_batch_size=4,
                                  num_train_steps=4, learning_rate=learning_rate, random_seed=3,
                                  init_checkpoint=initial_checkpoint(tmp_path), plan=cpu_plan(2))
  checkpoint = runner.train(config, classifier_model_fn(), lambda skip: tfrecord_io.make_dataset(
      [record_file], FEATURE_SPEC, 8, True, seed=5, skip_batches=skip,
      length_multiple=length_multiple))
  reader = tf.train.load_checkpoint(checkpoint)
  return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


def test_classifier_training_is_the_same_with_batches_cut_to_their_longest(tmp_path):
  write_records(str(tmp_path / "train.tf_record"), short_texts(np.random.RandomState(1), 32))
  fixed = final_weights(tmp_path, "fixed", None)
  trimmed = final_weights(tmp_path, "trimmed", 1)
  for name in fixed:
    np.testing.assert_allclose(trimmed[name], fixed[name], rtol=1e-5, atol=1e-6, err_msg=name)
  # The comparison can fail: another learning rate ends clearly elsewhere.
  other = final_weights(tmp_path, "other", 1, learning_rate=2e-2)
  assert max(np.abs(other[n] - fixed[n]).max() for n in fixed) > 1e-3


def model_outputs(model_fn, features, seq_length):
  """Builds model_fn on `features` cut to seq_length; returns its outputs (fresh graph,
  the same seeds, so the same initial weights)."""
  with tf.Graph().as_default():
    tf.set_random_seed(7)
    cut = {name: (value[:, :seq_length] if name in tfrecord_io.SEQUENCE_FEATURES else value)
           for name, value in features.items()}
    outputs = model_fn({k: tf.constant(v) for k, v in cut.items()}, False)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      return sess.run(outputs)


def test_pretraining_loss_is_the_same_with_the_batch_cut_to_its_longest():
  rng = np.random.RandomState(2)
  features = short_texts(rng, 4)
  del features["label_ids"]
  features.update(masked_lm_positions=np.array([[1, 0], [1, 2], [0, 1], [1, 1]], np.int32),
                  masked_lm_ids=rng.randint(1, 40, size=[4, 2]).astype(np.int32),
                  masked_lm_weights=np.array([[1, 0], [1, 1], [1, 1], [1, 0]], np.float32),
                  next_sentence_labels=np.array([[0], [1], [1], [0]], np.int32))
  model_fn = pretraining_model.create_model_fn(TINY_CONFIG)
  longest = features["input_mask"].sum(axis=1).max()
  full, cut = model_outputs(model_fn, features, SEQ), model_outputs(model_fn, features, longest)
  assert longest < SEQ
  np.testing.assert_allclose(cut["loss"], full["loss"], rtol=1e-5)
  np.testing.assert_allclose(cut["masked_lm_log_probs"], full["masked_lm_log_probs"],
                             rtol=1e-5, atol=1e-6)


def test_squad_span_loss_ignores_padding_so_cutting_changes_nothing():
  rng = np.random.RandomState(4)
  features = short_texts(rng, 4)
  del features["label_ids"]
  features.update(unique_ids=np.arange(4, dtype=np.int32),
                  start_positions=np.array([1, 0, 1, 1], np.int32),
                  end_positions=np.array([1, 1, 1, 1], np.int32))
  model_fn = squad_model.create_model_fn(TINY_CONFIG, max_seq_length=SEQ)
  longest = features["input_mask"].sum(axis=1).max()
  full, cut = model_outputs(model_fn, features, SEQ), model_outputs(model_fn, features, longest)
  np.testing.assert_allclose(cut["loss"], full["loss"], rtol=1e-5)
  # Padded back to max_seq_length, so prediction batches of any length concatenate.
  assert cut["start_logits"].shape == (4, SEQ)
  real = features["input_mask"].astype(bool)
  np.testing.assert_allclose(cut["start_logits"][real], full["start_logits"][real], rtol=1e-5,
                             atol=1e-5)
  assert np.all(full["start_logits"][~real] <= squad_model.PADDING_LOGIT + 1.0)


@pytest.mark.parametrize("seq_length", [5, 8])
def test_bert_accepts_a_dynamic_sequence_length(seq_length):
  with tf.Graph().as_default():
    input_ids = tf.placeholder(tf.int32, [None, None])
    model = modeling.BertModel(TINY_CONFIG, False, input_ids)
    assert model.get_sequence_output().shape.as_list() == [None, None, TINY_CONFIG.hidden_size]
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      output = sess.run(model.get_sequence_output(),
                        {input_ids: np.ones([2, seq_length], np.int32)})
  assert output.shape == (2, seq_length, TINY_CONFIG.hidden_size)


def test_a_dynamic_sequence_longer_than_the_position_table_fails_when_run():
  with tf.Graph().as_default():
    input_ids = tf.placeholder(tf.int32, [None, None])
    output = modeling.BertModel(TINY_CONFIG, False, input_ids).get_sequence_output()
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      with pytest.raises(tf.errors.InvalidArgumentError):
        sess.run(output, {input_ids: np.ones([1, TINY_CONFIG.max_position_embeddings + 1],
                                             np.int32)})
