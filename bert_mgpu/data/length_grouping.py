# coding=utf-8
"""How much --group_by_length skews the label mix of training batches (NumPy only).

--group_by_length (tfrecord_io.group_into_length_batches) sorts each chunk of the shuffled
training stream by length and cuts it into batches. Where length goes with the label
(e.g. negative reviews longer than positive ones), a batch of long examples then holds
mostly one label, which can cost accuracy. label_skew simulates the grouping on the
training set's lengths and label targets and compares its batches' label mix with that of
random batches; log_line turns the result into one line for the training log, which the
run scripts log as a warning when `warns` (the ratio reaches SKEW_WARNING_RATIO).

The targets of each example are a float vector [k]:
  single-label classification: the one-hot of its label (one_hot);
  multi-label classification: its multi-hot;
  NER: the share of each tag among its labelled tokens (tag_shares); or [1], e.g. the
    share of its tokens in an entity.

This module imports no TensorFlow.
"""

import collections

import numpy as np

# The log line is a warning when grouped batches are at least this many times as
# label-skewed as random ones.
SKEW_WARNING_RATIO = 1.5

# Length quantile buckets of LabelSkew.length_share.
LENGTH_BUCKETS = 10

# The simulation cuts at least this many batches (more passes over a small data set), so
# the mean skew of a few dozen examples is not one noisy draw.
MIN_SIMULATED_BATCHES = 200

# The seed of the simulation's shuffles (not the training run's --random_seed).
SIMULATION_SEED = 0


class LabelSkew(collections.namedtuple(
    "LabelSkew", ["random_skew", "grouped_skew", "ratio", "length_share", "num_examples",
                  "batch_size", "group_batches", "within_strata"])):
  """What label_skew measured.

  Attributes:
    random_skew: the mean label-mix distance (label_mix_distance) of random batches.
    grouped_skew: the same for batches grouped by length as --group_by_length forms them.
    ratio: grouped_skew / random_skew (1.0 when both are 0, e.g. every target is the
      same).
    length_share: the share of the targets' variance that length explains on its own
      (length_explained_share), in [0, 1].
    num_examples, batch_size, group_batches: the simulation's inputs.
    within_strata: whether the grouping sorted by length rank within each label.
  """
  __slots__ = ()

  @property
  def warns(self):
    """Whether grouping makes batches markedly more label-skewed than random ones."""
    return self.ratio >= SKEW_WARNING_RATIO


def chunk_batches(group_batches, shuffle_buffer, batch_size):
  """The batches cut from each sorted chunk: `group_batches`, but at most the shuffle
  buffer's worth (tfrecord_io.make_dataset uses this), and at least 1."""
  return max(1, min(group_batches, shuffle_buffer // batch_size))


def one_hot(label_ids, num_labels):
  """The targets of single-label examples.

  Args:
    label_ids: int array [n], each in [0, num_labels).
    num_labels: the number of labels.

  Returns:
    float32 array [n, num_labels]: 1 at each example's label.
  """
  label_ids = np.asarray(label_ids, np.int64)  # [n]
  targets = np.zeros([len(label_ids), num_labels], np.float32)  # [n, num_labels]
  targets[np.arange(len(label_ids)), label_ids] = 1.0
  return targets


def tag_shares(tag_ids, tag_mask, num_tags):
  """The targets of NER examples: the share of each tag among an example's labelled
  tokens.

  Args:
    tag_ids: int array [n, seq], the tag id at each position.
    tag_mask: int array [n, seq], 1 where a position carries a tag.
    num_tags: the number of tags.

  Returns:
    float32 array [n, num_tags]; each row sums to 1, or is all zero for an example
    without labelled tokens.
  """
  tag_ids = np.asarray(tag_ids, np.int64)  # [n, seq]
  tag_mask = np.asarray(tag_mask, np.float64)  # [n, seq]
  n = tag_ids.shape[0]
  rows = np.repeat(np.arange(n), tag_ids.shape[1])  # [n * seq]
  counts = np.bincount(rows * num_tags + tag_ids.ravel(), weights=tag_mask.ravel(),
                       minlength=n * num_tags).reshape(n, num_tags)  # [n, num_tags]
  totals = counts.sum(axis=1, keepdims=True)  # [n, 1]
  return (counts / np.maximum(totals, 1.0)).astype(np.float32)


def label_mix_distance(batch_means, data_mean):
  """The distance between each batch's mean target vector and the data's.

  Half the L1 distance (the total-variation distance of two label distributions); for
  targets of one column (e.g. an entity density), the absolute difference.

  Args:
    batch_means: float array [batches, k].
    data_mean: float array [k].

  Returns:
    float array [batches].
  """
  gaps = np.abs(batch_means - data_mean[None, :]).sum(axis=1)  # [batches]
  return gaps if batch_means.shape[1] == 1 else 0.5 * gaps


def length_explained_share(lengths, targets, buckets=LENGTH_BUCKETS):
  """The share of the targets' variance that the length bucket explains (eta squared).

  Examples are put into `buckets` length quantile buckets (equal lengths share a bucket,
  so there may be fewer). The share is the variance of the targets between the buckets'
  means over their total variance, both summed over the k columns: 0 when the bucket
  says nothing about the label mix, 1 when it determines it. For one-hot targets the
  total variance is the Gini impurity of the labels, so this is the share of the impurity
  that knowing the length bucket removes. Coarse buckets miss a finer link (labels in
  many narrow bands of length), and on a small set the share is biased up by about
  (buckets - 1) / n.

  Args:
    lengths: int array [n].
    targets: float array [n, k].
    buckets: the number of length quantile buckets.

  Returns:
    float in [0, 1]; 0 when the targets do not vary.
  """
  lengths = np.asarray(lengths)  # [n]
  targets = np.asarray(targets, np.float64)  # [n, k]
  edges = np.unique(np.quantile(lengths, np.linspace(0, 1, buckets + 1)[1:-1]))
  bucket = np.searchsorted(edges, lengths, side="right")  # [n], in [0, len(edges)]
  mean = targets.mean(axis=0)  # [k]
  between = 0.0
  for index in np.unique(bucket):
    members = targets[bucket == index]  # [bucket size, k]
    between += len(members) * ((members.mean(axis=0) - mean) ** 2).sum()
  total = ((targets - mean) ** 2).sum()
  return float(between / total) if total > 0 else 0.0


def _stream(num_examples, batch_size, group_batches, rng):
  """The simulated shuffled stream, example indices [chunks, chunk_size]: whole passes,
  each a permutation, enough for MIN_SIMULATED_BATCHES batches and one chunk, cut to
  whole chunks."""
  chunk_size = group_batches * batch_size
  wanted = max(num_examples, chunk_size, MIN_SIMULATED_BATCHES * batch_size)
  passes = -(-wanted // num_examples)
  stream = np.concatenate([rng.permutation(num_examples) for _ in range(passes)])
  chunks = max(1, len(stream) // chunk_size)
  return stream[:chunks * chunk_size].reshape(chunks, chunk_size)


def _ranks_within_strata(lengths, strata):
  """Each row's length rank within its stratum as a share, (rank + 0.5) / stratum rows
  (tfrecord_io._length_ranks_within_strata). lengths, strata: [rows]; returns [rows]."""
  keys = np.zeros(len(lengths))
  for stratum in np.unique(strata):
    members = np.flatnonzero(strata == stratum)
    ranks = np.empty(len(members))
    ranks[np.argsort(lengths[members], kind="stable")] = np.arange(len(members))
    keys[members] = (ranks + 0.5) / len(members)
  return keys


def label_skew(lengths, targets, batch_size, group_batches, seed=SIMULATION_SEED,
               strata=None):
  """Simulates --group_by_length's batches and random ones; measures their label skew.

  The simulation forms batches as tfrecord_io.group_into_length_batches does: the data
  shuffled (whole passes, each a uniform permutation; training shuffles through a buffer
  of at most 100000 examples), read in chunks of group_batches x batch_size examples, each
  chunk stably sorted by length and cut into consecutive batches. Random batches are the
  same shuffled stream cut into batches unsorted. It uses its own fixed seed, not the
  training run's: the figure describes the data set and the batch size, not the batches a
  run will draw (training's batches are not changed). The order of batches and of rows
  within a batch, which training shuffles, does not change a batch's label mix.

  A batch's label skew is label_mix_distance between its mean target vector and the mean
  over all examples: a batch that is 75% positive, of data that is 50% positive, is 0.25
  from it. Random batches are skewed too, by sampling alone, so the ratio of the two is
  the figure: about 1 where length says nothing about the label. The distance is at most
  1, so with many labels and small batches, where random batches are already far from
  the data's mix, the ratio stays small even when length decides the label (119 labels in
  bands of length, batches of 32: 1.3); with large batches a weak link gives a large one.

  Args:
    lengths: int array [n], each example's tokens (the sum of its input_mask).
    targets: float array [n, k], each example's label targets (see the module docstring).
    batch_size: the examples per batch that grouping forms (make_dataset's
      global_batch_size: config.micro_batch_size, all towers' examples of one micro-step).
    group_batches: the batches cut from each chunk (chunk_batches).
    seed: the seed of the simulated shuffles.
    strata: None, or int array [n]: each example's label when training sorts each chunk
      by length rank within the label (make_dataset's stratify_by), as simulated then.

  Returns:
    A LabelSkew.

  Raises:
    ValueError: no examples, or lengths and targets of different counts.
  """
  lengths = np.asarray(lengths).reshape(-1)  # [n]
  targets = np.asarray(targets)  # [n, k]
  if not np.issubdtype(targets.dtype, np.floating):
    targets = targets.astype(np.float32)
  if targets.ndim == 1:
    targets = targets[:, None]
  if not len(lengths) or len(lengths) != len(targets):
    raise ValueError("label_skew needs as many targets as lengths, at least one: %d and %d"
                     % (len(lengths), len(targets)))
  rng = np.random.RandomState(seed)
  stream = _stream(len(lengths), batch_size, group_batches, rng)  # [chunks, chunk_size]
  if strata is None:
    sort_keys = lengths[stream]  # [chunks, chunk_size]
  else:
    strata = np.asarray(strata).reshape(-1)
    sort_keys = np.stack([_ranks_within_strata(lengths[chunk], strata[chunk])
                          for chunk in stream])
  by_length = np.take_along_axis(stream, np.argsort(sort_keys, axis=1, kind="stable"), axis=1)
  mean = targets.mean(axis=0, dtype=np.float64)  # [k]

  def mean_skew(order):  # order: [chunks, chunk_size] example indices
    batch_means = targets[order.reshape(-1, batch_size)].mean(
        axis=1, dtype=np.float64)  # [batches, k]
    return float(label_mix_distance(batch_means, mean).mean())

  random_skew, grouped_skew = mean_skew(stream), mean_skew(by_length)
  if random_skew > 0:
    ratio = grouped_skew / random_skew
  else:  # every random batch has the data's mix: e.g. every target is the same
    ratio = 1.0 if grouped_skew == 0 else float("inf")
  return LabelSkew(random_skew, grouped_skew, ratio, length_explained_share(lengths, targets),
                   len(lengths), batch_size, group_batches, strata is not None)


def log_line(skew, noun="label"):
  """One line for the training log, saying what `skew` (a LabelSkew) means.

  Args:
    skew: a LabelSkew.
    noun: what the targets are ("label", or "tag" for NER).

  Returns:
    str; a warning's text when skew.warns, else a calm note.
  """
  figures = ("group_by_length: batches grouped by length%s are %.1fx as %s-skewed as "
             "random batches (mean %s-mix distance %.2f vs %.2f); length explains %.0f%% of "
             "the %s variance in the training set." % (
                 " within each label" if skew.within_strata else "", skew.ratio, noun, noun,
                 skew.grouped_skew, skew.random_skew,
                 100.0 * skew.length_share, noun))
  if skew.warns:
    return figures + (" Grouping may cost accuracy here: compare with one run without "
                      "--group_by_length. From random weights, add --initializer=normal "
                      "--adam_bias_correction (or --optimizer=radam): with them grouped runs "
                      "left the class-prior plateau (docs/TRAINING.md).")
  return figures + " Below %.1fx: grouping adds little %s skew." % (SKEW_WARNING_RATIO, noun)
