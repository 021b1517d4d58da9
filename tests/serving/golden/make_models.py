# coding=utf-8
"""Regenerates the tiny trained models of tests/serving/test_golden_outputs.py (models/).

Not a test and not run by one: the test uses the committed output_dirs as they are, since
training is not bit-for-bit the same across TensorFlow versions. This script records where
they came from. It trains each of them with the real command (`--do_train`) on data made
by scripts/make_demo_data.py and scripts/make_ner_data.py:

  pair         run_classifier_mgpu.py, sentence pairs (text_a, text_b) of the demo texts,
               labelled 相同 when both come from the same demo class, else 不同
  multi_label  run_classifier_mgpu.py --multi_label --multi_label_threshold=tuned: one or
               two demo texts joined, labelled with their classes (some with none)
  windows      run_classifier_mgpu.py --long_text=windows: three texts of a class joined
  ner          run_ner_mgpu.py on make_ner_data.py's CLUENER sentences (softmax head)
  ner_crf      the same with --use_crf

All share one vocab (make_demo_data's rules over the training texts) and a BERT with hidden
size 16, 2 layers, 2 heads. Each models/<name>/ keeps what predict_text.py and the export
read: the checkpoint (without the Adam slots, which would triple its size), `checkpoint`,
vocab.txt, bert_config.json, labels.txt, model_settings.json and, for multi_label,
thresholds.json.

After regenerating, record the goldens again under each TensorFlow (the test's docstring).

Usage (from the repo, with the TF 2.x virtualenv; name models to regenerate only those):
  .venv-tf2/bin/python tests/serving/golden/make_models.py [pair multi_label ...]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

GOLDEN_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(GOLDEN_DIR)))
MODELS_DIR = os.path.join(GOLDEN_DIR, "models")
for path in (REPO_DIR, os.path.join(REPO_DIR, "scripts"),
             os.path.join(REPO_DIR, "tests", "helpers")):
  sys.path.insert(0, path)

# pylint: disable=wrong-import-position
import numpy as np

import make_demo_data
import numpy_bert
# pylint: enable=wrong-import-position

NUM_TEXTS = 60  # demo training texts the classifiers' data are made of
NUM_NER_SENTENCES = 120
CONFIG = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
          "hidden_dropout_prob": 0.1, "hidden_size": 16, "initializer_range": 0.02,
          "intermediate_size": 32, "max_position_embeddings": 64, "num_attention_heads": 2,
          "num_hidden_layers": 2, "type_vocab_size": 2}
# The files a trained output_dir keeps for serving, beside its checkpoint.
MODEL_FILES = ("vocab.txt", "bert_config.json", "labels.txt", "model_settings.json",
               "thresholds.json")
SLOT_SUFFIXES = ("/adam_m", "/adam_v")
COMMON_FLAGS = ["--do_train", "--n_gpus=1", "--train_batch_size=8",
                "--save_checkpoints_steps=100000", "--log_steps=100", "--random_seed=7"]


def write_text(path, text):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8", newline="") as f:
    f.write(text)


def run(args):
  print("running", " ".join(os.path.basename(a) if a.endswith(".py") else a for a in args[:2]),
        flush=True)
  subprocess.run([sys.executable] + args, cwd=REPO_DIR, check=True, timeout=1200,
                 env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))


def demo_rows(work_dir):
  """(label, text) of the first NUM_TEXTS demo training examples."""
  demo_dir = os.path.join(work_dir, "demo")
  run([os.path.join(REPO_DIR, "scripts", "make_demo_data.py"), "--output_dir", demo_dir])
  with open(os.path.join(demo_dir, "train.tsv"), encoding="utf-8") as f:
    lines = f.read().split("\n")[1:NUM_TEXTS + 1]
  return [tuple(line.split("\t")) for line in lines]


def ner_sentences(work_dir):
  """The first NUM_NER_SENTENCES lines of make_ner_data.py's CLUENER train.json."""
  ner_dir = os.path.join(work_dir, "ner")
  run([os.path.join(REPO_DIR, "scripts", "make_ner_data.py"), "--output_dir", ner_dir])
  with open(os.path.join(ner_dir, "cluener", "train.json"), encoding="utf-8") as f:
    return f.read().split("\n")[:NUM_NER_SENTENCES]


def tsv(header, rows):
  return header + "\n" + "".join("\t".join(row) + "\n" for row in rows)


def classifier_data(rows):
  """{model name: {file name: text}} of the three classifiers' data directories."""
  n = len(rows)
  pairs = []
  for i, (label_a, text_a) in enumerate(rows):
    # Even rows: the next text of the same class; odd rows: the next one of another.
    j = next(j % n for j in range(i + 1, i + n) if (rows[j % n][0] == label_a) == (i % 2 == 0))
    pairs.append(("相同" if i % 2 == 0 else "不同", text_a, rows[j][1]))
  multi = []
  for i in range(n):
    (label_a, text_a), (label_b, text_b) = rows[i], rows[(i + 11) % n]
    if i % 10 == 9:
      multi.append(("", text_a[:6]))
    elif i % 3 == 0:
      multi.append((label_a, text_a))
    else:
      multi.append((",".join(sorted({label_a, label_b})), text_a + text_b))
  by_class = {}
  for label, text in rows:
    by_class.setdefault(label, []).append(text)
  windows = [(label, "".join(texts[i:i + 3])) for label, texts in sorted(by_class.items())
             for i in range(0, len(texts), 2)]
  return {
      "pair": {"train.tsv": tsv("label\ttext_a\ttext_b", pairs)},
      "multi_label": {"train.tsv": tsv("label\ttext_a", multi[:48]),
                      "dev.tsv": tsv("label\ttext_a", multi[48:])},
      "windows": {"train.tsv": tsv("label\ttext_a", windows)},
  }


# The classifiers: a short training from large random weights (their heads too), so that
# texts get clearly different probabilities; the NER models learn some entities from
# scratch (the config's initializer).
CLASSIFIER_FLAGS = ["--task_name=tsv", "--learning_rate=1e-3", "--num_train_epochs=2"]
NER_FLAGS = ["--max_seq_length=24", "--doc_stride=8", "--learning_rate=5e-3",
             "--num_train_epochs=4"]
# name: (script, its flags, the head's variable scope and label count in the init checkpoint,
# or None for no init checkpoint)
RUNS = {
    # 1.5 epochs: neither label yet wins every test pair.
    "pair": ("run_classifier_mgpu.py", CLASSIFIER_FLAGS + [
        "--max_seq_length=24", "--num_train_epochs=1.5"], ("", 2)),
    "multi_label": ("run_classifier_mgpu.py", CLASSIFIER_FLAGS + [
        "--max_seq_length=24", "--multi_label", "--do_eval", "--multi_label_threshold=tuned"],
                    ("multi_label/", 5)),
    "windows": ("run_classifier_mgpu.py", CLASSIFIER_FLAGS + [
        "--max_seq_length=16", "--long_text=windows", "--doc_stride=8", "--max_windows=4"],
                ("", 5)),
    "ner": ("run_ner_mgpu.py", NER_FLAGS, None),
    "ner_crf": ("run_ner_mgpu.py", NER_FLAGS + ["--use_crf"], None),
}


def write_init_checkpoint(config, head, path):
  """BERT's variables drawn by numpy_bert.random_weights (0.3 standard deviation), and a
  classifier head (scope, number of labels) drawn with 0.5."""
  from bert_mgpu.training import checkpoints  # pylint: disable=g-import-not-at-top
  values = numpy_bert.random_weights(argparse.Namespace(**config), seed=3)
  scope, num_labels = head
  rng = np.random.RandomState(5)
  values[scope + "output_weights"] = (
      rng.randn(num_labels, config["hidden_size"]) * 0.5).astype(np.float32)
  values[scope + "output_bias"] = (rng.randn(num_labels) * 0.1).astype(np.float32)
  return checkpoints.write_arrays(values, path)


def strip_checkpoint(output_dir, target_dir):
  """Writes the checkpoint predict_text.py would use, without the Adam slots, to
  target_dir/model.ckpt-<step>, with its `checkpoint` file."""
  import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top
  from bert_mgpu.training import checkpoints  # pylint: disable=g-import-not-at-top
  source, _ = checkpoints.checkpoint_for_inference(output_dir, None,
                                                   best_subdir=checkpoints.BEST_SUBDIR)
  reader = tf.train.load_checkpoint(source)
  values = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if not name.endswith(SLOT_SUFFIXES)}
  prefix = os.path.join(target_dir, os.path.basename(source))
  checkpoints.write_arrays(values, prefix)
  # The `checkpoint` file with a relative name, so that the copy works anywhere.
  write_text(os.path.join(target_dir, "checkpoint"),
             'model_checkpoint_path: "%s"\nall_model_checkpoint_paths: "%s"\n' %
             ((os.path.basename(prefix),) * 2))


def main(names):
  work_dir = tempfile.mkdtemp(prefix="golden_models")
  rows = demo_rows(work_dir)
  sentences = ner_sentences(work_dir)
  texts = [text for _, text in rows] + [json.loads(line)["text"] for line in sentences]
  vocab = make_demo_data.build_vocab(texts)
  vocab_file = os.path.join(work_dir, "vocab.txt")
  write_text(vocab_file, "".join(token + "\n" for token in vocab))
  config_file = os.path.join(work_dir, "bert_config.json")
  config = dict(CONFIG, vocab_size=len(vocab))
  write_text(config_file, json.dumps(config, indent=2, sort_keys=True) + "\n")
  data = classifier_data(rows)
  data["ner"] = data["ner_crf"] = {"train.json": "".join(line + "\n" for line in sentences)}
  for name in names:
    script, flags, head = RUNS[name]
    data_dir = os.path.join(work_dir, "data", name)
    for file_name, text in data[name].items():
      write_text(os.path.join(data_dir, file_name), text)
    output_dir = os.path.join(work_dir, "output", name)
    if head is not None:
      flags = flags + ["--init_checkpoint=" + write_init_checkpoint(
          config, head, os.path.join(work_dir, "init", name, "bert_model.ckpt"))]
    run([os.path.join(REPO_DIR, script), "--data_dir=" + data_dir,
         "--vocab_file=" + vocab_file, "--bert_config_file=" + config_file,
         "--output_dir=" + output_dir] + COMMON_FLAGS + flags)
    target = os.path.join(MODELS_DIR, name)
    if os.path.isdir(target):
      shutil.rmtree(target)
    os.makedirs(target)
    for file_name in MODEL_FILES:
      if os.path.exists(os.path.join(output_dir, file_name)):
        shutil.copy(os.path.join(output_dir, file_name), target)
    strip_checkpoint(output_dir, target)
  shutil.rmtree(work_dir)
  for root, _, files in sorted(os.walk(MODELS_DIR)):
    for file_name in sorted(files):
      path = os.path.join(root, file_name)
      print("%8d %s" % (os.path.getsize(path), os.path.relpath(path, REPO_DIR)))


if __name__ == "__main__":
  main(sys.argv[1:] or list(RUNS))
