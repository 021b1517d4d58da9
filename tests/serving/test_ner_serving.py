# coding=utf-8
"""An NER model put to work: run_ner_mgpu.py --export_dir, and predict_text.py on an NER
output_dir or export, in a file and through --serve.

One training run (module fixture): the CLUENER layout of scripts/make_ner_data.py (every
tenth test sentence several sentences long, so windows), a tiny BERT with the CRF head,
--do_train --do_predict --export_dir on two towers. Its predict_entities.jsonl is the
expected output of everything else, since the texts of CLUENER's test.json are the lines
predict_text.py reads (each character one token in both).
"""

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cli
from cli import read_json, read_jsonl
from bert_mgpu.ner import featurizing
from bert_mgpu.ner import scoring as ner_scoring
from bert_mgpu.ner import serving as ner_serving
from bert_mgpu.ner import tag_labels
from bert_mgpu.ner import writers
import tokenization

MAKE_DATA = cli.script_path(os.path.join("scripts", "make_ner_data.py"))
MAX_SEQ_LENGTH = 48  # the long test sentences need several windows
DOC_STRIDE = 16
SIGNATURE_INPUTS = ("input_ids", "input_mask", "segment_ids")
REQUEST_TIMEOUT_SECONDS = 60


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """(root, output_dir, export base, the test texts, the expected records)."""
  root = str(tmp_path_factory.mktemp("ner_serving"))
  data_dir = os.path.join(root, "data")
  subprocess.run([sys.executable, MAKE_DATA, "--output_dir", data_dir, "--long_every", "10"],
                 check=True, stdout=subprocess.PIPE, timeout=120)
  output_dir = os.path.join(root, "model")
  export_dir = os.path.join(root, "exports")
  cli.assert_succeeded(cli.run_script("run_ner_mgpu.py", cli.flag_list({
      "data_dir": os.path.join(data_dir, "cluener"),
      "vocab_file": os.path.join(data_dir, "vocab.txt"),
      "bert_config_file": os.path.join(data_dir, "bert_config.json"),
      "output_dir": output_dir, "export_dir": export_dir, "do_train": True,
      "do_predict": True, "use_crf": True, "n_gpus": 2, "max_seq_length": MAX_SEQ_LENGTH,
      "doc_stride": DOC_STRIDE, "train_batch_size": 8, "learning_rate": 1e-3,
      "num_train_epochs": 3, "save_checkpoints_steps": 1000, "log_steps": 1000})))
  with open(os.path.join(data_dir, "cluener", "test.json"), encoding="utf-8") as f:
    texts = [json.loads(line)["text"] for line in f]
  expected = read_jsonl(os.path.join(output_dir, "predict_entities.jsonl"))
  assert [r["text"] for r in expected] == texts
  assert sum(len(r["entities"]) for r in expected) > len(texts)  # a model that finds some
  texts_file = os.path.join(root, "texts.txt")
  with open(texts_file, "w", encoding="utf-8") as f:
    f.write("".join(text + "\n" for text in texts))
  return {"root": root, "output_dir": output_dir, "export_dir": export_dir, "texts": texts,
          "texts_file": texts_file, "expected": expected}


# ---------------------------------------------------------------------------
# The output_dir and the export
# ---------------------------------------------------------------------------

def test_output_dir_and_export_keep_the_model_files(trained):
  settings = {"model": "ner", "do_lower_case": True, "max_seq_length": MAX_SEQ_LENGTH,
              "doc_stride": DOC_STRIDE, "use_crf": True}
  assets = os.path.join(trained["export_dir"], "1", "assets.extra")
  for directory in (trained["output_dir"], assets):
    assert read_json(os.path.join(directory, "model_settings.json")) == settings
    labels = tag_labels.read_label_file(os.path.join(directory, "labels.txt"))
    assert labels[0] == "O" and {"B-PER", "I-LOC", "B-ORG"} <= set(labels)
    for name in ("vocab.txt", "bert_config.json"):
      assert os.path.isfile(os.path.join(directory, name))
  assert sorted(os.listdir(trained["export_dir"])) == ["1"]


def load_signature(sess, version_dir):
  meta_graph = tf.saved_model.loader.load(sess, [tf.saved_model.tag_constants.SERVING],
                                          version_dir)
  return meta_graph.signature_def["serving_default"]


def test_signature_takes_dynamic_int32_inputs(trained):
  with tf.Graph().as_default(), tf.Session() as sess:
    signature = load_signature(sess, os.path.join(trained["export_dir"], "1"))
  assert sorted(signature.inputs) == sorted(SIGNATURE_INPUTS)
  for name in SIGNATURE_INPUTS:
    assert signature.inputs[name].dtype == tf.int32.as_datatype_enum
    assert [d.size for d in signature.inputs[name].tensor_shape.dim] == [-1, -1]
  assert sorted(signature.outputs) == ["probabilities", "tag_ids"]
  assert signature.outputs["tag_ids"].dtype == tf.int32.as_datatype_enum


def run_export(version_dir, arrays, batch_size):
  """tag_ids [n, max_seq_length] (zero-padded) and the probabilities of the first batch, from
  TF's own loader, in batches cut to their longest window."""
  tag_ids = np.zeros_like(arrays["input_ids"])
  with tf.Graph().as_default() as graph, tf.Session(graph=graph) as sess:
    signature = load_signature(sess, version_dir)
    inputs = {name: graph.get_tensor_by_name(signature.inputs[name].name)
              for name in SIGNATURE_INPUTS}
    outputs = {name: graph.get_tensor_by_name(signature.outputs[name].name)
               for name in ("tag_ids", "probabilities")}
    lengths = arrays["input_mask"].sum(axis=1)
    first_probabilities = None
    for start in range(0, len(lengths), batch_size):
      rows = slice(start, start + batch_size)
      longest = lengths[rows].max()
      result = sess.run(outputs, {inputs[name]: arrays[name][rows, :longest]
                                  for name in SIGNATURE_INPUTS})
      assert result["tag_ids"].shape == (len(lengths[rows]), longest)
      tag_ids[rows, :longest] = result["tag_ids"]
      if first_probabilities is None:
        first_probabilities = result["probabilities"]
  return tag_ids, first_probabilities


def test_export_gives_the_tags_of_do_predict(trained):
  """The export's tag_ids, read back as run_ner_mgpu.py reads --do_predict's, give its
  entities; and they are 0 wherever featurizing puts no tag (not a first piece)."""
  assets = os.path.join(trained["export_dir"], "1", "assets.extra")
  tokenizer = tokenization.FullTokenizer(os.path.join(assets, "vocab.txt"), do_lower_case=True)
  labels = tag_labels.read_label_file(os.path.join(assets, "labels.txt"))
  sentences = ner_serving.sentences_of_texts(trained["texts"])
  featurized = featurizing.featurize_sentences(sentences, tokenizer, labels, MAX_SEQ_LENGTH,
                                               DOC_STRIDE)
  windows = [window for _, windows in featurized for window in windows]
  assert len(windows) > len(sentences)  # the long sentences have several windows
  arrays = {name: np.array([getattr(w, name) for w in windows], np.int32)
            for name in SIGNATURE_INPUTS + ("label_mask",)}
  tag_ids, probabilities = run_export(os.path.join(trained["export_dir"], "1"), arrays, 7)
  assert not (tag_ids * (1 - arrays["label_mask"])).any()
  assert probabilities.ndim == 3 and probabilities.shape[-1] == len(labels)
  np.testing.assert_allclose(probabilities.sum(axis=-1), 1.0, atol=1e-5)
  records, start = [], 0
  scheme = ner_scoring.detect_scheme(labels)
  for sentence, (aligned, sentence_windows) in zip(sentences, featurized):
    tags = featurizing.tags_from_windows(aligned, sentence_windows,
                                         tag_ids[start:start + len(sentence_windows)], labels,
                                         scheme)
    records.append(writers.entity_records(sentence, ner_scoring.entities(tags)))
    start += len(sentence_windows)
  assert json.loads(json.dumps(records)) == trained["expected"]


def test_first_piece_table_excludes_markers_and_continuations():
  vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "中": 4, "##ing": 5, "play": 6}
  assert ner_serving.first_piece_table(vocab, 8).tolist() == [0, 1, 0, 0, 1, 0, 1, 1]


# ---------------------------------------------------------------------------
# predict_text.py
# ---------------------------------------------------------------------------

def test_predict_text_on_the_output_dir_and_the_export_gives_do_predicts_entities(trained):
  root = trained["root"]
  runs = {"output_dir": trained["output_dir"], "export_dir": trained["export_dir"]}
  for flag, source in runs.items():
    output_file = os.path.join(root, "predicted_from_%s.jsonl" % flag)
    cli.assert_succeeded(cli.run_script("predict_text.py", [
        "--%s=%s" % (flag, source), "--input_file=" + trained["texts_file"],
        "--output_file=" + output_file, "--n_gpus=2", "--predict_batch_size=5"]))
    assert read_jsonl(output_file) == trained["expected"], flag


def request(url, body=None):
  return cli.http_json(url, body, REQUEST_TIMEOUT_SECONDS)


def test_serve_answers_entities(trained, tmp_path):
  running = cli.RunningScript("predict_text.py", [
      "--export_dir=" + trained["export_dir"], "--serve=0", "--host=127.0.0.1",
      "--max_batch=4"], str(tmp_path / "stderr.txt"))
  with running:
    running.wait_for(lambda: re.search(r"Serving on (http://\S+)", running.stderr()),
                     "the server listening")
    url = re.search(r"Serving on (http://\S+)", running.stderr()).group(1)
    running.wait_for(lambda: request(url + "/healthz")[0] == 200, "the model ready")
    rows = [0, 1, 10, 3, 20, 5]  # 0, 10 and 20 are long: several windows, several chunks
    status, reply = request(url + "/predict", json.dumps(
        {"texts": [trained["texts"][i] for i in rows]}).encode("utf-8"))
    assert status == 200, reply
    assert reply == {"entities": [trained["expected"][i]["entities"] for i in rows]}
    status, reply = request(url + "/predict", json.dumps(
        {"texts": ["北京"], "texts_b": ["上海"]}).encode("utf-8"))
    assert status == 400 and "texts_b" in reply["error"]
    status, reply = request(url + "/predict", json.dumps(
        {"texts": ["北京", "\u200b \u0001"]}).encode("utf-8"))
    assert status == 400 and reply["error"] == (
        "texts[1] has no tokens (only spaces, control or invisible characters): send a text")
    assert request(url + "/labels")[1]["labels"][0] == "O"
    running.signal(15)
    assert running.wait() == 0


# ---------------------------------------------------------------------------
# The other kind of model
# ---------------------------------------------------------------------------

def copy_as_classifier(output_dir, target):
  """The NER output_dir with a classifier's model_settings.json."""
  shutil.copytree(output_dir, target)
  with open(os.path.join(target, "model_settings.json"), "w", encoding="utf-8") as f:
    json.dump({"model": "classifier", "task_name": "tsv", "do_lower_case": True,
               "max_seq_length": MAX_SEQ_LENGTH}, f)
  return target


def test_a_classifier_given_to_run_ner_is_one_line(trained, tmp_path):
  classifier_dir = copy_as_classifier(trained["output_dir"], str(tmp_path / "classifier"))
  export_dir = str(tmp_path / "exports")
  result = cli.run_script("run_ner_mgpu.py", ["--output_dir=" + classifier_dir,
                                              "--export_dir=" + export_dir])
  cli.assert_one_line_error(result, "model_settings.json", "'classifier' model, not an NER "
                            "model", "run_ner_mgpu.py")
  assert not os.path.exists(export_dir)


def test_an_ner_model_given_to_run_classifier_is_one_line(trained, tmp_path):
  export_dir = str(tmp_path / "exports")
  result = cli.run_script("run_classifier_mgpu.py", ["--output_dir=" + trained["output_dir"],
                                                     "--export_dir=" + export_dir])
  cli.assert_one_line_error(result, "model_settings.json", "'ner' model, not a classifier",
                            "run_classifier_mgpu.py")
  assert not os.path.exists(export_dir)


def test_text_b_on_an_ner_model_is_one_line(trained, tmp_path):
  pairs = tmp_path / "pairs.txt"
  pairs.write_text("北京\t上海\n", encoding="utf-8")
  result = cli.run_script("predict_text.py", ["--export_dir=" + trained["export_dir"],
                                              "--input_file=" + str(pairs), "--text_b"])
  cli.assert_one_line_error(result, "NER model", "--text_b")


def test_a_text_without_tokens_is_one_line_naming_it(trained, tmp_path):
  """As for the classifier: no entities is not an answer to a text with nothing in it."""
  texts = tmp_path / "texts.txt"
  texts.write_text("北京\n\u200b\u0001\n上海\n", encoding="utf-8")
  output_file = tmp_path / "out.jsonl"
  result = cli.run_script("predict_text.py", ["--export_dir=" + trained["export_dir"],
                                              "--input_file=" + str(texts),
                                              "--output_file=" + str(output_file)])
  cli.assert_one_line_error(result, "%s line 2: the line has no tokens" % texts)
  assert not output_file.exists()
