# coding=utf-8
"""Trains BERT sentence encoders (CoSENT, in-batch negatives / SimCSE, Sentence-BERT) on
every GPU, with the loss over the whole global batch (docs/EMBEDDINGS.md).

The towers' embeddings meet in one loss (bert_mgpu/distributed/global_batch.py), so k
towers on any number of workers give exactly the update of one device with the whole
batch. Data in --data_dir: train.*, dev.*, test.* as .tsv, .jsonl or .txt
(bert_mgpu/embedding/data.py).

Outputs in --output_dir: best/, eval_results.txt (spearman, pearson and loss of scored dev
pairs; else top1), test_results.txt (a scored test set), predict.txt (one cosine per test
pair), embeddings.npy and embeddings.txt (--embed_file), model_settings.json (the kind,
pooling and normalisation) with vocab.txt and bert_config.json.

With --export_dir, the best (else the latest) checkpoint is exported into the next numbered
version directory there (a SavedModel, model.onnx or both: --export_format; its output
"embeddings" [batch, hidden]); alone (no --do_* or --embed_file), it exports a trained
output_dir. predict_text.py serves the export, and searches a corpus with it
(docs/EMBEDDINGS.md).
"""

import tensorflow.compat.v1 as tf

from bert_mgpu import command_line
from bert_mgpu.embedding import data
from bert_mgpu.embedding import losses
from bert_mgpu.embedding import model as embedding_model
from bert_mgpu.embedding import task as embedding_task
from bert_mgpu.errors import UsageError

FLAGS = tf.flags.FLAGS
# Something to do beside --do_*: a run with it is not an export alone.
OTHER_ACTIONS = ("embed_file",)


def define_flags():
  """Defines the flags; called only under __main__, so the module imports anywhere."""
  flags = tf.flags
  flags.DEFINE_string("data_dir", None, "Directory with train.*, dev.* and test.* (.tsv, "
                      ".jsonl or .txt; docs/EMBEDDINGS.md).")
  flags.DEFINE_enum("data_format", "auto", list(data.DATA_FORMATS), "The files' layout: "
                    "pairs (with or without a score), triplets (anchor, positive, hard "
                    "negatives) or sentences; auto decides by extension and columns and "
                    "logs what it chose.")
  command_line.define_shared_flags([
      "bert_config_file", "vocab_file", "output_dir", "init_checkpoint", "do_lower_case",
      "max_seq_length", "do_train", "do_eval", "do_predict", "train_batch_size",
      "eval_batch_size", "predict_batch_size", "learning_rate", "num_train_epochs",
      "warmup_proportion", "save_checkpoints_steps", "group_by_length"],
      max_seq_length=64, eval_batch_size=32, predict_batch_size=32)
  flags.DEFINE_enum("loss", losses.COSENT, list(losses.LOSSES), "cosent: scored pairs, "
                    "ranked over the global batch; in_batch: each anchor against every "
                    "positive and hard negative of the global batch (pairs, triplets, or "
                    "sentences encoded twice: unsupervised SimCSE); softmax: Sentence-BERT's "
                    "classifier over (u, v, |u - v|), integer labels.")
  flags.DEFINE_float("cosent_scale", 20.0, "CoSENT's lambda.")
  flags.DEFINE_float("temperature", 0.05, "in_batch's tau: logits are cos / tau.")
  flags.DEFINE_float("positive_threshold", None, "in_batch on scored pairs: train the pairs "
                     "scoring at least this (default: the top fifth of the training scores' "
                     "range: 4 on 0-5, 1 on 0/1).")
  flags.DEFINE_integer("hard_negatives", 1, "in_batch on triplets: hard negatives per anchor "
                       "(JSON lines may list more; the first ones are taken).")
  flags.DEFINE_enum("pooling", embedding_model.MEAN, list(embedding_model.POOLINGS),
                    "The sentence vector: mean of the last layer's tokens, [CLS], BERT's "
                    "pooler, or the mean of the first and last layers' average.")
  flags.DEFINE_bool("normalize_embeddings", True, "Write and serve unit-length vectors "
                    "(inner product = cosine). Training and scores use cosines either way.")
  flags.DEFINE_enum("best_metric", "spearman", list(embedding_task.BEST_METRICS),
                    "With --do_train and --do_eval: the dev metric whose best checkpoint is "
                    "kept in output_dir/best (a dev set without scores: top1).")
  flags.DEFINE_integer("early_stopping_patience", 0, "Stop after this many evaluations "
                       "without a better --best_metric (0: never).")
  flags.DEFINE_string("embed_file", None, "A file of texts, one per line: their embeddings "
                      "go to output_dir/embeddings.npy and the texts to embeddings.txt.")
  command_line.define_export_flags("embedding model")
  command_line.define_fine_tuning_flags()


def settings_from_flags(export_format):
  """The EmbeddingSettings of the flags (export_format: command_line.export_format()'s)."""
  return embedding_task.EmbeddingSettings(
      data_dir=FLAGS.data_dir, data_format=FLAGS.data_format,
      bert_config_file=FLAGS.bert_config_file, vocab_file=FLAGS.vocab_file,
      do_lower_case=FLAGS.do_lower_case, max_seq_length=FLAGS.max_seq_length,
      do_eval=FLAGS.do_eval, do_predict=FLAGS.do_predict, loss=FLAGS.loss,
      cosent_scale=FLAGS.cosent_scale, temperature=FLAGS.temperature,
      positive_threshold=FLAGS.positive_threshold, hard_negatives=FLAGS.hard_negatives,
      hard_negatives_given=FLAGS["hard_negatives"].present,
      pooling=FLAGS.pooling, normalize_embeddings=FLAGS.normalize_embeddings,
      best_metric=FLAGS.best_metric, best_metric_given=FLAGS["best_metric"].present,
      early_stopping_patience=FLAGS.early_stopping_patience, embed_file=FLAGS.embed_file,
      export_format=export_format,
      given_flags=[name for name in ("pooling", "normalize_embeddings", "max_seq_length",
                                     "do_lower_case") if FLAGS[name].present])


def check_flags(export_format):
  """Validates the flags before anything is written. Returns the EmbeddingSettings."""
  reads_data = FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict
  command_line.check_actions(("bert_config_file", "vocab_file") +
                             (("data_dir",) if reads_data else ()), other_actions=OTHER_ACTIONS)
  if FLAGS.data_dir and not tf.gfile.IsDirectory(FLAGS.data_dir):
    raise UsageError("--data_dir=%s: no such directory." % FLAGS.data_dir)
  if FLAGS.embed_file and not tf.gfile.Exists(FLAGS.embed_file):
    raise UsageError("--embed_file=%s: no such file." % FLAGS.embed_file)
  if FLAGS.adversarial != "none" or FLAGS.rdrop_alpha > 0:
    raise UsageError("--%s runs per tower, and the embedding losses span the global batch: "
                     "drop it (docs/EMBEDDINGS.md)." % (
                         "adversarial" if FLAGS.adversarial != "none" else "rdrop_alpha"))
  if not FLAGS.temperature > 0 or not FLAGS.cosent_scale > 0:
    raise UsageError("--temperature and --cosent_scale must be positive.")
  if FLAGS.hard_negatives < 0:
    raise UsageError("--hard_negatives=%d: use 0 or more." % FLAGS.hard_negatives)
  command_line.refuse_unread_flags(dict(
      {"cosent_scale": "--loss=cosent"} if FLAGS.loss != losses.COSENT else {},
      **({"temperature": "--loss=in_batch", "positive_threshold": "--loss=in_batch",
          "hard_negatives": "--loss=in_batch"} if FLAGS.loss != losses.IN_BATCH else {})))
  command_line.check_run_flags()
  settings = settings_from_flags(export_format)
  embedding_task.adopt_start_settings(FLAGS.init_checkpoint, settings)
  return settings


def main(_):
  export_format = command_line.export_format()  # first: refused before anything else runs
  settings = check_flags(export_format)
  command_line.run_or_export(embedding_task.EmbeddingTask, settings,
                             other_actions=OTHER_ACTIONS)


if __name__ == "__main__":
  define_flags()
  command_line.run_main(main)
