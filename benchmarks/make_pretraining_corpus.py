# coding=utf-8
"""Writes a pretraining corpus of real review texts that shares no run of text with a
held-out set.

For MLM pretraining on in-domain text before a benchmark fine-tuning (a user's continued
pretraining on their own texts): every text of the given `label,review` CSVs (labels
ignored) is kept unless it shares a run of --shared_chars characters with a text_a of a
--held_out TSV (dev.tsv, test.tsv of make_review_data.py), or, when shorter than that,
occurs in one. So the model reads no dev or test cue or filler before it is scored: not
within a held-out document, not holding one (a longer version of a review), not a
near-copy of one, and not one read from the wrong CSV column ("1,<review>"). The kept
texts are shuffled with --seed and grouped --texts_per_document to a document, one text a
line, documents separated by a blank line: Google's create_pretraining_data.py input, where
an MLM instance fills up with consecutive lines.

Prints one JSON line: texts read, distinct, left out as held out, written, documents,
characters.

  python benchmarks/make_pretraining_corpus.py --csv os10.csv:2 --csv waimai_10k.csv \
    --held_out /tmp/cue/dev.tsv --held_out /tmp/cue/test.tsv --output_file /tmp/corpus.txt
"""

import argparse
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_review_data  # pylint: disable=wrong-import-position


def read_held_out(paths):
  """The text_a column of each headed `label<TAB>text_a` TSV, all in one list."""
  texts = []
  for path in paths:
    with open(path, encoding="utf-8") as f:
      next(f)
      texts.extend(line.rstrip("\n").split("\t", 1)[1] for line in f if "\t" in line)
  return texts


def leave_out_held_out(texts, held_out_texts, shared_chars):
  """The texts that share no run of `shared_chars` characters with any of held_out_texts
  and, when shorter than that, occur in none of them; in order, and how many were left
  out. The rule errs towards leaving out: a short text found inside some document goes."""
  runs = set(held_out[start:start + shared_chars] for held_out in held_out_texts
             for start in range(len(held_out) - shared_chars + 1))
  # "\n" occurs in no text (make_review_data folds whitespace), so no match spans two.
  joined = "\n".join(held_out_texts)

  def held_out(text):
    if len(text) < shared_chars:
      return text in joined
    return any(text[start:start + shared_chars] in runs
               for start in range(len(text) - shared_chars + 1))

  kept = [text for text in texts if not held_out(text)]
  return kept, len(texts) - len(kept)


def group_documents(texts, texts_per_document):
  """The texts cut into consecutive lists of texts_per_document (the last may be shorter)."""
  return [texts[i:i + texts_per_document] for i in range(0, len(texts), texts_per_document)]


def write_corpus(path, texts, texts_per_document):
  """The texts to `path` as documents of texts_per_document lines (group_documents), a blank
  line between documents; returns how many documents."""
  documents = group_documents(texts, texts_per_document)
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join("".join(text + "\n" for text in document) for document in documents))
  return len(documents)


def parse_csv_argument(value):
  """`path` or `path:text_column` -> (path, text column; 1 when not given)."""
  path, _, column = value.rpartition(":")
  if path and column.isdigit():
    return path, int(column)
  return value, 1


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--csv", action="append", required=True,
                      help="a CSV with a header, as path or path:text_column (default 1)")
  parser.add_argument("--held_out", action="append", default=[],
                      help="a TSV whose texts must not be in the corpus (repeatable)")
  parser.add_argument("--output_file", required=True)
  parser.add_argument("--texts_per_document", type=int, default=16)
  parser.add_argument("--seed", type=int, default=12345)
  parser.add_argument("--shared_chars", type=int, default=20,
                      help="leave out a text sharing a run this long with a held-out text")
  args = parser.parse_args()
  texts = []
  for value in args.csv:
    path, text_column = parse_csv_argument(value)
    texts.extend(text for _, text in make_review_data.read_rows(path, 0, text_column)[0])
  read = len(texts)
  texts = sorted(set(texts))  # a text repeated in the CSVs is read once
  kept, left_out = leave_out_held_out(texts, read_held_out(args.held_out), args.shared_chars)
  random.Random(args.seed).shuffle(kept)
  documents = write_corpus(args.output_file, kept, args.texts_per_document)
  print(json.dumps({"read": read, "distinct": len(texts), "left_out_as_held_out": left_out,
                    "written": len(kept), "documents": documents,
                    "chars": sum(len(text) for text in kept)}))


if __name__ == "__main__":
  main()
