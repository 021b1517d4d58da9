# coding=utf-8
"""Fine-tunes BERT for named-entity recognition (token classification) on every GPU.

Google's classifier flags keep their names and defaults (docs/FORMATS.md 8), plus the
runner's multi-GPU flags. The data (--data_format=conll or cluener, ner/formats.py) is read
and checked before anything is written; the task unit is bert_mgpu/ner/task.py, the head
bert_mgpu/ner/model.py, the loop bert_mgpu/training/runner.py.

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
from bert_mgpu.distillation import options as distillation_options
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import featurizing
from bert_mgpu.ner import formats
from bert_mgpu.ner import global_pointer
from bert_mgpu.ner import task as ner_task

FLAGS = tf.flags.FLAGS


# ---------------------------------------------------------------------------
# Flags: Google's run_classifier.py flags with their defaults, then ours
# ---------------------------------------------------------------------------

def define_flags():
  """Defines the flags; called only under __main__, so the module imports anywhere."""
  flags = tf.flags
  flags.DEFINE_string("data_dir", None, "Directory with train/dev/test files (conll .txt, "
                      ".bio, .bmes, .char.bmes; CLUENER .json; CMeEE_*.json).")
  flags.DEFINE_enum("data_format", "auto", ["auto"] + list(formats.DATA_FORMATS),
                    "conll, cluener, cmeee (CBLUE's CMeEE JSON), or auto: conll or cluener "
                    "by the file names in --data_dir.")
  command_line.define_shared_flags([
      "bert_config_file", "vocab_file", "output_dir", "init_checkpoint", "do_lower_case",
      "max_seq_length", "do_train", "do_eval", "do_predict", "train_batch_size",
      "eval_batch_size", "predict_batch_size", "learning_rate", "num_train_epochs",
      "warmup_proportion", "save_checkpoints_steps", "group_by_length"])
  flags.DEFINE_integer("doc_stride", 64, "A sentence longer than max_seq_length - 2 word "
                       "pieces is cut into windows whose starts are this many pieces apart.")
  flags.DEFINE_enum("ner_head", "tags", ["tags", "crf"] + list(global_pointer.SPAN_HEADS),
                    "tags: a softmax per token; crf: a linear-chain CRF (Viterbi); "
                    "global_pointer, efficient_global_pointer: a score per (start, end, type), "
                    "so entities may nest (docs/NER.md).")
  flags.DEFINE_bool("use_crf", False, "Means --ner_head=crf: decode with a linear-chain CRF "
                    "(Viterbi) and train by its likelihood, instead of a softmax per token.")
  flags.DEFINE_enum("best_metric", "f1", ["f1", "macro_f1"], "With --do_train and "
                    "--do_eval: the dev metric whose best checkpoint is kept in "
                    "output_dir/best; eval and predict use output_dir/best when it exists.")
  flags.DEFINE_integer("early_stopping_patience", 0, "Stop after this many evaluations "
                       "without a better --best_metric (0: never).")
  distillation_options.define_flags(flags)
  command_line.define_fine_tuning_flags()
  command_line.define_export_flags("model")


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------

def check_flags():
  """Validates the flags before anything is written (the model and data files are checked
  when the job reads them)."""
  if command_line.check_actions(("data_dir",)):
    command_line.check_run_flags()
    return
  if not os.path.isdir(FLAGS.data_dir):
    raise UsageError("--data_dir=%s: no such directory." % FLAGS.data_dir)
  command_line.check_run_flags(("doc_stride",))
  featurizing.check_window_settings(FLAGS.max_seq_length, FLAGS.doc_stride)
  ner_head()  # --use_crf against --ner_head; what the head cannot do, NerTask refuses


def ner_head():
  """--ner_head, with --use_crf meaning crf; UsageError when the two disagree."""
  if FLAGS.use_crf and FLAGS["ner_head"].present and FLAGS.ner_head != "crf":
    raise UsageError("--use_crf means --ner_head=crf, but --ner_head=%s; drop one."
                     % FLAGS.ner_head)
  return "crf" if FLAGS.use_crf else FLAGS.ner_head


def settings_from_flags(export_format):
  """The NerSettings of the flags (export_format: command_line.export_format()'s)."""
  return ner_task.NerSettings(
      FLAGS.data_dir, FLAGS.vocab_file, FLAGS.bert_config_file, data_format=FLAGS.data_format,
      do_lower_case=FLAGS.do_lower_case, max_seq_length=FLAGS.max_seq_length,
      doc_stride=FLAGS.doc_stride, ner_head=ner_head(), do_eval=FLAGS.do_eval,
      do_predict=FLAGS.do_predict, best_metric=FLAGS.best_metric,
      early_stopping_patience=FLAGS.early_stopping_patience,
      export_format=export_format, distillation=command_line.distillation_options())


def main(_):
  export_format = command_line.export_format()  # first: refused before anything else runs
  check_flags()
  command_line.run_or_export(ner_task.NerTask, settings_from_flags(export_format))


if __name__ == "__main__":
  define_flags()
  command_line.run_main(main)
