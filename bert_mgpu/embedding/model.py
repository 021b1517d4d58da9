# coding=utf-8
"""The sentence encoder: BERT, a pooling, and (training) the rows of the global-batch loss.

run_embedding_mgpu.py trains it (bert_mgpu/embedding/task.py). A record holds several
texts, [batch, texts, seq]: a pair (2), a triplet (2 + hard negatives), or a sentence (1),
which unsupervised training encodes twice (2 rows, each with its own dropout masks). Every
text goes through the same BERT as one row of [batch * texts, seq].
"""

import tensorflow.compat.v1 as tf

from bert_mgpu.distributed import global_batch
from bert_mgpu.embedding import losses
import modeling

MEAN, CLS, FIRST_LAST_AVG, POOLER = "mean", "cls", "first_last_avg", "pooler"
POOLINGS = (MEAN, CLS, FIRST_LAST_AVG, POOLER)
# Beside a checkpoint converted from sentence-transformers' format (convert_checkpoint.py):
# {"pooling", "normalize_embeddings", "max_seq_length"}, which a run starting from it takes.
START_SETTINGS_FILE = "embedding_settings.json"

# Sentence-BERT's training-only classifier (--loss=softmax), laid out as Google's
# classifier head: [labels, 3 * hidden] and [labels].
SOFTMAX_SCOPE = "embedding_softmax"
SOFTMAX_VARIABLES = (SOFTMAX_SCOPE + "/output_weights", SOFTMAX_SCOPE + "/output_bias")


def _masked_mean(sequence, mask):
  """sequence [rows, seq, hidden], mask [rows, seq] (1 on tokens) -> [rows, hidden]."""
  mask = tf.cast(mask, sequence.dtype)[:, :, None]
  return tf.reduce_sum(sequence * mask, axis=1) / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)


def pooled_embeddings(bert_config, input_ids, input_mask, segment_ids, is_training, pooling):
  """BERT's vector of each row.

  Args:
    bert_config: modeling.BertConfig.
    input_ids, input_mask, segment_ids: int32 [rows, seq].
    is_training: dropout on.
    pooling: MEAN (the tokens' mean of the last layer), CLS (its [CLS] vector), POOLER
      ([CLS] through BERT's pooler, dense + tanh), FIRST_LAST_AVG (the tokens' mean of
      the first and last layers' average, as text2vec's first-last-avg).

  Returns:
    float32 [rows, hidden].
  """
  model = modeling.BertModel(config=bert_config, is_training=is_training, input_ids=input_ids,
                             input_mask=input_mask, token_type_ids=segment_ids)
  if pooling == CLS:
    pooled = model.get_sequence_output()[:, 0]
  elif pooling == POOLER:
    pooled = model.get_pooled_output()
  elif pooling == MEAN:
    pooled = _masked_mean(model.get_sequence_output(), input_mask)
  elif pooling == FIRST_LAST_AVG:
    layers = model.get_all_encoder_layers()
    pooled = _masked_mean((layers[0] + layers[-1]) / 2.0, input_mask)
  else:
    raise ValueError("unknown pooling %r" % pooling)
  return tf.cast(pooled, tf.float32)


def _record_embeddings(bert_config, features, texts, is_training, pooling):
  """[batch, texts, hidden] float32 of the features' [batch, record texts, seq] inputs; a
  one-text record read as `texts` = 2 is encoded twice (unsupervised SimCSE)."""
  inputs = [features[name] for name in ("input_ids", "input_mask", "segment_ids")]
  if record_texts_of(features) == 1 and texts == 2:
    inputs = [tf.tile(t, [1, 2, 1]) for t in inputs]
  seq = tf.shape(inputs[0])[-1]
  rows = [tf.reshape(t, [-1, seq]) for t in inputs]  # [batch * texts, seq]
  pooled = pooled_embeddings(bert_config, rows[0], rows[1], rows[2], is_training, pooling)
  embeddings = tf.reshape(pooled, [-1, texts, bert_config.hidden_size])
  embeddings.set_shape([features["input_ids"].shape[0], texts, bert_config.hidden_size])
  return embeddings  # static batch when the input's is: workers join static shapes


def record_texts_of(features):
  """The texts of each record (static: the token features' axis may be cut to the batch's
  real texts by tfrecord_io.trim_to_longest, the hashes' is not)."""
  return int(features["text_ids"].shape[1]) // 2


def text_ids_of(features, texts):
  """float32 [batch, texts, 2]: each text's hash halves (one-text records read twice)."""
  record_texts = record_texts_of(features)
  ids = tf.reshape(tf.cast(features["text_ids"], tf.float32), [-1, record_texts, 2])
  ids.set_shape([features["text_ids"].shape[0], record_texts, 2])
  return tf.tile(ids, [1, texts // record_texts, 1])


def _softmax_example_loss(bert_config, embeddings, label_ids, num_labels, is_training):
  """Sentence-BERT's classifier's cross-entropy per pair, float32 [batch]."""
  u, v = embeddings[:, 0], embeddings[:, 1]
  features = tf.concat([u, v, tf.abs(u - v)], axis=-1)  # [batch, 3 * hidden]
  with tf.variable_scope(SOFTMAX_SCOPE):
    weights = tf.get_variable("output_weights", [num_labels, 3 * bert_config.hidden_size],
                              initializer=modeling.create_initializer(0.02))
    bias = tf.get_variable("output_bias", [num_labels], initializer=tf.zeros_initializer())
  if is_training:
    features = modeling.dropout(features, bert_config.hidden_dropout_prob)
  logits = tf.nn.bias_add(tf.matmul(tf.cast(features, weights.dtype), weights,
                                    transpose_b=True), bias)
  return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label_ids,
                                                        logits=tf.cast(logits, tf.float32))


def create_model_fn(bert_config, pooling, texts, loss=None, num_labels=0, cosent_scale=20.0,
                    temperature=0.05):
  """Returns model_fn(features, is_training).

  Args:
    bert_config: modeling.BertConfig.
    pooling: one of POOLINGS.
    texts: the texts of a training record as the loss reads them: 2 for pairs and for
      sentences (each encoded twice), 2 + hard negatives for triplets.
    loss: one of losses.LOSSES when training.
    num_labels: the softmax loss's classes.
    cosent_scale, temperature: the losses' lambda and tau.

  The model_fn's outputs:
    training: {"rows", "batch_loss"}, the global-batch loss's contract
      (bert_mgpu/distributed/global_batch.py; the rows: embedding/losses.py);
    inference: "embeddings" float32 [batch, record texts, hidden], unnormalised; with the
      features, "score", "text_ids" and (softmax with labels) "example_loss".
  """
  def model_fn(features, is_training):
    count = texts if is_training else record_texts_of(features)
    embeddings = _record_embeddings(bert_config, features, count, is_training, pooling)
    rows = {"texts": embeddings, "text_ids": text_ids_of(features, count)}
    if "score" in features:
      rows["score"] = tf.cast(features["score"], tf.float32)
    if loss == losses.SOFTMAX and "label_ids" in features:
      rows["example_loss"] = _softmax_example_loss(bert_config, embeddings,
                                                   features["label_ids"], num_labels,
                                                   is_training)
    if not is_training:
      outputs = dict(rows)
      outputs["embeddings"] = outputs.pop("texts")
      return outputs
    if loss == losses.SOFTMAX:
      rows = {"example_loss": rows["example_loss"]}
    elif loss == losses.COSENT:
      rows.pop("text_ids")
    return {global_batch.ROWS: rows,
            global_batch.BATCH_LOSS: losses.batch_loss_fn(loss, cosent_scale, temperature)}
  return model_fn
