# coding=utf-8
"""A reading-comprehension model put to work (#43): run_squad_mgpu.py --export_dir, and
predict_text.py on its export and on its output_dir, in a file, over HTTP and on ONNX
Runtime; docs/SERVING.md section 5 is the spec.

Two training runs (one module fixture, run side by side): scripts/make_squad_data.py's
English SQuAD v2.0 (unanswerable questions) and Chinese v1.1 (CMRC 2018 style), a tiny BERT
trained briefly with --do_train --do_predict --export_dir on two towers, so that its answers
are a mix of right and wrong spans (and, for v2, of no-answers). Contexts of about one
question in six span several windows at max_seq_length 64 / doc_stride 24.

The oracle is the run's own --do_predict output: predictions.json (the answer texts),
nbest_predictions.json (the probability of each text, and of the null entry on v2) and
null_odds.json (what a changed --null_score_diff_threshold must answer); the dev files give
the contexts, in which every answer must stand at its `start`.

ONNX tests skip on TF 1.15 (no ONNX export there); ONNX Runtime runs with TensorFlow made
unimportable (cli.write_blocking_wrapper).
"""

import collections
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest
import tensorflow.compat.v1 as tf

import cli
from cli import read_json, read_jsonl
from bert_mgpu.squad import data as squad_data
import tokenization


from optional_packages import HAS_ONNX, needs_onnx, onnxruntime

MAKE_DATA = cli.script_path(os.path.join("scripts", "make_squad_data.py"))
MAX_SEQ_LENGTH = 64
DOC_STRIDE = 24
MAX_QUERY_LENGTH = 16
N_BEST_SIZE = 5
TRAIN_QUESTIONS = 300
# language -> (SQuAD version, dev questions)
DATASETS = collections.OrderedDict([("en", ("2.0", 60)), ("zh", ("1.1", 40))])
# Served probabilities equal nbest_predictions.json's within this on TensorFlow (the same
# logits, batched differently), and ONNX float32's equal TensorFlow's within ONNX_TOLERANCE.
TF_TOLERANCE = 1e-6
ONNX_TOLERANCE = 1e-5
REQUEST_TIMEOUT_SECONDS = 60
SERVING_PATTERN = r"Serving on (http://\S+)"
LOG_PATTERN = (r"Answered (\d+) question\(s\) \((\d+) window\(s\); (\d+) without an "
               r"answer\)")


def write_jsonl(path, values):
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join(json.dumps(v, ensure_ascii=False) + "\n" for v in values))
  return path


def trained_settings(version_2, threshold=0.0):
  """The model_settings.json the training run must keep (its flags)."""
  return {"model": "squad", "do_lower_case": True, "max_seq_length": MAX_SEQ_LENGTH,
          "doc_stride": DOC_STRIDE, "max_query_length": MAX_QUERY_LENGTH,
          "max_answer_length": 30, "n_best_size": N_BEST_SIZE,
          "version_2_with_negative": version_2, "null_score_diff_threshold": threshold}


# ---------------------------------------------------------------------------
# The trained models
# ---------------------------------------------------------------------------

class SquadModel(object):
  """One trained run: its files, its dev questions and --do_predict's answers, and
  predict_text.py's records on its export and output_dir (run once each, when asked)."""

  def __init__(self, root, language):
    self.root = root
    self.language = language
    self.version, self.dev_questions = DATASETS[language]
    self.version_2 = self.version == "2.0"
    self.data_dir = os.path.join(root, "data")
    suffix = "" if self.version == "1.1" else "-v2.0"
    if language == "zh":
      self.train_file = os.path.join(self.data_dir, "cmrc2018_train%s.json" % suffix)
      self.dev_file = os.path.join(self.data_dir, "cmrc2018_dev%s.json" % suffix)
    else:
      self.train_file = os.path.join(self.data_dir, "train-v%s.json" % self.version)
      self.dev_file = os.path.join(self.data_dir, "dev-v%s.json" % self.version)
    self.output_dir = os.path.join(root, "model")
    self.export_base = os.path.join(root, "exports")
    self.version_dir = os.path.join(self.export_base, "1")
    self._served = {}

  def train(self):
    result = subprocess.run(
        [sys.executable, MAKE_DATA, "--output_dir", self.data_dir, "--language", self.language,
         "--version", self.version, "--train_questions", str(TRAIN_QUESTIONS),
         "--dev_questions", str(self.dev_questions), "--seed", "7"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8", timeout=120)
    assert result.returncode == 0, result.stderr
    flags = {
        "vocab_file": os.path.join(self.data_dir, "vocab.txt"),
        "bert_config_file": os.path.join(self.data_dir, "bert_config.json"),
        "output_dir": self.output_dir, "max_seq_length": MAX_SEQ_LENGTH,
        "doc_stride": DOC_STRIDE, "max_query_length": MAX_QUERY_LENGTH, "n_gpus": 2,
        "predict_batch_size": 8, "n_best_size": N_BEST_SIZE, "do_train": True,
        "do_predict": True, "train_file": self.train_file, "predict_file": self.dev_file,
        "train_batch_size": 8, "learning_rate": 1e-3, "num_train_epochs": 12,
        "save_checkpoints_steps": 100000, "log_steps": 1000,
        "version_2_with_negative": self.version_2 or None, "export_dir": self.export_base,
        "export_format": "both" if HAS_ONNX else None, "onnx_int8": HAS_ONNX or None}
    cli.assert_succeeded(cli.run_script("run_squad_mgpu.py", cli.flag_list(flags)))
    self._read_outputs()
    return self

  def _read_outputs(self):
    self.questions = []
    for article in read_json(self.dev_file)["data"]:
      for paragraph in article["paragraphs"]:
        for qa in paragraph["qas"]:
          self.questions.append(collections.OrderedDict([
              ("id", qa["id"]), ("question", qa["question"]),
              ("context", paragraph["context"])]))
    assert len(self.questions) == self.dev_questions
    self.by_id = {q["id"]: q for q in self.questions}
    self.questions_file = write_jsonl(os.path.join(self.root, "questions.jsonl"),
                                      self.questions)
    self.predictions = read_json(os.path.join(self.output_dir, "predictions.json"))
    self.nbest = read_json(os.path.join(self.output_dir, "nbest_predictions.json"))
    self.null_odds = (read_json(os.path.join(self.output_dir, "null_odds.json"))
                      if self.version_2 else None)
    assert sorted(self.predictions) == sorted(self.by_id)
    # The windows of each question, counted by the windowing run_squad_mgpu.py uses, and
    # where its first window's context ends (in characters).
    tokenizer = tokenization.FullTokenizer(os.path.join(self.output_dir, "vocab.txt"),
                                           do_lower_case=True)
    examples = [squad_data.SquadExample(q["id"], q["question"], q["context"])
                for q in self.questions]
    windows = list(squad_data.convert_examples_to_features(
        examples, tokenizer, MAX_SEQ_LENGTH, DOC_STRIDE, MAX_QUERY_LENGTH, False,
        collections.Counter()))
    self.windows = collections.Counter(examples[w.example_index].qas_id for w in windows)
    self.first_window_end = {}
    for window in windows:
      qid = examples[window.example_index].qas_id
      self.first_window_end.setdefault(qid, max(window.token_ends))

  def nbest_probability(self, qid, text):
    matches = [e["probability"] for e in self.nbest[qid] if e["text"] == text]
    assert len(matches) == 1, (qid, text, self.nbest[qid])
    return matches[0]

  def served(self, source):
    """predict_text.py's records on the questions file; source: "export" (TensorFlow),
    "output_dir" (TensorFlow, 2 towers), "onnx" or "int8" (ONNX Runtime)."""
    if source not in self._served:
      args = {
          "export": ["--export_dir=" + self.export_base, "--predict_batch_size=5"],
          "output_dir": ["--output_dir=" + self.output_dir, "--n_gpus=2",
                         "--predict_batch_size=3"],
          # ONNX Runtime with TensorFlow unimportable: the path imports none.
          "onnx": ["tensorflow", "--backend=onnxruntime", "--export_dir=" + self.version_dir,
                   "--onnx_threads=1"],
          "int8": ["tensorflow", "--backend=onnxruntime", "--export_dir=" + self.export_base,
                   "--onnx_file=model.int8.onnx", "--onnx_threads=1"],
      }[source]
      script = "predict_text.py"
      if source in ("onnx", "int8"):
        script = cli.write_blocking_wrapper(os.path.join(self.root, "predict_text_no_tf.py"),
                                            "predict_text.py")
      self._served[source] = run_predict_file(self, args, "answers_%s.jsonl" % source,
                                              script=script)
    return self._served[source]


def run_predict_file(model, args, output_name, questions_file=None, script="predict_text.py"):
  """predict_text.py (or `script`, a wrapper of it) on model's questions (or
  questions_file); returns its records, checked against its log line (questions, windows,
  no-answers)."""
  output_file = os.path.join(model.root, output_name)
  result = cli.run_script(script, list(args) + [
      "--input_file=" + (questions_file or model.questions_file),
      "--output_file=" + output_file])
  cli.assert_succeeded(result)
  records = read_jsonl(output_file)
  match = re.search(LOG_PATTERN, result.stderr)
  assert match, result.stderr[-3000:]
  if questions_file is None:
    assert int(match.group(1)) == len(records) == len(model.questions)
    assert int(match.group(2)) == sum(model.windows.values())
  assert int(match.group(3)) == sum(1 for r in records if r["answer"] == "")
  return records


@pytest.fixture(scope="module")
def models(tmp_path_factory):
  """{"en": SquadModel (v2.0), "zh": SquadModel (v1.1)}, trained side by side."""
  roots = {language: str(tmp_path_factory.mktemp("squad_serving_" + language))
           for language in DATASETS}
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    futures = {language: pool.submit(SquadModel(roots[language], language).train)
               for language in DATASETS}
    return {language: future.result() for language, future in futures.items()}


# ---------------------------------------------------------------------------
# The files of the run and of its export
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("language", list(DATASETS))
def test_the_run_keeps_the_serving_files_and_exports_them(models, language):
  model = models[language]
  settings = trained_settings(model.version_2)
  assets = os.path.join(model.version_dir, "assets.extra")
  for directory in (model.output_dir, assets):
    assert read_json(os.path.join(directory, "model_settings.json")) == settings, directory
    assert not os.path.exists(os.path.join(directory, "labels.txt")), directory
    for name in ("vocab.txt", "bert_config.json"):
      with open(os.path.join(directory, name), "rb") as f, open(
          os.path.join(model.data_dir, name), "rb") as g:
        assert f.read() == g.read(), (directory, name)
  expected = {"assets.extra", "saved_model.pb", "variables"}
  if HAS_ONNX:
    expected |= {"model.onnx", "model.int8.onnx"}
  assert set(os.listdir(model.version_dir)) == expected
  assert os.listdir(model.export_base) == ["1"]


def test_the_signature_takes_windows_and_returns_start_and_end_logits(models):
  with tf.Graph().as_default(), tf.Session() as sess:
    meta_graph = tf.saved_model.loader.load(sess, [tf.saved_model.tag_constants.SERVING],
                                            models["en"].version_dir)
  signature = meta_graph.signature_def["serving_default"]
  assert sorted(signature.inputs) == ["input_ids", "input_mask", "segment_ids"]
  assert sorted(signature.outputs) == ["end_logits", "start_logits"]
  for tensors, dtype in ((signature.inputs, tf.int32), (signature.outputs, tf.float32)):
    for name, tensor in tensors.items():
      assert tensor.dtype == dtype.as_datatype_enum, name
      assert [d.size for d in tensor.tensor_shape.dim] == [-1, -1], name


# ---------------------------------------------------------------------------
# predict_text.py: the answers of --do_predict
# ---------------------------------------------------------------------------

CASES = [(language, source) for language in DATASETS for source in ("export", "output_dir")]


@pytest.mark.parametrize("language,source", CASES)
def test_served_answers_are_those_of_predictions_json(models, language, source):
  model = models[language]
  records = model.served(source)
  assert [r["id"] for r in records] == [q["id"] for q in model.questions]
  assert {r["id"]: r["answer"] for r in records} == model.predictions
  for record in records:
    assert list(record) == ["id", "answer", "start", "probability"], record
  # What the comparison covered: single- and multi-window contexts, answers found beyond
  # the first window, and on v2 both answers and no-answers.
  multi = [q for q in model.windows if model.windows[q] > 1]
  assert 3 <= len(multi) <= len(records) - 3, model.windows
  assert max(model.windows.values()) >= 3
  beyond = [r for r in records if r["answer"] and r["start"] >= model.first_window_end[r["id"]]]
  assert beyond, "no answer came from a later window"
  answered = [r for r in records if r["answer"]]
  if model.version_2:
    assert 3 <= len(answered) <= len(records) - 3, records
  else:
    assert len(answered) == len(records)


@pytest.mark.parametrize("language,source", CASES)
def test_every_answer_stands_at_its_start_with_its_nbest_probability(models, language,
                                                                      source):
  model = models[language]
  records = model.served(source)
  for record in records:
    qid, answer, start = record["id"], record["answer"], record["start"]
    context = model.by_id[qid]["context"]
    if answer:
      assert 0 <= start <= len(context) - len(answer), record
      assert context[start:start + len(answer)] == answer, (record, context)
    else:
      assert model.version_2 and start == -1, record
      # No answer: the null odds exceeded the trained threshold, 0.
      assert model.null_odds[qid] > 0.0, (record, model.null_odds[qid])
    # A no-answer's probability is the null entry's.
    expected = model.nbest_probability(qid, answer)
    assert abs(record["probability"] - expected) <= TF_TOLERANCE, (record, expected)
  probabilities = [r["probability"] for r in records]
  assert 0.0 < min(probabilities) and max(probabilities) <= 1.0
  assert max(probabilities) - min(probabilities) > 0.1  # not a constant


# ---------------------------------------------------------------------------
# --serve
# ---------------------------------------------------------------------------

def request(url, body=None):
  return cli.http_json(url, body, REQUEST_TIMEOUT_SECONDS)


def post(url, payload):
  return request(url + "/predict", json.dumps(payload, ensure_ascii=False).encode("utf-8"))


def post_bytes(url, body):
  return request(url + "/predict", body)


def assert_records_close(actual, expected, tolerance):
  """The same records, the probabilities within `tolerance`."""
  assert isinstance(actual, list) and len(actual) == len(expected), (actual, expected)
  for a, e in zip(actual, expected):
    assert sorted(a) == sorted(e), (a, e)
    assert (a["id"], a["answer"], a["start"]) == (e["id"], e["answer"], e["start"]), (a, e)
    assert abs(a["probability"] - e["probability"]) <= tolerance, (a, e)


def request_rows(model):
  """Rows of the questions for a multi-question request: every multi-window one, then
  every no-answer one, then the first few others."""
  records = model.served("export")
  multi = [i for i, q in enumerate(model.questions) if model.windows[q["id"]] > 1]
  empty = [i for i, r in enumerate(records) if not r["answer"] and i not in multi]
  others = [i for i in range(len(records)) if i not in multi and i not in empty]
  return multi + empty[:4] + others[:4]


@pytest.mark.parametrize("backend", ["tensorflow",
                                     pytest.param("onnxruntime", marks=needs_onnx)])
def test_serve_answers_as_the_file(models, tmp_path, backend):
  model = models["en"]
  expected = model.served("export" if backend == "tensorflow" else "onnx")
  longest = max(len(q["context"]) for q in model.questions)
  args = ["--backend=" + backend, "--export_dir=" + model.export_base, "--serve=0",
          "--host=127.0.0.1", "--max_batch=4", "--max_context_chars=%d" % longest]
  if backend == "onnxruntime":
    args.append("--onnx_threads=1")
  with cli.RunningScript("predict_text.py", args, str(tmp_path / "serve.log")) as running:
    running.wait_for(lambda: re.search(SERVING_PATTERN, running.stderr()),
                     "the server listening")
    url = re.search(SERVING_PATTERN, running.stderr()).group(1)
    assert url.startswith("http://127.0.0.1:")
    running.wait_for(lambda: request(url + "/healthz")[0] == 200, "the model ready")

    status, reply = request(url + "/labels")
    assert status == 200, reply
    settings = dict(trained_settings(True))
    del settings["model"]
    assert reply == {"labels": [], "settings": settings}

    # One object: one record.
    for row in (0, request_rows(model)[0]):
      status, reply = post(url, model.questions[row])
      assert status == 200, reply
      assert isinstance(reply, dict)
      assert_records_close([reply], [expected[row]], TF_TOLERANCE)
    # Without an id: null.
    question = dict(model.questions[1])
    del question["id"]
    status, reply = post(url, question)
    assert status == 200, reply
    assert_records_close([reply], [dict(expected[1], id=None)], TF_TOLERANCE)

    # A list (several chunks of --max_batch=4): the list of records, in order.
    rows = request_rows(model)
    assert len(rows) > 8
    status, reply = post(url, [model.questions[i] for i in rows])
    assert status == 200, reply
    assert_records_close(reply, [expected[i] for i in rows], TF_TOLERANCE)
    assert any(r["answer"] == "" and r["start"] == -1 for r in reply)
    assert any(model.windows[r["id"]] > 1 and r["answer"] for r in reply)

    # A malformed item: 400 naming it; the same problem in one object names no item.
    items = [model.questions[0], model.questions[1], {"id": "x", "question": "Where?"}]
    status, reply = post(url, items)
    assert status == 400, reply
    assert "item 2" in reply["error"] and '"context"' in reply["error"], reply
    status, reply = post(url, {"context": model.questions[0]["context"]})
    assert status == 400, reply
    assert '"question"' in reply["error"] and "item" not in reply["error"], reply
    status, reply = post(url, "Where is the tea from?")
    assert status == 400 and "question" in reply["error"], reply
    # A context over --max_context_chars: 413 naming the item.
    too_long = dict(model.questions[0], context="x" * (longest + 1))
    status, reply = post(url, [model.questions[0], too_long])
    assert status == 413, reply
    assert "item 1" in reply["error"] and "--max_context_chars=%d" % longest in reply["error"]
    # The server still answers.
    status, reply = post(url, model.questions[0])
    assert status == 200, reply
    assert_records_close([reply], [expected[0]], TF_TOLERANCE)
    # A broken \u escape (an unpaired surrogate) and a key given twice: 400.
    for body, fragment in (
        (b'{"question": "Where?", "context": "Tea \\ud800 here."}', "unpaired surrogate"),
        (b'{"question": "Where?", "question": "Who?", "context": "Tea."}',
         'the key "question" is given twice')):
      status, reply = post_bytes(url, body)
      assert status == 400 and fragment in reply["error"], reply
    # A context of no tokens (control and zero-width characters) is answered: no answer.
    status, reply = post(url, {"id": "blank", "question": "Where?",
                               "context": "\u0001\u200b\u0002"})
    assert status == 200, reply
    assert (reply["id"], reply["answer"], reply["start"]) == ("blank", "", -1), reply

    running.signal(signal.SIGTERM)
    assert running.wait() == 0, running.stderr()[-3000:]
  assert "Traceback" not in running.stderr()


# ---------------------------------------------------------------------------
# ONNX Runtime
# ---------------------------------------------------------------------------

@needs_onnx
@pytest.mark.parametrize("language", list(DATASETS))
def test_onnx_float32_answers_as_tensorflow(models, language):
  model = models[language]
  expected, actual = model.served("export"), model.served("onnx")
  assert_records_close(actual, expected, ONNX_TOLERANCE)
  assert {r["id"]: r["answer"] for r in actual} == model.predictions


@needs_onnx
@pytest.mark.parametrize("language", list(DATASETS))
def test_onnx_int8_answers_every_question(models, language):
  model = models[language]
  float32, int8 = model.served("onnx"), model.served("int8")
  assert [r["id"] for r in int8] == [q["id"] for q in model.questions]
  for record in int8:
    context = model.by_id[record["id"]]["context"]
    if record["answer"]:
      assert context[record["start"]:record["start"] + len(record["answer"])] == \
          record["answer"], record
    else:
      assert model.version_2 and record["start"] == -1, record
    assert 0.0 < record["probability"] <= 1.0, record
  same = sum(a["answer"] == b["answer"] for a, b in zip(int8, float32))
  assert same >= 0.75 * len(int8), (same, len(int8))
  # model.int8.onnx ran, not model.onnx again.
  assert [r["probability"] for r in int8] != [r["probability"] for r in float32]


# ---------------------------------------------------------------------------
# Export-only with a new --null_score_diff_threshold
# ---------------------------------------------------------------------------

def threshold_between_odds(null_odds):
  """A threshold halfway between the two middle null odds (6 decimals, strictly between):
  about half the questions go either way."""
  odds = sorted(v for v in null_odds.values() if v != squad_data.NO_SPAN_NULL_ODDS)
  middle = len(odds) // 2
  low, high = odds[middle - 1], odds[middle]
  threshold = float("%.6f" % ((low + high) / 2))
  assert low < threshold < high, (low, high)
  return threshold


def test_export_only_with_a_threshold_answers_by_it(models, tmp_path):
  model = models["en"]
  threshold = threshold_between_odds(model.null_odds)
  export_base = str(tmp_path / "exports")
  result = cli.run_script("run_squad_mgpu.py", [
      "--output_dir=" + model.output_dir, "--export_dir=" + export_base,
      "--null_score_diff_threshold=%r" % threshold])
  cli.assert_succeeded(result)
  assert "Exporting with null_score_diff_threshold=%r (trained with 0.0)" % threshold in \
      result.stderr
  assets = os.path.join(export_base, "1", "assets.extra")
  assert read_json(os.path.join(assets, "model_settings.json")) == trained_settings(
      True, threshold)
  assert read_json(os.path.join(model.output_dir, "model_settings.json")) == \
      trained_settings(True)

  records = run_predict_file(model, ["--export_dir=" + export_base], "answers_threshold.jsonl")
  changed = 0
  for record in records:
    qid = record["id"]
    spans = [e["text"] for e in model.nbest[qid] if e["text"]]
    expected = "" if model.null_odds[qid] > threshold or not spans else spans[0]
    assert record["answer"] == expected, (record, model.null_odds[qid], threshold)
    assert abs(record["probability"] - model.nbest_probability(qid, expected)) <= \
        TF_TOLERANCE, record
    if expected:
      context = model.by_id[qid]["context"]
      assert context[record["start"]:record["start"] + len(expected)] == expected
    else:
      assert record["start"] == -1
    changed += record["answer"] != model.predictions[qid]
  assert changed > 0, "the threshold %r changes no answer of the trained one" % threshold


# ---------------------------------------------------------------------------
# Refusals: one line
# ---------------------------------------------------------------------------

BAD_LINES = {
    # case: (the second line, extra flags, what the error names)
    "no_question": ({"id": "b", "context": "Tea comes from Assam."}, [], ['no "question"']),
    "no_context": ({"id": "b", "question": "Where?"}, [], ['no "context"']),
    "blank_question": ({"id": "b", "question": " \t", "context": "Tea comes from Assam."}, [],
                       ['"question" is empty']),
    "blank_context": ({"id": "b", "question": "Where?", "context": "  "}, [],
                      ['"context" is empty']),
    "not_json": ("Where is the tea from?\tTea comes from Assam.", [], ["not JSON"]),
    "empty_line": ("", [], ["the line is empty"]),
    "surrogate": ('{"id": "b", "question": "Where?", "context": "Tea \\udc00."}', [],
                  ['"context" holds an unpaired surrogate \\udc00 at character 5']),
    "twice": ('{"id": "b", "question": "Where?", "question": "Who?", "context": "Tea."}', [],
              ['the key "question" is given twice']),
    "nan_id": ('{"id": NaN, "question": "Where?", "context": "Tea."}', [],
               ['"id" is NaN: give a string or a finite number']),
    "context_too_long": ({"id": "b", "question": "Where?", "context": "Tea. " * 11},
                         ["--max_context_chars=50"],
                         ["the context has 55 characters", "--max_context_chars=50"]),
}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_a_bad_input_line_is_one_line_naming_it(models, tmp_path, case):
  line, flags, fragments = BAD_LINES[case]
  input_file = str(tmp_path / "questions.jsonl")
  first = {"id": "a", "question": "Where is the tea from?", "context": "Tea comes from Assam."}
  assert len(first["context"]) <= 50
  with open(input_file, "w", encoding="utf-8") as f:
    f.write(json.dumps(first) + "\n")
    f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    f.write(json.dumps(first) + "\n")
  output_file = str(tmp_path / "answers.jsonl")
  result = cli.run_script("predict_text.py", [
      "--export_dir=" + models["en"].export_base, "--input_file=" + input_file,
      "--output_file=" + output_file] + flags)
  cli.assert_one_line_error(result, input_file + " line 2: ", *fragments, last=True)
  assert not os.path.exists(output_file)


def test_text_b_on_a_squad_model_is_one_line(models, tmp_path):
  output_file = str(tmp_path / "answers.jsonl")
  result = cli.run_script("predict_text.py", [
      "--export_dir=" + models["en"].export_base, "--input_file=" + models["en"].questions_file,
      "--output_file=" + output_file, "--text_b"])
  cli.assert_one_line_error(result, "--text_b", "reading-comprehension model", last=True)
  assert not os.path.exists(output_file)


def test_a_squad_model_given_to_run_ner_is_one_line(models, tmp_path):
  export_dir = str(tmp_path / "exports")
  result = cli.run_script("run_ner_mgpu.py", ["--output_dir=" + models["en"].output_dir,
                                              "--export_dir=" + export_dir])
  cli.assert_one_line_error(result, "model_settings.json", "'squad' model, not an NER model",
                            "run_ner_mgpu.py")
  assert not os.path.exists(export_dir)


def test_an_ner_model_given_to_run_squad_is_one_line(models, tmp_path):
  """The squad output_dir with an NER model's settings and labels."""
  ner_dir = str(tmp_path / "ner")
  shutil.copytree(models["en"].output_dir, ner_dir)
  with open(os.path.join(ner_dir, "model_settings.json"), "w", encoding="utf-8") as f:
    json.dump({"model": "ner", "do_lower_case": True, "max_seq_length": MAX_SEQ_LENGTH,
               "doc_stride": DOC_STRIDE, "use_crf": False}, f)
  with open(os.path.join(ner_dir, "labels.txt"), "w", encoding="utf-8") as f:
    f.write("O\nB-LOC\nI-LOC\n")
  export_dir = str(tmp_path / "exports")
  result = cli.run_script("run_squad_mgpu.py", ["--output_dir=" + ner_dir,
                                                "--export_dir=" + export_dir])
  cli.assert_one_line_error(result, "model_settings.json",
                            "'ner' model, not a reading-comprehension model",
                            "run_squad_mgpu.py")
  assert not os.path.exists(export_dir)


@pytest.mark.parametrize("flag", ["--doc_stride=16", "--max_seq_length=32",
                                  "--version_2_with_negative"])
def test_an_export_only_run_refuses_the_trained_window_flags(models, tmp_path, flag):
  export_dir = str(tmp_path / "exports")
  result = cli.run_script("run_squad_mgpu.py", ["--output_dir=" + models["en"].output_dir,
                                                "--export_dir=" + export_dir, flag])
  cli.assert_one_line_error(result, flag.split("=")[0], "--do_train or --do_predict")
  assert not os.path.exists(export_dir)


def test_a_threshold_for_a_v1_model_is_one_line(models, tmp_path):
  export_dir = str(tmp_path / "exports")
  result = cli.run_script("run_squad_mgpu.py", ["--output_dir=" + models["zh"].output_dir,
                                                "--export_dir=" + export_dir,
                                                "--null_score_diff_threshold=1.5"])
  cli.assert_one_line_error(result, "--null_score_diff_threshold",
                            "without --version_2_with_negative")
  assert not os.path.exists(export_dir)


def test_an_output_dir_without_model_settings_is_one_line(models, tmp_path):
  """An output_dir trained before --do_train kept the serving files: the error names the
  missing file and the run that writes it, for the export and for predict_text.py."""
  old_dir = str(tmp_path / "old")
  shutil.copytree(models["en"].output_dir, old_dir)
  os.remove(os.path.join(old_dir, "model_settings.json"))
  export_dir = str(tmp_path / "exports")
  result = cli.run_script("run_squad_mgpu.py", ["--output_dir=" + old_dir,
                                                "--export_dir=" + export_dir])
  cli.assert_one_line_error(result, old_dir, "model_settings.json", "run_squad_mgpu.py",
                            "--do_train")
  assert not os.path.exists(export_dir)
  output_file = str(tmp_path / "answers.jsonl")
  result = cli.run_script("predict_text.py", [
      "--output_dir=" + old_dir, "--input_file=" + models["en"].questions_file,
      "--output_file=" + output_file])
  cli.assert_one_line_error(result, old_dir, "model_settings.json", "--do_train")
  assert not os.path.exists(output_file)
