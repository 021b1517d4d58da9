# coding=utf-8
"""Tests of the ONNX export (--export_format=onnx|both, --onnx_int8; serving/onnx_export.py):
each head exported by the real commands, then ONNX Runtime's outputs against the SavedModel
run by TF's loader on the same inputs (the labels, multi-label thresholds and CRF decoding
done in NumPy, as the ONNX predictor will), the ONNX model's interface, the int8 model, the
export's files, an ONNX-only export, and the refusals.

The ONNX export is TF 2.x only: under TF 1.15 only its one-line refusal is checked.
"""

import collections
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cli
import conversion_models
from bert_mgpu.classifier import serving as classifier_serving
from bert_mgpu.ner import crf_numpy
from bert_mgpu.ner import serving as ner_serving
from bert_mgpu.serving import export_versions

TF1 = tf.__version__.startswith("1.")
if not TF1:
  # TF 2's virtualenv has the [onnx] extra: a failed import fails these tests, never skips.
  import onnxruntime  # pylint: disable=g-import-not-at-top

needs_tf2 = pytest.mark.skipif(TF1, reason="the ONNX export is TF 2.x only (tf2onnx and "
                               "onnxruntime need NumPy 1.21+); TF 1.15's refusal is tested")

CLASSIFIER_SCRIPT = "run_classifier_mgpu.py"
NER_SCRIPT = "run_ner_mgpu.py"
SIGNATURE_INPUTS = ("input_ids", "input_mask", "segment_ids")
# The heads exported; "windows" is a --long_text=windows classifier (max pooling).
KINDS = ("classifier", "multi_label", "windows", "ner", "ner_crf")
NER_KINDS = ("ner", "ner_crf")
# (windows, seq) of the two input sets: every ONNX dimension is dynamic.
SHAPES = ((3, 12), (2, conversion_models.MAX_SEQ_LENGTH))
# A tiny random model: the int8 accuracy on a trained one is measured elsewhere.
INT8_TOLERANCE = 0.1

Exported = collections.namedtuple("Exported", ["kind", "model", "version_dir"])


def script_of(kind):
  return NER_SCRIPT if kind in NER_KINDS else CLASSIFIER_SCRIPT


def write_model(directory, kind, seed=0):
  """A 1-layer output_dir of `kind` (conversion_models.Model); "windows" is the classifier
  with --long_text=windows settings."""
  model = conversion_models.write_model(directory, "classifier" if kind == "windows" else kind,
                                        num_layers=1, seed=seed)
  path = os.path.join(directory, "model_settings.json")
  with open(path, encoding="utf-8") as f:
    settings = json.load(f)
  if kind == "windows":  # input_examples.options_settings and classifier_settings' keys
    settings.update(long_text="windows", doc_stride=16, max_windows=4, window_pooling="max")
  conversion_models.write_json(path, settings)
  return model


def listing(directory):
  """Every path under directory, relative, sorted."""
  return sorted(os.path.relpath(os.path.join(root, name), directory)
                for root, dirs, files in os.walk(directory) for name in dirs + files)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("onnx_export"))


class Exports(object):
  """The export (--export_format=both --onnx_int8) of each head by its script, made when a
  test first asks for it, and the outputs of its formats on the test inputs."""

  def __init__(self, workdir):
    self.workdir = workdir
    self._exported, self._outputs = {}, {}

  def __call__(self, kind):
    """The Exported of `kind`."""
    if kind not in self._exported:
      model = write_model(os.path.join(self.workdir, "models", kind), kind,
                          seed=KINDS.index(kind))
      export_base = os.path.join(self.workdir, "exports", kind)
      result = cli.run_script(script_of(kind), [
          "--output_dir=" + model.directory, "--export_dir=" + export_base,
          "--export_format=both", "--onnx_int8"])
      cli.assert_succeeded(result)
      assert os.listdir(export_base) == ["1"]
      self._exported[kind] = Exported(kind, model, os.path.join(export_base, "1"))
    return self._exported[kind]

  def outputs(self, kind):
    """{"inputs": the input sets, "savedmodel", "onnx", "int8": each format's outputs on
    them (a dict per set)}."""
    if kind not in self._outputs:
      version_dir = self(kind).version_dir
      input_sets = [make_inputs(kind, shape, seed) for seed, shape in enumerate(SHAPES)]
      self._outputs[kind] = {
          "inputs": input_sets,
          "savedmodel": run_saved_model(version_dir, input_sets),
          "onnx": run_onnx(os.path.join(version_dir, "model.onnx"), input_sets),
          "int8": run_onnx(os.path.join(version_dir, "model.int8.onnx"), input_sets),
      }
    return self._outputs[kind]


@pytest.fixture(scope="module")
def exports(workdir):
  return Exports(workdir)


# ---------------------------------------------------------------------------
# Inputs and runs
# ---------------------------------------------------------------------------

def vocab_ids():
  """(word ids, "##" continuation ids, {special token: id}) of the demo vocab."""
  tokens = conversion_models.demo_vocab_tokens()
  special = {token: i for i, token in enumerate(tokens) if token.startswith("[")}
  pieces = [i for i, token in enumerate(tokens) if token.startswith("##")]
  words = [i for i, token in enumerate(tokens) if i not in special.values() and
           not token.startswith("##")]
  return np.array(words), np.array(pieces), special


def sequences(kind, rng, num_rows, seq):
  """int32 [num_rows, seq] arrays of [CLS] text [SEP] (a sentence pair in a row of the
  classifiers) and padding, rows of different lengths (one full, one empty text)."""
  words, pieces, special = vocab_ids()
  arrays = {name: np.zeros([num_rows, seq], np.int32) for name in SIGNATURE_INPUTS}
  text_lengths = [seq - 2, 0, 3] + list(rng.randint(1, seq - 2, num_rows))
  for row in range(num_rows):
    ids = rng.choice(words, text_lengths[row])
    if kind in NER_KINDS:  # "##" pieces, which carry no tag, inside words
      continuation = rng.rand(len(ids)) < 0.3
      continuation[:1] = False
      ids[continuation] = rng.choice(pieces, continuation.sum())
    row_ids = [special["[CLS]"]] + list(ids) + [special["[SEP]"]]
    segments = [0] * len(row_ids)
    if kind not in NER_KINDS and row == 3 and len(ids) >= 3:  # [CLS] a.. [SEP] b [SEP]
      row_ids[-3] = special["[SEP]"]
      segments = [0] * (len(row_ids) - 2) + [1, 1]
    arrays["input_ids"][row, :len(row_ids)] = row_ids
    arrays["input_mask"][row, :len(row_ids)] = 1
    arrays["segment_ids"][row, :len(row_ids)] = segments
  return arrays


def make_inputs(kind, shape, seed):
  """The signature's inputs: [batch, seq], or [batch, windows, seq] for "windows" (each
  document a different number of windows; missing windows all zeros)."""
  rng = np.random.RandomState(seed)
  windows, seq = shape
  if kind != "windows":
    return sequences(kind, rng, 5, seq)
  window_counts = [windows, 1, 2]
  arrays = {name: np.zeros([len(window_counts), windows, seq], np.int32)
            for name in SIGNATURE_INPUTS}
  for row, count in enumerate(window_counts):
    for name, value in sequences(kind, rng, count, seq).items():
      arrays[name][row, :count] = value
  return arrays


def run_saved_model(version_dir, input_sets):
  """Every signature output of the SavedModel, by TF's loader, for each input set."""
  results = []
  with tf.Graph().as_default() as graph, tf.Session(graph=graph) as sess:
    meta_graph = tf.saved_model.loader.load(sess, [tf.saved_model.tag_constants.SERVING],
                                            version_dir)
    signature = meta_graph.signature_def["serving_default"]
    assert sorted(signature.inputs) == sorted(SIGNATURE_INPUTS)
    fetches = {name: graph.get_tensor_by_name(info.name)
               for name, info in signature.outputs.items()}
    for inputs in input_sets:
      results.append(sess.run(fetches, {
          graph.get_tensor_by_name(signature.inputs[name].name): value
          for name, value in inputs.items()}))
  return results


def onnx_session(path):
  options = onnxruntime.SessionOptions()
  options.intra_op_num_threads = 1  # a tiny model, on shared cores
  return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def run_onnx(path, input_sets):
  """Every output of the ONNX model at `path` for each input set, by name."""
  session = onnx_session(path)
  names = [output.name for output in session.get_outputs()]
  return [dict(zip(names, session.run(names, inputs))) for inputs in input_sets]


def assets_file(exported, name):
  return os.path.join(exported.version_dir, export_versions.EXPORT_ASSETS_DIR, name)


def read_json(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def read_bytes(path):
  with open(path, "rb") as f:
    return f.read()


def crf_tag_ids(probabilities, inputs, transitions):
  """The ONNX predictor's CRF decoding (ner_serving.crf_tag_ids) of an ONNX output, over
  the first pieces the graph marks (first_piece_table)."""
  tokens = conversion_models.demo_vocab_tokens()
  table = ner_serving.first_piece_table({token: i for i, token in enumerate(tokens)},
                                           len(tokens))
  first_pieces = table[inputs["input_ids"]] * inputs["input_mask"]
  return ner_serving.crf_tag_ids(probabilities, first_pieces, transitions)


# ---------------------------------------------------------------------------
# ONNX against the SavedModel
# ---------------------------------------------------------------------------

@needs_tf2
@pytest.mark.parametrize("kind", KINDS)
def test_onnx_probabilities_equal_the_saved_model(exports, kind):
  outputs = exports.outputs(kind)
  for inputs, saved, onnx in zip(outputs["inputs"], outputs["savedmodel"], outputs["onnx"]):
    expected = saved["probabilities"]
    batch = inputs["input_ids"].shape[0]
    pieces = inputs["input_ids"].shape[1:] if kind in NER_KINDS else ()
    assert expected.shape == (batch,) + pieces + (len(exports(kind).model.labels),)
    # Rows differ far beyond the tolerance, so a wrong row or input would show.
    assert np.abs(expected[0] - expected[1]).max() > 1e-3
    assert onnx["probabilities"].shape == expected.shape
    assert onnx["probabilities"].dtype == np.float32
    np.testing.assert_allclose(onnx["probabilities"], expected, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(np.argmax(onnx["probabilities"], axis=-1),
                                  np.argmax(expected, axis=-1))


@needs_tf2
@pytest.mark.parametrize("kind", ["classifier", "windows"])
def test_classifier_labels_of_onnx_equal_the_saved_model(exports, kind):
  labels = exports(kind).model.labels
  for saved, onnx in zip(exports.outputs(kind)["savedmodel"], exports.outputs(kind)["onnx"]):
    label_ids = np.argmax(onnx["probabilities"], axis=-1)
    np.testing.assert_array_equal(saved["label_id"], label_ids)
    assert [label.decode("utf-8") for label in saved["label"]] == [labels[i] for i in label_ids]


@needs_tf2
def test_multi_label_predictions_of_onnx_equal_the_saved_model(exports):
  exported, outputs = exports("multi_label"), exports.outputs("multi_label")
  path = assets_file(exported, "thresholds.json")
  thresholds = np.full([len(exported.model.labels)], 0.5, np.float32)
  if os.path.isfile(path):
    content = read_json(path)
    assert content["labels"] == exported.model.labels
    thresholds = np.array(content["thresholds"], np.float32)
  chosen = []
  for saved, onnx in zip(outputs["savedmodel"], outputs["onnx"]):
    predicted = (onnx["probabilities"] >= thresholds).astype(np.int32)
    np.testing.assert_array_equal(saved["predicted"], predicted)
    chosen.append(predicted)
  assert 0 < np.concatenate(chosen).mean() < 1  # both outcomes occur


@needs_tf2
def test_ner_tag_ids_of_onnx_equal_the_saved_model(exports):
  outputs = exports.outputs("ner")
  for inputs, saved, onnx in zip(outputs["inputs"], outputs["savedmodel"], outputs["onnx"]):
    assert saved["tag_ids"].shape == inputs["input_ids"].shape
    assert saved["tag_ids"].any()  # not all "O"
    np.testing.assert_array_equal(onnx["tag_ids"], saved["tag_ids"])


@needs_tf2
def test_crf_decoding_in_numpy_of_onnx_equals_the_saved_model(exports):
  exported, outputs = exports("ner_crf"), exports.outputs("ner_crf")
  transitions = crf_numpy.read_transitions(
      assets_file(exported, crf_numpy.CRF_TRANSITIONS_FILE), exported.model.labels)
  differs_from_argmax = False
  for inputs, saved, onnx in zip(outputs["inputs"], outputs["savedmodel"], outputs["onnx"]):
    assert "tag_ids" not in onnx
    expected = saved["tag_ids"]
    assert expected.shape == inputs["input_ids"].shape
    np.testing.assert_array_equal(crf_tag_ids(onnx["probabilities"], inputs, transitions),
                                  expected)
    argmax = np.argmax(onnx["probabilities"], axis=-1) * (expected > 0)
    differs_from_argmax |= not np.array_equal(argmax, expected)
  assert differs_from_argmax  # the transitions matter on these inputs


# ---------------------------------------------------------------------------
# The ONNX models' interface, int8, and the export's files
# ---------------------------------------------------------------------------

def interface(path):
  """({input name: (type, rank, every dimension symbolic)}, {output name: type})."""
  session = onnx_session(path)
  inputs = {value.name: (value.type, len(value.shape),
                         all(not isinstance(dim, int) for dim in value.shape))
            for value in session.get_inputs()}
  return inputs, {value.name: value.type for value in session.get_outputs()}


def expected_interface(kind):
  rank = 3 if kind == "windows" else 2
  outputs = {"probabilities": "tensor(float)"}
  if kind == "ner":
    outputs["tag_ids"] = "tensor(int32)"
  return {name: ("tensor(int32)", rank, True) for name in SIGNATURE_INPUTS}, outputs


@needs_tf2
@pytest.mark.parametrize("kind", KINDS)
def test_onnx_models_take_the_plain_inputs_and_give_the_numeric_outputs(exports, kind):
  for name in ("model.onnx", "model.int8.onnx"):
    assert interface(os.path.join(exports(kind).version_dir, name)) == expected_interface(
        kind), name


@needs_tf2
@pytest.mark.parametrize("kind", KINDS)
def test_the_int8_model_is_smaller_and_close_to_float32(exports, kind):
  version_dir = exports(kind).version_dir
  size = os.path.getsize(os.path.join(version_dir, "model.onnx"))
  assert os.path.getsize(os.path.join(version_dir, "model.int8.onnx")) < size
  outputs = exports.outputs(kind)
  for onnx, int8 in zip(outputs["onnx"], outputs["int8"]):
    assert sorted(int8) == sorted(onnx)
    assert int8["probabilities"].shape == onnx["probabilities"].shape
    np.testing.assert_allclose(int8["probabilities"], onnx["probabilities"], rtol=0,
                               atol=INT8_TOLERANCE)
    assert not np.array_equal(int8["probabilities"], onnx["probabilities"])  # quantized


@needs_tf2
@pytest.mark.parametrize("kind", KINDS)
def test_the_export_holds_both_formats_and_the_model_files(exports, kind):
  exported = exports(kind)
  expected = ["bert_config.json", "labels.txt", "model_settings.json", "vocab.txt"]
  if kind == "multi_label":
    expected.append("thresholds.json")
  if kind == "ner_crf":
    expected.append(crf_numpy.CRF_TRANSITIONS_FILE)
  assets = os.path.join(exported.version_dir, export_versions.EXPORT_ASSETS_DIR)
  assert sorted(os.listdir(assets)) == sorted(expected)
  assert sorted(os.listdir(exported.version_dir)) == [
      "assets.extra", "model.int8.onnx", "model.onnx", "saved_model.pb", "variables"]
  for name in ("bert_config.json", "labels.txt", "vocab.txt"):
    assert read_bytes(os.path.join(assets, name)) == read_bytes(
        os.path.join(exported.model.directory, name)), name
  assert read_json(os.path.join(assets, "model_settings.json")) == read_json(
      os.path.join(exported.model.directory, "model_settings.json"))
  if kind == "multi_label":
    content = read_json(os.path.join(assets, "thresholds.json"))
    assert (content["labels"], content["thresholds"]) == (
        conversion_models.THRESHOLDS["labels"], conversion_models.THRESHOLDS["thresholds"])


@needs_tf2
def test_the_crf_transitions_are_the_checkpoints(exports):
  exported = exports("ner_crf")
  transitions = crf_numpy.read_transitions(
      assets_file(exported, crf_numpy.CRF_TRANSITIONS_FILE), exported.model.labels)
  expected = tf.train.load_checkpoint(exported.model.checkpoint).get_tensor(
      "cls/ner/crf/transitions")
  assert expected.dtype == np.float32
  np.testing.assert_array_equal(transitions.view(np.uint32), expected.view(np.uint32))


# ---------------------------------------------------------------------------
# An ONNX-only export
# ---------------------------------------------------------------------------

@needs_tf2
def test_an_onnx_only_export_is_a_version_the_tensorflow_predictor_refuses(workdir):
  model = write_model(os.path.join(workdir, "onnx_only", "model"), "classifier")
  export_base = os.path.join(workdir, "onnx_only", "exports")
  cli.assert_succeeded(cli.run_script(CLASSIFIER_SCRIPT, [
      "--output_dir=" + model.directory, "--export_dir=" + export_base,
      "--export_format=onnx"]))
  version_dir = os.path.join(export_base, "1")
  assert os.listdir(export_base) == ["1"]
  assert sorted(os.listdir(version_dir)) == ["assets.extra", "model.onnx"]
  assert sorted(os.listdir(os.path.join(version_dir, "assets.extra"))) == [
      "bert_config.json", "labels.txt", "model_settings.json", "vocab.txt"]
  assert export_versions.newest_version_dir(export_base) == version_dir
  assert interface(os.path.join(version_dir, "model.onnx")) == expected_interface(
      "classifier")

  input_file = os.path.join(workdir, "onnx_only", "texts.txt")
  output_file = os.path.join(workdir, "onnx_only", "predictions.jsonl")
  conversion_models.write_text(input_file, "体育新闻\n科技公司发布新品\n")
  result = cli.run_script("predict_text.py", [
      "--export_dir=" + version_dir, "--input_file=" + input_file,
      "--output_file=" + output_file])
  cli.assert_one_line_error(result, version_dir, "--export_format=both")
  assert sorted(os.listdir(os.path.join(workdir, "onnx_only"))) == [
      "exports", "model", "texts.txt"]  # no predictions file


# ---------------------------------------------------------------------------
# Refusals: one line, nothing written
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plain_models(workdir):
  """A classifier and a tagger output_dir for the refusals, by script."""
  return {script: write_model(os.path.join(workdir, "refused", kind), kind).directory
          for script, kind in ((CLASSIFIER_SCRIPT, "classifier"), (NER_SCRIPT, "ner"))}


def assert_refused(result, output_dir, before, export_base, *fragments):
  """A one-line error with `fragments`; output_dir as it was, export_base never made."""
  cli.assert_one_line_error(result, *fragments)
  assert listing(output_dir) == before
  assert not os.path.exists(export_base)


def run_without_tf2onnx(script, args):
  """Runs a repo script in a Python where `import tf2onnx` fails (None in sys.modules), as
  without the [onnx] extra; returns the CompletedProcess."""
  argv = [cli.script_path(script)] + list(args)
  code = ("import runpy, sys\n"
          "sys.modules['tf2onnx'] = None\n"
          "sys.path.insert(0, %r)\n"
          "sys.argv = %r\n"
          "runpy.run_path(sys.argv[0], run_name='__main__')\n" % (cli.REPO_DIR, argv))
  return subprocess.run([sys.executable, "-c", code], cwd=cli.REPO_DIR, env=cli.script_env(),
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8",
                        errors="replace", timeout=cli.RUN_TIMEOUT_SECONDS)


@pytest.mark.parametrize("script", [CLASSIFIER_SCRIPT, NER_SCRIPT])
def test_onnx_int8_without_an_onnx_export_is_refused(plain_models, workdir, script):
  output_dir = plain_models[script]
  export_base = os.path.join(workdir, "refused", "int8_" + script)
  before = listing(output_dir)
  result = cli.run_script(script, ["--output_dir=" + output_dir, "--export_dir=" + export_base,
                                   "--onnx_int8"])
  assert_refused(result, output_dir, before, export_base, "--onnx_int8",
                 "--export_format=onnx")


@needs_tf2
@pytest.mark.parametrize("script,flags", [
    (CLASSIFIER_SCRIPT, ["--do_predict", "--data_dir=/nonexistent", "--task_name=tsv",
                         "--export_format=onnx"]),
    (CLASSIFIER_SCRIPT, ["--export_format=both", "--onnx_int8"]),
    (NER_SCRIPT, ["--do_train", "--export_format=onnx"]),
    (NER_SCRIPT, ["--export_format=savedmodel"]),
])
def test_an_export_format_without_export_dir_is_refused(plain_models, script, flags):
  output_dir = plain_models[script]
  before = listing(output_dir)
  result = cli.run_script(script, ["--output_dir=" + output_dir] + flags)
  cli.assert_one_line_error(result, "--export_format", "add --export_dir")
  assert listing(output_dir) == before


@needs_tf2
@pytest.mark.parametrize("script,export_format", [(CLASSIFIER_SCRIPT, "both"),
                                                  (NER_SCRIPT, "onnx")])
def test_onnx_without_tf2onnx_is_refused(plain_models, workdir, script, export_format):
  output_dir = plain_models[script]
  export_base = os.path.join(workdir, "refused", "no_tf2onnx_" + script)
  before = listing(output_dir)
  result = run_without_tf2onnx(script, ["--output_dir=" + output_dir,
                                        "--export_dir=" + export_base,
                                        "--export_format=" + export_format])
  assert_refused(result, output_dir, before, export_base,
                 "--export_format=%s needs tf2onnx" % export_format,
                 "pip install tf2onnx onnx onnxruntime", "pip install \".[onnx]\"")


@pytest.mark.skipif(not TF1, reason="TF 1.15 only: TF 2.x exports ONNX")
@pytest.mark.parametrize("script", [CLASSIFIER_SCRIPT, NER_SCRIPT])
def test_tf1_refuses_the_onnx_export(plain_models, workdir, script):
  output_dir = plain_models[script]
  export_base = os.path.join(workdir, "refused", "tf1_" + script)
  before = listing(output_dir)
  result = cli.run_script(script, ["--output_dir=" + output_dir, "--export_dir=" + export_base,
                                   "--export_format=onnx", "--onnx_int8"])
  assert_refused(result, output_dir, before, export_base,
                 "--export_format=onnx needs TensorFlow 2.x")


@pytest.mark.skipif(not TF1, reason="TF 1.15 only: TF 2.x exports ONNX")
def test_tf1_refuses_the_onnx_export_before_training(plain_models, workdir, tmp_path):
  """With --do_train, the refusal comes first: no training that could not be exported."""
  output_dir = str(tmp_path / "never_trained")
  result = cli.run_script(CLASSIFIER_SCRIPT, [
      "--do_train", "--task_name=tsv", "--data_dir=" + str(tmp_path / "no_data"),
      "--output_dir=" + output_dir, "--export_dir=" + str(tmp_path / "export"),
      "--export_format=onnx"])
  cli.assert_one_line_error(result, "--export_format=onnx needs TensorFlow 2.x")
  assert not os.path.exists(output_dir)


# ---------------------------------------------------------------------------
# ONNX against predict_text.py's TensorFlow path, and a failed conversion
# ---------------------------------------------------------------------------

TEXTS = ["今天天气很好", "这家店的菜很好吃", "我们明天去北京", "好"]


@needs_tf2
def test_onnx_probabilities_equal_predict_text_on_the_output_dir(exports, tmp_path):
  """predict_text.py does not run the SavedModel (it rebuilds the graph per tower from the
  checkpoint): ONNX on the same texts, featurized as it featurizes them, gives its
  probabilities."""
  from bert_mgpu.serving import predictor  # pylint: disable=import-outside-toplevel
  exported = exports("classifier")
  input_file, output_file = str(tmp_path / "texts.txt"), str(tmp_path / "predictions.tsv")
  with open(input_file, "w", encoding="utf-8") as f:
    f.write("".join(text + "\n" for text in TEXTS))
  cli.assert_succeeded(cli.run_script("predict_text.py", [
      "--output_dir=" + exported.model.directory, "--input_file=" + input_file,
      "--output_file=" + output_file]))
  with open(output_file, encoding="utf-8") as f:
    rows = [line.rstrip("\n").split("\t") for line in f]
  ours = np.array([[float(p) for p in row[2:]] for row in rows], np.float32)
  loaded = predictor.load_output_dir(exported.model.directory)
  features = classifier_serving.featurize(
      loaded.tokenizer, loaded.files.settings["max_seq_length"], TEXTS, None,
      classifier_serving.feature_options(loaded.files.settings))
  onnx = run_onnx(os.path.join(exported.version_dir, "model.onnx"),
                  [dict(features.arrays)])[0]["probabilities"]
  np.testing.assert_allclose(onnx, ours, rtol=0, atol=1e-5)
  assert [row[0] for row in rows] == [loaded.files.labels[i] for i in onnx.argmax(axis=1)]


@needs_tf2
def test_a_failed_conversion_is_one_line_and_leaves_no_version(plain_models, workdir,
                                                               monkeypatch):
  """tf2onnx failing (an operation it cannot convert, say): one line naming the step, and
  neither a version nor the temp directory is left, the SavedModel of `both` included."""
  # pylint: disable=import-outside-toplevel
  import tf2onnx
  from bert_mgpu.classifier import task as classifier_task
  from bert_mgpu.errors import UsageError
  from bert_mgpu.serving import onnx_export
  from bert_mgpu.training import run_settings
  calls = []

  def failing_conversion(*args, **kwargs):
    calls.append(1)
    raise ValueError("Unsupported ops: Foo")
  monkeypatch.setattr(tf2onnx.convert, "from_graph_def", failing_conversion)
  export_base = os.path.join(workdir, "refused", "failed_conversion")
  settings = classifier_task.ClassifierSettings(
      export_format=onnx_export.ExportFormat("both", True))
  task = classifier_task.ClassifierTask(
      run_settings.JobSettings(plain_models[CLASSIFIER_SCRIPT]), settings)
  with pytest.raises(UsageError) as info:
    task.export(export_base)
  assert calls == [1]
  assert "tf2onnx's conversion" in str(info.value) and "Unsupported ops: Foo" in str(info.value)
  assert "\n" not in str(info.value)
  assert os.listdir(export_base) == []


@needs_tf2
def test_tf2onnx_collects_garbage_before_each_graph_copy():
  """tf2onnx's optimizer copies the whole graph before each pass; without a collection first
  the copies piled up (a BERT-base export passed 24 GB). The bound is on only inside write_onnx's
  conversion."""
  import copy  # pylint: disable=import-outside-toplevel
  import gc  # pylint: disable=import-outside-toplevel
  import tf2onnx.optimizer  # pylint: disable=import-outside-toplevel
  from bert_mgpu.serving import onnx_export  # pylint: disable=import-outside-toplevel
  full_collections = []

  def count(phase, info):
    if phase == "start" and info["generation"] == 2:
      full_collections.append(1)

  value = {"graph": [1, [2, 3]]}
  gc.callbacks.append(count)
  try:
    with onnx_export.collecting_before_each_graph_copy(tf2onnx.optimizer):
      copied = tf2onnx.optimizer.copy.deepcopy(value)
      assert full_collections
      assert copied == value and copied["graph"] is not value["graph"]
      assert tf2onnx.optimizer.copy.copy is copy.copy  # the rest of the module is copy's
  finally:
    gc.callbacks.remove(count)
  assert tf2onnx.optimizer.copy is copy
