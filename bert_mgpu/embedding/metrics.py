# coding=utf-8
"""The embedding model's scores, in NumPy: Spearman and Pearson of cosines against gold
scores, the share of anchors whose own positive ranks first, and the losses of
embedding/losses.py (the dev loss, over batches of the eval batch size)."""

import numpy as np

# The losses' names (embedding/losses.py builds them in TensorFlow; this module imports none).
COSENT, IN_BATCH, SOFTMAX = "cosent", "in_batch", "softmax"
LOSSES = (COSENT, IN_BATCH, SOFTMAX)

# Added to the logits of masked pairs (losses.py uses it too): exp() of it is 0.
MASKED = -1e9


def unit(vectors):
  """vectors [..., dim] in float64, scaled to length 1 (a zero vector stays zero)."""
  vectors = np.asarray(vectors, np.float64)
  norms = np.sqrt(np.sum(vectors * vectors, axis=-1, keepdims=True))
  return vectors / np.maximum(norms, 1e-12)


def pair_cosines(embeddings):
  """[n]: cos(text 0, text 1) of embeddings [n, texts, dim]."""
  return np.sum(unit(embeddings[:, 0]) * unit(embeddings[:, 1]), axis=-1)


def average_ranks(values):
  """1-based ranks of `values`, ties sharing their average rank (scipy's rankdata)."""
  values = np.asarray(values, np.float64)
  order = np.argsort(values, kind="mergesort")
  sorted_values = values[order]
  ranks = np.empty(len(values), np.float64)
  start = 0
  while start < len(values):
    end = start
    while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
      end += 1
    ranks[order[start:end + 1]] = (start + end) / 2.0 + 1.0
    start = end + 1
  return ranks


def pearson(x, y):
  """Pearson's r (0 when either side is constant)."""
  x = np.asarray(x, np.float64) - np.mean(x)
  y = np.asarray(y, np.float64) - np.mean(y)
  denominator = np.sqrt(np.sum(x * x) * np.sum(y * y))
  return float(np.sum(x * y) / denominator) if denominator > 0 else 0.0


def spearman(x, y):
  """Spearman's rho: Pearson's r of the average ranks."""
  return pearson(average_ranks(x), average_ranks(y))


def top1(embeddings, text_ids):
  """The share of anchors whose own positive scores highest among every positive and hard
  negative of the set (a candidate with the positive's text is not a rival).

  Args:
    embeddings: [n, 2 + negatives, dim].
    text_ids: [n, 2 + negatives, 2].
  """
  n, first = len(embeddings), 0
  hits = 0
  while first < n:  # in chunks of anchors: the whole [n, candidates] matrix may not fit
    rows = np.arange(first, min(first + _TOP1_CHUNK, n))
    logits = _candidate_logits(embeddings, text_ids, 1.0, rows)
    hits += int(np.sum(np.argmax(logits, axis=1) == rows))
    first += _TOP1_CHUNK
  return hits / float(n)


_TOP1_CHUNK = 1024


def _candidate_logits(embeddings, text_ids, temperature, anchor_rows=None):
  """[anchors, candidates]: cos(anchor, candidate) / temperature, masked as
  losses.in_batch_loss; the anchors of `anchor_rows` (None: every record)."""
  n, _, dim = embeddings.shape
  rows = np.arange(n) if anchor_rows is None else anchor_rows
  anchors = unit(embeddings[rows, 0])
  candidates = unit(np.concatenate([embeddings[:, 1], embeddings[:, 2:].reshape(-1, dim)]))
  candidate_ids = np.concatenate([text_ids[:, 1], text_ids[:, 2:].reshape(-1, 2)])
  logits = anchors.dot(candidates.T) / temperature
  same_text = np.all(text_ids[rows, 1][:, None, :] == candidate_ids[None, :, :], axis=-1)
  same_text[np.arange(len(rows)), rows] = False
  logits[same_text] = MASKED
  return logits


def _logsumexp(values, axis=None):
  top = np.max(values, axis=axis, keepdims=True)
  result = np.log(np.sum(np.exp(values - top), axis=axis, keepdims=True)) + top
  return np.squeeze(result, axis=axis) if axis is not None else float(result.ravel()[0])


def cosent_loss(cosines, scores, scale):
  """embedding/losses.cosent_loss in NumPy (float64)."""
  cosines = np.asarray(cosines, np.float64)
  scores = np.asarray(scores)
  differences = scale * (cosines[:, None] - cosines[None, :])
  ordered = scores[:, None] < scores[None, :]
  return _logsumexp(np.concatenate([[0.0], differences[ordered]]))


def in_batch_loss(embeddings, text_ids, temperature):
  """losses.in_batch_loss in NumPy (float64)."""
  logits = _candidate_logits(embeddings, text_ids, temperature)
  n = len(logits)
  return float(np.mean(_logsumexp(logits, axis=1) - logits[np.arange(n), np.arange(n)]))


def batch_loss(loss, outputs, cosent_scale, temperature):
  """The loss of one batch of inference outputs (embeddings, score, text_ids,
  example_loss), as training computes it over a global batch."""
  if loss == COSENT:
    return cosent_loss(pair_cosines(outputs["embeddings"]), outputs["score"], cosent_scale)
  if loss == IN_BATCH:
    return in_batch_loss(outputs["embeddings"], outputs["text_ids"], temperature)
  return float(np.mean(outputs["example_loss"]))


def mean_batch_loss(loss, outputs, batch_size, cosent_scale, temperature):
  """The mean over consecutive batches of `batch_size` rows of their batch_loss (the last
  batch may be shorter), or None when the outputs cannot feed the loss."""
  needed = {COSENT: "score", IN_BATCH: "text_ids",
            SOFTMAX: "example_loss"}[loss]
  # in_batch on a scored set: training keeps the pairs above --positive_threshold only,
  # so a loss over every pair would not be the training loss; none is reported.
  if needed not in outputs or (loss == IN_BATCH and ("score" in outputs or
                                                     outputs["embeddings"].shape[1] < 2)):
    return None
  n = len(outputs["embeddings"])
  values = [batch_loss(loss, {k: v[start:start + batch_size] for k, v in outputs.items()},
                       cosent_scale, temperature) for start in range(0, n, batch_size)]
  return float(np.mean(values)) if values else None
