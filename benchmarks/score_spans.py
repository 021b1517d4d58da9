# coding=utf-8
"""Scores CMeEE prediction files against a gold CMeEE file, nested entities included.

For the #46 benchmark (docs/experiments/nested_entities.md): each prediction file is a
CMeEE JSON array as run_ner_mgpu.py --data_format=cmeee writes it (`CMeEE_test.json`, the
same sentences in the same order as the gold file), scored with
bert_mgpu/ner/span_scoring.score: micro precision, recall and F1 over exact
(type, start, end), and over the entities that lie inside another. Prints one JSON line per
prediction file.

  python benchmarks/score_spans.py --gold cmeee/CMeEE_test.json runs/*/CMeEE_test.json
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bert_mgpu.ner import span_scoring  # pylint: disable=wrong-import-position


def read_spans(path):
  """Per record of a CMeEE JSON array, its (type, start_idx, end_idx) triples."""
  with open(path, encoding="utf-8") as f:
    records = json.load(f)
  return [[(e["type"], e["start_idx"], e["end_idx"]) for e in record.get("entities", [])]
          for record in records]


def summary(gold, predicted):
  """The scores json.dumps prints for one prediction file."""
  result = span_scoring.score(gold, predicted)
  nested = result["nested"]
  return {"f1": result["f1"], "precision": result["precision"], "recall": result["recall"],
          "gold": result["num_gold"], "predicted": result["num_predicted"],
          "nested_recall": nested["recall"], "nested_found": nested["found"],
          "nested_support": nested["support"], "nested_f1": nested["f1"]}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--gold", required=True, help="the gold CMeEE file")
  parser.add_argument("predictions", nargs="+", help="CMeEE prediction files")
  args = parser.parse_args()
  gold = read_spans(args.gold)
  for path in args.predictions:
    print(json.dumps(dict(file=path, **summary(gold, read_spans(path)))))


if __name__ == "__main__":
  main()
