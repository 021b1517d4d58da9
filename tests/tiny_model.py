# coding=utf-8
"""A tiny BERT classifier and random data for the tests of multigpu.py and runner.py."""

import numpy as np
import tensorflow.compat.v1 as tf

import modeling
import multigpu
import tfrecord_io

SEQ = 8
NUM_LABELS = 3
TINY_CONFIG = modeling.BertConfig(
    vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
    intermediate_size=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    max_position_embeddings=16, type_vocab_size=2)


def classifier_model_fn(config=TINY_CONFIG, nan_loss=False, nan_gradient=False):
  """A tiny BERT classifier: the same kind of model the run scripts build."""
  def model_fn(features, is_training):
    model = modeling.BertModel(config, is_training, features["input_ids"],
                               features["input_mask"], features["segment_ids"])
    pooled = model.get_pooled_output()  # [batch, hidden]
    weights = tf.get_variable("output_weights", [NUM_LABELS, config.hidden_size],
                              initializer=tf.truncated_normal_initializer(stddev=0.02))
    bias = tf.get_variable("output_bias", [NUM_LABELS], initializer=tf.zeros_initializer())
    # [batch, labels], float32 whatever the compute precision (as the run scripts' heads).
    logits = tf.cast(tf.matmul(pooled, weights, transpose_b=True) + bias, tf.float32)
    log_probs = tf.nn.log_softmax(logits)
    per_example_loss = -tf.reduce_sum(
        tf.one_hot(features["label_ids"], NUM_LABELS) * log_probs, axis=-1)  # [batch]
    loss = tf.reduce_mean(per_example_loss)
    if nan_loss:
      loss = loss * np.nan
    if nan_gradient:
      # Adds exactly 0 to the loss, but its gradient is 0/0: the update writes NaN.
      loss += tf.sqrt(tf.reduce_sum(tf.square(bias - tf.stop_gradient(bias))))
    return {"loss": loss, "per_example_loss": per_example_loss,
            "probabilities": tf.nn.softmax(logits), "label_ids": features["label_ids"]}
  return model_fn


def random_batch(rng, n):
  input_mask = np.ones([n, SEQ], np.int32)
  for row in range(n):
    input_mask[row, rng.randint(3, SEQ + 1):] = 0
  return {
      "input_ids": rng.randint(1, TINY_CONFIG.vocab_size, size=[n, SEQ]).astype(np.int32),
      "input_mask": input_mask,
      "segment_ids": (rng.rand(n, SEQ) > 0.5).astype(np.int32),
      "label_ids": rng.randint(0, NUM_LABELS, size=[n]).astype(np.int32),
  }


def cpu_plan(num_towers):
  return multigpu.plan_devices(num_towers, visible_gpus=0)


FEATURE_SPEC = {
    "input_ids": tf.FixedLenFeature([SEQ], tf.int64),
    "input_mask": tf.FixedLenFeature([SEQ], tf.int64),
    "segment_ids": tf.FixedLenFeature([SEQ], tf.int64),
    "label_ids": tf.FixedLenFeature([], tf.int64),
}


def write_records(path, batch):
  with tf.io.TFRecordWriter(path) as writer:
    for i in range(len(batch["label_ids"])):
      feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(
          value=np.atleast_1d(v[i]).tolist())) for k, v in batch.items()}
      writer.write(tf.train.Example(features=tf.train.Features(feature=feature))
                   .SerializeToString())


def records_file(tmp_path, seed, num_examples):
  """Writes random_batch(seed, num_examples) as TFRecords; returns the path."""
  path = str(tmp_path / "data.tf_record")
  write_records(path, random_batch(np.random.RandomState(seed), num_examples))
  return path


def train_dataset_fn(path, global_batch):
  return lambda skip: tfrecord_io.make_dataset([path], FEATURE_SPEC, global_batch, True, seed=5,
                                           skip_batches=skip)
