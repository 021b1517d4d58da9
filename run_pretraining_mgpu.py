# coding=utf-8
"""Pre-trains BERT (masked LM + next sentence prediction) on every GPU of a machine.

It trains what the records hold: with next_sentence_labels (create_pretraining_data.py
--pretraining_task=nsp or pair_span) the masked LM and next-sentence prediction; without
(--pretraining_task=mlm) the masked LM alone, with no cls/seq_relationship variables, loss
or metrics. All input files must agree. An --init_checkpoint with or without the
next-sentence head loads either way; the log says which parts it gave.

The flags are those of Google's run_pretraining.py (docs/FORMATS.md 8) plus the
runner's multi-GPU ones. The input is the TFRecord
output of create_pretraining_data.py; --input_file takes comma-separated globs
or directories (a directory means its *.tfrecord files).

The heads use Google's variable names (cls/predictions/..., cls/seq_relationship/...)
and the masked-LM output weight is tied to bert/embeddings/word_embeddings, so the
checkpoints load in Google's scripts and in run_classifier_mgpu.py.

--optimizer defaults to adamw (Google's AdamWeightDecay); --optimizer=lamb is the
usual choice for large global batches.
"""

import tensorflow.compat.v1 as tf

from bert_mgpu import command_line
from bert_mgpu.data import output_files
from bert_mgpu.data import tfrecord_io
from bert_mgpu.errors import UsageError
from bert_mgpu.pretraining import records as pretraining_data
from bert_mgpu.training import checkpoints
from bert_mgpu.training import run_settings
from bert_mgpu.training import runner
import modeling


# ---------------------------------------------------------------------------
# The heads
# ---------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------
# Flags: Google's run_pretraining.py flags with their defaults, then ours
# ---------------------------------------------------------------------------

FLAGS = tf.flags.FLAGS


def define_flags():
  """Defines the flags; called only under __main__, so the module imports anywhere."""
  flags = tf.flags
  flags.DEFINE_string("input_file", None, "TFRecord files of create_pretraining_data.py: "
                      "comma-separated globs, or a directory (its *.tfrecord files).")
  # --optimizer (default adamw) comes from the runner; lamb suits large pre-training batches.
  command_line.define_shared_flags([
      "bert_config_file", "output_dir", "init_checkpoint", "max_seq_length", "do_train",
      "do_eval", "train_batch_size", "eval_batch_size", "learning_rate",
      "save_checkpoints_steps"])
  flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked-LM predictions per example; "
                       "must match the data.")
  flags.DEFINE_integer("num_train_steps", 100000, "Updates to train for (global_step at the "
                       "end).")
  flags.DEFINE_integer("num_warmup_steps", 10000, "Steps of linear learning-rate warmup.")
  flags.DEFINE_integer("max_eval_steps", 100, "Most global eval batches.")


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------

def check_flags():
  """Validates flags and files before anything is written.

  Returns:
    (BertConfig, list of input TFRecord files, whether they hold next_sentence_labels).
  """
  if not (FLAGS.do_train or FLAGS.do_eval):
    raise UsageError("Nothing to do: pass --do_train and/or --do_eval.")
  command_line.check_run_flags(FLAGS, ("max_eval_steps", "max_predictions_per_seq",
                                       "num_train_steps"))
  if FLAGS.num_warmup_steps < 0:
    raise UsageError("--num_warmup_steps=%d: it must be 0 or more." % FLAGS.num_warmup_steps)
  bert_config = command_line.load_bert_config(FLAGS.bert_config_file, FLAGS.max_seq_length)
  input_files = tfrecord_io.expand_input_files(FLAGS.input_file, ".tfrecord")
  next_sentence = pretraining_data.records_task(input_files, FLAGS.max_seq_length,
                                                FLAGS.max_predictions_per_seq)
  return bert_config, input_files, next_sentence


def describe_init_checkpoint(init_checkpoint, next_sentence):
  """Logs which parts of the model `init_checkpoint` gives and which start fresh.

  Args:
    init_checkpoint: a checkpoint prefix.
    next_sentence: bool, whether the model has the next-sentence head.
  """
  try:
    names = tf.train.load_checkpoint(init_checkpoint).get_variable_to_shape_map()
  except (tf.errors.OpError, ValueError):
    return  # the runner reports an unreadable checkpoint
  def holds(prefix):
    return any(name.startswith(prefix) for name in names)
  parts = [("the encoder (bert/)", holds("bert/")),
           ("the masked-LM head (cls/predictions)", holds("cls/predictions/"))]
  if next_sentence:
    parts.append(("the next-sentence head (cls/seq_relationship)",
                  holds("cls/seq_relationship/")))
  for part, held in parts:
    tf.logging.info("--init_checkpoint: %s %s.", part,
                    "is loaded from it" if held else "is not in it: initialised fresh")
  if not holds("cls/predictions/"):
    tf.logging.warning("%s has no masked-LM head (cls/predictions), as HFL's large checkpoints "
                       "have none usable: the head starts from random weights, so expect a "
                       "high masked-LM loss in the first steps.", init_checkpoint)
  if not next_sentence and holds("cls/seq_relationship/"):
    tf.logging.info("--init_checkpoint: its next-sentence head (cls/seq_relationship) is not "
                    "used: the records hold no next_sentence_labels.")


def main(_):
  bert_config, input_files, next_sentence = check_flags()
  config = run_settings.make_run_config(FLAGS)
  if not FLAGS.do_train:
    checkpoints.checkpoint_for_inference(FLAGS.output_dir, FLAGS.init_checkpoint)
  output_files.claim_output_dir(config)
  tf.logging.info("Input: %d TFRecord file(s): %s", len(input_files), ", ".join(input_files))
  if next_sentence:
    tf.logging.info("The records hold next_sentence_labels: training the masked LM and "
                    "next-sentence prediction.")
  else:
    tf.logging.info("The records hold no next_sentence_labels (--pretraining_task=mlm): "
                    "training the masked LM alone, without a next-sentence head.")
  if (FLAGS.do_train and FLAGS.init_checkpoint and
      checkpoints.latest_checkpoint(FLAGS.output_dir) is None):
    describe_init_checkpoint(FLAGS.init_checkpoint, next_sentence)
  spec = pretraining_data.input_feature_spec(FLAGS.max_seq_length,
                                             FLAGS.max_predictions_per_seq, next_sentence)
  model_fn = create_model_fn(bert_config, next_sentence)

  def make_eval_dataset():
    return tfrecord_io.make_dataset(
        input_files, spec, config.global_eval_batch_size, is_training=False,
        length_multiple=config.length_multiple).take(FLAGS.max_eval_steps)

  if FLAGS.do_train:
    # No best/ copy: pretraining keeps going from the latest checkpoint, and copying the
    # weights with their optimizer slots at every improvement only costs disk and time.
    eval_spec = (runner.EvalSpec(make_eval_dataset, pretraining_data.pretraining_metrics,
                                 None, None)
                 if FLAGS.do_eval else None)
    runner.train(
        config, model_fn,
        lambda skip: tfrecord_io.make_dataset(
            input_files, spec, config.micro_batch_size, is_training=True,
            seed=FLAGS.random_seed, skip_batches=skip, length_multiple=config.length_multiple),
        eval_spec)
    if not config.is_chief:
      return  # the chief evaluates

  if FLAGS.do_eval:
    checkpoint, _ = checkpoints.checkpoint_for_inference(FLAGS.output_dir, FLAGS.init_checkpoint)
    tf.logging.info("Evaluating %s on at most %d batches of %d.", checkpoint,
                    FLAGS.max_eval_steps, config.global_eval_batch_size)
    runner.evaluate(config, model_fn, make_eval_dataset, checkpoint,
                    pretraining_data.pretraining_metrics)


if __name__ == "__main__":
  define_flags()
  command_line.run_main(main)
