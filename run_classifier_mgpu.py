# coding=utf-8
"""Fine-tunes BERT for sentence and sentence-pair classification on every GPU.

The flags and defaults are those of Google's run_classifier.py (docs/FORMATS.md 8) plus
the runner's multi-GPU flags. Tasks (--task_name) and their files are described in
bert_mgpu/classifier/task_registry.py; the shared loop is bert_mgpu/training/runner.py.

Outputs in --output_dir (docs/FORMATS.md 7): labels.txt, best/, eval_results.txt and
eval_report.*, predict.txt (one label per test example, in order), Google's test_results.tsv,
predict_detail.tsv, the model files serving needs, <task>_predict.json (--clue_submission).
--teacher_dir (docs/DISTILLATION.md) trains the model as a student of a trained classifier.
--multi_label (docs/FORMATS.md 13) predicts label sets and keeps thresholds.json; --long_text
(docs/FORMATS.md 14) reads texts longer than max_seq_length in windows or by head and tail.

With --export_dir, the best (else the latest) checkpoint is exported as a SavedModel into
the next numbered version directory there (docs/SERVING.md); alone, it exports a trained
output_dir and needs no data.
"""

import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import clue_submission
from bert_mgpu.classifier import long_text
from bert_mgpu.classifier import multi_label
from bert_mgpu.classifier import task as classifier_task
from bert_mgpu.classifier import task_registry
from bert_mgpu import command_line
from bert_mgpu.distillation import options as distillation_options
from bert_mgpu.errors import UsageError

FLAGS = tf.flags.FLAGS


def define_flags():
  """Defines the flags; called only under __main__, so the module imports anywhere."""
  flags = tf.flags
  flags.DEFINE_string("data_dir", None, "Directory with the task's data files.")
  flags.DEFINE_string("task_name", None,
                      "Task: " + ", ".join(sorted(task_registry.PROCESSORS)) + ".")
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
  distillation_options.define_flags(flags)
  command_line.define_fine_tuning_flags()
  command_line.define_export_flags("classifier")


def settings_from_flags():
  """The classifier_task.ClassifierSettings of the flags."""
  return classifier_task.ClassifierSettings(
      data_dir=FLAGS.data_dir, task_name=FLAGS.task_name,
      bert_config_file=FLAGS.bert_config_file, vocab_file=FLAGS.vocab_file,
      do_lower_case=FLAGS.do_lower_case, max_seq_length=FLAGS.max_seq_length,
      do_eval=FLAGS.do_eval, do_predict=FLAGS.do_predict, best_metric=FLAGS.best_metric,
      best_metric_given=FLAGS["best_metric"].present, multi_label=FLAGS.multi_label,
      label_separator=FLAGS.label_separator,
      multi_label_threshold=FLAGS.multi_label_threshold,
      multi_label_threshold_given=FLAGS["multi_label_threshold"].present,
      literal_special_tokens=FLAGS.literal_special_tokens, long_text=FLAGS.long_text,
      head_tokens=FLAGS.head_tokens, doc_stride=FLAGS.doc_stride,
      max_windows=FLAGS.max_windows, window_pooling=FLAGS.window_pooling,
      group_by_length_within_label=FLAGS.group_by_length_within_label,
      early_stopping_patience=FLAGS.early_stopping_patience, num_workers=FLAGS.num_workers,
      clue_submission=FLAGS.clue_submission, export_format=command_line.export_format(),
      distillation=command_line.distillation_options())


def check_flags():
  """Validates the flags before anything is written (the model and data files are checked
  when the job reads them). Returns the ClassifierSettings."""
  if FLAGS.clue_submission:
    clue_submission.check_flags(FLAGS.task_name, FLAGS.do_predict)
  settings = settings_from_flags()
  if command_line.check_actions(("data_dir", "task_name")):
    command_line.check_run_flags()
    return settings
  if not tf.gfile.IsDirectory(FLAGS.data_dir):
    raise UsageError("--data_dir=%s: no such directory." % FLAGS.data_dir)
  if FLAGS.num_workers < 0:
    raise UsageError("--num_workers=%d: use 0 (all cores) or more." % FLAGS.num_workers)
  if FLAGS.multi_label:
    settings.threshold_choice(FLAGS.do_train, FLAGS.output_dir).check(FLAGS.do_eval)
  settings.best_metric_key()  # refuses micro_f1 without --multi_label
  if settings.distillation.unlabeled_file and FLAGS.group_by_length_within_label:
    raise UsageError("--group_by_length_within_label with --unlabeled_file: unlabelled "
                     "examples have no label to group by; drop one of the two.")
  command_line.refuse_unread_flags(dict(long_text.unread_flags(FLAGS.long_text),
                                        **multi_label.unread_flags(FLAGS.multi_label)))
  long_text.check_options(settings.feature_options(), FLAGS.max_seq_length)
  command_line.check_run_flags()
  return settings


def main(_):
  settings = check_flags()
  command_line.run_or_export(classifier_task.ClassifierTask, settings)


if __name__ == "__main__":
  define_flags()
  command_line.run_main(main)
