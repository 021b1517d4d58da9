# coding=utf-8
"""The CRF outside TensorFlow: its transitions as a JSON file, and Viterbi decoding in NumPy.

crf_transitions.json is written beside a model where the graph has no CRF: the ONNX export
(assets.extra/, serving/onnx_export.py) and transformers' format (convert_checkpoint.py).
transitions[i][j] scores label i followed by label j (crf.py's layout), over the first word
piece of each word, with no start or end scores. NumPy only: the ONNX predictor runs without
TensorFlow.
"""

import collections
import json

import numpy as np

from bert_mgpu.errors import UsageError

CRF_TRANSITIONS_FILE = "crf_transitions.json"


def transitions_json(transitions, labels):
  """crf_transitions.json's text: {"labels", "transitions", "layout"}."""
  return json.dumps(collections.OrderedDict([
      ("labels", list(labels)),
      ("transitions", np.asarray(transitions).astype(float).tolist()),
      ("layout", "transitions[i][j] scores label i followed by label j, over the first "
                 "word piece of each word; no start or end scores")]),
                    indent=2, ensure_ascii=False) + "\n"


def read_transitions(path, labels):
  """float32 [labels, labels] of a crf_transitions.json written for `labels`.

  Raises:
    UsageError: unreadable, or written for other labels.
  """
  try:
    with open(path, "r", encoding="utf-8") as f:
      content = json.load(f)
    transitions = np.asarray(content["transitions"], dtype=np.float32)
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise UsageError("%s: cannot read the CRF's transitions (%s)." % (path, e))
  if content.get("labels") != list(labels) or transitions.shape != (len(labels), len(labels)):
    raise UsageError("%s does not match the model's %d labels." % (path, len(labels)))
  return transitions


def viterbi_decode(scores, transitions):
  """The best label path of one sequence (crf.py's crf_decode, in NumPy).

  Args:
    scores: float [length, labels], the per-position scores (logits; log-probabilities give
      the same path, since a constant per position does not change it).
    transitions: float [labels, labels].

  Returns:
    int32 [length], the labels of the highest-scoring path (ties: the lowest label id).
  """
  scores = np.asarray(scores, np.float32)
  length = scores.shape[0]
  if length == 0:
    return np.zeros([0], np.int32)
  transitions = np.asarray(transitions, np.float32)
  best = scores[0]  # [labels]: the best path score ending in each label
  backpointers = np.zeros([length, scores.shape[1]], np.int32)
  for t in range(1, length):
    candidates = best[:, None] + transitions  # [from, to]
    backpointers[t] = np.argmax(candidates, axis=0)
    best = candidates[backpointers[t], np.arange(scores.shape[1])] + scores[t]
  path = np.zeros([length], np.int32)
  path[-1] = np.argmax(best)
  for t in range(length - 1, 0, -1):
    path[t - 1] = backpointers[t, path[t]]
  return path
