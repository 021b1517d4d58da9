# coding=utf-8
"""Tests of the embedding losses: bert_mgpu/embedding/losses.py (TensorFlow, float32) and
their NumPy twins in bert_mgpu/embedding/metrics.py, against a reference written here as
plain double loops in float64 straight from the definitions; and metrics.spearman /
pearson / average_ranks against scipy.stats on data with ties.

  CoSENT:   log(1 + sum over (i, j) with score_i < score_j of exp(scale (cos_i - cos_j)))
  in_batch: mean over anchors i of -log softmax_i(cos(anchor_i, c) / tau) over the
            candidates c (every positive, then every hard negative, of the batch); a
            candidate other than i's own positive whose text is that positive's is left out.
"""

import math

import numpy as np
import pytest
import scipy.stats
import tensorflow.compat.v1 as tf

from bert_mgpu.embedding import losses
from bert_mgpu.embedding import metrics
from bert_mgpu.embedding import records

# ---------------------------------------------------------------------------
# The reference (float64, loops)
# ---------------------------------------------------------------------------


def ref_cos(u, v):
  u, v = np.asarray(u, np.float64), np.asarray(v, np.float64)
  return float(np.dot(u, v) / (math.sqrt(np.dot(u, u)) * math.sqrt(np.dot(v, v))))


def ref_logsumexp(values):
  top = max(values)
  return top + math.log(sum(math.exp(v - top) for v in values))


def ref_cosent(cosines, scores, scale):
  terms = [0.0]
  for i in range(len(cosines)):
    for j in range(len(cosines)):
      if scores[i] < scores[j]:
        terms.append(scale * (cosines[i] - cosines[j]))
  return ref_logsumexp(terms)


def ref_candidates(embeddings, text_ids):
  """(vector, text id) of every positive, then every hard negative, record by record."""
  n, texts = embeddings.shape[:2]
  candidates = [(embeddings[j, 1], tuple(text_ids[j, 1])) for j in range(n)]
  for j in range(n):
    for k in range(2, texts):
      candidates.append((embeddings[j, k], tuple(text_ids[j, k])))
  return candidates


def ref_in_batch(embeddings, text_ids, temperature, mask_duplicates=True):
  candidates = ref_candidates(embeddings, text_ids)
  total = 0.0
  for i in range(len(embeddings)):
    own = tuple(text_ids[i, 1])
    logits = []
    for c, (vector, candidate_id) in enumerate(candidates):
      if mask_duplicates and c != i and candidate_id == own:
        continue
      logits.append(ref_cos(embeddings[i, 0], vector) / temperature)
    own_logit = ref_cos(embeddings[i, 0], embeddings[i, 1]) / temperature
    total += ref_logsumexp(logits) - own_logit
  return total / len(embeddings)


def ref_top1(embeddings, text_ids):
  candidates = ref_candidates(embeddings, text_ids)
  hits = 0
  for i in range(len(embeddings)):
    own = tuple(text_ids[i, 1])
    own_cos = ref_cos(embeddings[i, 0], embeddings[i, 1])
    rivals = [ref_cos(embeddings[i, 0], v) for c, (v, cid) in enumerate(candidates)
              if c != i and cid != own]
    hits += all(own_cos > r for r in rivals)
  return hits / float(len(embeddings))


def count_masked(text_ids):
  """Candidates the reference leaves out (other copies of an anchor's positive)."""
  ids = [cid for _, cid in ref_candidates(np.zeros(text_ids.shape[:2] + (1,)), text_ids)]
  return sum(1 for i in range(len(text_ids)) for c, cid in enumerate(ids)
             if c != i and cid == tuple(text_ids[i, 1]))


# ---------------------------------------------------------------------------
# Random inputs: scores with ties, texts from a small pool (duplicates)
# ---------------------------------------------------------------------------

POOL = [u"今天天气很好", u"天气不错", u"我喜欢猫", u"猫很可爱", u"吃饭了吗", u"下雨了"]


def random_batch(seed, n=7, texts=2, dim=6, pool=POOL):
  """(embeddings float32 [n, texts, dim], text_ids float32 [n, texts, 2], scores [n] with
  ties, the texts): texts drawn from `pool`, so some repeat."""
  rng = np.random.RandomState(seed)
  embeddings = rng.normal(size=[n, texts, dim]).astype(np.float32)
  chosen = [[pool[rng.randint(len(pool))] for _ in range(texts)] for _ in range(n)]
  text_ids = np.array([[records.text_id([ord(c) for c in t]) for t in row] for row in chosen], np.float32)
  scores = rng.randint(0, 4, size=n).astype(np.float32)  # 4 values over 7 rows: ties
  return embeddings, text_ids, scores, chosen


def run_tf(build, *arrays):
  """Evaluates build(*placeholders) in a fresh graph, fed `arrays` (float32)."""
  with tf.Graph().as_default():
    placeholders = [tf.placeholder(tf.float32, a.shape) for a in arrays]
    result = build(*placeholders)
    with tf.Session() as sess:
      return sess.run(result, dict(zip(placeholders, arrays)))


# ---------------------------------------------------------------------------
# CoSENT
# ---------------------------------------------------------------------------

def test_reference_cosent_counts_only_strictly_ordered_pairs():
  # Equal scores give no term: the loss is log(1 + 0).
  assert ref_cosent([0.9, -0.3, 0.1], [2.0, 2.0, 2.0], 20.0) == 0.0
  # Scores (1, 2): one term, exp(scale * (cos_0 - cos_1)).
  assert ref_cosent([0.5, 0.2], [1.0, 2.0], 2.0) == pytest.approx(
      math.log(1 + math.exp(2.0 * 0.3)), rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tf_cosent_matches_the_reference_with_tied_scores(seed):
  embeddings, _, scores, _ = random_batch(seed)
  assert len(set(scores)) < len(scores)  # ties
  cosines = [ref_cos(e[0], e[1]) for e in embeddings]
  for scale in (1.0, 20.0):
    expected = ref_cosent(cosines, scores, scale)
    got = run_tf(lambda t, s: losses.cosent_loss(losses.pair_cosines(t), s, scale),
                 embeddings, scores)
    assert got == pytest.approx(expected, rel=1e-5, abs=1e-5)
    # Counting tied pairs (<=) would give another value: the test tells them apart.
    with_ties = ref_logsumexp([0.0] + [scale * (cosines[i] - cosines[j])
                                       for i in range(len(scores)) for j in range(len(scores))
                                       if i != j and scores[i] <= scores[j]])
    assert abs(with_ties - expected) > 1e-3
  # The NumPy twin, and its pair cosines.
  np.testing.assert_allclose(metrics.pair_cosines(embeddings), cosines, rtol=0, atol=1e-12)
  assert metrics.cosent_loss(cosines, scores, 20.0) == pytest.approx(
      ref_cosent(cosines, scores, 20.0), rel=1e-12)


def test_tf_cosent_pair_cosines_and_equal_scores():
  embeddings, _, _, _ = random_batch(5)
  got = run_tf(losses.pair_cosines, embeddings)
  np.testing.assert_allclose(got, [ref_cos(e[0], e[1]) for e in embeddings], atol=1e-6)
  same = np.full([len(embeddings)], 3.0, np.float32)
  assert run_tf(lambda t, s: losses.cosent_loss(losses.pair_cosines(t), s, 20.0),
                embeddings, same) == 0.0


# ---------------------------------------------------------------------------
# In-batch negatives
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("seed, texts", [(0, 2), (1, 2), (2, 3), (3, 4)])
def test_tf_in_batch_matches_the_reference_with_duplicate_texts(seed, texts):
  embeddings, text_ids, _, _ = random_batch(seed, texts=texts, pool=POOL[:3])
  assert count_masked(text_ids) > 0  # duplicates of a positive among the candidates
  for temperature in (0.05, 1.0):
    expected = ref_in_batch(embeddings, text_ids, temperature)
    got = run_tf(lambda e, ids: losses.in_batch_loss(e, ids, temperature),
                 embeddings, text_ids)
    assert got == pytest.approx(expected, rel=1e-5, abs=1e-5)
    # Not masking the copies would change the loss: the inputs exercise the mask.
    assert abs(ref_in_batch(embeddings, text_ids, temperature, False) - expected) > 1e-3
    assert metrics.in_batch_loss(embeddings, text_ids, temperature) == pytest.approx(
        expected, rel=1e-9)


def test_in_batch_masks_copies_among_positives_and_hard_negatives_but_not_its_own():
  # Record 0's positive is "p"; record 1's positive and record 2's hard negative are "p"
  # too, and record 1's own hard negative is its positive's text.
  chosen = [["a0", "p", "n0"], ["a1", "p", "p"], ["a2", "q", "p"]]
  text_ids = np.array([[records.text_id([ord(c) for c in t]) for t in row] for row in chosen], np.float32)
  rng = np.random.RandomState(7)
  embeddings = rng.normal(size=[3, 3, 5]).astype(np.float32)
  # Every anchor's candidates: p(0), p(1), q(2), n0(3), p(4), p(5). Anchors 0 and 1 (positive
  # "p") each drop the three copies that are not their own; anchor 2 ("q") drops none.
  assert count_masked(text_ids) == 6
  expected = ref_in_batch(embeddings, text_ids, 0.1)
  # Written out: anchor 0 keeps candidates 0, 2, 3; anchor 1 keeps 1, 2, 3; anchor 2 all.
  flat = [embeddings[0, 1], embeddings[1, 1], embeddings[2, 1], embeddings[0, 2],
          embeddings[1, 2], embeddings[2, 2]]
  kept = {0: [0, 2, 3], 1: [1, 2, 3], 2: [0, 1, 2, 3, 4, 5]}
  by_hand = np.mean([ref_logsumexp([ref_cos(embeddings[i, 0], flat[c]) / 0.1 for c in kept[i]])
                     - ref_cos(embeddings[i, 0], flat[i]) / 0.1 for i in range(3)])
  assert expected == pytest.approx(by_hand, rel=1e-12)
  got = run_tf(lambda e, ids: losses.in_batch_loss(e, ids, 0.1), embeddings, text_ids)
  assert got == pytest.approx(expected, rel=1e-5)
  assert metrics.in_batch_loss(embeddings, text_ids, 0.1) == pytest.approx(expected, rel=1e-9)


def test_in_batch_gradient_matches_the_reference_by_finite_differences():
  embeddings, text_ids, _, _ = random_batch(11, n=4, texts=3, dim=3, pool=POOL[:2])
  temperature = 0.5
  with tf.Graph().as_default():
    e = tf.placeholder(tf.float32, embeddings.shape)
    ids = tf.constant(text_ids)
    gradient = tf.gradients(losses.in_batch_loss(e, ids, temperature), e)[0]
    with tf.Session() as sess:
      got = sess.run(gradient, {e: embeddings})
  x = embeddings.astype(np.float64)
  expected = np.zeros_like(x)
  step = 1e-6
  for index in np.ndindex(*x.shape):
    up, down = x.copy(), x.copy()
    up[index] += step
    down[index] -= step
    expected[index] = (ref_in_batch(up, text_ids, temperature) -
                       ref_in_batch(down, text_ids, temperature)) / (2 * step)
  np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4)
  assert np.max(np.abs(expected)) > 1e-2


def test_cosent_gradient_matches_the_reference_by_finite_differences():
  embeddings, _, scores, _ = random_batch(12, n=5, dim=3)
  with tf.Graph().as_default():
    e = tf.placeholder(tf.float32, embeddings.shape)
    loss = losses.cosent_loss(losses.pair_cosines(e), tf.constant(scores), 5.0)
    gradient = tf.gradients(loss, e)[0]
    with tf.Session() as sess:
      got = sess.run(gradient, {e: embeddings})
  x = embeddings.astype(np.float64)

  def reference(values):
    return ref_cosent([ref_cos(v[0], v[1]) for v in values], scores, 5.0)
  expected = np.zeros_like(x)
  for index in np.ndindex(*x.shape):
    up, down = x.copy(), x.copy()
    up[index] += 1e-6
    down[index] -= 1e-6
    expected[index] = (reference(up) - reference(down)) / 2e-6
  np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4)
  assert np.max(np.abs(expected)) > 1e-2


def test_batch_loss_fn_dispatches_on_the_loss():
  embeddings, text_ids, scores, _ = random_batch(4, texts=3, pool=POOL[:3])
  example_loss = np.random.RandomState(4).rand(len(scores)).astype(np.float32)
  cosines = [ref_cos(e[0], e[1]) for e in embeddings]
  expected = {losses.COSENT: ref_cosent(cosines, scores, 7.0),
              losses.IN_BATCH: ref_in_batch(embeddings, text_ids, 0.2),
              losses.SOFTMAX: float(np.mean(example_loss.astype(np.float64)))}
  for loss in losses.LOSSES:
    got = run_tf(lambda t, ids, s, x: losses.batch_loss_fn(loss, 7.0, 0.2)(
        {"texts": t, "text_ids": ids, "score": s, "example_loss": x}),
                 embeddings, text_ids, scores, example_loss)
    assert got == pytest.approx(expected[loss], rel=1e-5), loss


# ---------------------------------------------------------------------------
# metrics.py: top1, the dev loss over batches, Spearman and Pearson
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("seed, texts", [(0, 2), (1, 3)])
def test_top1_matches_the_reference(seed, texts):
  embeddings, text_ids, _, _ = random_batch(seed, n=12, texts=texts, pool=POOL)
  # Half the positives made close to their anchors, so top1 is neither 0 nor 1.
  embeddings[::2, 1] = embeddings[::2, 0] + 0.01
  expected = ref_top1(embeddings, text_ids)
  assert 0 < expected < 1
  assert metrics.top1(embeddings, text_ids) == expected


def test_mean_batch_loss_is_the_mean_over_consecutive_batches():
  embeddings, text_ids, scores, _ = random_batch(3, n=10, texts=3, pool=POOL[:4])
  outputs = {"embeddings": embeddings, "text_ids": text_ids, "score": scores}
  cosines = [ref_cos(e[0], e[1]) for e in embeddings]
  batches = [slice(0, 4), slice(4, 8), slice(8, 10)]  # the last one shorter
  expected = np.mean([ref_cosent(cosines[b], scores[b], 20.0) for b in batches])
  assert metrics.mean_batch_loss(losses.COSENT, outputs, 4, 20.0, 0.05) == pytest.approx(
      expected, rel=1e-9)
  expected = np.mean([ref_in_batch(embeddings[b], text_ids[b], 0.05) for b in batches])
  unscored = {"embeddings": embeddings, "text_ids": text_ids}
  assert metrics.mean_batch_loss(losses.IN_BATCH, unscored, 4, 20.0, 0.05) == pytest.approx(
      expected, rel=1e-9)
  # Scored pairs: training keeps only those above --positive_threshold, so no dev loss.
  assert metrics.mean_batch_loss(losses.IN_BATCH, outputs, 4, 20.0, 0.05) is None
  # Outputs that cannot feed the loss: no dev loss.
  assert metrics.mean_batch_loss(losses.COSENT, {"embeddings": embeddings,
                                                 "text_ids": text_ids}, 4, 20.0, 0.05) is None
  assert metrics.mean_batch_loss(losses.SOFTMAX, outputs, 4, 20.0, 0.05) is None
  single = {"embeddings": embeddings[:, :1], "text_ids": text_ids[:, :1]}
  assert metrics.mean_batch_loss(losses.IN_BATCH, single, 4, 20.0, 0.05) is None


def tied_data(seed, n=40):
  rng = np.random.RandomState(seed)
  gold = rng.randint(0, 6, size=n).astype(np.float64)  # 0-5, many ties
  predicted = np.round(gold * 0.1 + rng.normal(scale=0.3, size=n), 1)  # ties too
  return predicted, gold


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_spearman_pearson_and_ranks_match_scipy_with_ties(seed):
  predicted, gold = tied_data(seed)
  assert len(set(predicted)) < len(predicted) and len(set(gold)) < len(gold)
  np.testing.assert_array_equal(metrics.average_ranks(predicted),
                                scipy.stats.rankdata(predicted))
  np.testing.assert_array_equal(metrics.average_ranks(gold), scipy.stats.rankdata(gold))
  assert metrics.spearman(predicted, gold) == pytest.approx(
      scipy.stats.spearmanr(predicted, gold)[0], abs=1e-12)
  assert metrics.pearson(predicted, gold) == pytest.approx(
      scipy.stats.pearsonr(predicted, gold)[0], abs=1e-12)
  # Plain ranks (ties broken by position) would give another Spearman.
  plain = np.argsort(np.argsort(predicted, kind="mergesort")) + 1.0
  assert abs(metrics.pearson(plain, gold) - metrics.spearman(predicted, gold)) > 1e-6


def test_spearman_and_pearson_of_float32_cosines_and_a_constant_side():
  predicted, gold = tied_data(9, n=25)
  cosines = np.tanh(predicted).astype(np.float32)
  assert metrics.spearman(cosines, gold) == pytest.approx(
      scipy.stats.spearmanr(cosines, gold)[0], abs=1e-9)
  assert metrics.pearson(cosines, gold) == pytest.approx(
      scipy.stats.pearsonr(cosines.astype(np.float64), gold)[0], abs=1e-7)
  # A constant side has no correlation: 0 (scipy gives nan).
  assert metrics.pearson(np.ones(5), np.arange(5.0)) == 0.0
  assert metrics.spearman(np.arange(5.0), np.full(5, 2.0)) == 0.0
