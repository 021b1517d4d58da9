# coding=utf-8
"""run_classifier_mgpu.py --literal_special_tokens: blanked texts ([MASK] written in the
text) are featurized with [MASK] as one token, the setting reaches the feature cache key
and model_settings.json, and predict_text.py reads texts the way training did."""

import glob
import json
import os
import subprocess
import sys

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import feature_cache
from bert_mgpu.classifier import input_examples
import cli
from tiny_task_files import write_model_files, write_text

# A pair-free task whose texts hold literal [MASK] tokens, as bert-ad's blanked copy does.
ROWS = [(u"好", u"这家店的[MASK]很好吃"), (u"坏", u"这家店的[MASK]很难吃"),
        (u"好", u"服务[MASK]周到"), (u"坏", u"服务[MASK]很差")] * 6


def tsv(rows):
  return u"label\ttext_a\n" + u"".join(u"%s\t%s\n" % row for row in rows)


def test_the_setting_changes_the_cache_key_only_when_set(tmp_path):
  vocab, _ = write_model_files(str(tmp_path), [text for _, text in ROWS])
  data = write_text(str(tmp_path / "train.tsv"), tsv(ROWS))
  key = lambda **flag: feature_cache.features_cache_key(  # pylint: disable=g-long-lambda
      "train", [data], [u"坏", u"好"], 16, vocab, True, "tsv",
      options=input_examples.FeatureOptions(**flag))
  assert key() == key(literal_special_tokens=False)
  assert key() != key(literal_special_tokens=True)


def test_blanked_texts_train_and_predict_with_mask_as_one_token(tmp_path):
  data_dir = str(tmp_path / "data")
  vocab_file, config_file = write_model_files(data_dir, [text for _, text in ROWS])
  for split in ("train", "dev", "test"):
    write_text(os.path.join(data_dir, split + ".tsv"), tsv(ROWS))
  output_dir = str(tmp_path / "out")
  cli.assert_succeeded(cli.run_script("run_classifier_mgpu.py", cli.flag_list({
      "task_name": "tsv", "data_dir": data_dir, "vocab_file": vocab_file,
      "bert_config_file": config_file, "output_dir": output_dir, "do_train": True,
      "do_predict": True, "literal_special_tokens": True, "max_seq_length": 16,
      "train_batch_size": 8, "num_train_epochs": 1, "n_gpus": 2})))
  with open(os.path.join(output_dir, "model_settings.json")) as f:
    assert json.load(f)["literal_special_tokens"] is True
  mask_id = [line.rstrip("\n") for line in open(vocab_file, encoding="utf-8")].index("[MASK]")
  train_cache = glob.glob(os.path.join(output_dir, "train-*.tf_record"))[0]
  record = next(tf.python_io.tf_record_iterator(train_cache))
  input_ids = list(tf.train.Example.FromString(record).features.feature[
      "input_ids"].int64_list.value)
  # [CLS] 这 家 店 的 [MASK] 很 好 吃 [SEP]: one id for the blank, not "[", "mask", "]".
  assert input_ids.count(mask_id) == 1 and input_ids[5] == mask_id, input_ids
  # predict_text.py reads the setting from output_dir and gives the run's probabilities.
  texts = u"".join(text + u"\n" for _, text in ROWS).encode("utf-8")
  result = subprocess.run(
      [sys.executable, cli.script_path("predict_text.py"), "--output_dir=" + output_dir,
       "--n_gpus=2"], input=texts, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      env=cli.script_env(), cwd=cli.REPO_DIR, timeout=cli.RUN_TIMEOUT_SECONDS)
  assert result.returncode == 0, result.stderr.decode("utf-8", "replace")[-3000:]
  served = np.array([[float(x) for x in line.split("\t")[2:]]
                     for line in result.stdout.decode("utf-8").splitlines()])
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    predicted = np.array([[float(x) for x in line.split("\t")] for line in f])
  np.testing.assert_allclose(served, predicted, atol=1e-5)
