# coding=utf-8
"""Scores classifier runs of --ema_decay from their weight averages and from their raw weights
(#60), and checks that two runs' raw weights are the same.

Each OUTPUT_DIR is a run_classifier_mgpu.py --do_train --do_predict output_dir; it is scored
from its last checkpoint (the model.ckpt-N its `checkpoint` file names) on the test set
(--gold, a headed TSV with `label` and `text_a` columns, the test.tsv the run predicted):

  averaged  the run's own predict.txt against the gold labels: written from the weight
            averages when the run had --ema_decay. predict.txt comes from best/ when the run
            kept one; `predict_step` says which step that is, and `predict_is_last` whether it
            is the last checkpoint (so with --save_checkpoints_steps above the run's steps).
  plain     the raw weights: a copy of the last checkpoint holding only its plain-named
            variables (no `<name>/ExponentialMovingAverage`, nothing under
            `weight_averages/`), written with checkpoints.write_arrays into
            OUTPUT_DIR/raw_weights/ beside copies of the run's model files, predicted by
            predict_text.py --output_dir on the gold file's texts, and scored. A run without
            averages has no other weights: its plain score is predict.txt's.

--check_averaged also predicts the whole last checkpoint (averages included) with
predict_text.py and reports the share of test texts on which it agrees with predict.txt: 1.0
says that predict_text.py and the run's own prediction see the same model and texts.

Prints one JSON line per OUTPUT_DIR: the step, the two accuracies, their difference, the
share of texts where they agree, the distance of the averages from the raw weights (relative
L2 over the trained variables), the run's dev accuracy (eval_results.txt). --table then
prints a markdown table over runs named <config>_seed<N> (their directory's base name), one
row per config. The plain predictions are kept (raw_weights/score.json) and reused while the
last checkpoint stays the same; --force redoes them.

--same_path DIR1 DIR2 instead compares two runs' last checkpoints: the largest absolute
difference over the trained variables' raw weights (the plain names that have an average in
either checkpoint; without averages in both, every plain name but the optimizer's slots and
global_step), and over every plain-named variable the two share (the optimizer's slots
included); the training path should not depend on the averages' settings, so a plain run and
an --ema_decay run of the same seed should differ by 0.

  python benchmarks/ema_effect.py --gold $D/test.tsv --table runs/plain_seed1 runs/ema_seed1
  python benchmarks/ema_effect.py --same_path runs/plain_seed1 runs/ema_seed1
"""

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import tensorflow.compat.v1 as tf  # pylint: disable=wrong-import-position

from bert_mgpu.training import checkpoints  # pylint: disable=wrong-import-position
from bert_mgpu.training import weight_averages  # pylint: disable=wrong-import-position
from bert_mgpu.transformers_format import to_transformers  # pylint: disable=wrong-import-position

AVERAGE_SUFFIX = weight_averages.SUFFIX
MODEL_FILES = ("bert_config.json", "vocab.txt", "labels.txt", "model_settings.json")
RAW_SUBDIR = "raw_weights"
SCORE_FILE = "score.json"


is_average = weight_averages.is_average


def is_plain(name):
  """Whether a checkpoint name is a raw variable: not an average, not the averages' record."""
  return not is_average(name) and not weight_averages.is_record(name)


def last_checkpoint(output_dir):
  """The checkpoint output_dir's `checkpoint` file names (its last); exits when none."""
  path = tf.train.latest_checkpoint(output_dir)
  if not path:
    sys.exit("%s: no checkpoint file naming a checkpoint; train it first" % output_dir)
  return path


def step_of(checkpoint):
  match = re.search(r"-(\d+)$", checkpoint or "")
  return int(match.group(1)) if match else None


def trained_names(*name_sets):
  """The names of the trained variables in the given checkpoints' name sets: those with an
  average in any of them; when none has averages, the plain names that are not optimizer
  state."""
  averaged = set(name[:-len(AVERAGE_SUFFIX)] for names in name_sets for name in names
                 if is_average(name))
  if averaged:
    return averaged
  return set(name for names in name_sets for name in names
             if is_plain(name) and not to_transformers.is_training_state(name))


def read_gold(path):
  """(labels, texts) of a headed TSV with `label` and `text_a` columns."""
  with open(path, encoding="utf-8-sig") as f:
    rows = [line.rstrip("\r\n").split("\t") for line in f if line.strip()]
  header = [name.strip().lower() for name in rows[0]]
  if "label" not in header or "text_a" not in header or "text_b" in header:
    sys.exit("%s: needs a header naming label and text_a (and no text_b)" % path)
  label, text = header.index("label"), header.index("text_a")
  return [row[label] for row in rows[1:]], [row[text] for row in rows[1:]]


def read_lines(path):
  with open(path, encoding="utf-8") as f:
    return [line.rstrip("\r\n") for line in f]


def accuracy(predicted, gold, source):
  """The share of predicted labels equal to the gold ones; exits on a length mismatch."""
  if len(predicted) != len(gold):
    sys.exit("%s has %d predictions for %d gold labels" % (source, len(predicted), len(gold)))
  return round(sum(p == g for p, g in zip(predicted, gold)) / float(len(gold)), 4)


def agreement(first, second):
  return round(sum(a == b for a, b in zip(first, second)) / float(max(1, len(first))), 4)


def dev_accuracy(output_dir):
  """eval_results.txt's eval_accuracy, or None."""
  path = os.path.join(output_dir, "eval_results.txt")
  if not os.path.isfile(path):
    return None
  for line in read_lines(path):
    key, _, value = line.partition("=")
    if key.strip() == "eval_accuracy":
      return round(float(value), 4)
  return None


def averages_distance(reader):
  """||averages - raw weights|| / ||raw weights|| over the variables that have averages
  (L2 over all of them together), or None without averages."""
  names = trained_names(reader.get_variable_to_shape_map())
  if not any(reader.has_tensor(name + AVERAGE_SUFFIX) for name in names):
    return None
  difference = norm = 0.0
  for name in names:
    raw = reader.get_tensor(name).astype(np.float64)
    average = reader.get_tensor(name + AVERAGE_SUFFIX).astype(np.float64)
    difference += float(np.sum((average - raw) ** 2))
    norm += float(np.sum(raw ** 2))
  return round((difference / max(norm, 1e-30)) ** 0.5, 6)


def copy_model(output_dir, directory):
  """A fresh `directory` holding copies of output_dir's model files (MODEL_FILES)."""
  if os.path.isdir(directory):
    shutil.rmtree(directory)
  os.makedirs(directory)
  for name in MODEL_FILES:
    source = os.path.join(output_dir, name)
    if not os.path.isfile(source):
      sys.exit("%s has no %s, which predict_text.py needs" % (output_dir, name))
    shutil.copy(source, os.path.join(directory, name))


def write_raw_checkpoint(checkpoint, directory):
  """Writes the plain-named variables of `checkpoint` as directory/<its base name>, the
  checkpoint that directory's `checkpoint` file names; returns (its path, how many variables
  it holds, how many were left out)."""
  reader = tf.train.load_checkpoint(checkpoint)
  names = reader.get_variable_to_shape_map()
  values = {name: reader.get_tensor(name) for name in names if is_plain(name)}
  path = checkpoints.write_arrays(values, os.path.join(directory, os.path.basename(checkpoint)))
  return path, len(values), len(names) - len(values)


def predict_texts(model_dir, texts_file, output_file, batch_size):
  """Runs predict_text.py --output_dir=model_dir on texts_file; returns the labels."""
  command = [sys.executable, os.path.join(ROOT, "predict_text.py"), "--output_dir=" + model_dir,
             "--input_file=" + texts_file, "--output_file=" + output_file,
             "--predict_batch_size=%d" % batch_size]
  process = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, check=False)
  if process.returncode != 0:
    sys.exit("predict_text.py failed (%d) on %s:\n%s" % (
        process.returncode, model_dir, process.stdout[-3000:]))
  return [line.split("\t", 1)[0] for line in read_lines(output_file)]


def predict_from(output_dir, checkpoint, directory, texts, batch_size, keep_all=False):
  """Labels predicted for `texts` by predict_text.py from a copy of `checkpoint` in
  `directory` with output_dir's model files: its raw weights, or (keep_all) every variable.
  Returns (labels, the copy's description)."""
  copy_model(output_dir, directory)
  if keep_all:
    for path in tf.io.gfile.glob(checkpoint + ".*"):
      shutil.copy(path, directory)
    with open(os.path.join(directory, "checkpoint"), "w") as f:
      f.write('model_checkpoint_path: "%s"\n' % os.path.basename(checkpoint))
    description = {"variables": "all"}
  else:
    _, kept, left_out = write_raw_checkpoint(checkpoint, directory)
    description = {"variables_kept": kept, "left_out": left_out}
  texts_file = os.path.join(directory, "texts.txt")
  with open(texts_file, "w", encoding="utf-8") as f:
    f.write("".join(text + "\n" for text in texts))
  labels = predict_texts(directory, texts_file, os.path.join(directory, "predictions.tsv"),
                         batch_size)
  return labels, description


def score_run(output_dir, gold, texts, args):
  """The JSON record of one output_dir (see the module docstring)."""
  checkpoint = last_checkpoint(output_dir)
  reader = tf.train.load_checkpoint(checkpoint)
  has_averages = any(is_average(name) for name in reader.get_variable_to_shape_map())
  predict_file = os.path.join(output_dir, "predict.txt")
  if not os.path.isfile(predict_file):
    sys.exit("%s has no predict.txt: run it with --do_predict" % output_dir)
  predicted = read_lines(predict_file)
  best = checkpoints.latest_checkpoint(os.path.join(output_dir, "best"))
  predict_step = step_of(best) if best else step_of(checkpoint)
  record = collections.OrderedDict([
      ("output_dir", output_dir), ("step", step_of(checkpoint)),
      ("has_averages", has_averages), ("predict_step", predict_step),
      ("predict_is_last", predict_step == step_of(checkpoint)),
      ("dev_accuracy", dev_accuracy(output_dir)),
      ("averaged", accuracy(predicted, gold, predict_file) if has_averages else None)])
  if not has_averages:
    record.update([("plain", accuracy(predicted, gold, predict_file)),
                   ("plain_from", "predict.txt (no averages)")])
  else:
    raw_dir = os.path.join(output_dir, RAW_SUBDIR)
    cached = os.path.join(raw_dir, SCORE_FILE)
    saved = None
    if not args.force and os.path.isfile(cached):
      with open(cached, encoding="utf-8") as f:
        saved = json.load(f)
      if saved.get("checkpoint") != checkpoint or len(saved.get("labels", [])) != len(gold):
        saved = None
    if saved is None:
      labels, description = predict_from(output_dir, checkpoint, raw_dir, texts,
                                         args.predict_batch_size)
      saved = {"checkpoint": checkpoint, "labels": labels, "copy": description}
      with open(cached, "w", encoding="utf-8") as f:
        json.dump(saved, f, ensure_ascii=False)
    plain = accuracy(saved["labels"], gold, cached)
    record.update([("plain", plain),
                   ("plain_from", os.path.join(raw_dir, os.path.basename(checkpoint))),
                   ("plain_copy", saved["copy"]),
                   ("averaged_minus_plain", round(record["averaged"] - plain, 4)),
                   ("agree", agreement(predicted, saved["labels"])),
                   ("averages_rel_distance", averages_distance(reader))])
  if args.check_averaged:
    labels, _ = predict_from(output_dir, checkpoint, os.path.join(output_dir, "whole_checkpoint"),
                             texts, args.predict_batch_size, keep_all=True)
    record["check_predict_text_vs_predict_txt"] = agreement(predicted, labels)
  return record


def same_path(first_dir, second_dir):
  """The record of --same_path: how far apart two runs' last checkpoints' raw weights are."""
  readers = [tf.train.load_checkpoint(last_checkpoint(d)) for d in (first_dir, second_dir)]
  shapes = [reader.get_variable_to_shape_map() for reader in readers]
  plain = [set(name for name in names if is_plain(name)) for names in shapes]
  trained = trained_names(*shapes)

  def max_difference(names):
    worst, where, mismatched = 0.0, None, []
    for name in sorted(names):
      first, second = (reader.get_tensor(name) for reader in readers)
      if first.shape != second.shape or first.dtype != second.dtype:
        mismatched.append(name)
        continue
      difference = float(np.max(np.abs(first.astype(np.float64) - second.astype(np.float64)))
                         ) if first.size else 0.0
      if where is None or difference > worst:
        worst, where = difference, name
    return worst, where, mismatched

  weights = trained & plain[0] & plain[1]
  weights_max, weights_where, weights_mismatched = max_difference(weights)
  state_max, state_where, state_mismatched = max_difference(plain[0] & plain[1])
  return collections.OrderedDict([
      ("same_path", [first_dir, second_dir]),
      ("checkpoints", [last_checkpoint(first_dir), last_checkpoint(second_dir)]),
      ("trained_variables", len(weights)),
      ("weights_max_abs_diff", weights_max), ("weights_worst", weights_where),
      ("bit_identical", weights_max == 0.0 and not weights_mismatched and
       len(weights) == len(trained)),
      ("all_plain_shared", len(plain[0] & plain[1])),
      ("all_plain_max_abs_diff", state_max), ("all_plain_worst", state_where),
      ("mismatched_shape_or_dtype", weights_mismatched + state_mismatched),
      ("trained_missing", sorted(trained - (plain[0] & plain[1]))),
      ("only_in_first", sorted(plain[0] - plain[1])),
      ("only_in_second", sorted(plain[1] - plain[0]))])


def config_and_seed(output_dir):
  """(config, seed) of a directory named <config>_seed<N>, else (its name, None)."""
  name = os.path.basename(os.path.normpath(output_dir))
  match = re.match(r"^(.*)_seed(\d+)$", name)
  return (match.group(1), int(match.group(2))) if match else (name, None)


def markdown_table(records):
  """One row per config: averaged and plain test accuracy per seed, their means, and the
  mean of averaged - plain in points."""
  by_config = collections.OrderedDict()
  for record in records:
    config, seed = config_and_seed(record["output_dir"])
    by_config.setdefault(config, []).append((seed, record))
  lines = ["| config | seeds | steps | averaged (per seed) | mean | plain (per seed) | mean | "
           "averaged - plain (pts, mean) | agree (mean) |",
           "|---|---|---|---|---|---|---|---|---|"]

  def cells(values):
    shown = [v for v in values if v is not None]
    if not shown:
      return "-", "-"
    return ", ".join("%.4f" % v for v in shown), "%.4f" % (sum(shown) / len(shown))

  for config, runs in by_config.items():
    runs.sort(key=lambda run: (run[0] is None, run[0]))
    averaged, averaged_mean = cells([r["averaged"] for _, r in runs])
    plain, plain_mean = cells([r["plain"] for _, r in runs])
    gaps = [r["averaged_minus_plain"] for _, r in runs if r.get("averaged_minus_plain")
            is not None]
    agree = [r["agree"] for _, r in runs if r.get("agree") is not None]
    lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        config, ", ".join(str(seed) for seed, _ in runs),
        ", ".join(sorted(set(str(r["step"]) for _, r in runs))), averaged, averaged_mean,
        plain, plain_mean, "%+.2f" % (100 * sum(gaps) / len(gaps)) if gaps else "-",
        "%.4f" % (sum(agree) / len(agree)) if agree else "-"))
  return "\n".join(lines)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("output_dirs", nargs="*", help="run_classifier_mgpu.py output_dirs")
  parser.add_argument("--gold", help="the test.tsv the runs predicted (label, text_a)")
  parser.add_argument("--table", action="store_true",
                      help="also print a markdown table over <config>_seed<N> runs")
  parser.add_argument("--check_averaged", action="store_true",
                      help="also predict the whole checkpoint with predict_text.py and report "
                           "its agreement with predict.txt")
  parser.add_argument("--force", action="store_true", help="redo the kept plain predictions")
  parser.add_argument("--predict_batch_size", type=int, default=64)
  parser.add_argument("--same_path", nargs=2, metavar=("DIR1", "DIR2"),
                      help="compare two runs' raw weights instead of scoring")
  args = parser.parse_args()
  if args.same_path:
    print(json.dumps(same_path(*args.same_path), ensure_ascii=False))
    return
  if not args.gold or not args.output_dirs:
    parser.error("give --gold and at least one output_dir (or --same_path DIR1 DIR2)")
  gold, texts = read_gold(args.gold)
  records = []
  for output_dir in args.output_dirs:
    records.append(score_run(output_dir, gold, texts, args))
    print(json.dumps(records[-1], ensure_ascii=False), flush=True)
  if args.table:
    print(markdown_table(records))


if __name__ == "__main__":
  main()
