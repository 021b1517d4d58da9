# coding=utf-8
"""run_classifier_mgpu.py --export_dir: a SavedModel that TF's own loader runs and that
gives run_classifier's --do_predict probabilities, with the model files in assets.extra."""

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cli
from bert_mgpu.errors import UsageError
from bert_mgpu.serving import export
from bert_mgpu.serving import export_versions
from bert_mgpu.classifier import serving as classifier_serving
import tokenization
import trained_classifier
from trained_classifier import read_lines

SIGNATURE_INPUTS = ("input_ids", "input_mask", "segment_ids")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
  """Trained with --export_dir (version 1), then exported again alone (version 2)."""
  root = str(tmp_path_factory.mktemp("export"))
  export_dir = os.path.join(root, "exports")
  trained = trained_classifier.train(root, export_dir=export_dir)
  # Alone: no --data_dir, --task_name, --vocab_file or --bert_config_file.
  trained_classifier.export(trained.output_dir, export_dir)
  return trained, export_dir


def featurize(model, texts_a, texts_b=None):
  tokenizer = tokenization.FullTokenizer(model.vocab_file, do_lower_case=True)
  return classifier_serving.featurize(tokenizer, trained_classifier.MAX_SEQ_LENGTH, texts_a, texts_b)


def run_export(version_dir, features, batch_size):
  """Probabilities and label names from TF's loader, in batches cut to their longest text."""
  with tf.Graph().as_default() as graph, tf.Session(graph=graph) as sess:
    meta_graph = tf.saved_model.loader.load(sess, [tf.saved_model.tag_constants.SERVING],
                                            version_dir)
    signature = meta_graph.signature_def["serving_default"]
    inputs = {name: graph.get_tensor_by_name(signature.inputs[name].name)
              for name in SIGNATURE_INPUTS}
    outputs = {name: graph.get_tensor_by_name(signature.outputs[name].name)
               for name in ("probabilities", "label_id", "label")}
    results = []
    lengths = features.arrays["input_mask"].sum(axis=1)
    for start in range(0, len(lengths), batch_size):
      rows = slice(start, start + batch_size)
      longest = lengths[rows].max()
      results.append(sess.run(outputs, {inputs[name]: features.arrays[name][rows, :longest]
                                        for name in SIGNATURE_INPUTS}))
  return {name: np.concatenate([r[name] for r in results]) for name in outputs}


def test_training_and_exporting_alone_write_numbered_versions(model):
  _, export_dir = model
  assert sorted(os.listdir(export_dir)) == ["1", "2"]  # no temp directory left behind
  for version in ("1", "2"):
    assert os.path.isfile(os.path.join(export_dir, version, "saved_model.pb"))


@pytest.mark.parametrize("version", ["1", "2"])
@pytest.mark.parametrize("batch_size", [1, 3, 25])
def test_export_gives_the_probabilities_of_do_predict(model, version, batch_size):
  trained, export_dir = model
  lengths = featurize(trained, trained.texts).arrays["input_mask"].sum(axis=1)
  assert len(set(lengths)) > 5 and lengths.max() == trained_classifier.MAX_SEQ_LENGTH
  trained_classifier.assert_rows_distinguishable(trained.probabilities, 1e-4)
  results = run_export(os.path.join(export_dir, version), featurize(trained, trained.texts),
                       batch_size)
  np.testing.assert_allclose(results["probabilities"], trained.probabilities, atol=1e-5)
  expected_ids = np.argmax(trained.probabilities, axis=1)
  np.testing.assert_array_equal(results["label_id"], expected_ids)
  assert [label.decode("utf-8") for label in results["label"]] == [
      trained.labels[i] for i in expected_ids]


def test_export_gives_the_probabilities_of_do_predict_for_pairs(model):
  trained, export_dir = model
  texts_a, texts_b = zip(*trained.pairs)
  results = run_export(os.path.join(export_dir, "2"),
                       featurize(trained, list(texts_a), list(texts_b)), batch_size=3)
  np.testing.assert_allclose(results["probabilities"], trained.pair_probabilities, atol=1e-5)


def test_signature_takes_dynamic_int32_inputs_and_no_label(model):
  _, export_dir = model
  with tf.Graph().as_default(), tf.Session() as sess:
    meta_graph = tf.saved_model.loader.load(sess, ["serve"], os.path.join(export_dir, "1"))
  signature = meta_graph.signature_def["serving_default"]
  assert sorted(signature.inputs) == sorted(SIGNATURE_INPUTS)
  for name in SIGNATURE_INPUTS:
    assert signature.inputs[name].dtype == tf.int32.as_datatype_enum
    assert [d.size for d in signature.inputs[name].tensor_shape.dim] == [-1, -1]
  assert sorted(signature.outputs) == ["label", "label_id", "probabilities"]


def test_sequences_longer_than_the_position_table_are_refused(model):
  trained, export_dir = model
  too_long = trained_classifier.TINY_CONFIG["max_position_embeddings"] + 1
  with tf.Graph().as_default() as graph, tf.Session(graph=graph) as sess:
    meta_graph = tf.saved_model.loader.load(sess, ["serve"], os.path.join(export_dir, "1"))
    signature = meta_graph.signature_def["serving_default"]
    feed = {graph.get_tensor_by_name(signature.inputs[name].name): np.ones([1, too_long],
                                                                           np.int32)
            for name in SIGNATURE_INPUTS}
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_position_embeddings=64"):
      sess.run(graph.get_tensor_by_name(signature.outputs["probabilities"].name), feed)


def test_assets_make_the_export_self_contained(model):
  trained, export_dir = model
  assets = os.path.join(export_dir, "1", "assets.extra")
  assert read_lines(os.path.join(assets, "labels.txt")) == trained.labels
  assert read_lines(os.path.join(assets, "vocab.txt")) == read_lines(trained.vocab_file)
  with open(trained.config_file, encoding="utf-8") as f:
    config = json.load(f)
  with open(os.path.join(assets, "bert_config.json"), encoding="utf-8") as f:
    assert json.load(f) == config
  with open(os.path.join(assets, "model_settings.json"), encoding="utf-8") as f:
    assert json.load(f) == {"model": "classifier", "task_name": "tsv", "do_lower_case": True,
                            "max_seq_length": trained_classifier.MAX_SEQ_LENGTH}


def test_export_keeps_googles_variable_names_of_the_best_checkpoint(model):
  trained, export_dir = model
  best = tf.train.latest_checkpoint(os.path.join(trained.output_dir, "best"))
  latest = tf.train.latest_checkpoint(trained.output_dir)
  assert best is not None and best != latest  # so the test can tell which one was used
  exported = export_versions.checkpoint_of_export(os.path.join(export_dir, "2"))
  exported_names = sorted(name for name, _ in tf.train.list_variables(exported))
  model_names = sorted(name for name, _ in tf.train.list_variables(best)
                       if name != "global_step" and not name.endswith(("/adam_m", "/adam_v")))
  assert exported_names == model_names
  assert "output_weights" in exported_names and "bert/embeddings/word_embeddings" in model_names
  best_reader, exported_reader = tf.train.load_checkpoint(best), tf.train.load_checkpoint(exported)
  for name in exported_names:
    np.testing.assert_array_equal(exported_reader.get_tensor(name), best_reader.get_tensor(name))


def test_an_output_dir_without_model_files_exports_with_the_training_flags(model, tmp_path):
  trained, _ = model
  old_dir = str(tmp_path / "old_model")
  shutil.copytree(trained.output_dir, old_dir)
  for name in ("vocab.txt", "bert_config.json", "model_settings.json"):
    os.remove(os.path.join(old_dir, name))
  export_dir = str(tmp_path / "exports")
  result = cli.run_script("run_classifier_mgpu.py", ["--output_dir=" + old_dir,
                                                     "--export_dir=" + export_dir])
  cli.assert_one_line_error(result, old_dir, "vocab.txt", "--vocab_file")
  assert not os.path.exists(export_dir)
  trained_classifier.run_classifier({
      "output_dir": old_dir, "export_dir": export_dir, "vocab_file": trained.vocab_file,
      "bert_config_file": trained.config_file,
      "max_seq_length": trained_classifier.MAX_SEQ_LENGTH})
  results = run_export(os.path.join(export_dir, "1"), featurize(trained, trained.texts), 8)
  np.testing.assert_allclose(results["probabilities"], trained.probabilities, atol=1e-5)


def test_export_dir_that_is_a_file_is_refused(model, tmp_path):
  trained, _ = model
  blocker = tmp_path / "exports"
  blocker.write_text("not a directory")
  result = cli.run_script("run_classifier_mgpu.py", ["--output_dir=" + trained.output_dir,
                                                     "--export_dir=" + str(blocker)])
  cli.assert_one_line_error(result, "--export_dir=%s is a file" % blocker)


def dead_pid():
  """The pid of a process that has ended."""
  process = subprocess.Popen([sys.executable, "-c", ""])
  process.wait(timeout=60)
  return process.pid


def make_version(export_dir, name):
  os.makedirs(os.path.join(export_dir, name))
  with open(os.path.join(export_dir, name, "saved_model.pb"), "wb"):
    pass


def test_crash_leftovers_are_removed_and_live_exports_kept(tmp_path):
  export_dir = str(tmp_path)
  make_version(export_dir, "1")
  dead = ".tmp-export-%d" % dead_pid()
  live = ".tmp-export-%d" % os.getppid()  # pytest's parent runs for the whole test
  for name in (dead, live, "2", "3"):
    os.makedirs(os.path.join(export_dir, name))
  old = time.time() - 3600
  os.utime(os.path.join(export_dir, "2"), (old, old))  # a claim a crash left long ago
  export.remove_export_leftovers(export_dir)
  # "3" may be a claim in progress (just made): it stays until it is old.
  assert sorted(os.listdir(export_dir)) == sorted(["1", "3", live])


def test_the_newest_version_skips_numbered_directories_without_a_saved_model(tmp_path):
  export_dir = str(tmp_path)
  make_version(export_dir, "1")
  make_version(export_dir, "2")
  os.makedirs(os.path.join(export_dir, "3"))
  os.makedirs(os.path.join(export_dir, "10", "variables"))
  assert export_versions.newest_version_dir(export_dir) == os.path.join(export_dir, "2")
  empty = str(tmp_path / "empty")
  os.makedirs(os.path.join(empty, "1"))
  with pytest.raises(UsageError, match="holds no export"):
    export_versions.newest_version_dir(empty)


def saved_model_cli_command():
  """TF's saved_model_cli of this interpreter's virtualenv, else its module."""
  script = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
  if os.path.isfile(script):
    return [script]
  return [sys.executable, "-m", "tensorflow.python.tools.saved_model_cli"]


def test_saved_model_cli_run_gives_the_probabilities_of_do_predict(model, tmp_path):
  trained, export_dir = model
  features = featurize(trained, trained.texts)
  lengths = features.arrays["input_mask"].sum(axis=1)
  # The shortest text, the longest (truncated) and one between: one batch cut to its longest.
  rows = [int(np.argmin(lengths)), int(np.argmax(lengths))]
  rows.append(int(np.argmin(np.abs(lengths - (lengths[rows[0]] + lengths[rows[1]]) // 2))))
  assert len(set(lengths[rows])) == 3
  longest = lengths[rows].max()
  inputs_file = str(tmp_path / "inputs.npz")
  np.savez(inputs_file, **{name: features.arrays[name][rows, :longest]
                           for name in SIGNATURE_INPUTS})
  outdir = str(tmp_path / "outputs")
  # --inputs and --outdir (.npy files) rather than --input_exprs and parsing printed arrays:
  # the printout is numpy's repr, which wraps and rounds.
  result = subprocess.run(
      saved_model_cli_command() + [
          "run", "--dir", os.path.join(export_dir, "2"), "--tag_set", "serve",
          "--signature_def", "serving_default", "--outdir", outdir,
          "--inputs", ";".join("%s=%s[%s]" % (name, inputs_file, name)
                               for name in SIGNATURE_INPUTS)],
      env=cli.script_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      encoding="utf-8", errors="replace", timeout=cli.RUN_TIMEOUT_SECONDS)
  assert result.returncode == 0, result.stderr[-3000:]
  probabilities = np.load(os.path.join(outdir, "probabilities.npy"))
  np.testing.assert_allclose(probabilities, trained.probabilities[rows], atol=1e-5)
  expected_ids = np.argmax(trained.probabilities[rows], axis=1)
  np.testing.assert_array_equal(np.load(os.path.join(outdir, "label_id.npy")), expected_ids)
  labels = np.load(os.path.join(outdir, "label.npy"), allow_pickle=True)  # strings: objects
  assert [label.decode("utf-8") for label in labels] == [trained.labels[i] for i in expected_ids]
