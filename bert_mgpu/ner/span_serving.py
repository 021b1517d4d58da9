# coding=utf-8
"""The span heads' models (--ner_head=global_pointer|efficient_global_pointer) as a servable
kind (serving/kinds.py): entities that may nest, from raw text lines.

  model_settings.json  {"model": "ner_spans", "do_lower_case", "max_seq_length",
                       "doc_stride", "ner_head"} beside vocab.txt, bert_config.json and
                       labels.txt, which holds the entity types (ner/entity_types.py).
  Raw text             as the tagging kind (ner/serving.py): each character of a line is a
                       token, a line is windowed like a CLUENER sentence, and its entities
                       become predict_entities.jsonl records {"text", "entities": [{"type",
                       "start", "end", "text"}]}, nested ones included; HTTP {"entities":
                       [[...], ...]}, one list per text.
  Model output         "spans" float32 [windows, max_seq_length, 4]: each window's best
                       pairs, (type id, start, end, score) with window positions, end
                       inclusive (global_pointer.top_spans); those above 0 are spans, kept
                       once over the windows by span_windows.spans_from_windows. The
                       SavedModel and the ONNX model both give it.

No TensorFlow import: predict_text.py --backend=onnxruntime runs this.
"""

import collections

import numpy as np

from bert_mgpu.ner import entity_types
from bert_mgpu.ner import serving as ner_serving
from bert_mgpu.ner import span_windows
from bert_mgpu.ner import writers
from bert_mgpu.serving import kinds
from bert_mgpu.serving import onnx_predictor

SPAN_KIND = "ner_spans"
SPANS_OUTPUT = "spans"  # [batch, max_seq_length, 4]: type id, start, end, score


def span_settings(do_lower_case, max_seq_length, doc_stride, ner_head):
  """The model_settings.json content of a span head's model."""
  return collections.OrderedDict([
      ("model", SPAN_KIND), ("do_lower_case", bool(do_lower_case)),
      ("max_seq_length", int(max_seq_length)), ("doc_stride", int(doc_stride)),
      ("ner_head", ner_head)])


def window_outputs(spans):
  """span_windows.spans_from_windows' per-window (types, starts, ends, scores) of the
  "spans" output [windows, max_spans, 4]."""
  return [(row[:, 0].astype(np.int64), row[:, 1].astype(np.int64),
           row[:, 2].astype(np.int64), row[:, 3]) for row in spans]


class SpanPredictor(ner_serving.NerPredictor):
  """A span head's model: raw texts in, predict_entities.jsonl records (entities may nest)
  out, around a runner of windows: predict(model_inputs.Features) -> float32
  [windows, max_seq_length, 4] (SPANS_OUTPUT)."""

  def __init__(self, model, runner):  # pylint: disable=super-init-not-called
    kinds.TextPredictor.__init__(self, model, runner)
    self.doc_stride = model.files.settings["doc_stride"]

  def predict(self, features):
    if not len(features.truncated):
      return np.zeros([0, self.max_seq_length, 4], np.float32)
    return self._runner.predict(features)

  def decode(self, featurized, outputs):
    """predict_entities.jsonl records of the texts, from their windows' best pairs."""
    records, start = [], 0
    for sentence, (aligned, windows) in zip(featurized.sentences, featurized.featurized):
      spans = span_windows.spans_from_windows(
          aligned, windows, window_outputs(outputs[start:start + len(windows)]), self.labels)
      records.append(writers.entity_records(sentence, spans))
      start += len(windows)
    return records


class SpanKind(kinds.ServableKind):
  """An NER model with a span head (run_ner_mgpu.py --ner_head=global_pointer or
  efficient_global_pointer)."""

  name = SPAN_KIND
  description = "an NER span model"
  script = "run_ner_mgpu.py"
  settings_fields = ("doc_stride", "ner_head")

  def read_labels(self, path):
    return entity_types.read_type_file(path)

  def onnx_outputs(self, files):
    return {SPANS_OUTPUT: ("tensor(float)", [None, files.settings["max_seq_length"], 4])}

  def onnx_runner(self, model, session, batch_size, length_multiple):
    return onnx_predictor.OnnxRun(model, session, batch_size, length_multiple,
                                  output_name=SPANS_OUTPUT)

  def text_predictor(self, model, runner):
    return SpanPredictor(model, runner)

  def graph(self):
    from bert_mgpu.ner import span_serving_graph  # pylint: disable=import-outside-toplevel
    return span_serving_graph.SpanGraph()


kinds.register(SpanKind())
