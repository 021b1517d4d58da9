# coding=utf-8
"""The sentence encoder's TensorFlow side of serving (embedding/serving.py is the rest): the
SavedModel signature and the encoder on every tower.

The export takes input_ids, input_mask and segment_ids (int32 [batch, seq], both dynamic)
and returns embeddings (float32 [batch, hidden]): pooled as model_settings.json's "pooling"
says and, with "normalize_embeddings", unit-length. The ONNX model keeps it.
"""

import collections

import tensorflow.compat.v1 as tf

from bert_mgpu.embedding import model as embedding_model
from bert_mgpu.embedding import serving as embedding_serving
from bert_mgpu.serving import kinds
from bert_mgpu.serving import predictor
from bert_mgpu.serving import serving_graph


def create_serving_model_fn(bert_config, pooling, normalize):
  """model_fn(features, is_training) -> {"embeddings": float32 [batch, hidden]} of one text
  per row (features: int32 [batch, seq] input_ids, input_mask, segment_ids)."""
  def model_fn(features, is_training):
    pooled = embedding_model.pooled_embeddings(
        bert_config, features["input_ids"], features["input_mask"], features["segment_ids"],
        is_training, pooling)  # [batch, hidden]
    if normalize:
      pooled = tf.nn.l2_normalize(pooled, axis=-1)  # a zero vector stays zero
    return {embedding_serving.EMBEDDINGS: pooled}
  return model_fn


def _model_fn_of(model):
  settings = model.files.settings
  return create_serving_model_fn(model.bert_config, settings["pooling"],
                                 settings["normalize_embeddings"])


class EmbeddingGraph(kinds.KindGraph):
  """EmbeddingKind.graph(): see serving/kinds.ServableKind.graph."""

  def signature_outputs(self, model, inputs):
    """Builds the encoder on `inputs`; returns embeddings."""
    features = serving_graph.checked_features(inputs, model.bert_config)
    embeddings = _model_fn_of(model)(features, False)[embedding_serving.EMBEDDINGS]
    return collections.OrderedDict([
        (embedding_serving.EMBEDDINGS,
         tf.identity(embeddings, name=embedding_serving.EMBEDDINGS))])

  def onnx_output_names(self, files):
    del files
    return (embedding_serving.EMBEDDINGS,)

  def tensorflow_runner(self, model, devices, batch_size_per_tower):
    return predictor.Predictor(model, _model_fn_of(model), devices, batch_size_per_tower)
