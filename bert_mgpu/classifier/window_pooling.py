# coding=utf-8
"""--long_text=windows in the model: BERT's pooled output of every window of a document
(long_text.document_windows), combined into one vector per document."""

import tensorflow.compat.v1 as tf

import modeling


def pooled_output_of_windows(bert_config, features, is_training, mode):
  """BERT's pooled output of every window, combined per document by pool_windows.

  Args:
    bert_config: modeling.BertConfig.
    features: input_ids, input_mask, segment_ids [batch, windows, seq].
    is_training: as for modeling.BertModel.
    mode: "max" or "mean".

  Returns:
    [batch, hidden].
  """
  shape = tf.shape(features["input_ids"])  # [batch, windows, seq]
  flat = {name: tf.reshape(features[name], [-1, shape[2]])  # [batch * windows, seq]
          for name in ("input_ids", "input_mask", "segment_ids")}
  model = modeling.BertModel(
      config=bert_config, is_training=is_training, input_ids=flat["input_ids"],
      input_mask=flat["input_mask"], token_type_ids=flat["segment_ids"])
  pooled = tf.reshape(model.get_pooled_output(),
                      [shape[0], shape[1], bert_config.hidden_size])
  window_mask = tf.reduce_max(features["input_mask"], axis=-1)  # [batch, windows]
  return pool_windows(pooled, window_mask, mode)


def pool_windows(pooled, window_mask, mode):
  """Combines each document's window vectors into one vector.

  Padded windows never win the max and do not count in the mean. The pooling runs in
  float32 (exact for max; a float32 sum for mean) and returns `pooled`'s dtype. A
  document without any real window (e.g. the rows that pad a short batch for the towers)
  gets zeros, not -inf or NaN.

  Args:
    pooled: float tensor [batch, windows, hidden] (float32, bfloat16 or float16).
    window_mask: tensor [batch, windows], 1 (or True) on real windows, 0 on padding;
      e.g. tf.reduce_max(input_mask, axis=-1) of input_mask [batch, windows, seq].
    mode: "max" or "mean".

  Returns:
    Tensor [batch, hidden] of pooled's dtype.

  Raises:
    ValueError: an unknown mode.
  """
  if mode not in ("max", "mean"):
    raise ValueError("window pooling must be max or mean, got %r" % (mode,))
  values = tf.cast(pooled, tf.float32)  # [batch, windows, hidden]
  mask = tf.cast(tf.cast(window_mask, tf.bool), tf.float32)[:, :, None]  # [batch, windows, 1]
  count = tf.reduce_sum(mask, axis=1)  # [batch, 1]
  if mode == "max":
    lowest = tf.fill(tf.shape(values), tf.float32.min)
    is_real = tf.broadcast_to(mask > 0, tf.shape(values))
    result = tf.reduce_max(tf.where(is_real, values, lowest), axis=1)  # [batch, hidden]
    result = tf.where(tf.broadcast_to(count > 0, tf.shape(result)), result,
                      tf.zeros_like(result))
  else:
    result = tf.reduce_sum(values * mask, axis=1) / tf.maximum(count, 1.0)
  return tf.cast(result, pooled.dtype)
