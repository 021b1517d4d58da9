# coding=utf-8
"""A tiny BERT classifier and random data for the tests of multigpu.py and runner.py."""

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu.data import tfrecord_io
from bert_mgpu.training import weight_averages
import modeling
import multigpu

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


# The optimizer names the tests parametrize: build_training's, and AdamW with bias correction.
ADAMW_BIAS_CORRECTED = "adamw_bias_corrected"
OPTIMIZERS = ("adamw", "radam", "lamb", ADAMW_BIAS_CORRECTED)


def batch_placeholders(batch):
  """Placeholders [None, ...] named and shaped like a batch's arrays: float32 for float
  arrays, else int32 (a random_batch's)."""
  return {k: tf.placeholder(tf.float32 if v.dtype.kind == "f" else tf.int32,
                            [None] + list(v.shape[1:]), name=k)
          for k, v in batch.items()}


def train_steps(plan, batches, optimizer, initial_values=None, accumulation_steps=1,
                layerwise_lr_decay=1.0, ema_decay=0.0, attack=None,
                ema_rule=weight_averages.BIAS_CORRECTED, weights_after_each=None,
                model_fn=None):
  """Builds the training graph of `plan` and applies one update per batch (with
  accumulation: the batch split into micro-batches). `optimizer` is one of OPTIMIZERS.
  With ema_decay, the weight averages start from the initial values, as in a run, and
  follow ema_rule. A list given as weights_after_each receives the trainable weights (as
  `final` below) after each update. model_fn: the towers' model (None: the tiny classifier).

  Returns:
    (initial, final, all_values, global_step): initial and final map the plain names of the
    trainable variables (replica 0's, with replicated variables) to arrays; all_values maps
    every global variable's own name (replicas' copies and slots too) to its final value.
  """
  with tf.Graph().as_default():
    tf.set_random_seed(1)
    placeholders = batch_placeholders(batches[0])
    corrected = optimizer == ADAMW_BIAS_CORRECTED
    ops = multigpu.build_training(plan, model_fn or classifier_model_fn(), placeholders, 1e-2, 100, 0,
                                  "adamw" if corrected else optimizer,
                                  accumulation_steps=accumulation_steps,
                                  adam_bias_correction=corrected,
                                  layerwise_lr_decay=layerwise_lr_decay,
                                  ema_decay=ema_decay, ema_rule=ema_rule, attack=attack)
    start_averages = weight_averages.build_start()
    sync = multigpu.build_start_sync(plan)
    trainable = set(v.op.name for v in tf.trainable_variables())
    saved = [v for v in multigpu.saveable_variables() if v.op.name in trainable]
    with tf.Session(config=plan.session_config()) as sess:
      sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
      if initial_values is not None:
        for var in saved:
          var.load(initial_values[var.op.name], sess)
      if sync is not None:
        sess.run(sync)
      if start_averages is not None:
        sess.run(start_averages)
      initial = dict(zip([v.op.name for v in saved], sess.run(saved)))
      for batch in batches:
        micro = np.array_split(np.arange(len(next(iter(batch.values())))),
                               accumulation_steps)
        if accumulation_steps > 1:
          for rows in micro:
            sess.run(ops.accumulate_op, {placeholders[k]: v[rows] for k, v in batch.items()})
          sess.run(ops.train_op)
        else:
          sess.run(ops.train_op, {placeholders[k]: v for k, v in batch.items()})
        if weights_after_each is not None:
          weights_after_each.append(dict(zip(initial, sess.run(saved))))
      final = dict(zip(initial, sess.run(saved)))
      everything = tf.global_variables()
      replica_values = dict(zip([v.op.name for v in everything], sess.run(everything)))
      step = sess.run(ops.global_step)
  return initial, final, replica_values, step


def relative_update_difference(initial, final_a, final_b):
  """||update_a - update_b|| / ||update_a|| over all variables."""
  diff = sum(np.sum((final_a[k] - final_b[k]) ** 2) for k in initial)
  norm = sum(np.sum((final_a[k] - initial[k]) ** 2) for k in initial)
  assert norm > 0
  return np.sqrt(diff / norm)
