# coding=utf-8
"""Raw text lines to entities, around any model that tags windows: the TensorFlow predictor
(ner/serving.py) or ONNX Runtime (serving/onnx_predictor.py).

Every character of a line is a token, as in CLUENER: a line is featurized as a CLUENER
sentence (windows of max_seq_length, doc_stride apart, from the model's settings) and its
entities become predict_entities.jsonl records {"text", "entities": [{"type", "start", "end",
"text"}]}, character offsets into the line, `end` exclusive.

No TensorFlow import.
"""

import collections

import numpy as np

from bert_mgpu.ner import featurizing
from bert_mgpu.ner import formats
from bert_mgpu.ner import scoring as ner_scoring
from bert_mgpu.ner import writers
from bert_mgpu.serving import model_inputs

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


class NerPredictor(object):
  """An NER model: raw texts in, predict_entities.jsonl records out.

  featurize() and predict() are split as for the classifier's predictors, so that
  MicroBatcher runs the windows of concurrent requests together; entities() reads the
  records off.
  """

  def __init__(self, model, tagger):
    """Args:
      model: the loaded model (.files: serving.model_files.ModelFiles, .tokenizer,
        .description).
      tagger: runs windows: predict(model_inputs.Features) -> int32 [windows,
        max_seq_length] tag ids; close().
    """
    settings = model.files.settings
    self.model = model
    self.labels = model.files.labels
    self.max_seq_length = settings["max_seq_length"]
    self.doc_stride = settings["doc_stride"]
    self.scheme = ner_scoring.detect_scheme(self.labels)
    self._tagger = tagger

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
    return self._tagger.predict(features)

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
    self._tagger.close()
