# coding=utf-8
"""BERT's weights by Google's checkpoint names and by transformers' parameter names.

Google: `bert/encoder/layer_0/attention/self/query/kernel`, a dense kernel [in, out].
transformers: `bert.encoder.layer.0.attention.self.query.weight`, torch's Linear weight
[out, in], so every `kernel` is transposed between the two; every other array keeps its
layout. The task heads' names come from the task units (TRANSFORMERS_NAMES in
bert_mgpu/<task>/model.py). docs/HUGGING_FACE.md has the whole table.

Standard library only.
"""

import re

# A body name of Google's checkpoints (the embeddings, the encoder's layers, the pooler).
_GOOGLE_BODY = re.compile(
    r"^bert/(embeddings/(word|position|token_type)_embeddings"
    r"|(embeddings|encoder/layer_\d+/(attention/output|output))/LayerNorm/(gamma|beta)"
    r"|(encoder/layer_\d+/(attention/self/(query|key|value)|attention/output/dense"
    r"|intermediate/dense|output/dense)|pooler/dense)/(kernel|bias))$")

POOLER_PREFIX = "bert/pooler/"


def is_body_name(google_name):
  """Whether `google_name` is a variable of BERT itself (not of a head)."""
  return bool(_GOOGLE_BODY.match(google_name))


def is_kernel(google_name):
  """Whether the array is a dense kernel, [in, out] in Google's layout: transposed."""
  return google_name.endswith("/kernel")


def body_to_transformers(google_name):
  """transformers' name of a BERT body variable ("bert." prefixed), or None for another name.

  `bert/embeddings/word_embeddings` -> `bert.embeddings.word_embeddings.weight`,
  `.../LayerNorm/gamma` -> `.../LayerNorm.weight`, `beta` -> `bias`, `kernel` -> `weight`.
  """
  if not is_body_name(google_name):
    return None
  name = re.sub(r"/layer_(\d+)/", r"/layer/\1/", google_name)
  name = re.sub(r"/(gamma|kernel)$", "/weight", name)
  name = re.sub(r"/beta$", "/bias", name)
  if name.endswith("_embeddings"):
    name += "/weight"
  return name.replace("/", ".")


def body_to_google(transformers_name):
  """Google's name of a BERT body parameter ("bert."-prefixed, LayerNorm's `weight`/`bias` or
  the older `gamma`/`beta`), or None when it is not one."""
  name = transformers_name.replace(".", "/")
  name = re.sub(r"/layer/(\d+)/", r"/layer_\1/", name)
  name = re.sub(r"_embeddings/weight$", "_embeddings", name)
  name = re.sub(r"/LayerNorm/weight$", "/LayerNorm/gamma", name)
  name = re.sub(r"/LayerNorm/bias$", "/LayerNorm/beta", name)
  name = re.sub(r"/weight$", "/kernel", name)
  return name if is_body_name(name) else None


def body_shapes(bert_config):
  """Every BERT body variable of a config (dict of bert_config.json) -> its shape, in
  Google's layout."""
  hidden, inner = bert_config["hidden_size"], bert_config["intermediate_size"]
  shapes = {"bert/embeddings/word_embeddings": [bert_config["vocab_size"], hidden],
            "bert/embeddings/position_embeddings": [bert_config["max_position_embeddings"],
                                                    hidden],
            "bert/embeddings/token_type_embeddings": [bert_config["type_vocab_size"], hidden],
            "bert/embeddings/LayerNorm/gamma": [hidden],
            "bert/embeddings/LayerNorm/beta": [hidden],
            "bert/pooler/dense/kernel": [hidden, hidden], "bert/pooler/dense/bias": [hidden]}
  dense = {"attention/self/query": (hidden, hidden), "attention/self/key": (hidden, hidden),
           "attention/self/value": (hidden, hidden), "attention/output/dense": (hidden, hidden),
           "intermediate/dense": (hidden, inner), "output/dense": (inner, hidden)}
  for layer in range(bert_config["num_hidden_layers"]):
    prefix = "bert/encoder/layer_%d/" % layer
    for name, (width_in, width_out) in dense.items():
      shapes[prefix + name + "/kernel"] = [width_in, width_out]
      shapes[prefix + name + "/bias"] = [width_out]
    for norm in ("attention/output/LayerNorm", "output/LayerNorm"):
      shapes[prefix + norm + "/gamma"] = [hidden]
      shapes[prefix + norm + "/beta"] = [hidden]
  return shapes


def body_mismatch(arrays, bert_config):
  """The first way BERT's variables in `arrays` (Google's names) differ from the config's,
  or None.

  Returns:
    None, or (name, its shape or None when missing, the config's shape or None when the
    config has no such variable). The pooler may be missing: encoder-only checkpoints,
    BertForMaskedLM, token classification and QA have none.
  """
  expected = body_shapes(bert_config)
  for name, shape in expected.items():
    if name not in arrays:
      if not name.startswith(POOLER_PREFIX):
        return name, None, shape
    elif list(arrays[name].shape) != shape:
      return name, list(arrays[name].shape), shape
  extra = sorted(name for name in arrays if is_body_name(name) and name not in expected)
  return (extra[0], list(arrays[extra[0]].shape), None) if extra else None


def to_google_layout(google_name, array):
  """An array read from transformers' files, in Google's layout."""
  return array.T if is_kernel(google_name) else array


def to_transformers_layout(google_name, array):
  """An array read from a Google-named checkpoint, in transformers' layout."""
  return array.T if is_kernel(google_name) else array
