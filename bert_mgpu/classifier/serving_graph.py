# coding=utf-8
"""The classifier's TensorFlow side of serving (classifier/serving.py is the rest): the
SavedModel signature and the predictor's graph on every tower.

The serving_default signature takes input_ids, input_mask and segment_ids, int32
[batch, seq] (a --long_text=windows model: [batch, windows, seq]), every dimension dynamic,
and returns probabilities [batch, num_labels], label_id [batch] and label [batch] (the label
name); a multi-label classifier's returns probabilities, predicted [batch, num_labels] int32
(1: the label reaches its threshold) and label [batch] (its predicted labels joined by its
separator). The ONNX model keeps the probabilities: the labels and thresholds are applied in
NumPy (classifier/serving.py).
"""

import collections
import re

import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import model as classifier_model
from bert_mgpu.classifier import serving as classifier_serving
from bert_mgpu.serving import kinds
from bert_mgpu.serving import predictor
from bert_mgpu.serving import serving_graph


def _multi_label_outputs(probabilities, labels, thresholds, separator):
  """probabilities [batch, labels], predicted [batch, labels] int32 (1: the label reaches its
  threshold), and label [batch]: the predicted labels joined by the separator."""
  chosen = probabilities >= tf.constant(thresholds, tf.float32)  # [batch, labels]
  # Each chosen label preceded by the separator, joined, then the first separator cut.
  pieces = tf.where(chosen, tf.broadcast_to(tf.constant([separator + l for l in labels]),
                                            tf.shape(chosen)),
                    tf.fill(tf.shape(chosen), ""))
  joined = tf.strings.reduce_join(pieces, axis=-1)  # [batch]
  label = tf.strings.regex_replace(joined, "^" + re.escape(separator), "",
                                   replace_global=False)
  return collections.OrderedDict([
      ("probabilities", tf.identity(probabilities, name="probabilities")),
      ("predicted", tf.cast(chosen, tf.int32, name="predicted")),
      ("label", tf.identity(label, name="label")),
  ])


class ClassifierGraph(kinds.KindGraph):
  """ClassifierKind.graph(): see serving/kinds.ServableKind.graph."""

  def signature_outputs(self, model, inputs):
    """Builds the serving graph on `inputs`; returns the signature's output tensors."""
    files = model.files
    features = serving_graph.checked_features(inputs, model.bert_config)
    model_fn = classifier_model.model_fn_of(files, model.bert_config)
    probabilities = model_fn(features, False)["probabilities"]  # [batch, num_labels]
    thresholds = classifier_serving.thresholds_of(files)
    if thresholds is not None:
      return _multi_label_outputs(probabilities, files.labels, thresholds,
                                  files.settings["label_separator"])
    label_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)  # [batch]
    return collections.OrderedDict([
        ("probabilities", tf.identity(probabilities, name="probabilities")),
        ("label_id", tf.identity(label_id, name="label_id")),
        ("label", tf.gather(tf.constant(files.labels), label_id, name="label")),  # [batch]
    ])

  def onnx_output_names(self, files):
    del files
    return ("probabilities",)

  def tensorflow_runner(self, model, devices, batch_size_per_tower):
    return predictor.Predictor(
        model, classifier_model.model_fn_of(model.files, model.bert_config), devices,
        batch_size_per_tower)
