# coding=utf-8
"""Writes the inputs of the fill_mask.py / hf_fill_mask.py comparison from tsv texts.

From --train_tsv and --test_tsv (header row, the text in the last column; e.g. the demo's
train.tsv and test.tsv from scripts/make_demo_data.py), into --output_dir:

  corpus.txt   the training texts as pretraining input for create_pretraining_data.py:
               one text per line (read as a sentence), a blank line after every
               --sentences_per_document texts.
  fill.txt     each test text with one Chinese character (a quarter of the lines: two)
               replaced by [MASK]: fill_mask.py's fill mode.
  cloze.txt    each test text with two consecutive Chinese characters replaced by a blank
               (--blank_marker twice), TAB, four candidates separated by |: the right
               two characters and three other two-character spans of other test texts,
               shuffled. fill_mask.py --candidates input.
  answers.txt  the right candidate of each cloze.txt line.

Standard library only; the same --seed gives the same bytes.

  python benchmarks/make_fill_mask_items.py --train_tsv D/train.tsv --test_tsv D/test.tsv \\
      --output_dir OUT [--seed 12345]
"""

import argparse
import os
import random


def is_chinese(char):
  return "\u4e00" <= char <= "\u9fff"


def read_texts(path):
  with open(path, encoding="utf-8") as f:
    rows = f.read().split("\n")[1:]
  return [row.split("\t")[-1] for row in rows if row.strip()]


def chinese_spans(text, length):
  """Starts of the runs of `length` Chinese characters in `text`."""
  return [i for i in range(len(text) - length + 1)
          if all(is_chinese(c) for c in text[i:i + length])]


def fill_line(text, rng):
  """`text` with one or two Chinese characters replaced by [MASK] (None: no such character)."""
  starts = chinese_spans(text, 1)
  if not starts:
    return None
  chosen = sorted(rng.sample(starts, min(len(starts), 2 if rng.random() < 0.25 else 1)))
  pieces, last = [], 0
  for start in chosen:
    pieces += [text[last:start], "[MASK]"]
    last = start + 1
  return "".join(pieces + [text[last:]])


def cloze_line(text, others, blank_marker, rng):
  """(line, answer): a two-character blank in `text` and four candidates (None when the
  text has no two Chinese characters in a row)."""
  starts = chinese_spans(text, 2)
  if not starts:
    return None
  start = rng.choice(starts)
  answer = text[start:start + 2]
  spans = set(other[i:i + 2] for other in others for i in chinese_spans(other, 2)) - {answer}
  if len(spans) < 3:
    return None
  distractors = set()
  while len(distractors) < 3:
    other = rng.choice(others)
    other_starts = chinese_spans(other, 2)
    if other_starts:
      span = other[rng.choice(other_starts):][:2]
      if span != answer:
        distractors.add(span)
  candidates = sorted(distractors) + [answer]
  rng.shuffle(candidates)
  blanked = text[:start] + blank_marker * 2 + text[start + 2:]
  return "%s\t%s" % (blanked, "|".join(candidates)), answer


def write_lines(path, lines):
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join(line + "\n" for line in lines))


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--train_tsv", required=True)
  parser.add_argument("--test_tsv", required=True)
  parser.add_argument("--output_dir", required=True)
  parser.add_argument("--sentences_per_document", type=int, default=8)
  parser.add_argument("--blank_marker", default="\u201c")
  parser.add_argument("--seed", type=int, default=12345)
  args = parser.parse_args()
  rng = random.Random(args.seed)
  os.makedirs(args.output_dir, exist_ok=True)
  corpus = []
  for index, text in enumerate(read_texts(args.train_tsv)):
    if index and index % args.sentences_per_document == 0:
      corpus.append("")
    corpus.append(text)
  write_lines(os.path.join(args.output_dir, "corpus.txt"), corpus)
  tests = read_texts(args.test_tsv)
  write_lines(os.path.join(args.output_dir, "fill.txt"),
              [line for line in (fill_line(text, rng) for text in tests) if line])
  cloze = [item for item in (cloze_line(text, tests[:i] + tests[i + 1:], args.blank_marker,
                                        rng) for i, text in enumerate(tests)) if item]
  write_lines(os.path.join(args.output_dir, "cloze.txt"), [line for line, _ in cloze])
  write_lines(os.path.join(args.output_dir, "answers.txt"), [answer for _, answer in cloze])


if __name__ == "__main__":
  main()
