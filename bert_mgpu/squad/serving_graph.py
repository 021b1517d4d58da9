# coding=utf-8
"""The reading-comprehension model's TensorFlow side of serving (squad/serving.py is the
rest): the SavedModel signature and the span head on every tower.

The export takes input_ids, input_mask and segment_ids (int32 [batch, seq], both dynamic;
no unique_ids) and returns start_logits and end_logits (float32 [batch, seq], padding
positions squad/data.PADDING_LOGIT); the ONNX model keeps both. Windowing the question and
its context, and choosing the answer from the logits, are squad/serving.py's.
"""

import collections

import tensorflow.compat.v1 as tf

from bert_mgpu.serving import kinds
from bert_mgpu.serving import predictor
from bert_mgpu.serving import serving_graph
from bert_mgpu.squad import model as squad_model


class SquadGraph(kinds.KindGraph):
  """SquadKind.graph(): see serving/kinds.ServableKind.graph."""

  def signature_outputs(self, model, inputs):
    """Builds the span head on `inputs`; returns start_logits and end_logits."""
    features = serving_graph.checked_features(inputs, model.bert_config)
    outputs = squad_model.create_model_fn(model.bert_config)(features, False)
    return collections.OrderedDict([
        ("start_logits", tf.identity(outputs["start_logits"], name="start_logits")),
        ("end_logits", tf.identity(outputs["end_logits"], name="end_logits")),
    ])

  def onnx_output_names(self, files):
    del files
    return ("start_logits", "end_logits")

  def tensorflow_runner(self, model, devices, batch_size_per_tower):
    return predictor.Predictor(model, squad_model.create_model_fn(model.bert_config), devices,
                               batch_size_per_tower)
