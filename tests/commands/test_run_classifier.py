# coding=utf-8
"""End-to-end tests of the run_classifier_mgpu.py command line.

Every test runs the script as a subprocess (the interpreter running pytest, so
the same TensorFlow), on the built-in demo data cut down to a few dozen
examples and a BERT with hidden size 16. With no GPU, --n_gpus=N runs N towers
on logical CPU devices.

Expected values come from independent references: a NumPy BERT forward pass
(tests/helpers/numpy_bert.py) fed by the reference tokenizer
(tests/helpers/reference_tokenizer.py) for the probabilities and metrics, the data
files for order and counts, and a one-tower run for the multi-tower update.
"""

import collections
import concurrent.futures
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import featurizing_pool
from classifier_runs import (  # pylint: disable=g-multiple-import
    MAX_SEQ_LENGTH, NUM_DEV, NUM_TEST, NUM_TRAIN, TINY_CONFIG, base_flags, checkpoint_step,
    read_lines, run_classifier, write_json, write_text)
from classifier_tf_files import event_tags_and_steps, write_init_checkpoint
import cli
from cli import assert_succeeded, flag_list
import numpy_bert
import reference_tokenizer

# Files a failed run must never leave in output_dir.
RESULT_FILE_PATTERNS = ("predict.txt", "test_results.tsv", "predict_detail.tsv",
                        "eval_results.txt", "eval_report.json", "eval_report.txt",
                        "checkpoint", "model.ckpt-*", "events.out.tfevents.*", "best", "eval")


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

def checkpoint_steps_in(directory):
  """Steps of the complete model.ckpt-<step> checkpoints (their .index exists)."""
  steps = []
  for index_file in glob.glob(os.path.join(directory, "model.ckpt-*.index")):
    steps.append(checkpoint_step(index_file[:-len(".index")]))
  return sorted(steps)


def config_namespace(config_file):
  """The config as a plain object for numpy_bert (independent of modeling.BertConfig)."""
  with open(config_file, encoding="utf-8") as f:
    return types.SimpleNamespace(**json.load(f))


def reference_features(texts, vocab, max_seq_length):
  """input_ids, input_mask, segment_ids [n, max_seq_length] for single texts.

  [CLS] text [SEP], the text cut to max_seq_length - 2 WordPiece tokens, zero-padded.
  """
  n = len(texts)
  input_ids = np.zeros([n, max_seq_length], np.int64)
  input_mask = np.zeros([n, max_seq_length], np.int64)
  for row, text in enumerate(texts):
    tokens = reference_tokenizer.full_tokenize(text, vocab, True)[:max_seq_length - 2]
    ids = [vocab["[CLS]"]] + [vocab[token] for token in tokens] + [vocab["[SEP]"]]
    input_ids[row, :len(ids)] = ids
    input_mask[row, :len(ids)] = 1
  return input_ids, input_mask, np.zeros([n, max_seq_length], np.int64)


def reference_probabilities(checkpoint, config_file, vocab_file, texts):
  """Class probabilities [n, num_labels] from the NumPy BERT with a checkpoint's weights."""
  config = config_namespace(config_file)
  vocab = dict((token, index) for index, token in enumerate(read_lines(vocab_file)))
  reader = tf.train.load_checkpoint(checkpoint)
  weights = dict((name, reader.get_tensor(name))
                 for name in numpy_bert.variable_shapes(config))
  input_ids, input_mask, segment_ids = reference_features(texts, vocab, MAX_SEQ_LENGTH)
  pooled = numpy_bert.bert_forward(weights, config, input_ids, input_mask,
                                   segment_ids)["pooled_output"]  # [n, hidden]
  output_weights = reader.get_tensor("output_weights").astype(np.float64)  # [labels, hidden]
  output_bias = reader.get_tensor("output_bias").astype(np.float64)  # [labels]
  return numpy_bert.softmax(pooled.dot(output_weights.T) + output_bias)


def top_two_margin(probabilities):
  """Per row, the gap between the largest and the second largest probability."""
  ordered = np.sort(probabilities, axis=-1)
  return ordered[:, -1] - ordered[:, -2]


def trainable_weights(checkpoint, names):
  reader = tf.train.load_checkpoint(checkpoint)
  return dict((name, reader.get_tensor(name).astype(np.float64)) for name in names)


# ---------------------------------------------------------------------------
# Shared data (the demo_data fixture: conftest.py)
# ---------------------------------------------------------------------------

def copy_data(data, directory):
  """A copy of the demo data directory, to be spoiled by one bad-input case."""
  shutil.copytree(data.data_dir, directory)
  return directory


# ---------------------------------------------------------------------------
# 1. One full run: train + eval + predict with tail batches, and its output files
# ---------------------------------------------------------------------------

FullRun = collections.namedtuple("FullRun", ["output_dir", "result", "flags", "towers",
                                             "inference_checkpoint"])


@pytest.fixture(scope="module")
def full_run(demo_data, tmp_path_factory):
  # Run as users do: from their own directory, with a relative --output_dir.
  root = str(tmp_path_factory.mktemp("full_run"))
  output_dir = os.path.join(root, "model")
  init_checkpoint = write_init_checkpoint(demo_data.config, len(demo_data.labels),
                                          os.path.join(root, "init", "bert_model.ckpt"), seed=5,
                                          large_weights=True)
  flags = base_flags(demo_data, "model", init_checkpoint=init_checkpoint)
  result = run_classifier(flags, cwd=root)
  assert_succeeded(result)
  match = re.search(r"Evaluating and predicting with (\S+) \(", result.stderr)
  assert match, "no 'Evaluating and predicting with' line:\n" + result.stderr[-3000:]
  return FullRun(output_dir, result, flags, flags["n_gpus"], os.path.join(root, match.group(1)))


def test_eval_and_predict_use_the_best_checkpoint_with_a_relative_output_dir(full_run):
  # TF writes best/checkpoint relative to the working directory when given a relative
  # directory; the checkpoint then cannot be found and the latest one was used instead.
  assert "Couldn't match files" not in full_run.result.stderr
  best_dir = os.path.join(full_run.output_dir, "best")
  assert os.path.dirname(full_run.inference_checkpoint) == best_dir
  # A bare name, so output_dir can also be moved.
  with open(os.path.join(best_dir, "checkpoint")) as f:
    assert 'model_checkpoint_path: "%s"' % os.path.basename(
        full_run.inference_checkpoint) in f.read().split("\n")
  assert "(the best dev checkpoint" in full_run.result.stderr


def test_training_runs_the_planned_number_of_steps(full_run, demo_data):
  flags = full_run.flags
  planned = int(len(demo_data.train) * flags["num_train_epochs"] /
                (flags["train_batch_size"] * full_run.towers))
  assert planned == 12  # 50 x 2 / 8 = 12.5: the fraction is dropped
  stderr = full_run.result.stderr
  assert re.search(r"= %d steps, \d+ warmup steps" % planned, stderr), stderr[-3000:]
  logged = [(int(step), int(total)) for step, total in re.findall(r"step (\d+)/(\d+) ", stderr)]
  assert [total for _, total in logged] == [planned] * planned
  assert [step for step, _ in logged] == list(range(1, planned + 1))  # --log_steps=1

  # Checkpoints every 5 steps and at the end; `checkpoint` points at the last one.
  assert checkpoint_steps_in(full_run.output_dir) == [5, 10, 12]
  assert os.path.isfile(os.path.join(full_run.output_dir, "checkpoint"))
  latest = tf.train.latest_checkpoint(full_run.output_dir)
  assert latest is not None and os.path.basename(latest) == "model.ckpt-%d" % planned
  assert int(tf.train.load_checkpoint(latest).get_tensor("global_step")) == planned


def test_predict_outputs_have_one_line_per_example_in_input_order(full_run, demo_data):
  labels = demo_data.labels
  predicted = read_lines(os.path.join(full_run.output_dir, "predict.txt"))
  assert len(predicted) == NUM_TEST
  assert set(predicted) <= set(labels)

  probability_rows = read_lines(os.path.join(full_run.output_dir, "test_results.tsv"))
  assert len(probability_rows) == NUM_TEST
  probabilities = np.array([[float(p) for p in row.split("\t")] for row in probability_rows])
  assert probabilities.shape == (NUM_TEST, len(labels))
  assert np.all(probabilities >= 0)
  np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
  assert predicted == [labels[i] for i in np.argmax(probabilities, axis=1)]

  detail = read_lines(os.path.join(full_run.output_dir, "predict_detail.tsv"))
  assert detail[0].split("\t") == ["id", "text_a", "predicted_label", "probability",
                                   "gold_label"]
  rows = [line.split("\t") for line in detail[1:]]
  assert len(rows) == NUM_TEST
  for index, (row, (gold, text)) in enumerate(zip(rows, demo_data.test)):
    assert row[0] == "test-%d" % index
    assert row[1] == text
    assert row[2] == predicted[index]
    assert abs(float(row[3]) - probabilities[index].max()) < 1e-6
    assert row[4] == gold


def test_predictions_match_a_numpy_forward_pass_in_input_order(full_run, demo_data):
  """Each test_results.tsv row is the probability of the example on the same line of test.tsv."""
  probabilities = np.array([
      [float(p) for p in row.split("\t")]
      for row in read_lines(os.path.join(full_run.output_dir, "test_results.tsv"))])
  expected = reference_probabilities(full_run.inference_checkpoint, demo_data.config_file,
                                     demo_data.vocab_file, [text for _, text in demo_data.test])
  # The test can see a reordering: every pair of examples differs by far more than the tolerance.
  row_gaps = np.abs(expected[:, np.newaxis, :] - expected[np.newaxis, :, :]).max(axis=-1)
  np.fill_diagonal(row_gaps, np.inf)
  assert row_gaps.min() > 1e-3
  np.testing.assert_allclose(probabilities, expected, atol=2e-5)


def test_one_graph_per_job_gives_what_a_fresh_restore_gives(full_run, tmp_path):
  """--do_train --do_eval --do_predict evaluates and predicts in the training session (one
  graph per job); an eval- and predict-only run on a copy of output_dir builds its own
  graph and restores best/: the same files, up to float rounding in the printed numbers."""
  stderr = full_run.result.stderr
  assert "Evaluating and predicting in the training session with" in stderr
  assert "Where the job's time went:" in stderr
  for phase in ("import", "featurize", "build", "train", "eval", "predict", "total"):
    assert re.search(r"^INFO:tensorflow:  %s +[\d.]+ s" % phase, stderr, re.M), phase
  copy = str(tmp_path / "model")
  shutil.copytree(full_run.output_dir, copy)
  flags = dict(full_run.flags, output_dir=copy, do_train=False, init_checkpoint=None)
  result = run_classifier(flags)
  assert_succeeded(result)
  assert "in the training session" not in result.stderr
  assert "best/model.ckpt-%d" % checkpoint_step(full_run.inference_checkpoint) in \
      result.stderr
  for name in ("test_results.tsv", "eval_results.txt"):
    shared = read_lines(os.path.join(full_run.output_dir, name))
    fresh = read_lines(os.path.join(copy, name))
    assert len(shared) == len(fresh)
    for a, b in zip(shared, fresh):
      values_a = [float(v) for v in re.split(r"\t| = ", a) if re.match(r"^[-\d.e]+$", v)]
      values_b = [float(v) for v in re.split(r"\t| = ", b) if re.match(r"^[-\d.e]+$", v)]
      np.testing.assert_allclose(values_a, values_b, rtol=1e-6, atol=1e-7, err_msg=name)
  assert read_lines(os.path.join(full_run.output_dir, "predict.txt")) == \
      read_lines(os.path.join(copy, "predict.txt"))


def parse_key_values(path):
  lines = read_lines(path)
  pairs = [line.split(" = ", 1) for line in lines]
  assert all(len(pair) == 2 for pair in pairs), lines
  return [key for key, _ in pairs], dict(pairs)


def test_eval_outputs_agree_with_each_other_and_a_numpy_reference(full_run, demo_data):
  keys, values = parse_key_values(os.path.join(full_run.output_dir, "eval_results.txt"))
  assert keys == sorted(keys)
  assert {"eval_accuracy", "eval_loss", "global_step", "loss", "macro_f1"} <= set(keys)
  assert int(values["global_step"]) == checkpoint_step(full_run.inference_checkpoint)

  with open(os.path.join(full_run.output_dir, "eval_report.json"), encoding="utf-8") as f:
    report = json.load(f)
  assert report["labels"] == demo_data.labels
  assert report["num_examples"] == NUM_DEV
  assert sum(report["per_class"][label]["support"] for label in demo_data.labels) == NUM_DEV
  gold_counts = collections.Counter(label for label, _ in demo_data.dev)
  for label in demo_data.labels:
    assert report["per_class"][label]["support"] == gold_counts[label]
  matrix = np.array(report["confusion_matrix"])
  assert matrix.sum() == NUM_DEV
  for key in ("eval_accuracy", "eval_loss", "macro_f1"):
    assert float(values[key]) == pytest.approx(report["metrics"][key], abs=1e-12)
  assert float(values["eval_accuracy"]) == pytest.approx(np.trace(matrix) / NUM_DEV)

  # The text report shows the same figures, rounded to 4 places.
  text = read_lines(os.path.join(full_run.output_dir, "eval_report.txt"))
  assert text[0].split()[:2] == ["examples:", str(NUM_DEV)]
  per_class_lines = dict((line.split()[0], line.split()[1:]) for line in text[3:3 + len(
      demo_data.labels)])
  for label in demo_data.labels:
    row = report["per_class"][label]
    shown = per_class_lines[label]
    assert [float(v) for v in shown[:3]] == pytest.approx(
        [row["precision"], row["recall"], row["f1"]], abs=5e-5)
    assert int(shown[3]) == row["support"]

  # Independent figures: the NumPy forward pass over dev.tsv with the same checkpoint.
  expected = reference_probabilities(full_run.inference_checkpoint, demo_data.config_file,
                                     demo_data.vocab_file, [text for _, text in demo_data.dev])
  gold = np.array([demo_data.labels.index(label) for label, _ in demo_data.dev])
  expected_loss = -np.mean(np.log(expected[np.arange(NUM_DEV), gold]))
  assert float(values["eval_loss"]) == pytest.approx(expected_loss, abs=1e-4)
  expected_correct = int(np.sum(np.argmax(expected, axis=1) == gold))
  near_ties = int(np.sum(top_two_margin(expected) < 1e-4))
  assert abs(round(float(values["eval_accuracy"]) * NUM_DEV) - expected_correct) <= near_ties


def test_labels_file_and_tensorboard_events(full_run, demo_data):
  assert read_lines(os.path.join(full_run.output_dir, "labels.txt")) == demo_data.labels
  train_events = event_tags_and_steps(full_run.output_dir)
  assert train_events["loss"] == list(range(1, 13))
  assert "learning_rate" in train_events
  eval_events = event_tags_and_steps(os.path.join(full_run.output_dir, "eval"))
  assert eval_events["eval_accuracy"] == [5, 10, 12]


# ---------------------------------------------------------------------------
# 2. Resuming after SIGKILL
# ---------------------------------------------------------------------------

def recorded_checkpoint_step(output_dir):
  """Step of the checkpoint that output_dir/checkpoint records (what a rerun resumes from)."""
  latest = tf.train.latest_checkpoint(output_dir)
  return checkpoint_step(latest) if latest else None


def test_training_resumes_after_sigkill(demo_data, tmp_path):
  output_dir = str(tmp_path / "model")
  # 50 x 160 / 8 = 1000 steps: 5-10 s uninterrupted; killed after the checkpoint at step 5.
  flags = base_flags(demo_data, output_dir, do_eval=None, do_predict=None,
                     num_train_epochs=160, log_steps=500, learning_rate=1e-4)
  planned = 1000
  with cli.RunningScript("run_classifier_mgpu.py", flag_list(flags),
                         str(tmp_path / "first_run.stderr")) as run:
    # Poll the `checkpoint` file, not for model.ckpt-*.index: Saver writes the index
    # first and records it in `checkpoint` after, and only recorded checkpoints resume.
    run.wait_for(lambda: (recorded_checkpoint_step(output_dir) or 0) >= 5,
                 "a checkpoint at step >= 5")
    run.signal(signal.SIGKILL)
    assert run.wait() == -signal.SIGKILL
  step_at_kill = recorded_checkpoint_step(output_dir)
  assert 5 <= step_at_kill < planned

  result = run_classifier(flags)
  assert_succeeded(result)
  assert "= %d steps" % planned in result.stderr
  match = re.search(r"Resuming from (\S+) \(step (\d+) of (\d+)\)", result.stderr)
  assert match, "checkpoint at the kill: %s\n%s" % (step_at_kill, result.stderr[:4000])
  assert int(match.group(2)) == step_at_kill == checkpoint_step(match.group(1))
  assert int(match.group(3)) == planned
  assert "training from scratch" not in result.stderr
  latest = tf.train.latest_checkpoint(output_dir)
  assert checkpoint_step(latest) == planned
  assert int(tf.train.load_checkpoint(latest).get_tensor("global_step")) == planned


# ---------------------------------------------------------------------------
# 3. Bad input: one-line error, exit 1, no traceback, no partial output
# ---------------------------------------------------------------------------

# What a failed run may leave in output_dir:
#   "untouched": output_dir is not created (the error comes before anything is written).
#   "no_results": no checkpoint, event file, eval or predict output (labels.txt and the
#     feature cache may be there: the error comes after featurizing).
BadInputCase = collections.namedtuple("BadInputCase",
                                      ["flags", "expected_substrings", "output_policy"])


def replace_line(path, line_number, new_line):
  """Replaces one 1-based line of a UTF-8 file."""
  lines = read_lines(path)
  lines[line_number - 1] = new_line
  write_text(path, "\n".join(lines) + "\n")


def make_bad_input_cases(data, root):
  """Builds every bad-input case: id -> BadInputCase (each with its own dirs)."""
  cases = collections.OrderedDict()

  def case_dirs(case_id):
    return os.path.join(root, case_id + "_data"), os.path.join(root, case_id + "_output")

  def add(case_id, flag_overrides, expected, policy, spoil=None):
    data_dir, output_dir = case_dirs(case_id)
    if spoil is not None:
      copy_data(data, data_dir)
      spoil(data_dir)
      flag_overrides = dict({"data_dir": data_dir}, **flag_overrides)
    flags = base_flags(data, output_dir, num_train_epochs=1, **flag_overrides)
    cases[case_id] = BadInputCase(flags, [s if isinstance(s, str) else s(data_dir)
                                          for s in expected], policy)

  def in_data(name):
    return lambda data_dir: os.path.join(data_dir, name)

  # A train row with the label but no tab and text: line 4 is the third example.
  add("missing_column", {}, [in_data("train.tsv"), "line 4", "'text_a'", "1 field"], "untouched",
      spoil=lambda d: replace_line(os.path.join(d, "train.tsv"), 4, data.train[2][0]))
  add("unknown_label_in_dev", {}, [in_data("dev.tsv"), "line 3", "'天气'", "label list"],
      "untouched", spoil=lambda d: replace_line(os.path.join(d, "dev.tsv"), 3,
                                            "天气\t" + data.dev[1][1]))
  add("unknown_label_in_test", {}, [in_data("test.tsv"), "line 6", "'天气'", "label list"],
      "untouched", spoil=lambda d: replace_line(os.path.join(d, "test.tsv"), 6,
                                            "天气\t" + data.test[4][1]))

  def spoil_utf8(data_dir):
    path = os.path.join(data_dir, "dev.tsv")
    with open(path, "rb") as f:
      lines = f.read().split(b"\n")
    label, text = lines[4].split(b"\t")
    lines[4] = label + b"\t\xff" + text
    with open(path, "wb") as f:
      f.write(b"\n".join(lines))
  # The bad byte follows the label and the tab of line 5 (the fourth example).
  offset = len(data.dev[3][0].encode("utf-8")) + 1
  add("invalid_utf8", {}, [in_data("dev.tsv"), "line 5", "byte 0xff",
                           "byte offset %d of the line" % offset, "UTF-8"], "untouched",
      spoil=spoil_utf8)
  add("empty_test_split", {}, [in_data("test.tsv"), "no examples", "--do_predict"], "untouched",
      spoil=lambda d: write_text(os.path.join(d, "test.tsv"), "label\ttext_a\n"))
  add("missing_dev_file", {}, [in_data("dev.tsv"), "dev"], "untouched",
      spoil=lambda d: os.remove(os.path.join(d, "dev.tsv")))

  missing = os.path.join(root, "does_not_exist")
  add("missing_data_dir", {"data_dir": missing}, ["--data_dir=" + missing], "untouched")
  add("missing_vocab", {"vocab_file": missing + "/vocab.txt"},
      ["--vocab_file=" + missing + "/vocab.txt"], "untouched")
  add("missing_config", {"bert_config_file": missing + "/bert_config.json"},
      ["--bert_config_file=" + missing + "/bert_config.json"], "untouched")
  add("missing_init_checkpoint", {"init_checkpoint": missing + "/bert_model.ckpt"},
      ["--init_checkpoint=" + missing + "/bert_model.ckpt",
       missing + "/bert_model.ckpt.index"], "untouched")

  # --n_gpus=4 with 2 visible GPUs cannot happen on a machine without GPUs (towers then
  # run on CPU devices); tests/distributed/test_multigpu.py checks multigpu.plan_devices(4,
  # visible_gpus=2) directly (test_plan_errors_name_the_counts).
  add("zero_gpus", {"n_gpus": 0}, ["--n_gpus=0", "at least 1"], "untouched")
  limit = TINY_CONFIG["max_position_embeddings"]
  add("max_seq_length_too_long", {"max_seq_length": limit + 1},
      ["--max_seq_length=%d" % (limit + 1), "max_position_embeddings=%d" % limit,
       data.config_file], "untouched")

  vocab_size = data.config["vocab_size"]
  small_vocab_config = os.path.join(root, "small_vocab_config.json")
  write_json(small_vocab_config, dict(data.config, vocab_size=vocab_size - 3))
  add("vocab_larger_than_config", {"bert_config_file": small_vocab_config},
      [data.vocab_file, "%d tokens" % vocab_size, "vocab_size is %d" % (vocab_size - 3),
       small_vocab_config], "untouched")

  # The config says hidden 16; the checkpoint was made with hidden 32.
  wide_checkpoint = write_init_checkpoint(
      dict(data.config, hidden_size=32), len(data.labels),
      os.path.join(root, "wide_model", "bert_model.ckpt"), seed=3)
  add("checkpoint_shape_mismatch", {"init_checkpoint": wide_checkpoint},
      ["--init_checkpoint=" + wide_checkpoint, "has shape"], "no_results")

  add("unknown_task", {"task_name": "nosuchtask"}, ["'nosuchtask'", "tsv"], "untouched")
  add("use_tpu", {"use_tpu": "true"}, ["--use_tpu=true", "TPU"], "untouched")
  return cases


BAD_INPUT_CASE_IDS = [
    "missing_column", "unknown_label_in_dev", "unknown_label_in_test", "invalid_utf8",
    "empty_test_split", "missing_dev_file", "missing_data_dir", "missing_vocab",
    "missing_config", "missing_init_checkpoint", "zero_gpus", "max_seq_length_too_long",
    "vocab_larger_than_config", "checkpoint_shape_mismatch", "unknown_task", "use_tpu"]

BadInputRun = collections.namedtuple("BadInputRun", ["case", "result"])


@pytest.fixture(scope="module")
def bad_input_runs(demo_data, tmp_path_factory):
  """Runs every bad-input case, two at a time (each spends its time starting TensorFlow)."""
  cases = make_bad_input_cases(demo_data, str(tmp_path_factory.mktemp("bad_input")))
  assert list(cases) == BAD_INPUT_CASE_IDS
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    futures = dict((case_id, pool.submit(run_classifier, case.flags))
                   for case_id, case in cases.items())
    return dict((case_id, BadInputRun(cases[case_id], futures[case_id].result()))
                for case_id in cases)


def leftover_result_files(output_dir):
  found = []
  for pattern in RESULT_FILE_PATTERNS:
    found += glob.glob(os.path.join(output_dir, pattern))
  return sorted(os.path.basename(path) for path in found)


@pytest.mark.parametrize("case_id", BAD_INPUT_CASE_IDS)
def test_bad_input_gets_a_one_line_error_and_leaves_no_output(bad_input_runs, case_id):
  case, result = bad_input_runs[case_id]
  # The message is the last thing written, on one line.
  cli.assert_one_line_error(result, *case.expected_substrings, last=True)

  output_dir = case.flags["output_dir"]
  if case.output_policy == "untouched":
    assert not os.path.exists(output_dir)
  else:
    assert leftover_result_files(output_dir) == []


def test_shape_mismatch_error_names_the_variable_and_both_shapes(bad_input_runs, demo_data):
  case, result = bad_input_runs["checkpoint_shape_mismatch"]
  match = re.search(r"Variable (\S+) has shape (\[[0-9, ]*\]) in checkpoint \S+ but "
                    r"(\[[0-9, ]*\]) in the model", result.stderr)
  assert match, result.stderr[-3000:]
  name = match.group(1)
  checkpoint_shape = json.loads(match.group(2))
  model_shape = json.loads(match.group(3))
  reader = tf.train.load_checkpoint(case.flags["init_checkpoint"])
  assert reader.get_variable_to_shape_map()[name] == checkpoint_shape
  config = config_namespace(demo_data.config_file)
  expected_shapes = numpy_bert.variable_shapes(config)
  expected_shapes["output_weights"] = [len(demo_data.labels), config.hidden_size]
  expected_shapes["output_bias"] = [len(demo_data.labels)]
  assert expected_shapes[name] == model_shape
  assert 32 in checkpoint_shape and 16 in model_shape


# ---------------------------------------------------------------------------
# 4. k towers x batch b give the same update as 1 tower x batch k*b
# ---------------------------------------------------------------------------

def test_towers_times_batch_give_the_same_update_as_one_big_batch(demo_data, tmp_path):
  root = str(tmp_path)
  no_dropout_config = os.path.join(root, "bert_config.json")
  config = dict(demo_data.config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  write_json(no_dropout_config, config)
  # The head is in the checkpoint too, so every run starts from the same weights.
  init_checkpoint = write_init_checkpoint(config, len(demo_data.labels),
                                          os.path.join(root, "init", "bert_model.ckpt"), seed=11)
  names = sorted(name for name, _ in tf.train.list_variables(init_checkpoint))
  assert "output_weights" in names and "output_bias" in names

  def run(towers):
    output_dir = os.path.join(root, "towers_%d" % towers)
    # 50 x 0.8 / 8 = 5 steps of global batch 8.
    flags = base_flags(demo_data, output_dir, bert_config_file=no_dropout_config,
                       init_checkpoint=init_checkpoint, do_eval=None, do_predict=None,
                       n_gpus=towers, train_batch_size=8 // towers, num_train_epochs=0.8,
                       learning_rate=2e-3, random_seed=4321, save_checkpoints_steps=100)
    return output_dir, run_classifier(flags)

  with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
    runs = dict((towers, pool.submit(run, towers)) for towers in (1, 2, 4))
    runs = dict((towers, future.result()) for towers, future in runs.items())

  initial = trainable_weights(init_checkpoint, names)
  updates = {}
  for towers, (output_dir, result) in sorted(runs.items()):
    assert_succeeded(result)
    assert "= global batch 8" in result.stderr
    assert "50 training examples x 0.8 epochs = 5 steps" in result.stderr
    assert "Initialised from --init_checkpoint" in result.stderr
    latest = tf.train.latest_checkpoint(output_dir)
    assert checkpoint_step(latest) == 5
    trained_names = set(tf.train.load_checkpoint(latest).get_variable_to_shape_map())
    assert set(names) <= trained_names
    final = trainable_weights(latest, names)
    updates[towers] = np.concatenate([(final[n] - initial[n]).ravel() for n in names])

  reference_norm = np.linalg.norm(updates[1])
  # Every variable moved, so the comparison below can fail.
  assert reference_norm > 1e-2
  for towers in (2, 4):
    difference = np.linalg.norm(updates[towers] - updates[1]) / reference_norm
    assert difference <= 1e-3, "%d towers: relative difference %g" % (towers, difference)


# ---------------------------------------------------------------------------
# 5. The loop survives typos, a second run and preemption
# ---------------------------------------------------------------------------

def test_command_line_mistakes_are_one_line_errors(demo_data, tmp_path):
  output_dir = str(tmp_path / "model")
  flags = flag_list(base_flags(demo_data, output_dir))
  cases = {
      # tf.app.run alone ignores an undefined flag: this trained on one GPU.
      "misspelt": (flags + ["--n_gpu=4"],
                   ["unknown flag --n_gpu", "did you mean --n_gpus?", "--undefok=n_gpu"]),
      "unknown": (flags + ["--bogus=1"], ["unknown flag --bogus", "--undefok=bogus"]),
      # `--do_lower_case False` sets nothing: the bare word was ignored.
      "stray word": (flags + ["--do_lower_case", "False"],
                     ["unexpected argument 'False'", "--do_train=true"]),
      "bad value": (flags + ["--n_gpus=two"], ["--n_gpus", "two"]),
  }
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    results = {name: pool.submit(cli.run_script, "run_classifier_mgpu.py", args)
               for name, (args, _) in cases.items()}
    for name, (_, fragments) in cases.items():
      cli.assert_one_line_error(results[name].result(), *fragments)
  assert not os.path.exists(output_dir)


def test_undefok_and_googles_tpu_flags_are_accepted(demo_data, tmp_path):
  # A missing data_dir stops the run during validation, after the flags are parsed.
  flags = base_flags(demo_data, str(tmp_path / "model"), data_dir=str(tmp_path / "missing"))
  result = cli.run_script("run_classifier_mgpu.py", flag_list(flags) + [
      "--n_gpu=4", "--undefok=n_gpu", "--use_tpu=false", "--tpu_name=t", "--num_tpu_cores=8",
      "--iterations_per_loop=100", "--master=m"])
  cli.assert_one_line_error(result, "--data_dir=%s: no such directory" % flags["data_dir"])


# Runs run_classifier_mgpu.py, writing a line to stderr for each multiprocessing.Pool started
# (the featurizing processes), before the pool forks, and one when the device check starts.
COUNT_POOLS = """
import multiprocessing, os, runpy, sys
start_pool = multiprocessing.Pool
def counted_pool(*args, **kwargs):
  sys.stderr.write("multiprocessing.Pool started\\n")
  sys.stderr.flush()  # before the fork: a child must not inherit the line
  return start_pool(*args, **kwargs)
multiprocessing.Pool = counted_pool
repo_dir = %r
sys.path.insert(0, repo_dir)
from bert_mgpu.training import run_settings
check_devices = run_settings.make_run_config
def logged_check(*args, **kwargs):
  sys.stderr.write("device check started\\n")
  sys.stderr.flush()
  return check_devices(*args, **kwargs)
run_settings.make_run_config = logged_check
script = os.path.join(repo_dir, "run_classifier_mgpu.py")
sys.argv = [script] + sys.argv[1:]
runpy.run_path(script, run_name="__main__")
""" % cli.REPO_DIR


def test_featurizing_processes_start_only_for_splits_that_are_not_cached(demo_data, tmp_path):
  # A training file just big enough for the processes; dev and test stay small.
  data_dir = copy_data(demo_data, str(tmp_path / "data"))
  copies = -(-featurizing_pool.POOL_THRESHOLD // NUM_TRAIN)
  write_text(os.path.join(data_dir, "train.tsv"), "label\ttext_a\n" + "".join(
      "%s\t%s\n" % row for row in demo_data.train * copies))
  wrapper = str(tmp_path / "count_pools.py")
  write_text(wrapper, COUNT_POOLS)
  output_dir = str(tmp_path / "model")

  def run(do_predict):
    flags = base_flags(demo_data, output_dir, data_dir=data_dir, do_predict=do_predict,
                       n_gpus=1, num_workers=2, train_batch_size=32, num_train_epochs=0.05,
                       save_checkpoints_steps=1000)
    result = cli.run_script(wrapper, flag_list(flags))
    assert_succeeded(result)
    return result.stderr

  first = run(do_predict=None)
  assert first.count("multiprocessing.Pool started") == 1, first[-3000:]
  # Forked before the device check, which may start TensorFlow's GPU runtime.
  assert first.index("multiprocessing.Pool started") < first.index("device check started")
  assert "%d examples with 2 processes" % (NUM_TRAIN * copies) in first
  rerun = run(do_predict=None)
  assert "reusing cached train features" in rerun and "reusing cached dev features" in rerun
  assert "multiprocessing.Pool started" not in rerun, \
      "processes forked although every split is cached"
  # Train and dev are cached and test is below the threshold: no process either.
  with_test = run(do_predict=True)
  assert "featurizing test-" in with_test
  assert "multiprocessing.Pool started" not in with_test, \
      "processes forked for cached train and dev and a small test set"


def lock_holder_pid(output_dir):
  try:
    with open(os.path.join(output_dir, ".bert-mgpu.lock")) as f:
      return int(f.read().strip() or 0)
  except (IOError, ValueError):
    return 0


def test_a_second_run_on_a_locked_output_dir_is_refused(demo_data, tmp_path):
  output_dir = str(tmp_path / "model")
  long_run = base_flags(demo_data, output_dir, do_eval=None, do_predict=None,
                        num_train_epochs=400, log_steps=500)
  with cli.RunningScript("run_classifier_mgpu.py", flag_list(long_run),
                         str(tmp_path / "first.stderr")) as first:
    first.wait_for(lambda: lock_holder_pid(output_dir) == first.process.pid,
                   "the first run taking the lock")
    second = run_classifier(base_flags(demo_data, output_dir))
    cli.assert_one_line_error(second, "--output_dir=%s is in use by another run (process %d"
                              % (output_dir, first.process.pid))
    assert first.process.poll() is None
    first.signal(signal.SIGKILL)
    assert first.wait() == -signal.SIGKILL
  # The kernel dropped the killed run's lock: a new run may take it at once.
  take_lock = subprocess.run(
      [sys.executable, "-c",
       "from bert_mgpu.data import output_files\n"
       "output_files.lock_output_dir(%r)\nprint('locked')" % output_dir],
      cwd=cli.REPO_DIR, env=cli.script_env(), stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, encoding="utf-8", timeout=120)
  assert take_lock.returncode == 0 and take_lock.stdout.strip() == "locked", take_lock.stderr


def all_variables(checkpoint):
  reader = tf.train.load_checkpoint(checkpoint)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_preempted_run_resumes_to_the_same_weights_as_an_uninterrupted_one(
    demo_data, tmp_path, signum):
  root = str(tmp_path)
  no_dropout_config = os.path.join(root, "bert_config.json")
  write_json(no_dropout_config,
             dict(demo_data.config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
  planned = 400  # 50 x 64 / 8

  def flags(output_dir):
    # do_eval with checkpoints every 1000 steps: the only evaluation is the final one, so a
    # best/ directory after the stop would mean the preemption checkpoint was evaluated.
    # --ema_decay: the weight averages resume bit-exactly too.
    return flag_list(base_flags(
        demo_data, output_dir, bert_config_file=no_dropout_config, do_predict=None,
        num_train_epochs=64, save_checkpoints_steps=1000, log_steps=1, learning_rate=1e-3,
        ema_decay=0.9))

  straight_dir, stopped_dir = os.path.join(root, "straight"), os.path.join(root, "stopped")
  with cli.RunningScript("run_classifier_mgpu.py", flags(stopped_dir),
                         os.path.join(root, "stopped.stderr")) as run:
    run.wait_for(lambda: re.search(r"step 2\d/%d " % planned, run.stderr()), "step 20")
    run.signal(signum)
    code = run.wait()
    stderr = run.stderr()
  assert code == 128 + signum, stderr[-3000:]
  assert "Traceback" not in stderr, stderr[-3000:]
  match = re.search(r"Stopped by (SIGTERM|Ctrl-C) at step (\d+) of %d; saved (\S+)\. Run the "
                    r"same command again to resume from it\." % planned, stderr)
  assert match, stderr[-3000:]
  stopped_step = int(match.group(2))
  assert 20 <= stopped_step < planned
  assert checkpoint_step(tf.train.latest_checkpoint(stopped_dir)) == stopped_step
  assert not os.path.exists(os.path.join(stopped_dir, "best"))
  assert not os.path.exists(os.path.join(stopped_dir, "eval_results.txt"))
  if signum == signal.SIGINT:
    return  # the resume below is the same for both signals

  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    straight, resumed = pool.map(lambda d: cli.run_script("run_classifier_mgpu.py", flags(d)),
                                 (straight_dir, stopped_dir))
  assert_succeeded(straight)
  assert_succeeded(resumed)
  assert "Resuming from" in resumed.stderr and "(step %d of %d)" % (stopped_step, planned) \
      in resumed.stderr
  final = [all_variables(tf.train.latest_checkpoint(d)) for d in (straight_dir, stopped_dir)]
  assert set(final[0]) == set(final[1]) and "output_weights/adam_v" in final[0]
  assert "output_weights/ExponentialMovingAverage" in final[0]
  for name in final[0]:
    np.testing.assert_array_equal(final[0][name], final[1][name], err_msg=name)
