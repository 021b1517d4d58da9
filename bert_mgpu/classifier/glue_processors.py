# coding=utf-8
"""Google's GLUE/XNLI task processors (cola, mnli, mrpc, xnli): the files and columns that
Google's run_classifier.py reads."""

import os

from bert_mgpu.classifier import file_readers
from bert_mgpu.classifier import input_examples
from bert_mgpu.classifier import processors
from bert_mgpu.data.text_files import line_error


def _field(path, line_number, fields, index, column_name):
  """Returns fields[index]; a UsageError naming the column when the row is short."""
  if index >= len(fields):
    raise line_error(path, line_number,
                      "column %s (field %d) is missing: the row has %d tab-separated fields"
                      % (file_readers.quote(column_name), index + 1, len(fields)),
                      "check the row for missing tabs")
  return fields[index]


class ColaProcessor(processors.DataProcessor):
  """CoLA (GLUE). train/dev.tsv: no header; label in field 2, sentence in field 4.

  test.tsv has a header and the columns index, sentence; it has no labels.
  """

  SPLIT_FILES = {"train": ("train.tsv",), "dev": ("dev.tsv",), "test": ("test.tsv",)}
  FIXED_LABELS = ("0", "1")

  def _read_examples(self, path, split):
    examples = []
    rows = file_readers.tab_rows(path)
    if split == "test":
      rows = rows[1:]
    for index, (line_number, fields) in enumerate(rows):
      if split == "test":
        text_a = _field(path, line_number, fields, 1, "sentence")
        label = None
      else:
        label = _field(path, line_number, fields, 1, "label").strip()
        text_a = _field(path, line_number, fields, 3, "sentence")
      examples.append(input_examples.InputExample("%s-%d" % (split, index), text_a, None, label,
                                                  path, line_number))
    return examples


class MnliProcessor(processors.DataProcessor):
  """MultiNLI (GLUE), matched dev and test sets.

  Header row; guid from field 1 (index); sentence1 / sentence2 in fields 9 / 10;
  the gold label is the last field (train, dev); test_matched.tsv has no label.
  """

  SPLIT_FILES = {"train": ("train.tsv",), "dev": ("dev_matched.tsv",),
                 "test": ("test_matched.tsv",)}
  FIXED_LABELS = ("contradiction", "entailment", "neutral")

  def _read_examples(self, path, split):
    examples = []
    for line_number, fields in file_readers.tab_rows(path)[1:]:
      guid = "%s-%s" % (split, _field(path, line_number, fields, 0, "index"))
      text_a = _field(path, line_number, fields, 8, "sentence1")
      text_b = _field(path, line_number, fields, 9, "sentence2")
      label = None
      if split != "test":
        _field(path, line_number, fields, 10, "gold_label")
        label = fields[-1].strip()
      examples.append(input_examples.InputExample(guid, text_a, text_b, label, path, line_number))
    return examples


class MrpcProcessor(processors.DataProcessor):
  """MRPC (GLUE). Header row; label in field 1 (test: index), strings in fields 4 / 5."""

  SPLIT_FILES = {"train": ("train.tsv",), "dev": ("dev.tsv",), "test": ("test.tsv",)}
  FIXED_LABELS = ("0", "1")

  def _read_examples(self, path, split):
    examples = []
    for index, (line_number, fields) in enumerate(file_readers.tab_rows(path)[1:]):
      text_a = _field(path, line_number, fields, 3, "#1 String")
      text_b = _field(path, line_number, fields, 4, "#2 String")
      label = None
      if split != "test":
        label = _field(path, line_number, fields, 0, "Quality").strip()
      examples.append(input_examples.InputExample("%s-%d" % (split, index), text_a, text_b,
                                                  label, path, line_number))
    return examples


class XnliProcessor(processors.DataProcessor):
  """XNLI, Chinese, as in Google's run_classifier.py.

  train: multinli/multinli.train.zh.tsv (header; premise, hypo, label; the label
  "contradictory" means "contradiction"). dev / test: xnli.dev.tsv /
  xnli.test.tsv (header; rows of every language, only language "zh" is kept;
  label in field 2, sentence1 / sentence2 in fields 7 / 8). Google's script has
  no test split; this one reads xnli.test.tsv, which has labels.
  """

  LANGUAGE = "zh"
  SPLIT_FILES = {"train": (os.path.join("multinli", "multinli.train.%s.tsv" % LANGUAGE),),
                 "dev": ("xnli.dev.tsv",), "test": ("xnli.test.tsv",)}
  FIXED_LABELS = ("contradiction", "entailment", "neutral")

  def _read_examples(self, path, split):
    examples = []
    for line_number, fields in file_readers.tab_rows(path)[1:]:
      guid = "%s-%d" % (split, len(examples))
      if split == "train":
        text_a = _field(path, line_number, fields, 0, "premise")
        text_b = _field(path, line_number, fields, 1, "hypo")
        label = _field(path, line_number, fields, 2, "label").strip()
        if label == "contradictory":
          label = "contradiction"
      else:
        if _field(path, line_number, fields, 0, "language").strip() != self.LANGUAGE:
          continue
        label = _field(path, line_number, fields, 1, "gold_label").strip()
        text_a = _field(path, line_number, fields, 6, "sentence1")
        text_b = _field(path, line_number, fields, 7, "sentence2")
      examples.append(input_examples.InputExample(guid, text_a, text_b, label, path, line_number))
    return examples
