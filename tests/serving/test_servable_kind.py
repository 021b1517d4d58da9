# coding=utf-8
"""A kind of model defined here, in the test, is served end to end without an edit in
bert_mgpu/serving/: a toy head over BERT's pooled output that scores each text (no labels,
no pairs), exported as a SavedModel (and on TF 2.x an ONNX model), then run by
predict_text.py's own code in file mode, over HTTP and on ONNX Runtime. The kind has a flag
of its own (--toy_score_digits: how the scores are rounded) and a route of its own
(POST /rank: the texts by score).

predict_text.py runs in a subprocess, as users run it: this file is also the command (run
as a script it registers the toy kind and then runs predict_text.py's main), so nothing
outside this file knows the kind.
"""

import collections
import json
import os
import re
import sys

if __name__ == "__main__":  # run as the command: find the repo and the test helpers
  _TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  sys.path[:0] = [os.path.dirname(_TESTS), os.path.join(_TESTS, "helpers")]

import numpy as np
import pytest

from bert_mgpu.serving import kinds
from bert_mgpu.serving import model_files
from bert_mgpu.serving import model_inputs
import cli

TOY_KIND = "toy_score"
DIGITS = kinds.KindFlag("toy_score_digits", "integer", 5, "A toy scorer: the digits its "
                        "scores are rounded to.", minimum=0)
MAX_SEQ_LENGTH = 12
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("好坏的很不是电影服务酒店菜太贵便宜了")
TINY_CONFIG = {"vocab_size": len(VOCAB), "hidden_size": 16, "num_hidden_layers": 1,
               "num_attention_heads": 2, "intermediate_size": 32, "hidden_act": "gelu",
               "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
               "max_position_embeddings": 64, "type_vocab_size": 2, "initializer_range": 0.5}
# The last one is longer than max_seq_length - 2: cut, and counted as truncated.
TEXTS = ["好", "很好的电影", "服务太坏了", "酒店不便宜", "菜很贵", "好好好好好好好好好好好好好好"]
REQUEST_TIMEOUT_SECONDS = 60


# ---------------------------------------------------------------------------
# The toy kind: everything serving needs of it, here
# ---------------------------------------------------------------------------

ToyFeatures = collections.namedtuple("ToyFeatures", ["features", "texts"])


class ToyPredictor(kinds.TextPredictor):
  """Texts in, {"text", "score"} records out; over HTTP also one {"text": ...} alone, and
  POST /rank {"texts": [...]} -> {"ranked": records by score, highest first}."""

  def parse_request(self, request, limits):
    if isinstance(request, dict) and isinstance(request.get("text"), str):
      request = {"texts": [request["text"]]}
    return super(ToyPredictor, self).parse_request(request, limits)

  def featurize(self, texts_a, texts_b=None):
    del texts_b  # the kind takes no pairs
    tokenizer, length = self.model.tokenizer, self.max_seq_length
    arrays = {name: np.zeros([len(texts_a), length], np.int32)
              for name in ("input_ids", "input_mask", "segment_ids")}
    truncated = np.zeros([len(texts_a)], np.bool_)
    for row, text in enumerate(texts_a):
      tokens = tokenizer.tokenize(text)
      if not tokens:
        raise model_inputs.NoTokensError(row, "a")
      truncated[row] = len(tokens) > length - 2
      ids = tokenizer.convert_tokens_to_ids(["[CLS]"] + tokens[:length - 2] + ["[SEP]"])
      arrays["input_ids"][row, :len(ids)] = ids
      arrays["input_mask"][row, :len(ids)] = 1
    return ToyFeatures(model_inputs.Features(arrays, truncated), list(texts_a))

  def decode(self, featurized, outputs):
    digits = self.flag(DIGITS.name)
    return [{"text": text, "score": round(float(score), digits)}
            for text, score in zip(featurized.texts, outputs["score"])]

  def routes(self):
    return {"/rank": self._rank}

  def _rank(self, request, predict, limits):
    inputs = self.parse_request(request, limits)
    featurized = self.featurize_request(inputs, 0, self.request_size(inputs))
    records = self.decode(featurized, predict(featurized.features))
    return {"ranked": sorted(records, key=lambda record: -record["score"])}

  def file_text(self, records):
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)

  def log_file_run(self, featurized, records, seconds, featurize_seconds):
    sys.stderr.write("Scored %d text(s).\n" % len(records))

  def reply(self, records, truncated, inputs):
    del inputs
    return {"scores": [record["score"] for record in records], "truncated": truncated}

  def metadata(self):
    return {"kind": TOY_KIND, "outputs": ["score"]}


def toy_model_fn(bert_config):
  """The toy head: score [batch] = sigmoid(w . pooled + b)."""
  import tensorflow.compat.v1 as tf  # pylint: disable=import-outside-toplevel
  import modeling  # pylint: disable=import-outside-toplevel

  def model_fn(features, is_training):
    model = modeling.BertModel(config=bert_config, is_training=is_training,
                               input_ids=features["input_ids"],
                               input_mask=features["input_mask"],
                               token_type_ids=features["segment_ids"])
    pooled = model.get_pooled_output()  # [batch, hidden]
    with tf.variable_scope("cls/toy_score"):
      weights = tf.get_variable("output_weights", [1, bert_config.hidden_size],
                                initializer=tf.truncated_normal_initializer(stddev=1.0))
      bias = tf.get_variable("output_bias", [1], initializer=tf.zeros_initializer())
    logits = tf.squeeze(tf.matmul(pooled, weights, transpose_b=True), -1) + bias  # [batch]
    return {"score": tf.sigmoid(logits)}
  return model_fn


class ToyGraph(kinds.KindGraph):
  """The toy kind's TensorFlow side."""

  def signature_outputs(self, model, inputs):
    import tensorflow.compat.v1 as tf  # pylint: disable=import-outside-toplevel
    from bert_mgpu.serving import serving_graph  # pylint: disable=import-outside-toplevel
    features = serving_graph.checked_features(inputs, model.bert_config)
    score = toy_model_fn(model.bert_config)(features, False)["score"]
    return collections.OrderedDict([("score", tf.identity(score, name="score"))])

  def onnx_output_names(self, files):
    del files
    return ("score",)

  def tensorflow_runner(self, model, devices, batch_size_per_tower):
    from bert_mgpu.serving import predictor  # pylint: disable=import-outside-toplevel
    return predictor.Predictor(model, toy_model_fn(model.bert_config), devices,
                               batch_size_per_tower)


class ToyScoreKind(kinds.ServableKind):
  name = TOY_KIND
  description = "a toy scorer"
  script = "tests/serving/test_servable_kind.py"
  has_labels = False
  flags = (DIGITS,)

  def outputs(self, files):
    return {"score": model_inputs.OutputSpec(())}  # [texts]

  def onnx_outputs(self, files):
    return {"score": ("tensor(float)", [None])}

  def text_predictor(self, model, runner):
    return ToyPredictor(model, runner)

  def graph(self):
    return ToyGraph()


# ---------------------------------------------------------------------------
# A trained toy model, its export, and predict_text.py run as this file
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def toy_kind():
  kind = kinds.register(ToyScoreKind())
  yield kind
  kinds.unregister(TOY_KIND)


def write_toy_model(output_dir):
  """A toy output_dir: random weights (a seeded initialization) and the model files."""
  import tensorflow.compat.v1 as tf  # pylint: disable=import-outside-toplevel
  import modeling  # pylint: disable=import-outside-toplevel
  os.makedirs(output_dir)
  for name, text in (("vocab.txt", "".join(t + "\n" for t in VOCAB)),
                     ("bert_config.json", json.dumps(TINY_CONFIG)),
                     ("model_settings.json", json.dumps(
                         {"model": TOY_KIND, "do_lower_case": True,
                          "max_seq_length": MAX_SEQ_LENGTH}))):
    with open(os.path.join(output_dir, name), "w", encoding="utf-8") as f:
      f.write(text)
  graph = tf.Graph()
  with graph.as_default():
    tf.set_random_seed(7)
    inputs = {name: tf.placeholder(tf.int32, [None, None], name=name)
              for name in ("input_ids", "input_mask", "segment_ids")}
    score = toy_model_fn(modeling.BertConfig.from_dict(TINY_CONFIG))(inputs, False)["score"]
    global_step = tf.train.get_or_create_global_step()
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      tf.train.Saver().save(sess, os.path.join(output_dir, "model.ckpt"),
                            global_step=global_step)
  return score


def expected_scores(output_dir, featurized):
  """The toy model's scores of featurized texts, run here at full length."""
  import tensorflow.compat.v1 as tf  # pylint: disable=import-outside-toplevel
  import modeling  # pylint: disable=import-outside-toplevel
  graph = tf.Graph()
  with graph.as_default():
    inputs = {name: tf.placeholder(tf.int32, [None, None], name=name)
              for name in ("input_ids", "input_mask", "segment_ids")}
    score = toy_model_fn(modeling.BertConfig.from_dict(TINY_CONFIG))(inputs, False)["score"]
    with tf.Session() as sess:
      tf.train.Saver().restore(sess, tf.train.latest_checkpoint(output_dir))
      return sess.run(score, {inputs[name]: featurized.features.arrays[name]
                              for name in inputs})


Toy = collections.namedtuple("Toy", ["output_dir", "export_dir", "scores", "onnx"])


@pytest.fixture(scope="module")
def toy(toy_kind, tmp_path_factory):
  """The toy output_dir, its export (both formats on TF 2.x), and the expected scores."""
  import tensorflow.compat.v1 as tf  # pylint: disable=import-outside-toplevel
  from bert_mgpu.serving import export  # pylint: disable=import-outside-toplevel
  from bert_mgpu.serving import onnx_export  # pylint: disable=import-outside-toplevel
  from bert_mgpu.serving import predictor  # pylint: disable=import-outside-toplevel
  del toy_kind
  workdir = str(tmp_path_factory.mktemp("toy_kind"))
  output_dir = os.path.join(workdir, "trained")
  write_toy_model(output_dir)
  files = model_files.find_model_files(output_dir, "write it again.", (TOY_KIND,))
  checkpoint = tf.train.latest_checkpoint(output_dir)
  model = predictor.load_model(files, checkpoint, checkpoint)
  with_onnx = not tf.__version__.startswith("1.")
  export_dir = os.path.join(workdir, "exports")
  export.export_model(export_dir, model,
                      onnx_export.ExportFormat("both" if with_onnx else "savedmodel"))
  featurized = ToyPredictor(model, None).featurize(TEXTS)
  scores = [round(float(s), 5) for s in expected_scores(output_dir, featurized)]
  assert len(set(scores)) > 2, scores  # the texts are told apart: order errors would show
  return Toy(output_dir, export_dir, scores, with_onnx)


def run_predict_text(args, tmp_path):
  """This file as predict_text.py, to the end; returns the CompletedProcess."""
  return cli.run_script(os.path.abspath(__file__), args, cwd=str(tmp_path))


def read_records(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def test_the_toy_kind_is_exported_with_its_files_and_no_labels(toy):
  version_dir = os.path.join(toy.export_dir, "1")
  assets = sorted(os.listdir(os.path.join(version_dir, "assets.extra")))
  assert assets == ["bert_config.json", "model_settings.json", "vocab.txt"]
  assert os.path.isfile(os.path.join(version_dir, "saved_model.pb"))
  assert os.path.isfile(os.path.join(version_dir, "model.onnx")) == toy.onnx


def score_texts_file(toy, source, tmp_path, more_flags=()):
  """predict_text.py in file mode on TEXTS, the model from `source`; returns (the
  CompletedProcess, the output's records)."""
  if source == "onnxruntime" and not toy.onnx:
    pytest.skip("the ONNX export is TF 2.x only")
  input_file, output_file = str(tmp_path / "texts.txt"), str(tmp_path / "scores.jsonl")
  with open(input_file, "w", encoding="utf-8") as f:
    f.write("".join(text + "\n" for text in TEXTS))
  model_flags = {"output_dir": ["--output_dir=" + toy.output_dir],
                 "export_dir": ["--export_dir=" + toy.export_dir],
                 "onnxruntime": ["--export_dir=" + toy.export_dir,
                                 "--backend=onnxruntime"]}[source]
  result = run_predict_text(model_flags + ["--input_file=" + input_file,
                                           "--output_file=" + output_file] + list(more_flags),
                            tmp_path)
  cli.assert_succeeded(result)
  return result, read_records(output_file)


@pytest.mark.parametrize("source", ["output_dir", "export_dir", "onnxruntime"])
def test_predict_text_file_mode_gives_the_toy_models_scores(toy, source, tmp_path):
  result, records = score_texts_file(toy, source, tmp_path)
  assert [r["text"] for r in records] == TEXTS
  np.testing.assert_allclose([r["score"] for r in records], toy.scores, rtol=0, atol=2e-5)
  assert "Scored %d text(s)." % len(TEXTS) in result.stderr
  assert "1 of %d text(s) had more than max_seq_length" % len(TEXTS) in result.stderr


@pytest.mark.parametrize("source", ["output_dir", "onnxruntime"])
def test_the_kinds_own_flag_reaches_its_predictor(toy, source, tmp_path):
  _, records = score_texts_file(toy, source, tmp_path, ["--toy_score_digits=2"])
  scores = [r["score"] for r in records]
  assert scores == [round(score, 2) for score in scores]
  np.testing.assert_allclose(scores, toy.scores, rtol=0, atol=0.005 + 2e-5)
  assert scores != toy.scores  # rounded to 2 digits, not the default 5


def test_a_kinds_flag_given_for_a_model_of_another_kind_is_refused(toy, tmp_path):
  input_file = str(tmp_path / "texts.txt")
  with open(input_file, "w", encoding="utf-8") as f:
    f.write("好\n")
  classifier = os.path.join(cli.REPO_DIR, "tests", "serving", "golden", "models", "pair")
  result = run_predict_text(["--output_dir=" + classifier, "--input_file=" + input_file,
                             "--toy_score_digits=2"], tmp_path)
  cli.assert_one_line_error(
      result, "--toy_score_digits is for a toy scorer; %s is a classifier: drop "
      "--toy_score_digits." % classifier)
  result = run_predict_text(["--output_dir=" + toy.output_dir, "--input_file=" + input_file,
                             "--max_context_chars=50"], tmp_path)
  cli.assert_one_line_error(
      result, "--max_context_chars is for a reading-comprehension model; %s is a toy scorer: "
      "drop --max_context_chars." % toy.output_dir)
  result = run_predict_text(["--output_dir=" + toy.output_dir, "--input_file=" + input_file,
                             "--toy_score_digits=-1"], tmp_path)
  cli.assert_one_line_error(result, "--toy_score_digits=-1: it must be at least 0.")


def test_text_pairs_are_refused_for_the_toy_kind(toy, tmp_path):
  input_file = str(tmp_path / "pairs.txt")
  with open(input_file, "w", encoding="utf-8") as f:
    f.write("好\t坏\n")
  result = run_predict_text(["--export_dir=" + toy.export_dir, "--text_b",
                             "--input_file=" + input_file], tmp_path)
  cli.assert_one_line_error(result, "is a toy scorer, which takes no text pairs")


@pytest.mark.parametrize("backend", ["tensorflow", "onnxruntime"])
def test_the_toy_kind_answers_http(toy, backend, tmp_path):
  if backend == "onnxruntime" and not toy.onnx:
    pytest.skip("the ONNX export is TF 2.x only")
  args = ["--export_dir=" + toy.export_dir, "--serve=0", "--backend=" + backend,
          "--max_request_texts=10"]
  with cli.RunningScript(os.path.abspath(__file__), args, str(tmp_path / "stderr.txt"),
                         cwd=str(tmp_path)) as running:
    running.wait_for(lambda: re.search(r"Serving on (http://\S+)", running.stderr()),
                     "the server listening")
    url = re.search(r"Serving on (http://\S+)", running.stderr()).group(1)
    running.wait_for(lambda: cli.http_json(url + "/healthz")[0] == 200, "the model ready")
    assert cli.http_json(url + "/labels") == (200, {"kind": TOY_KIND, "outputs": ["score"]})
    status, reply = cli.http_json(url + "/predict", json.dumps({"texts": TEXTS}).encode())
    assert status == 200, reply
    np.testing.assert_allclose(reply["scores"], toy.scores, rtol=0, atol=2e-5)
    assert reply["truncated"] == 1
    status, reply = cli.http_json(url + "/predict", json.dumps({"text": TEXTS[1]}).encode())
    assert status == 200, reply
    np.testing.assert_allclose(reply["scores"], toy.scores[1:2], rtol=0, atol=2e-5)
    status, reply = cli.http_json(url + "/predict", json.dumps(
        {"texts": ["好"], "texts_b": ["坏"]}).encode())
    assert (status, reply) == (400, {"error": 'this is a toy scorer: send "texts" only (no '
                                              '"texts_b")'})
    status, reply = cli.http_json(url + "/predict", json.dumps({"texts": ["\u200b"]}).encode())
    assert status == 400 and "texts[0] has no tokens" in reply["error"], reply
    # The kind's own route, through the same micro-batcher.
    status, reply = cli.http_json(url + "/rank", json.dumps({"texts": TEXTS}).encode())
    assert status == 200, reply
    by_score = sorted(zip(toy.scores, TEXTS), key=lambda pair: -pair[0])
    assert [r["text"] for r in reply["ranked"]] == [text for _, text in by_score]
    np.testing.assert_allclose([r["score"] for r in reply["ranked"]],
                               [score for score, _ in by_score], rtol=0, atol=2e-5)
    status, reply = cli.http_json(url + "/rank", json.dumps({"texts": ["\u200b"]}).encode())
    assert status == 400 and "texts[0] has no tokens" in reply["error"], reply
    status, reply = cli.http_json(url + "/rank", json.dumps({"texts": ["a"] * 11}).encode())
    assert status == 413 and "at most 10" in reply["error"], reply
    status, reply = cli.http_json(url + "/nowhere", b"{}")
    assert (status, reply) == (404, {"error": "no such path: use POST /predict or /rank"})
    running.signal(15)
    assert running.wait() == 0, running.stderr()[-3000:]


if __name__ == "__main__":
  kinds.register(ToyScoreKind())
  import predict_text  # pylint: disable=wrong-import-position
  from bert_mgpu import command_line_base  # pylint: disable=wrong-import-position
  predict_text.define_flags()
  command_line_base.run_main(predict_text.main)
