# coding=utf-8
"""Scores multi-label predictions (predict.txt files) against the gold labels of a TSV file.

The same scorer as run_classifier_mgpu.py --multi_label uses for dev
(multi_label.multi_label_metrics): micro-F1 over (example, label) pairs, macro-F1 over the
labels, exact-set match. A predictions file has one line per example of the gold file, in
order: its labels joined by --label_separator (an empty line for none), which is what
both run_classifier_mgpu.py --multi_label and hf_finetune.py --multi_label write.

Prints one JSON line per predictions file.

  python benchmarks/score_multi_label.py --gold D/test.tsv --labels D/labels.txt \
      OURS/predict.txt HF/predict.txt
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_mgpu.classifier import multi_label  # pylint: disable=wrong-import-position


def split_labels(field, separator):
  """The set of labels in one label field (empty field: no label)."""
  return set(part.strip() for part in field.split(separator) if part.strip())


def multi_hot(label_sets, label_list, source):
  """float32 [examples, labels] from label sets; an unknown label ends the program."""
  index = {label: i for i, label in enumerate(label_list)}
  rows = np.zeros((len(label_sets), len(label_list)), np.float32)
  for row, labels in enumerate(label_sets):
    for label in labels:
      if label not in index:
        sys.exit("%s, example %d: label %r is not in the label list %s" % (
            source, row + 1, label, label_list))
      rows[row, index[label]] = 1.0
  return rows


def scores(gold_sets, predicted_sets, label_list, source="predictions"):
  """micro_f1, macro_f1, exact_match of predicted label sets against gold ones."""
  gold = multi_hot(gold_sets, label_list, "gold")
  predicted = multi_hot(predicted_sets, label_list, source)
  outputs = {"probabilities": predicted, "label_ids": gold,
             "per_example_loss": np.zeros(len(gold), np.float32)}
  metrics, _ = multi_label.multi_label_metrics(outputs, label_list,
                                               np.full(len(label_list), 0.5, np.float32))
  return {key: round(float(metrics[key]), 4) for key in ("micro_f1", "macro_f1", "exact_match")}


def read_gold(path, separator):
  """The label sets of a TSV file whose header names a `label` column."""
  with open(path, encoding="utf-8-sig") as f:
    rows = [line.rstrip("\r\n").split("\t") for line in f if line.strip()]
  header = [name.strip().lower() for name in rows[0]]
  if "label" not in header:
    sys.exit("%s: the header row names no label column" % path)
  column = header.index("label")
  return [split_labels(row[column] if column < len(row) else "", separator) for row in rows[1:]]


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--gold", required=True, help="a TSV file with a label column")
  parser.add_argument("--labels", required=True, help="labels.txt, one label per line")
  parser.add_argument("--label_separator", default=",")
  parser.add_argument("predictions", nargs="+", help="predict.txt files")
  args = parser.parse_args()
  gold = read_gold(args.gold, args.label_separator)
  with open(args.labels, encoding="utf-8") as f:
    label_list = [line.strip() for line in f if line.strip()]
  for path in args.predictions:
    with open(path, encoding="utf-8") as f:
      predicted = [split_labels(line.rstrip("\r\n"), args.label_separator) for line in f]
    if len(predicted) != len(gold):
      sys.exit("%s has %d lines, %s %d examples" % (path, len(predicted), args.gold, len(gold)))
    result = {"predictions": path, "examples": len(gold)}
    result.update(scores(gold, predicted, label_list, path))
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
  main()
