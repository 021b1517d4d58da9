# coding=utf-8
"""The pretraining heads of run_pretraining_mgpu.py: the masked LM (with its output weight
tied to bert/embeddings/word_embeddings) and next-sentence prediction.

The variables carry Google's names (cls/predictions/..., cls/seq_relationship/...), so the
checkpoints load in Google's scripts and in run_classifier_mgpu.py; fill_mask.py reads the
masked-LM head through masked_lm_log_probs().
"""

import tensorflow.compat.v1 as tf

import modeling

# The heads' variables by their names in transformers' BertForMaskedLM / BertForPreTraining
# (convert_checkpoint.py). A dense `kernel` is [in, out] here and [out, in] there; the
# masked LM's output weight is the word embedding table in both.
MASKED_LM_TRANSFORMERS_NAMES = {
    "cls/predictions/transform/dense/kernel": "cls.predictions.transform.dense.weight",
    "cls/predictions/transform/dense/bias": "cls.predictions.transform.dense.bias",
    "cls/predictions/transform/LayerNorm/gamma": "cls.predictions.transform.LayerNorm.weight",
    "cls/predictions/transform/LayerNorm/beta": "cls.predictions.transform.LayerNorm.bias",
    "cls/predictions/output_bias": "cls.predictions.bias",
}
NEXT_SENTENCE_TRANSFORMERS_NAMES = {
    "cls/seq_relationship/output_weights": "cls.seq_relationship.weight",
    "cls/seq_relationship/output_bias": "cls.seq_relationship.bias",
}


def gather_positions(sequence_tensor, positions):
  """Gathers the vectors at `positions` of each example.

  Args:
    sequence_tensor: float Tensor [batch, seq, width].
    positions: int Tensor [batch, num_positions], indexes into seq.

  Returns:
    float Tensor [batch * num_positions, width], example by example.
  """
  shape = modeling.get_shape_list(sequence_tensor, expected_rank=3)
  batch_size, seq_length, width = shape[0], shape[1], shape[2]
  # Each example's positions move by its offset in the flattened [batch * seq] rows.
  flat_offsets = tf.reshape(tf.range(batch_size, dtype=positions.dtype) * seq_length,
                            [-1, 1])  # [batch, 1]
  flat_positions = tf.reshape(positions + flat_offsets, [-1])  # [batch * num_positions]
  flat_sequence = tf.reshape(sequence_tensor, [-1, width])  # [batch * seq, width]
  return tf.gather(flat_sequence, flat_positions)


def masked_lm_log_probs(bert_config, sequence_output, embedding_table, positions):
  """The masked-LM head's log-probabilities over the vocab at `positions`.

  Args:
    bert_config: BertConfig.
    sequence_output: float Tensor [batch, seq, hidden].
    embedding_table: the word embedding variable [vocab, hidden] (the tied output weight).
    positions: int Tensor [batch, max_pred].

  Returns:
    float32 Tensor [batch * max_pred, vocab], example by example.
  """
  hidden = gather_positions(sequence_output, positions)  # [batch * max_pred, hidden]
  with tf.variable_scope("cls/predictions"):
    with tf.variable_scope("transform"):
      hidden = modeling.dense_layer(
          hidden, bert_config.hidden_size,
          activation=modeling.get_activation(bert_config.hidden_act),
          kernel_initializer=modeling.create_initializer(bert_config.initializer_range),
          name="dense")
      hidden = modeling.layer_norm(hidden)
    output_bias = tf.get_variable("output_bias", [bert_config.vocab_size],
                                  initializer=tf.zeros_initializer())
    # [batch * max_pred, vocab]; the softmax and the loss in float32 whatever the precision.
    logits = tf.cast(tf.nn.bias_add(tf.matmul(hidden, embedding_table, transpose_b=True),
                                    output_bias), tf.float32)
    return tf.nn.log_softmax(logits, axis=-1)


def masked_lm_head(bert_config, sequence_output, embedding_table, positions, label_ids,
                   label_weights):
  """The masked-LM head: transform, tied output projection, weighted loss.

  Args:
    bert_config: BertConfig.
    sequence_output: float Tensor [batch, seq, hidden].
    embedding_table: the word embedding variable [vocab, hidden] (the tied output weight).
    positions, label_ids: int Tensors [batch, max_pred].
    label_weights: float Tensor [batch, max_pred], 1.0 for real predictions, 0.0 padding.

  Returns:
    (loss scalar, label log-probabilities [batch, max_pred], predictions [batch, max_pred]).
  """
  batch_and_preds = modeling.get_shape_list(positions, expected_rank=2)
  log_probs = masked_lm_log_probs(bert_config, sequence_output, embedding_table, positions)
  flat_ids = tf.reshape(label_ids, [-1])
  one_hot = tf.one_hot(flat_ids, depth=bert_config.vocab_size, dtype=tf.float32)
  label_log_probs = tf.reduce_sum(one_hot * log_probs, axis=-1)  # [batch * max_pred]
  flat_weights = tf.reshape(tf.cast(label_weights, tf.float32), [-1])
  # Padding slots have weight 0; the 1e-5 keeps an all-padding batch finite.
  loss = -tf.reduce_sum(flat_weights * label_log_probs) / (tf.reduce_sum(flat_weights) + 1e-5)
  predictions = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
  return (loss, tf.reshape(label_log_probs, batch_and_preds),
          tf.reshape(predictions, batch_and_preds))


def next_sentence_head(bert_config, pooled_output, labels):
  """The next-sentence head: label 0 = B follows A, 1 = B is random.

  Args:
    bert_config: BertConfig.
    pooled_output: float Tensor [batch, hidden].
    labels: int Tensor [batch].

  Returns:
    (mean loss scalar, label log-probabilities [batch], predictions [batch]).
  """
  with tf.variable_scope("cls/seq_relationship"):
    output_weights = tf.get_variable(
        "output_weights", [2, bert_config.hidden_size],
        initializer=modeling.create_initializer(bert_config.initializer_range))
    output_bias = tf.get_variable("output_bias", [2], initializer=tf.zeros_initializer())
    logits = tf.cast(tf.nn.bias_add(tf.matmul(pooled_output, output_weights, transpose_b=True),
                                    output_bias), tf.float32)  # [batch, 2]
    log_probs = tf.nn.log_softmax(logits, axis=-1)
  label_log_probs = tf.reduce_sum(tf.one_hot(labels, depth=2, dtype=tf.float32) * log_probs,
                                  axis=-1)  # [batch]
  predictions = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
  return -tf.reduce_mean(label_log_probs), label_log_probs, predictions


def create_model_fn(bert_config, next_sentence=True):
  """Returns model_fn(features, is_training) for multigpu: BERT + masked LM (+ next sentence).

  Args:
    bert_config: BertConfig.
    next_sentence: bool; False (records without next_sentence_labels) builds the
      masked LM alone: no cls/seq_relationship variables, loss or outputs.

  The dict it returns holds "loss" (masked-LM loss + next-sentence loss) and the
  per-example outputs the eval metrics need.
  """
  def model_fn(features, is_training):
    model = modeling.BertModel(
        config=bert_config, is_training=is_training, input_ids=features["input_ids"],
        input_mask=features["input_mask"], token_type_ids=features["segment_ids"])
    mlm_loss, mlm_log_probs, mlm_predictions = masked_lm_head(
        bert_config, model.get_sequence_output(), model.get_embedding_table(),
        features["masked_lm_positions"], features["masked_lm_ids"],
        features["masked_lm_weights"])
    outputs = {"loss": mlm_loss,
               "masked_lm_log_probs": mlm_log_probs,
               "masked_lm_predictions": mlm_predictions,
               "masked_lm_ids": features["masked_lm_ids"],
               "masked_lm_weights": features["masked_lm_weights"]}
    if not next_sentence:
      return outputs
    nsp_labels = tf.reshape(features["next_sentence_labels"], [-1])  # [batch]
    nsp_loss, nsp_log_probs, nsp_predictions = next_sentence_head(
        bert_config, model.get_pooled_output(), nsp_labels)
    outputs.update({"loss": mlm_loss + nsp_loss,
                    "next_sentence_log_probs": nsp_log_probs,
                    "next_sentence_predictions": nsp_predictions,
                    "next_sentence_labels": nsp_labels})
    return outputs
  return model_fn
