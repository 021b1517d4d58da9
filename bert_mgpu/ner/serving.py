# coding=utf-8
"""Putting a trained NER model to work: its settings, its SavedModel export, and a
predictor that finds the entities of raw text lines on every tower.

The machinery is bert_mgpu/serving's (model files, versioned exports, Predictor,
MicroBatcher); this module adds what token classification needs:

  model_settings.json  {"model": "ner", "do_lower_case", "max_seq_length", "doc_stride",
                       "use_crf"} beside vocab.txt, bert_config.json and labels.txt.
  The export           inputs input_ids, input_mask, segment_ids (int32 [batch, seq], both
                       dynamic); outputs tag_ids [batch, seq] (the Viterbi path with a CRF,
                       else the argmax; 0 on [CLS], [SEP], padding and "##" pieces) and
                       probabilities [batch, seq, num_tags]. The graph takes every piece but
                       [CLS], [SEP], padding and "##" continuations as the first piece of a
                       token, which is what featurizing gives when each token is one
                       character (raw text, CLUENER) or one word piece run.
  Raw text             every character is a token, as in CLUENER: a line is featurized as a
                       CLUENER sentence (windows of max_seq_length with doc_stride from the
                       settings) and its entities are predict_entities.jsonl records
                       {"text", "entities": [{"type", "start", "end", "text"}]}, character
                       offsets into the line, `end` exclusive.
"""

import collections

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu.data.tfrecord_io import MODEL_INPUTS
from bert_mgpu.ner import crf_numpy
from bert_mgpu.ner import featurizing
from bert_mgpu.ner import formats
from bert_mgpu.ner import model as ner_model
from bert_mgpu.ner import scoring as ner_scoring
from bert_mgpu.ner import writers
from bert_mgpu.serving import export
from bert_mgpu.serving import model_files
from bert_mgpu.serving import model_inputs
from bert_mgpu.serving import onnx_export
from bert_mgpu.serving import predictor
from bert_mgpu.training import checkpoints

NER_KINDS = (model_files.NER_KIND,)
# predict_text.py takes either kind.
ANY_KIND = (model_files.CLASSIFIER_KIND, model_files.NER_KIND)

# The window fields fed to the predictor, by feature name.
_WINDOW_FIELDS = (("input_ids", "input_ids"), ("input_mask", "input_mask"),
                  ("segment_ids", "segment_ids"), ("tag_mask", "label_mask"))

# Pieces that never start a token: the window's own markers and padding.
_NOT_TOKEN_PIECES = ("[CLS]", "[SEP]", "[PAD]")


def ner_settings(do_lower_case, max_seq_length, doc_stride, use_crf):
  """The model_settings.json content of an NER model."""
  return collections.OrderedDict([
      ("model", model_files.NER_KIND), ("do_lower_case", bool(do_lower_case)),
      ("max_seq_length", int(max_seq_length)), ("doc_stride", int(doc_stride)),
      ("use_crf", bool(use_crf))])


def create_model_fn(model, pad_outputs=True):
  """ner_model's model_fn for a predictor.LoadedModel of an NER model.

  Args:
    pad_outputs: pad per-piece outputs back to max_seq_length (so that batches of any
      length concatenate; not in the export, whose outputs keep the input length).
  """
  settings = model.files.settings
  return ner_model.create_model_fn(
      model.bert_config, len(model.files.labels), settings["use_crf"],
      max_seq_length=settings["max_seq_length"] if pad_outputs else None)


# ---------------------------------------------------------------------------
# SavedModel export
# ---------------------------------------------------------------------------

def first_piece_table(vocab, vocab_size):
  """int32 [vocab_size]: 0 for the ids of [CLS], [SEP], [PAD] and "##" pieces, else 1."""
  table = np.ones([vocab_size], np.int32)
  for piece, index in vocab.items():
    if index < vocab_size and (piece.startswith("##") or piece in _NOT_TOKEN_PIECES):
      table[index] = 0
  return table


def signature_outputs(model, inputs):
  """Builds the NER serving graph on `inputs`; returns tag_ids and probabilities."""
  features = model_inputs.checked_features(inputs, model.bert_config)
  table = tf.constant(first_piece_table(model.tokenizer.vocab, model.bert_config.vocab_size))
  features["tag_mask"] = tf.gather(table, features["input_ids"]) * features["input_mask"]
  outputs = create_model_fn(model, pad_outputs=False)(features, False)
  return collections.OrderedDict([
      ("tag_ids", tf.identity(outputs["tag_ids"], name="tag_ids")),  # [batch, seq]
      ("probabilities", tf.identity(outputs["probabilities"], name="probabilities")),
  ])


def export_output_dir(output_dir, export_base, export_format=onnx_export.ExportFormat()):
  """Exports the best (else latest) checkpoint of an NER output_dir as a SavedModel, an ONNX
  model or both (export_format: onnx_export.ExportFormat).

  The ONNX model keeps the probabilities (and, without a CRF, tag_ids); with a CRF its
  transitions go into assets.extra/crf_transitions.json and the predictor decodes in NumPy.

  Returns:
    (the version directory written, the checkpoint, why that one).

  Raises:
    UsageError: output_dir is not a complete NER model (a classifier's, say), or the
      export cannot be written.
  """
  files = model_files.find_model_files(
      output_dir, "train it with this version of run_ner_mgpu.py --do_train, which saves "
      "them there.", NER_KINDS)
  checkpoint, why = checkpoints.checkpoint_for_inference(output_dir, None, best_subdir="best")
  model = predictor.load_model(files, checkpoint, checkpoint)
  use_crf = bool(files.settings["use_crf"])
  extra_assets = {}
  if use_crf and onnx_export.writes_onnx(export_format.name):
    extra_assets[crf_numpy.CRF_TRANSITIONS_FILE] = crf_numpy.transitions_json(
        tf.train.load_checkpoint(checkpoint).get_tensor(ner_model.CRF_TRANSITIONS),
        files.labels)
  path = export.export_saved_model(
      export_base, files, checkpoint, lambda inputs: signature_outputs(model, inputs),
      export_format, ("probabilities",) + (() if use_crf else ("tag_ids",)), extra_assets)
  return path, checkpoint, why


# ---------------------------------------------------------------------------
# Raw text to entities
# ---------------------------------------------------------------------------

def sentences_of_texts(texts):
  """NerSentences of raw text lines: one token per character (CLUENER's rule)."""
  return [formats.NerSentence(list(text), None, text, list(range(len(text))))
          for text in texts]


NerFeatures = collections.namedtuple("NerFeatures", ["features", "sentences", "featurized"])
NerFeatures.__doc__ = """The windows of some texts and what turns their predictions back.

Fields:
  features: model_inputs.Features of every window, in text order (what the predictor runs).
  sentences: list of NerSentence, one per text.
  featurized: per text, (SentencePieces, list of NerWindow) (featurizing.featurize_sentences).
"""


class NerPredictor(object):
  """An NER model on every tower: raw texts in, predict_entities.jsonl records out.

  featurize() and predict() are split as for predictor.Predictor, so that MicroBatcher runs
  the windows of concurrent requests together; entities() reads the records off.
  """

  kind = model_files.NER_KIND

  def __init__(self, model, devices, batch_size_per_tower):
    """Args: model: predictor.LoadedModel of an NER model; devices: a checked
    run_settings.DeviceSettings; batch_size_per_tower: windows per tower per step."""
    settings = model.files.settings
    self.model = model
    self.labels = model.files.labels
    self.max_seq_length = settings["max_seq_length"]
    self.doc_stride = settings["doc_stride"]
    self.scheme = ner_scoring.detect_scheme(self.labels)
    self._predictor = predictor.Predictor(
        model, create_model_fn(model), devices, batch_size_per_tower,
        input_names=MODEL_INPUTS + ("tag_mask",), output_name="tag_ids")

  def featurize(self, texts):
    """NerFeatures of raw texts (each line one sentence, each character one token)."""
    sentences = sentences_of_texts(texts)
    featurized = featurizing.featurize_sentences(sentences, self.model.tokenizer, self.labels,
                                                 self.max_seq_length, self.doc_stride)
    windows = [window for _, windows in featurized for window in windows]
    arrays = {name: np.array([getattr(w, field) for w in windows],
                             np.int32).reshape([len(windows), self.max_seq_length])
              for name, field in _WINDOW_FIELDS}
    return NerFeatures(model_inputs.Features(arrays, np.zeros([len(windows)], np.bool_)),
                       sentences, featurized)

  def predict(self, features):
    """The tag ids of featurized windows: np.int32 [windows, max_seq_length]."""
    if not len(features.truncated):
      return np.zeros([0, self.max_seq_length], np.int32)
    return self._predictor.predict(features)

  def entities(self, ner_features, window_tag_ids):
    """predict_entities.jsonl records of the texts, from their windows' tag ids."""
    records, start = [], 0
    for sentence, (aligned, windows) in zip(ner_features.sentences, ner_features.featurized):
      tags = featurizing.tags_from_windows(aligned, windows,
                                           window_tag_ids[start:start + len(windows)],
                                           self.labels, self.scheme)
      records.append(writers.entity_records(sentence, tags))
      start += len(windows)
    return records

  def close(self):
    self._predictor.close()
