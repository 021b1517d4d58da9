# coding=utf-8
"""README's first screen runs as written: its command block, on a TSV folder and a model folder
laid out as the README says (Google's file names), on 2 towers (logical CPU devices here)."""

import json
import os
import re
import shutil
import subprocess
import sys

import tensorflow.compat.v1 as tf

import cli
from classifier_runs import read_lines
import modeling


def first_screen_command():
  """The bash block after README's "**The run**" paragraph."""
  with open(os.path.join(cli.REPO_DIR, "README.md"), encoding="utf-8") as f:
    readme = f.read()
  match = re.search(r"\*\*The run\*\*.*?```bash\n(.*?)```", readme, re.S)
  assert match, "README has no **The run** command block"
  return match.group(1)


def write_google_model_dir(bert_dir, demo_data):
  """bert_config.json, vocab.txt and bert_model.ckpt.* as Google's zip holds them (random
  weights of the demo's tiny BERT, with room for --max_seq_length=128)."""
  os.makedirs(bert_dir)
  shutil.copy(demo_data.vocab_file, os.path.join(bert_dir, "vocab.txt"))
  config = dict(demo_data.config, max_position_embeddings=128)
  with open(os.path.join(bert_dir, "bert_config.json"), "w", encoding="utf-8") as f:
    json.dump(config, f)
  with tf.Graph().as_default():
    ids = tf.zeros([1, 8], tf.int32)
    modeling.BertModel(modeling.BertConfig.from_dict(config), False, ids)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      tf.train.Saver().save(sess, os.path.join(bert_dir, "bert_model.ckpt"))


def test_the_first_screen_command_trains_on_two_towers_and_writes_predict_txt(demo_data,
                                                                               tmp_path):
  command = first_screen_command()
  assert "--n_gpus=2" in command and "CUDA_VISIBLE_DEVICES=0,1" in command
  bert_dir = str(tmp_path / "chinese_L-12_H-768_A-12")
  write_google_model_dir(bert_dir, demo_data)
  output_dir = str(tmp_path / "out")
  bin_dir = tmp_path / "bin"  # `python` runs the interpreter of the tests (its virtualenv)
  bin_dir.mkdir()
  python = bin_dir / "python"
  python.write_text(u'#!/bin/sh\nexec "%s" "$@"\n' % sys.executable)
  python.chmod(0o755)
  env = dict(cli.script_env(), PATH=str(bin_dir) + os.pathsep + os.environ["PATH"],
             DATA_DIR=demo_data.data_dir, BERT_DIR=bert_dir, OUTPUT_DIR=output_dir)
  result = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=cli.REPO_DIR,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=cli.RUN_TIMEOUT_SECONDS)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "2 tower(s)" in result.stderr
  predicted = read_lines(os.path.join(output_dir, "predict.txt"))
  assert len(predicted) == len(demo_data.test)  # every test.tsv line, in order
  assert set(predicted) <= set(demo_data.labels)  # label names, as README says
  with open(os.path.join(output_dir, "eval_results.txt"), encoding="utf-8") as f:
    assert "eval_accuracy = " in f.read()
  for name in ("best", "labels.txt", "eval_report.txt"):
    assert os.path.exists(os.path.join(output_dir, name)), name
