# coding=utf-8
"""Tests of length_grouping.py, the log line that says how much --group_by_length skews
the label mix of training batches (issue 34): the figures on sets where length decides the
label and where it says nothing, the simulation against tfrecord_io's real batches,
run_classifier_mgpu.py logging the warning only where length decides the label, and
run_ner_mgpu.py logging the tag skew before training."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import records as classifier_records
import cli
from bert_mgpu.data import length_grouping
from bert_mgpu.data import tfrecord_io
from tiny_model import write_records
from tiny_task_files import tsv, write_model_files, write_text

WARNING_TEXT = "Grouping may cost accuracy here"


def long_tailed_lengths(rng, n):
  return np.clip(np.round(rng.lognormal(np.log(40), 0.6, n)), 3, 256).astype(np.int64)


# ---------------------------------------------------------------------------
# The figures and the line
# ---------------------------------------------------------------------------

def test_where_length_decides_the_label_grouped_batches_are_skewed_and_it_warns():
  rng = np.random.RandomState(1)
  lengths = long_tailed_lengths(rng, 20000)
  labels = (lengths > np.median(lengths)).astype(np.int64)
  skew = length_grouping.label_skew(lengths, length_grouping.one_hot(labels, 2), 32, 50)
  # Nearly every grouped batch holds one label: half the mix away from the data's.
  assert 0.45 < skew.grouped_skew <= 0.5
  assert skew.random_skew < 0.1
  assert skew.ratio > 5 and skew.warns
  assert skew.length_share > 0.9
  line = length_grouping.log_line(skew)
  assert line.startswith("group_by_length: batches grouped by length are %.1fx as "
                         "label-skewed as random batches" % skew.ratio)
  assert WARNING_TEXT in line and "without --group_by_length" in line
  # The from-scratch recipe that removed the plateau (issue #41).
  assert "--initializer=normal --adam_bias_correction" in line and "radam" in line


@pytest.mark.parametrize("num_labels", [2, 5])
def test_where_labels_do_not_depend_on_length_the_ratio_is_near_one_and_calm(num_labels):
  rng = np.random.RandomState(2)
  lengths = long_tailed_lengths(rng, 20000)
  labels = rng.randint(0, num_labels, len(lengths))
  skew = length_grouping.label_skew(lengths, length_grouping.one_hot(labels, num_labels),
                                    32, 50)
  assert 0.9 < skew.ratio < 1.1 and not skew.warns
  assert skew.length_share < 0.01
  line = length_grouping.log_line(skew)
  assert WARNING_TEXT not in line
  assert "Below %.1fx" % length_grouping.SKEW_WARNING_RATIO in line


def test_multi_hot_and_density_targets():
  rng = np.random.RandomState(3)
  lengths = long_tailed_lengths(rng, 5000)
  long_ = lengths > np.median(lengths)
  # Multi-hot: label 0 on the long examples, label 1 on every other at random.
  multi_hot = np.stack([long_, rng.rand(len(lengths)) < 0.5], axis=1).astype(np.float32)
  assert length_grouping.label_skew(lengths, multi_hot, 16, 50).warns
  # An entity density [n, 1] that falls with length; its distance is the difference.
  density = (1.0 / np.sqrt(lengths))[:, None]
  skew = length_grouping.label_skew(lengths, density, 16, 50)
  assert skew.warns and skew.length_share > 0.5
  flat = length_grouping.label_skew(lengths, rng.permutation(density), 16, 50)
  assert not flat.warns
  assert "tag-skewed" in length_grouping.log_line(skew, noun="tag")


def test_label_mix_distance_and_length_share_by_hand():
  means = np.array([[0.75, 0.25], [0.5, 0.5]])
  np.testing.assert_allclose(
      length_grouping.label_mix_distance(means, np.array([0.5, 0.5])), [0.25, 0.0])
  np.testing.assert_allclose(
      length_grouping.label_mix_distance(np.array([[0.1], [0.4]]), np.array([0.3])),
      [0.2, 0.1])
  lengths = np.array([5, 5, 9, 9])
  assert length_grouping.length_explained_share(
      lengths, length_grouping.one_hot([0, 0, 1, 1], 2)) == pytest.approx(1.0)
  assert length_grouping.length_explained_share(
      lengths, length_grouping.one_hot([0, 1, 0, 1], 2)) == pytest.approx(0.0)
  same = length_grouping.label_skew(lengths, length_grouping.one_hot([1, 1, 1, 1], 2), 2, 2)
  assert same.ratio == 1.0 and same.length_share == 0.0 and not same.warns


def test_tag_shares_count_only_tagged_positions():
  tag_ids = np.array([[0, 2, 1, 1, 0], [0, 0, 0, 0, 0]])
  tag_mask = np.array([[0, 1, 1, 1, 0], [0, 0, 0, 0, 0]])
  np.testing.assert_allclose(length_grouping.tag_shares(tag_ids, tag_mask, 3),
                             [[0, 2 / 3.0, 1 / 3.0], [0, 0, 0]], rtol=1e-6)


def test_the_module_imports_without_tensorflow():
  result = subprocess.run(
      [sys.executable, "-c", "import sys\nfrom bert_mgpu.data import length_grouping\n"
       "print('tensorflow' in sys.modules)"],
      cwd=cli.REPO_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
  assert result.stdout.decode().strip() == "False", result.stderr.decode()[-2000:]


def test_lengths_and_label_ids_are_read_back_from_feature_files(tmp_path):
  mask = np.array([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
  path = str(tmp_path / "single.tf_record")
  write_records(path, {"input_mask": mask, "label_ids": np.array([2, 0, 1])})
  lengths, label_ids = classifier_records.read_lengths_and_label_ids(path)
  np.testing.assert_array_equal(lengths, [2, 4, 1])
  np.testing.assert_array_equal(label_ids, [[2], [0], [1]])
  multi_hot = np.array([[1, 0, 1], [0, 0, 0], [0, 1, 0]])
  write_records(path, {"input_mask": mask, "label_ids": multi_hot})
  np.testing.assert_array_equal(classifier_records.read_lengths_and_label_ids(path)[1],
                                multi_hot)


def test_read_records_reads_what_tensorflow_reads(tmp_path):
  path = str(tmp_path / "some.tf_record")
  records = [b"", b"x", bytes(range(256)) * 40]
  with tf.io.TFRecordWriter(path) as writer:
    for record in records:
      writer.write(record)
  assert list(tfrecord_io.read_records(path)) == records
  assert list(tf.python_io.tf_record_iterator(path)) == records
  with open(path, "rb") as f:
    data = f.read()
  with open(path, "wb") as f:
    f.write(data[:-3])
  with pytest.raises(ValueError, match="ends inside a record"):
    list(tfrecord_io.read_records(path))


# ---------------------------------------------------------------------------
# The simulation against tfrecord_io's grouped batches
# ---------------------------------------------------------------------------

def real_mean_skew(path, spec, batch, group_by_length, group_batches, num_batches, targets,
                   stratify_by=None):
  """The mean label_mix_distance of tfrecord_io.make_dataset's first training batches."""
  with tf.Graph().as_default():
    dataset = tfrecord_io.make_dataset(
        [path], spec, batch, is_training=True, seed=1, shuffle_buffer=len(targets),
        length_multiple=None, group_by_length=group_by_length, group_batches=group_batches,
        stratify_by=stratify_by)
    next_batch = tf.data.make_one_shot_iterator(dataset).get_next()
    with tf.Session() as sess:
      batches = [sess.run(next_batch)["label_ids"] for _ in range(num_batches)]
  num_labels = targets.shape[1]
  means = np.stack([length_grouping.one_hot(ids, num_labels).mean(axis=0)
                    for ids in batches])  # [batches, num_labels]
  return length_grouping.label_mix_distance(means, targets.mean(axis=0)).mean()


def test_the_simulation_skews_as_much_as_the_real_batches(tmp_path):
  """Three labels, which length predicts in part: the mean skew of tfrecord_io's grouped
  batches, and of its ungrouped ones, over 3 epochs, are close to the simulation's."""
  seq, n, batch, group_batches = 48, 240, 8, 5
  rng = np.random.RandomState(4)
  lengths = rng.randint(3, seq + 1, n)
  labels = np.clip((lengths - 3) // 15 + rng.randint(-1, 2, n), 0, 2)
  mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)
  path = str(tmp_path / "train.tf_record")
  write_records(path, {"input_ids": mask, "input_mask": mask, "segment_ids": 0 * mask,
                       "label_ids": labels})
  spec = {"input_mask": tf.FixedLenFeature([seq], tf.int64),
          "label_ids": tf.FixedLenFeature([], tf.int64)}
  targets = length_grouping.one_hot(labels, 3)
  skew = length_grouping.label_skew(lengths, targets, batch, group_batches)
  for grouped, simulated in ((True, skew.grouped_skew), (False, skew.random_skew)):
    real = real_mean_skew(path, spec, batch, grouped, group_batches, 3 * n // batch, targets)
    assert simulated == pytest.approx(real, rel=0.1), grouped
  assert skew.ratio > 1.5
  # Grouped within each label (--group_by_length_within_label), batches keep the label mix.
  within = length_grouping.label_skew(lengths, targets, batch, group_batches, strata=labels)
  real = real_mean_skew(path, spec, batch, True, group_batches, 3 * n // batch, targets,
                        stratify_by="label_ids")
  assert within.grouped_skew == pytest.approx(real, rel=0.25)
  assert within.ratio < 0.8 and not within.warns


# ---------------------------------------------------------------------------
# run_classifier_mgpu.py logs it
# ---------------------------------------------------------------------------

CHARS = u"一二三四五六七八九十甲乙丙丁戊己庚辛壬癸"


def text_of(length, index):
  return u"".join(CHARS[(index + i) % len(CHARS)] for i in range(length))


def classifier_rows(length_decides):
  """64 examples of 2..17 characters. length_decides: "long" exactly on the longer half;
  else every length comes twice, once with each label."""
  rows = []
  for index in range(64):
    length = 2 + index // 4
    if length_decides:
      label = u"long" if length >= 10 else u"short"
    else:
      label = (u"long", u"short")[index % 2]
    rows.append((label, text_of(length, index)))
  return rows


def the_skew_line(result):
  """The one group_by_length line of a successful run's log, checked to come before the
  first training step."""
  cli.assert_succeeded(result)
  lines = result.stderr.splitlines()
  logged = [i for i, line in enumerate(lines) if "group_by_length: batches" in line]
  assert len(logged) == 1, result.stderr[-3000:]
  assert logged[0] < next(i for i, line in enumerate(lines) if "step 1/" in line)
  return lines[logged[0]]


@pytest.mark.parametrize("length_decides,multi_label,within_label", [
    (True, False, False), (True, False, True), (False, False, False), (True, True, True)])
def test_the_classifier_warns_only_where_length_decides_the_label(tmp_path, length_decides,
                                                                  multi_label, within_label):
  # Grouped within each label (--group_by_length_within_label), batches are not skewed, so
  # no warning; multi-label has no one label per example and groups by length alone.
  data_dir = str(tmp_path / "data")
  rows = classifier_rows(length_decides)
  vocab_file, config_file = write_model_files(data_dir, [text for _, text in rows])
  write_text(os.path.join(data_dir, "train.tsv"), tsv(rows))
  result = cli.run_script("run_classifier_mgpu.py", cli.flag_list({
      "task_name": "tsv", "data_dir": data_dir, "vocab_file": vocab_file,
      "bert_config_file": config_file, "output_dir": str(tmp_path / "out"),
      "do_train": True, "group_by_length": True, "multi_label": multi_label,
      "group_by_length_within_label": within_label,
      "max_seq_length": 24, "train_batch_size": 8, "n_gpus": 2, "num_train_epochs": 1,
      "save_checkpoints_steps": 1000, "log_steps": 1}))
  line = the_skew_line(result)
  if within_label and not multi_label:
    assert "grouped by length within each label" in line
  if length_decides and not (within_label and not multi_label):
    assert WARNING_TEXT in line and line.startswith("WARNING"), line
  else:
    assert WARNING_TEXT not in line and line.startswith("INFO"), line


def test_ner_logs_the_tag_skew_before_training(tmp_path):
  root = str(tmp_path / "data")
  subprocess.run([sys.executable, cli.script_path(os.path.join("scripts", "make_ner_data.py")),
                  "--output_dir", root, "--train_sentences", "64"],
                 check=True, stdout=subprocess.PIPE, timeout=120)
  result = cli.run_script("run_ner_mgpu.py", cli.flag_list({
      "data_dir": os.path.join(root, "conll"), "vocab_file": os.path.join(root, "vocab.txt"),
      "bert_config_file": os.path.join(root, "bert_config.json"),
      "output_dir": str(tmp_path / "out"), "do_train": True, "group_by_length": True,
      "n_gpus": 2, "max_seq_length": 32, "train_batch_size": 4, "num_train_epochs": 1,
      "save_checkpoints_steps": 1000, "log_steps": 1}))
  assert "as tag-skewed as random batches" in the_skew_line(result)
