# coding=utf-8
"""The NER model's TensorFlow side of serving (ner/serving.py is the rest): the SavedModel
signature, the CRF transitions an ONNX export carries, and the tagger on every tower.

The export takes input_ids, input_mask and segment_ids (int32 [batch, seq], both dynamic)
and returns tag_ids [batch, seq] (the Viterbi path with a CRF, else the argmax; 0 on [CLS],
[SEP], padding and "##" pieces) and probabilities [batch, seq, num_tags]. The graph takes
every piece but [CLS], [SEP], padding and "##" continuations as the first piece of a token,
which is what featurizing gives when each token is one character (raw text, CLUENER) or one
word piece run. The ONNX model keeps the probabilities (and, without a CRF, tag_ids); with a
CRF its transitions go into assets.extra/crf_transitions.json and ner/serving.py decodes in
NumPy.

The span heads' export ("ner_spans") takes the same inputs and returns "spans", float32
[batch, max_seq_length, 4]: each window's best pairs as (type id, start, end, score)
(global_pointer.top_spans; the ids and positions are small integers, exact in float32). The
ONNX model keeps it.
"""

import collections

import tensorflow.compat.v1 as tf

from bert_mgpu.data.batch_shapes import MODEL_INPUTS
from bert_mgpu.ner import crf_numpy
from bert_mgpu.ner import global_pointer
from bert_mgpu.ner import model as ner_model
from bert_mgpu.ner import serving as ner_serving
from bert_mgpu.serving import kinds
from bert_mgpu.serving import onnx_export
from bert_mgpu.serving import predictor
from bert_mgpu.serving import serving_graph
from bert_mgpu.training import weight_averages


def create_model_fn(model):
  """ner_model's model_fn for a predictor.LoadedModel of an NER model (per-piece outputs
  as long as the input)."""
  return ner_model.create_model_fn(model.bert_config, len(model.files.labels),
                                   model.files.settings["use_crf"])


class NerGraph(kinds.KindGraph):
  """NerKind.graph(): see serving/kinds.ServableKind.graph."""

  def signature_outputs(self, model, inputs):
    """Builds the NER serving graph on `inputs`; returns tag_ids and probabilities."""
    features = serving_graph.checked_features(inputs, model.bert_config)
    table = tf.constant(ner_serving.first_piece_table(model.tokenizer.vocab,
                                                      model.bert_config.vocab_size))
    features["tag_mask"] = tf.gather(table, features["input_ids"]) * features["input_mask"]
    outputs = create_model_fn(model)(features, False)
    return collections.OrderedDict([
        ("tag_ids", tf.identity(outputs["tag_ids"], name="tag_ids")),  # [batch, seq]
        ("probabilities", tf.identity(outputs["probabilities"], name="probabilities")),
    ])

  def onnx_output_names(self, files):
    return ("probabilities",) + (() if files.settings["use_crf"] else ("tag_ids",))

  def export_assets(self, files, checkpoint, export_format):
    """With a CRF and an ONNX model: crf_transitions.json, for the decoding in NumPy."""
    if not (files.settings["use_crf"] and onnx_export.writes_onnx(export_format.name)):
      return {}
    return {crf_numpy.CRF_TRANSITIONS_FILE: crf_numpy.transitions_json(
        weight_averages.read_weight(checkpoint, ner_model.CRF_TRANSITIONS),
        files.labels)}

  def tensorflow_runner(self, model, devices, batch_size_per_tower):
    return predictor.Predictor(model, create_model_fn(model), devices, batch_size_per_tower,
                               input_names=MODEL_INPUTS + ("tag_mask",))


# ---------------------------------------------------------------------------
# The span heads' kind ("ner_spans", ner/serving.SpanKind)
# ---------------------------------------------------------------------------

def spans_model_fn(model):
  """global_pointer's model_fn for a predictor.LoadedModel, its best pairs stacked into
  the export's one SPANS_OUTPUT [batch, max_seq_length, 4] (the predictor runs the same)."""
  settings = model.files.settings
  model_fn = global_pointer.create_model_fn(model.bert_config, len(model.files.labels),
                                            settings["ner_head"], settings["max_seq_length"])

  def stacked_model_fn(features, is_training):
    outputs = model_fn(features, is_training)
    columns = [tf.cast(outputs[name], tf.float32)
               for name in ("span_types", "span_starts", "span_ends", "span_scores")]
    return {ner_serving.SPANS_OUTPUT: tf.stack(columns, axis=-1)}
  return stacked_model_fn


class SpanGraph(kinds.KindGraph):
  """SpanKind.graph(): see serving/kinds.ServableKind.graph."""

  def signature_outputs(self, model, inputs):
    """Builds the span model on `inputs`; returns its SPANS_OUTPUT."""
    features = serving_graph.checked_features(inputs, model.bert_config)
    spans = spans_model_fn(model)(features, False)[ner_serving.SPANS_OUTPUT]
    return collections.OrderedDict([
        (ner_serving.SPANS_OUTPUT, tf.identity(spans, name=ner_serving.SPANS_OUTPUT))])

  def onnx_output_names(self, files):
    del files
    return (ner_serving.SPANS_OUTPUT,)

  def tensorflow_runner(self, model, devices, batch_size_per_tower):
    return predictor.Predictor(model, spans_model_fn(model), devices, batch_size_per_tower)
