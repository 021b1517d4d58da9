# coding=utf-8
"""--multi_label (issue 18, part 1): reading label sets, multi-hot records, the sigmoid head,
thresholds and scores, and one trained model's outputs, export, predict_text.py and --serve.

Expected values come from independent computations: label sets and scores written out by
hand, a NumPy BERT (tests/helpers/numpy_bert.py) with a NumPy binary cross-entropy for the
head, a brute-force search for the best F1 thresholds, the data files for order and counts,
and a one-tower graph for the two-tower update. The command-line tests share one training run
(module-scoped fixture). test_resuming_the_other_head_in_output_dir_is_refused is an expected
failure: a bug found while writing these tests (see its reason).
"""

import collections
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import types
import urllib.error
import urllib.request

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import class_labels
from bert_mgpu.classifier import feature_cache
from bert_mgpu.classifier import featurizing_pool
from bert_mgpu.classifier import input_examples
from bert_mgpu.classifier import model as classifier_model
from bert_mgpu.classifier import predictions
from bert_mgpu.classifier import records as classifier_records
from bert_mgpu.classifier import task_registry
from bert_mgpu.training import checkpoints
import cli
from bert_mgpu.classifier import multi_label
import modeling
import multigpu
import numpy_bert
from bert_mgpu.classifier import serving as classifier_serving
import tokenization
import trained_classifier
from trained_classifier import read_lines, write_text
from usage_errors import assert_usage_error

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "the", "cat", "sat",
         "a1", "a2", "a3"]


def write(path, text):
  """Writes `text` as UTF-8 (no newline translation), making the directory; returns path."""
  path = str(path)
  if not os.path.isdir(os.path.dirname(path)):
    os.makedirs(os.path.dirname(path))
  write_text(path, text)
  return path


def read_split(task, data_dir, split, separator=","):
  return task_registry.get_processor(task, separator).get_examples(str(data_dir), split)


def labels_of(examples):
  return [example.label for example in examples]


# ---------------------------------------------------------------------------
# 1. Reading label sets
# ---------------------------------------------------------------------------

def test_tsv_label_sets_with_the_default_separator(tmp_path):
  write(tmp_path / "train.tsv",
        "label\ttext_a\n"
        "b,a\tfirst\n"
        " c , a ,c, \tsecond\n"  # spaces around labels, a repeat, an empty piece
        "\tthird\n"              # no label at all
        "a|b\tfourth\n")         # not the separator: one label "a|b"
  write(tmp_path / "dev.tsv", "label\ttext_a\n\tno labels in dev\nb\tone\n")
  write(tmp_path / "test.tsv", "label\ttext_a\n\tunlabelled\na,b\tlabelled\n")
  train = read_split("tsv", tmp_path, "train")
  # Each label once, stripped, in the order of the field.
  assert labels_of(train) == [("b", "a"), ("c", "a"), (), ("a|b",)]
  assert [e.text_a for e in train] == ["first", "second", "third", "fourth"]
  assert [e.source_line for e in train] == [2, 3, 4, 5]
  assert labels_of(read_split("tsv", tmp_path, "dev")) == [(), ("b",)]
  # A test example without labels has none to score against: None, as single-label tests.
  assert labels_of(read_split("tsv", tmp_path, "test")) == [None, ("a", "b")]
  processor = task_registry.get_processor("tsv", ",")
  # The sorted distinct single labels, not the label fields.
  assert processor.get_labels(str(tmp_path)) == ["a", "a|b", "b", "c"]
  assert class_labels.resolve_label_list(processor, str(tmp_path), str(tmp_path / "out"),
                                         True) == ["a", "a|b", "b", "c"]


def test_another_separator_and_csv_quoting(tmp_path):
  write(tmp_path / "train.tsv", "label\ttext_a\nx|y\tone\n y | x,z \ttwo\n")
  assert labels_of(read_split("tsv", tmp_path, "train", "|")) == [("x", "y"), ("y", "x,z")]
  # A separator of several characters.
  assert labels_of(read_split("tsv", tmp_path, "train", " | ")) == [("x|y",), ("y", "x,z")]
  write(tmp_path / "train.csv", 'label,text_a\n"news, sport","a, b"\n,empty\n')
  assert labels_of(read_split("csv", tmp_path, "train")) == [("news", "sport"), ()]
  assert task_registry.get_processor("csv", ",").get_labels(str(tmp_path)) == [
      "news", "sport"]


def test_jsonl_lists_and_strings(tmp_path):
  objects = [{"label": ["b", " a ", "b"], "text": "list"},
             {"label": "c,a", "text": "string split at the separator"},
             {"label": [], "text": "empty list"},
             {"label": "", "text": "empty string"},
             {"label": ["a,b"], "text": "a list item is one label"},
             {"label": ["b", 7], "text": "integers are read as _json_value reads them"}]
  write(tmp_path / "train.jsonl", "".join(json.dumps(o) + "\n" for o in objects))
  assert labels_of(read_split("jsonl", tmp_path, "train")) == [
      ("b", "a"), ("c", "a"), (), (), ("a,b",), ("b", "7")]
  write(tmp_path / "test.jsonl", '{"text": "no label key"}\n{"label": [], "text": "t"}\n'
        '{"label": ["c"], "text": "u"}\n')
  assert labels_of(read_split("jsonl", tmp_path, "test")) == [None, None, ("c",)]
  # Without --multi_label a list is still refused (one label per example).
  assert_usage_error(lambda: read_split("jsonl", tmp_path, "train", None),
                     str(tmp_path / "train.jsonl"), "line 1")


@pytest.mark.parametrize("item", [1.5, None, ["a"], True, {"a": 1}])
def test_jsonl_list_item_that_is_not_a_string(tmp_path, item):
  write(tmp_path / "train.jsonl",
        '{"label": ["a"], "text": "fine"}\n' +
        json.dumps({"label": ["b", item], "text": "bad"}) + "\n")
  assert_usage_error(lambda: read_split("jsonl", tmp_path, "train"),
                     str(tmp_path / "train.jsonl"), "line 2", "label")


def test_jsonl_list_item_with_an_unpaired_surrogate(tmp_path):
  # It would pass reading and fail writing labels.txt as UTF-8, with a traceback.
  write(tmp_path / "train.jsonl", '{"label": ["a"], "text": "t"}\n'
        '{"label": ["b", "\\ud800"], "text": "t"}\n')
  assert_usage_error(lambda: read_split("jsonl", tmp_path, "train"),
                     str(tmp_path / "train.jsonl"), "line 2", "surrogate")


def test_unknown_label_in_dev_names_file_line_and_label(tmp_path):
  write(tmp_path / "train.tsv", "label\ttext_a\na,b\tone\nb\ttwo\n")
  dev_file = write(tmp_path / "dev.tsv", "label\ttext_a\nb\tfine\n\tnone\nb, zzz ,a\tbad\n")
  processor = task_registry.get_processor("tsv", ",")
  label_list = class_labels.resolve_label_list(processor, str(tmp_path), str(tmp_path),
                                               True)
  assert label_list == ["a", "b"]
  dev = processor.get_dev_examples(str(tmp_path))
  message = assert_usage_error(lambda: class_labels.check_labels(dev, label_list),
                               dev_file + " line 4", "'zzz'")
  assert "'b, zzz ,a'" not in message  # the unknown label, not the whole field
  # Featurizing refuses it too (the records never hold a partial label set).
  vocab_file = write(tmp_path / "vocab.txt", "".join(t + "\n" for t in VOCAB))
  assert_usage_error(lambda: featurizing_pool.write_features(
      dev, label_list, 8, vocab_file, True, str(tmp_path / "dev.tf_record"),
      options=input_examples.FeatureOptions(multi_label=True, label_separator=",")),
                     dev_file + " line 4", "'zzz'")
  assert not os.path.exists(str(tmp_path / "dev.tf_record"))


def test_a_label_holding_the_separator_is_refused(tmp_path):
  write(tmp_path / "train.tsv", "label\ttext_a\nx\tone\n")
  write(tmp_path / "labels.txt", "x\nsport|news\n")
  assert_usage_error(lambda: class_labels.resolve_label_list(
      task_registry.get_processor("tsv", "|"), str(tmp_path), str(tmp_path), True),
                     "'sport|news'", "separator", "'|'")
  # The same labels.txt is fine with another separator, and without --multi_label.
  for separator in (",", None):
    assert class_labels.resolve_label_list(
        task_registry.get_processor("tsv", separator), str(tmp_path), str(tmp_path),
        True) == ["x", "sport|news"]
  # A JSON list item holding the separator would be written back as two labels.
  jsonl_dir = tmp_path / "jsonl"
  write(jsonl_dir / "train.jsonl", '{"label": ["a,b"], "text": "t"}\n')
  assert_usage_error(lambda: class_labels.resolve_label_list(
      task_registry.get_processor("jsonl", ","), str(jsonl_dir), str(jsonl_dir), True),
                     "'a,b'", "separator")


def test_multi_label_only_for_tsv_csv_and_jsonl():
  for name in task_registry.PROCESSORS:
    if name in ("tsv", "csv", "jsonl"):
      assert task_registry.get_processor(name, ",").label_separator == ","
      assert task_registry.get_processor(name).label_separator is None
    else:
      assert_usage_error(lambda: task_registry.get_processor(name, ","), "--multi_label",
                         name)
  for separator in ("", " ", "\t"):
    assert_usage_error(lambda: task_registry.get_processor("tsv", separator),
                       "--label_separator")


# ---------------------------------------------------------------------------
# 2. Multi-hot records and the feature cache
# ---------------------------------------------------------------------------

def parse_records(path, max_seq_length, num_labels):
  with tf.Graph().as_default():
    serialized = tf.placeholder(tf.string, [])
    parsed = tf.parse_single_example(
        serialized, classifier_records.input_feature_spec(max_seq_length, num_labels))
    with tf.Session() as sess:
      return [sess.run(parsed, {serialized: record})
              for record in tf.io.tf_record_iterator(path)]


def test_multi_hot_label_ids_survive_a_tfrecord_round_trip(tmp_path):
  vocab_file = write(tmp_path / "vocab.txt", "".join(t + "\n" for t in VOCAB))
  label_list = ["x", "y", "z"]
  examples = [input_examples.InputExample("g0", "hello world", label=("z", "x")),
              input_examples.InputExample("g1", "the cat", label=()),
              input_examples.InputExample("g2", "sat", "a1 a2", label=("y",)),
              input_examples.InputExample("g3", "a3", label=None),  # a test example
              input_examples.InputExample("g4", "cat", label=("x", "y", "z"))]
  expected = [[1, 0, 1], [0, 0, 0], [0, 1, 0], [0, 0, 0], [1, 1, 1]]
  options = input_examples.FeatureOptions(multi_label=True, label_separator="|")
  serial, pooled = str(tmp_path / "serial.tf_record"), str(tmp_path / "pooled.tf_record")
  assert featurizing_pool.write_features(examples, label_list, 8, vocab_file, True, serial,
                                         num_workers=1, options=options) == 5
  # Worker processes get the options too.
  assert featurizing_pool.write_features(examples, label_list, 8, vocab_file, True, pooled,
                                         num_workers=2, pool_threshold=1, options=options) == 5
  assert list(tf.io.tf_record_iterator(pooled)) == list(tf.io.tf_record_iterator(serial))
  records = parse_records(serial, 8, 3)
  np.testing.assert_array_equal([r["label_ids"] for r in records], expected)
  assert records[0]["label_ids"].dtype == np.int64
  assert [int(r["is_real_example"]) for r in records] == [1] * 5
  vocab = dict((token, i) for i, token in enumerate(VOCAB))
  np.testing.assert_array_equal(
      records[2]["input_ids"],
      [vocab[t] for t in ("[CLS]", "sat", "[SEP]", "a1", "a2", "[SEP]")] + [0, 0])
  np.testing.assert_array_equal(records[2]["segment_ids"], [0, 0, 0, 1, 1, 1, 0, 0])
  # The single-label spec cannot parse these records: the two formats do not mix silently.
  with pytest.raises(tf.errors.InvalidArgumentError):
    parse_records(serial, 8, None)


def test_cache_key_follows_multi_label_and_separator_only(tmp_path):
  train_file = write(tmp_path / "data" / "train.tsv", "label\ttext_a\na,b\thello\n")
  vocab_file = write(tmp_path / "vocab.txt", "".join(t + "\n" for t in VOCAB))

  def key(options=None):
    args = ("train", [train_file], ["a", "b"], 8, vocab_file, True, "tsv")
    if options is None:
      return feature_cache.features_cache_key(*args)
    return feature_cache.features_cache_key(*args, options=options)

  def sha(data):
    return hashlib.sha256(data).digest()

  # A single-label run's key: the settings, the data file, the vocab and tokenization.py,
  # with nothing about labels beyond the list (as before multi-label existed).
  settings = json.dumps({"format_version": feature_cache.FEATURE_FORMAT_VERSION,
                         "split": "train", "task_name": "tsv", "max_seq_length": 8,
                         "label_list": ["a", "b"], "do_lower_case": True}, sort_keys=True)
  digest = hashlib.sha256(sha(settings.encode("utf-8")))
  for path in (train_file, vocab_file, os.path.splitext(tokenization.__file__)[0] + ".py"):
    with open(path, "rb") as f:
      digest.update(sha(f.read()))
  single = key()
  assert single == digest.hexdigest()
  Options = input_examples.FeatureOptions  # pylint: disable=invalid-name
  assert key(Options()) == single
  assert key(Options(multi_label=False, label_separator="|")) == single
  multi_comma = key(Options(multi_label=True, label_separator=","))
  multi_bar = key(Options(multi_label=True, label_separator="|"))
  assert len({single, multi_comma, multi_bar}) == 3
  assert feature_cache.FEATURE_FORMAT_VERSION >= 2


# ---------------------------------------------------------------------------
# 3. The sigmoid head against NumPy
# ---------------------------------------------------------------------------

HEAD_CONFIG = dict(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                   intermediate_size=32, hidden_dropout_prob=0.0,
                   attention_probs_dropout_prob=0.0, max_position_embeddings=16,
                   type_vocab_size=2, hidden_act="gelu")
HEAD_LABELS = 5


def head_weights(seed):
  """Random BERT weights (numpy_bert) and a multi-label head big enough for logits of
  several units, so that the sigmoids and the loss are far from their values at 0."""
  rng = np.random.RandomState(seed)
  weights = numpy_bert.random_weights(types.SimpleNamespace(**HEAD_CONFIG), seed)
  weights["multi_label/output_weights"] = (
      rng.randn(HEAD_LABELS, HEAD_CONFIG["hidden_size"]) * 1.5).astype(np.float32)
  weights["multi_label/output_bias"] = (rng.randn(HEAD_LABELS) * 0.5).astype(np.float32)
  return weights


def head_batch(seed, n):
  rng = np.random.RandomState(seed)
  seq = 8
  input_mask = np.zeros([n, seq], np.int32)
  for row in range(n):
    input_mask[row, :rng.randint(3, seq + 1)] = 1
  label_ids = (rng.rand(n, HEAD_LABELS) > 0.5).astype(np.int32)
  label_ids[0] = 0  # an example without labels
  label_ids[1] = 1  # one with every label
  return {"input_ids": rng.randint(1, HEAD_CONFIG["vocab_size"], [n, seq]).astype(np.int32),
          "input_mask": input_mask,
          "segment_ids": (rng.rand(n, seq) > 0.5).astype(np.int32) * input_mask,
          "label_ids": label_ids}


def numpy_head(weights, batch):
  """(probabilities [n, labels], per-example loss [n], loss) in float64."""
  pooled = numpy_bert.bert_forward(weights, types.SimpleNamespace(**HEAD_CONFIG),
                                   batch["input_ids"], batch["input_mask"],
                                   batch["segment_ids"])["pooled_output"]
  logits = (pooled.dot(weights["multi_label/output_weights"].astype(np.float64).T) +
            weights["multi_label/output_bias"])
  probabilities = 1.0 / (1.0 + np.exp(-logits))
  y = batch["label_ids"].astype(np.float64)
  bce = -(y * np.log(probabilities) + (1.0 - y) * np.log(1.0 - probabilities))
  per_example = bce.mean(axis=1)  # over the labels (PyTorch's BCEWithLogitsLoss)...
  return probabilities, per_example, per_example.mean()  # ...then over the examples


def test_sigmoid_head_gives_numpy_probabilities_and_binary_cross_entropy():
  weights = head_weights(seed=5)
  batch = head_batch(seed=6, n=6)
  config = modeling.BertConfig.from_dict(HEAD_CONFIG)
  with tf.Graph().as_default():
    features = {name: tf.constant(value) for name, value in batch.items()}
    outputs = classifier_model.create_model_fn(config, HEAD_LABELS, multi_label=True)(
        features, False)
    shapes = dict((v.op.name, v.shape.as_list()) for v in tf.trainable_variables())
    with tf.Session() as sess:
      for variable in tf.global_variables():
        variable.load(weights[variable.op.name], sess)
      values = sess.run(outputs)
  assert shapes["multi_label/output_weights"] == [HEAD_LABELS, HEAD_CONFIG["hidden_size"]]
  assert shapes["multi_label/output_bias"] == [HEAD_LABELS]
  assert "output_weights" not in shapes and "output_bias" not in shapes
  assert set(shapes) == set(weights)
  probabilities, per_example, loss = numpy_head(weights, batch)
  # Far from the trivial answers: probabilities spread out, a loss far from log 2.
  assert probabilities.min() < 0.4 and probabilities.max() > 0.95
  assert abs(loss - np.log(2.0)) > 0.1
  np.testing.assert_allclose(values["probabilities"], probabilities, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(values["per_example_loss"], per_example, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(values["loss"], loss, rtol=1e-4)
  np.testing.assert_array_equal(values["label_ids"], batch["label_ids"])
  assert values["probabilities"].dtype == np.float32


def test_sigmoid_head_without_labels_returns_only_probabilities():
  config = modeling.BertConfig.from_dict(HEAD_CONFIG)
  batch = head_batch(seed=6, n=3)
  with tf.Graph().as_default():
    features = {name: tf.constant(batch[name])
                for name in ("input_ids", "input_mask", "segment_ids")}
    outputs = classifier_model.create_model_fn(config, HEAD_LABELS, True)(features, False)
    assert sorted(outputs) == ["probabilities"]
    assert outputs["probabilities"].shape.as_list() == [3, HEAD_LABELS]


def one_update(num_towers, batch, initial):
  """Builds the training graph of `num_towers` CPU towers with the multi-label head, loads
  `initial`, applies one update to `batch`; returns (final values, update_loss, global_norm)."""
  config = modeling.BertConfig.from_dict(HEAD_CONFIG)
  with tf.Graph().as_default():
    plan = multigpu.plan_devices(num_towers, visible_gpus=0)
    placeholders = {name: tf.placeholder(tf.int32, [None] + list(value.shape[1:]), name=name)
                    for name, value in batch.items()}
    model_fn = classifier_model.create_model_fn(config, HEAD_LABELS, multi_label=True)
    ops = multigpu.build_training(plan, model_fn, placeholders, 1e-3, 10, 0, "adamw")
    sync = multigpu.build_start_sync(plan)
    trainable = set(v.op.name for v in tf.trainable_variables())
    saved = [v for v in multigpu.saveable_variables() if v.op.name in trainable]
    assert sorted(v.op.name for v in saved) == sorted(initial)
    with tf.Session(config=plan.session_config()) as sess:
      sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
      for variable in saved:
        variable.load(initial[variable.op.name], sess)
      if sync is not None:
        sess.run(sync)
      _, loss, norm = sess.run([ops.train_op, ops.update_loss, ops.global_norm],
                               {placeholders[k]: v for k, v in batch.items()})
      final = dict(zip([v.op.name for v in saved], sess.run(saved)))
  return final, loss, norm


def test_two_towers_give_the_update_of_one_device():
  initial = head_weights(seed=7)
  batch = head_batch(seed=8, n=8)
  one, one_loss, one_norm = one_update(1, batch, initial)
  two, two_loss, two_norm = one_update(2, batch, initial)
  # The loss of the step is the NumPy loss of the whole global batch, on both.
  expected_loss = numpy_head(initial, batch)[2]
  np.testing.assert_allclose([one_loss, two_loss], [expected_loss] * 2, rtol=1e-4)
  np.testing.assert_allclose(two_norm, one_norm, rtol=1e-4)
  update_one = np.concatenate([(one[k] - initial[k]).ravel() for k in sorted(initial)])
  update_two = np.concatenate([(two[k] - initial[k]).ravel() for k in sorted(initial)])
  assert np.linalg.norm(update_one) > 1e-3
  head_update = one["multi_label/output_weights"] - initial["multi_label/output_weights"]
  assert np.abs(head_update).min() > 0  # every head weight moved
  assert np.linalg.norm(update_two - update_one) <= 1e-4 * np.linalg.norm(update_one)


# ---------------------------------------------------------------------------
# 4. Thresholds and scores
# ---------------------------------------------------------------------------

def f1_at(probabilities, gold, threshold):
  predicted = probabilities >= threshold
  true_positives = np.sum(predicted & gold)
  denominator = predicted.sum() + gold.sum()
  return 2.0 * true_positives / denominator if denominator else 0.0


def best_f1(probabilities, gold):
  """The best F1 of any threshold: predicting the examples at or above each probability."""
  return max([f1_at(probabilities, gold, p) for p in np.unique(probabilities)] + [0.0])


def test_tuned_thresholds_on_hand_made_cases():
  # Column 0: F1 of the top 1..5 is 1/2, 4/5, 2/3, 6/7, 3/4: the best keeps four, so the
  # threshold is halfway between 0.3 and 0.2.
  # Column 1: no positive example: the default 0.5.
  # Column 2: the top two alone would give F1 1, but 0.5 is tied: no threshold splits the
  # tie, so the best is keeping three (F1 4/5): halfway between 0.5 and 0.2.
  # Column 3: every example positive: all kept, the threshold below the lowest.
  probabilities = np.array([[0.9, 0.9, 0.8, 0.4],
                            [0.8, 0.1, 0.5, 0.3],
                            [0.7, 0.7, 0.5, 0.2],
                            [0.3, 0.3, 0.2, 0.9],
                            [0.2, 0.2, 0.2, 0.6]], np.float32)
  gold = np.array([[1, 0, 1, 1],
                   [1, 0, 1, 1],
                   [0, 0, 0, 1],
                   [1, 0, 0, 1],
                   [0, 0, 0, 1]])
  thresholds = multi_label.tune_thresholds(probabilities, gold)
  assert thresholds.shape == (4,)
  np.testing.assert_allclose(thresholds[:3], [0.25, 0.5, 0.35], atol=1e-7)
  assert 0.0 < thresholds[3] < 0.2
  predicted = multi_label.predicted_sets(probabilities, thresholds)
  np.testing.assert_array_equal(predicted[:, 0], [1, 1, 1, 1, 0])
  np.testing.assert_array_equal(predicted[:, 1], [1, 0, 1, 0, 0])
  np.testing.assert_array_equal(predicted[:, 2], [1, 1, 1, 0, 0])
  np.testing.assert_array_equal(predicted[:, 3], [1, 1, 1, 1, 1])


def test_tuned_thresholds_split_adjacent_float32_probabilities_as_the_export_does():
  """Two positives and a negative one float32 step apart: the tuned threshold must keep
  the positives and drop the negative when compared in float32 (the exported model's
  comparison), not only in float64."""
  low = np.float32(0.3)
  high = np.nextafter(low, np.float32(1.0))  # the next float32 above 0.3
  probabilities = np.array([[0.9], [high], [low], [0.1]], np.float32)
  gold = np.array([[1], [1], [0], [0]])
  thresholds = multi_label.tune_thresholds(probabilities, gold)
  in_float32 = probabilities[:, 0] >= np.float32(thresholds[0])
  np.testing.assert_array_equal(in_float32, [True, True, False, False])
  np.testing.assert_array_equal(multi_label.predicted_sets(probabilities, thresholds)[:, 0],
                                [True, True, False, False])
  assert np.float32(thresholds[0]) == thresholds[0]  # a float32 value, written as such


def test_tuned_thresholds_reach_the_best_f1_of_a_brute_force_search():
  rng = np.random.RandomState(0)
  # Probabilities on a coarse grid, so there are many ties.
  probabilities = (rng.randint(1, 20, [60, 6]) / 20.0).astype(np.float32)
  gold = rng.rand(60, 6) < np.array([0.05, 0.2, 0.5, 0.8, 0.3, 0.0])
  gold[:, 0] |= probabilities[:, 0] > 0.8  # a label the probabilities predict well
  thresholds = multi_label.tune_thresholds(probabilities, gold.astype(np.int64))
  for label in range(5):
    assert gold[:, label].any()
    column = probabilities[:, label].astype(np.float64)
    assert f1_at(column, gold[:, label], thresholds[label]) == pytest.approx(
        best_f1(column, gold[:, label]), abs=1e-12)
    # Not on an example's probability: halfway between two of them.
    assert thresholds[label] not in set(column)
  assert thresholds[5] == 0.5


def test_multi_label_metrics_by_hand():
  labels = ["a", "b", "c", "d"]
  thresholds = np.array([0.5, 0.65, 0.4, 0.5])
  probabilities = np.array([[0.9, 0.6, 0.1, 0.1],    # {a}      gold {a}     exact
                            [0.2, 0.7, 0.8, 0.1],    # {b, c}   gold {b, c}  exact
                            [0.4, 0.1, 0.3, 0.1],    # {}       gold {}      exact
                            [0.6, 0.2, 0.45, 0.1]],  # {a, c}   gold {a, b}
                           np.float32)
  gold = np.array([[1, 0, 0, 0], [0, 1, 1, 0], [0, 0, 0, 0], [1, 1, 0, 0]])
  per_example_loss = np.array([0.1, 0.2, 0.3, 0.6], np.float32)
  metrics, report = multi_label.multi_label_metrics(
      {"probabilities": probabilities, "label_ids": gold, "per_example_loss": per_example_loss},
      labels, thresholds)
  # True positives a 2, b 1, c 1; predicted a 2, b 1, c 2; gold a 2, b 2, c 1.
  assert metrics["micro_f1"] == pytest.approx(2 * 4 / (5 + 5))
  # F1 a 1, b 2/3, c 2/3; d is neither in gold nor predicted and is left out.
  assert metrics["macro_f1"] == pytest.approx((1 + 2 / 3 + 2 / 3) / 3)
  assert metrics["exact_match"] == pytest.approx(0.75)
  assert metrics["eval_accuracy"] == metrics["exact_match"]
  assert metrics["eval_loss"] == pytest.approx(0.3)
  rows = report["per_label"]
  assert report["labels"] == labels and report["num_examples"] == 4
  assert (rows["b"]["precision"], rows["b"]["recall"]) == (pytest.approx(1.0),
                                                           pytest.approx(0.5))
  assert (rows["c"]["precision"], rows["c"]["recall"]) == (pytest.approx(0.5),
                                                           pytest.approx(1.0))
  assert [rows[l]["support"] for l in labels] == [2, 2, 1, 0]
  assert [rows[l]["predicted"] for l in labels] == [2, 1, 2, 0]
  assert [rows[l]["threshold"] for l in labels] == pytest.approx(list(thresholds))
  assert rows["d"]["f1"] == 0.0
  text = multi_label.format_eval_report(metrics, report)
  assert "micro-F1: 0.8000" in text and "exact match: 0.7500" in text
  assert len(text.splitlines()) == 3 + len(labels)


@pytest.mark.parametrize("value,expected", [("0.5", 0.5), (" 0.25 ", 0.25), ("tuned", "tuned"),
                                            ("Tuned", "tuned")])
def test_parse_threshold(value, expected):
  assert multi_label.parse_threshold(value) == expected


@pytest.mark.parametrize("value", ["0", "1", "1.5", "-0.1", "half", "", "nan"])
def test_parse_threshold_refuses(value):
  assert_usage_error(lambda: multi_label.parse_threshold(value), "--multi_label_threshold")


def test_thresholds_file_round_trip_by_label_name(tmp_path):
  multi_label.write_thresholds(str(tmp_path), ["x", "y", "z"], [0.1, 0.2, 0.3], "test")
  with open(str(tmp_path / "thresholds.json"), encoding="utf-8") as f:
    assert json.load(f) == {"labels": ["x", "y", "z"], "thresholds": [0.1, 0.2, 0.3],
                            "source": "test"}
  np.testing.assert_array_equal(
      multi_label.read_thresholds(str(tmp_path), ["z", "x", "y"]), [0.3, 0.1, 0.2])
  assert multi_label.read_thresholds(str(tmp_path / "nowhere"), ["x"]) is None
  assert_usage_error(lambda: multi_label.read_thresholds(str(tmp_path), ["x", "w"]), "'w'",
                     "thresholds.json")
  write(tmp_path / "thresholds.json", "{")
  assert_usage_error(lambda: multi_label.read_thresholds(str(tmp_path), ["x"]),
                     "thresholds.json")


def test_predict_outputs_in_label_list_order_with_empty_lines(tmp_path):
  examples = [input_examples.InputExample("t0", "first", label=("b",)),
              input_examples.InputExample("t1", "second"),
              input_examples.InputExample("t2", "third", label=("c", "a"))]
  probabilities = np.array([[0.7, 0.1, 0.9],    # c before a in probability: a;c
                            [0.2, 0.3, 0.4],    # none reaches its threshold: empty
                            [0.5, 0.6, 0.59]],  # exactly at a's threshold: a;b
                           np.float32)
  predictions.write_predict_outputs(str(tmp_path), examples, probabilities,
                                    ["a", "b", "c"], np.array([0.5, 0.6, 0.6]), ";")
  assert read_lines(str(tmp_path / "predict.txt")) == ["a;c", "", "a;b"]
  np.testing.assert_array_equal(
      read_probabilities(str(tmp_path / "test_results.tsv")), probabilities)
  assert read_lines(str(tmp_path / "predict_detail.tsv")) == [
      "id\ttext_a\tpredicted_labels\tgold_labels", "t0\tfirst\ta;c\tb", "t1\tsecond\t\t",
      "t2\tthird\ta;b\tc;a"]


# ---------------------------------------------------------------------------
# 5. One trained multi-label model: its files, export, predict_text.py and refusals
# ---------------------------------------------------------------------------

SEPARATOR = "|"  # a regular-expression character: the export's label join must escape it
DIGIT_LABEL = u"数字"
# With 2 towers x 8 examples, dev and test end in a batch padded with fake examples.
NUM_TRAIN, NUM_DEV, NUM_TEST = 48, 21, 20
MAX_SEQ_LENGTH = 32

E2E = collections.namedtuple("E2E", [
    "root", "data_dir", "output_dir", "export_version", "labels", "dev", "test", "result",
    "config_file", "vocab_file", "config"])
E2E.__doc__ = """The shared run: dev and test are (label tuple, text) rows of the files."""


def label_sets(rows):
  """(topic, text) rows of the demo data as label sets: the topic, plus DIGIT_LABEL when
  the text holds a digit; every sixth example has no label."""
  sets = []
  for index, (topic, text) in enumerate(rows):
    labels = (topic,) + ((DIGIT_LABEL,) if re.search("[0-9]", text) else ())
    sets.append((() if index % 6 == 5 else labels, text))
  return sets


def write_init_checkpoint(config_dict, num_labels, path):
  """Large random BERT weights and a multi-label head, so texts differ clearly."""
  values = numpy_bert.random_weights(types.SimpleNamespace(**config_dict), seed=3)
  rng = np.random.RandomState(4)
  values["multi_label/output_weights"] = rng.randn(
      num_labels, config_dict["hidden_size"]).astype(np.float32)
  values["multi_label/output_bias"] = (rng.randn(num_labels) * 0.1).astype(np.float32)
  return checkpoints.write_arrays(values, path)


def run_classifier(flags):
  return cli.run_script("run_classifier_mgpu.py", cli.flag_list(flags))


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("multi_label"))
  data_dir = os.path.join(root, "data")
  subprocess.run([sys.executable, trained_classifier.MAKE_DEMO_DATA, "--output_dir", data_dir],
                 check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
  splits = {}
  for split, count in (("train", NUM_TRAIN), ("dev", NUM_DEV), ("test", NUM_TEST)):
    path = os.path.join(data_dir, split + ".tsv")
    lines = read_lines(path)
    assert lines[0] == "label\ttext_a"
    splits[split] = label_sets([tuple(line.split("\t")) for line in lines[1:count + 1]])
    body = "".join("%s\t%s\n" % (SEPARATOR.join(labels), text)
                   for labels, text in splits[split])
    if split == "train":  # spaces and a repeat in one field
      labels, text = splits["train"][0]
      body += " %s | %s |%s \t%s\n" % (labels[0], labels[-1], labels[0], text)
    write_text(path, "label\ttext_a\n" + body)
  os.remove(os.path.join(data_dir, "labels.txt"))
  config_file = os.path.join(data_dir, "bert_config.json")
  with open(config_file, encoding="utf-8") as f:
    config = json.load(f)
  config.update(trained_classifier.TINY_CONFIG)
  write_text(config_file, json.dumps(config, indent=2) + "\n")
  labels = sorted(set(label for labels, _ in splits["train"] for label in labels))
  assert len(labels) == 6 and DIGIT_LABEL in labels
  init_checkpoint = write_init_checkpoint(config, len(labels),
                                          os.path.join(root, "init", "bert_model.ckpt"))
  output_dir = os.path.join(root, "model")
  export_dir = os.path.join(root, "exports")
  result = run_classifier(collections.OrderedDict([
      ("task_name", "tsv"), ("data_dir", data_dir),
      ("vocab_file", os.path.join(data_dir, "vocab.txt")), ("bert_config_file", config_file),
      ("init_checkpoint", init_checkpoint), ("output_dir", output_dir),
      ("multi_label", True), ("label_separator", SEPARATOR),
      ("multi_label_threshold", "tuned"), ("do_train", True), ("do_eval", True),
      ("do_predict", True), ("n_gpus", 2), ("max_seq_length", MAX_SEQ_LENGTH),
      ("train_batch_size", 8), ("eval_batch_size", 8), ("predict_batch_size", 8),
      ("learning_rate", 5e-3), ("num_train_epochs", 10),
      ("save_checkpoints_steps", 5), ("random_seed", 7), ("export_dir", export_dir)]))
  cli.assert_succeeded(result)
  return E2E(root, data_dir, output_dir, os.path.join(export_dir, "1"), labels, splits["dev"],
             splits["test"], result, config_file, os.path.join(data_dir, "vocab.txt"), config)


def read_probabilities(path):
  """test_results.tsv rows as the float32 values the run compared with its thresholds."""
  return np.array([[float(p) for p in line.split("\t")] for line in read_lines(path)],
                  np.float32)


def read_thresholds_json(model):
  with open(os.path.join(model.output_dir, "thresholds.json"), encoding="utf-8") as f:
    content = json.load(f)
  assert content["labels"] == model.labels
  return np.array(content["thresholds"], np.float64), content


def expected_lines(probabilities, thresholds, labels):
  """Each row's labels reaching their thresholds, in label-list order, joined."""
  return [SEPARATOR.join(label for label, p, t in zip(labels, row, thresholds) if p >= t)
          for row in probabilities]


def assert_clear_of_thresholds(probabilities, thresholds, margin=1e-6):
  """No probability lies so close to its threshold that float rounding between two ways of
  computing it could flip the label (else the exact comparisons below could not hold)."""
  closest = np.abs(np.asarray(probabilities, np.float64) - thresholds).min()
  assert closest > margin, ("a probability is %g from its threshold: change the fixture's "
                            "seed" % closest)


def multi_hot(label_sets_, labels):
  return np.array([[int(label in row) for label in labels] for row in label_sets_])


def run_export(version_dir, vocab_file, texts):
  """The serving_default outputs of the SavedModel, loaded with TF's own loader."""
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  features = classifier_serving.featurize(tokenizer, MAX_SEQ_LENGTH, texts)
  with tf.Graph().as_default() as graph, tf.Session(graph=graph) as sess:
    meta_graph = tf.saved_model.loader.load(sess, [tf.saved_model.tag_constants.SERVING],
                                            version_dir)
    signature = meta_graph.signature_def["serving_default"]
    inputs = {name: graph.get_tensor_by_name(signature.inputs[name].name)
              for name in ("input_ids", "input_mask", "segment_ids")}
    outputs = {name: graph.get_tensor_by_name(info.name)
               for name, info in signature.outputs.items()}
    values = sess.run(outputs, {inputs[name]: features.arrays[name] for name in inputs})
  return values, signature


def test_label_list_thresholds_and_settings_files(e2e):
  assert read_lines(os.path.join(e2e.output_dir, "labels.txt")) == e2e.labels
  thresholds, content = read_thresholds_json(e2e)
  assert content["source"].startswith("tuned")
  assert ((thresholds > 0) & (thresholds < 1)).all()
  with open(os.path.join(e2e.output_dir, "model_settings.json"), encoding="utf-8") as f:
    settings = json.load(f)
  expected = {"model": "classifier", "task_name": "tsv", "do_lower_case": True,
              "max_seq_length": MAX_SEQ_LENGTH, "multi_label": True,
              "label_separator": SEPARATOR}
  assert dict((key, settings.get(key)) for key in expected) == expected
  # micro-F1 is the default --best_metric of a multi-label run.
  with open(os.path.join(e2e.output_dir, "best", "best_metric.json"), encoding="utf-8") as f:
    assert json.load(f)["metric"] == "micro_f1"
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(e2e.output_dir))
  shapes = reader.get_variable_to_shape_map()
  assert shapes["multi_label/output_weights"] == [len(e2e.labels), e2e.config["hidden_size"]]
  assert shapes["multi_label/output_bias"] == [len(e2e.labels)]
  assert "output_weights" not in shapes


def test_predict_files_follow_the_thresholds(e2e):
  probabilities = read_probabilities(os.path.join(e2e.output_dir, "test_results.tsv"))
  assert probabilities.shape == (NUM_TEST, len(e2e.labels))
  thresholds, _ = read_thresholds_json(e2e)
  lines = read_lines(os.path.join(e2e.output_dir, "predict.txt"))
  assert lines == expected_lines(probabilities, thresholds, e2e.labels)
  # The model is not trivial: the lines differ, and some hold several labels.
  assert len(set(lines)) > 2
  assert any(line.count(SEPARATOR) >= 1 for line in lines)
  detail = [line.split("\t") for line in read_lines(os.path.join(e2e.output_dir,
                                                                 "predict_detail.tsv"))]
  assert detail[0] == ["id", "text_a", "predicted_labels", "gold_labels"]
  assert [row[1] for row in detail[1:]] == [text for _, text in e2e.test]
  assert [row[2] for row in detail[1:]] == lines
  assert [row[3] for row in detail[1:]] == [SEPARATOR.join(labels) for labels, _ in e2e.test]


def test_eval_results_are_the_scores_of_the_tuned_thresholds(e2e):
  results = {}
  for line in read_lines(os.path.join(e2e.output_dir, "eval_results.txt")):
    key, value = line.split(" = ")
    results[key] = float(value)
  assert {"eval_accuracy", "micro_f1", "macro_f1", "exact_match", "eval_loss"} <= set(results)
  assert results["eval_accuracy"] == results["exact_match"]
  # The dev probabilities, from the export of the same (best) checkpoint.
  values, _ = run_export(e2e.export_version, e2e.vocab_file, [text for _, text in e2e.dev])
  probabilities = values["probabilities"].astype(np.float64)
  gold = multi_hot([labels for labels, _ in e2e.dev], e2e.labels).astype(bool)
  thresholds, _ = read_thresholds_json(e2e)
  assert_clear_of_thresholds(probabilities, thresholds)
  for label in range(len(e2e.labels)):
    if gold[:, label].any():  # each threshold gives its label's best dev F1
      assert f1_at(probabilities[:, label], gold[:, label], thresholds[label]) == pytest.approx(
          best_f1(probabilities[:, label], gold[:, label]), abs=1e-9), e2e.labels[label]
    else:
      assert thresholds[label] == 0.5
  predicted = probabilities >= thresholds
  true_positives = (predicted & gold).sum()
  assert results["micro_f1"] == pytest.approx(
      2.0 * true_positives / (predicted.sum() + gold.sum()), abs=1e-6)
  assert results["exact_match"] == pytest.approx(np.mean(np.all(predicted == gold, axis=1)),
                                                 abs=1e-6)
  per_label = [2.0 * (predicted[:, j] & gold[:, j]).sum() /
               (predicted[:, j].sum() + gold[:, j].sum())
               for j in range(len(e2e.labels)) if predicted[:, j].any() or gold[:, j].any()]
  assert results["macro_f1"] == pytest.approx(np.mean(per_label), abs=1e-6)
  bce = -(gold * np.log(probabilities) + (~gold) * np.log(1.0 - probabilities))
  assert results["eval_loss"] == pytest.approx(bce.mean(), rel=1e-4)
  with open(os.path.join(e2e.output_dir, "eval_report.json"), encoding="utf-8") as f:
    report = json.load(f)
  assert [report["per_label"][label]["support"] for label in e2e.labels] == list(
      gold.sum(axis=0))


def test_export_gives_the_do_predict_outputs(e2e):
  texts = [text for _, text in e2e.test]
  values, signature = run_export(e2e.export_version, e2e.vocab_file, texts)
  assert sorted(signature.outputs) == ["label", "predicted", "probabilities"]
  assert signature.outputs["predicted"].dtype == tf.int32.as_datatype_enum
  probabilities = read_probabilities(os.path.join(e2e.output_dir, "test_results.tsv"))
  np.testing.assert_allclose(values["probabilities"], probabilities, atol=1e-5)
  assert_clear_of_thresholds(probabilities, read_thresholds_json(e2e)[0])
  lines = read_lines(os.path.join(e2e.output_dir, "predict.txt"))
  assert [label.decode("utf-8") for label in values["label"]] == lines
  assert values["predicted"].dtype == np.int32
  np.testing.assert_array_equal(
      values["predicted"],
      multi_hot([line.split(SEPARATOR) if line else [] for line in lines], e2e.labels))
  with open(os.path.join(e2e.export_version, "assets.extra", "thresholds.json"),
            encoding="utf-8") as f:
    exported = json.load(f)
  assert exported["labels"] == e2e.labels
  np.testing.assert_array_equal(exported["thresholds"], read_thresholds_json(e2e)[0])


def run_predict_text(args):
  return subprocess.run([sys.executable, cli.script_path("predict_text.py")] + list(args),
                        cwd=cli.REPO_DIR, env=cli.script_env(), stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, encoding="utf-8", errors="replace",
                        timeout=cli.RUN_TIMEOUT_SECONDS)


def test_predict_text_file_mode_from_output_dir_and_export(e2e, tmp_path):
  input_file = write(tmp_path / "in.txt", "".join(text + "\n" for _, text in e2e.test))
  probabilities = read_probabilities(os.path.join(e2e.output_dir, "test_results.tsv"))
  lines = read_lines(os.path.join(e2e.output_dir, "predict.txt"))
  sources = {"output_dir": ["--output_dir=" + e2e.output_dir, "--n_gpus=2"],
             "export_dir": ["--export_dir=" + os.path.dirname(e2e.export_version)]}
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    runs = {name: pool.submit(run_predict_text, flags + [
        "--input_file=" + input_file, "--output_file=" + str(tmp_path / (name + ".tsv")),
        "--predict_batch_size=3"]) for name, flags in sources.items()}
    runs = {name: future.result() for name, future in runs.items()}
  for name, result in runs.items():
    cli.assert_succeeded(result)
    rows = [line.split("\t") for line in read_lines(str(tmp_path / (name + ".tsv")))]
    assert all(len(row) == 1 + len(e2e.labels) for row in rows), (name, rows[:3])
    assert [row[0] for row in rows] == lines, name
    np.testing.assert_allclose([[float(p) for p in row[1:]] for row in rows], probabilities,
                               atol=1e-5, err_msg=name)


def request(url, body=None):
  req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
  try:
    with urllib.request.urlopen(req, timeout=60) as response:
      return response.status, json.loads(response.read().decode("utf-8"))
  except urllib.error.HTTPError as e:
    return e.code, json.loads(e.read().decode("utf-8"))
  except (urllib.error.URLError, ConnectionError):
    return None, None


def test_serve_answers_a_list_of_labels_per_text(e2e, tmp_path):
  texts = [text for _, text in e2e.test]
  with cli.RunningScript("predict_text.py",
                         ["--export_dir=" + os.path.dirname(e2e.export_version), "--serve=0"],
                         str(tmp_path / "stderr.txt")) as server:
    server.wait_for(lambda: re.search(r"Serving on (http://\S+)", server.stderr()),
                    "the server listening")
    url = re.search(r"Serving on (http://\S+)", server.stderr()).group(1)
    assert url.startswith("http://127.0.0.1:")
    server.wait_for(lambda: request(url + "/healthz")[0] == 200, "the model ready")
    status, reply = request(url + "/predict", json.dumps({"texts": texts}).encode("utf-8"))
    assert status == 200, reply
    assert request(url + "/labels") == (200, {"labels": e2e.labels})
  lines = read_lines(os.path.join(e2e.output_dir, "predict.txt"))
  assert reply["labels"] == [line.split(SEPARATOR) if line else [] for line in lines]
  np.testing.assert_allclose(
      reply["probabilities"], read_probabilities(os.path.join(e2e.output_dir,
                                                              "test_results.tsv")), atol=1e-5)


Refusals = collections.namedtuple("Refusals", ["results", "fragments", "single_dir",
                                               "copies", "multi_files", "root"])


def read_bytes(path):
  with open(path, "rb") as f:
    return f.read()


@pytest.fixture(scope="module")
def refusals(e2e, tmp_path_factory):
  """A single-label classifier trained for a step, then every refused run at once (the
  flags of one label per example are refused by get_processor, tested above)."""
  root = str(tmp_path_factory.mktemp("refusals"))
  # Texts only: neither kind of run trips over the other kind's label field first.
  texts_dir = os.path.join(root, "texts")
  write(os.path.join(texts_dir, "test.tsv"),
        "text_a\n" + "".join(text + "\n" for _, text in e2e.test[:4]))
  common = collections.OrderedDict([
      ("task_name", "tsv"), ("vocab_file", e2e.vocab_file),
      ("bert_config_file", e2e.config_file), ("max_seq_length", MAX_SEQ_LENGTH),
      ("n_gpus", 1), ("train_batch_size", 8)])
  single_dir = os.path.join(root, "single")
  softmax_init = trained_classifier.write_init_checkpoint(
      e2e.config, len(e2e.labels), os.path.join(root, "softmax_init", "bert_model.ckpt"))
  single_data = os.path.join(root, "single_data")
  write(os.path.join(single_data, "train.tsv"), "label\ttext_a\n" + "".join(
      "%s\t%s\n" % (labels[0], text) for labels, text in e2e.dev if labels))
  write(os.path.join(single_data, "labels.txt"), "".join(l + "\n" for l in e2e.labels))
  cli.assert_succeeded(run_classifier(collections.OrderedDict(
      common, data_dir=single_data, init_checkpoint=softmax_init, output_dir=single_dir,
      do_train=True, num_train_epochs=1)))
  assert tf.train.latest_checkpoint(single_dir)
  copies = {}
  for name, source in (("multi", e2e.output_dir), ("multi_resumed", e2e.output_dir),
                       ("single_resumed", single_dir)):
    copies[name] = os.path.join(root, name)
    shutil.copytree(source, copies[name])
  multi_files = dict((name, read_bytes(os.path.join(copies["multi"], name)))
                     for name in os.listdir(copies["multi"])
                     if os.path.isfile(os.path.join(copies["multi"], name)))
  multi_train = collections.OrderedDict(
      common, data_dir=e2e.data_dir, do_train=True, multi_label=True,
      label_separator=SEPARATOR)
  cases = {
      # A single-label model predicting with --multi_label.
      "softmax model": (collections.OrderedDict(
          common, data_dir=texts_dir, output_dir=single_dir, do_predict=True,
          multi_label=True), ["single-label", "--multi_label"]),
      # A multi-label model predicting without it.
      "sigmoid model": (collections.OrderedDict(
          common, data_dir=texts_dir, output_dir=copies["multi"], do_predict=True),
                        ["multi-label", "--multi_label"]),
      # Fine-tuning a single-label classifier's checkpoint as a multi-label one.
      "softmax init": (collections.OrderedDict(
          multi_train, output_dir=os.path.join(root, "new"), init_checkpoint=softmax_init),
                       ["single-label", softmax_init]),
      # Resuming the training of the other kind of model in its output_dir.
      "resume softmax": (collections.OrderedDict(
          multi_train, output_dir=copies["single_resumed"], num_train_epochs=2),
                         ["single-label", "--multi_label"]),
      "resume sigmoid": (collections.OrderedDict(
          common, data_dir=single_data, output_dir=copies["multi_resumed"], do_train=True,
          num_train_epochs=40), ["multi-label", "--multi_label"]),
  }
  with concurrent.futures.ThreadPoolExecutor(max_workers=len(cases)) as pool:
    results = {name: pool.submit(run_classifier, flags) for name, (flags, _) in cases.items()}
    results = {name: future.result() for name, future in results.items()}
  return Refusals(results, dict((name, case[1]) for name, case in cases.items()), single_dir,
                  copies, multi_files, root)


def test_checkpoints_of_the_other_head_are_refused(refusals):
  for name in ("softmax model", "sigmoid model", "softmax init"):
    cli.assert_one_line_error(refusals.results[name], *refusals.fragments[name])
  assert not os.path.exists(os.path.join(refusals.single_dir, "predict.txt"))
  multi_dir = refusals.copies["multi"]
  assert sorted(name for name in os.listdir(multi_dir)
                if os.path.isfile(os.path.join(multi_dir, name))) == sorted(
                    refusals.multi_files)
  for name, content in refusals.multi_files.items():
    assert read_bytes(os.path.join(multi_dir, name)) == content, name
  assert not os.path.exists(os.path.join(refusals.root, "new", "checkpoint"))


def test_resuming_the_other_head_in_output_dir_is_refused(refusals):
  for name in ("resume softmax", "resume sigmoid"):
    cli.assert_one_line_error(refusals.results[name], *refusals.fragments[name])
  # Refused before the model files of output_dir are rewritten for the other kind.
  with open(os.path.join(refusals.copies["multi_resumed"], "model_settings.json"),
            encoding="utf-8") as f:
    assert json.load(f)["multi_label"] is True
