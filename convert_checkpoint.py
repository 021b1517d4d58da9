# coding=utf-8
"""Converts a model between our (Google's) checkpoints and Hugging Face transformers' format,
or sentence-transformers' format for embedding models.

  --to=transformers  a trained output_dir of any run script, or a Google-named checkpoint
                     (Google's release) -> a directory that transformers' AutoConfig,
                     AutoTokenizer and AutoModelFor... load: config.json, model.safetensors,
                     vocab.txt, tokenizer_config.json, special_tokens_map.json.
  --to=tensorflow    a BERT-architecture model saved by transformers (config.json,
                     model.safetensors or pytorch_model.bin, vocab.txt or tokenizer.json)
                     -> bert_model.ckpt, bert_config.json and vocab.txt for
                     --init_checkpoint; --keep_head also keeps a fine-tuned head. A
                     sentence-transformers directory (with modules.json) also gives
                     embedding_settings.json (pooling, normalisation, max_seq_length),
                     which run_embedding_mgpu.py takes from --init_checkpoint's directory.
  --to=sentence_transformers
                     run_embedding_mgpu.py's output_dir -> a directory that
                     SentenceTransformer(DIR) loads: the BERT in transformers' format,
                     modules.json and its modules' configs (docs/HUGGING_FACE.md).

--output must not exist yet or be empty; a conversion writes all of it or nothing.
docs/HUGGING_FACE.md has the name mapping and what each head becomes. Needs the safetensors
package (pip install ".[transformers]" in the repo); torch only to read a pytorch_model.bin.
"""

import tensorflow.compat.v1 as tf

from bert_mgpu import command_line
from bert_mgpu.errors import UsageError
from bert_mgpu.transformers_format import sentence_transformers_format
from bert_mgpu.transformers_format import to_tensorflow
from bert_mgpu.transformers_format import to_transformers

FLAGS = tf.flags.FLAGS

DIRECTIONS = ("transformers", "tensorflow", "sentence_transformers")


def define_flags():
  """Defines the flags; called only under __main__, so the module imports anywhere."""
  flags = tf.flags
  flags.DEFINE_enum("to", None, DIRECTIONS, "transformers: our checkpoint -> transformers' "
                    "format; tensorflow: transformers' (or sentence-transformers') format -> "
                    "our checkpoint; sentence_transformers: an embedding model's output_dir "
                    "-> sentence-transformers' format.")
  flags.DEFINE_string("input", None, "--to=transformers: an output_dir, a directory with one "
                      "checkpoint (Google's release), or a checkpoint prefix. "
                      "--to=tensorflow: a directory transformers' save_pretrained wrote.")
  flags.DEFINE_string("output", None, "The directory to write; must not exist or be empty.")
  flags.DEFINE_string("bert_config_file", None, "--to=transformers: the model's "
                      "bert_config.json, when --input holds none (SQuAD's and pretraining's "
                      "output_dirs).")
  flags.DEFINE_string("vocab_file", None, "--to=transformers: the model's vocab.txt, when "
                      "--input holds none.")
  flags.DEFINE_bool("do_lower_case", None, "--to=transformers: the tokenizer's lower-casing; "
                    "default: model_settings.json's, else true.")
  flags.DEFINE_bool("keep_head", False, "--to=tensorflow: also convert a fine-tuned "
                    "classification, token-classification or question-answering head, with "
                    "labels.txt and model_settings.json, into an output_dir to evaluate, "
                    "predict with or export.")
  flags.DEFINE_integer("max_seq_length", 128, "--to=tensorflow --keep_head: the "
                       "max_seq_length of model_settings.json, when the model has none beside "
                       "it (default 128, or max_position_embeddings when smaller).")


def check_flags():
  """Raises UsageError for a missing or misplaced flag."""
  for name in ("to", "input", "output"):
    if not getattr(FLAGS, name):
      raise UsageError("--%s is required (--to=transformers|tensorflow|sentence_transformers "
                       "--input=DIR --output=DIR)." % name)
  misplaced = {"transformers": ("keep_head", "max_seq_length"),
               "tensorflow": ("bert_config_file", "vocab_file", "do_lower_case"),
               "sentence_transformers": ("keep_head", "max_seq_length", "bert_config_file",
                                         "vocab_file", "do_lower_case")}[FLAGS.to]
  given = [name for name in misplaced if FLAGS[name].present]
  if given:
    raise UsageError("--%s does not apply to --to=%s." % (given[0], FLAGS.to))
  if FLAGS.to == "tensorflow" and sentence_transformers_format.is_sentence_transformers_dir(
      FLAGS.input):
    for name in ("keep_head", "max_seq_length"):
      if FLAGS[name].present:
        raise UsageError("--%s: %s is a sentence-transformers model (modules.json), which has "
                         "no head and keeps its max_seq_length; drop --%s." % (
                             name, FLAGS.input, name))
  if FLAGS.to == "tensorflow" and FLAGS["max_seq_length"].present and not FLAGS.keep_head:
    raise UsageError("--max_seq_length is for the model_settings.json of --keep_head: add "
                     "--keep_head or drop it.")
  command_line.check_positive(("max_seq_length",))


def main(_):
  check_flags()
  if FLAGS.to in ("transformers", "sentence_transformers"):
    if FLAGS.to == "sentence_transformers":
      summary = sentence_transformers_format.to_sentence_transformers(FLAGS.input, FLAGS.output)
    else:
      summary = to_transformers.convert(FLAGS.input, FLAGS.output, FLAGS.bert_config_file,
                                        FLAGS.vocab_file, FLAGS.do_lower_case)
    tf.logging.info("Converted %s (%s): %d weights as %s.", summary["checkpoint"],
                    summary["why"], summary["weights"], summary["architecture"])
    if summary["beside"]:
      tf.logging.info("Written beside the model, which transformers does not read: %s.",
                      ", ".join(summary["beside"]))
    if summary["training_only"]:
      tf.logging.info("Not converted (heads used only in training): %s.",
                      ", ".join(summary["training_only"]))
  elif sentence_transformers_format.is_sentence_transformers_dir(FLAGS.input):
    summary = sentence_transformers_format.from_sentence_transformers(FLAGS.input, FLAGS.output)
    tf.logging.info("Converted the sentence-transformers model %s: %d variables into %s; "
                    "pooling, normalisation and max_seq_length (%s) in %s beside it, which "
                    "run_embedding_mgpu.py --init_checkpoint=%s takes.", FLAGS.input,
                    summary["variables"], summary["checkpoint"],
                    ", ".join("%s=%s" % item for item in summary["embedding_settings"].items()),
                    sentence_transformers_format.EMBEDDING_SETTINGS_FILE, summary["checkpoint"])
  else:
    summary = to_tensorflow.convert(
        FLAGS.input, FLAGS.output, FLAGS.keep_head,
        FLAGS.max_seq_length if FLAGS["max_seq_length"].present else None)
    tf.logging.info("Converted %s: %d variables into %s%s. Its tokenizer %s lower-case: "
                    "train with --do_lower_case=%s.", summary["weights"],
                    summary["variables"], summary["checkpoint"],
                    ", with its %s head" % summary["kept_head"] if summary["kept_head"] else "",
                    "does" if summary["do_lower_case"] else "does not",
                    str(summary["do_lower_case"]).lower())
    if summary["dropped"]:
      tf.logging.warning("Dropped (no counterpart here%s): %s.",
                         "; --keep_head keeps a fine-tuned head"
                         if summary["keep_head_would_keep"] else "",
                         ", ".join(summary["dropped"]))
  tf.logging.info("Wrote %s.", FLAGS.output)


if __name__ == "__main__":
  define_flags()
  command_line.run_main(main)
