# coding=utf-8
"""The NER model as a servable kind (serving/kinds.py): its settings, raw text lines to
entities around any tagger of windows (TensorFlow's, ner/serving_graph.py, or ONNX
Runtime's, here), and the CRF decoding ONNX Runtime needs.

  model_settings.json  {"model": "ner", "do_lower_case", "max_seq_length", "doc_stride",
                       "use_crf"} beside vocab.txt, bert_config.json and labels.txt.
  Raw text             every character of a line is a token, as in CLUENER: a line is
                       featurized as a CLUENER sentence (windows of max_seq_length,
                       doc_stride apart) and its entities become predict_entities.jsonl
                       records {"text", "entities": [{"type", "start", "end", "text"}]},
                       character offsets into the line, `end` exclusive; HTTP
                       {"entities": [[...], ...]}, one list per text.
  ONNX                 the model's probabilities (and, without a CRF, tag_ids); with a CRF,
                       Viterbi decoding in NumPy over assets.extra/crf_transitions.json.

The span heads' models are a second kind, "ner_spans" (SpanKind, below):

  model_settings.json  {"model": "ner_spans", "do_lower_case", "max_seq_length",
                       "doc_stride", "ner_head"}; labels.txt holds the entity types
                       (ner/entity_types.py).
  Raw text             as above; the entities may nest.
  Model output         "spans" float32 [windows, max_seq_length, 4]: each window's best
                       pairs, (type id, start, end, score) with window positions, end
                       inclusive (global_pointer.top_spans); those above 0 are spans, kept
                       once over the windows by span_windows.spans_from_windows. The
                       SavedModel and the ONNX model both give it.

No TensorFlow import: predict_text.py --backend=onnxruntime runs this.
"""

import collections
import json
import logging
import os

import numpy as np

from bert_mgpu.data.batch_shapes import MODEL_INPUTS
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import crf_numpy
from bert_mgpu.ner import entity_types
from bert_mgpu.ner import featurizing
from bert_mgpu.ner import formats
from bert_mgpu.ner import scoring as ner_scoring
from bert_mgpu.ner import span_windows
from bert_mgpu.ner import tag_labels
from bert_mgpu.ner import writers
from bert_mgpu.serving import kinds
from bert_mgpu.serving import model_inputs
from bert_mgpu.serving import onnx_predictor

# TensorFlow's logger (tf.get_logger() is this logger on TF 1.15 and 2.x).
_LOGGER = logging.getLogger("tensorflow")

NER_KIND = "ner"
# The runners' output: the tag id of each piece, int32 [windows, seq] (0 on [CLS], [SEP],
# padding and "##" pieces).
TAG_IDS = "tag_ids"


def ner_settings(do_lower_case, max_seq_length, doc_stride, use_crf):
  """The model_settings.json content of an NER model."""
  return collections.OrderedDict([
      ("model", NER_KIND), ("do_lower_case", bool(do_lower_case)),
      ("max_seq_length", int(max_seq_length)), ("doc_stride", int(doc_stride)),
      ("use_crf", bool(use_crf))])

# The window fields fed to a tagger, by feature name.
_WINDOW_FIELDS = (("input_ids", "input_ids"), ("input_mask", "input_mask"),
                  ("segment_ids", "segment_ids"), ("tag_mask", "label_mask"))

# Pieces that never start a token: the window's own markers and padding.
_NOT_TOKEN_PIECES = ("[CLS]", "[SEP]", "[PAD]")


def first_piece_table(vocab, vocab_size):
  """int32 [vocab_size]: 0 for the ids of [CLS], [SEP], [PAD] and "##" pieces, else 1.

  The export computes its tag mask with it (tag_mask = table[input_ids] * input_mask):
  what featurizing marks when each token is one character or one run of word pieces.
  """
  table = np.ones([vocab_size], np.int32)
  for piece, index in vocab.items():
    if index < vocab_size and (piece.startswith("##") or piece in _NOT_TOKEN_PIECES):
      table[index] = 0
  return table


def sentences_of_texts(texts):
  """NerSentences of raw text lines: one token per character (CLUENER's rule)."""
  return [formats.NerSentence(list(text), None, text, list(range(len(text))))
          for text in texts]


NerFeatures = collections.namedtuple("NerFeatures", ["features", "sentences", "featurized"])
NerFeatures.__doc__ = """The windows of some texts and what turns their predictions back.

Fields:
  features: model_inputs.Features of every window, in text order (what the tagger runs).
  sentences: list of NerSentence, one per text.
  featurized: per text, (SentencePieces, list of NerWindow) (featurizing.featurize_sentences).
"""


class WindowPredictor(kinds.TextPredictor):
  """What both NER kinds' predictors share: raw texts windowed (each line one sentence,
  each character one token), each sentence's spans from its windows' outputs into
  predict_entities.jsonl records. A subclass says how a sentence's windows' outputs become
  its spans (_sentence_spans), from its runner's output _OUTPUT."""

  _OUTPUT = None

  def __init__(self, model, runner):
    super(WindowPredictor, self).__init__(model, runner)
    self.doc_stride = model.files.settings["doc_stride"]

  def featurize(self, texts_a, texts_b=None):
    """NerFeatures of raw texts (each line one sentence, each character one token).

    Raises:
      model_inputs.NoTokensError: a text without tokens (only spaces, control or invisible
        characters), as the classifier refuses it.
    """
    del texts_b  # the kind takes no pairs
    sentences = sentences_of_texts(texts_a)
    featurized = featurizing.featurize_sentences(sentences, self.model.tokenizer, self.labels,
                                                 self.max_seq_length, self.doc_stride)
    for row, (aligned, _) in enumerate(featurized):
      if not aligned.pieces:
        raise model_inputs.NoTokensError(row, "a")
    windows = [window for _, windows in featurized for window in windows]
    arrays = {name: np.array([getattr(w, field) for w in windows],
                             np.int32).reshape([len(windows), self.max_seq_length])
              for name, field in _WINDOW_FIELDS}
    return NerFeatures(model_inputs.Features(arrays, np.zeros([len(windows)], np.bool_)),
                       sentences, featurized)

  def decode(self, featurized, outputs):
    """predict_entities.jsonl records of the texts, from their windows' outputs."""
    records, start = [], 0
    rows = outputs[self._OUTPUT]  # [windows, ...]
    for sentence, (aligned, windows) in zip(featurized.sentences, featurized.featurized):
      spans = self._sentence_spans(aligned, windows, rows[start:start + len(windows)])
      records.append(writers.entity_records(sentence, spans))
      start += len(windows)
    return records

  def _sentence_spans(self, aligned, windows, rows):
    """A sentence's (type, start, end) token spans from its windows' rows of outputs."""
    raise NotImplementedError

  def file_text(self, records):
    """predict_entities.jsonl lines of entity records."""
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)

  def log_file_run(self, featurized, records, seconds, featurize_seconds):
    del featurize_seconds
    _LOGGER.info("Found %d entities in %d text(s) (%d window(s)) in %.2f s (%.1f texts/s).",
                 sum(len(r["entities"]) for r in records), len(records),
                 len(featurized.features.truncated), seconds,
                 len(records) / max(seconds, 1e-9))

  def reply(self, records, truncated, inputs):
    del truncated, inputs  # windows are never cut
    return {"entities": [record["entities"] for record in records]}


class NerPredictor(WindowPredictor):
  """An NER model around a tagger of windows: predict(model_inputs.Features) ->
  {TAG_IDS: int32 [windows, seq]}."""

  _OUTPUT = TAG_IDS

  def __init__(self, model, tagger):
    super(NerPredictor, self).__init__(model, tagger)
    self.scheme = ner_scoring.detect_scheme(self.labels)

  def _sentence_spans(self, aligned, windows, rows):
    tags = featurizing.tags_from_windows(aligned, windows, rows, self.labels,
                                         self.scheme)
    return ner_scoring.entities(tags)


# ---------------------------------------------------------------------------
# ONNX Runtime: the tagger, and the CRF decoded in NumPy
# ---------------------------------------------------------------------------

class OnnxTagger(onnx_predictor.OnnxRun):
  """An NER model's windows on ONNX Runtime: tag ids, decoded in NumPy with a CRF."""

  def run_batch(self, arrays):
    """{TAG_IDS: int32 [batch, seq]} of one batch of windows (cut to its longest)."""
    transitions = self.model.assets.get("crf_transitions")
    if transitions is None:
      return super(OnnxTagger, self).run_batch(arrays)
    probabilities = self._session.run(
        ["probabilities"], {name: arrays[name] for name in MODEL_INPUTS})[0]
    return {TAG_IDS: crf_tag_ids(probabilities, arrays["tag_mask"], transitions)}


def crf_tag_ids(probabilities, tag_mask, transitions):
  """The CRF's tags of a batch, as the TensorFlow graph decodes them: Viterbi over each
  window's first pieces (tag_mask), 0 elsewhere.

  Args:
    probabilities: float [batch, seq, tags] of the ONNX model (their logarithms give the
      Viterbi path of the logits: a constant per position changes no path).
    tag_mask: int [batch, seq], 1 on the first piece of each token.
    transitions: float [tags, tags] (crf_numpy).

  Returns:
    int32 [batch, seq].
  """
  tags = np.zeros(tag_mask.shape, np.int32)
  with np.errstate(divide="ignore"):  # a probability of 0 is a score of -inf
    scores = np.log(probabilities)
  for row in range(len(tags)):
    positions = np.flatnonzero(tag_mask[row])
    tags[row, positions] = crf_numpy.viterbi_decode(scores[row, positions], transitions)
  return tags


class NerKind(kinds.ServableKind):
  """A token classifier finding entities (run_ner_mgpu.py), softmax or CRF head."""

  name = NER_KIND
  description = "an NER model"
  script = "run_ner_mgpu.py"
  settings_fields = ("doc_stride", "use_crf")

  def read_labels(self, path):
    return tag_labels.read_label_file(path)

  def outputs(self, files):
    return collections.OrderedDict([
        (TAG_IDS, model_inputs.OutputSpec((model_inputs.SEQUENCE,), np.int32))])

  def onnx_outputs(self, files):
    outputs = {"probabilities": ("tensor(float)", [None, None, len(files.labels)])}
    if not files.settings["use_crf"]:
      outputs[TAG_IDS] = ("tensor(int32)", [None, None])
    return outputs

  def read_onnx_assets(self, assets_dir, files):
    """A CRF's transitions, which ONNX Runtime's Viterbi decoding needs."""
    if not files.settings["use_crf"]:
      return {}
    path = os.path.join(assets_dir, crf_numpy.CRF_TRANSITIONS_FILE)
    if not os.path.isfile(path):
      raise UsageError("%s has no %s, which decodes the CRF outside the graph: export the "
                       "model again with run_ner_mgpu.py --export_format=onnx (or both)." %
                       (assets_dir, crf_numpy.CRF_TRANSITIONS_FILE))
    return {"crf_transitions": crf_numpy.read_transitions(path, files.labels)}

  def onnx_runner(self, model, session, batch_size, length_multiple):
    return OnnxTagger(model, session, batch_size, length_multiple)

  def text_predictor(self, model, runner):
    return NerPredictor(model, runner)

  def graph(self):
    from bert_mgpu.ner import serving_graph  # pylint: disable=import-outside-toplevel
    return serving_graph.NerGraph()


kinds.register(NerKind())


# ---------------------------------------------------------------------------
# The span heads (--ner_head=global_pointer|efficient_global_pointer): kind "ner_spans"
# ---------------------------------------------------------------------------

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


class SpanPredictor(WindowPredictor):
  """A span head's model (entities may nest) around a runner of windows:
  predict(model_inputs.Features) -> {SPANS_OUTPUT: float32 [windows, max_seq_length, 4]}."""

  _OUTPUT = SPANS_OUTPUT

  def _sentence_spans(self, aligned, windows, rows):
    return span_windows.spans_from_windows(aligned, windows, window_outputs(rows),
                                           self.labels)


class SpanKind(kinds.ServableKind):
  """An NER model with a span head (run_ner_mgpu.py --ner_head=global_pointer or
  efficient_global_pointer)."""

  name = SPAN_KIND
  description = "an NER span model"
  script = "run_ner_mgpu.py"
  settings_fields = ("doc_stride", "ner_head")

  def read_labels(self, path):
    return entity_types.read_type_file(path)

  def outputs(self, files):
    # The best pairs of a window, max_seq_length of them whatever its length.
    return collections.OrderedDict([(SPANS_OUTPUT, model_inputs.OutputSpec(
        (files.settings["max_seq_length"], 4)))])

  def onnx_outputs(self, files):
    return {SPANS_OUTPUT: ("tensor(float)", [None, files.settings["max_seq_length"], 4])}

  def text_predictor(self, model, runner):
    return SpanPredictor(model, runner)

  def graph(self):
    from bert_mgpu.ner import serving_graph  # pylint: disable=import-outside-toplevel
    return serving_graph.SpanGraph()


kinds.register(SpanKind())
