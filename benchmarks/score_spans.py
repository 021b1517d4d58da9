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
# pylint: disable=wrong-import-position
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import formats
from bert_mgpu.ner import span_scoring


def read_spans(path):
  """Per record of a CMeEE file, its (type, start, end exclusive) spans, as
  run_ner_mgpu.py reads them (formats.read_cmeee: a malformed entity is one error line)."""
  return [sentence.spans for sentence in formats.read_cmeee(path).sentences]


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
  try:
    gold = read_spans(args.gold)
    for path in args.predictions:
      print(json.dumps(dict(file=path, **summary(gold, read_spans(path)))))
  except (UsageError, ValueError) as e:  # ValueError: another count of sentences
    sys.exit("error: %s" % e)


if __name__ == "__main__":
  main()
