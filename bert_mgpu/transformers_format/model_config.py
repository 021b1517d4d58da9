# coding=utf-8
"""config.json and the tokenizer files of transformers' format, from and to ours
(bert_config.json, vocab.txt, do_lower_case).

transformers' BERT and ours read the same fields under the same names; transformers adds
`model_type`, `architectures`, `layer_norm_eps`, the labels (`id2label`, `label2id`) and
`problem_type`. Both name the exact (erf) GELU "gelu" and the tanh one "gelu_new".
"""

import collections
import json
import os

from bert_mgpu.errors import UsageError

CONFIG_FILE = "config.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
TOKENIZER_JSON_FILE = "tokenizer.json"
VOCAB_FILE = "vocab.txt"

# bert_config.json's fields, in Google's order; all are also transformers' BertConfig fields.
BERT_FIELDS = ("attention_probs_dropout_prob", "hidden_act", "hidden_dropout_prob",
               "hidden_size", "initializer_range", "intermediate_size",
               "max_position_embeddings", "num_attention_heads", "num_hidden_layers",
               "type_vocab_size", "vocab_size")
# modeling.py's LayerNorm epsilon, fixed (as in Google's modeling.py).
LAYER_NORM_EPS = 1e-12
# The activations both frameworks have under the same name; transformers' own tanh GELU is
# the same function as gelu_new.
ACTIVATIONS = ("gelu", "gelu_new", "relu", "tanh", "linear")
ACTIVATION_ALIASES = {"gelu_pytorch_tanh": "gelu_new", "gelu_python": "gelu"}

SPECIAL_TOKENS = collections.OrderedDict([
    ("unk_token", "[UNK]"), ("sep_token", "[SEP]"), ("pad_token", "[PAD]"),
    ("cls_token", "[CLS]"), ("mask_token", "[MASK]")])


def read_json(path, expected=dict):
  """A JSON object (or another `expected` type) from a file. Raises UsageError naming the
  file."""
  try:
    with open(path, "r", encoding="utf-8") as f:
      value = json.load(f)
  except (OSError, ValueError) as e:
    raise UsageError("%s: cannot read it as JSON (%s)." % (path, e))
  if not isinstance(value, expected):
    raise UsageError("%s: expected a JSON %s, found %s." % (
        path, "object" if expected is dict else expected.__name__, type(value).__name__))
  return value


def json_text(value):
  return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def transformers_config(bert_config, architecture, labels=None, multi_label=False,
                        pad_token_id=0):
  """config.json's content for a model of `architecture`.

  Args:
    bert_config: dict of bert_config.json.
    architecture: e.g. "BertForSequenceClassification".
    labels: the label list of a classifier or tagger, in id order (id2label, label2id).
    multi_label: a sigmoid-per-label classifier (problem_type multi_label_classification).
    pad_token_id: the id of [PAD] in the vocab.
  """
  config = collections.OrderedDict([("architectures", [architecture]), ("model_type", "bert")])
  for field in BERT_FIELDS:
    config[field] = bert_config[field]
  config.update(layer_norm_eps=LAYER_NORM_EPS, pad_token_id=pad_token_id,
                position_embedding_type="absolute", tie_word_embeddings=True,
                dtype="float32")
  if labels is not None:
    config["id2label"] = collections.OrderedDict((str(i), label) for i, label in
                                                 enumerate(labels))
    config["label2id"] = collections.OrderedDict((label, i) for i, label in enumerate(labels))
  if architecture == "BertForSequenceClassification":
    config["problem_type"] = ("multi_label_classification" if multi_label else
                              "single_label_classification")
  return config


def _refuse(path, field, value, why):
  raise UsageError("%s: %s is %r: %s; only BERT's architecture converts." %
                   (path, field, value, why))


def bert_config_of(config, path):
  """bert_config.json's content (an OrderedDict) of a transformers config.json. Raises
  UsageError for a model that is not BERT's architecture as modeling.py builds it."""
  architectures = config.get("architectures") or []
  older_bert = "model_type" not in config and architectures and all(
      name.startswith("Bert") for name in architectures)  # configs older than model_type
  if config.get("model_type") != "bert" and not older_bert:
    _refuse(path, "model_type", config.get("model_type"), "not \"bert\"")
  if config.get("position_embedding_type", "absolute") != "absolute":
    _refuse(path, "position_embedding_type", config["position_embedding_type"],
            "modeling.py has absolute positions only")
  for field in ("is_decoder", "add_cross_attention"):
    if config.get(field):
      _refuse(path, field, config[field], "a decoder, not BERT's encoder")
  if abs(float(config.get("layer_norm_eps", LAYER_NORM_EPS)) - LAYER_NORM_EPS) > 1e-15:
    _refuse(path, "layer_norm_eps", config["layer_norm_eps"],
            "modeling.py's LayerNorm uses %g, as Google's" % LAYER_NORM_EPS)
  missing = [field for field in BERT_FIELDS if field not in config]
  if missing:
    raise UsageError("%s lacks %s: it is not a BERT config." % (path, ", ".join(missing)))
  bert_config = collections.OrderedDict((field, config[field]) for field in BERT_FIELDS)
  activation = ACTIVATION_ALIASES.get(bert_config["hidden_act"], bert_config["hidden_act"])
  if activation not in ACTIVATIONS:
    _refuse(path, "hidden_act", bert_config["hidden_act"],
            "modeling.py has %s" % ", ".join(ACTIVATIONS))
  bert_config["hidden_act"] = activation
  return bert_config


def labels_of(config, path):
  """The label list of config.json's id2label, in id order. Raises UsageError."""
  id2label = config.get("id2label")
  try:
    labels = [id2label[str(i)] for i in range(len(id2label))]
  except (KeyError, TypeError):
    raise UsageError("%s: id2label is not a map of the ids 0..n-1 to labels: %r"
                     % (path, id2label))
  if len(set(labels)) != len(labels):
    raise UsageError("%s: id2label names a label twice: %r" % (path, labels))
  return labels


def tokenizer_files(do_lower_case, model_max_length):
  """tokenizer_config.json's and special_tokens_map.json's contents: transformers'
  BertTokenizer with our tokenizer's settings (Chinese characters split, accents stripped
  when lower-casing)."""
  tokenizer_config = collections.OrderedDict([
      ("tokenizer_class", "BertTokenizer"), ("do_lower_case", bool(do_lower_case)),
      ("tokenize_chinese_chars", True), ("strip_accents", None),
      ("model_max_length", int(model_max_length))])
  tokenizer_config.update(SPECIAL_TOKENS)
  return {TOKENIZER_CONFIG_FILE: tokenizer_config, SPECIAL_TOKENS_FILE: SPECIAL_TOKENS}


def read_vocab_lines(path):
  """vocab.txt's tokens in id order (lines, newline removed)."""
  with open(path, "r", encoding="utf-8") as f:
    return [line.rstrip("\n").rstrip("\r") for line in f]


def vocab_of(directory):
  """The vocab of a transformers model directory, tokens in id order: vocab.txt, or the
  WordPiece vocab of tokenizer.json (transformers 5 saves no vocab.txt). Raises UsageError."""
  vocab_path = os.path.join(directory, VOCAB_FILE)
  if os.path.isfile(vocab_path):
    return read_vocab_lines(vocab_path)
  tokenizer_path = os.path.join(directory, TOKENIZER_JSON_FILE)
  if not os.path.isfile(tokenizer_path):
    raise UsageError("%s has neither %s nor %s: copy the model's tokenizer files too."
                     % (directory, VOCAB_FILE, TOKENIZER_JSON_FILE))
  model = read_json(tokenizer_path).get("model") or {}
  vocab = model.get("vocab")
  if model.get("type") != "WordPiece" or not isinstance(vocab, dict):
    raise UsageError("%s: its tokenizer is %r, not WordPiece: only BERT's tokenizer converts."
                     % (tokenizer_path, model.get("type")))
  tokens = sorted(vocab, key=vocab.get)
  if [vocab[token] for token in tokens] != list(range(len(tokens))):
    raise UsageError("%s: its WordPiece ids are not 0..n-1." % tokenizer_path)
  return tokens


def do_lower_case_of(directory, default=True):
  """do_lower_case of a transformers directory's tokenizer_config.json (else `default`)."""
  path = os.path.join(directory, TOKENIZER_CONFIG_FILE)
  if not os.path.isfile(path):
    return default
  return bool(read_json(path).get("do_lower_case", default))
