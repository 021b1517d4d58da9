# coding=utf-8
"""predict_text.py --backend=onnxruntime (#33 step 2), black-box: the script run as a user
runs it, on exports written by the real commands (--export_format=both), its outputs
compared with the TensorFlow backend's on the same export.

Covered: the files of each head (classifier, multi-label, --long_text=windows, sentence
pairs, NER, NER with a CRF decoded in NumPy) and the HTTP answers of --serve equal the
TensorFlow path's; the path runs with TensorFlow blocked from importing; model.int8.onnx of
a classifier trained on the demo data keeps float32's accuracy; every refusal is one line
that leaves no output file.

Models are conversion_models' random ones (no training, so the exports are quick), except
for the int8 test. The ONNX tests skip where onnxruntime does not import (TF 1.15's venv);
the refusals that need no ONNX package run there too, as does TF 1.15's own refusal.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

import cli
import conversion_models

try:
  import onnxruntime  # pylint: disable=g-import-not-at-top
except ImportError:
  onnxruntime = None

needs_onnxruntime = pytest.mark.skipif(onnxruntime is None,
                                       reason="onnxruntime is not installed (TF 1.15's venv)")

PREDICT_TEXT = cli.script_path("predict_text.py")
CLASSIFIER_SCRIPT = "run_classifier_mgpu.py"
NER_SCRIPT = "run_ner_mgpu.py"
# The heads exported; "windows" is a --long_text=windows classifier (max pooling).
KINDS = ("classifier", "multi_label", "windows", "ner", "ner_crf")
NER_KINDS = ("ner", "ner_crf")
# Probabilities of the two backends agree within this; rows differ by far more.
TOLERANCE = 1e-5
REQUEST_TIMEOUT_SECONDS = 60
# Small, so that a request runs in several chunks and one is too large (413).
MAX_BATCH = 8
MAX_REQUEST_TEXTS = 30


# ---------------------------------------------------------------------------
# Running predict_text.py
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("onnx_predictor"))


@pytest.fixture(scope="module")
def wrapper(workdir):
  """predict_text.py with the modules its first argument names unimportable
  (cli.write_blocking_wrapper)."""
  return cli.write_blocking_wrapper(os.path.join(workdir, "predict_text_blocking.py"),
                                    "predict_text.py")


def run_predict(args, stdin="", script=PREDICT_TEXT):
  """Runs `script` (predict_text.py, or the wrapper with its first argument) to the end
  with `stdin` text; returns the CompletedProcess (text stdout and stderr)."""
  return subprocess.run(
      [sys.executable, script] + list(args), input=stdin, cwd=cli.REPO_DIR,
      env=cli.script_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8",
      errors="replace", timeout=cli.RUN_TIMEOUT_SECONDS)


def read_text(path):
  with open(path, encoding="utf-8") as f:
    return f.read()


# ---------------------------------------------------------------------------
# The texts and the exports
# ---------------------------------------------------------------------------

def demo_split(split):
  """[(label, text)] of a split of the demo data (scripts/make_demo_data.py)."""
  path = os.path.join(os.path.dirname(conversion_models.demo_vocab_file()), split + ".tsv")
  lines = read_text(path).split("\n")[1:-1]
  return [tuple(line.split("\t")) for line in lines]


def sample_texts():
  """Short demo texts, then long ones (several joined): truncated by a classifier, cut
  into windows by the windows classifier and the NER models (max_seq_length 32)."""
  short = [text for _, text in demo_split("test")[:16]]
  return short + ["".join(short[i:i + 4]) for i in range(0, 12, 4)]


def write_model(directory, kind, seed):
  """A 1-layer output_dir of `kind` with random weights; "windows" is the classifier with
  --long_text=windows settings."""
  model = conversion_models.write_model(directory, "classifier" if kind == "windows" else kind,
                                        num_layers=1, seed=seed)
  if kind == "windows":
    path = os.path.join(directory, "model_settings.json")
    settings = json.loads(read_text(path))
    settings.update(long_text="windows", doc_stride=16, max_windows=4, window_pooling="max")
    conversion_models.write_json(path, settings)
  return model


def export_model(model_dir, export_base, script, *flags):
  """Exports an output_dir with `script`; returns the version directory."""
  cli.assert_succeeded(cli.run_script(script, ["--output_dir=" + model_dir,
                                               "--export_dir=" + export_base] + list(flags)))
  assert os.listdir(export_base) == ["1"]
  return os.path.join(export_base, "1")


class Exports(object):
  """Each head's export (--export_format=both, no int8 model), made when a test first asks
  for it, and the TensorFlow backend's output on the test texts (the reference)."""

  def __init__(self, workdir):
    self.workdir = workdir
    self.texts_file = os.path.join(workdir, "texts.txt")
    self.pairs_file = os.path.join(workdir, "pairs.txt")
    texts = sample_texts()
    conversion_models.write_text(self.texts_file, "".join(t + "\n" for t in texts))
    conversion_models.write_text(self.pairs_file, "".join(
        "%s\t%s\n" % (a, b) for a, b in zip(texts[:8], reversed(texts[:16]))))
    self._versions, self._references = {}, {}

  def model_dir(self, kind):
    return os.path.join(self.workdir, "models", kind)

  def base(self, kind):
    return os.path.join(self.workdir, "exports", kind)

  def version(self, kind):
    """The version directory of `kind`'s export. "ner" and "ner_crf" get the same seed: the
    same weights but the CRF's transitions, so the CRF's entities differ from argmax's."""
    if kind not in self._versions:
      seed = 0 if kind in NER_KINDS else KINDS.index(kind)
      write_model(self.model_dir(kind), kind, seed)
      self._versions[kind] = export_model(
          self.model_dir(kind), self.base(kind),
          NER_SCRIPT if kind in NER_KINDS else CLASSIFIER_SCRIPT, "--export_format=both")
    return self._versions[kind]

  def reference(self, kind, pairs=False):
    """The output of --backend=tensorflow on the export's base directory."""
    key = (kind, pairs)
    if key not in self._references:
      output_file = os.path.join(self.workdir, "tensorflow_%s%s.out" % (
          kind, "_pairs" if pairs else ""))
      self.version(kind)
      cli.assert_succeeded(run_predict([
          "--backend=tensorflow", "--export_dir=" + self.base(kind),
          "--input_file=" + (self.pairs_file if pairs else self.texts_file),
          "--output_file=" + output_file, "--predict_batch_size=5"] +
                                       (["--text_b"] if pairs else [])))
      self._references[key] = read_text(output_file)
    return self._references[key]


@pytest.fixture(scope="module")
def exports(workdir):
  return Exports(workdir)


# ---------------------------------------------------------------------------
# Comparing outputs
# ---------------------------------------------------------------------------

def parse_output(kind, text, num_labels=len(conversion_models.LABELS)):
  """The rows of predict_text.py's output as JSON-like values: a classifier's
  [label, probability, [p_1..p_k]], a multi-label's [[labels], [p_1..p_k]] (its separator
  is ","), an NER model's entity record."""
  lines = text.split("\n")
  assert lines[-1] == "", text[-200:]
  rows = []
  for line in lines[:-1]:
    if kind in NER_KINDS:
      rows.append(json.loads(line))
      continue
    fields = line.split("\t")
    head = 1 if kind == "multi_label" else 2
    assert len(fields) == head + num_labels, line
    probabilities = [float(p) for p in fields[head:]]
    if kind == "multi_label":
      rows.append([fields[0].split(",") if fields[0] else [], probabilities])
    else:
      rows.append([fields[0], float(fields[1]), probabilities])
  return rows


def assert_json_close(actual, expected, where="reply"):
  """Equal JSON-like values, floats within TOLERANCE."""
  if isinstance(expected, float):
    assert isinstance(actual, (float, int)), (where, actual, expected)
    assert abs(actual - expected) <= TOLERANCE, (where, actual, expected)
  elif isinstance(expected, dict):
    assert isinstance(actual, dict) and sorted(actual) == sorted(expected), (where, actual,
                                                                             expected)
    for key in expected:
      assert_json_close(actual[key], expected[key], "%s[%r]" % (where, key))
  elif isinstance(expected, list):
    assert isinstance(actual, list) and len(actual) == len(expected), (where, actual,
                                                                       expected)
    for index, (a, e) in enumerate(zip(actual, expected)):
      assert_json_close(a, e, "%s[%d]" % (where, index))
  else:
    assert actual == expected, (where, actual, expected)


def probabilities_of(rows):
  """[n, num_labels] of a classifier's parsed rows."""
  return np.array([row[-1] for row in rows])


# ---------------------------------------------------------------------------
# 1. The files of each head equal the TensorFlow backend's
# ---------------------------------------------------------------------------

# case: (kind, sentence pairs, the ONNX run's --export_dir is the version directory rather
# than the base, it reads stdin and writes stdout).
CASES = {
    "classifier": ("classifier", False, False, False),
    "multi_label": ("multi_label", False, True, False),
    "windows": ("windows", False, True, False),
    "pairs": ("classifier", True, True, True),
    "ner": ("ner", False, False, False),
    "ner_crf": ("ner_crf", False, True, True),
}


def onnx_output(exports, case, tmp_path, *flags):
  """The output of --backend=onnxruntime for CASES[case]."""
  kind, pairs, on_version, piped = CASES[case]
  input_file = exports.pairs_file if pairs else exports.texts_file
  args = ["--backend=onnxruntime", "--predict_batch_size=5", "--onnx_threads=1",
          "--export_dir=" + (exports.version(kind) if on_version else exports.base(kind))]
  args += (["--text_b"] if pairs else []) + list(flags)
  if piped:
    result = run_predict(args, stdin=read_text(input_file))
    cli.assert_succeeded(result)
    return result.stdout
  output_file = str(tmp_path / "onnx.out")
  cli.assert_succeeded(run_predict(args + ["--input_file=" + input_file,
                                           "--output_file=" + output_file]))
  return read_text(output_file)


def check_outcomes_vary(exports, kind, rows):
  """The comparison could fail: rows differ beyond the tolerance; multi-label sets and NER
  entities are neither all empty nor all full; the CRF changes entities."""
  if kind in NER_KINDS:
    assert any(row["entities"] for row in rows)
    if kind == "ner_crf":
      assert rows != parse_output("ner", exports.reference("ner"))  # the CRF decoded
    return
  probabilities = probabilities_of(rows)
  assert np.ptp(probabilities, axis=0).max() > 1e-3
  if kind == "multi_label":
    sizes = [len(row[0]) for row in rows]
    assert min(sizes) < len(conversion_models.LABELS) and max(sizes) > 0, sizes


@needs_onnxruntime
@pytest.mark.parametrize("case", sorted(CASES))
def test_onnx_files_equal_the_tensorflow_backends(exports, tmp_path, case):
  kind, pairs = CASES[case][:2]
  expected = parse_output(kind, exports.reference(kind, pairs))
  actual = parse_output(kind, onnx_output(exports, case, tmp_path))
  assert len(expected) == (8 if pairs else len(sample_texts()))
  assert_json_close(actual, expected, case)
  check_outcomes_vary(exports, kind, expected)


@needs_onnxruntime
def test_an_absolute_onnx_file_is_used_as_it_is(exports, tmp_path):
  """A copy of model.onnx elsewhere, under another name, gives the same file."""
  elsewhere = str(tmp_path / "elsewhere" / "renamed.onnx")
  os.makedirs(os.path.dirname(elsewhere))
  shutil.copy(os.path.join(exports.version("classifier"), "model.onnx"), elsewhere)
  actual = onnx_output(exports, "classifier", tmp_path, "--onnx_file=" + elsewhere)
  assert_json_close(parse_output("classifier", actual),
                    parse_output("classifier", exports.reference("classifier")))
  # A relative path is taken from the working directory (predict_text.py runs in the repo).
  relative = os.path.relpath(elsewhere, cli.REPO_DIR)
  assert os.path.dirname(relative) and not os.path.isabs(relative)
  actual = onnx_output(exports, "classifier", tmp_path, "--onnx_file=" + relative)
  assert_json_close(parse_output("classifier", actual),
                    parse_output("classifier", exports.reference("classifier")))


# ---------------------------------------------------------------------------
# 2. HTTP: the same answers as the TensorFlow backend's server
# ---------------------------------------------------------------------------

def request(url, body=None):
  return cli.http_json(url, body, REQUEST_TIMEOUT_SECONDS)


def post(url, payload):
  return request(url + "/predict", json.dumps(payload, ensure_ascii=False).encode("utf-8"))


def start_server(stack, export_base, stderr_path, backend, script=PREDICT_TEXT, blocked=None):
  """predict_text.py --serve=0 in the background, killed when `stack` closes; returns
  (the RunningScript, its URL) once it listens."""
  args = ["--backend=" + backend, "--export_dir=" + export_base, "--serve=0",
          "--max_batch=%d" % MAX_BATCH, "--max_request_texts=%d" % MAX_REQUEST_TEXTS]
  if blocked is not None:
    args.insert(0, blocked)
  # cli.script_path joins the repo with the name: an absolute path (the wrapper) stays.
  running = stack.enter_context(cli.RunningScript(script, args, stderr_path))
  pattern = r"Serving on (http://\S+)"
  running.wait_for(lambda: re.search(pattern, running.stderr()), "the server listening")
  return running, re.search(pattern, running.stderr()).group(1)


def wait_until_ready(running, url):
  running.wait_for(lambda: request(url + "/healthz")[0] == 200, "the model ready")


def http_exchanges(kind, texts):
  """(method path, payload or raw bytes or None) of the requests sent to both servers, in
  order: good ones, then bad ones (400, 404, 413)."""
  good = [("GET /labels", None),
          ("POST /predict", {"texts": texts[:3]}),
          ("POST /predict", {"texts": texts})]  # several chunks, truncated or cut texts
  if kind not in NER_KINDS:
    good.append(("POST /predict", {"texts": texts[:5], "texts_b": texts[-5:]}))
  bad = [("POST /predict", b"{not json"),
         ("POST /predict", {"texts": "a"}),
         ("POST /predict", {"texts": ["ok", " "]}),
         ("POST /predict", {"texts": ["a", "b"], "texts_b": ["c"]}),
         ("POST /predict", {"texts": ["a"] * (MAX_REQUEST_TEXTS + 1)}),
         ("POST /nowhere", {"texts": ["a"]})]
  if kind in NER_KINDS:
    bad.append(("POST /predict", {"texts": ["北京"], "texts_b": ["上海"]}))
  else:
    bad.append(("POST /predict", {"texts": ["\u200b\u0001"]}))  # no tokens
  return good + [("GET /healthz", None)], bad


def send(url, exchange):
  method_path, payload = exchange
  path = method_path.split()[1]
  if payload is None:
    return request(url + path)
  body = payload if isinstance(payload, bytes) else json.dumps(payload).encode("utf-8")
  return request(url + path, body)


@needs_onnxruntime
@pytest.mark.parametrize("kind", ["classifier", "ner"])
def test_serve_answers_as_the_tensorflow_backend(exports, tmp_path, kind):
  exports.version(kind)
  with contextlib.ExitStack() as stack:
    servers = [start_server(stack, exports.base(kind), str(tmp_path / (backend + ".log")),
                            backend) for backend in ("tensorflow", "onnxruntime")]
    for running, url in servers:
      wait_until_ready(running, url)
    (_, tf_url), (_, onnx_url) = servers
    good, bad = http_exchanges(kind, sample_texts())
    for exchange in good:
      expected, actual = send(tf_url, exchange), send(onnx_url, exchange)
      assert expected[0] == 200, (exchange, expected)
      assert actual[0] == 200, (exchange, actual)
      assert_json_close(actual[1], expected[1], exchange[0])
    for exchange in bad:
      expected, actual = send(tf_url, exchange), send(onnx_url, exchange)
      assert expected[0] in (400, 404, 413), (exchange, expected)
      assert actual[0] == expected[0] and "error" in actual[1], (exchange, actual, expected)
    if kind == "ner":
      entities = send(onnx_url, good[2])[1]["entities"]
      assert any(entities)
    for running, _ in servers:
      running.signal(signal.SIGTERM)
      assert running.wait() == 0, running.stderr()[-3000:]


# ---------------------------------------------------------------------------
# 3. No TensorFlow on the ONNX Runtime path
# ---------------------------------------------------------------------------

@needs_onnxruntime
def test_the_onnx_path_runs_with_tensorflow_blocked(exports, wrapper, tmp_path):
  expected = parse_output("classifier", exports.reference("classifier"))
  output_file = str(tmp_path / "no_tf.out")
  result = run_predict(["tensorflow", "--backend=onnxruntime",
                        "--export_dir=" + exports.base("classifier"),
                        "--input_file=" + exports.texts_file, "--output_file=" + output_file],
                       script=wrapper)
  cli.assert_succeeded(result)
  assert_json_close(parse_output("classifier", read_text(output_file)), expected)

  with contextlib.ExitStack() as stack:
    running, url = start_server(stack, exports.base("classifier"), str(tmp_path / "serve.log"),
                                "onnxruntime", script=wrapper, blocked="tensorflow")
    wait_until_ready(running, url)
    status, reply = post(url, {"texts": sample_texts()[:4]})
    assert status == 200, reply
    assert reply["labels"] == [row[0] for row in expected[:4]]
    np.testing.assert_allclose(reply["probabilities"], [row[2] for row in expected[:4]],
                               rtol=0, atol=TOLERANCE)
    running.signal(signal.SIGTERM)
    assert running.wait() == 0, running.stderr()[-3000:]
    assert "Traceback" not in running.stderr()


@needs_onnxruntime
def test_the_blocking_wrapper_does_block(exports, wrapper):
  """The wrapper makes `import tensorflow` fail: the TensorFlow backend cannot run."""
  result = run_predict(["tensorflow", "--export_dir=" + exports.base("classifier")],
                       stdin="一个\n", script=wrapper)
  assert result.returncode != 0 and result.stdout == ""
  assert "tensorflow" in result.stderr.lower(), result.stderr[-2000:]


# ---------------------------------------------------------------------------
# 4. int8: the accuracy of a trained classifier
# ---------------------------------------------------------------------------

# A demo classifier that trains in seconds to well above chance (5 classes: 20%).
INT8_CONFIG = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
               "intermediate_size": 64, "max_position_embeddings": 64}


def train_demo_classifier(root):
  """Trains on the whole demo data and exports with --onnx_int8; returns the version
  directory and the dev set's [(label, text)]."""
  data_dir = os.path.join(root, "data")
  subprocess.run([sys.executable, cli.script_path(os.path.join("scripts", "make_demo_data.py")),
                  "--output_dir", data_dir], check=True, stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE, timeout=120)
  config_file = os.path.join(data_dir, "bert_config.json")
  config = json.loads(read_text(config_file))
  config.update(INT8_CONFIG)
  conversion_models.write_json(config_file, config)
  export_base = os.path.join(root, "exports")
  cli.assert_succeeded(cli.run_script(CLASSIFIER_SCRIPT, cli.flag_list({
      "task_name": "tsv", "data_dir": data_dir, "bert_config_file": config_file,
      "vocab_file": os.path.join(data_dir, "vocab.txt"),
      "output_dir": os.path.join(root, "model"), "do_train": True, "n_gpus": 1,
      "max_seq_length": 32, "train_batch_size": 16, "learning_rate": 5e-3,
      "num_train_epochs": 8, "save_checkpoints_steps": 1000, "log_steps": 1000,
      "random_seed": 5, "export_dir": export_base, "export_format": "onnx",
      "onnx_int8": True})))
  with open(os.path.join(data_dir, "dev.tsv"), encoding="utf-8") as f:
    dev = [tuple(line.rstrip("\n").split("\t")) for line in f][1:]
  return os.path.join(export_base, "1"), dev


@needs_onnxruntime
def test_int8_keeps_the_accuracy_of_float32(tmp_path):
  version_dir, dev = train_demo_classifier(str(tmp_path))
  texts_file = str(tmp_path / "dev_texts.txt")
  conversion_models.write_text(texts_file, "".join(text + "\n" for _, text in dev))
  accuracy, probabilities = {}, {}
  for name in ("model.onnx", "model.int8.onnx"):
    output_file = str(tmp_path / (name + ".out"))
    cli.assert_succeeded(run_predict([
        "--backend=onnxruntime", "--export_dir=" + version_dir, "--onnx_file=" + name,
        "--input_file=" + texts_file, "--output_file=" + output_file]))
    rows = parse_output("classifier", read_text(output_file), num_labels=5)
    assert len(rows) == len(dev) == 100
    accuracy[name] = np.mean([row[0] == label for row, (label, _) in zip(rows, dev)])
    probabilities[name] = probabilities_of(rows)
  assert accuracy["model.onnx"] >= 0.8, accuracy  # chance: 0.2
  assert abs(accuracy["model.int8.onnx"] - accuracy["model.onnx"]) <= 0.01, accuracy
  # The int8 file was run, not float32's again.
  assert not np.array_equal(probabilities["model.int8.onnx"], probabilities["model.onnx"])


# ---------------------------------------------------------------------------
# 5. Refusals: one line, exit 1, no output file
# ---------------------------------------------------------------------------

def assert_refused(result, output_file, *fragments):
  cli.assert_one_line_error(result, *fragments)
  assert not os.path.exists(output_file)


def refused_run(tmp_path, args, script=PREDICT_TEXT):
  """Runs predict_text.py with `args` on a texts file; returns (result, output file)."""
  input_file, output_file = str(tmp_path / "texts.txt"), str(tmp_path / "out.txt")
  conversion_models.write_text(input_file, "体育新闻\n科技公司发布新品\n")
  return run_predict(list(args) + ["--input_file=" + input_file,
                                   "--output_file=" + output_file], script=script), output_file


@pytest.mark.parametrize("flag", ["--onnx_file=model.int8.onnx", "--onnx_threads=2"])
def test_onnx_flags_without_the_onnx_backend_are_refused(tmp_path, flag):
  """A flag check, made before any model is read."""
  result, output_file = refused_run(tmp_path, ["--export_dir=" + str(tmp_path), flag])
  assert_refused(result, output_file, flag.split("=")[0], "--backend=onnxruntime")


def test_the_onnx_backend_on_an_output_dir_is_refused(tmp_path):
  """A flag check, made before any model is read."""
  result, output_file = refused_run(tmp_path, ["--backend=onnxruntime",
                                               "--output_dir=" + str(tmp_path)])
  assert_refused(result, output_file, "--output_dir", "--export_dir")


@pytest.mark.parametrize("flag", ["--n_gpus=2", "--towers_per_gpu=2", "--precision=bf16",
                                  "--precision=fp16", "--use_xla"])
def test_device_flags_are_refused_on_onnxruntime(tmp_path, flag):
  """A flag check, made before any model is read."""
  result, output_file = refused_run(tmp_path, ["--backend=onnxruntime",
                                               "--export_dir=" + str(tmp_path), flag])
  assert_refused(result, output_file, flag.split("=")[0], "--backend=onnxruntime")


@pytest.fixture(scope="module")
def savedmodel_export(workdir):
  """The version directory of a classifier exported with the default format (SavedModel
  only)."""
  model = write_model(os.path.join(workdir, "savedmodel_only", "model"), "classifier", seed=9)
  return export_model(model.directory, os.path.join(workdir, "savedmodel_only", "exports"),
                      CLASSIFIER_SCRIPT)


@needs_onnxruntime
def test_an_export_without_model_onnx_is_refused(savedmodel_export, tmp_path):
  assert "saved_model.pb" in os.listdir(savedmodel_export)
  result, output_file = refused_run(tmp_path, ["--backend=onnxruntime",
                                               "--export_dir=" + savedmodel_export])
  assert_refused(result, output_file, "model.onnx")


@needs_onnxruntime
def test_an_export_without_the_int8_model_is_refused(exports, tmp_path):
  assert "model.int8.onnx" not in os.listdir(exports.version("classifier"))
  result, output_file = refused_run(tmp_path, [
      "--backend=onnxruntime", "--export_dir=" + exports.base("classifier"),
      "--onnx_file=model.int8.onnx"])
  assert_refused(result, output_file, "model.int8.onnx")


def write_other_onnx_model(path):
  """A valid ONNX model whose inputs are named ids, mask, types (not the export's)."""
  import onnx  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  from onnx import helper  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  inputs = [helper.make_tensor_value_info(name, onnx.TensorProto.INT32, ["batch", "seq"])
            for name in ("ids", "mask", "types")]
  output = helper.make_tensor_value_info("probabilities", onnx.TensorProto.FLOAT,
                                         ["batch", "seq"])
  nodes = [helper.make_node("Add", ["ids", "mask"], ["sum"]),
           helper.make_node("Add", ["sum", "types"], ["total"]),
           helper.make_node("Cast", ["total"], ["probabilities"], to=onnx.TensorProto.FLOAT)]
  model = helper.make_model(helper.make_graph(nodes, "other", inputs, [output]),
                            opset_imports=[helper.make_opsetid("", 17)])
  model.ir_version = 8  # one every onnxruntime release reads
  onnx.checker.check_model(model)
  onnx.save(model, path)


@needs_onnxruntime
def test_an_onnx_model_with_other_inputs_is_refused(exports, tmp_path):
  other = str(tmp_path / "other.onnx")
  write_other_onnx_model(other)
  session = onnxruntime.InferenceSession(other, providers=["CPUExecutionProvider"])
  assert [value.name for value in session.get_inputs()] == ["ids", "mask", "types"]
  result, output_file = refused_run(tmp_path, [
      "--backend=onnxruntime", "--export_dir=" + exports.base("classifier"),
      "--onnx_file=" + other])
  assert_refused(result, output_file, other)


@needs_onnxruntime
def test_the_onnx_model_of_another_export_is_refused(exports, tmp_path):
  """An NER model's model.onnx takes the classifier's inputs but gives probabilities
  [batch, seq, tags]: refused before any text runs (it crashed on the first batch)."""
  ner_model = os.path.join(exports.version("ner"), "model.onnx")
  result, output_file = refused_run(tmp_path, [
      "--backend=onnxruntime", "--export_dir=" + exports.base("classifier"),
      "--onnx_file=" + ner_model])
  assert_refused(result, output_file, ner_model, "is not a model of this export",
                 "probabilities float [?, ?, ")


@needs_onnxruntime
def test_the_onnx_backend_without_onnxruntime_is_refused(exports, wrapper, tmp_path):
  result, output_file = refused_run(tmp_path, [
      "onnxruntime", "--backend=onnxruntime", "--export_dir=" + exports.base("classifier")],
                                    script=wrapper)
  assert_refused(result, output_file, "onnxruntime", "install")


@pytest.mark.skipif(onnxruntime is not None, reason="where onnxruntime is not installed "
                    "(TF 1.15's venv)")
def test_the_onnx_backend_says_onnxruntime_is_not_installed(savedmodel_export, tmp_path):
  """TF 1.15's venv has no onnxruntime; a file named model.onnx in a copy of the export
  makes it look like an ONNX one (TF 1.15 cannot write one)."""
  version_dir = str(tmp_path / "exports" / "1")
  shutil.copytree(savedmodel_export, version_dir)
  conversion_models.write_text(os.path.join(version_dir, "model.onnx"), "not read")
  result, output_file = refused_run(tmp_path, ["--backend=onnxruntime",
                                               "--export_dir=" + version_dir])
  assert_refused(result, output_file, "onnxruntime", "install")
