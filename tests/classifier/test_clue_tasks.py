# coding=utf-8
"""The CLUE tasks (afqmc, cmnli, ocnli, csl, cluewsc2020 beside tnews and iflytek) and
--clue_submission.

The readers are tested directly on small files written in CLUE's formats (one JSON
object per line; the examples in CLUE's README: integer ids, "-" labels, keyword lists,
WSC spans). The submission files are tested through one real run of
run_classifier_mgpu.py on a tiny BERT (the demo_data fixture of conftest.py).
"""

import json
import logging
import os
import random
import subprocess

import pytest

from bert_mgpu.classifier import clue_processors
from bert_mgpu.classifier import input_examples
from bert_mgpu.classifier import task_registry
import cli
from bert_mgpu.classifier import clue_submission
from classifier_runs import base_flags, read_lines, run_classifier
from usage_errors import assert_usage_error

# CLUE's README example of CLUEWSC2020 (and its span markers as CLUE's baseline sets them).
WSC_TEXT = u"这时候放在床上枕头旁边的手机响了，我感到奇怪，因为欠费已被停机两个月，现在它突然响了。"
WSC_OBJECT = {"target": {"span2_index": 37, "span1_index": 5, "span1_text": u"床",
                         "span2_text": u"它"},
              "idx": 261, "label": "false", "text": WSC_TEXT}
WSC_MARKED = u"这时候放在_床_上枕头旁边的手机响了，我感到奇怪，因为欠费已被停机两个月，现在[它]突然响了。"
NLI_LABELS = ["contradiction", "entailment", "neutral"]


def write_json_lines(path, objects):
  with open(str(path), "w", encoding="utf-8", newline="") as f:
    f.write("".join(json.dumps(obj, ensure_ascii=False) + "\n" for obj in objects))
  return str(path)


def read(task, data_dir, split):
  return task_registry.get_processor(task).get_examples(str(data_dir), split)


def summary(examples):
  return [(e.guid, e.text_a, e.text_b, e.label, e.raw_id) for e in examples]


class _KeepInfo(logging.Handler):
  """Keeps the messages the CLUE processors log at INFO and above while in use."""

  def __enter__(self):
    self.messages = []
    self.level_before = clue_processors._LOGGER.level  # pylint: disable=protected-access
    clue_processors._LOGGER.setLevel(logging.INFO)  # pylint: disable=protected-access
    clue_processors._LOGGER.addHandler(self)  # pylint: disable=protected-access
    return self

  def __exit__(self, *unused_exc):
    clue_processors._LOGGER.removeHandler(self)  # pylint: disable=protected-access
    clue_processors._LOGGER.setLevel(self.level_before)  # pylint: disable=protected-access

  def emit(self, record):
    self.messages.append(record.getMessage())


# ---------------------------------------------------------------------------
# Readers
# ---------------------------------------------------------------------------

def test_afqmc_sentence_pairs_and_integer_ids(tmp_path):
  write_json_lines(tmp_path / "train.json", [
      {"sentence1": u"双十一花呗提额在哪", "sentence2": u"里可以提花呗额度", "label": "0"},
      {"sentence1": u"花呗", "sentence2": u"借呗", "label": "1"}])
  write_json_lines(tmp_path / "test.json", [
      {"id": 0, "sentence1": u"一", "sentence2": u"二"},
      {"id": "7", "sentence1": u"三", "sentence2": u"四"}])
  assert summary(read("afqmc", tmp_path, "train")) == [
      ("train-0", u"双十一花呗提额在哪", u"里可以提花呗额度", "0", None),
      ("train-1", u"花呗", u"借呗", "1", None)]
  test = read("afqmc", tmp_path, "test")
  assert summary(test) == [("0", u"一", u"二", None, 0), ("7", u"三", u"四", None, "7")]
  assert [type(e.raw_id) for e in test] == [int, str]  # as test.json holds them


@pytest.mark.parametrize("task", ["cmnli", "ocnli"])
def test_nli_drops_dash_rows_from_train_and_dev_and_logs_the_counts(tmp_path, task):
  train = write_json_lines(tmp_path / "train.json", [
      {"sentence1": "a", "sentence2": "b", "label": "neutral"},
      {"sentence1": "c", "sentence2": "d", "label": "-"},
      {"sentence1": "e", "sentence2": "f", "label": "-"},
      {"sentence1": "g", "sentence2": "h", "label": "entailment"}])
  dev = write_json_lines(tmp_path / "dev.json", [
      {"level": "medium", "sentence1": "i", "sentence2": "j", "label": "-", "label0": "neutral",
       "genre": "lit", "prem_id": "lit_635", "id": 0},
      {"level": "easy", "sentence1": "k", "sentence2": "l", "label": "contradiction",
       "genre": "gov", "prem_id": "gov_1260", "id": 1}])
  write_json_lines(tmp_path / "test.json", [
      {"sentence1": "m", "sentence2": "n", "id": 0},
      {"sentence1": "o", "sentence2": "p", "id": 1, "label": "-"}])
  with _KeepInfo() as log:
    examples = read(task, tmp_path, "train")
    assert summary(examples) == [
        ("train-0", "a", "b", "neutral", None), ("train-1", "g", "h", "entailment", None)]
    assert [e.source_line for e in examples] == [1, 4]
    assert summary(read(task, tmp_path, "dev")) == [("1", "k", "l", "contradiction", 1)]
    # Test rows are never dropped: each needs its prediction.
    assert summary(read(task, tmp_path, "test")) == [("0", "m", "n", None, 0),
                                                    ("1", "o", "p", None, 1)]
  assert len([m for m in log.messages if train in m and "2 of 4 examples dropped" in m]) == 1
  assert len([m for m in log.messages if dev in m and "1 of 2 examples dropped" in m]) == 1
  assert not [m for m in log.messages if "test.json" in m]
  assert task_registry.get_processor(task).get_labels(str(tmp_path)) == NLI_LABELS


def test_ocnli_reads_train_50k_json_before_train_json(tmp_path):
  write_json_lines(tmp_path / "train.json", [{"sentence1": "x", "sentence2": "y",
                                               "label": "neutral"}])
  assert [e.text_a for e in read("ocnli", tmp_path, "train")] == ["x"]
  path = write_json_lines(tmp_path / "train.50k.json", [
      {"sentence1": "50k", "sentence2": "y", "label": "entailment", "id": 3}])
  processor = task_registry.get_processor("ocnli")
  assert processor.input_files(str(tmp_path), "train") == [path]
  assert summary(processor.get_examples(str(tmp_path), "train")) == [
      ("3", "50k", "y", "entailment", 3)]
  assert read("cmnli", tmp_path, "train")[0].text_a == "x"  # CMNLI has only train.json


def test_csl_keywords_joined_by_spaces_then_the_abstract(tmp_path):
  write_json_lines(tmp_path / "train.json", [
      {"id": 1, "abst": u"为解决传统均匀FFT波束形成算法引起的问题", "keyword": [
          u"水声学", "FFT", u"波束形成", u"3维成像声呐"], "label": "1"}])
  write_json_lines(tmp_path / "test.json", [{"id": 0, "abst": u"摘要", "keyword": [u"词"]}])
  assert summary(read("csl", tmp_path, "train")) == [
      ("1", u"水声学 FFT 波束形成 3维成像声呐", u"为解决传统均匀FFT波束形成算法引起的问题", "1", 1)]
  assert summary(read("csl", tmp_path, "test")) == [("0", u"词", u"摘要", None, 0)]


def baseline_wsc_text(text, span1_index, span1_text, span2_index, span2_text):
  """CLUE's baseline marking, one character insert at a time: the reference."""
  chars = list(text)
  if span2_index > span1_index:
    chars.insert(span1_index, "_")
    chars.insert(span1_index + len(span1_text) + 1, "_")
    chars.insert(span2_index + 2, "[")
    chars.insert(span2_index + len(span2_text) + 3, "]")
  else:
    chars.insert(span2_index, "[")
    chars.insert(span2_index + len(span2_text) + 1, "]")
    chars.insert(span1_index + 2, "_")
    chars.insert(span1_index + len(span1_text) + 3, "_")
  return "".join(chars)


def wsc_object(text, span1_index, span1_text, span2_index, span2_text, idx, label=None):
  obj = {"target": {"span2_index": span2_index, "span1_index": span1_index,
                    "span1_text": span1_text, "span2_text": span2_text},
         "idx": idx, "text": text}
  if label is not None:
    obj["label"] = label
  return obj


def test_cluewsc2020_marks_the_spans_as_clues_baseline_does(tmp_path):
  text = u"他走后，老蔡骂上了，说老裴外甥平白无故"
  # span2 after span1, before it, right after its end, right before its start, at 0.
  spans = [(4, u"老蔡", 11, u"老裴"), (11, u"老裴外甥", 0, u"他"), (11, u"老裴", 13, u"外甥"),
           (13, u"外甥", 11, u"老裴"), (0, u"他走后", 6, u"骂")]
  write_json_lines(tmp_path / "train.json", [WSC_OBJECT] + [
      wsc_object(text, *span, idx=i, label="true") for i, span in enumerate(spans)])
  write_json_lines(tmp_path / "test.json", [wsc_object(text, *spans[0], idx=0)])
  examples = read("cluewsc2020", tmp_path, "train")
  assert summary(examples[:1]) == [("261", WSC_MARKED, None, "false", 261)]
  assert [e.text_a for e in examples[1:]] == [
      baseline_wsc_text(text, *span) for span in spans]
  assert examples[3].text_a == u"他走后，老蔡骂上了，说_老裴_[外甥]平白无故"
  assert summary(read("cluewsc2020", tmp_path, "test")) == [
      ("0", baseline_wsc_text(text, *spans[0]), None, None, 0)]
  assert task_registry.get_processor("cluewsc2020").get_labels(str(tmp_path)) == ["true", "false"]


def test_fixed_label_lists_in_clues_order(tmp_path):
  expected = {"afqmc": ["0", "1"], "cmnli": NLI_LABELS, "ocnli": NLI_LABELS, "csl": ["0", "1"],
              "cluewsc2020": ["true", "false"]}
  for task, labels in expected.items():
    assert task_registry.get_processor(task).get_labels(str(tmp_path)) == labels, task


def test_jsonl_takes_sentence1_and_sentence2(tmp_path):
  write_json_lines(tmp_path / "train.jsonl", [
      {"sentence1": "a", "sentence2": "b", "label": "x"}, {"text_a": "c", "label": "y"}])
  assert [(e.text_a, e.text_b, e.label) for e in read("jsonl", tmp_path, "train")] == [
      ("a", "b", "x"), ("c", None, "y")]


# ---------------------------------------------------------------------------
# Bad input: one line naming the file, the line and the value
# ---------------------------------------------------------------------------

def test_wsc_span_that_does_not_match_the_text(tmp_path):
  bad = json.loads(json.dumps(WSC_OBJECT))
  bad["target"]["span2_index"] = 36
  path = write_json_lines(tmp_path / "train.json", [WSC_OBJECT, bad])
  assert_usage_error(lambda: read("cluewsc2020", tmp_path, "train"), path, "line 2",
                     u"span2_text '它' does not match the text at span2_index 36 ('在')")
  bad["target"]["span2_index"] = 99
  path = write_json_lines(tmp_path / "dev.json", [bad])
  assert_usage_error(lambda: read("cluewsc2020", tmp_path, "dev"), path, "line 1",
                     "span2_index 99 ('')")
  del bad["target"]["span1_text"]
  path = write_json_lines(tmp_path / "test.json", [bad])
  assert_usage_error(lambda: read("cluewsc2020", tmp_path, "test"), path, "line 1",
                     "span1_text", "span2_index")


@pytest.mark.parametrize("task,obj,fragments", [
    ("afqmc", {"sentence1": "a", "label": "0"}, ["sentence2", '"sentence1": "a"']),
    ("cmnli", {"sentence1": "a", "sentence2": "b"}, ["no label", '"sentence2": "b"']),
    ("csl", {"abst": "a", "keyword": u"词", "label": "1"}, ["'keyword'", "list of strings"]),
    ("csl", {"keyword": ["k"], "label": "1"}, ["no abst key"]),
    ("cluewsc2020", {"idx": 1, "label": "true", "text": "t"}, ["'target'", '"idx": 1']),
    ("tnews", {"label": "102"}, ["no sentence key"]),
])
def test_missing_or_malformed_key(tmp_path, task, obj, fragments):
  path = write_json_lines(tmp_path / "train.json", [obj])
  assert_usage_error(lambda: read(task, tmp_path, "train"), path, "line 1", *fragments)


# ---------------------------------------------------------------------------
# Submission files
# ---------------------------------------------------------------------------

def test_submission_file_names_of_every_clue_task(tmp_path):
  examples = [input_examples.InputExample("3", "a", raw_id=3),
              input_examples.InputExample("x", "b", raw_id="x"),
              input_examples.InputExample("test-2", "c")]
  expected_names = {
      "tnews": ["tnews_predict.json", "tnews11_predict.json"],
      "iflytek": ["iflytek_predict.json"], "afqmc": ["afqmc_predict.json"],
      "cmnli": ["cmnli_predict.json"], "csl": ["csl_predict.json"],
      "ocnli": ["ocnli_predict.json", "ocnli_50k_predict.json"],
      "cluewsc2020": ["cluewsc2020_predict.json", "cluewsc11_predict.json"]}
  assert sorted(expected_names) == sorted(clue_submission.CLUE_TASKS)
  for task, names in expected_names.items():
    output_dir = tmp_path / task
    output_dir.mkdir()
    paths = clue_submission.write_submission(str(output_dir), task.upper(), examples,
                                             ["1", "0", "1"])
    assert paths == [str(output_dir / name) for name in names]
    assert sorted(os.listdir(str(output_dir))) == sorted(names)  # no temp file left
    for path in paths:
      # The id keeps its JSON type; without one, the position (as CLUE's baseline writes).
      assert read_lines(path) == ['{"id": 3, "label": "1"}', '{"id": "x", "label": "0"}',
                                  '{"id": 2, "label": "1"}']


def test_submission_flag_checks():
  for task in clue_submission.CLUE_TASKS:
    clue_submission.check_flags(task, True)
  assert_usage_error(lambda: clue_submission.check_flags("tsv", True), "--task_name=tsv",
                     "not a CLUE task", "cluewsc2020")
  assert_usage_error(lambda: clue_submission.check_flags(None, True), "not a CLUE task")
  assert_usage_error(lambda: clue_submission.check_flags("afqmc", False), "--do_predict")


# ---------------------------------------------------------------------------
# One run: OCNLI files -> train, eval, predict -> the submission files
# ---------------------------------------------------------------------------

def write_ocnli_data(data_dir, texts):
  """OCNLI-format files from the demo texts; returns the test objects."""
  rng = random.Random(3)

  def pair(i, label=None, **extra):
    obj = dict(sentence1=texts[i % len(texts)], sentence2=texts[(i * 7 + 1) % len(texts)],
               **extra)
    if label is not None:
      obj["label"] = label
    return obj

  train = [pair(i, rng.choice(NLI_LABELS), id=i) for i in range(24)]
  train[3]["label"] = train[10]["label"] = "-"
  dev = [pair(30 + i, rng.choice(NLI_LABELS), id=i) for i in range(9)]
  dev[4]["label"] = "-"
  # Ids in file order, not sorted, one of them a string.
  test = [pair(50 + i, id=raw_id) for i, raw_id in enumerate([5, 3, "7", 0, 12, 1, 2])]
  write_json_lines(os.path.join(data_dir, "train.50k.json"), train)
  write_json_lines(os.path.join(data_dir, "dev.json"), dev)
  write_json_lines(os.path.join(data_dir, "test.json"), test)
  return test


def test_clue_submission_run(demo_data, tmp_path):
  data_dir = str(tmp_path / "ocnli")
  os.makedirs(data_dir)
  test = write_ocnli_data(data_dir, [text for _, text in demo_data.train])
  output_dir = str(tmp_path / "model")
  result = run_classifier(base_flags(demo_data, output_dir, task_name="ocnli",
                                     data_dir=data_dir, clue_submission=True,
                                     num_train_epochs=1))
  cli.assert_succeeded(result)
  assert "train.50k.json: 2 of 24 examples dropped" in result.stderr
  assert "dev.json: 1 of 9 examples dropped" in result.stderr
  predicted = read_lines(os.path.join(output_dir, "predict.txt"))
  assert len(predicted) == len(test) and set(predicted) <= set(NLI_LABELS)
  with open(os.path.join(output_dir, "ocnli_predict.json"), encoding="utf-8") as f:
    text = f.read()
  with open(os.path.join(output_dir, "ocnli_50k_predict.json"), encoding="utf-8") as f:
    assert f.read() == text
  rows = [json.loads(line) for line in text.splitlines()]
  assert [list(row) for row in rows] == [["id", "label"]] * len(test)
  assert [row["id"] for row in rows] == [obj["id"] for obj in test]
  assert [type(row["id"]) for row in rows] == [int, int, str, int, int, int, int]
  assert [row["label"] for row in rows] == predicted


def test_run_clue_sh_passes_clues_recipe_split_over_the_gpus():
  script = os.path.join(cli.REPO_DIR, "scripts", "run_clue.sh")

  def run(task, gpus):
    env = dict(os.environ, PYTHON="echo", GPUS=gpus, BERT_DIR="/bert", DATA_DIR="/data",
               OUTPUT_DIR="/out")
    return subprocess.run(["bash", script, task, "--num_workers=1"], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=60)

  def flags_used(stdout):
    """The value of each flag as the script reads it: the last one given."""
    return dict(arg.split("=", 1) for arg in stdout.split()[1:])

  result = run("csl", "0,1")
  assert result.returncode == 0, result.stderr
  assert result.stdout.split()[0].endswith("run_classifier_mgpu.py")
  flags = flags_used(result.stdout)
  expected = {"--task_name": "csl", "--n_gpus": "2", "--max_seq_length": "256",
              "--train_batch_size": "2", "--learning_rate": "1e-5", "--num_train_epochs": "5",
              "--clue_submission": "true", "--do_predict": "true", "--data_dir": "/data",
              "--init_checkpoint": "/bert/bert_model.ckpt", "--num_workers": "1"}
  assert dict((k, flags.get(k)) for k in expected) == expected
  assert flags_used(run("cluewsc2020", "0").stdout)["--train_batch_size"] == "8"
  result = run("csl", "0,1,2")  # CLUE's batch of 4 does not split over 3 towers
  assert result.returncode == 1 and "error: " in result.stderr and not result.stdout
  assert run("wsc", "0").returncode == 1


@pytest.mark.parametrize("overrides,fragments", [
    ({"task_name": "tsv"}, ["--clue_submission", "--task_name=tsv", "not a CLUE task"]),
    ({"task_name": "afqmc", "do_predict": None}, ["--clue_submission", "--do_predict"]),
])
def test_clue_submission_flag_errors_write_nothing(demo_data, tmp_path, overrides, fragments):
  output_dir = str(tmp_path / "model")
  result = run_classifier(base_flags(demo_data, output_dir, clue_submission=True,
                                     **overrides))
  cli.assert_one_line_error(result, *fragments)
  assert not os.path.exists(output_dir)
