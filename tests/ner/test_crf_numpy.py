# coding=utf-8
"""Tests of crf_numpy.py, the CRF outside TensorFlow (the ONNX export's predictor decodes
with it): Viterbi against brute force over every path of tiny cases and against crf.py's
graph decoding on padded batches; crf_transitions.json round trips float32 exactly, and a
file for other labels or an unreadable one is refused in one line."""

import itertools
import json
import os

import numpy as np
import tensorflow.compat.v1 as tf

import usage_errors
from bert_mgpu.ner import crf
from bert_mgpu.ner import crf_numpy

LABELS = ["O", "B-PER", "I-PER"]


def brute_force_path(scores, transitions):
  """The best path of one sequence by scoring all K**length paths (float64)."""
  length, num_labels = scores.shape
  if length == 0:
    return []
  best_path, best_score = None, -np.inf
  for path in itertools.product(range(num_labels), repeat=length):
    score = sum(float(scores[t, label]) for t, label in enumerate(path))
    score += sum(float(transitions[a, b]) for a, b in zip(path[:-1], path[1:]))
    if score > best_score:
      best_path, best_score = list(path), score
  return best_path


def test_viterbi_decode_matches_brute_force_on_every_length():
  rng = np.random.RandomState(0)
  for _ in range(5):
    transitions = rng.normal(0.0, 2.0, [3, 3]).astype(np.float32)
    for length in range(6):
      scores = rng.normal(0.0, 2.0, [length, 3]).astype(np.float32)
      path = crf_numpy.viterbi_decode(scores, transitions)
      assert path.dtype == np.int32 and path.shape == (length,)
      assert list(path) == brute_force_path(scores, transitions), (length, scores)


def test_viterbi_decode_follows_the_transitions_over_the_scores():
  # Per position label 0 wins by 1, but 0 -> 0 costs 10: the best path alternates.
  scores = np.array([[1.0, 0.0]] * 3, np.float32)
  transitions = np.array([[-10.0, 0.0], [0.0, 0.0]], np.float32)
  assert list(crf_numpy.viterbi_decode(scores, transitions)) == [0, 1, 0]


def graph_decode(logits, lengths, transitions):
  """crf.crf_decode's tags [batch, T] in a TF graph."""
  with tf.Graph().as_default():
    tags, _ = crf.crf_decode(tf.constant(logits), tf.constant(lengths),
                             tf.constant(transitions))
    with tf.Session() as sess:
      return sess.run(tags)


def test_viterbi_decode_matches_the_graph_decoding_of_padded_batches():
  rng = np.random.RandomState(1)
  for batch, max_length, num_labels in ((6, 7, 5), (4, 12, 9)):
    logits = rng.normal(0.0, 2.0, [batch, max_length, num_labels]).astype(np.float32)
    transitions = rng.normal(0.0, 2.0, [num_labels, num_labels]).astype(np.float32)
    lengths = np.concatenate([[0, 1, max_length], rng.randint(
        0, max_length + 1, batch - 3)]).astype(np.int32)
    expected = graph_decode(logits, lengths, transitions)
    for row, length in enumerate(lengths):
      # The padding's scores are junk to the NumPy decoder too: it only sees the row's length.
      path = crf_numpy.viterbi_decode(logits[row, :length], transitions)
      assert list(path) == list(expected[row, :length]), (row, length)


def transitions_file(tmp_path, text, name="crf_transitions.json"):
  path = os.path.join(str(tmp_path), name)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
  return path


def test_transitions_round_trip_exactly(tmp_path):
  rng = np.random.RandomState(2)
  transitions = rng.normal(0.0, 3.0, [3, 3]).astype(np.float32)
  # Values whose shortest float64 repr is not the float32's: the bits must survive anyway.
  transitions[0, :] = [np.float32(0.1), np.float32(1e-40), np.float32(-0.0)]
  transitions[1, 1] = np.finfo(np.float32).max
  text = crf_numpy.transitions_json(transitions, LABELS)
  assert json.loads(text)["labels"] == LABELS
  read = crf_numpy.read_transitions(transitions_file(tmp_path, text), LABELS)
  assert read.dtype == np.float32 and read.shape == (3, 3)
  np.testing.assert_array_equal(read.view(np.uint32), transitions.view(np.uint32))


def test_transitions_of_chinese_labels_round_trip(tmp_path):
  labels = ["O", "B-地名", "I-地名"]
  transitions = np.arange(9, dtype=np.float32).reshape(3, 3) / 7
  path = transitions_file(tmp_path, crf_numpy.transitions_json(transitions, labels))
  np.testing.assert_array_equal(crf_numpy.read_transitions(path, labels), transitions)


def test_transitions_written_for_other_labels_are_refused(tmp_path):
  transitions = np.zeros([3, 3], np.float32)
  path = transitions_file(tmp_path, crf_numpy.transitions_json(transitions, LABELS))
  for labels in (["O", "I-PER", "B-PER"], LABELS + ["B-LOC"], LABELS[:2]):
    usage_errors.assert_usage_error(lambda: crf_numpy.read_transitions(path, labels), path,
                                    "does not match the model's %d labels" % len(labels))
  # The right labels but a matrix of another shape.
  content = json.loads(crf_numpy.transitions_json(transitions, LABELS))
  content["transitions"] = [[0.0, 1.0], [2.0, 3.0]]
  wrong_shape = transitions_file(tmp_path, json.dumps(content), "wrong_shape.json")
  usage_errors.assert_usage_error(lambda: crf_numpy.read_transitions(wrong_shape, LABELS),
                                  wrong_shape, "does not match")


def test_an_unreadable_transitions_file_is_refused(tmp_path):
  bad = {"missing.json": None, "not_json.json": "{\"labels\": [\n",
         "no_transitions.json": json.dumps({"labels": LABELS}),
         "ragged.json": json.dumps({"labels": LABELS, "transitions": [[1.0, 2.0], [3.0]]}),
         "words.json": json.dumps({"labels": LABELS, "transitions": [["a"] * 3] * 3}),
         "a_list.json": json.dumps([[0.0] * 3] * 3)}
  for name, text in bad.items():
    path = os.path.join(str(tmp_path), name)
    if text is not None:
      transitions_file(tmp_path, text, name)
    usage_errors.assert_usage_error(lambda: crf_numpy.read_transitions(path, LABELS), path,
                                    "cannot read the CRF's transitions")
