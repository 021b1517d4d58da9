# coding=utf-8
"""End-to-end tests of the run_ner_mgpu.py command line.

Every run is a subprocess (tests/helpers/cli.py) on the Chinese NER set that
scripts/make_ner_data.py generates (PER/LOC/ORG in BIO, in both the conll and the
CLUENER layout, every tenth test sentence eight sentences long), with a tiny BERT. With
no GPU, --n_gpus=2 runs two towers on logical CPU devices.

Expected values come from the data files themselves (the test file's lines, the gold
entities) and from ner_scoring, which has hand-computed tests of its own.
"""

import collections
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cli
from bert_mgpu.ner import scoring as ner_scoring
from bert_mgpu.training import checkpoints

MAKE_DATA = cli.script_path(os.path.join("scripts", "make_ner_data.py"))
MAX_SEQ_LENGTH = 48  # the long test sentences (~100+ characters) need several windows
MIN_TRAINED_F1 = 0.8
# The test set's long sentences (several windows each) score lower: 0.79 to 0.80 seen on
# both TFs (6 and 8 epochs, seeded or not), so 0.8 there flaked.
MIN_TEST_F1 = 0.75


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("ner_data"))
  subprocess.run([sys.executable, MAKE_DATA, "--output_dir", root, "--long_every", "10"],
                 check=True, stdout=subprocess.PIPE, timeout=120)
  with open(os.path.join(root, "bert_config.json")) as f:
    config = json.load(f)
  no_dropout = os.path.join(root, "bert_config_no_dropout.json")
  with open(no_dropout, "w") as f:
    json.dump(dict(config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0), f)
  return {"root": root, "no_dropout_config": no_dropout}


def ner_flags(data, data_format, output_dir, **flags):
  values = collections.OrderedDict([
      ("data_dir", os.path.join(data["root"], data_format)),
      ("vocab_file", os.path.join(data["root"], "vocab.txt")),
      ("bert_config_file", os.path.join(data["root"], "bert_config.json")),
      ("output_dir", output_dir), ("do_train", True), ("do_eval", True), ("do_predict", True),
      ("n_gpus", 2), ("max_seq_length", MAX_SEQ_LENGTH), ("doc_stride", 16),
      ("train_batch_size", 8), ("learning_rate", 1e-3), ("num_train_epochs", 3),
      ("save_checkpoints_steps", 1000), ("log_steps", 1000)])
  values.update(flags)
  return cli.flag_list(values)


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory):
  """A conll run (softmax head) and a CLUENER run (CRF head, with weight averages:
  --ema_decay), at the same time."""
  root = str(tmp_path_factory.mktemp("ner_runs"))
  # Seeded: the same weights on every run of the suite.
  runs = {"conll": ner_flags(data, "conll", os.path.join(root, "conll"), num_train_epochs=6,
                             random_seed=2),
          "cluener": ner_flags(data, "cluener", os.path.join(root, "cluener"), use_crf=True,
                               num_train_epochs=6, ema_decay=0.9, random_seed=2)}
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    futures = {name: pool.submit(cli.run_script, "run_ner_mgpu.py", args)
               for name, args in runs.items()}
    results = {name: future.result() for name, future in futures.items()}
  for result in results.values():
    cli.assert_succeeded(result)
  return {"conll": (os.path.join(root, "conll"), results["conll"]),
          "cluener": (os.path.join(root, "cluener"), results["cluener"])}


def read_eval_results(output_dir):
  with open(os.path.join(output_dir, "eval_results.txt")) as f:
    return {key: float(value) for key, value in
            (line.strip().split(" = ") for line in f if line.strip())}


@pytest.mark.parametrize("data_format", ["conll", "cluener"])
def test_training_reaches_a_high_entity_f1(trained, data_format):
  output_dir, result = trained[data_format]
  metrics = read_eval_results(output_dir)
  assert set(metrics) >= {"precision", "recall", "f1", "loss", "global_step"}
  assert metrics["f1"] >= MIN_TRAINED_F1, metrics
  assert "windows (8 longer than max_seq_length=%d were split)" % MAX_SEQ_LENGTH in \
      result.stderr
  with open(os.path.join(output_dir, "eval_report.json"), encoding="utf-8") as f:
    report = json.load(f)
  assert set(report["per_type"]) == {"PER", "LOC", "ORG"}
  assert abs(report["f1"] - metrics["f1"]) < 1e-9


def test_conll_predict_txt_appends_a_tag_to_every_line_of_the_test_file(trained, data):
  output_dir, _ = trained["conll"]
  with open(os.path.join(data["root"], "conll", "test.txt"), encoding="utf-8") as f:
    test_lines = f.read().split("\n")
  with open(os.path.join(output_dir, "predict.txt"), encoding="utf-8") as f:
    predict_lines = f.read().split("\n")
  assert len(predict_lines) == len(test_lines)
  gold, predicted, sentence_gold, sentence_predicted = [], [], [], []
  for test_line, predict_line in zip(test_lines, predict_lines):
    if not test_line.strip():
      assert predict_line == test_line
      if sentence_gold:
        gold.append(sentence_gold)
        predicted.append(sentence_predicted)
      sentence_gold, sentence_predicted = [], []
      continue
    token, gold_tag, predicted_tag = predict_line.split("\t")
    assert predict_line.startswith(test_line + "\t")
    sentence_gold.append(gold_tag)
    sentence_predicted.append(predicted_tag)
  # conlleval's input: scoring it gives what the run scored on the (same-sized) dev set.
  assert len(gold) == 80
  assert ner_scoring.score(gold, predicted, "BIO")["f1"] >= MIN_TEST_F1


def test_entities_have_character_offsets_into_the_text(trained):
  for data_format in ("conll", "cluener"):
    output_dir, _ = trained[data_format]
    with open(os.path.join(output_dir, "predict_entities.jsonl"), encoding="utf-8") as f:
      records = [json.loads(line) for line in f]
    assert len(records) == 80
    assert sum(len(r["entities"]) for r in records) > 80
    for record in records:
      for entity in record["entities"]:
        assert record["text"][entity["start"]:entity["end"]] == entity["text"]
        assert entity["type"] in ("PER", "LOC", "ORG")


def test_cluener_predict_json_is_the_submission_format(trained, data):
  output_dir, _ = trained["cluener"]
  with open(os.path.join(data["root"], "cluener", "test.json"), encoding="utf-8") as f:
    test = [json.loads(line) for line in f]
  with open(os.path.join(output_dir, "predict.json"), encoding="utf-8") as f:
    predicted = [json.loads(line) for line in f]
  assert [p["id"] for p in predicted] == [t["id"] for t in test]
  for row, source in zip(predicted, test):
    assert set(row) == {"id", "label"}
    for mentions in row["label"].values():
      for text, spans in mentions.items():
        for start, end in spans:
          assert source["text"][start:end + 1] == text  # CLUENER's ends are inclusive


def test_crf_head_variable_names(trained):
  output_dir, _ = trained["cluener"]
  names = set(tf.train.load_checkpoint(
      tf.train.latest_checkpoint(output_dir)).get_variable_to_shape_map())
  assert {"cls/ner/output_weights", "cls/ner/output_bias", "cls/ner/crf/transitions",
          "bert/embeddings/word_embeddings"} <= names
  # --ema_decay: the CRF's transitions are averaged like every trained variable.
  assert {"cls/ner/crf/transitions/ExponentialMovingAverage",
          "cls/ner/output_weights/ExponentialMovingAverage"} <= names
  conll_dir, _ = trained["conll"]
  conll_names = set(tf.train.load_checkpoint(
      tf.train.latest_checkpoint(conll_dir)).get_variable_to_shape_map())
  assert "cls/ner/output_weights" in conll_names
  assert not any("crf" in name for name in conll_names)


@pytest.mark.parametrize("use_crf", [False, True])
def test_two_towers_give_the_update_of_one_device(data, tmp_path, use_crf):
  # Sentences differ in length, so each tower has its own number of labelled tokens: the
  # loss must still be the mean over the global batch for the updates to match.
  def run(name, n_gpus, per_tower):
    output_dir = str(tmp_path / name)
    cli.assert_succeeded(cli.run_script("run_ner_mgpu.py", ner_flags(
        data, "conll", output_dir, do_eval=False, do_predict=False, n_gpus=n_gpus,
        train_batch_size=per_tower, num_train_epochs=0.2, use_crf=use_crf,
        bert_config_file=data["no_dropout_config"])))
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(output_dir))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if not name.endswith(("adam_m", "adam_v")) and name != "global_step"}
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    one, two = pool.map(lambda args: run(*args), [("one", 1, 16), ("two", 2, 8)])
  assert set(one) == set(two)
  for name in one:
    np.testing.assert_allclose(two[name], one[name], rtol=1e-4, atol=1e-6, err_msg=name)


def test_a_tag_outside_the_scheme_is_one_line_and_creates_nothing(data, tmp_path):
  data_dir = tmp_path / "bad"
  data_dir.mkdir()
  source = os.path.join(data["root"], "conll")
  for name in ("train.txt", "dev.txt"):
    with open(os.path.join(source, name), encoding="utf-8") as f:
      lines = f.read().split("\n")
    if name == "dev.txt":
      lines[2] = lines[2].split("\t")[0] + "\tX-FOO"
    (data_dir / name).write_text("\n".join(lines), encoding="utf-8")
  output_dir = str(tmp_path / "out")
  args = ner_flags(data, "conll", output_dir, do_predict=False)
  args = [a for a in args if not a.startswith("--data_dir=")] + ["--data_dir=%s" % data_dir]
  result = cli.run_script("run_ner_mgpu.py", args)
  cli.assert_one_line_error(result, str(data_dir / "dev.txt"), "line 3", "X-FOO")
  assert not os.path.exists(output_dir)


def test_normal_initializer_reaches_the_model_and_keeps_the_pad_row_zero(data, tmp_path):
  # --initializer=normal (transformers' start, for training from scratch) zeroes the [PAD]
  # embedding row, which gets no gradient: after training it is still exactly zero, where
  # Google's default initializer left it random. The log names the initializer.
  def run(name, *extra):
    output_dir = str(tmp_path / name)
    result = cli.run_script("run_ner_mgpu.py", ner_flags(
        data, "conll", output_dir, do_eval=False, do_predict=False, num_train_epochs=0.3)
        + list(extra))
    cli.assert_succeeded(result)
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(output_dir))
    return reader.get_tensor("bert/embeddings/word_embeddings"), result.stderr
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    (normal, normal_log), (default, default_log) = pool.map(
        lambda args: run(*args), [("normal", "--initializer=normal"), ("default",)])
  assert np.all(normal[0] == 0)
  assert np.all(np.abs(normal[1:]).max(axis=1) > 0)
  assert np.abs(default[0]).max() > 0
  assert "new weights drawn from the normal initializer" in normal_log
  schedule_lines = [line for line in default_log.splitlines() if "warmup steps" in line]
  assert schedule_lines and not any("initializer" in line for line in schedule_lines)


def test_evaluating_without_the_head_it_needs_is_one_line_before_output_dir_is_touched(
    trained, data, tmp_path):
  # The tagging head (cls/ner/...) and, with --use_crf, the CRF's transitions are checked
  # before output_dir is claimed. Before, a pretrained checkpoint or a softmax model given
  # --use_crf got as far as featurizing and failed in the graph with another message.
  conll_dir, _ = trained["conll"]
  pretrained_dir = str(tmp_path / "pretrained")
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(conll_dir))
  pretrained = checkpoints.write_arrays(
      {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
       if name.startswith("bert/") and not name.endswith(("adam_m", "adam_v"))},
      os.path.join(pretrained_dir, "bert_model.ckpt"))
  no_head_dir = str(tmp_path / "no_head")  # the tag list of a model, no checkpoint
  os.makedirs(no_head_dir)
  shutil.copy(os.path.join(conll_dir, "labels.txt"), no_head_dir)
  softmax_dir = str(tmp_path / "softmax")
  shutil.copytree(conll_dir, softmax_dir)
  before = sorted(os.listdir(softmax_dir))
  runs = [ner_flags(data, "conll", no_head_dir, do_train=False, do_predict=False,
                    init_checkpoint=pretrained),
          ner_flags(data, "conll", softmax_dir, do_train=False, do_predict=False,
                    use_crf=True)]
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    no_head, softmax = pool.map(lambda args: cli.run_script("run_ner_mgpu.py", args), runs)
  cli.assert_one_line_error(no_head, pretrained + " has no cls/ner/output_weights: it is not "
                            "a model fine-tuned for named-entity recognition")
  assert os.listdir(no_head_dir) == ["labels.txt"]
  cli.assert_one_line_error(softmax, "has no cls/ner/crf/transitions: it was trained without "
                            "--use_crf", os.path.join(softmax_dir, "best"))
  assert sorted(os.listdir(softmax_dir)) == before
