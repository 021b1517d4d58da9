# coding=utf-8
"""Tests of --group_by_length (tfrecord_io.make_dataset(group_by_length=True)): batches of
similar length, every example once per epoch, the same batches for a seed, the same batch
after a resume, and towers that get slices of one length group's batch."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu.data import length_grouping
from bert_mgpu.data import tfrecord_io
import multigpu
from tiny_model import write_records

SEQ = 40
NUM_EXAMPLES = 96
BATCH = 8
GROUP_BATCHES = 4  # chunks of 32 examples: an epoch is exactly 3 chunks, 12 batches
FEATURE_SPEC = {
    "input_ids": tf.FixedLenFeature([SEQ], tf.int64),
    "input_mask": tf.FixedLenFeature([SEQ], tf.int64),
    "segment_ids": tf.FixedLenFeature([SEQ], tf.int64),
    "label_ids": tf.FixedLenFeature([], tf.int64),
}


@pytest.fixture(scope="module")
def records(tmp_path_factory):
  """Examples whose label_ids is their index and whose lengths are long-tailed (2..SEQ);
  input_ids hold the index too, so trimmed rows can be traced back."""
  rng = np.random.RandomState(3)
  lengths = np.clip(np.round(rng.lognormal(np.log(8), 0.6, NUM_EXAMPLES)), 2, SEQ).astype(int)
  mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
  index = np.arange(NUM_EXAMPLES)
  path = str(tmp_path_factory.mktemp("grouped") / "train.tf_record")
  write_records(path, {"input_ids": mask * (index[:, None] + 1), "input_mask": mask,
                       "segment_ids": np.zeros_like(mask), "label_ids": index})
  return path, lengths


def read_batches(path, num_batches, seed=7, skip_batches=0, length_multiple=1):
  """The first `num_batches` grouped training batches (skip_batches fed as a tensor, as
  runner.train does)."""
  with tf.Graph().as_default():
    skip = tf.placeholder(tf.int64, [])
    dataset = tfrecord_io.make_dataset(
        [path], FEATURE_SPEC, BATCH, is_training=True, seed=seed, shuffle_buffer=NUM_EXAMPLES,
        skip_batches=skip, length_multiple=length_multiple, group_by_length=True,
        group_batches=GROUP_BATCHES)
    iterator = tf.data.make_initializable_iterator(dataset)
    batch = iterator.get_next()
    with tf.Session() as sess:
      sess.run(iterator.initializer, {skip: skip_batches})
      return [sess.run(batch) for _ in range(num_batches)]


def test_every_example_comes_once_per_epoch(records):
  path, _ = records
  batches = read_batches(path, 3 * NUM_EXAMPLES // BATCH)  # three epochs
  per_epoch = NUM_EXAMPLES // BATCH
  for epoch in range(3):
    ids = np.concatenate([b["label_ids"] for b in batches[epoch * per_epoch:
                                                          (epoch + 1) * per_epoch]])
    assert sorted(ids) == list(range(NUM_EXAMPLES)), epoch
  # Reshuffled every epoch: the epochs do not repeat each other's batches.
  first, second = ([tuple(sorted(b["label_ids"])) for b in batches[e * per_epoch:
                                                                   (e + 1) * per_epoch]]
                   for e in (0, 1))
  assert first != second


def test_batches_hold_examples_of_similar_length(records):
  path, lengths = records
  batches = read_batches(path, 2 * GROUP_BATCHES)
  for start in (0, GROUP_BATCHES):
    chunk = [lengths[b["label_ids"]] for b in batches[start:start + GROUP_BATCHES]]
    # Each chunk's batches are consecutive runs of its examples sorted by length...
    chunk.sort(key=lambda batch_lengths: (batch_lengths.min(), batch_lengths.max()))
    for shorter, longer in zip(chunk, chunk[1:]):
      assert shorter.max() <= longer.min()
  # ...and come in shuffled order, not shortest first.
  order = [lengths[b["label_ids"]].min() for b in batches]
  assert order != sorted(order)
  # Far less padding than random batches of the same examples.
  grouped_padding = sum(BATCH * lengths[b["label_ids"]].max() - lengths[b["label_ids"]].sum()
                        for b in batches)
  rng = np.random.RandomState(0)
  random_padding = 0
  for b in batches:
    sample = lengths[rng.choice(NUM_EXAMPLES, BATCH, replace=False)]
    random_padding += BATCH * sample.max() - sample.sum()
  assert grouped_padding < random_padding / 2


def test_the_same_seed_gives_the_same_batches_and_another_seed_others(records):
  path, _ = records
  first, again = read_batches(path, 6), read_batches(path, 6)
  other = read_batches(path, 6, seed=8)
  for a, b in zip(first, again):
    for name in a:
      np.testing.assert_array_equal(a[name], b[name])
  assert any(not np.array_equal(a["label_ids"], c["label_ids"]) for a, c in zip(first, other))


@pytest.mark.parametrize("skip", [1, GROUP_BATCHES, GROUP_BATCHES + 3, 13])
def test_a_resumed_run_gets_the_batch_it_stopped_at(records, skip):
  path, _ = records
  straight = read_batches(path, skip + 3)
  resumed = read_batches(path, 3, skip_batches=skip)
  for a, b in zip(straight[skip:], resumed):
    for name in a:
      np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_towers_get_slices_of_one_groups_batch_trimmed_together(records):
  path, lengths = records
  with tf.Graph().as_default():
    dataset = tfrecord_io.make_dataset(
        [path], FEATURE_SPEC, BATCH, is_training=True, seed=7, shuffle_buffer=NUM_EXAMPLES,
        group_by_length=True, group_batches=GROUP_BATCHES)
    batch = tf.data.make_one_shot_iterator(dataset).get_next()
    towers = multigpu.split_for_towers(batch, 2)
    with tf.Session() as sess:
      for _ in range(GROUP_BATCHES):
        whole, (tower_0, tower_1) = sess.run([batch, towers])
        ids = whole["label_ids"]
        # The global batch is cut to its longest example once, before the split.
        assert whole["input_ids"].shape[1] == lengths[ids].max()
        assert tower_0["input_ids"].shape[1] == tower_1["input_ids"].shape[1] == \
            lengths[ids].max()
        np.testing.assert_array_equal(
            np.concatenate([tower_0["label_ids"], tower_1["label_ids"]]), ids)
        for tower in (tower_0, tower_1):
          # Each row is its own example (input_ids carry the example's index).
          for row, example in zip(tower["input_ids"], tower["label_ids"]):
            assert set(row[row > 0]) == {example + 1}


def test_without_an_input_mask_grouping_is_refused(records):
  path, _ = records
  spec = {"label_ids": FEATURE_SPEC["label_ids"]}
  with tf.Graph().as_default(), pytest.raises(ValueError, match="input_mask"):
    tfrecord_io.make_dataset([path], spec, BATCH, is_training=True, group_by_length=True,
                             length_multiple=None)


def test_evaluation_ignores_grouping_and_keeps_input_order(records):
  path, _ = records
  with tf.Graph().as_default():
    dataset = tfrecord_io.make_dataset([path], FEATURE_SPEC, BATCH, is_training=False,
                                       group_by_length=True)
    batch = tf.data.make_one_shot_iterator(dataset).get_next()
    ids = []
    with tf.Session() as sess:
      while True:
        try:
          ids.extend(sess.run(batch)["label_ids"])
        except tf.errors.OutOfRangeError:
          break
  assert ids == list(range(NUM_EXAMPLES))


# ---------------------------------------------------------------- within each label

LABELLED_EXAMPLES = 192  # 6 chunks of GROUP_BATCHES x BATCH


@pytest.fixture(scope="module")
def labelled_records(tmp_path_factory):
  """Examples whose label is decided by their length (long ones are 1), so that plain
  length groups are each of one label; input_ids hold the example's index + 1."""
  rng = np.random.RandomState(5)
  lengths = rng.randint(2, SEQ + 1, LABELLED_EXAMPLES)
  labels = (lengths > np.median(lengths)).astype(int)
  mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
  index = np.arange(LABELLED_EXAMPLES)
  path = str(tmp_path_factory.mktemp("labelled") / "train.tf_record")
  write_records(path, {"input_ids": mask * (index[:, None] + 1), "input_mask": mask,
                       "segment_ids": np.zeros_like(mask), "label_ids": labels})
  return path, lengths, labels


def read_labelled_batches(path, num_batches, stratify_by, skip_batches=0):
  """The first grouped batches as example indices (from input_ids) [batches, BATCH]."""
  with tf.Graph().as_default():
    skip = tf.placeholder(tf.int64, [])
    dataset = tfrecord_io.make_dataset(
        [path], FEATURE_SPEC, BATCH, is_training=True, seed=11,
        shuffle_buffer=LABELLED_EXAMPLES, skip_batches=skip, group_by_length=True,
        group_batches=GROUP_BATCHES, stratify_by=stratify_by)
    batch = tf.data.make_initializable_iterator(dataset)
    next_batch = batch.get_next()
    with tf.Session() as sess:
      sess.run(batch.initializer, {skip: skip_batches})
      rows = [sess.run(next_batch)["input_ids"][:, 0] - 1 for _ in range(num_batches)]
  return np.array(rows)


def test_grouping_within_labels_keeps_each_batchs_label_mix(labelled_records):
  path, lengths, labels = labelled_records
  per_epoch = LABELLED_EXAMPLES // BATCH
  within = read_labelled_batches(path, 2 * per_epoch, "label_ids")
  plain = read_labelled_batches(path, 2 * per_epoch, None)
  for epoch in range(2):  # every example once per epoch
    assert sorted(within[epoch * per_epoch:(epoch + 1) * per_epoch].ravel()) == \
        list(range(LABELLED_EXAMPLES))
  # Plain groups are (nearly) one label each; within labels, each batch holds about the
  # data's half of each (a chunk's share may differ from half by sampling).
  plain_skew = np.abs(labels[plain].mean(axis=1) - 0.5).mean()
  within_skew = np.abs(labels[within].mean(axis=1) - 0.5).mean()
  assert plain_skew > 0.35
  assert within_skew < 0.15
  # Still less padding than random batches: each label's examples in a batch are of
  # similar length. (Here length decides the label, the case where pairing the labels
  # costs the most: a batch spans a short and a long length band.)
  def padding(batches):
    return sum(BATCH * lengths[b].max() - lengths[b].sum() for b in batches)
  rng = np.random.RandomState(0)
  random = [rng.choice(LABELLED_EXAMPLES, BATCH, replace=False) for _ in within]
  assert padding(within) < 0.8 * padding(random)


@pytest.mark.parametrize("skip", [3, GROUP_BATCHES + 1])
def test_grouping_within_labels_resumes_at_the_same_batch(labelled_records, skip):
  path, _, _ = labelled_records
  straight = read_labelled_batches(path, skip + 3, "label_ids")
  resumed = read_labelled_batches(path, 3, "label_ids", skip_batches=skip)
  np.testing.assert_array_equal(straight[skip:], resumed)


def test_length_ranks_within_labels_match_the_simulations(labelled_records):
  # The guard (length_grouping.label_skew) simulates the same sort keys as training uses.
  _, lengths, labels = labelled_records
  strata = labels * 5 + 2  # any int values
  with tf.Graph().as_default():
    keys = tfrecord_io._length_ranks_within_strata(  # pylint: disable=protected-access
        tf.constant(lengths), tf.constant(strata))
    with tf.Session() as sess:
      keys = sess.run(keys)
  np.testing.assert_allclose(
      keys, length_grouping._ranks_within_strata(lengths, strata),  # pylint: disable=protected-access
      atol=1e-6)
