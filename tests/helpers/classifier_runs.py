# coding=utf-8
"""run_classifier_mgpu.py runs on the demo data, for the command-line tests of the
classifier: the data (scripts/make_demo_data.py cut to NUM_TRAIN / NUM_DEV / NUM_TEST
examples, with a BERT of hidden size 16), the flags of a train + eval + predict run, and the
script run to the end.

No TensorFlow import: conftest.py builds the demo_data fixture from here.
"""

import collections
import json
import os
import subprocess
import sys

import cli
from cli import flag_list

MAKE_DEMO_DATA = cli.script_path(os.path.join("scripts", "make_demo_data.py"))

# Examples kept from each split of the demo data. 37 test examples with 2 towers x 8
# leave a tail batch of 5 (one tower gets 3 padding rows, the other only padding);
# 21 dev examples leave a tail of 5 as well.
NUM_TRAIN = 50
NUM_DEV = 21
NUM_TEST = 37
MAX_SEQ_LENGTH = 32

# Overrides of the demo's bert_config.json: a BERT that trains in milliseconds per step.
TINY_CONFIG = {
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 32,
    "max_position_embeddings": 64,
}

DemoData = collections.namedtuple(
    "DemoData", ["data_dir", "vocab_file", "config_file", "labels", "train", "dev", "test",
                 "config"])


def read_lines(path):
  """The lines of a UTF-8 file, without line ends."""
  with open(path, "r", encoding="utf-8", newline="") as f:
    return f.read().split("\n")[:-1]


def write_text(path, text):
  with open(path, "w", encoding="utf-8", newline="") as f:
    f.write(text)


def write_json(path, value):
  write_text(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def read_tsv_examples(path):
  """(label, text) rows of a `label<TAB>text_a` file with a header."""
  lines = read_lines(path)
  assert lines[0] == "label\ttext_a"
  return [tuple(line.split("\t")) for line in lines[1:]]


def make_demo_data(data_dir):
  """The demo data cut to NUM_TRAIN / NUM_DEV / NUM_TEST examples, with a tiny config,
  written to data_dir; returns its DemoData."""
  subprocess.run([sys.executable, MAKE_DEMO_DATA, "--output_dir", data_dir], check=True,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
  rows = {}
  for split, count in (("train", NUM_TRAIN), ("dev", NUM_DEV), ("test", NUM_TEST)):
    path = os.path.join(data_dir, split + ".tsv")
    rows[split] = read_tsv_examples(path)[:count]
    assert len(rows[split]) == count
    write_text(path, "label\ttext_a\n" + "".join("%s\t%s\n" % row for row in rows[split]))
  config_file = os.path.join(data_dir, "bert_config.json")
  with open(config_file, encoding="utf-8") as f:
    config = json.load(f)
  config.update(TINY_CONFIG)
  write_json(config_file, config)
  vocab_file = os.path.join(data_dir, "vocab.txt")
  assert config["vocab_size"] == len(read_lines(vocab_file))
  labels = [line for line in read_lines(os.path.join(data_dir, "labels.txt")) if line]
  return DemoData(data_dir, vocab_file, config_file, labels, rows["train"], rows["dev"],
                  rows["test"], config)


def run_classifier(flags, cwd=cli.REPO_DIR):
  """Runs the script to the end; returns the CompletedProcess (text stdout/stderr)."""
  return cli.run_script("run_classifier_mgpu.py", flag_list(flags), cwd=cwd)


def base_flags(data, output_dir, **overrides):
  """The flags of a train + eval + predict run on `data` (a DemoData), then overrides."""
  flags = collections.OrderedDict([
      ("task_name", "tsv"),
      ("data_dir", data.data_dir),
      ("vocab_file", data.vocab_file),
      ("bert_config_file", data.config_file),
      ("output_dir", output_dir),
      ("do_train", True),
      ("do_eval", True),
      ("do_predict", True),
      ("n_gpus", 2),
      ("max_seq_length", MAX_SEQ_LENGTH),
      ("train_batch_size", 4),
      ("eval_batch_size", 8),
      ("predict_batch_size", 8),
      ("learning_rate", 5e-3),
      ("num_train_epochs", 2),
      ("save_checkpoints_steps", 5),
      ("log_steps", 1),
  ])
  flags.update(overrides)
  return flags


def checkpoint_step(path):
  return int(path.rsplit("-", 1)[1])
