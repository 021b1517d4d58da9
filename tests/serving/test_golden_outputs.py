# coding=utf-8
"""Golden outputs of serving: what the export, predict_text.py and its HTTP endpoint give
for five committed tiny models, compared byte for byte with files recorded before the
serving code was refactored (#42).

The models (tests/serving/golden/models/, made by tests/serving/golden/make_models.py and
never retrained here): a sentence-pair classifier (pair), a --multi_label classifier
(multi_label), a --long_text=windows classifier (windows), an NER model (ner) and one with
--use_crf (ner_crf). The inputs: tests/serving/golden/inputs/texts.txt (short texts, a long
one that is truncated or cut into windows, ASCII words, an emoji, spaces) and pairs.txt.

Only the command-line entry points run, each in a subprocess with a deadline:
  - run_classifier_mgpu.py / run_ner_mgpu.py --output_dir=<a copy of the model>
    --export_dir=<tmp> (export only; --export_format=both on TF 2.x): the files of
    assets.extra/, and signature.txt (the export's file names, the SavedModel's
    signatures read from saved_model.pb, and on TF 2.x model.onnx's inputs and outputs);
  - predict_text.py in file mode on the export, on the output_dir (2 towers) and, on TF
    2.x, with --backend=onnxruntime: the output files;
  - predict_text.py --serve=0 on the export (TensorFlow, and ONNX Runtime on TF 2.x): the
    status, Content-Type and body of GET /labels and of fixed POST /predict requests, good
    and bad, sent one at a time (never /healthz, whose counters depend on timing); then
    SIGTERM and the exit status.

The goldens are tests/serving/golden/tf1/ (TF 1.15) and tf2/ (TF 2.x), since the two
compute and print floats differently: <model>/export/, <model>/predict_text/, <model>/http/. A difference fails
naming the golden file, with a diff.

To record them again (only when a change of the outputs is intended, or after
make_models.py), under each virtualenv:
  BERT_MGPU_RECORD_GOLDEN=1 .venv-tf2/bin/python -m pytest -q tests/serving/test_golden_outputs.py
  BERT_MGPU_RECORD_GOLDEN=1 .venv-tf1/bin/python -m pytest -q tests/serving/test_golden_outputs.py
then review `git diff tests/serving/golden/`. Recording replaces the golden folders of the
running TensorFlow and passes.

The last digits of the probabilities depend on the machine as well as on the code
(TensorFlow's and ONNX Runtime's kernels differ by CPU features and thread counts): each
flavour's machine.txt says what recorded it (its CPU model, the instruction sets that pick
kernels, its usable CPUs). On that kind of machine the comparison is byte for byte; on
another (a CI machine with AVX2 only, say) every number may differ by NUMBER_TOLERANCE and
everything else must be byte-identical, and the test says so in its output. For a byte-exact
comparison there, record first at the commit that made the goldens, then compare.

Under TF 2.x the test needs tf2onnx and onnxruntime (requirements-test.txt), as its goldens
hold the ONNX outputs; without them it skips.
"""

import concurrent.futures
import contextlib
import difflib
import json
import os
import re
import shutil
import signal
import urllib.error
import urllib.request

import pytest
import tensorflow as tf

import cli

GOLDEN_DIR = os.path.join(cli.REPO_DIR, "tests", "serving", "golden")
MODELS_DIR = os.path.join(GOLDEN_DIR, "models")
TEXTS_FILE = os.path.join(GOLDEN_DIR, "inputs", "texts.txt")
PAIRS_FILE = os.path.join(GOLDEN_DIR, "inputs", "pairs.txt")
RECORD = os.environ.get("BERT_MGPU_RECORD_GOLDEN") == "1"

TF_MAJOR = "tf1" if tf.__version__.startswith("1.") else "tf2"
ONNX = TF_MAJOR == "tf2"
if ONNX:
  onnx = pytest.importorskip("onnx", reason="the TF 2.x goldens hold ONNX outputs")
  pytest.importorskip("onnxruntime", reason="the TF 2.x goldens hold ONNX outputs")
  pytest.importorskip("tf2onnx", reason="the TF 2.x goldens hold ONNX outputs")

MODELS = ("pair", "multi_label", "windows", "ner", "ner_crf")
NER_MODELS = ("ner", "ner_crf")
PARTS = ("export", "predict_text", "http")
BACKENDS = ("tensorflow", "onnxruntime") if ONNX else ("tensorflow",)
REQUEST_TIMEOUT_SECONDS = 60
# predict_text.py's batches: small, so that the texts run in several length-sorted batches
# (and the HTTP requests in several chunks).
PREDICT_BATCH_SIZE = 4
MAX_BATCH = 2
# Model pipelines run side by side (the machine of the measured times has 2 cores).
PARALLEL_MODELS = 2


def read_bytes(path):
  with open(path, "rb") as f:
    return f.read()


def read_lines(path):
  with open(path, encoding="utf-8") as f:
    return f.read().split("\n")[:-1]


# ---------------------------------------------------------------------------
# Running the commands
# ---------------------------------------------------------------------------

def run_command(script, args):
  """Runs a repo script to the end (cli's deadline) and checks that it succeeded."""
  result = cli.run_script(script, args)
  cli.assert_succeeded(result)
  return result


def export(model, output_dir, export_base):
  """The export-only run of the model's script; returns the version directory."""
  script = "run_ner_mgpu.py" if model in NER_MODELS else "run_classifier_mgpu.py"
  run_command(script, ["--output_dir=" + output_dir, "--export_dir=" + export_base,
                       "--export_format=" + ("both" if ONNX else "savedmodel")])
  assert os.listdir(export_base) == ["1"], os.listdir(export_base)
  return os.path.join(export_base, "1")


def input_flags(model):
  if model == "pair":
    return ["--input_file=" + PAIRS_FILE, "--text_b"]
  return ["--input_file=" + TEXTS_FILE]


def predict_files(model, output_dir, export_base, work_dir):
  """predict_text.py's output files: {file name: bytes}."""
  extension = ".jsonl" if model in NER_MODELS else ".tsv"
  sources = [("export", ["--export_dir=" + export_base]),
             ("output_dir", ["--output_dir=" + output_dir, "--n_gpus=2"])]
  if ONNX:
    sources.append(("onnxruntime", ["--export_dir=" + export_base, "--backend=onnxruntime"]))
  outputs = {}
  for name, flags in sources:
    output_file = os.path.join(work_dir, name + extension)
    run_command("predict_text.py", flags + input_flags(model) + [
        "--output_file=" + output_file, "--predict_batch_size=%d" % PREDICT_BATCH_SIZE])
    outputs[name + extension] = read_bytes(output_file)
  return outputs


# ---------------------------------------------------------------------------
# The export
# ---------------------------------------------------------------------------

def dims_text(dims):
  return "[%s]" % ", ".join(str(d) for d in dims)


def saved_model_description(version_dir):
  """The tags and signatures of saved_model.pb (parsed, not loaded: no session needed)."""
  from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=g-import-not-at-top
  saved_model = saved_model_pb2.SavedModel()
  saved_model.ParseFromString(read_bytes(os.path.join(version_dir, "saved_model.pb")))
  lines = []
  for meta_graph in saved_model.meta_graphs:
    lines.append("meta graph, tags %s" % ", ".join(sorted(meta_graph.meta_info_def.tags)))
    for key in sorted(meta_graph.signature_def):
      signature = meta_graph.signature_def[key]
      lines.append("  signature %s: %s" % (key, signature.method_name))
      for direction, tensors in (("input", signature.inputs), ("output", signature.outputs)):
        for name in sorted(tensors):
          info = tensors[name]
          shape = ("unknown rank" if info.tensor_shape.unknown_rank else
                   dims_text(d.size for d in info.tensor_shape.dim))
          lines.append("    %s %s: %s %s" % (direction, name,
                                              tf.dtypes.as_dtype(info.dtype).name, shape))
  return lines


def onnx_description(version_dir):
  """model.onnx's inputs and outputs: element type and shape (? for a dynamic dimension,
  whose generated name says nothing)."""
  graph = onnx.load(os.path.join(version_dir, "model.onnx")).graph
  lines = ["model.onnx"]
  for direction, values in (("input", graph.input), ("output", graph.output)):
    for value in values:
      tensor_type = value.type.tensor_type
      dims = [d.dim_value if d.HasField("dim_value") else "?" for d in tensor_type.shape.dim]
      lines.append("  %s %s: %s %s" % (direction, value.name,
                                       onnx.TensorProto.DataType.Name(tensor_type.elem_type),
                                       dims_text(dims)))
  return lines


def export_files(export_base, version_dir):
  """{file name: bytes} of the export: assets.extra/'s files and signature.txt."""
  names = sorted(os.path.relpath(os.path.join(root, name), export_base)
                 for root, _, files in os.walk(export_base) for name in files)
  lines = ["files"] + ["  " + name.replace(os.sep, "/") for name in names]
  lines += saved_model_description(version_dir)
  if ONNX:
    lines += onnx_description(version_dir)
  outputs = {"signature.txt": "".join(line + "\n" for line in lines).encode("utf-8")}
  assets = os.path.join(version_dir, "assets.extra")
  for name in sorted(os.listdir(assets)):
    outputs["assets.extra/" + name] = read_bytes(os.path.join(assets, name))
  return outputs


# ---------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------

def exchanges(model):
  """(method, path, JSON payload or raw bytes or None) of the requests, in order."""
  texts = read_lines(TEXTS_FILE)
  pairs = [line.split("\t") for line in read_lines(PAIRS_FILE)]
  common = [("GET", "/labels", None)]
  if model == "pair":
    common += [
        ("POST", "/predict", {"texts": [a for a, _ in pairs[:3]],
                              "texts_b": [b for _, b in pairs[:3]]}),
        ("POST", "/predict", {"texts": [pairs[3][0]]}),  # a pair model given one text
        ("POST", "/predict", {"texts": ["北京", "上海"], "texts_b": ["北京"]}),
        ("POST", "/predict", {"texts": ["北京"], "texts_b": ["\u200b"]}),
    ]
  else:
    common.append(("POST", "/predict", {"texts": [texts[0], texts[3], texts[4]]}))
  if model in NER_MODELS:
    common += [("POST", "/predict", {"texts": ["北京"], "texts_b": ["上海"]}),
               ("POST", "/predict", {"texts": ["\u200b"]}),  # no tokens: refused
               ("POST", "/predict", {"texts": [texts[5]]})]  # spaces are tokens
  elif model != "pair":
    common += [("POST", "/predict", {"texts": [texts[1], "\u200b"]}),
               ("POST", "/predict", {"texts": texts[:2], "texts_b": [texts[2]]})]
  return common + [("POST", "/predict", b"{not json"),
                   ("POST", "/predict", {"texts": ["北京", ""]}),
                   ("GET", "/nowhere", None)]


def shown(payload):
  """A request body as the transcript shows it: after a space, with invisible characters
  (the zero-width space) escaped."""
  if payload is None:
    return ""
  text = (payload.decode("utf-8") if isinstance(payload, bytes) else
          json.dumps(payload, ensure_ascii=False))
  return " " + "".join(c if c.isprintable() else "\\u%04x" % ord(c) for c in text)


def http_exchange(url, method, payload):
  """(status, Content-Type, body text) of one request to a test server on 127.0.0.1."""
  body = None
  if payload is not None:
    body = payload if isinstance(payload, bytes) else json.dumps(
        payload, ensure_ascii=False).encode("utf-8")
  request = urllib.request.Request(url, data=body, method=method,
                                   headers={"Content-Type": "application/json"})
  try:
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_SECONDS) as response:
      return response.status, response.headers["Content-Type"], response.read()
  except urllib.error.HTTPError as e:
    return e.code, e.headers["Content-Type"], e.read()


class Server(object):
  """predict_text.py --serve=0 on an export, started in the background."""

  PATTERN = r"Serving on (http://[^\s:]+:\d+)"

  def __init__(self, export_base, backend, stderr_path):
    self.running = cli.RunningScript("predict_text.py", [
        "--export_dir=" + export_base, "--backend=" + backend, "--serve=0",
        "--host=127.0.0.1", "--max_batch=%d" % MAX_BATCH], stderr_path)
    self.url = None

  def wait_until_ready(self):
    running = self.running
    running.wait_for(lambda: re.search(self.PATTERN, running.stderr()), "the server listening")
    self.url = re.search(self.PATTERN, running.stderr()).group(1)
    running.wait_for(lambda: http_exchange(self.url + "/healthz", "GET", None)[0] == 200,
                     "the model ready")

  def transcript(self, model):
    """The exchanges' record, then the exit status after SIGTERM."""
    self.wait_until_ready()
    lines = []
    for method, path, payload in exchanges(model):
      status, content_type, body = http_exchange(self.url + path, method, payload)
      lines += ["%s %s%s" % (method, path, shown(payload)), "%d %s" % (status, content_type),
                body.decode("utf-8"), ""]
    self.running.signal(signal.SIGTERM)
    lines.append("SIGTERM: exit status %d" % self.running.wait())
    return "".join(line + "\n" for line in lines).encode("utf-8")


# ---------------------------------------------------------------------------
# One model's outputs
# ---------------------------------------------------------------------------

def record_model(model, work_dir):
  """Runs every command on `model`; returns {part: {file name: bytes}}."""
  output_dir = os.path.join(work_dir, "output_dir")
  shutil.copytree(os.path.join(MODELS_DIR, model), output_dir)
  export_base = os.path.join(work_dir, "exports")
  version_dir = export(model, output_dir, export_base)
  outputs = {"export": export_files(export_base, version_dir)}
  with contextlib.ExitStack() as stack:
    # The servers load while the file-mode runs go; leaving the stack kills a server that
    # still runs and reaps it.
    servers = {}
    for backend in BACKENDS:
      servers[backend] = Server(export_base, backend,
                                os.path.join(work_dir, "serve_%s.log" % backend))
      stack.enter_context(servers[backend].running)
    outputs["predict_text"] = predict_files(model, output_dir, export_base, work_dir)
    outputs["http"] = {backend + ".txt": server.transcript(model)
                       for backend, server in servers.items()}
  return outputs


@pytest.fixture(scope="module")
def recorded(request, tmp_path_factory):
  """{model: a future of record_model's outputs} for the models of the selected tests;
  they run PARALLEL_MODELS at a time, each test waiting for its own."""
  selected = set(item.callspec.params["model"] for item in request.session.items
                 if item.module.__name__ == __name__ and hasattr(item, "callspec"))
  root = str(tmp_path_factory.mktemp("golden_outputs"))
  with concurrent.futures.ThreadPoolExecutor(PARALLEL_MODELS) as pool:
    yield {model: pool.submit(record_model, model, os.path.join(root, model))
           for model in MODELS if model in selected}


# ---------------------------------------------------------------------------
# Comparing with the goldens
# ---------------------------------------------------------------------------

# Golden numbers compared on another kind of machine may differ by this much.
NUMBER_TOLERANCE = 1e-4
NUMBER = re.compile(r"-?\d+\.\d+(?:[eE][-+]?\d+)?|-?\d+[eE][-+]?\d+")
# The instruction sets whose presence changes TensorFlow's and ONNX Runtime's kernels.
KERNEL_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                "amx_tile", "amx_bf16", "amx_int8")


def machine_key():
  """What of this machine decides the last digits: the CPU model, the kernel-choosing
  instruction sets and the CPUs this process may use."""
  model, flags = "unknown", set()
  try:
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
      for line in f:
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model == "unknown":
          model = value.strip()
        elif key.strip() == "flags" and not flags:
          flags = set(value.split())
  except OSError:
    pass
  cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  return "cpu: %s\ninstruction sets: %s\nusable cpus: %d\n" % (
      model, " ".join(flag for flag in KERNEL_FLAGS if flag in flags) or "-", cpus)


def same_machine_kind():
  """Whether this machine's machine_key() is the one that recorded this flavour."""
  path = os.path.join(GOLDEN_DIR, TF_MAJOR, "machine.txt")
  return os.path.isfile(path) and read_bytes(path).decode("utf-8") == machine_key()


def equal_but_numbers(expected, actual, tolerance=NUMBER_TOLERANCE):
  """Whether two outputs are byte-identical outside their decimal numbers, and each pair of
  numbers differs by at most `tolerance`."""
  expected, actual = expected.decode("utf-8"), actual.decode("utf-8")
  if NUMBER.split(expected) != NUMBER.split(actual):
    return False
  return all(abs(float(e) - float(a)) <= tolerance
             for e, a in zip(NUMBER.findall(expected), NUMBER.findall(actual)))


def golden_files(directory):
  """{file name relative to directory, with /: bytes} of a golden folder."""
  files = {}
  for root, _, names in os.walk(directory):
    for name in names:
      path = os.path.join(root, name)
      files[os.path.relpath(path, directory).replace(os.sep, "/")] = read_bytes(path)
  return files


def write_golden(directory, outputs):
  if os.path.isdir(directory):
    shutil.rmtree(directory)
  for name, content in outputs.items():
    path = os.path.join(directory, *name.split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
      f.write(content)


def difference(path, expected, actual, max_lines=60, context=30):
  """A unified diff of golden file `path` against this run's output, then where the two
  first differ (a line of JSON can be long)."""
  expected, actual = expected.decode("utf-8", "replace"), actual.decode("utf-8", "replace")
  diff = list(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                   path + " (golden)", path + " (this run)"))
  text = "".join(diff[:max_lines])
  if len(diff) > max_lines:
    text += "... (%d more diff lines)\n" % (len(diff) - max_lines)
  at = next((i for i, (e, a) in enumerate(zip(expected, actual)) if e != a),
            min(len(expected), len(actual)))
  line_start = expected.rfind("\n", 0, at) + 1
  return "%s%s: first difference at line %d, column %d: golden %r, this run %r" % (
      text, path, expected.count("\n", 0, at) + 1, at - line_start + 1,
      expected[max(0, at - context):at + context], actual[max(0, at - context):at + context])


def compare(directory, outputs, exact=True):
  """Messages naming each golden file that differs from `outputs`, is missing or extra
  (exact False: numbers may differ by NUMBER_TOLERANCE)."""
  relative = os.path.relpath(directory, cli.REPO_DIR)
  golden = golden_files(directory)
  problems = []
  for name in sorted(set(golden) | set(outputs)):
    path = "%s/%s" % (relative, name)
    if name not in outputs:
      problems.append("%s: golden file, but this run wrote no such output" % path)
    elif name not in golden:
      problems.append("%s: no golden file for this output" % path)
    elif golden[name] != outputs[name] and (
        exact or not equal_but_numbers(golden[name], outputs[name])):
      problems.append(difference(path, golden[name], outputs[name]))
  return problems


def test_numbers_may_differ_only_by_the_tolerance_on_another_machine():
  golden = b'{"labels": ["a"], "probabilities": [[0.25, 0.75]], "truncated": 1}\n'
  assert equal_but_numbers(golden, golden.replace(b"0.75", b"0.75002"))
  assert not equal_but_numbers(golden, golden.replace(b"0.75", b"0.751"))
  assert not equal_but_numbers(golden, golden.replace(b'"a"', b'"b"'))
  assert not equal_but_numbers(golden, golden.replace(b"0.75]", b"0.75, 0.1]"))
  assert not equal_but_numbers(golden, golden.replace(b"1}", b"2}"))


@pytest.mark.parametrize("part", PARTS)
@pytest.mark.parametrize("model", MODELS)
def test_outputs_equal_the_goldens(recorded, model, part):
  outputs = recorded[model].result()[part]
  directory = os.path.join(GOLDEN_DIR, TF_MAJOR, model, part)
  if RECORD:
    write_golden(directory, outputs)
    with open(os.path.join(GOLDEN_DIR, TF_MAJOR, "machine.txt"), "w", encoding="utf-8") as f:
      f.write(machine_key())
    return
  exact = same_machine_kind()
  if not exact:
    print("\nThis machine is not the kind that recorded the goldens (%s): numbers compared "
          "within %g, the rest byte for byte." % (
              os.path.join(TF_MAJOR, "machine.txt"), NUMBER_TOLERANCE))
  problems = compare(directory, outputs, exact)
  if problems:
    pytest.fail("the %s outputs of %s differ from the goldens (if the change is intended, "
                "record them again: BERT_MGPU_RECORD_GOLDEN=1, see this file's docstring):\n"
                "%s" % (part, model, "\n".join(problems)), pytrace=False)
