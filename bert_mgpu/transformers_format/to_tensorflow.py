# coding=utf-8
"""A BERT-architecture model in transformers' format to a Google-named checkpoint.

Reads config.json, model.safetensors (or its shards, or pytorch_model.bin with torch) and
vocab.txt (or tokenizer.json's WordPiece vocab); writes bert_model.ckpt, bert_config.json
and vocab.txt, which every run script takes (--init_checkpoint=<output>/bert_model.ckpt).

By default BERT and its pretraining heads (masked LM, next sentence) are written, so the
checkpoint fine-tunes for any label count. keep_head=True also converts a fine-tuned
sequence-classification, token-classification or question-answering head, with labels.txt
and model_settings.json and a `checkpoint` file, into an output_dir that our scripts
evaluate, predict with and export.
"""

import collections
import os

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import input_examples
from bert_mgpu.classifier import multi_label
from bert_mgpu.classifier import serving as classifier_serving
from bert_mgpu.data import label_files
from bert_mgpu.data import output_files
from bert_mgpu.errors import UsageError, write_error
from bert_mgpu.ner import crf_numpy
from bert_mgpu.ner import model as ner_model
from bert_mgpu.ner import serving as ner_serving
from bert_mgpu.serving import model_files
from bert_mgpu.training import checkpoints
from bert_mgpu.transformers_format import heads
from bert_mgpu.transformers_format import model_config
from bert_mgpu.transformers_format import to_transformers
from bert_mgpu.transformers_format import weight_files
from bert_mgpu.transformers_format import weight_names

CHECKPOINT_NAME = "bert_model.ckpt"

_HEAD_PREFIXES = ("cls.", "classifier.", "qa_outputs.")
_DECODER_WEIGHT = "cls.predictions.decoder.weight"
_DECODER_BIAS = "cls.predictions.decoder.bias"
_OUTPUT_BIAS = "cls.predictions.bias"


def _normalized(raw):
  """transformers' arrays under today's names: "bert." prefixed (BertModel saves none),
  LayerNorm `weight`/`bias` (older files say `gamma`/`beta`), buffers (position_ids) out.

  Returns:
    (dict today's name -> array, dict today's name -> the name as read).
  """
  arrays, read_as = collections.OrderedDict(), {}
  bare = not any(name.startswith("bert.") for name in raw)  # BertModel's own names
  for name, array in raw.items():
    if array.dtype.kind != "f":
      continue  # an integer buffer (embeddings.position_ids), not a weight
    normalized = name
    if bare and not name.startswith(_HEAD_PREFIXES):
      normalized = "bert." + name
    normalized = normalized.replace("LayerNorm.gamma", "LayerNorm.weight").replace(
        "LayerNorm.beta", "LayerNorm.bias")
    arrays[normalized] = array
    read_as[normalized] = name
  return arrays, read_as


def _tied_decoder(arrays, dropped):
  """Folds the masked LM's decoder into our tied head: its weight must be the word embedding
  table (else it is dropped and named), its bias is cls.predictions.bias."""
  if _DECODER_BIAS in arrays:
    bias = arrays.pop(_DECODER_BIAS)
    kept = arrays.setdefault(_OUTPUT_BIAS, bias)
    if not np.array_equal(kept, bias):
      dropped.append(_DECODER_BIAS + " (differs from %s, which is kept: masked-LM outputs "
                     "will differ)" % _OUTPUT_BIAS)
  if _DECODER_WEIGHT in arrays:
    decoder = arrays.pop(_DECODER_WEIGHT)
    if not np.array_equal(decoder, arrays.get("bert.embeddings.word_embeddings.weight")):
      dropped.append(_DECODER_WEIGHT + " (not tied to the word embeddings, as ours is: "
                     "masked-LM outputs will differ)")


def architecture_of(config):
  """config.json's first `architectures` entry, or None."""
  architectures = config.get("architectures") or []
  return architectures[0] if architectures else None


def _model_head(config, config_path, raw, keep_head):
  """The fine-tuned Head to keep (None without keep_head or without one), checked against
  the weights and the labels. Raises UsageError."""
  architecture = architecture_of(config)
  head = heads.fine_tuned_head(architecture) if keep_head else None
  if head is None:
    return None
  if config.get("problem_type") == "regression":
    raise UsageError("%s: problem_type is \"regression\": our classifier has no regression "
                     "head; convert without --keep_head to fine-tune its BERT." % config_path)
  if head.kind == "classifier" and config.get("problem_type") == "multi_label_classification":
    head = heads.HEADS_BY_KIND["multi_label"]
  bias = head.names[heads.output_layer(head)[1]]  # transformers' name
  if bias not in raw:
    raise UsageError("%s says %s, but the weights hold no %s: convert without --keep_head."
                     % (config_path, architecture, bias))
  if head.kind != "squad":
    labels = model_config.labels_of(config, config_path)
    if len(labels) != raw[bias].shape[0]:
      raise UsageError("%s: id2label names %d labels, but %s has %d: the config and the "
                       "weights belong to different models." % (
                           config_path, len(labels), bias, raw[bias].shape[0]))
  return head


def google_arrays(raw, head):
  """The arrays by Google's names in Google's layout, and the parameters dropped.

  Args:
    raw: dict transformers name -> array, as read.
    head: the fine-tuned heads.Head to keep, or None.

  Raises:
    UsageError: a `bert.` parameter that BERT's architecture does not have.
  """
  arrays, read_as = _normalized(raw)
  dropped = []
  _tied_decoder(arrays, dropped)
  by_transformers_name = {}
  for kind in ("pretraining",) + ((head.kind,) if head else ()):
    by_transformers_name.update({target: name for name, target in
                                 heads.HEADS_BY_KIND[kind].names.items()})
  converted = collections.OrderedDict()
  for name, array in arrays.items():
    google_name = by_transformers_name.get(name) or weight_names.body_to_google(name)
    if google_name:
      converted[google_name] = weight_names.to_google_layout(google_name, array)
    elif name.startswith("bert."):
      raise UsageError("the parameter %s is not part of BERT's architecture (names start "
                       "with \"bert.\", or are BertModel's own): only BERT's architecture "
                       "converts." % read_as[name])
    else:
      dropped.append(read_as[name])
  return converted, dropped


def _head_shapes(bert_config, head, num_labels):
  """The shapes of the pretraining heads' and a kept head's variables."""
  hidden = bert_config["hidden_size"]
  shapes = {"cls/predictions/transform/dense/kernel": [hidden, hidden],
            "cls/predictions/transform/dense/bias": [hidden],
            "cls/predictions/transform/LayerNorm/gamma": [hidden],
            "cls/predictions/transform/LayerNorm/beta": [hidden],
            "cls/predictions/output_bias": [bert_config["vocab_size"]],
            "cls/seq_relationship/output_weights": [2, hidden],
            "cls/seq_relationship/output_bias": [2]}
  if head:
    weights, bias = heads.output_layer(head)
    shapes.update({weights: [num_labels, hidden], bias: [num_labels]})
  return shapes


def _num_labels(head, arrays):
  """A kept head's label count: 2 (start, end) for QA, else its bias's length."""
  if head is None or head.kind == "squad":
    return 2
  return len(arrays[heads.output_layer(head)[1]])


def _check_shapes(arrays, bert_config, weights_path, head):
  """Refuses weights whose shapes differ from the config's, or that lack a BERT weight."""
  for name, shape in _head_shapes(bert_config, head, _num_labels(head, arrays)).items():
    if name in arrays and list(arrays[name].shape) != shape:
      raise UsageError("%s: %s is %s, but config.json makes it %s: the weights and the config "
                       "belong to different models." % (
                           weights_path, name, list(arrays[name].shape), shape))
  mismatch = weight_names.body_mismatch(arrays, bert_config)
  if mismatch is None:
    return
  name, found, expected = mismatch
  if found is None:
    raise UsageError("%s lacks BERT's %s: it is not a complete BERT model." % (
        weights_path, weight_names.body_to_transformers(name)))
  if expected is None:
    raise UsageError("%s has %s, which config.json's BERT lacks (num_hidden_layers=%d): the "
                     "weights and the config belong to different models." % (
                         weights_path, weight_names.body_to_transformers(name),
                         bert_config["num_hidden_layers"]))
  raise UsageError("%s: %s is %s, but config.json makes it %s: the weights and the config "
                   "belong to different models." % (
                       weights_path, weight_names.body_to_transformers(name), found, expected))


def _settings(head, input_dir, do_lower_case, max_seq_length, beside):
  """model_settings.json of a kept classifier or tagger: the one written beside the model
  by --to=transformers, else one made from the tokenizer's case and max_seq_length."""
  if model_files.SETTINGS_FILE in beside:
    return model_config.read_json(os.path.join(input_dir, model_files.SETTINGS_FILE))
  if head.kind == "ner":
    return ner_serving.ner_settings(do_lower_case, max_seq_length, max_seq_length // 2,
                                    crf_numpy.CRF_TRANSITIONS_FILE in beside)
  return classifier_serving.classifier_settings(
      "tsv", do_lower_case, max_seq_length,
      input_examples.FeatureOptions(multi_label=head.kind == "multi_label"))


def _head_files(head, config, input_dir, arrays, do_lower_case, max_seq_length):
  """The label list (None for QA), and model_settings.json and the files beside a kept head
  as {name: text}; the CRF's transitions join `arrays`; BERT's pooler, which token
  classification and QA lack, is written as zeros (those models never read it; our graph
  has it)."""
  hidden = arrays["bert/embeddings/word_embeddings"].shape[1]
  if not head.has_pooler:
    arrays.setdefault("bert/pooler/dense/kernel", np.zeros([hidden, hidden], np.float32))
    arrays.setdefault("bert/pooler/dense/bias", np.zeros([hidden], np.float32))
  if head.kind == "squad":
    return None, {}
  labels = model_config.labels_of(config, os.path.join(input_dir, model_config.CONFIG_FILE))
  beside = {name for name in (crf_numpy.CRF_TRANSITIONS_FILE, model_files.SETTINGS_FILE,
                              multi_label.THRESHOLDS_FILE)
            if os.path.isfile(os.path.join(input_dir, name))}
  if crf_numpy.CRF_TRANSITIONS_FILE in beside and head.kind == "ner":
    arrays[ner_model.CRF_TRANSITIONS] = crf_numpy.read_transitions(
        os.path.join(input_dir, crf_numpy.CRF_TRANSITIONS_FILE), labels)
  settings = _settings(head, input_dir, do_lower_case, max_seq_length, beside)
  texts = {model_files.SETTINGS_FILE: model_config.json_text(settings)}
  if multi_label.THRESHOLDS_FILE in beside and head.kind == "multi_label":
    texts[multi_label.THRESHOLDS_FILE] = model_files.read_utf8(
        os.path.join(input_dir, multi_label.THRESHOLDS_FILE))
  return labels, texts


DEFAULT_MAX_SEQ_LENGTH = 128


def convert(input_dir, output_dir, keep_head=False, max_seq_length=None, replace_arrays=None,
            beside_texts=None):
  """Writes `output_dir`: a Google-named checkpoint, bert_config.json and vocab.txt.

  Args:
    input_dir: a transformers model directory (config.json, weights, vocab).
    output_dir: a directory that does not exist yet or is empty.
    keep_head: also convert a fine-tuned classification, tagging or QA head.
    max_seq_length: model_settings.json's, for a kept head without one beside it (None:
      128, or max_position_embeddings when smaller).
    replace_arrays: None, or dict Google name -> array replacing a converted weight of the
      same shape (sentence-transformers' Dense as BERT's pooler).
    beside_texts: None, or dict file name -> text written beside the checkpoint.

  Returns:
    A dict summary: "checkpoint", "weights" (the file read), "kept_head", "dropped".

  Raises:
    UsageError: one line; nothing is written.
  """
  to_transformers.check_output_dir(output_dir)
  config_path = os.path.join(input_dir, model_config.CONFIG_FILE)
  if not os.path.isfile(config_path):
    ours = os.path.isdir(input_dir) and any(name.endswith(".index") or name == "bert_config.json"
                                            for name in os.listdir(input_dir))
    raise UsageError("--input=%s has no %s: %s" % (
        input_dir, model_config.CONFIG_FILE,
        "it holds a TensorFlow checkpoint; use --to=transformers to convert it." if ours else
        "give the directory transformers' save_pretrained wrote."))
  config = model_config.read_json(config_path)
  bert_config = model_config.bert_config_of(config, config_path)
  vocab = model_config.vocab_of(input_dir)
  if len(vocab) > bert_config["vocab_size"]:
    raise UsageError("%s has %d tokens, but vocab_size is %d in %s: they belong to different "
                     "models." % (input_dir, len(vocab), bert_config["vocab_size"], config_path))
  if max_seq_length is None:
    max_seq_length = min(DEFAULT_MAX_SEQ_LENGTH, bert_config["max_position_embeddings"])
  if max_seq_length > bert_config["max_position_embeddings"]:
    raise UsageError("--max_seq_length=%d is longer than max_position_embeddings=%d in %s."
                     % (max_seq_length, bert_config["max_position_embeddings"], config_path))
  raw, weights_path = weight_files.read_weights(input_dir)
  head = _model_head(config, config_path, _normalized(raw)[0], keep_head)
  arrays, dropped = google_arrays(raw, head)
  for name, array in (replace_arrays or {}).items():
    if name not in arrays or arrays[name].shape != array.shape:
      raise UsageError("%s: %s should replace %s %s, which the model %s." % (
          input_dir, list(array.shape), name, "" if name not in arrays else
          list(arrays[name].shape), "lacks" if name not in arrays else "has"))
    arrays[name] = array
  _check_shapes(arrays, bert_config, weights_path, head)
  do_lower_case = model_config.do_lower_case_of(input_dir)
  texts = {model_files.CONFIG_FILE: model_config.json_text(bert_config),
           model_files.VOCAB_FILE: "".join(token + "\n" for token in vocab)}
  texts.update(beside_texts or {})
  labels = None
  if head:
    labels, head_texts = _head_files(head, config, input_dir, arrays, do_lower_case,
                                     max_seq_length)
    texts.update(head_texts)

  def fill(directory):
    try:
      checkpoints.write_arrays(arrays, os.path.join(directory, CHECKPOINT_NAME))
    except tf.errors.OpError as e:  # TF's own write failure (a full disk, say)
      raise write_error(output_dir, e)
    # The Saver's `checkpoint` file names the path it wrote, which the rename below moves:
    # name it relative to the directory instead.
    output_files.atomic_write_text(
        os.path.join(directory, "checkpoint"),
        'model_checkpoint_path: "%s"\nall_model_checkpoint_paths: "%s"\n' % (
            CHECKPOINT_NAME, CHECKPOINT_NAME))
    for name, text in texts.items():
      output_files.atomic_write_text(os.path.join(directory, name), text)
    if labels is not None:
      label_files.write_label_file(directory, labels)

  output_files.replace_directory(os.path.abspath(output_dir), fill)
  written = list(texts) + ([label_files.LABELS_FILE] if labels is not None else [])
  return {"checkpoint": os.path.join(output_dir, CHECKPOINT_NAME), "weights": weights_path,
          "kept_head": head.architecture if head else None, "dropped": dropped,
          "variables": len(arrays), "files": sorted(written), "do_lower_case": do_lower_case,
          "keep_head_would_keep": not head and bool(
              heads.fine_tuned_head(architecture_of(config)))}

