# coding=utf-8
"""Fine-tunes BERT for named-entity recognition (token classification) on every GPU.

Google's classifier flags keep their names and defaults (docs/FORMATS.md 8), plus the
runner's multi-GPU flags. The data (--data_format=conll or cluener, ner/formats.py) is read
and checked before anything is written; the head is bert_mgpu/ner/model.py; the loop
bert_mgpu/training/runner.py.

Outputs in --output_dir:
  labels.txt                the tag list (with --do_train; reused without it)
  vocab.txt, bert_config.json, model_settings.json
                            with --do_train: what serving the model needs (ner/serving.py)
  best/                     the best dev checkpoint by --best_metric (--do_train --do_eval)
  eval_results.txt          precision, recall, f1 (micro over entities), loss, global_step
  eval_report.txt, .json    per entity type, with support
  predict.txt               conll: each test-file line + TAB + its predicted tag
  predict.json              cluener: CLUENER's submission format
  predict_entities.jsonl    both: {"text", "entities": [{"type", "start", "end", "text"}]}

With --export_dir, the best (else the latest) checkpoint is exported as a SavedModel into the
next numbered version directory there (docs/SERVING.md); alone, it exports a trained
output_dir and needs no --data_dir.
"""

import os

import tensorflow.compat.v1 as tf

from bert_mgpu import command_line
from bert_mgpu.data import length_grouping
from bert_mgpu.data import output_files
from bert_mgpu.data.output_files import atomic_write_text
from bert_mgpu.data import tfrecord_io
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import featurizing
from bert_mgpu.ner import formats
from bert_mgpu.ner import model as ner_model
from bert_mgpu.ner import scoring as ner_scoring
from bert_mgpu.ner import serving as ner_serving
from bert_mgpu.ner import tag_labels
from bert_mgpu.ner import writers
from bert_mgpu.serving import model_files
from bert_mgpu.training import checkpoints
from bert_mgpu.training import phases
from bert_mgpu.training import run_settings
from bert_mgpu.training import runner

FLAGS = tf.flags.FLAGS

# The scheme CLUENER's spans are written in as tags.
CLUENER_SCHEME = "BIO"


# ---------------------------------------------------------------------------
# Data: sentences, windows, records
# ---------------------------------------------------------------------------

class Split(object):
  """One split, read and featurized.

  Attributes:
    data: the formats.NerFile.
    featurized: per sentence, (SentencePieces, list of NerWindow).
    record_file: the TFRecord file of its windows (once written).
  """

  def __init__(self, data):
    self.data = data
    self.featurized = None
    self.record_file = None

  @property
  def windows(self):
    return [window for _, windows in self.featurized for window in windows]


def feature_spec(max_seq_length):
  return {name: tf.FixedLenFeature([max_seq_length], tf.int64)
          for name in tfrecord_io.SEQUENCE_FEATURES}


def window_records(windows):
  """Serialized tf.train.Examples of windows: BERT's inputs, tag_ids and tag_mask."""
  for window in windows:
    features = {
        "input_ids": window.input_ids, "input_mask": window.input_mask,
        "segment_ids": window.segment_ids, "tag_ids": window.label_ids,
        "tag_mask": window.label_mask}
    yield tf.train.Example(features=tf.train.Features(feature={
        name: tfrecord_io.int64_feature(values) for name, values in features.items()
    })).SerializeToString()


def read_splits(label_list_dir):
  """Reads every split asked for and the tag list, and checks every tag, before anything
  is written.

  Returns:
    (dict split name -> Split, the data format, the label list, its scheme).
  """
  data_format = (formats.detect_data_format(FLAGS.data_dir) if FLAGS.data_format == "auto"
                 else FLAGS.data_format)
  wanted = [name for name, flag in (("train", FLAGS.do_train), ("dev", FLAGS.do_eval),
                                    ("test", FLAGS.do_predict)) if flag]
  splits = {name: Split(formats.read_split(FLAGS.data_dir, data_format, name, CLUENER_SCHEME))
            for name in wanted}
  if FLAGS.do_train:
    label_list = tag_labels.resolve_label_list(splits["train"].data, FLAGS.data_dir)
  else:
    labels_file = os.path.join(label_list_dir, tag_labels.LABELS_FILE)
    if not os.path.isfile(labels_file):
      raise UsageError("%s not found: evaluate or predict with the --output_dir of a "
                       "--do_train run (it keeps the tag list there)." % labels_file)
    label_list = tag_labels.read_label_file(labels_file)
  scheme = ner_scoring.detect_scheme(label_list)
  for split in splits.values():
    tag_labels.check_tags(split.data, scheme, label_list if split.data.tagged else None)
    if split.data.dropped_overlaps:
      tf.logging.warning("%s: %d entities overlap an earlier one and were dropped (first on "
                         "line %s).", split.data.path, split.data.dropped_overlaps,
                         split.data.first_overlap_line)
  tf.logging.info("NER data: %s format, %s scheme, %d tags: %s", data_format, scheme,
                  len(label_list), " ".join(label_list))
  return splits, data_format, label_list, scheme


def featurize(splits, tokenizer, label_list, cache_dir):
  """Windows every split (unless done already) and writes its TFRecord file into
  cache_dir."""
  for name, split in splits.items():
    if split.featurized is None:
      split.featurized = featurizing.featurize_sentences(
          split.data.sentences, tokenizer, label_list, FLAGS.max_seq_length,
          FLAGS.doc_stride)
    split.record_file = os.path.join(cache_dir, "ner_%s.tf_record" % name)
    count = tfrecord_io.write_records_atomically(split.record_file,
                                                 window_records(split.windows))
    tf.logging.info("%s: %d sentences in %d windows (%d longer than max_seq_length=%d were "
                    "split)", split.data.path, len(split.featurized), count,
                    sum(len(w) > 1 for _, w in split.featurized), FLAGS.max_seq_length)


def with_loss_weights(dataset, num_replicas):
  """Adds loss_weight = replicas / (first pieces in the micro-batch) to every row, so that
  the towers' mean loss is the token mean over the whole batch (ner_model)."""
  def add(batch):
    count = tf.reduce_sum(tf.cast(batch["tag_mask"], tf.float32))
    batch = dict(batch)
    batch["loss_weight"] = tf.fill(tf.shape(batch["tag_mask"])[:1],
                                   float(num_replicas) / tf.maximum(count, 1.0))
    return batch
  return dataset.map(add)


# ---------------------------------------------------------------------------
# Predictions and scores
# ---------------------------------------------------------------------------

def sentence_tags(split, window_tag_ids, label_list, scheme):
  """The predicted tags of every sentence, from the windows' per-piece predictions."""
  tags, start = [], 0
  for aligned, windows in split.featurized:
    predicted = window_tag_ids[start:start + len(windows)]
    tags.append(featurizing.tags_from_windows(aligned, windows, predicted, label_list, scheme))
    start += len(windows)
  if start != len(window_tag_ids):
    raise AssertionError("%d window predictions for %d windows" % (len(window_tag_ids), start))
  return tags


def ner_metrics(split, outputs, label_list, scheme):
  """(eval_results metrics, the full ner_scoring.score result) of a split's outputs."""
  predicted = sentence_tags(split, outputs["tag_ids"], label_list, scheme)
  result = ner_scoring.score([s.tags for s in split.data.sentences], predicted, scheme)
  # Token mean of the cross-entropy, or the mean CRF negative log-likelihood per window.
  denominator = len(outputs["row_loss"]) if FLAGS.use_crf else outputs["row_tokens"].sum()
  loss = float(outputs["row_loss"].sum() / max(denominator, 1.0))
  metrics = {"precision": result["precision"], "recall": result["recall"],
             "f1": result["f1"], "macro_f1": result["macro_f1"], "loss": loss}
  return metrics, result


def write_eval_reports(output_dir, result):
  """eval_report.txt (per entity type, for a person) and eval_report.json."""
  output_files.write_eval_report(output_dir, ner_scoring.format_report(result), result,
                                 sort_keys=True)


def write_predictions(output_dir, split, data_format, tags):
  """predict.txt (conll) or predict.json (cluener), and predict_entities.jsonl."""
  if data_format == "conll":
    writers.write_conll_predictions(os.path.join(output_dir, "predict.txt"), split.data, tags)
  else:
    writers.write_cluener_predictions(os.path.join(output_dir, "predict.json"),
                                      split.data.sentences, tags)
  writers.write_predict_entities(os.path.join(output_dir, "predict_entities.jsonl"),
                                 split.data.sentences, tags)


# ---------------------------------------------------------------------------
# Flags: Google's run_classifier.py flags with their defaults, then ours
# ---------------------------------------------------------------------------

def define_flags():
  """Defines the flags; called only under __main__, so the module imports anywhere."""
  flags = tf.flags
  flags.DEFINE_string("data_dir", None, "Directory with train/dev/test files (conll .txt, "
                      ".bio, .bmes, .char.bmes, or CLUENER .json).")
  flags.DEFINE_enum("data_format", "auto", ["auto"] + list(formats.DATA_FORMATS),
                    "conll, cluener, or auto: by the file names in --data_dir.")
  command_line.define_shared_flags([
      "bert_config_file", "vocab_file", "output_dir", "init_checkpoint", "do_lower_case",
      "max_seq_length", "do_train", "do_eval", "do_predict", "train_batch_size",
      "eval_batch_size", "predict_batch_size", "learning_rate", "num_train_epochs",
      "warmup_proportion", "save_checkpoints_steps", "group_by_length"])
  flags.DEFINE_integer("doc_stride", 64, "A sentence longer than max_seq_length - 2 word "
                       "pieces is cut into windows whose starts are this many pieces apart.")
  flags.DEFINE_bool("use_crf", False, "Decode with a linear-chain CRF (Viterbi) and train by "
                    "its likelihood, instead of a softmax per token.")
  flags.DEFINE_enum("best_metric", "f1", ["f1", "macro_f1"], "With --do_train and "
                    "--do_eval: the dev metric whose best checkpoint is kept in "
                    "output_dir/best; eval and predict use output_dir/best when it exists.")
  flags.DEFINE_integer("early_stopping_patience", 0, "Stop after this many evaluations "
                       "without a better --best_metric (0: never).")
  flags.DEFINE_string("export_dir", None, "Export the trained model as a SavedModel into the "
                      "next numbered version directory here (TF Serving's layout); alone, it "
                      "exports the model in --output_dir and needs no --data_dir.")


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------

def check_flags():
  """Validates flags and files before anything is written. Returns the BertConfig (None
  when only exporting: the config then comes from output_dir)."""
  if command_line.check_actions(FLAGS, ("data_dir",)):
    command_line.check_run_flags(FLAGS)
    return None
  if not os.path.isdir(FLAGS.data_dir):
    raise UsageError("--data_dir=%s: no such directory." % FLAGS.data_dir)
  command_line.check_run_flags(FLAGS, ("doc_stride",))
  featurizing.check_window_settings(FLAGS.max_seq_length, FLAGS.doc_stride)
  return command_line.load_bert_config(FLAGS.bert_config_file, FLAGS.max_seq_length)


def prepare(bert_config):
  """Reads and checks everything, makes the device check, claims output_dir and writes the
  tag list and the windows. Returns (config, splits, data format, label list, scheme)."""
  tokenizer = command_line.load_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case, bert_config,
                                          FLAGS.bert_config_file)
  splits, data_format, label_list, scheme = read_splits(FLAGS.output_dir)
  num_train_windows = 0
  if FLAGS.do_train:
    # Steps count training windows: featurize the training split first (in memory).
    splits["train"].featurized = featurizing.featurize_sentences(
        splits["train"].data.sentences, tokenizer, label_list, FLAGS.max_seq_length,
        FLAGS.doc_stride)
    num_train_windows = len(splits["train"].windows)
  config = run_settings.make_run_config(FLAGS, num_train_examples=num_train_windows,
                                        example_noun="training windows")
  if not FLAGS.do_train:
    checkpoints.checkpoint_for_inference(FLAGS.output_dir, FLAGS.init_checkpoint, "best")
  output_files.claim_output_dir(config)
  if FLAGS.do_train and config.is_chief:
    atomic_write_text(os.path.join(FLAGS.output_dir, tag_labels.LABELS_FILE),
                      "".join(label + "\n" for label in label_list))
    model_files.save_model_files(
        FLAGS.output_dir, FLAGS.vocab_file, FLAGS.bert_config_file,
        ner_serving.ner_settings(FLAGS.do_lower_case, FLAGS.max_seq_length, FLAGS.doc_stride,
                                 FLAGS.use_crf))
  featurize(splits, tokenizer, label_list, config.cache_dir)
  return config, splits, data_format, label_list, scheme


def export_model():
  """Exports the best (else latest) checkpoint of output_dir to --export_dir."""
  path, checkpoint, why = ner_serving.export_output_dir(FLAGS.output_dir, FLAGS.export_dir)
  tf.logging.info("Exported %s (%s) as a SavedModel to %s", checkpoint, why, path)


def main(_):
  bert_config = check_flags()
  if command_line.export_only(FLAGS):
    export_model()
    return
  config, splits, data_format, label_list, scheme = prepare(bert_config)
  spec = feature_spec(FLAGS.max_seq_length)
  model_fn = ner_model.create_model_fn(bert_config, len(label_list), FLAGS.use_crf,
                                       max_seq_length=FLAGS.max_seq_length)

  def make_dataset(split, batch_size):
    return lambda: tfrecord_io.make_dataset([splits[split].record_file], spec, batch_size,
                                            is_training=False,
                                            length_multiple=config.length_multiple)

  def dev_metrics(outputs):
    return ner_metrics(splits["dev"], outputs, label_list, scheme)[0]

  inference = runner.dev_and_test_inference(config, model_fn, make_dataset, FLAGS.do_eval,
                                            FLAGS.do_predict)
  if FLAGS.do_train:
    eval_spec = None
    if FLAGS.do_eval:
      eval_spec = runner.EvalSpec(inference.datasets["eval"][0], dev_metrics,
                                  FLAGS.best_metric, FLAGS.early_stopping_patience)
    train_windows = splits["train"].windows
    shuffle_buffer = min(len(train_windows), 100000)
    log_tag_skew(config, train_windows, len(label_list), shuffle_buffer)
    runner.train(
        config, model_fn,
        lambda skip: with_loss_weights(tfrecord_io.make_dataset(
            [splits["train"].record_file], spec, config.micro_batch_size, is_training=True,
            seed=FLAGS.random_seed, shuffle_buffer=shuffle_buffer, skip_batches=skip,
            length_multiple=config.length_multiple, group_by_length=config.group_by_length),
                                       config.num_towers * config.num_workers),
        eval_spec, inference)
    if not config.is_chief:
      return  # the chief evaluates and predicts
  if FLAGS.do_eval or FLAGS.do_predict:
    evaluate_and_predict(inference, splits, data_format, label_list, scheme)
  if FLAGS.export_dir:
    export_model()


def log_tag_skew(config, windows, num_tags, shuffle_buffer):
  """With --group_by_length, on the chief: logs how much grouping skews the tag mix of the
  training batches (tfrecord_io.log_label_skew; a warning when it is marked). A window's
  targets are the shares of each tag among its tagged pieces (length_grouping.tag_shares)."""
  if not (config.group_by_length and config.is_chief):
    return
  with phases.timed("featurize"):
    lengths, tag_ids, tag_mask = featurizing.tag_skew_inputs(windows)
    targets = length_grouping.tag_shares(tag_ids, tag_mask, num_tags)  # [n, tags]
    tfrecord_io.log_label_skew(lengths, targets, config.micro_batch_size, shuffle_buffer,
                               noun="tag")


def evaluate_and_predict(inference, splits, data_format, label_list, scheme):
  """The dev scores and reports, and the test predictions, with the best (else latest)
  checkpoint (computed in the training session when this process trained)."""
  checkpoint, why = inference.checkpoint()
  tf.logging.info("Evaluating and predicting with %s (%s).", checkpoint, why)
  if FLAGS.do_eval:
    outputs = inference.outputs("eval")
    metrics, result = ner_metrics(splits["dev"], outputs, label_list, scheme)
    runner.write_eval_results(FLAGS.output_dir, metrics, checkpoint)
    write_eval_reports(FLAGS.output_dir, result)
  if FLAGS.do_predict:
    outputs = inference.outputs("predict")
    tags = sentence_tags(splits["test"], outputs["tag_ids"], label_list, scheme)
    write_predictions(FLAGS.output_dir, splits["test"], data_format, tags)
    tf.logging.info("Wrote the predictions of %d sentences (%d entities) to %s",
                    len(tags), sum(len(ner_scoring.entities(t)) for t in tags),
                    FLAGS.output_dir)


if __name__ == "__main__":
  define_flags()
  command_line.run_main(main)
