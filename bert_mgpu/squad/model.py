# coding=utf-8
"""The span head of run_squad_mgpu.py: a start and an end logit per token over BERT's
sequence output, and its loss.

Variables (as Google's run_squad.py, so the checkpoints load there):
cls/squad/output_weights [2, hidden] and cls/squad/output_bias [2].
"""

import tensorflow.compat.v1 as tf

from bert_mgpu.squad import data as squad_data
from bert_mgpu.training import checkpoints
import modeling

PADDING_LOGIT = squad_data.PADDING_LOGIT

# The head's variables (Google's names).
OUTPUT_WEIGHTS = "cls/squad/output_weights"
OUTPUT_BIAS = "cls/squad/output_bias"

# The head's variables by their names in transformers' BertForQuestionAnswering
# (convert_checkpoint.py): [2, hidden] and [2], start before end, in both.
TRANSFORMERS_NAMES = {OUTPUT_WEIGHTS: "qa_outputs.weight", OUTPUT_BIAS: "qa_outputs.bias"}


def create_model_fn(bert_config, max_seq_length=None):
  """Returns model_fn(features, is_training): BERT + Google's span head.

  The head is cls/squad/output_weights [2, hidden] and cls/squad/output_bias [2], as in
  Google's run_squad.py, so the checkpoints load there. The loss is the mean of the start
  and end cross-entropies. Unlike Google's, padding positions get the logit PADDING_LOGIT:
  the softmax is then over the real tokens only, so a batch padded only to its longest
  window gives the same loss as one padded to max_seq_length.

  Args:
    bert_config: BertConfig.
    max_seq_length: if given, the logits of a shorter batch are padded back to this
      length (with PADDING_LOGIT), so that prediction batches of any length concatenate.
  """
  def model_fn(features, is_training):
    model = modeling.BertModel(
        config=bert_config, is_training=is_training, input_ids=features["input_ids"],
        input_mask=features["input_mask"], token_type_ids=features["segment_ids"])
    sequence_output = model.get_sequence_output()  # [batch, seq, hidden]
    batch_size, seq_length, hidden_size = modeling.get_shape_list(sequence_output,
                                                                  expected_rank=3)
    output_weights = tf.get_variable(
        OUTPUT_WEIGHTS, [2, hidden_size], initializer=modeling.create_initializer(0.02))
    output_bias = tf.get_variable(OUTPUT_BIAS, [2], initializer=tf.zeros_initializer())
    flat_output = tf.reshape(sequence_output, [batch_size * seq_length, hidden_size])
    logits = tf.nn.bias_add(tf.matmul(flat_output, output_weights, transpose_b=True),
                            output_bias)  # [batch * seq, 2]
    logits = tf.transpose(tf.reshape(tf.cast(logits, tf.float32), [batch_size, seq_length, 2]),
                          [2, 0, 1])  # [2, batch, seq], float32 whatever the precision
    padding = 1.0 - tf.cast(features["input_mask"], tf.float32)  # [batch, seq]
    logits += PADDING_LOGIT * padding[None]
    start_logits, end_logits = logits[0], logits[1]  # [batch, seq] each
    outputs = {"start_logits": start_logits, "end_logits": end_logits}
    if "unique_ids" in features:  # the TFRecord windows' (the serving graph has none)
      outputs["unique_ids"] = features["unique_ids"]
    if "start_positions" in features:
      outputs["loss"] = (
          span_position_loss(start_logits, features["start_positions"], seq_length) +
          span_position_loss(end_logits, features["end_positions"], seq_length)) / 2.0
    if max_seq_length:
      for name in ("start_logits", "end_logits"):
        outputs[name] = tf.pad(outputs[name], [[0, 0], [0, max_seq_length - seq_length]],
                               constant_values=PADDING_LOGIT)
    return outputs
  return model_fn


def check_head(checkpoint):
  """Refuses a checkpoint to predict with that has no span head (checkpoints.check_fine_tuned).

  Raises:
    UsageError: naming the checkpoint and the variable it lacks.
  """
  checkpoints.check_fine_tuned(checkpoint, OUTPUT_WEIGHTS, "reading comprehension")


def span_position_loss(position_logits, positions, seq_length):
  """The mean cross-entropy of the start (or end) positions.

  Args:
    position_logits: float32 [batch, seq].
    positions: int [batch], the target token of each window.
    seq_length: seq (an int, or a scalar tensor when the batch's length is not static).
  """
  log_probs = tf.nn.log_softmax(position_logits, axis=-1)  # [batch, seq]
  one_hot = tf.one_hot(positions, depth=seq_length, dtype=tf.float32)
  return -tf.reduce_mean(tf.reduce_sum(one_hot * log_probs, axis=-1))
