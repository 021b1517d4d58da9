# coding=utf-8
"""The span heads (bert_mgpu/ner/global_pointer.py) against a NumPy reference written from
the paper's definitions: rotary positions as explicit 2x2 rotations, the scores as dot
products per (type, start, end), the loss as log(1 + sum e^s) + log(1 + sum e^-s)."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu.ner import global_pointer

HIDDEN, HEAD, TYPES, SEQ = 6, 4, 3, 7


def rotation_reference(vector, position):
  """Turns each pair (2i, 2i + 1) of `vector` [head] by position * 10000^(-2i / head)."""
  out = np.array(vector, np.float64)
  for i in range(len(vector) // 2):
    angle = position * 10000.0 ** (-2.0 * i / len(vector))
    c, s = np.cos(angle), np.sin(angle)
    x, y = vector[2 * i], vector[2 * i + 1]
    out[2 * i], out[2 * i + 1] = c * x - s * y, s * x + c * y
  return out


def scores_reference(sequence, input_mask, weights, efficient):
  """[batch, types, seq, seq] float64, None where the pair is masked."""
  batch, seq, _ = sequence.shape
  result = np.full([batch, TYPES, seq, seq], None, dtype=object)
  projected = sequence @ weights["span_weights"] + weights["span_bias"]
  for b in range(batch):
    length = int(input_mask[b].sum())
    for t in range(TYPES):
      for m in range(1, length - 1):
        for n in range(m, length - 1):
          if efficient:
            q = rotation_reference(projected[b, m, 0::2], m)
            k = rotation_reference(projected[b, n, 1::2], n)
            bias_m = projected[b, m] @ weights["type_weights"] + weights["type_bias"]
            bias_n = projected[b, n] @ weights["type_weights"] + weights["type_bias"]
            value = q @ k / np.sqrt(HEAD) + (bias_n[2 * t] + bias_m[2 * t + 1]) / 2
          else:
            block = projected[b, :, t * 2 * HEAD:(t + 1) * 2 * HEAD]
            q = rotation_reference(block[m, :HEAD], m)
            k = rotation_reference(block[n, HEAD:], n)
            value = q @ k / np.sqrt(HEAD)
          result[b, t, m, n] = value
  return result


def random_weights(rng, efficient):
  width = 2 * HEAD if efficient else TYPES * 2 * HEAD
  weights = {"span_weights": rng.randn(HIDDEN, width), "span_bias": rng.randn(width)}
  if efficient:
    weights.update(type_weights=rng.randn(2 * HEAD, 2 * TYPES),
                   type_bias=rng.randn(2 * TYPES))
  return {name: value.astype(np.float32) * 0.5 for name, value in weights.items()}


def run_scores(sequence, input_mask, weights, efficient):
  with tf.Graph().as_default():
    with tf.variable_scope("head"):
      scores = global_pointer.span_scores(tf.constant(sequence), tf.constant(input_mask),
                                          TYPES, efficient=efficient, head_size=HEAD)
    with tf.Session() as sess:
      for var in tf.global_variables():
        var.load(weights[var.op.name.split("/")[-1]], sess)
      return sess.run(scores)


@pytest.mark.parametrize("efficient", [False, True])
def test_span_scores_equal_the_reference_and_mask_what_cannot_be_a_span(efficient):
  rng = np.random.RandomState(3)
  sequence = rng.randn(2, SEQ, HIDDEN).astype(np.float32)
  input_mask = np.array([[1] * SEQ, [1] * 4 + [0] * 3], np.int32)
  weights = random_weights(rng, efficient)
  got = run_scores(sequence, input_mask, weights, efficient)
  expected = scores_reference(sequence.astype(np.float64), input_mask,
                              {k: v.astype(np.float64) for k, v in weights.items()}, efficient)
  assert got.shape == (2, TYPES, SEQ, SEQ)
  checked = 0
  for index in np.ndindex(*got.shape):
    if expected[index] is None:  # [CLS], [SEP], padding, or end before start
      assert got[index] == np.float32(global_pointer.MASKED_SCORE), index
    else:
      assert got[index] == pytest.approx(expected[index], rel=1e-4, abs=1e-4), index
      checked += 1
  # Row 0: 5 pieces give 15 ordered pairs; row 1: 2 pieces give 3; per type.
  assert checked == TYPES * (15 + 3)


TF1 = tf.__version__.startswith("1.")


@pytest.mark.parametrize("dtype", [
    "float16",
    pytest.param("bfloat16", marks=pytest.mark.skipif(TF1, reason="bf16 needs TF 2.x"))])
@pytest.mark.parametrize("efficient", [False, True])
def test_half_precision_scores_are_float32_and_masked_exactly(dtype, efficient):
  """Under --precision=fp16/bf16 the sequence output comes in half precision; the scores
  leave in float32 with the masked pairs at exactly MASKED_SCORE (-1e12 is -inf in
  float16 and rounds in bfloat16, so masking in the compute dtype fails this)."""
  rng = np.random.RandomState(4)
  sequence = rng.randn(2, SEQ, HIDDEN).astype(np.float32)
  input_mask = np.array([[1] * SEQ, [1] * 4 + [0] * 3], np.int32)
  weights = random_weights(rng, efficient)
  with tf.Graph().as_default():
    with tf.variable_scope("head"):
      scores = global_pointer.span_scores(
          tf.cast(tf.constant(sequence), getattr(tf, dtype)), tf.constant(input_mask), TYPES,
          efficient=efficient, head_size=HEAD)
    assert scores.dtype == tf.float32
    with tf.Session() as sess:
      for var in tf.global_variables():
        var.load(weights[var.op.name.split("/")[-1]], sess)
      got = sess.run(scores)
  expected = run_scores(sequence, input_mask, weights, efficient)  # float32 throughout
  masked = expected == np.float32(global_pointer.MASKED_SCORE)
  assert masked.sum() == 2 * TYPES * SEQ * SEQ - TYPES * (15 + 3)
  np.testing.assert_array_equal(got[masked], expected[masked])
  # The half-precision projection rounds the scores (bfloat16 keeps 8 bits of mantissa).
  np.testing.assert_allclose(got[~masked], expected[~masked], rtol=0.05, atol=0.15)


def test_rotary_positions_make_the_product_depend_on_the_distance_only():
  rng = np.random.RandomState(0)
  q, k = rng.randn(HEAD).astype(np.float32), rng.randn(HEAD).astype(np.float32)
  with tf.Graph().as_default(), tf.Session() as sess:
    angles = global_pointer.rotary_angles(12, HEAD)
    # The same two vectors at every position: [1, seq, head].
    turned_q = global_pointer.rotate(tf.constant(np.tile(q, [1, 12, 1])), angles)
    turned_k = global_pointer.rotate(tf.constant(np.tile(k, [1, 12, 1])), angles)
    got_q, got_k = sess.run([turned_q, turned_k])
  assert got_q[0, 5] == pytest.approx(rotation_reference(q, 5), abs=1e-5)
  products = got_q[0] @ got_k[0].T  # [m, n]
  assert products[2, 5] == pytest.approx(products[6, 9], abs=1e-4)
  assert products[0, 3] == pytest.approx(products[7, 10], abs=1e-4)
  assert abs(products[2, 5] - products[2, 6]) > 1e-3  # it does depend on the distance


def loss_reference(scores, labels):
  """log(1 + sum over negatives of e^s) + log(1 + sum over positives of e^-s), per row."""
  out = []
  for row_scores, row_labels in zip(scores, labels):
    negative = sum(np.exp(s) for s, y in zip(row_scores, row_labels) if not y)
    positive = sum(np.exp(-s) for s, y in zip(row_scores, row_labels) if y)
    out.append(np.log1p(negative) + np.log1p(positive))
  return np.array(out)


def test_multilabel_crossentropy_equals_the_reference_and_ignores_masked_pairs():
  rng = np.random.RandomState(1)
  scores = rng.randn(4, 9).astype(np.float32) * 3
  labels = (rng.rand(4, 9) > 0.7).astype(np.float32)
  labels[3] = 0  # a row without spans
  labels[:, 7:] = 0
  masked = scores.copy()
  masked[:, 7:] = global_pointer.MASKED_SCORE  # pairs that cannot be spans add nothing
  with tf.Graph().as_default(), tf.Session() as sess:
    got = sess.run(global_pointer.multilabel_crossentropy(tf.constant(masked),
                                                          tf.constant(labels)))
  expected = loss_reference(scores[:, :7], labels[:, :7])
  np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_span_labels_scatter_the_triples_once_each_and_skip_padding():
  triples = np.array([[[0, 1, 2], [2, 1, 1], [0, 1, 2], [-1, -1, -1]],
                      [[1, 3, 4], [-1, -1, -1], [-1, -1, -1], [-1, -1, -1]]], np.int64)
  with tf.Graph().as_default(), tf.Session() as sess:
    labels = sess.run(global_pointer.span_labels(tf.constant(triples), TYPES, 6))
  expected = np.zeros([2, TYPES, 6, 6], np.float32)
  expected[0, 0, 1, 2] = expected[0, 2, 1, 1] = expected[1, 1, 3, 4] = 1
  np.testing.assert_array_equal(labels, expected)


def test_top_spans_decode_type_start_and_end_best_first():
  scores = np.full([1, 2, 4, 4], global_pointer.MASKED_SCORE, np.float32)
  scores[0, 1, 2, 3] = 5.0
  scores[0, 0, 1, 1] = 2.0
  scores[0, 0, 1, 3] = -1.0
  with tf.Graph().as_default(), tf.Session() as sess:
    top = sess.run(global_pointer.top_spans(tf.constant(scores), 40))  # more than 32 pairs
  assert top["span_types"].shape == (1, 40)
  got = list(zip(top["span_types"][0, :3], top["span_starts"][0, :3],
                 top["span_ends"][0, :3], top["span_scores"][0, :3]))
  assert got == [(1, 2, 3, 5.0), (0, 1, 1, 2.0), (0, 1, 3, -1.0)]
  assert np.all(top["span_scores"][0, 3:] == np.float32(global_pointer.MASKED_SCORE))
