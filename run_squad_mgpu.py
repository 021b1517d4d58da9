# coding=utf-8
"""Fine-tunes BERT for SQuAD-style reading comprehension on every GPU.
 Reads SQuAD JSON (v1.1, and v2.0 with --version_2_with_negative); CMRC 2018 and DRCD use
the same JSON. Reading and windowing are bert_mgpu/squad/data.py's, scoring
bert_mgpu/squad/scoring.py's, and the loop bert_mgpu/training/runner.py's. The flags are
Google's run_squad.py flags (docs/FORMATS.md 8) plus
the runner's.

Outputs in --output_dir, with --do_predict:
  predictions.json        {id: answer text}
  nbest_predictions.json  {id: [{text, probability, start_logit, end_logit}, ...]}
  null_odds.json          {id: null score - best non-null score} (v2 only)
  eval_results.txt        exact_match, f1 (and the v2 figures), when the predict file
                          has answers: SQuAD's official scoring for English, CMRC
                          2018's character-level scoring for Chinese (--scoring).
"""

import collections
import json
import math
import os

import tensorflow.compat.v1 as tf

from bert_mgpu import command_line
from bert_mgpu.data import output_files
from bert_mgpu.data.output_files import atomic_write_text
from bert_mgpu.data import tfrecord_io
from bert_mgpu.errors import UsageError
from bert_mgpu.squad import data as squad_data
from bert_mgpu.squad import scoring as squad_scoring
from bert_mgpu.training import checkpoints
from bert_mgpu.training import phases
from bert_mgpu.training import run_settings
from bert_mgpu.training import runner
import modeling


# ---------------------------------------------------------------------------
# The model head
# ---------------------------------------------------------------------------

# A span logit for padding positions: their softmax weight is then 0 (as in attention).
PADDING_LOGIT = -10000.0


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
        "cls/squad/output_weights", [2, hidden_size],
        initializer=modeling.create_initializer(0.02))
    output_bias = tf.get_variable("cls/squad/output_bias", [2],
                                  initializer=tf.zeros_initializer())
    flat_output = tf.reshape(sequence_output, [batch_size * seq_length, hidden_size])
    logits = tf.nn.bias_add(tf.matmul(flat_output, output_weights, transpose_b=True),
                            output_bias)  # [batch * seq, 2]
    logits = tf.transpose(tf.reshape(tf.cast(logits, tf.float32), [batch_size, seq_length, 2]),
                          [2, 0, 1])  # [2, batch, seq], float32 whatever the precision
    padding = 1.0 - tf.cast(features["input_mask"], tf.float32)  # [batch, seq]
    logits += PADDING_LOGIT * padding[None]
    start_logits, end_logits = logits[0], logits[1]  # [batch, seq] each
    outputs = {"unique_ids": features["unique_ids"], "start_logits": start_logits,
               "end_logits": end_logits}
    if "start_positions" in features:
      def position_loss(position_logits, positions):
        log_probs = tf.nn.log_softmax(position_logits, axis=-1)  # [batch, seq]
        one_hot = tf.one_hot(positions, depth=seq_length, dtype=tf.float32)
        return -tf.reduce_mean(tf.reduce_sum(one_hot * log_probs, axis=-1))
      outputs["loss"] = (position_loss(start_logits, features["start_positions"]) +
                         position_loss(end_logits, features["end_positions"])) / 2.0
    if max_seq_length:
      for name in ("start_logits", "end_logits"):
        outputs[name] = tf.pad(outputs[name], [[0, 0], [0, max_seq_length - seq_length]],
                               constant_values=PADDING_LOGIT)
    return outputs
  return model_fn



# ---------------------------------------------------------------------------
# Flags: Google's run_squad.py flags with their defaults, then ours
# ---------------------------------------------------------------------------

FLAGS = tf.flags.FLAGS


def define_flags():
  """Defines the flags; called only under __main__, so the module imports anywhere."""
  flags = tf.flags
  flags.DEFINE_string("train_file", None, "SQuAD-format JSON for training, e.g. "
                      "train-v1.1.json or cmrc2018_train.json.")
  flags.DEFINE_string("predict_file", None, "SQuAD-format JSON to predict, e.g. "
                      "dev-v1.1.json; scored when it has answers.")
  command_line.define_shared_flags([
      "bert_config_file", "vocab_file", "output_dir", "init_checkpoint", "do_lower_case",
      "max_seq_length", "do_train", "do_predict", "train_batch_size", "predict_batch_size",
      "learning_rate", "num_train_epochs", "warmup_proportion", "save_checkpoints_steps",
      "group_by_length"],
      max_seq_length=384)
  flags.DEFINE_integer("doc_stride", 128, "Tokens between the starts of a long context's "
                       "windows.")
  flags.DEFINE_integer("max_query_length", 64, "Question tokens kept (the rest is cut).")
  flags.DEFINE_integer("n_best_size", 20, "Answers per question in nbest_predictions.json.")
  flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in word pieces.")
  flags.DEFINE_bool("verbose_logging", False, "Accepted for Google compatibility; unused "
                    "(Google's logs failures to align answers to words, which character "
                    "offsets do not need).")
  flags.DEFINE_bool("version_2_with_negative", False, "SQuAD 2.0: questions may have no "
                    "answer; writes null_odds.json.")
  flags.DEFINE_float("null_score_diff_threshold", 0.0, "v2: predict no answer when the null "
                     "score minus the best span score exceeds this.")
  flags.DEFINE_enum("scoring", "auto", ["auto", "squad", "cmrc2018"], "How eval_results.txt "
                    "scores: SQuAD's official English rules, CMRC 2018's character-level "
                    "rules, or auto (cmrc2018 when most contexts are Chinese).")


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------

def check_flags():
  """Validates flags and files before anything is written. Returns the BertConfig."""
  if not (FLAGS.do_train or FLAGS.do_predict):
    raise UsageError("Nothing to do: pass --do_train and/or --do_predict.")
  if FLAGS.do_train:
    command_line.require_file("train_file", FLAGS.train_file)
  if FLAGS.do_predict:
    command_line.require_file("predict_file", FLAGS.predict_file)
  command_line.check_run_flags(FLAGS, ("doc_stride", "max_query_length", "n_best_size",
                                       "max_answer_length"))
  if not math.isfinite(FLAGS.null_score_diff_threshold):
    raise UsageError("--null_score_diff_threshold=%s: it must be a finite number (0.0 by "
                     "default; tune it on the dev set)." % FLAGS.null_score_diff_threshold)
  if FLAGS.max_seq_length <= FLAGS.max_query_length + 3:
    raise UsageError("--max_seq_length=%d leaves no room for the context after "
                     "--max_query_length=%d and [CLS] [SEP] [SEP]: raise --max_seq_length "
                     "above %d or lower --max_query_length." %
                     (FLAGS.max_seq_length, FLAGS.max_query_length,
                      FLAGS.max_query_length + 3))
  return command_line.load_bert_config(FLAGS.bert_config_file, FLAGS.max_seq_length)


def featurize(examples, tokenizer, path, is_training):
  """Writes the windows of `examples` to `path` and logs their counts.

  Returns:
    (number of windows, their InputFeatures without id lists when predicting, else []).
  """
  counts = collections.Counter()
  with phases.timed("featurize"):
    num_features, features = squad_data.write_features(
        squad_data.convert_examples_to_features(
            examples, tokenizer, FLAGS.max_seq_length, FLAGS.doc_stride,
            FLAGS.max_query_length, is_training, counts),
        path, is_training, keep_metadata=not is_training)
  tf.logging.info("%s: %s", path, ", ".join("%s %d" % kv for kv in sorted(counts.items())))
  return num_features, features


def _write_json(path, value):
  atomic_write_text(path, json.dumps(value, ensure_ascii=False, indent=4) + "\n")


def checkpoint_for_prediction():
  """The checkpoint to predict with, checked to hold the span head, and why it is the one.
  Raises UsageError."""
  checkpoint, why = checkpoints.checkpoint_for_inference(FLAGS.output_dir,
                                                         FLAGS.init_checkpoint)
  if not tf.train.load_checkpoint(checkpoint).has_tensor("cls/squad/output_weights"):
    raise UsageError("%s has no cls/squad/output_weights: it is not a model fine-tuned for "
                     "reading comprehension. Train one first (--do_train) or point "
                     "--output_dir at one." % checkpoint)
  return checkpoint, why


def prepare_prediction(config, model_fn, tokenizer, predict_examples):
  """Featurizes the questions to predict (into output_dir/predict.tf_record).

  Returns:
    (their InputFeatures, a runner.Inference "predict" of them, which train() runs in its
    session when this process trains).
  """
  predict_record = os.path.join(FLAGS.output_dir, "predict.tf_record")
  _, features = featurize(predict_examples, tokenizer, predict_record, is_training=False)
  spec = squad_data.input_feature_spec(FLAGS.max_seq_length, is_training=False)
  make_dataset = lambda: tfrecord_io.make_dataset(
      [predict_record], spec, config.global_predict_batch_size, is_training=False,
      length_multiple=config.length_multiple)
  inference = runner.Inference(
      config, model_fn, {"predict": (make_dataset, config.global_predict_batch_size)},
      checkpoint_for_prediction)
  return features, inference


def train(config, model_fn, tokenizer, train_examples, inference=None):
  """Featurizes the training questions and trains (or resumes) on every tower; with an
  Inference, predicts in the training session too."""
  # Several workers all enter runner.train, which tells them when there is nothing to do.
  if config.cluster is None and checkpoints.training_finished(config):
    return
  train_record = os.path.join(config.cache_dir, "train.tf_record")
  num_features, _ = featurize(train_examples, tokenizer, train_record, is_training=True)
  tf.logging.info("%d training questions in %d windows.", len(train_examples), num_features)
  spec = squad_data.input_feature_spec(FLAGS.max_seq_length, is_training=True)
  runner.train(
      config, model_fn,
      lambda skip: tfrecord_io.make_dataset(
          [train_record], spec, config.micro_batch_size, is_training=True,
          seed=FLAGS.random_seed, shuffle_buffer=min(num_features, 100000), skip_batches=skip,
          length_multiple=config.length_multiple,
          group_by_length=config.group_by_length),
      inference=inference)


def predict(inference, predict_examples, features):
  """Predicts every question on every tower (or takes train()'s predictions); writes the
  prediction files and, when the file has answers, eval_results.txt. Files of an earlier
  run that this one does not write (eval_results.txt, null_odds.json) are removed once the
  new predictions are written, so none is left looking current, and a failed run leaves
  the old set whole."""
  checkpoint, _ = inference.checkpoint()
  tf.logging.info("Predicting %d questions in %d windows with %s.", len(predict_examples),
                  len(features), checkpoint)
  outputs = inference.outputs("predict")
  expected_ids = [feature.unique_id for feature in features]
  if list(outputs["unique_ids"]) != expected_ids:
    raise AssertionError("prediction outputs are not in feature order")
  predictions, nbest, null_odds = squad_data.predict_answers(
      predict_examples, features, outputs["start_logits"], outputs["end_logits"],
      FLAGS.n_best_size, FLAGS.max_answer_length, FLAGS.version_2_with_negative,
      FLAGS.null_score_diff_threshold)
  _write_json(os.path.join(FLAGS.output_dir, "predictions.json"), predictions)
  _write_json(os.path.join(FLAGS.output_dir, "nbest_predictions.json"), nbest)
  stale = ["eval_results.txt"]
  if FLAGS.version_2_with_negative:
    _write_json(os.path.join(FLAGS.output_dir, "null_odds.json"), null_odds)
  else:
    stale.append("null_odds.json")
  for name in stale:
    path = os.path.join(FLAGS.output_dir, name)
    if tf.gfile.Exists(path):
      tf.gfile.Remove(path)
  tf.logging.info("Wrote %d predictions to %s", len(predictions),
                  os.path.join(FLAGS.output_dir, "predictions.json"))
  unscored = sum(1 for e in predict_examples if not e.gold_answers)
  if unscored == len(predict_examples):
    tf.logging.info("%s has no answers: not scored.", FLAGS.predict_file)
    return
  if unscored:
    tf.logging.warning("%d of %d questions have no answers and are not scored.", unscored,
                       len(predict_examples))
  scoring = (FLAGS.scoring if FLAGS.scoring != "auto"
             else squad_scoring.choose_scoring(predict_examples))
  tf.logging.info("Scoring %d questions with %s's rules.", len(predict_examples) - unscored,
                  scoring)
  results = squad_scoring.score_predictions(
      predict_examples, predictions, scoring,
      null_odds if FLAGS.version_2_with_negative else None, nbest)
  runner.write_eval_results(FLAGS.output_dir, results, checkpoint)


def main(_):
  bert_config = check_flags()
  tokenizer = command_line.load_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case, bert_config,
                                          FLAGS.bert_config_file)
  # Read and validate every input before anything is trained or written.
  train_examples = []
  if FLAGS.do_train:
    train_examples, _ = squad_data.read_squad_examples(FLAGS.train_file, True,
                                                       FLAGS.version_2_with_negative)
    if not train_examples:
      raise UsageError("%s: no usable training question." % FLAGS.train_file)
  if FLAGS.do_predict:
    predict_examples, _ = squad_data.read_squad_examples(FLAGS.predict_file, False,
                                                         FLAGS.version_2_with_negative)
    if not predict_examples:
      raise UsageError("%s: no question to predict." % FLAGS.predict_file)
    if not FLAGS.do_train:
      checkpoint_for_prediction()
  # Google counts steps in questions, not windows.
  config = run_settings.make_run_config(FLAGS, num_train_examples=len(train_examples),
                                        example_noun="training questions")
  output_files.claim_output_dir(config)
  model_fn = create_model_fn(bert_config, FLAGS.max_seq_length)
  inference = None
  if FLAGS.do_predict and config.is_chief:  # the chief predicts
    features, inference = prepare_prediction(config, model_fn, tokenizer, predict_examples)
  if FLAGS.do_train:
    train(config, model_fn, tokenizer, train_examples, inference)
  if inference is not None:
    predict(inference, predict_examples, features)


if __name__ == "__main__":
  define_flags()
  command_line.run_main(main)
