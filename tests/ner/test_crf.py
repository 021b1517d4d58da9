# coding=utf-8
"""Tests of crf.py: the forward algorithm and Viterbi against brute force over every tag
path of tiny cases (3 tags, up to 4 steps: at most 81 paths), padding, lengths 0 and 1,
gradients, and the variable's checkpoint name."""

import itertools

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu.ner import crf

NUM_TAGS = 3
MAX_LENGTH = 4


def path_score(logits, path, transitions):
  """The score of one tag path of one sequence (NumPy): unaries plus transitions."""
  score = sum(logits[t, tag] for t, tag in enumerate(path))
  score += sum(transitions[a, b] for a, b in zip(path[:-1], path[1:]))
  return score


def brute_force(logits, length, transitions):
  """(log Z, best path, best score) of one sequence by listing all K**length paths."""
  if length == 0:
    return 0.0, [], 0.0
  paths = list(itertools.product(range(logits.shape[1]), repeat=length))
  scores = np.array([path_score(logits, path, transitions) for path in paths])
  peak = scores.max()
  log_z = peak + np.log(np.exp(scores - peak).sum())
  best = int(np.argmax(scores))
  return log_z, list(paths[best]), scores[best]


def random_case(seed, lengths, max_length=MAX_LENGTH):
  rng = np.random.RandomState(seed)
  logits = rng.normal(0.0, 2.0, [len(lengths), max_length, NUM_TAGS]).astype(np.float32)
  transitions = rng.normal(0.0, 2.0, [NUM_TAGS, NUM_TAGS]).astype(np.float32)
  tags = rng.randint(0, NUM_TAGS, [len(lengths), max_length]).astype(np.int32)
  for row, length in enumerate(lengths):
    tags[row, length:] = -1  # junk in the padding must be ignored
  return logits, tags, np.array(lengths, np.int32), transitions


def run_crf(logits, tags, lengths, transitions):
  """Evaluates log-likelihood, decode and the gradients of the mean likelihood."""
  with tf.Graph().as_default():
    logits_t = tf.constant(logits)
    transitions_t = tf.constant(transitions)
    likelihood = crf.crf_log_likelihood(logits_t, tf.constant(tags), tf.constant(lengths),
                                        transitions_t)
    best_tags, best_score = crf.crf_decode(logits_t, tf.constant(lengths), transitions_t)
    gradients = tf.gradients(tf.reduce_mean(likelihood), [logits_t, transitions_t])
    with tf.Session() as sess:
      return sess.run({"likelihood": likelihood, "best_tags": best_tags,
                       "best_score": best_score, "gradients": gradients})


def check_against_brute_force(logits, tags, lengths, transitions):
  values = run_crf(logits, tags, lengths, transitions)
  for row, length in enumerate(lengths):
    log_z, best_path, best_score = brute_force(logits[row], length, transitions)
    gold = path_score(logits[row], list(tags[row, :length]), transitions) if length else 0.0
    np.testing.assert_allclose(values["likelihood"][row], gold - log_z, rtol=1e-5, atol=1e-4)
    assert list(values["best_tags"][row, :length]) == best_path
    assert list(values["best_tags"][row, length:]) == [0] * (logits.shape[1] - length)
    np.testing.assert_allclose(values["best_score"][row], best_score, rtol=1e-5, atol=1e-4)
  for gradient in values["gradients"]:
    assert np.all(np.isfinite(gradient))
  return values


def test_batch_of_every_length_matches_brute_force():
  check_against_brute_force(*random_case(0, [4, 2, 0, 1, 3]))


def test_other_random_cases_match_brute_force():
  for seed in range(1, 4):
    check_against_brute_force(*random_case(seed, [3, 4, 1]))


def test_likelihoods_of_all_paths_sum_to_one():
  logits, _, _, transitions = random_case(7, [3])
  paths = np.array(list(itertools.product(range(NUM_TAGS), repeat=3)), np.int32)
  batch_logits = np.repeat(logits[:, :3], len(paths), axis=0)
  lengths = np.full([len(paths)], 3, np.int32)
  values = run_crf(batch_logits, paths, lengths, transitions)
  np.testing.assert_allclose(np.exp(values["likelihood"]).sum(), 1.0, rtol=1e-5)


def test_length_zero_is_zero_without_nan():
  logits, tags, lengths, transitions = random_case(3, [0, 0])
  values = run_crf(logits, tags, lengths, transitions)
  assert list(values["likelihood"]) == [0.0, 0.0]
  assert list(values["best_score"]) == [0.0, 0.0]
  assert not values["best_tags"].any()
  for gradient in values["gradients"]:
    assert np.all(gradient == 0.0)


def test_empty_time_axis():
  logits = np.zeros([2, 0, NUM_TAGS], np.float32)
  values = run_crf(logits, np.zeros([2, 0], np.int32), np.zeros([2], np.int32),
                   np.ones([NUM_TAGS, NUM_TAGS], np.float32))
  assert values["best_tags"].shape == (2, 0)
  assert list(values["likelihood"]) == [0.0, 0.0]


def test_length_one_is_a_softmax():
  logits, tags, lengths, transitions = random_case(5, [1, 1])
  values = run_crf(logits, tags, lengths, transitions)
  first = logits[:, 0, :].astype(np.float64)
  log_softmax = first - np.log(np.exp(first).sum(axis=1, keepdims=True))
  np.testing.assert_allclose(values["likelihood"], log_softmax[[0, 1], tags[:, 0]], rtol=1e-5)
  assert list(values["best_tags"][:, 0]) == list(first.argmax(axis=1))


def test_zero_transitions_factorize_into_token_softmaxes():
  logits, tags, _, _ = random_case(11, [4])
  zeros = np.zeros([NUM_TAGS, NUM_TAGS], np.float32)
  values = run_crf(logits, tags, np.array([4], np.int32), zeros)
  token_log_softmax = logits[0] - np.log(np.exp(logits[0]).sum(axis=1, keepdims=True))
  expected = token_log_softmax[np.arange(4), tags[0]].sum()
  np.testing.assert_allclose(values["likelihood"][0], expected, rtol=1e-5)


def test_lengths_past_the_padded_length_are_clipped():
  logits, tags, _, transitions = random_case(2, [4])
  clipped = run_crf(logits, tags, np.array([4], np.int32), transitions)
  too_long = run_crf(logits, tags, np.array([9], np.int32), transitions)
  np.testing.assert_allclose(too_long["likelihood"], clipped["likelihood"])
  assert (too_long["best_tags"] == clipped["best_tags"]).all()


def test_gradient_matches_finite_differences():
  logits, tags, lengths, transitions = random_case(4, [4, 2])
  values = run_crf(logits, tags, lengths, transitions)
  logits64 = logits.astype(np.float64)

  def mean_likelihood(transitions_value):
    total = 0.0
    for row, length in enumerate(lengths):
      log_z = brute_force(logits64[row], length, transitions_value)[0]
      total += path_score(logits64[row], list(tags[row, :length]), transitions_value) - log_z
    return total / len(lengths)

  epsilon = 1e-4
  base = transitions.astype(np.float64)
  for i, j in [(0, 0), (1, 2), (2, 1)]:
    shifted_up, shifted_down = base.copy(), base.copy()
    shifted_up[i, j] += epsilon
    shifted_down[i, j] -= epsilon
    numeric = (mean_likelihood(shifted_up) - mean_likelihood(shifted_down)) / (2 * epsilon)
    np.testing.assert_allclose(values["gradients"][1][i, j], numeric, rtol=1e-3, atol=1e-4)


def test_transition_variable_name_and_reuse():
  with tf.Graph().as_default():
    transitions = crf.transition_variable(5)
    with tf.variable_scope(tf.get_variable_scope(), reuse=True):
      again = crf.transition_variable(5)
    assert transitions.op.name == "crf/transitions"
    assert again is transitions
    assert transitions.shape.as_list() == [5, 5]
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      assert not sess.run(transitions).any()


def test_trains_towards_the_gold_path():
  """A few steps of gradient ascent on the transitions raise the gold path's likelihood."""
  logits, tags, lengths, _ = random_case(9, [4, 3])
  with tf.Graph().as_default():
    transitions = crf.transition_variable(NUM_TAGS)
    likelihood = tf.reduce_mean(crf.crf_log_likelihood(
        tf.constant(logits), tf.constant(tags), tf.constant(lengths), transitions))
    train = tf.train.GradientDescentOptimizer(0.5).minimize(-likelihood)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      before = sess.run(likelihood)
      for _ in range(20):
        sess.run(train)
      after = sess.run(likelihood)
  assert after > before + 0.5


def test_dynamic_shapes_as_batches_trimmed_to_their_longest():
  """Batch and time unknown when the graph is built: feeds of two shapes share one graph."""
  with tf.Graph().as_default():
    logits = tf.placeholder(tf.float32, [None, None, NUM_TAGS])
    tags = tf.placeholder(tf.int32, [None, None])
    lengths = tf.placeholder(tf.int32, [None])
    transitions = tf.placeholder(tf.float32, [NUM_TAGS, NUM_TAGS])
    likelihood = crf.crf_log_likelihood(logits, tags, lengths, transitions)
    best_tags, _ = crf.crf_decode(logits, lengths, transitions)
    assert best_tags.shape.as_list() == [None, None]
    with tf.Session() as sess:
      for case_lengths, max_length in (([2, 1], 2), ([4, 3, 0], 4)):
        case = random_case(5, case_lengths, max_length)
        values = sess.run([likelihood, best_tags], dict(zip(
            [logits, tags, lengths, transitions], case)))
        for row, length in enumerate(case_lengths):
          log_z, best_path, _ = brute_force(case[0][row], length, case[3])
          gold = path_score(case[0][row], list(case[1][row, :length]), case[3])
          np.testing.assert_allclose(values[0][row], gold - log_z, rtol=1e-5, atol=1e-4)
          assert list(values[1][row, :length]) == best_path
