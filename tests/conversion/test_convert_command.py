# coding=utf-8
"""convert_checkpoint.py on the command line: its flags, its one-line refusals (with nothing
written), its log of what went beside the model or was dropped, the error without the
safetensors package; and the converted directories in our scripts: predict_text.py on a
--keep_head classifier, run_classifier_mgpu.py --init_checkpoint on a default conversion."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import classifier_runs
import cli
import conversion_models
from bert_mgpu.transformers_format import to_tensorflow
from bert_mgpu.transformers_format import to_transformers

SCRIPT = "convert_checkpoint.py"


def convert(**flags):
  return cli.run_script(SCRIPT, cli.flag_list(flags))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
  """Tiny 1-layer models in our format (classifier, NER with CRF, SQuAD) and the
  classifier's transformers export."""
  base = tmp_path_factory.mktemp("command")
  result = {kind: conversion_models.write_model(str(base / kind), kind, num_layers=1)
            for kind in ("classifier", "ner_crf", "squad")}
  result["hf_classifier"] = str(base / "hf_classifier")
  to_transformers.convert(result["classifier"].directory, result["hf_classifier"])
  return result


def assert_nothing_written(output_dir, before=None):
  """output_dir is absent (before None) or holds exactly the files `before`."""
  if before is None:
    assert not os.path.exists(output_dir)
  else:
    assert sorted(os.listdir(output_dir)) == before
  parent = os.path.dirname(os.path.abspath(output_dir))
  assert not [name for name in os.listdir(parent) if name.endswith((".new-tmp", ".old-tmp"))]


# ---------------------------------------------------------------------------
# 1. Refusals on the command line: one line, nothing written
# ---------------------------------------------------------------------------

def test_output_not_empty(models, tmp_path):
  output_dir = tmp_path / "out"
  output_dir.mkdir()
  (output_dir / "mine.txt").write_text("kept")
  result = convert(to="transformers", input=models["classifier"].directory,
                   output=str(output_dir))
  cli.assert_one_line_error(result, "--output=%s is not empty" % output_dir)
  assert_nothing_written(str(output_dir), ["mine.txt"])


def test_input_missing(tmp_path):
  output_dir = str(tmp_path / "out")
  result = convert(to="tensorflow", output=output_dir)
  cli.assert_one_line_error(result, "--input is required")
  assert_nothing_written(output_dir)


def test_squad_output_dir_needs_bert_config_file(models, tmp_path):
  output_dir = str(tmp_path / "out")
  result = convert(to="transformers", input=models["squad"].directory, output=output_dir)
  cli.assert_one_line_error(result, "bert_config.json", "--bert_config_file")
  assert_nothing_written(output_dir)


def test_keep_head_is_for_the_other_direction(models, tmp_path):
  output_dir = str(tmp_path / "out")
  result = convert(to="transformers", input=models["classifier"].directory,
                   output=output_dir, keep_head=True)
  cli.assert_one_line_error(result, "--keep_head does not apply to --to=transformers")
  assert_nothing_written(output_dir)


def test_max_seq_length_needs_keep_head(models, tmp_path):
  output_dir = str(tmp_path / "out")
  result = convert(to="tensorflow", input=models["hf_classifier"], output=output_dir,
                   max_seq_length=32)
  cli.assert_one_line_error(result, "--max_seq_length", "--keep_head")
  assert_nothing_written(output_dir)


def test_roberta_is_refused_and_an_empty_output_stays_empty(models, tmp_path):
  hf = str(tmp_path / "hf")
  shutil.copytree(models["hf_classifier"], hf)
  config = conversion_models.transformers_config(models["classifier"].config,
                                                 "RobertaForSequenceClassification",
                                                 model_type="roberta")
  conversion_models.write_json(os.path.join(hf, "config.json"), config)
  output_dir = tmp_path / "out"
  output_dir.mkdir()
  result = convert(to="tensorflow", input=hf, output=str(output_dir))
  cli.assert_one_line_error(result, "model_type", "roberta")
  assert_nothing_written(str(output_dir), [])


WITHOUT_SAFETENSORS = """
import runpy, sys
sys.modules["safetensors"] = None  # `import safetensors` now fails
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.parametrize("direction", ["transformers", "tensorflow"])
def test_without_safetensors_says_how_to_install_it(models, tmp_path, direction):
  output_dir = str(tmp_path / "out")
  source = (models["classifier"].directory if direction == "transformers" else
            models["hf_classifier"])
  result = subprocess.run(
      [sys.executable, "-c", WITHOUT_SAFETENSORS, cli.script_path(SCRIPT), "--to=" + direction,
       "--input=" + source, "--output=" + output_dir],
      cwd=cli.REPO_DIR, env=cli.script_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      encoding="utf-8", errors="replace", timeout=cli.RUN_TIMEOUT_SECONDS)
  cli.assert_one_line_error(result, "safetensors", "pip install")
  assert_nothing_written(output_dir)


# ---------------------------------------------------------------------------
# 2. What the log says
# ---------------------------------------------------------------------------

def test_logs_the_files_beside_and_the_heads_dropped(models, tmp_path):
  hf = str(tmp_path / "hf")
  result = convert(to="transformers", input=models["ner_crf"].directory, output=hf)
  cli.assert_succeeded(result)
  assert "BertForTokenClassification" in result.stderr
  beside = [line for line in result.stderr.splitlines() if "Written beside" in line]
  assert len(beside) == 1 and "crf_transitions.json" in beside[0], result.stderr[-2000:]
  back = str(tmp_path / "back")
  result = convert(to="tensorflow", input=hf, output=back)
  cli.assert_succeeded(result)
  dropped = [line for line in result.stderr.splitlines() if "Dropped" in line]
  assert len(dropped) == 1, result.stderr[-2000:]
  assert "classifier.weight" in dropped[0] and "--keep_head" in dropped[0]
  assert not os.path.exists(os.path.join(back, "labels.txt"))


# ---------------------------------------------------------------------------
# 3. The converted directories in our scripts
# ---------------------------------------------------------------------------

TEXTS = ["北京马拉松吸引了跑者", "某银行发行了债券", "知名演员主演的电影上午上映。"]


def predicted_probabilities(output_dir, tmp_path, name):
  input_file = str(tmp_path / "texts.txt")
  conversion_models.write_text(input_file, "".join(text + "\n" for text in TEXTS))
  output_file = str(tmp_path / name)
  result = cli.run_script("predict_text.py", ["--output_dir=" + output_dir,
                                              "--input_file=" + input_file,
                                              "--output_file=" + output_file])
  cli.assert_succeeded(result)
  rows = [line.split("\t") for line in classifier_runs.read_lines(output_file)]
  assert len(rows) == len(TEXTS)
  return np.array([[float(p) for p in row[2:]] for row in rows])


def test_kept_classifier_predicts_as_the_original(models, tmp_path):
  back = str(tmp_path / "back")
  to_tensorflow.convert(models["hf_classifier"], back, keep_head=True)
  original = predicted_probabilities(models["classifier"].directory, tmp_path, "ours.tsv")
  converted = predicted_probabilities(back, tmp_path, "back.tsv")
  assert original.shape == (len(TEXTS), len(conversion_models.LABELS))
  np.testing.assert_allclose(converted, original, rtol=0, atol=1e-6)


def test_default_conversion_is_an_init_checkpoint(models, demo_data, tmp_path):
  """A 5-label classifier starts from the 3-label classifier's converted BERT: its head is
  dropped, so no shape error; with a learning rate of ~0 BERT stays the converted one."""
  back = str(tmp_path / "back")
  to_tensorflow.convert(models["hf_classifier"], back)
  output_dir = str(tmp_path / "run")
  flags = classifier_runs.base_flags(
      demo_data, output_dir, init_checkpoint=os.path.join(back, "bert_model.ckpt"),
      bert_config_file=os.path.join(back, "bert_config.json"),
      vocab_file=os.path.join(back, "vocab.txt"), do_eval=False, do_predict=False,
      n_gpus=1, num_train_epochs=1, train_batch_size=16, learning_rate=1e-12)
  cli.assert_succeeded(classifier_runs.run_classifier(flags))
  trained = tf.train.load_checkpoint(tf.train.latest_checkpoint(output_dir))
  assert trained.get_tensor("output_weights").shape == (len(demo_data.labels), 16)
  name = "bert/encoder/layer_0/intermediate/dense/kernel"
  np.testing.assert_allclose(trained.get_tensor(name), models["classifier"].arrays[name],
                             atol=1e-6)
