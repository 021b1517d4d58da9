# coding=utf-8
"""Tiny models for the tests of convert_checkpoint.py (tests/conversion/): a trained
output_dir of each head in our format (Google's names, with a global_step and Adam slots as
training leaves them), and a directory in transformers' format written with the real
safetensors package (NumPy only).

The transformers names here are written from transformers' own BertModel naming
(`bert.encoder.layer.0.attention.self.query.weight`, torch's Linear weight [out, in]),
independently of bert_mgpu/transformers_format, which the tests check against them.
"""

import collections
import functools
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from safetensors import numpy as safetensors_numpy

import cli
import modeling
import numpy_bert
from bert_mgpu.training import checkpoints
from bert_mgpu.transformers_format import to_transformers

# Every head convert_checkpoint.py converts, by the name the tests give it.
KINDS = ("classifier", "multi_label", "ner", "ner_crf", "squad", "masked_lm", "pretraining",
         "encoder")
# The kinds whose output_dir holds labels.txt, model_settings.json, bert_config.json and
# vocab.txt (the others need --bert_config_file and --vocab_file, or, for the encoder,
# hold Google's release files).
LABELLED_KINDS = ("classifier", "multi_label", "ner", "ner_crf")

LABELS = ["体育", "财经", "科技"]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
THRESHOLDS = {"labels": LABELS, "thresholds": [0.3, 0.5, 0.7], "source": "tuned"}
MAX_SEQ_LENGTH = 32
STEP = 7
# Variables that training leaves in a checkpoint beside the model's: never exported.
SLOT_SUFFIXES = ("/adam_m", "/adam_v")

Model = collections.namedtuple("Model", ["kind", "directory", "checkpoint", "arrays",
                                         "config", "labels", "files"])
Model.__doc__ = """A tiny trained model in our format.

Fields:
  kind: one of KINDS. directory: its output_dir. checkpoint: the checkpoint prefix.
  arrays: dict Google name -> array of the model's variables (no training state).
  config: dict of its bert_config.json. labels: its label list, or None.
  files: dict file name -> text of labels.txt, model_settings.json, thresholds.json there.
"""


def bert_config(num_layers=2, vocab_size=None):
  """A tiny bert_config.json (dict) over the demo vocab."""
  return collections.OrderedDict([
      ("attention_probs_dropout_prob", 0.1), ("hidden_act", "gelu"),
      ("hidden_dropout_prob", 0.1), ("hidden_size", 16), ("initializer_range", 0.02),
      ("intermediate_size", 32), ("max_position_embeddings", 64),
      ("num_attention_heads", 2), ("num_hidden_layers", num_layers),
      ("type_vocab_size", 2), ("vocab_size", vocab_size or len(demo_vocab_tokens()))])


@functools.lru_cache(maxsize=None)
def demo_vocab_file():
  """The demo data's vocab.txt (scripts/make_demo_data.py), written once per process."""
  directory = tempfile.mkdtemp(prefix="conversion_vocab")
  subprocess.run([sys.executable, cli.script_path(os.path.join("scripts", "make_demo_data.py")),
                  "--output_dir", os.path.join(directory, "demo")], check=True,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
  return os.path.join(directory, "demo", "vocab.txt")


def demo_vocab_tokens():
  """The demo data's vocab (real Chinese characters, [PAD] first), tokens in id order."""
  with open(demo_vocab_file(), encoding="utf-8") as f:
    return [line.rstrip("\n") for line in f]


def write_json(path, value):
  with open(path, "w", encoding="utf-8") as f:
    f.write(json.dumps(value, ensure_ascii=False, indent=2) + "\n")


def write_text(path, text):
  with open(path, "w", encoding="utf-8", newline="") as f:
    f.write(text)


def write_vocab(path, tokens):
  write_text(path, "".join(token + "\n" for token in tokens))
  return path


def _random(rng, *shape):
  return (0.3 * rng.randn(*shape)).astype(np.float32)


def head_arrays(kind, config, rng):
  """The head variables of `kind` (Google names) with random values."""
  hidden, vocab = config["hidden_size"], config["vocab_size"]
  if kind in ("classifier", "multi_label"):
    scope = "multi_label/" if kind == "multi_label" else ""
    return {scope + "output_weights": _random(rng, len(LABELS), hidden),
            scope + "output_bias": _random(rng, len(LABELS))}
  if kind in ("ner", "ner_crf"):
    arrays = {"cls/ner/output_weights": _random(rng, len(TAGS), hidden),
              "cls/ner/output_bias": _random(rng, len(TAGS))}
    if kind == "ner_crf":
      arrays["cls/ner/crf/transitions"] = _random(rng, len(TAGS), len(TAGS))
    return arrays
  if kind == "squad":
    return {"cls/squad/output_weights": _random(rng, 2, hidden),
            "cls/squad/output_bias": _random(rng, 2)}
  arrays = {}
  if kind in ("masked_lm", "pretraining"):
    arrays.update({"cls/predictions/transform/dense/kernel": _random(rng, hidden, hidden),
                   "cls/predictions/transform/dense/bias": _random(rng, hidden),
                   "cls/predictions/transform/LayerNorm/gamma": 1 + _random(rng, hidden),
                   "cls/predictions/transform/LayerNorm/beta": _random(rng, hidden),
                   "cls/predictions/output_bias": _random(rng, vocab)})
  if kind == "pretraining":
    arrays.update({"cls/seq_relationship/output_weights": _random(rng, 2, hidden),
                   "cls/seq_relationship/output_bias": _random(rng, 2)})
  return arrays


def _settings_files(kind):
  if kind in ("classifier", "multi_label"):
    settings = {"model": "classifier", "task_name": "tsv", "do_lower_case": True,
                "max_seq_length": MAX_SEQ_LENGTH}
    files = {"labels.txt": "".join(label + "\n" for label in LABELS)}
    if kind == "multi_label":
      settings.update(multi_label=True, label_separator=",")  # as training writes them
      files["thresholds.json"] = json.dumps(THRESHOLDS, ensure_ascii=False, indent=2) + "\n"
  else:
    settings = {"model": "ner", "do_lower_case": True, "max_seq_length": MAX_SEQ_LENGTH,
                "doc_stride": 16, "use_crf": kind == "ner_crf"}
    files = {"labels.txt": "".join(tag + "\n" for tag in TAGS)}
  files["model_settings.json"] = json.dumps(settings, indent=2) + "\n"
  return files


def write_model(directory, kind, num_layers=2, seed=0):
  """Writes a tiny trained output_dir of `kind` (one of KINDS); returns its Model.

  Every kind's checkpoint holds global_step and Adam slots of two variables. The
  classifiers and taggers hold their run's files (bert_config.json, vocab.txt, labels.txt,
  model_settings.json, a multi-label model's thresholds.json) and a `checkpoint` file;
  SQuAD's and pretraining's output_dirs hold the checkpoint alone (as theirs do); the
  encoder is laid out as Google's release is (bert_model.ckpt, bert_config.json, vocab.txt,
  no `checkpoint` file), without the release's pretraining heads.
  """
  config = bert_config(num_layers)
  rng = np.random.RandomState(seed + 1)
  arrays = numpy_bert.random_weights(modeling.BertConfig.from_dict(config), seed)
  arrays.update(head_arrays(kind, config, rng))
  saved = dict(arrays)
  saved["global_step"] = np.array(STEP, np.int64)
  for name in ("bert/embeddings/word_embeddings", sorted(arrays)[-1]):
    for suffix in SLOT_SUFFIXES:
      saved[name + suffix] = _random(rng, *arrays[name].shape)
  os.makedirs(directory, exist_ok=True)
  if kind == "encoder":
    checkpoint = os.path.join(directory, "bert_model.ckpt")
  else:
    checkpoint = os.path.join(directory, "model.ckpt-%d" % STEP)
  checkpoints.write_arrays(saved, checkpoint)
  if kind != "encoder":
    write_text(os.path.join(directory, "checkpoint"),
               'model_checkpoint_path: "model.ckpt-%d"\n' % STEP)
  files = {}
  if kind in LABELLED_KINDS or kind == "encoder":
    write_json(os.path.join(directory, "bert_config.json"), config)
    write_vocab(os.path.join(directory, "vocab.txt"), demo_vocab_tokens())
  if kind in LABELLED_KINDS:
    files = _settings_files(kind)
    for name, text in files.items():
      write_text(os.path.join(directory, name), text)
  labels = {"classifier": LABELS, "multi_label": LABELS, "ner": TAGS, "ner_crf": TAGS}
  return Model(kind, directory, checkpoint, arrays, config, labels.get(kind), files)


def model_files_flags(model, scratch_dir):
  """to_transformers.convert's bert_config_file and vocab_file for `model`: paths of files
  in `scratch_dir` for the output_dirs that hold none (SQuAD, pretraining), else None."""
  if os.path.isfile(os.path.join(model.directory, "bert_config.json")):
    return None, None
  os.makedirs(scratch_dir, exist_ok=True)
  config_file = os.path.join(scratch_dir, "bert_config.json")
  write_json(config_file, model.config)
  return config_file, write_vocab(os.path.join(scratch_dir, "vocab.txt"), demo_vocab_tokens())


def export(model, output_dir, scratch_dir, **kwargs):
  """to_transformers.convert of a Model (with the config and vocab its output_dir lacks
  written to scratch_dir); returns the summary."""
  config_file, vocab_file = model_files_flags(model, scratch_dir)
  return to_transformers.convert(model.directory, output_dir, config_file, vocab_file,
                                 **kwargs)


def export_every_kind(base_dir, num_layers=2, seed=0):
  """Writes a model of every kind under base_dir/ours and exports it to base_dir/hf.

  Returns:
    dict kind -> (Model, its export's directory, the export's summary).
  """
  exported = {}
  for kind in KINDS:
    model = write_model(os.path.join(base_dir, "ours", kind), kind, num_layers, seed)
    output_dir = os.path.join(base_dir, "hf", kind)
    exported[kind] = (model, output_dir,
                      export(model, output_dir, os.path.join(base_dir, "files", kind)))
  return exported


# ---------------------------------------------------------------------------
# transformers' format
# ---------------------------------------------------------------------------

# Per encoder layer: (Google's name, transformers' name, transposed), from transformers'
# BertLayer; a dense layer's weight is torch's Linear [out, in], Google's kernel [in, out].
_LAYER_NAMES = (
    ("attention/self/query/kernel", "attention.self.query.weight", True),
    ("attention/self/query/bias", "attention.self.query.bias", False),
    ("attention/self/key/kernel", "attention.self.key.weight", True),
    ("attention/self/key/bias", "attention.self.key.bias", False),
    ("attention/self/value/kernel", "attention.self.value.weight", True),
    ("attention/self/value/bias", "attention.self.value.bias", False),
    ("attention/output/dense/kernel", "attention.output.dense.weight", True),
    ("attention/output/dense/bias", "attention.output.dense.bias", False),
    ("attention/output/LayerNorm/gamma", "attention.output.LayerNorm.weight", False),
    ("attention/output/LayerNorm/beta", "attention.output.LayerNorm.bias", False),
    ("intermediate/dense/kernel", "intermediate.dense.weight", True),
    ("intermediate/dense/bias", "intermediate.dense.bias", False),
    ("output/dense/kernel", "output.dense.weight", True),
    ("output/dense/bias", "output.dense.bias", False),
    ("output/LayerNorm/gamma", "output.LayerNorm.weight", False),
    ("output/LayerNorm/beta", "output.LayerNorm.bias", False),
)
_OTHER_NAMES = (
    ("bert/embeddings/word_embeddings", "embeddings.word_embeddings.weight", False),
    ("bert/embeddings/position_embeddings", "embeddings.position_embeddings.weight", False),
    ("bert/embeddings/token_type_embeddings", "embeddings.token_type_embeddings.weight",
     False),
    ("bert/embeddings/LayerNorm/gamma", "embeddings.LayerNorm.weight", False),
    ("bert/embeddings/LayerNorm/beta", "embeddings.LayerNorm.bias", False),
    ("bert/pooler/dense/kernel", "pooler.dense.weight", True),
    ("bert/pooler/dense/bias", "pooler.dense.bias", False),
)


def body_names(num_layers):
  """[(Google name, transformers name without "bert.", transposed)] of BERT's body."""
  names = list(_OTHER_NAMES)
  for layer in range(num_layers):
    names += [("bert/encoder/layer_%d/%s" % (layer, google),
               "encoder.layer.%d.%s" % (layer, theirs), transposed)
              for google, theirs, transposed in _LAYER_NAMES]
  return names


def google_weights(transformers_arrays, num_layers, prefix="bert."):
  """numpy_bert's weight dict (Google names and layout) of transformers' body arrays;
  the pooler only when the file has one."""
  weights = {}
  for google, theirs, transposed in body_names(num_layers):
    if prefix + theirs in transformers_arrays:
      array = transformers_arrays[prefix + theirs]
      weights[google] = array.T if transposed else array
  return weights


def transformers_body(config, seed=0, prefix="bert.", pooler=True):
  """BERT's body with random values by transformers' names (prefix + name), in its layout;
  returns (that dict, the same weights by Google's names)."""
  weights = numpy_bert.random_weights(modeling.BertConfig.from_dict(config), seed)
  if not pooler:
    weights = {name: array for name, array in weights.items() if "pooler" not in name}
  arrays = collections.OrderedDict()
  for google, theirs, transposed in body_names(config["num_hidden_layers"]):
    if google in weights:
      arrays[prefix + theirs] = np.ascontiguousarray(
          weights[google].T if transposed else weights[google])
  return arrays, weights


def transformers_config(config, architecture, **fields):
  """config.json of a BERT model as transformers saves it."""
  value = collections.OrderedDict([("architectures", [architecture]), ("model_type", "bert")])
  value.update(config)
  value.update(layer_norm_eps=1e-12, pad_token_id=0, position_embedding_type="absolute",
               transformers_version="4.57.6")
  value.update(fields)
  return value


def write_transformers_dir(directory, arrays, config_json, vocab_tokens=None,
                           tokenizer_json=False):
  """Writes a directory as transformers' save_pretrained does: config.json,
  model.safetensors (the real safetensors package, metadata format=pt), and the vocab as
  vocab.txt or (tokenizer_json) as tokenizer.json's WordPiece model; arrays None writes no
  weight file. Returns the directory."""
  os.makedirs(directory, exist_ok=True)
  write_json(os.path.join(directory, "config.json"), config_json)
  if arrays is not None:
    safetensors_numpy.save_file(dict(arrays), os.path.join(directory, "model.safetensors"),
                                metadata={"format": "pt"})
  tokens = demo_vocab_tokens() if vocab_tokens is None else vocab_tokens
  if tokenizer_json:
    write_json(os.path.join(directory, "tokenizer.json"), {
        "version": "1.0", "model": {"type": "WordPiece", "unk_token": "[UNK]",
                                    "vocab": {token: i for i, token in enumerate(tokens)}}})
  else:
    write_vocab(os.path.join(directory, "vocab.txt"), tokens)
  write_json(os.path.join(directory, "tokenizer_config.json"),
             {"tokenizer_class": "BertTokenizer", "do_lower_case": True})
  return directory
