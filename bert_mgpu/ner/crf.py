# coding=utf-8
"""A linear-chain conditional random field (CRF) for tagging, in graph mode.

Written for this project: no tf.contrib (gone in TF 2.x) and no tensorflow_addons, so
the same code runs on TF 1.15 and TF 2.x through `tensorflow.compat.v1`.

A tag path y_0 .. y_{n-1} of a sentence of length n scores

    score(y) = sum_t logits[t, y_t] + sum_{t>=1} transitions[y_{t-1}, y_t]

and has probability exp(score(y)) / Z, where Z sums exp(score) over all num_tags**n
paths. transitions[i, j] is the score of tag i followed by tag j, the layout of
tf.contrib.crf. There are no separate start and end scores.

Shapes: B = batch, T = padded sequence length, K = number of tags. Positions at or
past a sequence's length are padding: they add nothing to any score, and a sequence
of length 0 has log-likelihood 0 (its only path is the empty one).
"""

import tensorflow.compat.v1 as tf

# Scope and name of the transition matrix (see transition_variable).
TRANSITIONS_SCOPE = "crf"
TRANSITIONS_NAME = "transitions"


def transition_variable(num_tags, initializer=None):
  """The [num_tags, num_tags] transition matrix, `crf/transitions` in checkpoints.

  The variable is created (or reused, for the towers after the first) with
  tf.get_variable in the scope `crf` under the current variable scope, so a model
  built at the top level stores it as `crf/transitions`, beside Google-style head
  names such as `output_weights`. Its optimizer slots are then
  `crf/transitions/adam_m` and `crf/transitions/adam_v`.

  Args:
    num_tags: int, K.
    initializer: defaults to zeros: with zero transitions the CRF's likelihood is the
      product of per-token softmaxes, so training starts from the plain token
      classifier and learns the transitions from there.

  Returns:
    A float32 variable [K, K]; entry [i, j] scores tag i followed by tag j.
  """
  if initializer is None:
    initializer = tf.zeros_initializer()
  with tf.variable_scope(TRANSITIONS_SCOPE):
    return tf.get_variable(TRANSITIONS_NAME, shape=[num_tags, num_tags], dtype=tf.float32,
                           initializer=initializer)


def _prepare(logits, lengths, transitions):
  """Casts to float32 and appends one padding step, so that T >= 1 everywhere below.

  The extra step is always past every length, so it changes no result; it spares the
  loops a special case for a batch whose sequences are all empty (T = 0).

  Returns:
    (logits [B, T + 1, K] float32, lengths [B] int32 clipped to [0, T],
     transitions [K, K] float32, T as an int32 scalar tensor).
  """
  logits = tf.cast(logits, tf.float32)
  transitions = tf.cast(transitions, tf.float32)
  max_length = tf.shape(logits)[1]
  lengths = tf.clip_by_value(tf.cast(lengths, tf.int32), 0, max_length)
  logits = tf.pad(logits, [[0, 0], [0, 1], [0, 0]])
  return logits, lengths, transitions, max_length


def _time_major(logits):
  """[B, T, K] -> [T, B, K]: the loops below step over the first axis."""
  return tf.transpose(logits, [1, 0, 2])


def sequence_score(logits, tag_ids, lengths, transitions):
  """The score of the given tag path of every sequence.

  Args:
    logits: float [B, T, K], the unary scores.
    tag_ids: int [B, T]; values at padding positions are ignored (any value).
    lengths: int [B].
    transitions: float [K, K].

  Returns:
    float32 [B].
  """
  logits = tf.cast(logits, tf.float32)
  transitions = tf.cast(transitions, tf.float32)
  num_tags = tf.shape(transitions)[0]
  mask = tf.sequence_mask(lengths, tf.shape(logits)[1], dtype=tf.bool)  # [B, T]
  # Padding may hold -1 or other junk labels: map it to tag 0 before any gather.
  tag_ids = tf.where(mask, tf.cast(tag_ids, tf.int32), tf.zeros_like(mask, tf.int32))
  float_mask = tf.cast(mask, tf.float32)
  unary = tf.reduce_sum(logits * tf.one_hot(tag_ids, num_tags, dtype=tf.float32), axis=2)
  unary_score = tf.reduce_sum(unary * float_mask, axis=1)
  # Pair t joins positions t and t + 1; it counts when position t + 1 is real.
  flat_pairs = tag_ids[:, :-1] * num_tags + tag_ids[:, 1:]  # [B, T - 1]
  pair_scores = tf.gather(tf.reshape(transitions, [-1]), flat_pairs)
  binary_score = tf.reduce_sum(pair_scores * float_mask[:, 1:], axis=1)
  return unary_score + binary_score


def log_partition(logits, lengths, transitions):
  """log Z of every sequence by the forward algorithm.

  alpha_t[j] = log sum over paths ending in tag j at t; alpha_0 = logits[0] and
  alpha_t[j] = logsumexp_i(alpha_{t-1}[i] + transitions[i, j]) + logits[t, j].
  Steps at or past a sequence's length keep its alpha unchanged.

  Args:
    logits: float [B, T, K].
    lengths: int [B].
    transitions: float [K, K].

  Returns:
    float32 [B]; 0 for a sequence of length 0.
  """
  logits, lengths, transitions, _ = _prepare(logits, lengths, transitions)
  steps = _time_major(logits)  # [T + 1, B, K]
  num_steps = tf.shape(steps)[0]

  def step(t, alpha):
    # [B, K, 1] + [1, K, K] -> [B, K(from), K(to)], reduced over "from".
    candidates = alpha[:, :, tf.newaxis] + transitions[tf.newaxis, :, :]
    new_alpha = tf.reduce_logsumexp(candidates, axis=1) + steps[t]
    still_inside = tf.less(t, lengths)[:, tf.newaxis]  # [B, 1]
    return t + 1, tf.where(tf.broadcast_to(still_inside, tf.shape(alpha)), new_alpha, alpha)

  _, alpha = tf.while_loop(lambda t, _: t < num_steps, step, [tf.constant(1), steps[0]],
                           back_prop=True)
  log_z = tf.reduce_logsumexp(alpha, axis=1)
  return tf.where(lengths > 0, log_z, tf.zeros_like(log_z))


def crf_log_likelihood(logits, tag_ids, lengths, transitions):
  """The log-likelihood of the gold tag paths: score(gold) - log Z.

  Args:
    logits: float [B, T, K], the unary scores (e.g. a dense layer over BERT's output).
    tag_ids: int [B, T], the gold tags; padding positions are ignored.
    lengths: int [B], the real length of each sequence (0 allowed).
    transitions: float [K, K], e.g. transition_variable(K).

  Returns:
    float32 [B], <= 0; the loss is usually its negated mean. A sequence of length 0
    gives exactly 0 (and zero gradients), never NaN.
  """
  return (sequence_score(logits, tag_ids, lengths, transitions)
          - log_partition(logits, lengths, transitions))


def _viterbi_forward(steps, lengths, transitions):
  """The max-product pass of Viterbi.

  Args:
    steps: float32 [T + 1, B, K] (time-major logits).
    lengths: int32 [B].
    transitions: float32 [K, K].

  Returns:
    (delta [B, K]: the best score of a path ending in each tag at the last real step,
     backpointers: int32 [T + 1, B, K]: at step t, the best previous tag for each tag;
     row 0 and the rows of padding steps are the identity, so backtracking passes
     through padding without changing the tag).
  """
  num_steps = tf.shape(steps)[0]
  identity = tf.broadcast_to(tf.range(tf.shape(steps)[2])[tf.newaxis, :],
                             tf.shape(steps)[1:])  # [B, K]
  pointers = tf.TensorArray(tf.int32, size=num_steps)
  pointers = pointers.write(0, identity)

  def step(t, delta, pointers):
    candidates = delta[:, :, tf.newaxis] + transitions[tf.newaxis, :, :]  # [B, from, to]
    best_previous = tf.argmax(candidates, axis=1, output_type=tf.int32)
    new_delta = tf.reduce_max(candidates, axis=1) + steps[t]
    still_inside = tf.broadcast_to(tf.less(t, lengths)[:, tf.newaxis], tf.shape(delta))
    delta = tf.where(still_inside, new_delta, delta)
    pointers = pointers.write(t, tf.where(still_inside, best_previous, identity))
    return t + 1, delta, pointers

  _, delta, pointers = tf.while_loop(lambda t, *_: t < num_steps, step,
                                     [tf.constant(1), steps[0], pointers], back_prop=False)
  return delta, pointers.stack()


def _viterbi_backtrack(last_tags, backpointers):
  """Follows the backpointers from the last step to the first.

  Args:
    last_tags: int32 [B], the best tag at the last step.
    backpointers: int32 [T + 1, B, K].

  Returns:
    int32 [B, T + 1], the tag at every step.
  """
  num_steps = tf.shape(backpointers)[0]
  num_tags = tf.shape(backpointers)[2]
  path = tf.TensorArray(tf.int32, size=num_steps)
  path = path.write(num_steps - 1, last_tags)

  def step(t, tags, path):
    # backpointers[t][b, tags[b]] for every b: the tag of step t - 1.
    one_hot = tf.one_hot(tags, num_tags, dtype=tf.int32)
    previous = tf.reduce_sum(backpointers[t] * one_hot, axis=1)
    return t - 1, previous, path.write(t - 1, previous)

  _, _, path = tf.while_loop(lambda t, *_: t > 0, step, [num_steps - 1, last_tags, path],
                             back_prop=False)
  return tf.transpose(path.stack(), [1, 0])


def crf_decode(logits, lengths, transitions):
  """The best tag path of every sequence (Viterbi), in the graph.

  Args:
    logits: float [B, T, K].
    lengths: int [B].
    transitions: float [K, K].

  Returns:
    (best_tag_ids: int32 [B, T], tag 0 at positions at or past a sequence's length;
     best_score: float32 [B], the score of that path, 0 for a sequence of length 0).
  """
  logits, lengths, transitions, max_length = _prepare(logits, lengths, transitions)
  delta, backpointers = _viterbi_forward(_time_major(logits), lengths, transitions)
  last_tags = tf.argmax(delta, axis=1, output_type=tf.int32)
  tags = _viterbi_backtrack(last_tags, backpointers)[:, :max_length]
  mask = tf.sequence_mask(lengths, max_length, dtype=tf.bool)
  best_tag_ids = tf.where(mask, tags, tf.zeros_like(tags))
  best_score = tf.reduce_max(delta, axis=1)
  best_score = tf.where(lengths > 0, best_score, tf.zeros_like(best_score))
  return best_tag_ids, best_score
