# coding=utf-8
"""Converts CHIP 2020's medical NER files into CMeEE's JSON (run_ner_mgpu.py
--data_format=cmeee).

CHIP 2020 task 1 (the data CBLUE later shipped as CMeEE) has one sentence per line:

  text|||start end type|||start end type|||...

with 0-based character offsets, inclusive ends, white space (spaces or tabs) between start,
end and type, and usually a final "|||". A line without "|||" is a sentence without labels
(CHIP's test file); a file mixing the two is refused. Entities may nest or overlap; they are
written as they are. The same (start, end, type) given twice on a line is written once.

Writes CMeEE's format (a JSON array of {"text", "entities": [{"start_idx", "end_idx",
"type", "entity"}]}, end_idx inclusive) into --output_dir:

  without --split   CMeEE_<--name>.json, every sentence in the order of the input.
  --split=A,B,C     CMeEE_train.json, CMeEE_dev.json and CMeEE_test.json: the first A, the
                    next B and the next C sentences of a shuffle seeded by --seed (the test
                    file keeps its entities, so that predictions can be scored).

Prints, for the input and for each file written: sentences, entities, entities inside
another (within another entity's span, the two spans differing), entities sharing their
span with an entity of another type, and sentences where two entities overlap.

Usage:
  python scripts/chip_to_cmeee.py --input=val_data.txt --output_dir=cmeee \\
      --split=3000,1000,1000 --seed=1
"""

import argparse
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# pylint: disable=wrong-import-position
from bert_mgpu.data import output_files
from bert_mgpu.data import text_files
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import formats
from bert_mgpu.ner import writers
# pylint: enable=wrong-import-position

FIELD_SEPARATOR = "|||"
SPLIT_NAMES = ("train", "dev", "test")
_ANNOTATION = re.compile(r"^[ \t]*([0-9]+)[ \t]+([0-9]+)[ \t]+([^ \t]+)[ \t]*$")
_ANNOTATION_FORM = "write each entity as `start end type` (inclusive end) between |||"


def parse_line(path, line_number, line):
  """One CHIP line as (text, spans or None), spans (type, start, end exclusive) in
  formats.normalize_spans order.

  Raises:
    UsageError: an entity that is not `start end type`, or outside the text.
  """
  if FIELD_SEPARATOR not in line:
    return line, None
  fields = line.split(FIELD_SEPARATOR)
  text, spans = fields[0], []
  for field in fields[1:]:
    if not field.strip():
      continue  # the final "|||" leaves an empty field
    match = _ANNOTATION.match(field)
    if not match:
      raise text_files.line_error(path, line_number, "entity %s is not `start end type`"
                                  % formats.quote(field), _ANNOTATION_FORM)
    start, end, entity_type = int(match.group(1)), int(match.group(2)), match.group(3)
    if not start <= end < len(text):
      raise text_files.line_error(
          path, line_number, "entity %s: [%d, %d] is outside the text of %d characters"
          % (formats.quote(field), start, end, len(text)), _ANNOTATION_FORM)
    spans.append((entity_type, start, end + 1))
  return text, formats.normalize_spans(spans)


def read_chip(path):
  """The sentences of a CHIP file, as NerSentences whose characters are the tokens.

  Raises:
    UsageError: unreadable or not UTF-8, a bad entity (parse_line), lines with entities
      mixed with lines without "|||", or no sentence.
  """
  sentences, first_tagged = [], None
  for line_number, line in text_files.text_lines(path, as_json=True):
    if not line.strip():
      continue
    text, spans = parse_line(path, line_number, line)
    if first_tagged is None:
      first_tagged = (line_number, spans is not None)
    elif first_tagged[1] != (spans is not None):
      raise text_files.line_error(
          path, line_number, "%s \"|||\" but line %d %s" % (
              "no" if first_tagged[1] else "a", first_tagged[0],
              "has one" if first_tagged[1] else "has none"),
          "give every line its entities after \"|||\" (a bare \"|||\" for none), or none")
    sentences.append(formats.NerSentence(
        list(text), None, text, list(range(len(text))), source_file=path,
        source_line=line_number, example_id=len(sentences), spans=spans))
  if not sentences:
    raise UsageError("%s: no sentences; write one sentence per line" % path)
  return sentences


def overlap_counts(sentences):
  """What --split's printout counts, as a dict: sentences, entities, inside (entities
  within the span of another entity whose span differs), same_span (entities sharing
  their span with an entity of another type), overlapping_sentences (sentences where
  two entities share a character)."""
  counts = dict(sentences=len(sentences), entities=0, inside=0, same_span=0,
                overlapping_sentences=0)
  for sentence in sentences:
    spans = sentence.spans or []
    counts["entities"] += len(spans)
    overlapping = False
    for entity in spans:
      others = [other for other in spans if other != entity]
      counts["inside"] += any(o[1] <= entity[1] and entity[2] <= o[2]
                              and o[1:] != entity[1:] for o in others)
      counts["same_span"] += any(o[1:] == entity[1:] for o in others)
      overlapping = overlapping or any(o[1] < entity[2] and entity[1] < o[2] for o in others)
    counts["overlapping_sentences"] += overlapping
  return counts


def describe(name, sentences):
  """One printout line of overlap_counts."""
  c = overlap_counts(sentences)
  return ("%s: %d sentences, %d entities, %d inside another (%.1f%%), %d sharing their span "
          "with another type, %d sentences with overlapping entities (%.1f%%)" % (
              name, c["sentences"], c["entities"], c["inside"],
              100.0 * c["inside"] / max(c["entities"], 1), c["same_span"],
              c["overlapping_sentences"],
              100.0 * c["overlapping_sentences"] / max(c["sentences"], 1)))


def parse_split(value):
  """--split's "A,B,C" as three non-negative ints (argparse type)."""
  parts = value.split(",")
  if len(parts) != 3 or not all(part.strip().isdigit() for part in parts):
    raise argparse.ArgumentTypeError("%r is not N_train,N_dev,N_test (e.g. 3000,1000,1000)"
                                     % value)
  return [int(part) for part in parts]


def split_sentences(sentences, sizes, seed):
  """{split name: its sentences} of a seeded shuffle (random.Random(seed)).

  Raises:
    UsageError: the sizes add up to more sentences than there are.
  """
  if sum(sizes) > len(sentences):
    raise UsageError("--split=%s asks for %d sentences but the input has %d; give smaller "
                     "sizes" % (",".join(map(str, sizes)), sum(sizes), len(sentences)))
  order = list(range(len(sentences)))
  random.Random(seed).shuffle(order)
  splits, start = {}, 0
  for name, size in zip(SPLIT_NAMES, sizes):
    splits[name] = [sentences[index] for index in order[start:start + size]]
    start += size
  return splits


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--input", required=True, help="a CHIP 2020 file (e.g. val_data.txt)")
  parser.add_argument("--output_dir", required=True, help="where the CMeEE files go")
  parser.add_argument("--split", type=parse_split, default=None,
                      help="N_train,N_dev,N_test: write three files of a seeded shuffle")
  parser.add_argument("--seed", type=int, default=1, help="the shuffle's seed (--split)")
  parser.add_argument("--name", choices=SPLIT_NAMES, default="dev",
                      help="without --split: the whole input becomes CMeEE_<name>.json")
  args = parser.parse_args(argv)
  try:
    sentences = read_chip(args.input)
    if args.split:
      splits = split_sentences(sentences, args.split, args.seed)
    else:
      splits = {args.name: sentences}
  except UsageError as e:
    print("error: %s" % e, file=sys.stderr)
    return 2
  print(describe(args.input, sentences))
  os.makedirs(args.output_dir, exist_ok=True)
  for name, part in splits.items():
    path = os.path.join(args.output_dir, "CMeEE_%s.json" % name)
    output_files.atomic_write_text(path, writers.format_cmeee(part))
    print(describe(path, part))
  return 0


if __name__ == "__main__":
  sys.exit(main())
