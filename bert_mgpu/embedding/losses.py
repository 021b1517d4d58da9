# coding=utf-8
"""The embedding losses, each over the global batch (bert_mgpu/distributed/global_batch.py
joins the towers' rows before these run).

  cosent    log(1 + sum over pairs (i, j) with score_i < score_j of
            exp(scale * (cos_i - cos_j))), cos_i = cos(text_a_i, text_b_i) (Su Jianlin's
            CoSENT, text2vec's and sentence-transformers' CoSENTLoss).
  in_batch  each anchor's cross-entropy over cos / temperature against every positive of
            the batch and every hard negative, its own positive the target (SimCSE,
            MultipleNegativesRankingLoss). A candidate whose text equals the anchor's own
            positive (another copy of it) is not a negative: it is masked out.
  softmax   Sentence-BERT's classifier over (u, v, |u - v|): the mean of each pair's
            cross-entropy, computed in its tower (the head's weights live there).

The rows (embedding/model.py):
  texts     float32 [batch, texts, dim]: each record's pooled embeddings, text 0 the
            anchor (text_a), text 1 its positive (text_b), then its hard negatives;
  score     float32 [batch] (scored pairs);
  text_ids  float32 [batch, texts, 2]: a 48-bit hash of each text's token ids in two
            exact halves;
  example_loss float32 [batch] (softmax).
bert_mgpu/embedding/metrics.py has the same losses in NumPy (the dev loss).
"""

import tensorflow.compat.v1 as tf

from bert_mgpu.embedding.metrics import COSENT, IN_BATCH, LOSSES, MASKED, SOFTMAX  # pylint: disable=unused-import


def _unit(vectors):
  """vectors [..., dim] scaled to length 1 (a zero vector stays zero)."""
  return tf.math.l2_normalize(vectors, axis=-1, epsilon=1e-12)


def pair_cosines(texts):
  """[batch]: the cosine of each record's text 0 and text 1 (texts [batch, texts, dim])."""
  return tf.reduce_sum(_unit(texts[:, 0]) * _unit(texts[:, 1]), axis=-1)


def cosent_loss(cosines, scores, scale):
  """CoSENT over the batch.

  Args:
    cosines: float32 [batch].
    scores: float32 [batch], the gold similarity.
    scale: the factor lambda (--cosent_scale).

  Returns:
    float32 scalar: log(1 + sum_{score_i < score_j} exp(scale * (cos_i - cos_j))).
  """
  differences = scale * (cosines[:, None] - cosines[None, :])  # [batch, batch]
  ordered = tf.less(scores[:, None], scores[None, :])
  logits = tf.where(ordered, differences, tf.fill(tf.shape(differences), MASKED))
  return tf.reduce_logsumexp(tf.concat([tf.zeros([1]), tf.reshape(logits, [-1])], axis=0))


def in_batch_loss(texts, text_ids, temperature):
  """In-batch negatives over the batch.

  Args:
    texts: float32 [batch, 2 + negatives, dim]: anchor, positive, hard negatives.
    text_ids: float32 [batch, 2 + negatives, 2]: the texts' hashes.
    temperature: tau (--temperature).

  Returns:
    float32 scalar: the mean over anchors of the cross-entropy of
    cos(anchor_i, candidate) / tau over the candidates (every positive, then every hard
    negative, of the batch), target the anchor's own positive.
  """
  batch = tf.shape(texts)[0]
  dim = tf.shape(texts)[-1]
  anchors = _unit(texts[:, 0])  # [batch, dim]
  candidates = _unit(tf.concat([texts[:, 1], tf.reshape(texts[:, 2:], [-1, dim])], axis=0))
  candidate_ids = tf.concat([text_ids[:, 1], tf.reshape(text_ids[:, 2:], [-1, 2])], axis=0)
  # [batch, candidates]: cos / tau.
  logits = tf.matmul(anchors, candidates, transpose_b=True) / temperature
  # The anchor's own positive is candidate i; another candidate with its text is no negative.
  same_text = tf.reduce_all(tf.equal(text_ids[:, 1][:, None, :], candidate_ids[None, :, :]),
                            axis=-1)  # [batch, candidates]
  own = tf.one_hot(tf.range(batch), tf.shape(candidates)[0], on_value=True, off_value=False)
  masked = tf.logical_and(same_text, tf.logical_not(own))
  logits = tf.where(masked, tf.fill(tf.shape(logits), MASKED), logits)
  return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=tf.range(batch), logits=logits))


def batch_loss_fn(loss, cosent_scale=20.0, temperature=0.05):
  """function(joined rows) -> the float32 loss of `loss` over the global batch."""
  def batch_loss(rows):
    if loss == COSENT:
      return cosent_loss(pair_cosines(rows["texts"]), rows["score"], cosent_scale)
    if loss == IN_BATCH:
      return in_batch_loss(rows["texts"], rows["text_ids"], temperature)
    return tf.reduce_mean(rows["example_loss"])
  return batch_loss
