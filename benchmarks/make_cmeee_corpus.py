# coding=utf-8
"""Writes an in-domain pretraining corpus for the CMeEE benchmark (docs/experiments/
nested_entities.md): medical sentences that share no run of text with its dev or test split.

The texts: each --chip file's sentences (CHIP 2020's `text|||start end type|||...` lines, the
text before the first "|||"; its train_data.txt and test1.txt) and each --cmeee file's
"text" fields (the benchmark's CMeEE_train.json). Distinct texts are kept unless they share a
run of --shared_chars characters with a "text" of a --held_out file (CMeEE_dev.json,
CMeEE_test.json) or, when shorter than that, occur in one
(make_pretraining_corpus.leave_out_held_out). They are shuffled with --seed and written 16 to
a document: create_pretraining_data.py's input. With --vocab_file, also a character vocab over
every text read, held-out ones included (make_review_data.build_vocab).

Prints one JSON line: texts read, distinct, left out as held out, written, documents,
characters.

  python benchmarks/make_cmeee_corpus.py --chip train_data.txt --chip test1.txt \\
    --cmeee cmeee/CMeEE_train.json --held_out cmeee/CMeEE_dev.json \\
    --held_out cmeee/CMeEE_test.json --output_file corpus.txt
"""

import argparse
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
for _path in (HERE, REPO, os.path.join(REPO, "scripts")):
  sys.path.insert(0, _path)
# pylint: disable=wrong-import-position
import chip_to_cmeee
import make_pretraining_corpus
import make_review_data
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import formats


def read_chip_texts(path):
  """The text of each non-blank line of a CHIP 2020 file, before the first "|||". The
  annotations are not read: the corpus needs none, and chip_to_cmeee.read_chip refuses
  train_data.txt whole for its one malformed entity (line 6035, `16 15 pro`)."""
  with open(path, encoding="utf-8") as f:
    return [line.split(chip_to_cmeee.FIELD_SEPARATOR, 1)[0].strip() for line in f
            if line.strip()]


def read_cmeee_texts(path):
  """The "text" of each record of a CMeEE file (formats.read_cmeee)."""
  return [sentence.text for sentence in formats.read_cmeee(path).sentences]


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--chip", action="append", default=[], help="a CHIP 2020 file")
  parser.add_argument("--cmeee", action="append", default=[], help="a CMeEE JSON file")
  parser.add_argument("--held_out", action="append", default=[],
                      help="a CMeEE JSON file whose texts the corpus must not hold")
  parser.add_argument("--output_file", required=True)
  parser.add_argument("--vocab_file", help="also write a vocab covering every text read")
  parser.add_argument("--texts_per_document", type=int, default=16)
  parser.add_argument("--seed", type=int, default=12345)
  parser.add_argument("--shared_chars", type=int, default=20)
  args = parser.parse_args()
  try:
    texts = ([t for path in args.chip for t in read_chip_texts(path)] +
             [t for path in args.cmeee for t in read_cmeee_texts(path)])
    held_out = [t for path in args.held_out for t in read_cmeee_texts(path)]
  except UsageError as e:
    sys.exit("error: %s" % e)
  distinct = sorted(set(t for t in texts if t))
  random.Random(args.seed).shuffle(distinct)
  kept, left_out = make_pretraining_corpus.leave_out_held_out(distinct, held_out,
                                                              args.shared_chars)
  documents = make_pretraining_corpus.write_corpus(args.output_file, kept,
                                                   args.texts_per_document)
  if args.vocab_file:
    with open(args.vocab_file, "w", encoding="utf-8") as f:
      f.write("".join(token + "\n" for token in make_review_data.build_vocab(texts + held_out)))
  print(json.dumps({"read": len(texts), "distinct": len(distinct),
                    "left_out_as_held_out": left_out, "written": len(kept),
                    "documents": documents, "chars": sum(len(t) for t in kept)}))


if __name__ == "__main__":
  main()
