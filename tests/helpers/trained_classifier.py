# coding=utf-8
"""A tiny classifier trained by run_classifier_mgpu.py, for the tests of the export, of
predict_text.py and of its HTTP endpoint.

The demo data (scripts/make_demo_data.py) cut to a few dozen examples and a BERT with
hidden size 16. The test split mixes the demo's short texts with over-long ones (several
texts joined), so truncation and batches of different lengths are exercised; a second
--do_predict run gives the reference probabilities of sentence pairs.
"""

import collections
import json
import os
import subprocess
import sys
import types

import numpy as np

from bert_mgpu.training import checkpoints
import cli
import numpy_bert
import reference_tokenizer

MAKE_DEMO_DATA = cli.script_path(os.path.join("scripts", "make_demo_data.py"))

NUM_TRAIN = 40
NUM_DEV = 10
NUM_SHORT_TEST = 20
NUM_LONG_TEST = 5
MAX_SEQ_LENGTH = 24

TINY_CONFIG = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
               "intermediate_size": 32, "max_position_embeddings": 64}

TrainedModel = collections.namedtuple(
    "TrainedModel", ["data_dir", "output_dir", "labels", "texts", "probabilities",
                     "pairs", "pair_probabilities", "vocab_file", "config_file"])
TrainedModel.__doc__ = """A trained output_dir and the --do_predict results it gave.

Fields:
  texts: the test texts, in file order; probabilities: their test_results.tsv rows.
  pairs: (text_a, text_b) tuples; pair_probabilities: their test_results.tsv rows.
"""


def read_lines(path):
  with open(path, encoding="utf-8", newline="") as f:
    return f.read().split("\n")[:-1]


def write_text(path, text):
  with open(path, "w", encoding="utf-8", newline="") as f:
    f.write(text)


def read_probabilities(path):
  """test_results.tsv as np.float64 [n, num_labels]."""
  return np.array([[float(p) for p in line.split("\t")] for line in read_lines(path)])


def _rows(path, count):
  lines = read_lines(path)
  assert lines[0] == "label\ttext_a"
  return [tuple(line.split("\t")) for line in lines[1:count + 1]]


def _test_texts(short_texts):
  """The short texts, then over-long ones made of several of them."""
  long_texts = ["".join(short_texts[i:i + 4]) for i in range(NUM_LONG_TEST)]
  return short_texts + long_texts


def write_init_checkpoint(config_dict, num_labels, path):
  """A BERT classifier with large random weights (numpy_bert.random_weights), so that
  different texts get clearly different probabilities after a short training."""
  rng = np.random.RandomState(3)
  values = numpy_bert.random_weights(types.SimpleNamespace(**config_dict), seed=3)
  values["output_weights"] = (rng.randn(num_labels, config_dict["hidden_size"]) *
                              0.5).astype(np.float32)
  values["output_bias"] = (rng.randn(num_labels) * 0.1).astype(np.float32)
  return checkpoints.write_arrays(values, path)


def run_classifier(flags, cwd=cli.REPO_DIR):
  result = cli.run_script("run_classifier_mgpu.py", cli.flag_list(flags), cwd=cwd)
  cli.assert_succeeded(result)
  return result


def train(root, export_dir=None):
  """Makes the data, trains with --do_train --do_eval --do_predict, predicts the pairs.

  Args:
    root: an empty directory.
    export_dir: passed as --export_dir to the training run, when given.

  Returns:
    TrainedModel.
  """
  data_dir = os.path.join(root, "data")
  subprocess.run([sys.executable, MAKE_DEMO_DATA, "--output_dir", data_dir], check=True,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
  train_rows = _rows(os.path.join(data_dir, "train.tsv"), NUM_TRAIN)
  dev_rows = _rows(os.path.join(data_dir, "dev.tsv"), NUM_DEV)
  texts = _test_texts([text for _, text in _rows(os.path.join(data_dir, "test.tsv"),
                                                 NUM_SHORT_TEST)])
  for name, rows in (("train.tsv", train_rows), ("dev.tsv", dev_rows)):
    write_text(os.path.join(data_dir, name),
               "label\ttext_a\n" + "".join("%s\t%s\n" % row for row in rows))
  write_text(os.path.join(data_dir, "test.tsv"), "text_a\n" + "".join(t + "\n" for t in texts))
  config_file = os.path.join(data_dir, "bert_config.json")
  with open(config_file, encoding="utf-8") as f:
    config = json.load(f)
  config.update(TINY_CONFIG)
  write_text(config_file, json.dumps(config, indent=2) + "\n")
  vocab_file = os.path.join(data_dir, "vocab.txt")
  labels = [line for line in read_lines(os.path.join(data_dir, "labels.txt")) if line]
  init_checkpoint = write_init_checkpoint(config, len(labels),
                                          os.path.join(root, "init", "bert_model.ckpt"))
  output_dir = os.path.join(root, "model")
  flags = collections.OrderedDict([
      ("task_name", "tsv"), ("data_dir", data_dir), ("vocab_file", vocab_file),
      ("bert_config_file", config_file), ("init_checkpoint", init_checkpoint),
      ("output_dir", output_dir), ("do_train", True),
      ("do_eval", True), ("do_predict", True), ("n_gpus", 1),
      ("max_seq_length", MAX_SEQ_LENGTH), ("train_batch_size", 8), ("learning_rate", 1e-3),
      ("num_train_epochs", 2), ("save_checkpoints_steps", 5), ("random_seed", 7)])
  run_classifier(collections.OrderedDict(flags, export_dir=export_dir))
  probabilities = read_probabilities(os.path.join(output_dir, "test_results.tsv"))

  # Pairs: the same model, a test file with a text_b column.
  pairs = list(zip(texts[:8], reversed(texts[:8])))
  pair_dir = os.path.join(root, "pair_data")
  os.mkdir(pair_dir)
  write_text(os.path.join(pair_dir, "test.tsv"),
             "text_a\ttext_b\n" + "".join("%s\t%s\n" % pair for pair in pairs))
  pair_flags = collections.OrderedDict(flags, data_dir=pair_dir, do_train=None, do_eval=None)
  run_classifier(pair_flags)
  pair_probabilities = read_probabilities(os.path.join(output_dir, "test_results.tsv"))
  assert read_lines(os.path.join(output_dir, "labels.txt")) == labels
  return TrainedModel(data_dir, output_dir, labels, texts, probabilities, pairs,
                      pair_probabilities, vocab_file, config_file)


def assert_rows_distinguishable(probabilities, tolerance):
  """Every two rows differ by more than `tolerance`: a test can see a reordering."""
  gaps = np.abs(probabilities[:, np.newaxis, :] - probabilities[np.newaxis, :, :]).max(axis=-1)
  np.fill_diagonal(gaps, np.inf)
  assert gaps.min() > tolerance, gaps.min()


def num_over_long(model, texts):
  """Texts with more WordPiece tokens than fit beside [CLS] and [SEP] (reference tokenizer)."""
  vocab = dict((token, i) for i, token in enumerate(read_lines(model.vocab_file)))
  return sum(len(reference_tokenizer.full_tokenize(t, vocab, True)) > MAX_SEQ_LENGTH - 2
             for t in texts)


def export(output_dir, export_dir):
  """Exports a trained output_dir alone (no data, vocab or config flags)."""
  run_classifier({"output_dir": output_dir, "export_dir": export_dir})


def train_and_export(root):
  """train(root), then an export of it alone: (TrainedModel, the export's base directory)."""
  trained = train(root)
  export_dir = os.path.join(root, "exports")
  export(trained.output_dir, export_dir)
  return trained, export_dir
