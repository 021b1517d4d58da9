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
from bert_mgpu.errors import UsageError
from bert_mgpu.pretraining import task as pretraining_task
from bert_mgpu.training import job


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
  """Validates the flags before anything is read or written. Raises UsageError."""
  if not (FLAGS.do_train or FLAGS.do_eval):
    raise UsageError("Nothing to do: pass --do_train and/or --do_eval.")
  command_line.check_run_flags(("max_eval_steps", "max_predictions_per_seq",
                                "num_train_steps"))
  if FLAGS.num_warmup_steps < 0:
    raise UsageError("--num_warmup_steps=%d: it must be 0 or more." % FLAGS.num_warmup_steps)


def settings_from_flags():
  """The PretrainingSettings of the flags."""
  return pretraining_task.PretrainingSettings(
      FLAGS.bert_config_file, FLAGS.input_file, max_seq_length=FLAGS.max_seq_length,
      max_predictions_per_seq=FLAGS.max_predictions_per_seq,
      max_eval_steps=FLAGS.max_eval_steps, do_eval=FLAGS.do_eval)


def main(_):
  check_flags()
  settings = settings_from_flags()
  job.run_job(pretraining_task.PretrainingTask(command_line.job_settings(), settings))


if __name__ == "__main__":
  define_flags()
  command_line.run_main(main)
