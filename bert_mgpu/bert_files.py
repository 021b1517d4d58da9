# coding=utf-8
"""The BERT config and vocab a model is built from, loaded and checked.

- require_file(): a file a flag names exists and is a file.
- load_bert_config(): bert_config.json, checked against max_seq_length.
- load_tokenizer(): vocab.txt as a FullTokenizer, checked against the config.
- checked_tokenizer(): the same check for a caller that holds the vocab_size alone (the ONNX
  Runtime predictor reads it from the JSON, without TensorFlow).

Takes values, not flags: the run scripts, the task units and serving call it alike. Errors
are UsageErrors in the flags' words (--bert_config_file=...), as the user gave the paths.

Imports without TensorFlow (predict_text.py --backend=onnxruntime uses checked_tokenizer);
the loaders that need it import it when called.
"""

from bert_mgpu.errors import UsageError
import tokenization


def require_file(flag_name, path):
  """Raises UsageError unless the file flag `flag_name` is set to an existing path."""
  # Imported here, not at the top: see the module docstring.
  import tensorflow.compat.v1 as tf  # pylint: disable=import-outside-toplevel
  if not path:
    raise UsageError("--%s is required." % flag_name)
  if not tf.gfile.Exists(path):
    raise UsageError("--%s=%s: no such file. Check the path." % (flag_name, path))
  if tf.gfile.IsDirectory(path):
    raise UsageError("--%s=%s is a directory: give the file itself." % (flag_name, path))


def load_bert_config(config_file, max_seq_length):
  """Reads bert_config.json and checks max_seq_length against it.

  Args:
    config_file: the bert_config.json path (--bert_config_file).
    max_seq_length: the sequence length the model will be built for.

  Returns:
    The modeling.BertConfig.

  Raises:
    UsageError: the file is missing, unreadable or not a usable config, or
      max_seq_length exceeds its max_position_embeddings.
  """
  import modeling  # pylint: disable=import-outside-toplevel  # it imports TensorFlow
  require_file("bert_config_file", config_file)
  try:
    bert_config = modeling.BertConfig.from_json_file(config_file)
  except ValueError as e:
    raise UsageError(str(e))
  if max_seq_length > bert_config.max_position_embeddings:
    raise UsageError(
        "--max_seq_length=%d is longer than max_position_embeddings=%d in %s: use "
        "--max_seq_length=%d or less." % (max_seq_length, bert_config.max_position_embeddings,
                                          config_file, bert_config.max_position_embeddings))
  return bert_config


def load_tokenizer(vocab_file, do_lower_case, bert_config, bert_config_file,
                   literal_special_tokens=False):
  """The FullTokenizer of `vocab_file`, checked against the config's vocab_size.

  Args:
    vocab_file: the vocab.txt path (--vocab_file).
    do_lower_case: whether the model's input is lower-cased.
    bert_config: the modeling.BertConfig of the model (load_bert_config).
    bert_config_file: its path, for the messages.
    literal_special_tokens: read [MASK], [SEP] and [UNK] in texts as single tokens.

  Returns:
    The tokenization.FullTokenizer.

  Raises:
    UsageError: the vocab file is missing or unreadable, lacks [CLS], [SEP] or [UNK], or
      has more lines than the model's vocab.
  """
  require_file("vocab_file", vocab_file)
  return checked_tokenizer(vocab_file, do_lower_case, bert_config.vocab_size,
                           bert_config_file, literal_special_tokens)


def checked_tokenizer(vocab_file, do_lower_case, vocab_size, bert_config_file,
                      literal_special_tokens=False):
  """The FullTokenizer of an existing `vocab_file`, checked against the config's vocab_size.

  Raises:
    UsageError: the vocab file is unreadable, lacks [CLS], [SEP] or [UNK], or has more
      lines than the model's vocab.
  """
  try:
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case,
                                           literal_special_tokens=literal_special_tokens)
  except ValueError as e:
    raise UsageError(str(e))
  missing = tokenization.missing_special_token(tokenizer.vocab)
  if missing:
    raise UsageError("%s has no %s token: use the vocab.txt that came with the checkpoint."
                     % (vocab_file, missing))
  # Ids are line numbers: a token listed twice makes the lines outnumber the tokens, and
  # an id at or past vocab_size is out of the embedding table.
  num_ids = max(tokenizer.vocab.values()) + 1 if tokenizer.vocab else 0
  if num_ids > vocab_size:
    raise UsageError(
        "%s has %d tokens (one per line, ids 0-%d) but vocab_size is %d in %s: the vocab "
        "and the config belong to different models. Use the vocab.txt that came with the "
        "checkpoint." % (vocab_file, num_ids, num_ids - 1, vocab_size, bert_config_file))
  return tokenizer
