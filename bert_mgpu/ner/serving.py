# coding=utf-8
"""Putting a trained NER model to work in TensorFlow: its settings, its SavedModel (and ONNX)
export, and a predictor that finds the entities of raw text lines on every tower.

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
  Raw text             ner/text_predictor.py (no TensorFlow): lines to windows, tag ids to
                       predict_entities.jsonl records; load_predictor() gives it this
                       module's model on every tower.
"""

import collections

import tensorflow.compat.v1 as tf

from bert_mgpu.data.batch_shapes import MODEL_INPUTS
from bert_mgpu.ner import crf_numpy
from bert_mgpu.ner import model as ner_model
from bert_mgpu.ner import text_predictor
from bert_mgpu.serving import export
from bert_mgpu.serving import model_files
from bert_mgpu.serving import onnx_export
from bert_mgpu.serving import predictor
from bert_mgpu.serving import serving_graph
from bert_mgpu.training import checkpoints

NER_KINDS = (model_files.NER_KIND,)


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

def signature_outputs(model, inputs):
  """Builds the NER serving graph on `inputs`; returns tag_ids and probabilities."""
  features = serving_graph.checked_features(inputs, model.bert_config)
  table = tf.constant(text_predictor.first_piece_table(model.tokenizer.vocab,
                                                      model.bert_config.vocab_size))
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
# The predictor
# ---------------------------------------------------------------------------

def load_predictor(model, devices, batch_size_per_tower):
  """A text_predictor.NerPredictor of an NER model on every tower.

  Args:
    model: predictor.LoadedModel of an NER model.
    devices: a checked run_settings.DeviceSettings.
    batch_size_per_tower: windows per tower per step.
  """
  tagger = predictor.Predictor(model, create_model_fn(model), devices, batch_size_per_tower,
                               input_names=MODEL_INPUTS + ("tag_mask",), output_name="tag_ids")
  return text_predictor.NerPredictor(model, tagger)
