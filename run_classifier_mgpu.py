# coding=utf-8
"""Fine-tunes BERT for sentence and sentence-pair classification on every GPU.

This first part of the script reads the data: the task processors that turn
data files into `InputExample`s, the label list, and featurizing into TFRecord
files that are cached in output_dir and reused while their inputs are unchanged.

Supported tasks (`--task_name`, case-insensitive; files live in --data_dir):

  cola, mnli, mrpc, xnli  Google's GLUE/XNLI processors, same files and columns.
  tsv, csv                {train,dev,test}.tsv / .csv with a header row.
  jsonl                   {train,dev,test}.jsonl, one JSON object per line.
  tnews, iflytek          CLUE 1.0: {train,dev,test}.json, one JSON object per line.
  thucnews                `label<TAB>text` lines, no header:
                          {train,dev,test}.txt or cnews.{train,val,test}.txt.

Label list: data_dir/labels.txt (one label per line), else the task's fixed
list, else the sorted labels of the training file; training saves it to
output_dir/labels.txt, which runs without --do_train reuse.

Features are cached in output_dir as <split>-<hash>.tf_record; the hash covers
the data files, the vocab, tokenization.py and the settings, so a cache is
reused only while all of them are unchanged.

Bad input raises `UsageError` with a one-line message that names the file, the
line (1-based, as an editor shows it) and the value, and says what to do.
"""

import codecs
import collections
import csv
import hashlib
import io
import json
import multiprocessing
import os
import re
import time
import unicodedata

import numpy as np
import tensorflow.compat.v1 as tf

import modeling
import multigpu
import tokenization
from multigpu import UsageError, atomic_write_text

# Child of TensorFlow's logger: the messages appear next to tf.logging's and
# follow tf.logging.set_verbosity().
_LOGGER = tf.get_logger().getChild("run_classifier_mgpu")

# Bump whenever the processors or the featurizing change what ends up in a
# TFRecord file: cached features written by older code are then rebuilt.
FEATURE_FORMAT_VERSION = 1

SPLITS = ("train", "dev", "test")

# The flag that makes a run read each split.
_SPLIT_FLAGS = {"train": "--do_train", "dev": "--do_eval", "test": "--do_predict"}

# Below this many examples, featurizing runs in this process: starting worker
# processes costs more than they save.
POOL_THRESHOLD = 2000

# Seconds between progress lines while featurizing.
PROGRESS_INTERVAL_SECONDS = 5.0

# Longest value quoted in an error message.
_MAX_QUOTED_CHARS = 80


# ---------------------------------------------------------------------------
# Data model
# ---------------------------------------------------------------------------

class InputExample(object):
  """One example for sequence (pair) classification."""

  def __init__(self, guid, text_a, text_b=None, label=None, source_file=None,
               source_line=None):
    """Constructs an InputExample.

    Args:
      guid: unique id of the example (the file's `id` column, or split-index).
      text_a: untokenized text of the first sequence.
      text_b: untokenized text of the second sequence, or None for single
        sequence tasks.
      label: the label string, or None when the example has none (test files).
      source_file: path of the file the example was read from (error messages).
      source_line: 1-based line of the example in `source_file`.
    """
    self.guid = guid
    self.text_a = text_a
    self.text_b = text_b
    self.label = label
    self.source_file = source_file
    self.source_line = source_line

  def __repr__(self):
    return "InputExample(guid=%r, text_a=%r, text_b=%r, label=%r)" % (
        self.guid, self.text_a, self.text_b, self.label)


class InputFeatures(object):
  """The model inputs of one example."""

  def __init__(self, input_ids, input_mask, segment_ids, label_id, is_real_example=True):
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.segment_ids = segment_ids
    self.label_id = label_id
    self.is_real_example = is_real_example


# ---------------------------------------------------------------------------
# Reading files: UTF-8 with line-numbered errors
# ---------------------------------------------------------------------------

def _quote(value):
  """Quotes a value for an error message, shortened when long."""
  text = value if isinstance(value, str) else str(value)
  if len(text) > _MAX_QUOTED_CHARS:
    text = text[:_MAX_QUOTED_CHARS] + "..."
  return repr(text)


def _line_error(path, line_number, problem, advice):
  """Builds the UsageError for a problem at one line of an input file."""
  return UsageError("%s line %d: %s; %s" % (path, line_number, problem, advice))


def read_text_file(path):
  """Reads a whole file as UTF-8 text (a leading byte order mark is dropped).

  Args:
    path: the file.

  Returns:
    The decoded text.

  Raises:
    UsageError: the file is missing, or holds bytes that are not UTF-8 (the
      message gives the line and the byte offsets).
  """
  if not os.path.isfile(path):
    raise UsageError("%s: file not found; check the path" % path)
  with open(path, "rb") as f:
    data = f.read()
  start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
  try:
    return data[start:].decode("utf-8")
  except UnicodeDecodeError as e:
    offset = start + e.start
    line_start = data.rfind(b"\n", 0, offset) + 1
    line_number = data.count(b"\n", 0, offset) + 1
    raise _line_error(
        path, line_number,
        "byte 0x%02x at byte offset %d of the line (offset %d in the file) is not valid UTF-8"
        % (data[offset], offset - line_start, offset),
        "save the file as UTF-8 (e.g. `iconv -f GB18030 -t UTF-8`)")


def _numbered_lines(text):
  """Yields (1-based line number, line) with the line ending removed.

  Splits on "\\n" only: str.splitlines() would also split on characters such as
  U+2028 or U+001C that can occur inside a text, and then the line numbers an
  editor shows would no longer match.
  """
  for index, line in enumerate(text.split("\n")):
    if line.endswith("\r"):
      line = line[:-1]
    yield index + 1, line


def _tab_rows(path):
  """Reads a tab-separated file into (line number, fields) for non-blank lines.

  Quote characters are ordinary text, as in Google's readers (quotechar=None).
  """
  rows = []
  for line_number, line in _numbered_lines(read_text_file(path)):
    if line.strip():
      rows.append((line_number, line.split("\t")))
  return rows


def _csv_rows(path):
  """Reads a CSV file with Python's csv module into (line number, fields).

  A quoted field may hold commas, quotes ("") and newlines; the line number is
  the line where the record starts. Blank lines are skipped.
  """
  text = read_text_file(path)
  # The default limit (128 KiB per field) is too small for whole documents.
  csv.field_size_limit(2 ** 31 - 1)
  reader = csv.reader(io.StringIO(text, newline=""))
  rows = []
  next_line = 1
  while True:
    start_line = next_line
    try:
      fields = next(reader)
    except StopIteration:
      break
    except csv.Error as e:
      raise _line_error(path, start_line, "cannot parse the CSV record (%s)" % e,
                        "check the quoting of this record")
    next_line = reader.line_num + 1
    if fields and any(field.strip() for field in fields):
      rows.append((start_line, fields))
  return rows


def _json_objects(path):
  """Reads one JSON object per line into (line number, dict); blank lines skipped."""
  objects = []
  for line_number, line in _numbered_lines(read_text_file(path)):
    if not line.strip():
      continue
    try:
      value = json.loads(line)
    except ValueError as e:
      raise _line_error(path, line_number, "invalid JSON (%s): %s" % (e, _quote(line)),
                        "write one JSON object per line")
    if not isinstance(value, dict):
      raise _line_error(path, line_number, "expected a JSON object, got %s" % _quote(line),
                        "write one JSON object per line")
    objects.append((line_number, value))
  return objects


def read_label_file(path):
  """Reads a label list: one label per line, in order; blank lines ignored.

  Args:
    path: the labels.txt file.

  Returns:
    The list of labels (surrounding whitespace stripped).

  Raises:
    UsageError: a label appears twice, or there is no label.
  """
  labels = []
  first_seen = {}
  for line_number, line in _numbered_lines(read_text_file(path)):
    label = line.strip()
    if not label:
      continue
    if label in first_seen:
      raise _line_error(path, line_number,
                        "label %s is listed twice (first on line %d)"
                        % (_quote(label), first_seen[label]),
                        "list every label once")
    first_seen[label] = line_number
    labels.append(label)
  if not labels:
    raise UsageError("%s: no labels in the file; write the labels one per line" % path)
  return labels


# ---------------------------------------------------------------------------
# Processors
# ---------------------------------------------------------------------------

class DataProcessor(object):
  """Reads one data format: examples of each split and the label list.

  Subclasses set SPLIT_FILES (split -> candidate file names in data_dir, the
  first that exists is used), optionally FIXED_LABELS, and implement
  `_read_examples`.
  """

  SPLIT_FILES = {}
  FIXED_LABELS = None

  def __init__(self):
    self._examples_cache = {}

  def get_train_examples(self, data_dir):
    """Returns the `InputExample`s of the training set."""
    return self.get_examples(data_dir, "train")

  def get_dev_examples(self, data_dir):
    """Returns the `InputExample`s of the dev set."""
    return self.get_examples(data_dir, "dev")

  def get_test_examples(self, data_dir):
    """Returns the `InputExample`s to predict (labels may be None)."""
    return self.get_examples(data_dir, "test")

  def input_files(self, data_dir, split):
    """The data files the examples of `split` are read from.

    Args:
      data_dir: the data directory.
      split: "train", "dev" or "test".

    Returns:
      A list of existing file paths.

    Raises:
      UsageError: none of the file names this task accepts exists.
    """
    candidates = [os.path.join(data_dir, name) for name in self.SPLIT_FILES[split]]
    for path in candidates:
      if os.path.isfile(path):
        return [path]
    raise UsageError("no %s file for task %s: expected %s; put the file there or check "
                     "--data_dir and --task_name"
                     % (split, self.name, " or ".join(candidates)))

  def get_examples(self, data_dir, split):
    """Reads the examples of one split.

    Each split read stays in memory (until its file changes), so reading the
    training file for the label list and again for featurizing parses it once.
    Callers must not modify the returned list.

    Raises:
      UsageError: the file is missing, malformed or has no examples.
    """
    path = self.input_files(data_dir, split)[0]
    stat = os.stat(path)
    key = (os.path.abspath(path), stat.st_size, stat.st_mtime)
    cached = self._examples_cache.get(split)
    if cached is None or cached[0] != key:
      examples = self._read_examples(path, split)
      if not examples:
        raise UsageError("%s: the file has no examples; add examples, or run without %s"
                         % (path, _SPLIT_FLAGS[split]))
      self._examples_cache[split] = (key, examples)
    return self._examples_cache[split][1]

  def get_labels(self, data_dir):
    """The label list, in label-id order.

    data_dir/labels.txt when it exists, else the task's fixed list, else the
    sorted distinct labels of the training file.
    """
    labels_path = os.path.join(data_dir, "labels.txt")
    if os.path.isfile(labels_path):
      return read_label_file(labels_path)
    if self.FIXED_LABELS is not None:
      return list(self.FIXED_LABELS)
    train_files = [os.path.join(data_dir, name) for name in self.SPLIT_FILES["train"]]
    if not any(os.path.isfile(path) for path in train_files):
      raise UsageError(
          "no label list for task %s: neither %s nor a training file (%s) exists; write the "
          "labels one per line to %s, or point --output_dir at the directory of the trained "
          "model (it holds labels.txt)"
          % (self.name, labels_path, " or ".join(train_files), labels_path))
    labels = set(example.label for example in self.get_train_examples(data_dir))
    return sorted(labels)

  @property
  def name(self):
    for name, processor_class in PROCESSORS.items():
      if type(self) is processor_class:
        return name
    return type(self).__name__

  def _read_examples(self, path, split):
    """Parses one file into InputExamples. Implemented by each format."""
    raise NotImplementedError()


def _field(path, line_number, fields, index, column_name):
  """Returns fields[index]; a UsageError naming the column when the row is short."""
  if index >= len(fields):
    raise _line_error(path, line_number,
                      "column %s (field %d) is missing: the row has %d tab-separated fields"
                      % (_quote(column_name), index + 1, len(fields)),
                      "check the row for missing tabs")
  return fields[index]


class ColaProcessor(DataProcessor):
  """CoLA (GLUE). train/dev.tsv: no header; label in field 2, sentence in field 4.

  test.tsv has a header and the columns index, sentence; it has no labels.
  """

  SPLIT_FILES = {"train": ("train.tsv",), "dev": ("dev.tsv",), "test": ("test.tsv",)}
  FIXED_LABELS = ("0", "1")

  def _read_examples(self, path, split):
    examples = []
    rows = _tab_rows(path)
    if split == "test":
      rows = rows[1:]
    for index, (line_number, fields) in enumerate(rows):
      if split == "test":
        text_a = _field(path, line_number, fields, 1, "sentence")
        label = None
      else:
        label = _field(path, line_number, fields, 1, "label").strip()
        text_a = _field(path, line_number, fields, 3, "sentence")
      examples.append(InputExample("%s-%d" % (split, index), text_a, None, label,
                                   path, line_number))
    return examples


class MnliProcessor(DataProcessor):
  """MultiNLI (GLUE), matched dev and test sets.

  Header row; guid from field 1 (index); sentence1 / sentence2 in fields 9 / 10;
  the gold label is the last field (train, dev); test_matched.tsv has no label.
  """

  SPLIT_FILES = {"train": ("train.tsv",), "dev": ("dev_matched.tsv",),
                 "test": ("test_matched.tsv",)}
  FIXED_LABELS = ("contradiction", "entailment", "neutral")

  def _read_examples(self, path, split):
    examples = []
    for line_number, fields in _tab_rows(path)[1:]:
      guid = "%s-%s" % (split, _field(path, line_number, fields, 0, "index"))
      text_a = _field(path, line_number, fields, 8, "sentence1")
      text_b = _field(path, line_number, fields, 9, "sentence2")
      label = None
      if split != "test":
        _field(path, line_number, fields, 10, "gold_label")
        label = fields[-1].strip()
      examples.append(InputExample(guid, text_a, text_b, label, path, line_number))
    return examples


class MrpcProcessor(DataProcessor):
  """MRPC (GLUE). Header row; label in field 1 (test: index), strings in fields 4 / 5."""

  SPLIT_FILES = {"train": ("train.tsv",), "dev": ("dev.tsv",), "test": ("test.tsv",)}
  FIXED_LABELS = ("0", "1")

  def _read_examples(self, path, split):
    examples = []
    for index, (line_number, fields) in enumerate(_tab_rows(path)[1:]):
      text_a = _field(path, line_number, fields, 3, "#1 String")
      text_b = _field(path, line_number, fields, 4, "#2 String")
      label = None
      if split != "test":
        label = _field(path, line_number, fields, 0, "Quality").strip()
      examples.append(InputExample("%s-%d" % (split, index), text_a, text_b, label,
                                   path, line_number))
    return examples


class XnliProcessor(DataProcessor):
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
    for line_number, fields in _tab_rows(path)[1:]:
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
      examples.append(InputExample(guid, text_a, text_b, label, path, line_number))
    return examples


# Accepted names of each field in a header row or a JSON object, in priority order.
_FIELD_ALIASES = collections.OrderedDict([
    ("label", ("label",)),
    ("text_a", ("text_a", "text", "sentence")),
    ("text_b", ("text_b",)),
    ("id", ("id",)),
])

_COLUMNS_ADVICE = ("the columns are label, text_a (or text, sentence), and optionally "
                   "text_b and id")


def _make_example(path, line_number, split, index, values):
  """Builds an InputExample from the fields of one row or JSON object.

  Args:
    path, line_number: where the record is (error messages).
    split: "train", "dev" or "test".
    index: 0-based position of the example in its split (default guid).
    values: dict field name -> string, or None when the field is absent.

  Returns:
    An InputExample.
  """
  label = values.get("label")
  if label is not None:
    label = label.strip()
  if not label:
    if split != "test":
      raise _line_error(path, line_number, "the label is empty",
                        "give every training and dev example a label")
    label = None
  guid = values.get("id")
  if guid is None or not guid.strip():
    guid = "%s-%d" % (split, index)
  text_b = values.get("text_b") or None
  return InputExample(guid, values["text_a"], text_b, label, path, line_number)


class _HeaderTableProcessor(DataProcessor):
  """Files whose header row names the columns (see _FIELD_ALIASES).

  Header names are matched case-insensitively. Every row must have as many
  fields as the header.
  """

  def _rows(self, path):
    raise NotImplementedError()

  def _read_examples(self, path, split):
    rows = self._rows(path)
    if not rows:
      return []
    header_line, header = rows[0]
    names = [name.strip().lower() for name in header]
    for position, name in enumerate(names):
      if name in names[:position]:
        raise _line_error(path, header_line, "the header names column %s twice" % _quote(name),
                          "give each column a distinct name")
    columns = {}
    for field, aliases in _FIELD_ALIASES.items():
      for alias in aliases:
        if alias in names:
          columns[field] = names.index(alias)
          break
    required = ["text_a"] if split == "test" else ["label", "text_a"]
    for field in required:
      if field not in columns:
        raise _line_error(path, header_line,
                          "the header %s has no %s column" % (_quote(self._join(header)), field),
                          "the first line must name the columns: " + _COLUMNS_ADVICE)
    examples = []
    for line_number, fields in rows[1:]:
      if len(fields) < len(header):
        raise _line_error(path, line_number,
                          "column %s is missing: the row has %s, the header %d: %s"
                          % (_quote(header[len(fields)].strip()), _fields(len(fields)),
                             len(header), _quote(self._join(fields))),
                          self.SHORT_ROW_ADVICE)
      if len(fields) > len(header):
        raise _line_error(path, line_number,
                          "the row has %s, the header only %d: %s"
                          % (_fields(len(fields)), len(header), _quote(self._join(fields))),
                          self.LONG_ROW_ADVICE)
      values = dict((field, fields[column]) for field, column in columns.items())
      examples.append(_make_example(path, line_number, split, len(examples), values))
    return examples


def _fields(count):
  return "1 field" if count == 1 else "%d fields" % count


class TsvProcessor(_HeaderTableProcessor):
  """{train,dev,test}.tsv: plain tab-separated lines with a header row.

  One example per line; fields are split at every tab and a quote character is
  just text (as in Google's TSV readers), so texts cannot contain tabs or
  newlines. Use the csv task for quoted fields. The test file may lack `label`.
  """

  SPLIT_FILES = {"train": ("train.tsv",), "dev": ("dev.tsv",), "test": ("test.tsv",)}
  SHORT_ROW_ADVICE = "give the row one field per column, separated by tabs"
  LONG_ROW_ADVICE = ("remove the tabs inside the text, or use --task_name=csv with quoted "
                     "fields")

  def _rows(self, path):
    return _tab_rows(path)

  def _join(self, fields):
    return "\t".join(fields)


class CsvProcessor(_HeaderTableProcessor):
  """{train,dev,test}.csv with a header row, read by Python's csv module.

  Comma-separated; a field in double quotes may contain commas, newlines and
  doubled quotes (""). The test file may lack `label`.
  """

  SPLIT_FILES = {"train": ("train.csv",), "dev": ("dev.csv",), "test": ("test.csv",)}
  SHORT_ROW_ADVICE = ("give the row one field per column; if a quoted field swallowed the "
                      "following lines, close its double quote")
  LONG_ROW_ADVICE = "put fields that contain commas in double quotes"

  def _rows(self, path):
    return _csv_rows(path)

  def _join(self, fields):
    return ",".join(fields)


def _json_value(path, line_number, obj, keys):
  """Returns the value of the first of `keys` in `obj` as a string, or None.

  Strings are taken as they are and integers are converted; null counts as
  absent; other JSON types are an error.
  """
  for key in keys:
    if key in obj:
      value = obj[key]
      if value is None:
        return None
      if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _line_error(path, line_number,
                          "key %s holds %s, not a string"
                          % (_quote(key), _quote(json.dumps(value, ensure_ascii=False))),
                          "write the value as a JSON string")
      return str(value)
  return None


class JsonlProcessor(DataProcessor):
  """{train,dev,test}.jsonl: one JSON object per line, blank lines skipped.

  Keys as the tsv task's columns: label, text_a (or text, sentence), optional
  text_b and id. Test objects may lack `label`.
  """

  SPLIT_FILES = {"train": ("train.jsonl",), "dev": ("dev.jsonl",), "test": ("test.jsonl",)}
  KEYS = _FIELD_ALIASES

  def _read_examples(self, path, split):
    examples = []
    for line_number, obj in _json_objects(path):
      shown = _quote(json.dumps(obj, ensure_ascii=False))
      values = {}
      for field, keys in self.KEYS.items():
        values[field] = _json_value(path, line_number, obj, keys)
      if values["text_a"] is None:
        raise _line_error(path, line_number,
                          "the object has no %s key: %s" % (" / ".join(self.KEYS["text_a"]), shown),
                          "give every object the text")
      if values["label"] is None and split != "test":
        raise _line_error(path, line_number,
                          "the object has no label key: %s" % shown,
                          "give every training and dev example a label")
      examples.append(_make_example(path, line_number, split, len(examples), values))
    return examples


class _ClueProcessor(JsonlProcessor):
  """CLUE 1.0 classification: {train,dev,test}.json, one JSON object per line.

  Keys label, label_desc, sentence (the text) and, for TNEWS, keywords (unused);
  test.json has an `id` and no label.
  """

  SPLIT_FILES = {"train": ("train.json",), "dev": ("dev.json",), "test": ("test.json",)}
  KEYS = collections.OrderedDict([
      ("label", ("label",)), ("text_a", ("sentence",)), ("text_b", ()), ("id", ("id",))])


class TnewsProcessor(_ClueProcessor):
  """TNEWS: 15 news categories, labels "100".."116" without "105" and "111".

  The fixed label order is the one of CLUE's baseline scripts, so label ids
  match models fine-tuned with them.
  """

  FIXED_LABELS = tuple(str(100 + i) for i in range(17) if i not in (5, 11))


class IflytekProcessor(_ClueProcessor):
  """IFLYTEK: 119 app categories, labels "0".."118" (CLUE's order)."""

  FIXED_LABELS = tuple(str(i) for i in range(119))


class ThucnewsProcessor(DataProcessor):
  """THUCNews: `label<TAB>text` lines, no header, blank lines skipped.

  Files: {train,dev,test}.txt, or else the names of the widely used
  10-class subset, cnews.train.txt, cnews.val.txt (dev), cnews.test.txt. The
  text is everything after the first tab. In the test file a line without a
  tab is a text without a label.
  """

  SPLIT_FILES = {"train": ("train.txt", "cnews.train.txt"),
                 "dev": ("dev.txt", "cnews.val.txt"),
                 "test": ("test.txt", "cnews.test.txt")}

  def _read_examples(self, path, split):
    examples = []
    for line_number, line in _numbered_lines(read_text_file(path)):
      if not line.strip():
        continue
      if "\t" in line:
        label, text = line.split("\t", 1)
        label = label.strip() or None
      elif split == "test":
        label, text = None, line
      else:
        raise _line_error(path, line_number,
                          "no tab between label and text: %s" % _quote(line),
                          "write each example as label<TAB>text")
      if label is None and split != "test":
        raise _line_error(path, line_number, "the label is empty",
                          "write each example as label<TAB>text")
      examples.append(InputExample("%s-%d" % (split, len(examples)), text, None, label,
                                   path, line_number))
    return examples


PROCESSORS = collections.OrderedDict([
    ("cola", ColaProcessor),
    ("mnli", MnliProcessor),
    ("mrpc", MrpcProcessor),
    ("xnli", XnliProcessor),
    ("tsv", TsvProcessor),
    ("csv", CsvProcessor),
    ("jsonl", JsonlProcessor),
    ("tnews", TnewsProcessor),
    ("iflytek", IflytekProcessor),
    ("thucnews", ThucnewsProcessor),
])


def get_processor(task_name):
  """Returns a new processor for `task_name` (case-insensitive).

  Raises:
    UsageError: unknown task name.
  """
  name = (task_name or "").strip().lower()
  if name not in PROCESSORS:
    raise UsageError("unknown --task_name %s; use one of: %s"
                     % (_quote(task_name or ""), ", ".join(PROCESSORS)))
  return PROCESSORS[name]()


# ---------------------------------------------------------------------------
# Label list
# ---------------------------------------------------------------------------

def resolve_label_list(processor, data_dir, output_dir, do_train):
  """The label list of a run, in label-id order.

  Training uses data_dir/labels.txt, else the task's fixed list, else the sorted
  distinct labels of the training file (main() saves it with write_label_list
  once every split has been checked). A run that does not train reuses output_dir/labels.txt
  when it exists: those are the labels the model was trained with.

  Args:
    processor: a DataProcessor.
    data_dir: the data directory.
    output_dir: the model directory.
    do_train: whether this run trains.

  Returns:
    A list of label strings.
  """
  saved_path = os.path.join(output_dir, "labels.txt")
  if not do_train and os.path.isfile(saved_path):
    labels = read_label_file(saved_path)
    _LOGGER.info("label list (%d labels) from %s", len(labels), saved_path)
    return labels
  labels = processor.get_labels(data_dir)
  for label in labels:
    if "\n" in label or "\r" in label:
      raise UsageError("label %s contains a line break; labels must be single-line strings"
                       % _quote(label))
  return labels


def write_label_list(output_dir, labels):
  """Saves the label list a model is trained with as output_dir/labels.txt."""
  if not os.path.isdir(output_dir):
    os.makedirs(output_dir)
  saved_path = os.path.join(output_dir, "labels.txt")
  atomic_write_text(saved_path, "".join(label + "\n" for label in labels))
  _LOGGER.info("label list (%d labels) written to %s", len(labels), saved_path)


def _describe_labels(label_list, limit=10):
  """A short rendering of a label list for error messages."""
  shown = ", ".join(label_list[:limit])
  if len(label_list) > limit:
    shown += ", ... (%d labels)" % len(label_list)
  return "[" + shown + "]"


def _unknown_label_error(example, label_list):
  if example.source_file and example.source_line:
    where = "%s line %d" % (example.source_file, example.source_line)
  else:
    where = "example %s" % example.guid
  return UsageError(
      "%s: label %s is not in the label list %s; fix the label, or list every label in "
      "labels.txt in the data directory and train again"
      % (where, _quote(example.label), _describe_labels(label_list)))


def check_labels(examples, label_list):
  """Raises UsageError for the first example whose label is not in `label_list`."""
  known = set(label_list)
  for example in examples:
    if example.label is not None and example.label not in known:
      raise _unknown_label_error(example, label_list)


# ---------------------------------------------------------------------------
# Featurizing
# ---------------------------------------------------------------------------

def _truncate_seq_pair(tokens_a, tokens_b, max_length):
  """Shortens the longer sequence one token at a time until both fit (in place).

  Dropping from the longer one keeps as much of the shorter text as possible;
  on a tie the second sequence loses a token, as in Google's code.
  """
  while len(tokens_a) + len(tokens_b) > max_length:
    if len(tokens_a) > len(tokens_b):
      tokens_a.pop()
    else:
      tokens_b.pop()


def _convert_example(example, label_map, max_seq_length, tokenizer):
  """convert_single_example, and whether the texts had to be truncated."""
  tokens_a = tokenizer.tokenize(example.text_a)
  tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else []
  num_tokens = len(tokens_a) + len(tokens_b)
  if tokens_b:
    _truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)  # [CLS] [SEP] [SEP]
  else:
    tokens_a = tokens_a[:max_seq_length - 2]  # [CLS] [SEP]
  truncated = len(tokens_a) + len(tokens_b) < num_tokens

  tokens = ["[CLS]"] + tokens_a + ["[SEP]"]
  segment_ids = [0] * len(tokens)
  if tokens_b:
    tokens += tokens_b + ["[SEP]"]
    segment_ids += [1] * (len(tokens_b) + 1)
  input_ids = list(tokenizer.convert_tokens_to_ids(tokens))
  input_mask = [1] * len(input_ids)

  padding = max_seq_length - len(input_ids)
  input_ids += [0] * padding
  input_mask += [0] * padding
  segment_ids += [0] * padding

  if example.label is None:
    label_id = 0
  elif example.label in label_map:
    label_id = label_map[example.label]
  else:
    raise _unknown_label_error(example, sorted(label_map, key=label_map.get))
  features = InputFeatures(input_ids, input_mask, segment_ids, label_id, is_real_example=True)
  return features, truncated


def convert_single_example(example, label_map, max_seq_length, tokenizer):
  """Converts one InputExample into InputFeatures.

  Layout: [CLS] a [SEP] for one text, [CLS] a [SEP] b [SEP] for a pair, with
  segment id 0 up to and including the first [SEP] and 1 after it; the input
  mask is 1 on real tokens; ids, mask and segments are zero-padded. A text_b
  that is empty or has no tokens makes a single-text example, as in Google's code.

  Args:
    example: an InputExample.
    label_map: dict label -> label id.
    max_seq_length: length of the padded sequences (>= 3).
    tokenizer: object with tokenize(text) and convert_tokens_to_ids(tokens).

  Returns:
    InputFeatures; label_id is 0 when the example has no label.

  Raises:
    UsageError: the example's label is not in label_map.
  """
  return _convert_example(example, label_map, max_seq_length, tokenizer)[0]


def serialize_features(features):
  """Serializes InputFeatures as a tf.train.Example (REFERENCE.md 6)."""
  feature_map = {
      "input_ids": multigpu.int64_feature(features.input_ids),
      "input_mask": multigpu.int64_feature(features.input_mask),
      "segment_ids": multigpu.int64_feature(features.segment_ids),
      "label_ids": multigpu.int64_feature([features.label_id]),
      "is_real_example": multigpu.int64_feature([int(features.is_real_example)]),
  }
  example = tf.train.Example(features=tf.train.Features(feature=feature_map))
  # Deterministic: the same features give the same bytes in every process.
  return example.SerializeToString(deterministic=True)


def input_feature_spec(max_seq_length):
  """The tf.FixedLenFeature dict that parses the records write_features writes."""
  return {
      "input_ids": tf.FixedLenFeature([max_seq_length], tf.int64),
      "input_mask": tf.FixedLenFeature([max_seq_length], tf.int64),
      "segment_ids": tf.FixedLenFeature([max_seq_length], tf.int64),
      "label_ids": tf.FixedLenFeature([], tf.int64),
      "is_real_example": tf.FixedLenFeature([], tf.int64),
  }


def _check_vocab(vocab_file):
  """Fails early, in this process, when the vocab cannot serve the tokenizer."""
  tokens = set(line.strip() for _, line in _numbered_lines(read_text_file(vocab_file)))
  for token in ("[CLS]", "[SEP]", "[UNK]"):
    if token not in tokens:
      raise UsageError("%s: the vocab has no %s token; use the vocab.txt that came with the "
                       "checkpoint" % (vocab_file, token))


def _check_max_seq_length(max_seq_length):
  if max_seq_length < 3:
    raise UsageError("--max_seq_length=%d is too small; it must leave room for [CLS] and two "
                     "[SEP] tokens (use at least 3, typically 128)" % max_seq_length)


# State of a featurizing process: the tokenizer is built once per process.
_FEATURIZER = {}


def _init_featurizer(vocab_file, do_lower_case, label_map, max_seq_length):
  """Builds this process's tokenizer (the pool initializer; also used serially).

  It never raises: a pool whose initializer fails restarts the worker forever,
  so the error is kept and raised by the first _featurize_chunk call instead.
  """
  _FEATURIZER.clear()
  _FEATURIZER.update(label_map=label_map, max_seq_length=max_seq_length, error=None)
  try:
    _FEATURIZER["tokenizer"] = tokenization.FullTokenizer(
        vocab_file=vocab_file, do_lower_case=do_lower_case)
  except Exception as e:  # pylint: disable=broad-except
    _FEATURIZER["error"] = e


def _featurize_chunk(examples):
  """Featurizes a list of examples.

  Returns:
    (list of serialized tf.train.Examples in input order, number of examples
    whose texts were truncated).
  """
  if _FEATURIZER["error"] is not None:
    raise _FEATURIZER["error"]
  tokenizer = _FEATURIZER["tokenizer"]
  label_map = _FEATURIZER["label_map"]
  max_seq_length = _FEATURIZER["max_seq_length"]
  records = []
  num_truncated = 0
  for example in examples:
    features, truncated = _convert_example(example, label_map, max_seq_length, tokenizer)
    records.append(serialize_features(features))
    num_truncated += int(truncated)
  return records, num_truncated


def _format_duration(seconds):
  seconds = int(round(seconds))
  if seconds >= 3600:
    return "%dh%02dm" % (seconds // 3600, seconds % 3600 // 60)
  if seconds >= 60:
    return "%dm%02ds" % (seconds // 60, seconds % 60)
  return "%ds" % seconds


class _Progress(object):
  """Logs "n/total, rate, ETA" at most every PROGRESS_INTERVAL_SECONDS."""

  def __init__(self, total, what):
    self._total = total
    self._what = what
    self._start = time.time()
    self._last_log = self._start

  def update(self, done):
    now = time.time()
    if now - self._last_log < PROGRESS_INTERVAL_SECONDS:
      return
    self._last_log = now
    rate = done / max(now - self._start, 1e-9)
    _LOGGER.info("%s: %d/%d examples (%.0f%%), %.0f examples/s, ETA %s", self._what, done,
                 self._total, 100.0 * done / self._total, rate,
                 _format_duration((self._total - done) / max(rate, 1e-9)))

  def elapsed(self):
    return time.time() - self._start


def _chunks(items, size):
  for start in range(0, len(items), size):
    yield items[start:start + size]


def write_features(examples, label_list, max_seq_length, vocab_file, do_lower_case,
                   output_file, num_workers=None, pool_threshold=POOL_THRESHOLD):
  """Featurizes examples into a TFRecord file, written through a temp file and a rename.

  Inputs of `pool_threshold` examples or more are tokenized by a pool of
  `num_workers` processes (the tokenizer is built once per worker, examples
  travel in chunks, records come back in input order); smaller ones in this
  process. Both give byte-identical files.

  Args:
    examples: list of InputExample.
    label_list: the labels in label-id order.
    max_seq_length: sequence length of the records.
    vocab_file: the WordPiece vocab.
    do_lower_case: whether the tokenizer lower-cases.
    output_file: the TFRecord file to write.
    num_workers: worker processes; None: one per available CPU.
    pool_threshold: smallest number of examples that uses the pool.

  Returns:
    The number of records written.

  Raises:
    UsageError: unknown label, unusable vocab or too small max_seq_length.
  """
  _check_max_seq_length(max_seq_length)
  _check_vocab(vocab_file)
  check_labels(examples, label_list)
  label_map = dict((label, index) for index, label in enumerate(label_list))
  init_args = (vocab_file, do_lower_case, label_map, max_seq_length)
  if num_workers is None:
    num_workers = multigpu.available_cpus()
  use_pool = num_workers > 1 and len(examples) >= max(pool_threshold, 1)
  # Chunks: big enough to amortize pickling, small enough to balance the workers.
  chunk_size = max(1, min(512, len(examples) // (8 * num_workers))) if use_pool else 512
  what = "featurizing %s" % os.path.basename(output_file)

  progress = _Progress(len(examples), what)
  num_truncated = [0]

  def records(record_chunks):
    num_done = 0
    for chunk_records, chunk_truncated in record_chunks:
      for record in chunk_records:
        yield record
      num_done += len(chunk_records)
      num_truncated[0] += chunk_truncated
      progress.update(num_done)

  pool = None
  try:
    if use_pool:
      _LOGGER.info("%s: %d examples with %d processes", what, len(examples), num_workers)
      pool = multiprocessing.Pool(num_workers, initializer=_init_featurizer, initargs=init_args)
      record_chunks = pool.imap(_featurize_chunk, _chunks(examples, chunk_size))
    else:
      _init_featurizer(*init_args)
      record_chunks = (_featurize_chunk(chunk) for chunk in _chunks(examples, chunk_size))
    num_written = multigpu.write_records_atomically(output_file, records(record_chunks))
  finally:
    if pool is not None:
      pool.terminate()
      pool.join()
    _FEATURIZER.clear()
  num_truncated = num_truncated[0]
  _LOGGER.info("%s: wrote %d records to %s in %.1fs; %d examples (%.1f%%) were longer than "
               "max_seq_length=%d and truncated", what, num_written, output_file,
               progress.elapsed(), num_truncated, 100.0 * num_truncated / max(num_written, 1),
               max_seq_length)
  return num_written


# ---------------------------------------------------------------------------
# Feature cache
# ---------------------------------------------------------------------------

def _file_sha256(path):
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.digest()


def features_cache_key(split, examples_file_paths, label_list, max_seq_length, vocab_file,
                       do_lower_case, task_name):
  """The sha256 (hex) of everything the records of a split depend on.

  The bytes of the data files, the vocab and tokenization.py, and the settings:
  split, task name, max_seq_length, label list, do_lower_case and
  FEATURE_FORMAT_VERSION.
  """
  settings = json.dumps({
      "format_version": FEATURE_FORMAT_VERSION,
      "split": split,
      "task_name": task_name.lower(),
      "max_seq_length": int(max_seq_length),
      "label_list": list(label_list),
      "do_lower_case": bool(do_lower_case),
  }, sort_keys=True, ensure_ascii=False)
  digest = hashlib.sha256()
  # Each part is hashed on its own first, so no two inputs run together.
  digest.update(hashlib.sha256(settings.encode("utf-8")).digest())
  for path in list(examples_file_paths) + [vocab_file]:
    if not os.path.isfile(path):
      raise UsageError("%s: file not found; check the path" % path)
    digest.update(_file_sha256(path))
  digest.update(_file_sha256(os.path.splitext(tokenization.__file__)[0] + ".py"))
  return digest.hexdigest()


_CACHE_NAME = re.compile(r"^(?P<split>.+)-(?P<key>[0-9a-f]{16})\.(tf_record|json)$")


def _read_cache_info(info_path, record_path, key):
  """The cache's info dict when it is complete and made for `key`, else None."""
  if not (os.path.isfile(info_path) and os.path.isfile(record_path)):
    return None
  try:
    with open(info_path, "r", encoding="utf-8") as f:
      info = json.load(f)
  except (OSError, ValueError):
    return None
  if (not isinstance(info, dict) or info.get("key") != key
      or info.get("record_bytes") != os.path.getsize(record_path)
      or not isinstance(info.get("num_examples"), int)):
    return None
  return info


def _remove_stale_caches(output_dir, split, keep_names):
  """Deletes this split's cache files made for other inputs (they are never reused)."""
  for name in os.listdir(output_dir):
    match = _CACHE_NAME.match(name)
    if match and match.group("split") == split and name not in keep_names:
      _LOGGER.info("removing stale cached features %s", os.path.join(output_dir, name))
      os.remove(os.path.join(output_dir, name))


def cached_features(split, examples_file_paths, examples, label_list, max_seq_length,
                    vocab_file, do_lower_case, task_name, output_dir, num_workers=None,
                    pool_threshold=POOL_THRESHOLD):
  """Returns the TFRecord file of a split, featurizing only when no valid cache exists.

  The cache is output_dir/<split>-<key>.tf_record, with <split>-<key>.json next to
  it holding the example count; <key> starts the sha256 of features_cache_key.
  Both are written atomically, the .json last, so a crash never leaves a cache
  that looks valid. Older caches of the same split are deleted.

  Args:
    split: cache name prefix ("train", "dev", "test").
    examples_file_paths: the data files the examples come from
      (processor.input_files(data_dir, split)).
    examples: list of InputExample, or a function of no arguments that returns
      it; the function is called only when the cache has to be built.
    label_list, max_seq_length, vocab_file, do_lower_case: as in write_features.
    task_name: the task (part of the key).
    output_dir: where the cache lives (created if needed).
    num_workers, pool_threshold: as in write_features.

  Returns:
    (tfrecord_path, num_examples).
  """
  key = features_cache_key(split, examples_file_paths, label_list, max_seq_length,
                           vocab_file, do_lower_case, task_name)
  base_name = "%s-%s" % (split, key[:16])
  record_path = os.path.join(output_dir, base_name + ".tf_record")
  info_path = os.path.join(output_dir, base_name + ".json")
  info = _read_cache_info(info_path, record_path, key)
  if info is not None:
    _LOGGER.info("reusing cached %s features %s (%d examples)", split, record_path,
                 info["num_examples"])
    return record_path, info["num_examples"]

  if callable(examples):
    examples = examples()
  if not os.path.isdir(output_dir):
    os.makedirs(output_dir)
  if os.path.exists(info_path):
    os.remove(info_path)
  num_examples = write_features(examples, label_list, max_seq_length, vocab_file,
                                do_lower_case, record_path, num_workers=num_workers,
                                pool_threshold=pool_threshold)
  info = {
      "key": key,
      "num_examples": num_examples,
      "record_bytes": os.path.getsize(record_path),
      "split": split,
      "task_name": task_name,
      "max_seq_length": max_seq_length,
      "do_lower_case": bool(do_lower_case),
      "num_labels": len(label_list),
      "data_files": [os.path.abspath(path) for path in examples_file_paths],
      "vocab_file": os.path.abspath(vocab_file),
      "format_version": FEATURE_FORMAT_VERSION,
  }
  atomic_write_text(info_path, json.dumps(info, indent=2, sort_keys=True) + "\n")
  _remove_stale_caches(output_dir, split, (base_name + ".tf_record", base_name + ".json"))
  return record_path, num_examples


# ---- model, flags and main: below ----


# ---------------------------------------------------------------------------
# The model head
# ---------------------------------------------------------------------------

def create_model_fn(bert_config, num_labels):
  """Returns model_fn(features, is_training) for multigpu: BERT + a softmax classifier.

  The head's variables are Google's top-level `output_weights` [num_labels, hidden] and
  `output_bias` [num_labels], so checkpoints load in Google's run_classifier.py.
  """
  def model_fn(features, is_training):
    model = modeling.BertModel(
        config=bert_config, is_training=is_training, input_ids=features["input_ids"],
        input_mask=features["input_mask"], token_type_ids=features["segment_ids"])
    pooled = model.get_pooled_output()  # [batch, hidden]
    output_weights = tf.get_variable(
        "output_weights", [num_labels, bert_config.hidden_size],
        initializer=tf.truncated_normal_initializer(stddev=0.02))
    output_bias = tf.get_variable("output_bias", [num_labels],
                                  initializer=tf.zeros_initializer())
    if is_training:
      pooled = modeling.dropout(pooled, bert_config.hidden_dropout_prob)
    logits = tf.nn.bias_add(tf.matmul(pooled, output_weights, transpose_b=True),
                            output_bias)  # [batch, num_labels]
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot_labels = tf.one_hot(features["label_ids"], depth=num_labels, dtype=tf.float32)
    per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)  # [batch]
    return {"loss": tf.reduce_mean(per_example_loss),
            "per_example_loss": per_example_loss,
            "probabilities": tf.exp(log_probs),
            "label_ids": features["label_ids"]}
  return model_fn


# ---------------------------------------------------------------------------
# Metrics and output files
# ---------------------------------------------------------------------------

def confusion_matrix(gold_ids, predicted_ids, num_labels):
  """[num_labels, num_labels] counts; rows are gold labels, columns predictions."""
  matrix = np.zeros([num_labels, num_labels], dtype=np.int64)
  np.add.at(matrix, (gold_ids, predicted_ids), 1)
  return matrix


def classification_metrics(outputs, label_list):
  """Accuracy, macro-F1, loss and the per-class report from per-example eval outputs."""
  gold = outputs["label_ids"]
  predicted = np.argmax(outputs["probabilities"], axis=-1)
  matrix = confusion_matrix(gold, predicted, len(label_list))
  true_positives = np.diag(matrix).astype(np.float64)
  predicted_counts = matrix.sum(axis=0)
  support = matrix.sum(axis=1)
  precision = np.divide(true_positives, predicted_counts,
                        out=np.zeros_like(true_positives), where=predicted_counts > 0)
  recall = np.divide(true_positives, support, out=np.zeros_like(true_positives),
                     where=support > 0)
  denominator = precision + recall
  f1 = np.divide(2 * precision * recall, denominator, out=np.zeros_like(true_positives),
                 where=denominator > 0)
  # Macro-F1 over the classes present in gold or predictions, as scikit-learn's
  # labels=present classes would; absent classes would only add zeros.
  present = (support + predicted_counts) > 0
  loss = float(np.mean(outputs["per_example_loss"]))
  metrics = {
      "eval_accuracy": float(np.mean(predicted == gold)),
      "macro_f1": float(np.mean(f1[present])) if present.any() else 0.0,
      "eval_loss": loss,
      "loss": loss,
  }
  report = {
      "labels": list(label_list),
      "per_class": {label: {"precision": float(precision[i]), "recall": float(recall[i]),
                            "f1": float(f1[i]), "support": int(support[i])}
                    for i, label in enumerate(label_list)},
      "confusion_matrix": matrix.tolist(),
      "num_examples": int(len(gold)),
  }
  return metrics, report


def display_width(text):
  """Columns `text` takes in a terminal: wide (CJK) characters take two, marks none."""
  width = 0
  for char in text:
    if unicodedata.combining(char):
      continue
    width += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
  return width


def _pad(text, width, right=False):
  """`text` padded with spaces to `width` display columns (Chinese labels line up)."""
  padding = " " * max(0, width - display_width(text))
  return padding + text if right else text + padding


def format_eval_report(metrics, report):
  """A plain-text report for a person: per-class figures and the confusion matrix."""
  labels = report["labels"]
  width = max([display_width(label) for label in labels] + [8])
  lines = ["examples: %d   accuracy: %.4f   macro-F1: %.4f   loss: %.4f" % (
      report["num_examples"], metrics["eval_accuracy"], metrics["macro_f1"],
      metrics["eval_loss"]), ""]
  lines.append("%s  %9s  %9s  %9s  %7s" % (_pad("label", width), "precision", "recall", "f1",
                                           "support"))
  for label in labels:
    row = report["per_class"][label]
    lines.append("%s  %9.4f  %9.4f  %9.4f  %7d" % (
        _pad(label, width), row["precision"], row["recall"], row["f1"], row["support"]))
  lines += ["", "confusion matrix (rows: gold, columns: predicted)"]
  lines.append("%s  %s" % (_pad("", width), "  ".join(_pad(l, width, right=True)
                                                       for l in labels)))
  for label, row in zip(labels, report["confusion_matrix"]):
    lines.append("%s  %s" % (_pad(label, width), "  ".join(
        _pad(str(count), width, right=True) for count in row)))
  return "\n".join(lines) + "\n"


def _one_line(text):
  return " ".join((text or "").split())


def write_eval_outputs(output_dir, metrics, report):
  atomic_write_text(os.path.join(output_dir, "eval_results.txt"),
                    multigpu.format_key_values(metrics))
  atomic_write_text(os.path.join(output_dir, "eval_report.txt"),
                    format_eval_report(metrics, report))
  atomic_write_text(os.path.join(output_dir, "eval_report.json"),
                    json.dumps(dict(report, metrics=metrics), ensure_ascii=False, indent=2)
                    + "\n")


def write_predict_outputs(output_dir, examples, probabilities, label_list):
  """predict.txt (label names), test_results.tsv (Google's) and predict_detail.tsv."""
  predicted = np.argmax(probabilities, axis=-1)
  atomic_write_text(os.path.join(output_dir, "predict.txt"),
                    "".join(label_list[i] + "\n" for i in predicted))
  atomic_write_text(os.path.join(output_dir, "test_results.tsv"), "".join(
      "\t".join(str(p) for p in row) + "\n" for row in probabilities))
  has_text_b = any(e.text_b is not None for e in examples)
  has_gold = any(e.label is not None for e in examples)
  header = ["id", "text_a"] + (["text_b"] if has_text_b else []) + [
      "predicted_label", "probability"] + (["gold_label"] if has_gold else [])
  rows = ["\t".join(header)]
  for example, label_id, row in zip(examples, predicted, probabilities):
    fields = [_one_line(str(example.guid)), _one_line(example.text_a)]
    if has_text_b:
      fields.append(_one_line(example.text_b))
    fields += [label_list[label_id], "%.6f" % row[label_id]]
    if has_gold:
      fields.append(_one_line(example.label))
    rows.append("\t".join(fields))
  atomic_write_text(os.path.join(output_dir, "predict_detail.tsv"), "\n".join(rows) + "\n")


# ---------------------------------------------------------------------------
# Flags: Google's run_classifier.py flags with their defaults, then ours
# ---------------------------------------------------------------------------

flags = tf.flags
FLAGS = flags.FLAGS

flags.DEFINE_string("data_dir", None, "Directory with the task's data files.")
flags.DEFINE_string("bert_config_file", None, "bert_config.json of the pre-trained model.")
flags.DEFINE_string("task_name", None, "Task: " + ", ".join(sorted(PROCESSORS)) + ".")
flags.DEFINE_string("vocab_file", None, "vocab.txt of the pre-trained model.")
flags.DEFINE_string("output_dir", None, "Checkpoints and every output file go here.")
flags.DEFINE_string("init_checkpoint", None, "Pre-trained checkpoint, e.g. "
                    "chinese_L-12_H-768_A-12/bert_model.ckpt.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case the input (True for uncased and Chinese "
                  "models).")
flags.DEFINE_integer("max_seq_length", 128, "Tokens per example after WordPiece, with [CLS] "
                     "and [SEP]; longer inputs are truncated, shorter ones padded.")
flags.DEFINE_bool("do_train", False, "Train on the training set.")
flags.DEFINE_bool("do_eval", False, "Evaluate on the dev set (at every checkpoint when "
                  "training too).")
flags.DEFINE_bool("do_predict", False, "Predict the test set: predict.txt, test_results.tsv, "
                  "predict_detail.tsv.")
flags.DEFINE_integer("train_batch_size", 32, "Training batch size PER TOWER.")
flags.DEFINE_integer("eval_batch_size", 8, "Eval batch size per tower.")
flags.DEFINE_integer("predict_batch_size", 8, "Predict batch size per tower.")
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
flags.DEFINE_float("num_train_epochs", 3.0, "Epochs over the training set.")
flags.DEFINE_float("warmup_proportion", 0.1, "Share of the steps spent warming up.")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Save (and evaluate) every this many "
                     "steps.")

multigpu.define_multigpu_flags()
flags.DEFINE_enum("best_metric", "accuracy", ["accuracy", "macro_f1"], "With --do_train and "
                  "--do_eval: the dev metric whose best checkpoint is kept in output_dir/best"
                  "; eval and predict use output_dir/best whenever it exists.")
flags.DEFINE_integer("early_stopping_patience", 0, "Stop after this many evaluations without "
                     "a better --best_metric (0: never).")
flags.DEFINE_integer("num_workers", 0, "Processes for featurizing (0: all cores).")


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------

def check_flags():
  """Validates flags and files before anything is written. Returns the BertConfig."""
  if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
    raise UsageError("Nothing to do: pass at least one of --do_train, --do_eval, "
                     "--do_predict.")
  for name in ("data_dir", "output_dir", "task_name"):
    if not getattr(FLAGS, name):
      raise UsageError("--%s is required." % name)
  if not tf.gfile.IsDirectory(FLAGS.data_dir):
    raise UsageError("--data_dir=%s: no such directory." % FLAGS.data_dir)
  multigpu.require_file("bert_config_file", FLAGS.bert_config_file)
  multigpu.require_file("vocab_file", FLAGS.vocab_file)
  if FLAGS.early_stopping_patience < 0:
    raise UsageError("--early_stopping_patience=%d: use 0 (never stop early) or more." %
                     FLAGS.early_stopping_patience)
  multigpu.check_run_flags(FLAGS, ("train_batch_size", "eval_batch_size", "predict_batch_size",
                                   "save_checkpoints_steps", "log_steps", "accumulation_steps"))
  try:
    tokenization.validate_case_matches_checkpoint(FLAGS.do_lower_case, FLAGS.init_checkpoint)
  except ValueError as e:
    raise UsageError(str(e))
  return multigpu.load_bert_config(FLAGS.bert_config_file, FLAGS.max_seq_length)


def main(_):
  bert_config = check_flags()
  multigpu.load_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case, bert_config,
                          FLAGS.bert_config_file)
  processor = get_processor(FLAGS.task_name)

  # Read and validate every split asked for before anything is trained or written.
  splits = {}
  if FLAGS.do_train:
    splits["train"] = processor.get_train_examples(FLAGS.data_dir)
  if FLAGS.do_eval:
    splits["dev"] = processor.get_dev_examples(FLAGS.data_dir)
  if FLAGS.do_predict:
    splits["test"] = processor.get_test_examples(FLAGS.data_dir)
  label_list = resolve_label_list(processor, FLAGS.data_dir, FLAGS.output_dir, FLAGS.do_train)
  for examples in splits.values():
    check_labels(examples, label_list)
  if FLAGS.do_train:
    write_label_list(FLAGS.output_dir, label_list)

  # Featurize before TensorFlow starts its runtime: the worker pool forks.
  records = {}
  for split, examples in splits.items():
    records[split] = cached_features(
        split, processor.input_files(FLAGS.data_dir, split), examples, label_list,
        FLAGS.max_seq_length, FLAGS.vocab_file, FLAGS.do_lower_case, FLAGS.task_name,
        FLAGS.output_dir, num_workers=FLAGS.num_workers or None)[0]
  plan = multigpu.plan_devices(FLAGS.n_gpus, FLAGS.towers_per_gpu, FLAGS.variables_on_gpu)
  towers = plan.num_towers
  spec = input_feature_spec(FLAGS.max_seq_length)
  model_fn = create_model_fn(bert_config, len(label_list))
  eval_batch = FLAGS.eval_batch_size * towers

  def make_eval_dataset():
    return multigpu.make_dataset([records["dev"]], spec, eval_batch, is_training=False)

  def dev_metrics(outputs):
    return classification_metrics(outputs, label_list)[0]

  if FLAGS.do_train:
    micro_batch = FLAGS.train_batch_size * towers
    update_batch = micro_batch * FLAGS.accumulation_steps
    num_train_steps = int(len(splits["train"]) * FLAGS.num_train_epochs / update_batch)
    num_warmup_steps = int(num_train_steps * FLAGS.warmup_proportion)
    if num_train_steps < 1:
      raise UsageError("%d training examples x %g epochs is less than one global batch of %d: "
                       "lower --train_batch_size or raise --num_train_epochs." %
                       (len(splits["train"]), FLAGS.num_train_epochs, update_batch))
    tf.logging.info(
        "%d training examples, %d towers x per-tower batch %d x %d accumulation step(s) = "
        "global batch %d; %g epochs = %d steps, %d warmup steps.", len(splits["train"]),
        towers, FLAGS.train_batch_size, FLAGS.accumulation_steps, update_batch,
        FLAGS.num_train_epochs, num_train_steps, num_warmup_steps)
    eval_spec = None
    if FLAGS.do_eval:
      metric_key = {"accuracy": "eval_accuracy", "macro_f1": "macro_f1"}[FLAGS.best_metric]
      eval_spec = multigpu.EvalSpec(make_eval_dataset, eval_batch, dev_metrics, metric_key,
                                    FLAGS.early_stopping_patience)
    shuffle_buffer = min(len(splits["train"]), 100000)
    multigpu.train(
        plan, model_fn,
        lambda skip: multigpu.make_dataset([records["train"]], spec, micro_batch, True,
                                           FLAGS.random_seed, shuffle_buffer, skip),
        FLAGS.output_dir, num_train_steps, num_warmup_steps, FLAGS.learning_rate, micro_batch,
        FLAGS.optimizer, FLAGS.init_checkpoint, FLAGS.save_checkpoints_steps,
        FLAGS.keep_checkpoint_max, FLAGS.log_steps, FLAGS.random_seed,
        FLAGS.accumulation_steps, eval_spec)

  if not (FLAGS.do_eval or FLAGS.do_predict):
    return
  checkpoint, why = multigpu.checkpoint_for_inference(FLAGS.output_dir, FLAGS.init_checkpoint,
                                                       best_subdir="best")
  tf.logging.info("Evaluating/predicting with %s (%s).", checkpoint, why)
  if FLAGS.do_eval:
    outputs = multigpu.infer(plan, model_fn, make_eval_dataset, eval_batch, checkpoint)
    metrics, report = classification_metrics(outputs, label_list)
    metrics["global_step"] = multigpu.checkpoint_global_step(checkpoint)
    write_eval_outputs(FLAGS.output_dir, metrics, report)
    tf.logging.info("eval_accuracy = %.4f  macro_f1 = %.4f  (%s)", metrics["eval_accuracy"],
                    metrics["macro_f1"], os.path.join(FLAGS.output_dir, "eval_results.txt"))
  if FLAGS.do_predict:
    predict_batch = FLAGS.predict_batch_size * towers
    outputs = multigpu.infer(
        plan, model_fn,
        lambda: multigpu.make_dataset([records["test"]], spec, predict_batch, is_training=False),
        predict_batch, checkpoint)
    if len(outputs["probabilities"]) != len(splits["test"]):
      raise AssertionError("%d predictions for %d test examples" % (
          len(outputs["probabilities"]), len(splits["test"])))
    write_predict_outputs(FLAGS.output_dir, splits["test"], outputs["probabilities"],
                          label_list)
    tf.logging.info("Wrote %d predictions to %s", len(splits["test"]),
                    os.path.join(FLAGS.output_dir, "predict.txt"))


if __name__ == "__main__":
  multigpu.run_main(main)
