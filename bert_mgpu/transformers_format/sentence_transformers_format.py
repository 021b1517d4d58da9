# coding=utf-8
"""Embedding models in and out through sentence-transformers' directory format.

Such a directory is a transformers BERT (at its root, or under 0_Transformer/) and
modules.json, which lists the modules text runs through, each with its config in its own
subdirectory:

  modules.json                 [{"idx", "name", "path", "type"}]: Transformer (path "" or
                               "0_Transformer"), Pooling, optionally Dense and Normalize
  sentence_bert_config.json    {"max_seq_length", "do_lower_case"} of the Transformer
  1_Pooling/config.json        the pooling: the classic fields (pooling_mode_cls_token,
                               pooling_mode_mean_tokens, ...) or, from sentence-transformers
                               6, {"pooling_mode": "cls" | "mean" | ...}
  2_Dense/config.json          {"in_features", "out_features", "bias",
                               "activation_function"}, weights linear.weight [out, in] and
                               linear.bias in 2_Dense/model.safetensors (or pytorch_model.bin)
  3_Normalize/                 unit-length vectors

Out (--to=sentence_transformers): an embedding model's output_dir becomes the classic layout,
the BERT at the root; `pooler` pooling is CLS and a Dense module holding BERT's pooler (tanh).
In (--to=tensorflow): the BERT becomes a checkpoint, and the pooling, normalisation and
max_seq_length go to embedding_settings.json beside it, which run_embedding_mgpu.py reads
when it starts from that checkpoint.
"""

import collections
import json
import os

import numpy as np

from bert_mgpu.data import output_files
from bert_mgpu.embedding import model as embedding_model
from bert_mgpu.errors import UsageError
from bert_mgpu.serving import model_files
from bert_mgpu.transformers_format import model_config
from bert_mgpu.transformers_format import to_tensorflow
from bert_mgpu.transformers_format import to_transformers
from bert_mgpu.transformers_format import weight_files

MODULES_FILE = "modules.json"
SENTENCE_BERT_CONFIG_FILE = "sentence_bert_config.json"
ST_CONFIG_FILE = "config_sentence_transformers.json"
MODULE_CONFIG_FILE = "config.json"
# Written beside a converted checkpoint; run_embedding_mgpu.py reads it from the directory
# of --init_checkpoint.
EMBEDDING_SETTINGS_FILE = embedding_model.START_SETTINGS_FILE

# The classic module types (sentence-transformers 2 to 5, e.g. text2vec's models).
TRANSFORMER, POOLING, DENSE, NORMALIZE = "Transformer", "Pooling", "Dense", "Normalize"
_TYPE_PREFIX = "sentence_transformers.models."
TANH = "torch.nn.modules.activation.Tanh"
POOLER_KERNEL, POOLER_BIAS = "bert/pooler/dense/kernel", "bert/pooler/dense/bias"

# The classic Pooling config's modes, and ours of each.
_POOLING_MODES = ("pooling_mode_cls_token", "pooling_mode_mean_tokens",
                  "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                  "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")
_OURS = {"cls": embedding_model.CLS, "mean": embedding_model.MEAN}


def _json(value):
  return json.dumps(value, indent=2) + "\n"


# ---------------------------------------------------------------------------
# Out: an embedding output_dir -> sentence-transformers' directory
# ---------------------------------------------------------------------------

def _module(index, name, kind):
  return collections.OrderedDict([("idx", index), ("name", str(index)),
                                  ("path", "" if kind == TRANSFORMER else name),
                                  ("type", _TYPE_PREFIX + kind)])


def module_files(settings, hidden_size, pooler=None):
  """The files of the modules after the Transformer: dict relative path -> text, and the
  Dense weights to write (dict name -> array) or None.

  Args:
    settings: the embedding model's model_settings.json.
    hidden_size: its width.
    pooler: with pooling "pooler", (kernel [hidden, hidden] Google layout, bias [hidden]).
  """
  pooling = settings["pooling"]
  modules = [_module(0, "", TRANSFORMER), _module(1, "1_" + POOLING, POOLING)]
  modes = {mode: False for mode in _POOLING_MODES}
  modes["pooling_mode_cls_token" if pooling in (embedding_model.CLS, embedding_model.POOLER)
        else "pooling_mode_mean_tokens"] = True
  files = collections.OrderedDict([
      (os.path.join("1_" + POOLING, MODULE_CONFIG_FILE), _json(collections.OrderedDict(
          [("word_embedding_dimension", hidden_size)] + list(modes.items()) +
          [("include_prompt", True)]))),
  ])
  dense = None
  if pooling == embedding_model.POOLER:
    name = "%d_%s" % (len(modules), DENSE)
    modules.append(_module(len(modules), name, DENSE))
    files[os.path.join(name, MODULE_CONFIG_FILE)] = _json(collections.OrderedDict([
        ("in_features", hidden_size), ("out_features", hidden_size), ("bias", True),
        ("activation_function", TANH)]))
    kernel, bias = pooler
    dense = {"linear.weight": np.ascontiguousarray(kernel.T), "linear.bias": bias}
  if settings["normalize_embeddings"]:
    modules.append(_module(len(modules), "%d_%s" % (len(modules), NORMALIZE), NORMALIZE))
  files[MODULES_FILE] = _json(modules)
  files[SENTENCE_BERT_CONFIG_FILE] = _json(collections.OrderedDict([
      ("max_seq_length", settings["max_seq_length"]), ("do_lower_case", False)]))
  files[ST_CONFIG_FILE] = _json(collections.OrderedDict([
      ("prompts", {}), ("default_prompt_name", None), ("similarity_fn_name", "cosine")]))
  return files, dense


def embedding_settings_of(input_path):
  """The model_settings.json of an embedding model's output_dir. Raises UsageError for
  another kind of model, or a pooling sentence-transformers cannot express."""
  directory = input_path if os.path.isdir(input_path) else os.path.dirname(input_path)
  path = os.path.join(directory, model_files.SETTINGS_FILE)
  if not os.path.isfile(path):
    raise UsageError("--to=sentence_transformers converts an embedding model: %s has no %s "
                     "(give run_embedding_mgpu.py's output_dir)." % (directory,
                                                                    model_files.SETTINGS_FILE))
  settings = model_config.read_json(path)
  if settings.get("model") != "embedding":
    raise UsageError("%s says %r: --to=sentence_transformers converts an embedding model "
                     "(run_embedding_mgpu.py); use --to=transformers for this one." % (
                         path, settings.get("model")))
  if settings.get("pooling") not in (embedding_model.MEAN, embedding_model.CLS,
                                     embedding_model.POOLER):
    raise UsageError("%s: pooling %r has no sentence-transformers module (the mean of the "
                     "first and last layers is not one of its poolings); it is not "
                     "converted. Serve it from an export (docs/EMBEDDINGS.md)." % (
                         path, settings.get("pooling")))
  return settings


def to_sentence_transformers(input_path, output_dir):
  """Writes `output_dir` in sentence-transformers' format from an embedding output_dir.

  Returns:
    to_transformers.convert's summary.

  Raises:
    UsageError: one line; nothing is written.
  """
  settings = embedding_settings_of(input_path)

  def add_modules(directory, arrays):
    hidden_size = arrays["bert/embeddings/word_embeddings"].shape[1]
    pooler = (arrays[POOLER_KERNEL], arrays[POOLER_BIAS]) if settings["pooling"] == (
        embedding_model.POOLER) else None
    files, dense = module_files(settings, hidden_size, pooler)
    for name, text in files.items():
      if os.path.dirname(name):
        os.makedirs(os.path.join(directory, os.path.dirname(name)), exist_ok=True)
      output_files.atomic_write_text(os.path.join(directory, name), text)
    if dense is not None:
      dense_dir = os.path.join(directory, "2_" + DENSE)
      weight_files.write_safetensors(dense, os.path.join(dense_dir,
                                                         weight_files.SAFETENSORS_FILE))
      files[os.path.join("2_" + DENSE, weight_files.SAFETENSORS_FILE)] = None
    if settings["normalize_embeddings"]:
      # sentence-transformers 6 reads a (here empty) config of its Normalize module.
      normalize_dir = [m["path"] for m in json.loads(files[MODULES_FILE])
                       if m["type"].endswith(NORMALIZE)][0]
      os.makedirs(os.path.join(directory, normalize_dir), exist_ok=True)
      output_files.atomic_write_text(
          os.path.join(directory, normalize_dir, MODULE_CONFIG_FILE), "{}\n")
      files[os.path.join(normalize_dir, MODULE_CONFIG_FILE)] = None
    return list(files)

  return to_transformers.convert(input_path, output_dir, do_lower_case=settings.get(
      "do_lower_case"), add_files=add_modules)


# ---------------------------------------------------------------------------
# In: sentence-transformers' directory -> a checkpoint and embedding_settings.json
# ---------------------------------------------------------------------------

def is_sentence_transformers_dir(directory):
  return os.path.isfile(os.path.join(directory, MODULES_FILE))


def _modules(directory):
  """(kind, path, config dict) of each module of modules.json, in order. Raises UsageError
  for a module that is none of Transformer, Pooling, Dense and Normalize."""
  path = os.path.join(directory, MODULES_FILE)
  listed = model_config.read_json(path, list)
  if not listed or not all(isinstance(module, dict) for module in listed):
    raise UsageError("%s: expected a list of modules ({\"idx\", \"path\", \"type\"} each)."
                     % path)
  modules = []
  for module in sorted(listed, key=lambda m: m.get("idx", 0)):
    kind = str(module.get("type", "")).rsplit(".", 1)[-1]
    if kind not in (TRANSFORMER, POOLING, DENSE, NORMALIZE):
      raise UsageError("%s lists the module %r, which has no counterpart here (Transformer, "
                       "Pooling, Dense with tanh and Normalize do): it is not converted." %
                       (path, module.get("type")))
    module_dir = os.path.join(directory, module.get("path") or "")
    config_path = os.path.join(module_dir, MODULE_CONFIG_FILE)
    config = (model_config.read_json(config_path) if kind in (POOLING, DENSE) else {})
    modules.append((kind, module_dir, config))
  return modules


def _pooling_of(config, path):
  """Our pooling of a Pooling module's config (classic or sentence-transformers 6)."""
  if "pooling_mode" in config:
    modes = config["pooling_mode"]
    modes = [modes] if isinstance(modes, str) else list(modes or [])
  elif not any(name in config for name in _POOLING_MODES):
    modes = ["mean"]  # sentence-transformers' default
  else:
    modes = [{"cls_token": "cls", "mean_tokens": "mean"}.get(name[len("pooling_mode_"):],
                                                             name[len("pooling_mode_"):])
             for name in _POOLING_MODES if config.get(name)]
  mode = modes[0] if len(modes) == 1 else "+".join(str(m) for m in modes) or "none"
  if mode not in _OURS:
    raise UsageError("%s: the pooling %r has no counterpart here (cls and mean do): it is not "
                     "converted." % (path, mode))
  return _OURS[mode]


def _dense_as_pooler(module_dir, config, hidden_size):
  """The Dense module's weights as BERT's pooler (Google layout), or UsageError for a Dense
  that is not hidden -> hidden with tanh."""
  path = os.path.join(module_dir, MODULE_CONFIG_FILE)
  shape = (config.get("in_features"), config.get("out_features"))
  if config.get("activation_function") != TANH or shape != (hidden_size, hidden_size) or (
      not config.get("bias", True)):
    raise UsageError("%s: a Dense module %s -> %s with %s%s; only %d -> %d with tanh and a "
                     "bias (BERT's pooler) is carried here: it is not converted." % (
                         path, shape[0], shape[1], config.get("activation_function"),
                         "" if config.get("bias", True) else " and no bias", hidden_size,
                         hidden_size))
  raw, _ = weight_files.read_weights(module_dir)
  return {POOLER_KERNEL: np.ascontiguousarray(raw["linear.weight"].T, np.float32),
          POOLER_BIAS: np.asarray(raw["linear.bias"], np.float32)}


def _do_lower_case(input_dir, transformer_dir):
  """Whether text is lower-cased: by the tokenizer, or by sentence-transformers before it
  (sentence_bert_config.json's do_lower_case)."""
  for directory in (input_dir, transformer_dir):
    path = os.path.join(directory, SENTENCE_BERT_CONFIG_FILE)
    if os.path.isfile(path) and model_config.read_json(path).get("do_lower_case"):
      return True
  return model_config.do_lower_case_of(transformer_dir)


def _max_seq_length(input_dir, transformer_dir):
  """The Transformer module's max_seq_length: sentence_bert_config.json's (classic), else
  its tokenizer's model_max_length (sentence-transformers 6), else None."""
  for directory in (input_dir, transformer_dir):
    path = os.path.join(directory, SENTENCE_BERT_CONFIG_FILE)
    if os.path.isfile(path) and "max_seq_length" in model_config.read_json(path):
      return int(model_config.read_json(path)["max_seq_length"])
  positions = model_config.read_json(os.path.join(
      transformer_dir, model_config.CONFIG_FILE)).get("max_position_embeddings")
  path = os.path.join(transformer_dir, model_config.TOKENIZER_CONFIG_FILE)
  if os.path.isfile(path):
    length = model_config.read_json(path).get("model_max_length")
    # transformers writes a huge number for "no limit".
    if isinstance(length, int) and positions and length <= positions:
      return length
  return None


def from_sentence_transformers(input_dir, output_dir):
  """Writes `output_dir` (to_tensorflow.convert's files and embedding_settings.json) from a
  sentence-transformers directory.

  Returns:
    to_tensorflow.convert's summary, with "embedding_settings" (dict).

  Raises:
    UsageError: one line; nothing is written.
  """
  modules = _modules(input_dir)
  if modules[0][0] != TRANSFORMER:
    raise UsageError("%s: its first module is %s, not a Transformer." % (
        os.path.join(input_dir, MODULES_FILE), modules[0][0]))
  transformer_dir = modules[0][1]
  hidden_size = model_config.read_json(os.path.join(
      transformer_dir, model_config.CONFIG_FILE)).get("hidden_size")
  pooling, normalize, pooler = None, False, None
  for index, (kind, module_dir, config) in enumerate(modules[1:], 1):
    where = os.path.join(module_dir, MODULE_CONFIG_FILE)
    if kind == POOLING and pooling is None:
      pooling = _pooling_of(config, where)
    elif kind == DENSE and pooling == embedding_model.CLS and pooler is None and not normalize:
      pooler = _dense_as_pooler(module_dir, config, hidden_size)
      pooling = embedding_model.POOLER
    elif kind == NORMALIZE and not normalize:
      normalize = True
    else:
      raise UsageError("%s: a %s module after %s has no counterpart here (Pooling cls or "
                       "mean, then a tanh Dense after cls, then Normalize convert): it is not "
                       "converted." % (os.path.join(input_dir, MODULES_FILE), kind,
                                       ", ".join(m[0] for m in modules[:index])))
  if pooling is None:
    raise UsageError("%s lists no Pooling module: it is not a sentence embedding model." %
                     os.path.join(input_dir, MODULES_FILE))
  settings = collections.OrderedDict([("pooling", pooling),
                                      ("normalize_embeddings", normalize),
                                      ("do_lower_case", _do_lower_case(input_dir,
                                                                       transformer_dir))])
  max_seq_length = _max_seq_length(input_dir, transformer_dir)
  positions = model_config.read_json(os.path.join(
      transformer_dir, model_config.CONFIG_FILE)).get("max_position_embeddings")
  if max_seq_length is not None:
    # sentence-transformers cannot run longer inputs either.
    settings["max_seq_length"] = min(max_seq_length, positions or max_seq_length)
  summary = to_tensorflow.convert(
      transformer_dir, output_dir, replace_arrays=pooler,
      beside_texts={EMBEDDING_SETTINGS_FILE: _json(settings)})
  summary["embedding_settings"] = settings
  return summary
