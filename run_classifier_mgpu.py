# coding=utf-8
"""Fine-tunes BERT for sentence and sentence-pair classification on every GPU.

The flags and defaults are those of Google's run_classifier.py (docs/FORMATS.md 8) plus
the runner's multi-GPU flags. Tasks (--task_name) and their files are described in
classifier_data.py; the shared loop is runner.py.

Outputs in --output_dir:
  labels.txt                      the label list (with --do_train; reused without it)
  best/                           the best dev checkpoint (--do_train --do_eval)
  eval_results.txt                Google's key = value metrics (--do_eval)
  eval_report.txt, .json          per-class precision/recall/F1, confusion matrix
  predict.txt                     one predicted label per test example, in order
  test_results.tsv                Google's: the class probabilities per test example
  predict_detail.tsv              id, text(s), predicted label and its probability
  vocab.txt, bert_config.json,    what a model needs to be served (with --do_train;
  model_settings.json             serving.py)

With --export_dir, the best (else the latest) checkpoint is exported as a SavedModel into
the next numbered version directory there (docs/SERVING.md); alone, it exports a trained
output_dir and needs no data.
"""

import json
import os

import numpy as np
import tensorflow.compat.v1 as tf

import checkpoints
import classifier_data
import classifier_metrics
import command_line
import modeling
import output_files
import phases
import run_settings
import runner
import serving
import tfrecord_io
from errors import UsageError
from output_files import atomic_write_text


# ---------------------------------------------------------------------------
# The head
# ---------------------------------------------------------------------------

def create_model_fn(bert_config, num_labels):
  """Returns model_fn(features, is_training): BERT + Google's softmax classifier.

  The head's variables are Google's top-level `output_weights` [num_labels, hidden] and
  `output_bias` [num_labels], so checkpoints load in Google's run_classifier.py. Without a
  "label_ids" feature (serving), the model returns only the probabilities.
  """
  def model_fn(features, is_training):
    model = modeling.BertModel(
        config=bert_config, is_training=is_training, input_ids=features["input_ids"],
        input_mask=features["input_mask"], token_type_ids=features["segment_ids"])
    pooled = model.get_pooled_output()  # [batch, hidden]
    output_weights = tf.get_variable(
        "output_weights", [num_labels, bert_config.hidden_size],
        initializer=tf.truncated_normal_initializer(stddev=0.02))
    output_bias = tf.get_variable("output_bias", [num_labels],
                                  initializer=tf.zeros_initializer())
    if is_training:
      pooled = modeling.dropout(pooled, bert_config.hidden_dropout_prob)
    # [batch, num_labels]; the softmax and the loss in float32 whatever the precision.
    logits = tf.cast(tf.nn.bias_add(tf.matmul(pooled, output_weights, transpose_b=True),
                                    output_bias), tf.float32)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    outputs = {"probabilities": tf.exp(log_probs)}
    if "label_ids" in features:
      one_hot_labels = tf.one_hot(features["label_ids"], depth=num_labels, dtype=tf.float32)
      per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)  # [batch]
      outputs.update(loss=tf.reduce_mean(per_example_loss), per_example_loss=per_example_loss,
                     label_ids=features["label_ids"])
    return outputs
  return model_fn


# ---------------------------------------------------------------------------
# Output files
# ---------------------------------------------------------------------------

def _one_line(text):
  return " ".join((text or "").split())


def write_eval_reports(output_dir, metrics, report):
  """eval_report.txt (for a person) and eval_report.json, beside eval_results.txt."""
  atomic_write_text(os.path.join(output_dir, "eval_report.txt"),
                    classifier_metrics.format_eval_report(metrics, report))
  atomic_write_text(os.path.join(output_dir, "eval_report.json"),
                    json.dumps(dict(report, metrics=metrics), ensure_ascii=False, indent=2)
                    + "\n")


def write_predict_outputs(output_dir, examples, probabilities, label_list):
  """predict.txt (label names), test_results.tsv (Google's) and predict_detail.tsv."""
  predicted = np.argmax(probabilities, axis=-1)
  atomic_write_text(os.path.join(output_dir, "predict.txt"),
                    "".join(label_list[i] + "\n" for i in predicted))
  atomic_write_text(os.path.join(output_dir, "test_results.tsv"), "".join(
      "\t".join(str(p) for p in row) + "\n" for row in probabilities))
  has_text_b = any(e.text_b is not None for e in examples)
  has_gold = any(e.label is not None for e in examples)
  header = ["id", "text_a"] + (["text_b"] if has_text_b else []) + [
      "predicted_label", "probability"] + (["gold_label"] if has_gold else [])
  rows = ["\t".join(header)]
  for example, label_id, row in zip(examples, predicted, probabilities):
    fields = [_one_line(str(example.guid)), _one_line(example.text_a)]
    if has_text_b:
      fields.append(_one_line(example.text_b))
    fields += [label_list[label_id], "%.6f" % row[label_id]]
    if has_gold:
      fields.append(_one_line(example.label))
    rows.append("\t".join(fields))
  atomic_write_text(os.path.join(output_dir, "predict_detail.tsv"), "\n".join(rows) + "\n")


# ---------------------------------------------------------------------------
# Flags: Google's run_classifier.py flags with their defaults, then ours
# ---------------------------------------------------------------------------

FLAGS = tf.flags.FLAGS


def define_flags():
  """Defines the flags; called only under __main__, so the module imports anywhere."""
  flags = tf.flags
  flags.DEFINE_string("data_dir", None, "Directory with the task's data files.")
  flags.DEFINE_string("task_name", None,
                      "Task: " + ", ".join(sorted(classifier_data.PROCESSORS)) + ".")
  command_line.define_shared_flags([
      "bert_config_file", "vocab_file", "output_dir", "init_checkpoint", "do_lower_case",
      "max_seq_length", "do_train", "do_eval", "do_predict", "train_batch_size",
      "eval_batch_size", "predict_batch_size", "learning_rate", "num_train_epochs",
      "warmup_proportion", "save_checkpoints_steps", "group_by_length"])
  flags.DEFINE_enum("best_metric", "accuracy", ["accuracy", "macro_f1"], "With --do_train and "
                    "--do_eval: the dev metric whose best checkpoint is kept in output_dir/best"
                    "; eval and predict use output_dir/best whenever it exists.")
  flags.DEFINE_integer("early_stopping_patience", 0, "Stop after this many evaluations without "
                       "a better --best_metric (0: never).")
  flags.DEFINE_integer("num_workers", 0, "Processes for featurizing (0: all cores).")
  flags.DEFINE_bool("literal_special_tokens", False, "Read [MASK], [SEP] and [UNK] written in "
                    "the texts as single tokens (e.g. blanked texts for a pair classifier "
                    "after --pretraining_task=pair_span); default: split them, as Google's "
                    "tokenizer does. Kept in model_settings.json for predict_text.py.")
  flags.DEFINE_string("export_dir", None, "Export the trained classifier as a SavedModel into "
                      "the next numbered version directory here (TF Serving's layout); alone, "
                      "it exports the model in --output_dir and needs no --data_dir.")


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------

def model_settings():
  """The model_settings.json of a model trained by this run (serving.py reads it)."""
  return serving.classifier_settings(FLAGS.task_name, FLAGS.do_lower_case,
                                     FLAGS.max_seq_length, FLAGS.literal_special_tokens)


def check_flags():
  """Validates flags and files before anything is written. Returns the BertConfig (None
  when only exporting: the config then comes from output_dir)."""
  if command_line.check_actions(FLAGS, ("data_dir", "task_name")):
    command_line.check_run_flags(FLAGS)
    return None
  if not tf.gfile.IsDirectory(FLAGS.data_dir):
    raise UsageError("--data_dir=%s: no such directory." % FLAGS.data_dir)
  if FLAGS.num_workers < 0:
    raise UsageError("--num_workers=%d: use 0 (all cores) or more." % FLAGS.num_workers)
  command_line.check_run_flags(FLAGS)
  return command_line.load_bert_config(FLAGS.bert_config_file, FLAGS.max_seq_length)


def files_to_export():
  """The model files of output_dir; for a model trained before output_dir kept them, the
  --vocab_file, --bert_config_file, --do_lower_case and --max_seq_length flags instead."""
  if serving.has_model_files(FLAGS.output_dir) or not (FLAGS.vocab_file and
                                                       FLAGS.bert_config_file):
    return serving.find_model_files(
        FLAGS.output_dir, "train with --do_train, or pass the --vocab_file, "
        "--bert_config_file, --do_lower_case and --max_seq_length it was trained with.")
  tf.logging.warning("%s lacks the model files: exporting with --vocab_file, "
                     "--bert_config_file, --do_lower_case and --max_seq_length.",
                     FLAGS.output_dir)
  return serving.model_files(
      FLAGS.vocab_file, FLAGS.bert_config_file, os.path.join(FLAGS.output_dir, "labels.txt"),
      model_settings())


def export_model():
  """Exports the best (else latest) checkpoint of output_dir to --export_dir."""
  files = files_to_export()
  bert_config = command_line.load_bert_config(files.bert_config_file,
                                              files.settings["max_seq_length"])
  checkpoint, why = checkpoints.checkpoint_for_inference(FLAGS.output_dir, None,
                                                         best_subdir="best")
  path = serving.export_classifier(FLAGS.export_dir, files, checkpoint,
                                   create_model_fn(bert_config, len(files.labels)), bert_config)
  tf.logging.info("Exported %s (%s) as a SavedModel to %s", checkpoint, why, path)
  return path


def read_splits(processor):
  """Reads and validates every split asked for, before anything is trained or written.

  Returns:
    (dict split -> list of InputExample, the label list).
  """
  splits = {}
  if FLAGS.do_train:
    splits["train"] = processor.get_train_examples(FLAGS.data_dir)
  if FLAGS.do_eval:
    splits["dev"] = processor.get_dev_examples(FLAGS.data_dir)
  if FLAGS.do_predict:
    splits["test"] = processor.get_test_examples(FLAGS.data_dir)
  label_list = classifier_data.resolve_label_list(processor, FLAGS.data_dir,
                                                  FLAGS.output_dir, FLAGS.do_train)
  for examples in splits.values():
    classifier_data.check_labels(examples, label_list)
  return splits, label_list


def prepare_output_dir(splits, label_list, processor):
  """The device check, then output_dir: claimed, the model files written, the splits
  featurized (or their cache reused).

  The featurizing processes fork first, before the device check starts TensorFlow's GPU
  runtime; a refused check ends them and writes nothing.

  Returns:
    (RunConfig, dict split -> TFRecord path).
  """
  largest = max([len(examples) for examples in splits.values()] or [0])
  with classifier_data.FeaturizingPool(
      FLAGS.vocab_file, FLAGS.do_lower_case, label_list, FLAGS.max_seq_length,
      FLAGS.num_workers or None, largest_split=largest,
      literal_special_tokens=FLAGS.literal_special_tokens) as pool:
    config = run_settings.make_run_config(FLAGS,
                                          num_train_examples=len(splits.get("train", ())))
    if not FLAGS.do_train:
      checkpoints.checkpoint_for_inference(FLAGS.output_dir, FLAGS.init_checkpoint, "best")
    output_files.claim_output_dir(config)
    if FLAGS.do_train and config.is_chief:
      classifier_data.write_label_list(FLAGS.output_dir, label_list)
      serving.save_model_files(FLAGS.output_dir, FLAGS.vocab_file, FLAGS.bert_config_file,
                               model_settings())
    record_files = {}
    for split, examples in splits.items():
      with phases.timed("featurize"):
        record_files[split] = classifier_data.cached_features(
            split, examples_file_paths=processor.input_files(FLAGS.data_dir, split),
            examples=examples, label_list=label_list, max_seq_length=FLAGS.max_seq_length,
            vocab_file=FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case,
            task_name=FLAGS.task_name, output_dir=config.cache_dir, pool=pool,
            literal_special_tokens=FLAGS.literal_special_tokens)[0]
  return config, record_files


def main(_):
  bert_config = check_flags()
  if command_line.export_only(FLAGS):
    export_model()
    return
  command_line.load_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case, bert_config,
                              FLAGS.bert_config_file, FLAGS.literal_special_tokens)
  classifier_data.check_featurizing_inputs(FLAGS.max_seq_length, FLAGS.vocab_file)
  processor = classifier_data.get_processor(FLAGS.task_name)
  splits, label_list = read_splits(processor)
  config, record_files = prepare_output_dir(splits, label_list, processor)
  spec = classifier_data.input_feature_spec(FLAGS.max_seq_length)
  model_fn = create_model_fn(bert_config, len(label_list))

  def make_dataset(split, batch_size):
    return lambda: tfrecord_io.make_dataset([record_files[split]], spec, batch_size,
                                            is_training=False,
                                            length_multiple=config.length_multiple)

  def dev_metrics(outputs):
    return classifier_metrics.classification_metrics(outputs, label_list)[0]

  inference = runner.dev_and_test_inference(config, model_fn, make_dataset, FLAGS.do_eval,
                                            FLAGS.do_predict)
  if FLAGS.do_train:
    eval_spec = None
    if FLAGS.do_eval:
      metric_key = {"accuracy": "eval_accuracy", "macro_f1": "macro_f1"}[FLAGS.best_metric]
      eval_spec = runner.EvalSpec(inference.datasets["eval"][0], dev_metrics, metric_key,
                                  FLAGS.early_stopping_patience)
    shuffle_buffer = min(len(splits["train"]), 100000)
    runner.train(
        config, model_fn,
        lambda skip: tfrecord_io.make_dataset(
            [record_files["train"]], spec, config.micro_batch_size, is_training=True,
            seed=FLAGS.random_seed, shuffle_buffer=shuffle_buffer, skip_batches=skip,
            length_multiple=config.length_multiple, group_by_length=config.group_by_length),
        eval_spec, inference)
    if not config.is_chief:
      return  # the chief evaluates, predicts and exports

  if FLAGS.do_eval or FLAGS.do_predict:
    evaluate_and_predict(inference, dev_metrics, splits, label_list)
  if FLAGS.export_dir:
    export_model()


def evaluate_and_predict(inference, dev_metrics, splits, label_list):
  """The dev metrics and reports, and the test predictions, with the best (else latest)
  checkpoint (computed in the training session when this process trained)."""
  checkpoint, why = inference.checkpoint()
  tf.logging.info("Evaluating and predicting with %s (%s).", checkpoint, why)
  if FLAGS.do_eval:
    metrics, outputs = inference.evaluate("eval", dev_metrics)
    write_eval_reports(FLAGS.output_dir, metrics,
                       classifier_metrics.classification_metrics(outputs, label_list)[1])
  if FLAGS.do_predict:
    outputs = inference.outputs("predict")
    if len(outputs["probabilities"]) != len(splits["test"]):
      raise AssertionError("%d predictions for %d test examples" % (
          len(outputs["probabilities"]), len(splits["test"])))
    write_predict_outputs(FLAGS.output_dir, splits["test"], outputs["probabilities"],
                          label_list)
    tf.logging.info("Wrote %d predictions to %s", len(splits["test"]),
                    os.path.join(FLAGS.output_dir, "predict.txt"))


if __name__ == "__main__":
  define_flags()
  command_line.run_main(main)
