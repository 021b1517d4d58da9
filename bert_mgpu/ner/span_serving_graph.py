# coding=utf-8
"""The span heads' TensorFlow side of serving (ner/span_serving.py is the rest): the
SavedModel signature and the span model on every tower.

The export takes input_ids, input_mask and segment_ids (int32 [batch, seq], both dynamic)
and returns "spans", float32 [batch, max_seq_length, 4]: each window's best pairs as (type
id, start, end, score) (global_pointer.top_spans; the ids and positions are small integers,
exact in float32). The ONNX model keeps it.
"""

import collections

import tensorflow.compat.v1 as tf

from bert_mgpu.ner import global_pointer
from bert_mgpu.ner import span_serving
from bert_mgpu.serving import kinds
from bert_mgpu.serving import predictor
from bert_mgpu.serving import serving_graph


def spans_model_fn(model):
  """global_pointer's model_fn for a predictor.LoadedModel, its best pairs stacked into
  the one SPANS_OUTPUT [batch, max_seq_length, 4]."""
  settings = model.files.settings
  model_fn = global_pointer.create_model_fn(model.bert_config, len(model.files.labels),
                                            settings["ner_head"], settings["max_seq_length"])

  def stacked_model_fn(features, is_training):
    outputs = model_fn(features, is_training)
    columns = [tf.cast(outputs[name], tf.float32)
               for name in ("span_types", "span_starts", "span_ends", "span_scores")]
    return {span_serving.SPANS_OUTPUT: tf.stack(columns, axis=-1)}
  return stacked_model_fn


class SpanGraph(kinds.KindGraph):
  """SpanKind.graph(): see serving/kinds.ServableKind.graph."""

  def signature_outputs(self, model, inputs):
    """Builds the span model on `inputs`; returns its SPANS_OUTPUT."""
    features = serving_graph.checked_features(inputs, model.bert_config)
    spans = spans_model_fn(model)(features, False)[span_serving.SPANS_OUTPUT]
    return collections.OrderedDict([
        (span_serving.SPANS_OUTPUT, tf.identity(spans, name=span_serving.SPANS_OUTPUT))])

  def onnx_output_names(self, files):
    del files
    return (span_serving.SPANS_OUTPUT,)

  def tensorflow_runner(self, model, devices, batch_size_per_tower):
    return predictor.Predictor(model, spans_model_fn(model), devices, batch_size_per_tower,
                               output_name=span_serving.SPANS_OUTPUT)
