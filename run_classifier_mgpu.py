# coding=utf-8
"""Fine-tunes BERT for sentence and sentence-pair classification on every GPU.

The flags and defaults are those of Google's run_classifier.py (docs/FORMATS.md 8) plus
the runner's multi-GPU flags. Tasks (--task_name) and their files are described in
bert_mgpu/classifier/tasks.py; the shared loop is bert_mgpu/training/runner.py.

Outputs in --output_dir (docs/FORMATS.md 7): labels.txt, best/, eval_results.txt and
eval_report.*, predict.txt (one label per test example, in order), Google's test_results.tsv,
predict_detail.tsv, the model files serving needs, <task>_predict.json (--clue_submission).
--multi_label (docs/FORMATS.md 13) predicts label sets and keeps thresholds.json; --long_text
(docs/FORMATS.md 14) reads texts longer than max_seq_length in windows or by head and tail.

With --export_dir, the best (else the latest) checkpoint is exported as a SavedModel into
the next numbered version directory there (docs/SERVING.md); alone, it exports a trained
output_dir and needs no data.
"""

import contextlib
import os

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import class_labels
from bert_mgpu.classifier import clue_submission
from bert_mgpu.classifier import feature_cache
from bert_mgpu.classifier import featurizing
from bert_mgpu.classifier import input_examples
from bert_mgpu.classifier import long_text
from bert_mgpu.classifier import metrics as classifier_metrics
from bert_mgpu.classifier import multi_label
from bert_mgpu.classifier import tasks
from bert_mgpu import command_line
from bert_mgpu.data import output_files
from bert_mgpu.data.output_files import atomic_write_text
from bert_mgpu.data import tfrecord_io
from bert_mgpu.errors import UsageError
from bert_mgpu.serving import export
from bert_mgpu.serving import model_files
from bert_mgpu.training import checkpoints
from bert_mgpu.training import phases
from bert_mgpu.training import run_settings
from bert_mgpu.training import runner
import modeling


# ---------------------------------------------------------------------------
# The head
# ---------------------------------------------------------------------------

# The variable scope of the multi-label head (docs/FORMATS.md): its variables differ in name
# from the softmax head's, so neither kind of checkpoint loads silently into the other.
MULTI_LABEL_SCOPE = "multi_label"


def create_model_fn(bert_config, num_labels, multi_label=False, window_pooling=None):
  """Returns model_fn(features, is_training): BERT + a classifier head on the pooled output.

  With window_pooling ("max" or "mean", --long_text=windows) the inputs are
  [batch, windows, seq]: every window goes through BERT and the windows' pooled vectors of a
  document are combined into one (long_text.pool_windows) before the one head.

  One label per example: Google's softmax head, with Google's top-level `output_weights`
  [num_labels, hidden] and `output_bias` [num_labels], so checkpoints load in Google's
  run_classifier.py. With multi_label: one sigmoid per label, variables
  `multi_label/output_weights` and `multi_label/output_bias`, the loss the binary
  cross-entropy averaged over the labels (as PyTorch's BCEWithLogitsLoss) and then over the
  examples. Without a "label_ids" feature (serving), the model returns only the
  probabilities.
  """
  def model_fn(features, is_training):
    if window_pooling:
      pooled = long_text.pooled_output_of_windows(bert_config, features, is_training,
                                                  window_pooling)
    else:
      model = modeling.BertModel(
          config=bert_config, is_training=is_training, input_ids=features["input_ids"],
          input_mask=features["input_mask"], token_type_ids=features["segment_ids"])
      pooled = model.get_pooled_output()  # [batch, hidden]
    with (tf.variable_scope(MULTI_LABEL_SCOPE) if multi_label else contextlib.nullcontext()):
      output_weights = tf.get_variable(
          "output_weights", [num_labels, bert_config.hidden_size],
          initializer=modeling.create_initializer(0.02))
      output_bias = tf.get_variable("output_bias", [num_labels],
                                    initializer=tf.zeros_initializer())
    if is_training:
      pooled = modeling.dropout(pooled, bert_config.hidden_dropout_prob)
    # [batch, num_labels]; probabilities and the loss in float32 whatever the precision.
    logits = tf.cast(tf.nn.bias_add(tf.matmul(pooled, output_weights, transpose_b=True),
                                    output_bias), tf.float32)
    outputs = {"probabilities": tf.sigmoid(logits) if multi_label else tf.nn.softmax(logits)}
    if "label_ids" in features:
      per_example_loss = _per_example_loss(logits, features["label_ids"], multi_label)
      outputs.update(loss=tf.reduce_mean(per_example_loss), per_example_loss=per_example_loss,
                     label_ids=features["label_ids"])
    return outputs
  return model_fn


def _per_example_loss(logits, label_ids, multi_label):
  """[batch]: the cross-entropy of float32 logits [batch, labels] against label ids [batch],
  or, multi-label, the binary cross-entropy against multi-hot [batch, labels] averaged over
  the labels."""
  if multi_label:
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.cast(label_ids, tf.float32), logits=logits), axis=-1)
  one_hot_labels = tf.one_hot(label_ids, depth=logits.shape[-1], dtype=tf.float32)
  return -tf.reduce_sum(one_hot_labels * tf.nn.log_softmax(logits, axis=-1), axis=-1)


def model_fn_of(files, bert_config):
  """The model_fn of a trained model's model_files.ModelFiles (single- or multi-label, windows
  or not)."""
  settings = files.settings
  return create_model_fn(bert_config, len(files.labels),
                         bool(settings.get("multi_label", False)),
                         settings.get("window_pooling") if settings.get("long_text") ==
                         "windows" else None)


# ---------------------------------------------------------------------------
# Output files
# ---------------------------------------------------------------------------

def write_predict_outputs(output_dir, examples, probabilities, label_list, thresholds=None,
                          separator=","):
  """predict.txt (label names), test_results.tsv (Google's) and predict_detail.tsv.

  Args:
    output_dir: where they go.
    examples: the test InputExamples, in order.
    probabilities: float [examples, labels].
    label_list: the labels.
    thresholds: None for one label per example (the most probable); with --multi_label,
      float [labels]: predict.txt lines then hold every label reaching its threshold,
      joined by `separator` (an empty line for none).
    separator: the multi-label separator.
  """
  if thresholds is None:
    best = np.argmax(probabilities, axis=-1)
    predicted = [label_list[i] for i in best]
    columns = ["predicted_label", "probability"]
    details = [[label_list[i], "%.6f" % row[i]] for i, row in zip(best, probabilities)]
  else:
    chosen = multi_label.predicted_sets(probabilities, thresholds)
    predicted = [multi_label.label_string(row, label_list, separator) for row in chosen]
    columns = ["predicted_labels"]
    details = [[labels] for labels in predicted]
  atomic_write_text(os.path.join(output_dir, "predict.txt"),
                    "".join(labels + "\n" for labels in predicted))
  atomic_write_text(os.path.join(output_dir, "test_results.tsv"), "".join(
      "\t".join(str(p) for p in row) + "\n" for row in probabilities))
  atomic_write_text(os.path.join(output_dir, "predict_detail.tsv"), "".join(
      "\t".join(row) + "\n" for row in input_examples.example_rows(
          examples, columns, details, "gold_label" if thresholds is None else "gold_labels",
          separator)))


# ---------------------------------------------------------------------------
# Flags: Google's run_classifier.py flags with their defaults, then ours
# ---------------------------------------------------------------------------

FLAGS = tf.flags.FLAGS


def define_flags():
  """Defines the flags; called only under __main__, so the module imports anywhere."""
  flags = tf.flags
  flags.DEFINE_string("data_dir", None, "Directory with the task's data files.")
  flags.DEFINE_string("task_name", None,
                      "Task: " + ", ".join(sorted(tasks.PROCESSORS)) + ".")
  command_line.define_shared_flags([
      "bert_config_file", "vocab_file", "output_dir", "init_checkpoint", "do_lower_case",
      "max_seq_length", "do_train", "do_eval", "do_predict", "train_batch_size",
      "eval_batch_size", "predict_batch_size", "learning_rate", "num_train_epochs",
      "warmup_proportion", "save_checkpoints_steps", "group_by_length"])
  flags.DEFINE_enum("best_metric", "accuracy", ["accuracy", "macro_f1", "micro_f1"],
                    "With --do_train and --do_eval: the dev metric whose best checkpoint is kept "
                    "in output_dir/best; eval and predict use output_dir/best whenever it "
                    "exists. With --multi_label the default is micro_f1 (accuracy is then the "
                    "exact-set accuracy).")
  long_text.define_flags(flags)
  multi_label.define_flags(flags)
  flags.DEFINE_integer("early_stopping_patience", 0, "Stop after this many evaluations without "
                       "a better --best_metric (0: never).")
  flags.DEFINE_integer("num_workers", 0, "Processes for featurizing (0: all cores).")
  flags.DEFINE_bool("literal_special_tokens", False, "Read [MASK], [SEP] and [UNK] written in "
                    "the texts as single tokens (e.g. blanked texts for a pair classifier "
                    "after --pretraining_task=pair_span); default: split them, as Google's "
                    "tokenizer does. Kept in model_settings.json for predict_text.py.")
  flags.DEFINE_bool("group_by_length_within_label", False, "With --group_by_length and one "
                    "label per example: each batch holds every label in about the data's "
                    "share, each label's examples of similar length (sorted by their length "
                    "rank within their label), so batches are not label-skewed where length "
                    "goes with the label. Measured no better in accuracy than plain length "
                    "groups (docs/PERFORMANCE.md, #34).")
  clue_submission.define_flags(flags)
  flags.DEFINE_string("export_dir", None, "Export the trained classifier as a SavedModel into "
                      "the next numbered version directory here (TF Serving's layout); alone, "
                      "it exports the model in --output_dir and needs no --data_dir.")


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------

def model_settings():
  """The model_settings.json of a model trained by this run (predict_text.py reads it)."""
  return model_files.classifier_settings(
      FLAGS.task_name, FLAGS.do_lower_case, FLAGS.max_seq_length, feature_options(),
      FLAGS.window_pooling)


def feature_options():
  return input_examples.FeatureOptions(
      FLAGS.literal_special_tokens, FLAGS.multi_label, FLAGS.label_separator,
      FLAGS.long_text, FLAGS.head_tokens, FLAGS.doc_stride, FLAGS.max_windows)


def best_metric_key():
  """The eval_results.txt key of --best_metric (multi_label.eval_results_key)."""
  return multi_label.eval_results_key(FLAGS.best_metric, FLAGS["best_metric"].present,
                                      FLAGS.multi_label)


def threshold_choice():
  return multi_label.ThresholdChoice(FLAGS.multi_label_threshold,
                                     FLAGS["multi_label_threshold"].present, FLAGS.do_train,
                                     FLAGS.output_dir)


def scores(outputs, label_list, thresholds=None):
  """(metrics, report) of eval outputs; multi-label ones with `thresholds`, by default this
  run's (tuned on these outputs with `tuned`)."""
  if not FLAGS.multi_label:
    return classifier_metrics.classification_metrics(outputs, label_list)
  if thresholds is None:
    thresholds = threshold_choice().choose(outputs, label_list)[0]
  return multi_label.multi_label_metrics(outputs, label_list, thresholds)


def check_head(checkpoint, is_multi_label):
  """Refuses a fine-tuned checkpoint whose head is the other kind's (multi_label.check_head)."""
  multi_label.check_head(checkpoint, [name for name, _ in tf.train.list_variables(checkpoint)],
                         is_multi_label, MULTI_LABEL_SCOPE)


def check_flags():
  """Validates flags and files before anything is written. Returns the BertConfig (None
  when only exporting: the config then comes from output_dir)."""
  if FLAGS.clue_submission:
    clue_submission.check_flags(FLAGS.task_name, FLAGS.do_predict)
  if command_line.check_actions(FLAGS, ("data_dir", "task_name")):
    command_line.check_run_flags(FLAGS)
    return None
  if not tf.gfile.IsDirectory(FLAGS.data_dir):
    raise UsageError("--data_dir=%s: no such directory." % FLAGS.data_dir)
  if FLAGS.num_workers < 0:
    raise UsageError("--num_workers=%d: use 0 (all cores) or more." % FLAGS.num_workers)
  if FLAGS.multi_label:
    threshold_choice().check(FLAGS.do_eval)
  best_metric_key()
  command_line.refuse_unread_flags(FLAGS, dict(long_text.unread_flags(FLAGS.long_text),
                                                **multi_label.unread_flags(FLAGS.multi_label)))
  long_text.check_options(feature_options(), FLAGS.max_seq_length)
  command_line.check_run_flags(FLAGS)
  return command_line.load_bert_config(FLAGS.bert_config_file, FLAGS.max_seq_length)


def export_model():
  """Exports the best (else latest) checkpoint of output_dir to --export_dir."""
  files = model_files.classifier_files_to_export(FLAGS.output_dir, FLAGS.vocab_file,
                                                FLAGS.bert_config_file, model_settings())
  bert_config = command_line.load_bert_config(files.bert_config_file,
                                              files.settings["max_seq_length"])
  checkpoint, why = checkpoints.checkpoint_for_inference(FLAGS.output_dir, None,
                                                         best_subdir="best")
  check_head(checkpoint, bool(files.settings.get("multi_label", False)))
  path = export.export_classifier(FLAGS.export_dir, files, checkpoint,
                                  model_fn_of(files, bert_config), bert_config)
  tf.logging.info("Exported %s (%s) as a SavedModel to %s", checkpoint, why, path)
  return path


def prepare_output_dir(splits, label_list, processor):
  """The device check, then output_dir: claimed, the model files written, the splits
  featurized (or their cache reused).

  The featurizing processes fork before the device check starts TensorFlow's GPU runtime,
  only for a split without a valid cache; a refused check ends them and writes nothing.

  Returns:
    (RunConfig, dict split -> TFRecord path).
  """
  with phases.timed("featurize"):  # hashing the inputs for the cache keys
    caches, pool = feature_cache.featurizing_plan(
        splits, processor, FLAGS.data_dir, run_settings.planned_cache_dir(FLAGS),
        FLAGS.task_name, FLAGS.num_workers or None, label_list=label_list,
        max_seq_length=FLAGS.max_seq_length, vocab_file=FLAGS.vocab_file,
        do_lower_case=FLAGS.do_lower_case, options=feature_options())
  with pool:
    config = run_settings.make_run_config(FLAGS,
                                          num_train_examples=len(splits.get("train", ())))
    # Training resumes output_dir's checkpoint, else starts from --init_checkpoint.
    start = (tf.train.latest_checkpoint(FLAGS.output_dir) or FLAGS.init_checkpoint
             if FLAGS.do_train else checkpoints.checkpoint_for_inference(
                 FLAGS.output_dir, FLAGS.init_checkpoint, "best")[0])
    if start:
      check_head(start, FLAGS.multi_label)
    output_files.claim_output_dir(config)
    if FLAGS.do_train and config.is_chief:
      class_labels.write_label_list(FLAGS.output_dir, label_list)
      model_files.save_model_files(FLAGS.output_dir, FLAGS.vocab_file,
                                   FLAGS.bert_config_file, model_settings())
    with phases.timed("featurize"):
      record_files = feature_cache.cached_split_features(splits, caches, config.cache_dir,
                                                         pool)
  return config, record_files


def main(_):
  bert_config = check_flags()
  if command_line.export_only(FLAGS):
    export_model()
    return
  command_line.load_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case, bert_config,
                              FLAGS.bert_config_file, FLAGS.literal_special_tokens)
  featurizing.check_featurizing_inputs(FLAGS.max_seq_length, FLAGS.vocab_file)
  processor = tasks.get_processor(
      FLAGS.task_name, FLAGS.label_separator if FLAGS.multi_label else None)
  splits, label_list = class_labels.read_splits(
      processor, FLAGS.data_dir, FLAGS.output_dir,
      [split for split, flag in (("train", FLAGS.do_train), ("dev", FLAGS.do_eval),
                                 ("test", FLAGS.do_predict)) if flag])
  config, record_files = prepare_output_dir(splits, label_list, processor)
  windows = FLAGS.long_text == "windows"
  spec = featurizing.input_feature_spec(
      FLAGS.max_seq_length, len(label_list) if FLAGS.multi_label else None, windows)
  model_fn = create_model_fn(bert_config, len(label_list), FLAGS.multi_label,
                             FLAGS.window_pooling if windows else None)

  def make_dataset(split, batch_size):
    return lambda: tfrecord_io.make_dataset([record_files[split]], spec, batch_size,
                                            is_training=False,
                                            length_multiple=config.length_multiple)

  def dev_metrics(outputs):
    return scores(outputs, label_list)[0]

  inference = runner.dev_and_test_inference(config, model_fn, make_dataset, FLAGS.do_eval,
                                            FLAGS.do_predict)
  if FLAGS.do_train:
    eval_spec = None
    if FLAGS.do_eval:
      eval_spec = runner.EvalSpec(inference.datasets["eval"][0], dev_metrics,
                                  best_metric_key(), FLAGS.early_stopping_patience)
    shuffle_buffer = min(len(splits["train"]), 100000)
    log_label_skew(config, record_files["train"], len(label_list), shuffle_buffer)
    runner.train(
        config, model_fn,
        lambda skip: tfrecord_io.make_dataset(
            [record_files["train"]], spec, config.micro_batch_size, is_training=True,
            seed=FLAGS.random_seed, shuffle_buffer=shuffle_buffer, skip_batches=skip,
            length_multiple=config.length_multiple, group_by_length=config.group_by_length,
            stratify_by=grouping_strata()),
        eval_spec, inference)
    if not config.is_chief:
      return  # the chief evaluates, predicts and exports

  if FLAGS.do_eval or FLAGS.do_predict:
    evaluate_and_predict(inference, dev_metrics, splits, label_list)
  elif FLAGS.multi_label:
    threshold_choice().save(None, label_list)  # what export and predict_text.py will use
  if FLAGS.export_dir:
    export_model()


def grouping_strata():
  """The feature that --group_by_length batches hold in the data's proportions: the label
  of single-label classification (--group_by_length_within_label), else none."""
  if FLAGS.group_by_length_within_label and not FLAGS.multi_label:
    return "label_ids"
  return None


def log_label_skew(config, record_file, num_labels, shuffle_buffer):
  """With --group_by_length, on the chief: logs how much grouping skews the training
  batches' label mix (tfrecord_io.log_label_skew; a warning when it is marked), read from
  the training features before training starts."""
  if not (config.group_by_length and config.is_chief):
    return
  with phases.timed("featurize"):
    lengths, targets, strata = featurizing.label_skew_inputs(
        record_file, num_labels, FLAGS.multi_label, grouping_strata() is not None)
    tfrecord_io.log_label_skew(lengths, targets, config.micro_batch_size, shuffle_buffer,
                               strata=strata)


def evaluate_and_predict(inference, dev_metrics, splits, label_list):
  """The dev metrics and reports, and the test predictions, with the best (else latest)
  checkpoint (computed in the training session when this process trained)."""
  checkpoint, why = inference.checkpoint()
  tf.logging.info("Evaluating and predicting with %s (%s).", checkpoint, why)
  dev_outputs = None
  if FLAGS.do_eval:
    metrics, dev_outputs = inference.evaluate("eval", dev_metrics)
  thresholds = (threshold_choice().save(dev_outputs, label_list) if FLAGS.multi_label else
                None)
  if FLAGS.do_eval:  # eval_report.txt (for a person) and .json beside eval_results.txt
    report = scores(dev_outputs, label_list, thresholds)[1]
    formatter = (multi_label.format_eval_report if FLAGS.multi_label else
                 classifier_metrics.format_eval_report)
    output_files.write_eval_report(FLAGS.output_dir, formatter(metrics, report),
                                   dict(report, metrics=metrics))
  if FLAGS.do_predict:
    outputs = inference.outputs("predict")
    if len(outputs["probabilities"]) != len(splits["test"]):
      raise AssertionError("%d predictions for %d test examples" % (
          len(outputs["probabilities"]), len(splits["test"])))
    write_predict_outputs(FLAGS.output_dir, splits["test"], outputs["probabilities"],
                          label_list, thresholds, FLAGS.label_separator)
    tf.logging.info("Wrote %d predictions to %s", len(splits["test"]),
                    os.path.join(FLAGS.output_dir, "predict.txt"))
    if FLAGS.clue_submission:
      clue_submission.write_submission(
          FLAGS.output_dir, FLAGS.task_name, splits["test"],
          [label_list[i] for i in np.argmax(outputs["probabilities"], -1)])


if __name__ == "__main__":
  define_flags()
  command_line.run_main(main)
