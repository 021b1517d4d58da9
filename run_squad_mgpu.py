# coding=utf-8
"""Fine-tunes BERT for SQuAD-style reading comprehension on every GPU.

Reads SQuAD JSON (v1.1, and v2.0 with --version_2_with_negative); CMRC 2018 and DRCD use
the same JSON. The task unit is bert_mgpu/squad/ (task.py, the head in model.py, reading and
windowing in data.py, scoring in scoring.py). The flags are Google's run_squad.py flags
(docs/FORMATS.md 8) plus the runner's.

Outputs in --output_dir, with --do_predict:
  predictions.json        {id: answer text}
  nbest_predictions.json  {id: [{text, probability, start_logit, end_logit}, ...]}
  null_odds.json          {id: null score - best non-null score} (v2 only)
  eval_results.txt        exact_match, f1 (and the v2 figures), when the predict file
                          has answers: SQuAD's official scoring for English, CMRC
                          2018's character-level scoring for Chinese (--scoring).
With --do_train, also what serving needs: vocab.txt, bert_config.json, model_settings.json.

With --export_dir, the best (else the latest) checkpoint is exported into the next numbered
version directory there (a SavedModel, model.onnx or both: --export_format; docs/SERVING.md);
alone (no --do_*), it exports a trained output_dir. In a run that exports without training,
--n_best_size, --max_answer_length and --null_score_diff_threshold, when given, replace the
trained ones in the export.
predict_text.py then answers questions from JSON lines or HTTP.
"""

import math

import tensorflow.compat.v1 as tf

from bert_mgpu import bert_files
from bert_mgpu import command_line
from bert_mgpu.errors import UsageError
from bert_mgpu.squad import serving as squad_serving
from bert_mgpu.squad import task as squad_task


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
  command_line.define_export_flags("reading-comprehension model")


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------

def check_flags():
  """Validates flags and files before anything is written (the model files are checked when
  the job reads them)."""
  if command_line.check_actions(()):
    # The model's windows and vocab are its training's (model_settings.json).
    command_line.refuse_unread_flags({name: "--do_train or --do_predict" for name in (
        "train_file", "predict_file", "vocab_file", "bert_config_file", "do_lower_case",
        "max_seq_length", "doc_stride", "max_query_length", "version_2_with_negative")})
  if FLAGS.do_train:
    bert_files.require_file("train_file", FLAGS.train_file)
  if FLAGS.do_predict:
    bert_files.require_file("predict_file", FLAGS.predict_file)
  command_line.check_run_flags(("doc_stride", "max_query_length", "n_best_size",
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


def settings_from_flags(export_format):
  """The SquadSettings of the flags (export_format: command_line.export_format()'s)."""
  return squad_task.SquadSettings(
      train_file=FLAGS.train_file, predict_file=FLAGS.predict_file,
      bert_config_file=FLAGS.bert_config_file, vocab_file=FLAGS.vocab_file,
      do_lower_case=FLAGS.do_lower_case, do_predict=FLAGS.do_predict,
      max_seq_length=FLAGS.max_seq_length,
      doc_stride=FLAGS.doc_stride, max_query_length=FLAGS.max_query_length,
      n_best_size=FLAGS.n_best_size, max_answer_length=FLAGS.max_answer_length,
      version_2_with_negative=FLAGS.version_2_with_negative,
      null_score_diff_threshold=FLAGS.null_score_diff_threshold, scoring=FLAGS.scoring,
      export_format=export_format,
      decoding_overrides={name: getattr(FLAGS, name) for name in
                          squad_serving.DECODING_SETTINGS if FLAGS[name].present})


def main(_):
  export_format = command_line.export_format()  # first: refused before anything else runs
  check_flags()
  command_line.run_or_export(squad_task.SquadTask, settings_from_flags(export_format))


if __name__ == "__main__":
  define_flags()
  command_line.run_main(main)
