# coding=utf-8
"""The classifier's data: task processors, the label list, featurizing and the feature cache.

The task processors turn data files into `InputExample`s; featurizing turns them
into TFRecord files (docs/FORMATS.md 6) that are cached in output_dir and reused
while their inputs are unchanged. run_classifier_mgpu.py is the script that uses it.

Supported tasks (`--task_name`, case-insensitive; files live in --data_dir):

  cola, mnli, mrpc, xnli  Google's GLUE/XNLI processors, same files and columns.
  tsv, csv                {train,dev,test}.tsv / .csv with a header row.
  jsonl                   {train,dev,test}.jsonl, one JSON object per line.
  tnews, iflytek, afqmc,  CLUE: {train,dev,test}.json (OCNLI: train.50k.json first), one
  cmnli, ocnli, csl,      JSON object per line, mapped as docs/FORMATS.md 12 says.
  cluewsc2020
  thucnews                `label<TAB>text` lines, no header:
                          {train,dev,test}.txt or cnews.{train,val,test}.txt.

Label list: data_dir/labels.txt (one label per line), else the task's fixed
list, else the sorted labels of the training file; training saves it to
output_dir/labels.txt, which runs without --do_train reuse. With --multi_label (tsv, csv,
jsonl) an example's label is a tuple of labels and label_ids its multi-hot vector.

Texts longer than max_seq_length are truncated (Google's), keep head and tail, or are cut
into windows (FeatureOptions.long_text; windowed records, docs/FORMATS.md 6).

Features are cached in output_dir as <split>-<hash>.tf_record; the hash covers
the data files, the vocab, tokenization.py and the settings, so a cache is
reused only while all of them are unchanged.

Bad input raises `UsageError` with a one-line message that names the file, the
line (1-based, as an editor shows it) and the value, and says what to do.
"""

import collections
import csv
import hashlib
import io
import json
import multiprocessing
import os
import re
import time

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu.data import length_grouping
from bert_mgpu.classifier import long_text
from bert_mgpu.data import processes
from bert_mgpu.data import tfrecord_io
import tokenization
from bert_mgpu.errors import UsageError, write_error
from bert_mgpu.data.output_files import atomic_write_text
from bert_mgpu.data.text_files import (DuplicateKeyError, find_surrogate, line_error, parse_json,  # pylint: disable=g-multiple-import
                        read_text_file)

# Child of TensorFlow's logger: the messages appear next to tf.logging's and
# follow tf.logging.set_verbosity().
_LOGGER = tf.get_logger().getChild("classifier_data")

# Bump whenever the processors or the featurizing change what ends up in a
# TFRecord file: cached features written by older code are then rebuilt.
FEATURE_FORMAT_VERSION = 2  # 2: multi-label records (label_ids multi-hot)

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
               source_line=None, raw_id=None):
    """Constructs an InputExample.

    Args:
      guid: unique id of the example (the file's `id` column, or split-index).
      text_a: untokenized text of the first sequence.
      text_b: untokenized text of the second sequence, or None for single
        sequence tasks.
      label: the label string, or None when the example has none (test files).
      source_file: path of the file the example was read from (error messages).
      source_line: 1-based line of the example in `source_file`.
      raw_id: the id as the data file holds it (a JSON int or string), or None: CLUE
        submissions write it back in its own JSON type (clue_submission.py).
    """
    self.guid = guid
    self.text_a = text_a
    self.text_b = text_b
    self.label = label
    self.source_file = source_file
    self.source_line = source_line
    self.raw_id = raw_id

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


FeatureOptions = collections.namedtuple(
    "FeatureOptions", ["literal_special_tokens", "multi_label", "label_separator",
                       "long_text", "head_tokens", "doc_stride", "max_windows"],
    defaults=(False, False, ",", "truncate", None, 64, 8))
FeatureOptions.__doc__ = """Settings beyond the vocab, case and length that change the records.

Fields:
  literal_special_tokens: the tokenizer reads [MASK], [SEP]... written in the text as single
    tokens (tokenization.FullTokenizer).
  multi_label: examples hold label tuples; label_ids is their multi-hot [num_labels].
  label_separator: the separator the label fields were split at (multi_label only).
  long_text: a text longer than max_seq_length is cut at its end ("truncate", Google's), keeps
    its head and tail ("head_tail"), or is read whole in windows ("windows": windowed
    records, docs/FORMATS.md 6).
  head_tokens: head_tail: tokens kept from the start (None: a quarter of the room).
  doc_stride, max_windows: windows: tokens between window starts, and the most windows kept
    per text.
"""


def options_settings(options):
  """The FeatureOptions that are not the default, as a dict: what the feature cache key and
  model_settings.json add, so that keys and settings files of runs without them stay as
  they were."""
  settings = {}
  if options.literal_special_tokens:
    settings["literal_special_tokens"] = True
  if options.multi_label:
    settings.update(multi_label=True, label_separator=options.label_separator)
  if options.long_text == "head_tail":
    settings.update(long_text="head_tail", head_tokens=options.head_tokens)
  elif options.long_text == "windows":
    settings.update(long_text="windows", doc_stride=options.doc_stride,
                    max_windows=options.max_windows)
  return settings


# ---------------------------------------------------------------------------
# Reading files: UTF-8 with line-numbered errors
# ---------------------------------------------------------------------------

def _quote(value):
  """Quotes a value for an error message, shortened when long."""
  text = value if isinstance(value, str) else str(value)
  if len(text) > _MAX_QUOTED_CHARS:
    text = text[:_MAX_QUOTED_CHARS] + "..."
  return repr(text)


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


def text_lines(path):
  """(line number, line) of a line-per-record file: _numbered_lines of read_text_file.

  A carriage return left inside a line is refused: a file with old Mac (CR-only)
  line ends would otherwise be one long line, and a headerless format (THUCNews,
  CoLA) would merge all its rows into one example. Google's readers, which open
  files with universal newlines, would have split the line there.
  """
  for line_number, line in _numbered_lines(read_text_file(path)):
    if "\r" in line:
      raise line_error(
          path, line_number,
          "carriage return (\\r) inside the line, at character %d: %s"
          % (line.index("\r") + 1, _quote(line)),
          "the file has CR (old Mac) line ends or a stray CR; save it with \\n line ends "
          "and remove CRs from the texts")
    yield line_number, line


def _tab_rows(path):
  """Reads a tab-separated file into (line number, fields) for non-blank lines.

  Quote characters are ordinary text, as in Google's readers (quotechar=None).
  """
  rows = []
  for line_number, line in text_lines(path):
    if line.strip():
      rows.append((line_number, line.split("\t")))
  return rows


def _csv_rows(path):
  """Reads a CSV file with Python's csv module into (line number, fields).

  A quoted field may hold commas, quotes ("") and newlines; the line number is
  the line where the record starts. Blank lines are skipped.

  The csv module reads in strict mode: a double quote that is never closed
  (which would swallow every following row into one field) and text after a
  closing quote (whose quotes would be dropped) are errors. Records that do span
  several lines are counted in a warning, with the first one's lines, since a
  quote closed too late merges rows the same way.
  """
  text = read_text_file(path)
  # The default limit (128 KiB per field) is too small for whole documents.
  csv.field_size_limit(2 ** 31 - 1)
  reader = csv.reader(io.StringIO(text, newline=""), strict=True)
  rows = []
  next_line = 1
  multi_line_records = []
  while True:
    start_line = next_line
    try:
      fields = next(reader)
    except StopIteration:
      break
    except csv.Error as e:
      raise _csv_error(path, start_line, reader.line_num, text, e)
    next_line = reader.line_num + 1
    if fields and any(field.strip() for field in fields):
      rows.append((start_line, fields))
      if reader.line_num > start_line:
        multi_line_records.append((start_line, reader.line_num))
  if multi_line_records:
    first, last = multi_line_records[0]
    _LOGGER.warning(
        "%s: %d record(s) hold line breaks inside double-quoted fields (the first spans lines "
        "%d-%d); if that is not intended, a double quote is closed too late there",
        path, len(multi_line_records), first, last)
  return rows


def _csv_error(path, start_line, error_line, text, error):
  """The UsageError for a csv.Error in the record that starts on `start_line`."""
  message = str(error)
  if "unexpected end of data" in message or "EOF" in message:
    num_lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    return line_error(
        path, start_line,
        "a double quote in this record is never closed, so the rest of the file (lines %d-%d) "
        "would be read as one field" % (start_line, max(start_line, num_lines)),
        "close the quoted field (a quote inside it is written \"\") or remove the stray "
        "quote")
  if "expected after" in message:
    return line_error(
        path, error_line,
        "text follows the closing double quote of a quoted field%s (%s)"
        % ("" if error_line == start_line else
           " (in the record that starts on line %d)" % start_line, message),
        "put the whole field in double quotes and write a quote inside it as \"\"")
  return line_error(path, start_line, "cannot parse the CSV record (%s)" % message,
                     "check the quoting of this record")


def _json_objects(path):
  """Reads one JSON object per line into (line number, dict); blank lines skipped."""
  objects = []
  for line_number, line in _numbered_lines(read_text_file(path)):
    if not line.strip():
      continue
    try:
      value = parse_json(line)
    except DuplicateKeyError as e:
      raise line_error(path, line_number,
                        "the object has the key %s twice: %s" % (_quote(e.args[0]), _quote(line)),
                        "give each key once (JSON readers keep only one of the values)")
    except RecursionError:
      raise line_error(path, line_number, "the JSON is nested too deeply: %s" % _quote(line),
                        "write one flat JSON object per line")
    except ValueError as e:
      raise line_error(path, line_number, "invalid JSON (%s): %s" % (e, _quote(line)),
                        "write one JSON object per line")
    if not isinstance(value, dict):
      raise line_error(path, line_number, "expected a JSON object, got %s" % _quote(line),
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
  for line_number, line in text_lines(path):
    label = line.strip()
    if not label:
      continue
    if label in first_seen:
      raise line_error(path, line_number,
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

  def __init__(self, label_separator=None):
    """Args:
      label_separator: None: one label per example (a string). Else multi-label: each
        example's label is a tuple of labels, read from a field split at this string.
    """
    self.label_separator = label_separator
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
      if os.path.isdir(path):
        raise UsageError("%s is a directory, not the %s file of task %s; put the file there "
                         "or check --data_dir" % (path, split, self.name))
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
    if os.path.exists(labels_path):
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
    examples = self.get_train_examples(data_dir)
    if self.label_separator is not None:
      return sorted(set(label for example in examples for label in example.label))
    return sorted(set(example.label for example in examples))

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
    raise line_error(path, line_number,
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
    ("text_a", ("text_a", "text", "sentence", "sentence1")),
    ("text_b", ("text_b", "sentence2")),
    ("id", ("id",)),
])

_COLUMNS_ADVICE = ("the columns are label, text_a (or text, sentence, sentence1), and "
                   "optionally text_b (or sentence2) and id")


def label_set(label, separator):
  """The labels of a multi-label field: a string split at `separator`, or a sequence (a JSON
  list); each label stripped, empty ones dropped, repeats once, in order of appearance."""
  pieces = label.split(separator) if isinstance(label, str) else label
  labels = []
  for piece in pieces:
    piece = piece.strip()
    if piece and piece not in labels:
      labels.append(piece)
  return tuple(labels)


def _make_example(path, line_number, split, index, values, label_separator=None):
  """Builds an InputExample from the fields of one row or JSON object.

  Args:
    path, line_number: where the record is (error messages).
    split: "train", "dev" or "test".
    index: 0-based position of the example in its split (default guid).
    values: dict field name -> string, or None when the field is absent (the label of a
      multi-label JSON object may be a list of strings).
    label_separator: None for one label per example; else the multi-label separator: the
      label becomes a tuple, empty (no label) allowed in every split.

  Returns:
    An InputExample.
  """
  label = values.get("label")
  if label_separator is not None:
    # A test example without a label field (or an empty one) has no gold labels.
    if label is not None:
      label = label_set(label, label_separator)
    if split == "test" and not label:
      label = None
  elif label is not None:
    label = label.strip()
  if label_separator is None and not label:
    if split != "test":
      raise line_error(path, line_number, "the label is empty",
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
        raise line_error(path, header_line, "the header names column %s twice" % _quote(name),
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
        raise line_error(path, header_line,
                          "the header %s has no %s column" % (_quote(self._join(header)), field),
                          "the first line must name the columns: " + _COLUMNS_ADVICE)
    examples = []
    for line_number, fields in rows[1:]:
      if len(fields) < len(header):
        raise line_error(path, line_number,
                          "column %s is missing: the row has %s, the header %d: %s"
                          % (_quote(header[len(fields)].strip()), _fields(len(fields)),
                             len(header), _quote(self._join(fields))),
                          self.SHORT_ROW_ADVICE)
      if len(fields) > len(header):
        raise line_error(path, line_number,
                          "the row has %s, the header only %d: %s"
                          % (_fields(len(fields)), len(header), _quote(self._join(fields))),
                          self.LONG_ROW_ADVICE)
      values = dict((field, fields[column]) for field, column in columns.items())
      examples.append(_make_example(path, line_number, split, len(examples), values,
                                    self.label_separator))
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
        raise line_error(path, line_number,
                          "key %s holds %s, not a string"
                          % (_quote(key), _quote(json.dumps(value, ensure_ascii=False))),
                          "write the value as a JSON string")
      if isinstance(value, str):
        check_no_surrogates(value, lambda problem: line_error(
            path, line_number, "key %s holds %s" % (_quote(key), problem),
            "fix the \\u escape (a character outside the BMP is written as a pair, e.g. "
            "\\ud83d\\ude00) or remove it"))
      return str(value)
  return None


def _json_labels(path, line_number, obj, keys):
  """A multi-label object's labels: a JSON list of strings (kept as a list), else the value
  as _json_value reads it (a string the separator splits)."""
  for key in keys:
    if isinstance(obj.get(key), list):
      labels = obj[key]
      for label in labels:
        if isinstance(label, bool) or not isinstance(label, (str, int)):
          raise line_error(path, line_number, "key %s holds %s, not a list of strings" % (
              _quote(key), _quote(json.dumps(labels, ensure_ascii=False))),
                           "write the labels as a JSON list of strings, e.g. [\"a\", \"b\"]")
      return [_json_value(path, line_number, {key: label}, (key,)) for label in labels]
  return _json_value(path, line_number, obj, keys)


def check_no_surrogates(text, make_error):
  """Raises make_error(problem) if `text` holds an unpaired UTF-16 surrogate.

  JSON's \\u escapes can make one (\\ud800 without its pair); it would pass
  reading and tokenizing and then fail, after training, when the text is written
  out as UTF-8.
  """
  surrogate = find_surrogate(text)
  if surrogate:
    raise make_error("an unpaired surrogate \\u%04x at character %d: %s"
                     % (ord(surrogate[0]), surrogate[1], _quote(text)))


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
        if field == "label" and self.label_separator is not None:
          values[field] = _json_labels(path, line_number, obj, keys)
        else:
          values[field] = _json_value(path, line_number, obj, keys)
      if values["text_a"] is None:
        raise line_error(path, line_number,
                          "the object has no %s key: %s" % (" / ".join(self.KEYS["text_a"]), shown),
                          "give every object the text")
      if values["label"] is None and split != "test":
        raise line_error(path, line_number,
                          "the object has no label (no %s key, or null): %s"
                          % (" / ".join(self.KEYS["label"]), shown),
                          "give every training and dev example a label")
      examples.append(_make_example(path, line_number, split, len(examples), values,
                                    self.label_separator))
    return examples


class _ClueProcessor(JsonlProcessor):
  """CLUE classification: {train,dev,test}.json as CLUE ships them, one JSON object per line.

  KEYS name the keys of the label, the texts and the id; `_texts` builds the texts where
  CLUE's baseline does more than read a key (CSL, CLUEWSC2020). Test objects need no
  label. Each example keeps its id as the file holds it (raw_id, often a JSON integer):
  --clue_submission writes it back in that type. Train and dev objects labelled with one
  of NO_GOLD_LABELS are dropped and counted in the log, as CLUE's baseline drops them.
  """

  SPLIT_FILES = {"train": ("train.json",), "dev": ("dev.json",), "test": ("test.json",)}
  KEYS = collections.OrderedDict([
      ("label", ("label",)), ("text_a", ("sentence",)), ("text_b", ()), ("id", ("id",))])
  NO_GOLD_LABELS = ()

  def _read_examples(self, path, split):
    examples = []
    num_dropped = 0
    for line_number, obj in _json_objects(path):
      label = _json_value(path, line_number, obj, self.KEYS["label"])
      label = label.strip() if label is not None else ""
      if label in self.NO_GOLD_LABELS:
        if split != "test":
          num_dropped += 1
          continue
        label = ""
      if not label and split != "test":
        raise line_error(path, line_number, "the object has no label (no %s key, null or "
                         "empty): %s" % (" / ".join(self.KEYS["label"]), _shown_object(obj)),
                         "give every training and dev example a label")
      text_a, text_b = self._texts(path, line_number, obj)
      guid = _json_value(path, line_number, obj, self.KEYS["id"])
      if guid is None or not guid.strip():
        guid = "%s-%d" % (split, len(examples))
      raw_id = next((obj[key] for key in self.KEYS["id"] if key in obj), None)
      examples.append(InputExample(guid, text_a, text_b, label or None, path, line_number,
                                   raw_id=raw_id))
    if self.NO_GOLD_LABELS and split != "test":
      _LOGGER.info("%s: %d of %d examples dropped: labelled %s (no gold label), as CLUE's "
                   "baseline drops them", path, num_dropped, num_dropped + len(examples),
                   " or ".join(self.NO_GOLD_LABELS))
    return examples

  def _texts(self, path, line_number, obj):
    """(text_a, text_b or None) of one object."""
    text_a = _required_json_value(path, line_number, obj, self.KEYS["text_a"])
    text_b = None
    if self.KEYS["text_b"]:
      text_b = _required_json_value(path, line_number, obj, self.KEYS["text_b"]) or None
    return text_a, text_b


def _shown_object(obj):
  return _quote(json.dumps(obj, ensure_ascii=False))


def _required_json_value(path, line_number, obj, keys):
  """_json_value of a key the object must have: a UsageError when it is absent or null."""
  value = _json_value(path, line_number, obj, keys)
  if value is None:
    raise line_error(path, line_number, "the object has no %s key (or it is null): %s"
                     % (" / ".join(keys), _shown_object(obj)),
                     "give every object the keys of the task's CLUE files")
  return value


class TnewsProcessor(_ClueProcessor):
  """TNEWS: 15 news categories, labels "100".."116" without "105" and "111".

  The fixed label order is the one of CLUE's baseline scripts, so label ids
  match models fine-tuned with them.
  """

  FIXED_LABELS = tuple(str(100 + i) for i in range(17) if i not in (5, 11))


class IflytekProcessor(_ClueProcessor):
  """IFLYTEK: 119 app categories, labels "0".."118" (CLUE's order)."""

  FIXED_LABELS = tuple(str(i) for i in range(119))


class _SentencePairProcessor(_ClueProcessor):
  """CLUE's sentence pairs: text_a = sentence1, text_b = sentence2."""

  KEYS = collections.OrderedDict([
      ("label", ("label",)), ("text_a", ("sentence1",)), ("text_b", ("sentence2",)),
      ("id", ("id",))])


class AfqmcProcessor(_SentencePairProcessor):
  """AFQMC: do two questions mean the same? Labels "0", "1" (CLUE's order)."""

  FIXED_LABELS = ("0", "1")


class CmnliProcessor(_SentencePairProcessor):
  """CMNLI: natural language inference, CLUE's order of the three labels.

  Pairs labelled "-" (the annotators did not agree) are dropped from train and dev.
  """

  FIXED_LABELS = ("contradiction", "entailment", "neutral")
  NO_GOLD_LABELS = ("-",)


class OcnliProcessor(CmnliProcessor):
  """OCNLI: CMNLI's format; the training file is train.50k.json (CLUE's), else train.json."""

  SPLIT_FILES = {"train": ("train.50k.json", "train.json"), "dev": ("dev.json",),
                 "test": ("test.json",)}


class CslProcessor(_ClueProcessor):
  """CSL: are all the `keyword`s those of the abstract `abst`? Labels "0", "1".

  As in CLUE's baseline, text_a is the keyword list joined by spaces, text_b the abstract.
  """

  KEYS = collections.OrderedDict([
      ("label", ("label",)), ("text_a", ("keyword",)), ("text_b", ("abst",)), ("id", ("id",))])
  FIXED_LABELS = ("0", "1")

  def _texts(self, path, line_number, obj):
    keywords = obj.get("keyword")
    if not (isinstance(keywords, list) and all(isinstance(k, str) for k in keywords)):
      raise line_error(path, line_number,
                       "key 'keyword' must hold a JSON list of strings: %s" % _shown_object(obj),
                       "write the keywords as a list, e.g. \"keyword\": [\"a\", \"b\"]")
    text_a = " ".join(keywords)
    check_no_surrogates(text_a, lambda problem: line_error(
        path, line_number, "key 'keyword' holds %s" % problem, "fix the \\u escape"))
    return text_a, _required_json_value(path, line_number, obj, self.KEYS["text_b"])


class Cluewsc2020Processor(_ClueProcessor):
  """CLUEWSC2020: does the pronoun span2 refer to span1? Labels "true", "false" (CLUE's order).

  text_a is `text` with span1 marked _so_ and span2 [so], as CLUE's baseline WSC
  processor marks them; the id is `idx`. Objects: {"target": {"span1_index": 5,
  "span1_text": ..., "span2_index": 37, "span2_text": ...}, "idx": 261, "label": "false",
  "text": ...}, the indexes counting characters from 0.
  """

  KEYS = collections.OrderedDict([
      ("label", ("label",)), ("text_a", ("text",)), ("text_b", ()), ("id", ("idx",))])
  FIXED_LABELS = ("true", "false")
  # The span, and the markers before and after it.
  SPAN_MARKERS = (("span1", "_", "_"), ("span2", "[", "]"))

  def _texts(self, path, line_number, obj):
    text = _required_json_value(path, line_number, obj, self.KEYS["text_a"])
    target = obj.get("target")
    if not isinstance(target, dict):
      raise line_error(path, line_number, "the object has no 'target' object with the spans: "
                       "%s" % _shown_object(obj), "give every object its target spans")
    # (position, 0 for a closing / 1 for an opening marker, marker): at a position where one
    # span ends and the other starts, the first one is closed before the next is opened.
    inserts = []
    for span, opening, closing in self.SPAN_MARKERS:
      start, end = _wsc_span(path, line_number, target, span, text)
      inserts += [(start, 1, opening), (end, 0, closing)]
    pieces = []
    done = 0
    for position, _, marker in sorted(inserts):
      pieces += [text[done:position], marker]
      done = position
    return "".join(pieces) + text[done:], None


def _wsc_span(path, line_number, target, span, text):
  """(start, end) of a CLUEWSC2020 span in `text`; a UsageError unless its text is there."""
  index_key, text_key = span + "_index", span + "_text"
  index, span_text = target.get(index_key), target.get(text_key)
  if isinstance(index, bool) or not isinstance(index, int) or not isinstance(span_text, str) \
      or not span_text:
    raise line_error(path, line_number, "the target needs %s (an integer) and %s (a non-empty "
                     "string): %s" % (index_key, text_key, _shown_object(target)),
                     "give both spans of every object")
  found = text[index:index + len(span_text)] if index >= 0 else ""
  if found != span_text:
    raise line_error(path, line_number, "%s %s does not match the text at %s %d (%s)"
                     % (text_key, _quote(span_text), index_key, index, _quote(found)),
                     "fix the span: %s counts the characters of text from 0" % index_key)
  return index, index + len(span_text)


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
    for line_number, line in text_lines(path):
      if not line.strip():
        continue
      if "\t" in line:
        label, text = line.split("\t", 1)
        label = label.strip() or None
      elif split == "test":
        label, text = None, line
      else:
        raise line_error(path, line_number,
                          "no tab between label and text: %s" % _quote(line),
                          "write each example as label<TAB>text")
      if label is None and split != "test":
        raise line_error(path, line_number, "the label is empty",
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
    ("afqmc", AfqmcProcessor),
    ("cmnli", CmnliProcessor),
    ("ocnli", OcnliProcessor),
    ("csl", CslProcessor),
    ("cluewsc2020", Cluewsc2020Processor),
    ("thucnews", ThucnewsProcessor),
])


# The tasks whose files can hold several labels per example (--multi_label).
MULTI_LABEL_TASKS = ("tsv", "csv", "jsonl")


def get_processor(task_name, label_separator=None):
  """Returns a new processor for `task_name` (case-insensitive).

  Args:
    task_name: the --task_name.
    label_separator: None for one label per example; else multi-label (--multi_label),
      labels separated by this string (a JSON list also works in jsonl).

  Raises:
    UsageError: unknown task name, or a multi-label run of a task with one label per example.
  """
  name = (task_name or "").strip().lower()
  if name not in PROCESSORS:
    raise UsageError("unknown --task_name %s; use one of: %s"
                     % (_quote(task_name or ""), ", ".join(PROCESSORS)))
  if label_separator is not None:
    if name not in MULTI_LABEL_TASKS:
      raise UsageError("--multi_label: task %s has one label per example; use --task_name="
                       "%s for multi-label files" % (name, ", ".join(MULTI_LABEL_TASKS)))
    if not label_separator.strip():
      raise UsageError("--label_separator=%s: use a visible separator such as , or |"
                       % _quote(label_separator))
  return PROCESSORS[name](label_separator)


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
  if not do_train and os.path.exists(saved_path):
    labels = read_label_file(saved_path)
    _LOGGER.info("label list (%d labels) from %s", len(labels), saved_path)
    return labels
  labels = processor.get_labels(data_dir)
  separator = processor.label_separator
  for label in labels:
    if "\n" in label or "\r" in label:
      raise UsageError("label %s contains a line break; labels must be single-line strings"
                       % _quote(label))
    if separator is not None and separator in label:
      raise UsageError("label %s contains the label separator %s; choose another "
                       "--label_separator or rename the label" % (_quote(label),
                                                                  _quote(separator)))
  return labels


def read_splits(processor, data_dir, output_dir, splits):
  """Reads and checks the splits a run uses, before anything is trained or written.

  Args:
    processor: the task's DataProcessor.
    data_dir, output_dir: as for resolve_label_list.
    splits: the split names to read ("train", "dev", "test"); with "train" the label list
      comes from the data, else from output_dir/labels.txt when it exists.

  Returns:
    (dict split -> list of InputExample, the label list).
  """
  examples = {split: processor.get_examples(data_dir, split) for split in splits}
  label_list = resolve_label_list(processor, data_dir, output_dir, "train" in splits)
  for split_examples in examples.values():
    check_labels(split_examples, label_list)
  return examples, label_list


def _make_dirs(directory):
  try:
    if not os.path.isdir(directory):
      os.makedirs(directory)
  except OSError as e:
    raise write_error(directory, e)


def write_label_list(output_dir, labels):
  """Saves the label list a model is trained with as output_dir/labels.txt.

  Raises:
    UsageError: the file cannot be written.
  """
  _make_dirs(output_dir)
  saved_path = os.path.join(output_dir, "labels.txt")
  try:
    atomic_write_text(saved_path, "".join(label + "\n" for label in labels))
  except OSError as e:
    raise write_error(saved_path, e)
  _LOGGER.info("label list (%d labels) written to %s", len(labels), saved_path)


def _describe_labels(label_list, limit=10):
  """A short rendering of a label list for error messages."""
  shown = ", ".join(label_list[:limit])
  if len(label_list) > limit:
    shown += ", ... (%d labels)" % len(label_list)
  return "[" + shown + "]"


def _unknown_label_error(example, label_list, label):
  if example.source_file and example.source_line:
    where = "%s line %d" % (example.source_file, example.source_line)
  else:
    where = "example %s" % example.guid
  return UsageError(
      "%s: label %s is not in the label list %s; fix the label, or list every label in "
      "labels.txt in the data directory and train again"
      % (where, _quote(label), _describe_labels(label_list)))


def _example_labels(example):
  """The labels of an example: () for none, one for a label string, all of a label set."""
  if example.label is None:
    return ()
  return example.label if isinstance(example.label, tuple) else (example.label,)


def check_labels(examples, label_list):
  """Raises UsageError for the first example with a label not in `label_list`."""
  known = set(label_list)
  for example in examples:
    for label in _example_labels(example):
      if label not in known:
        raise _unknown_label_error(example, label_list, label)


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


def _fit_tokens(tokens_a, tokens_b, max_seq_length, options):
  """The tokens kept of each text so that the pair fits max_seq_length.

  Each text keeps as many tokens as Google's truncation keeps (the longer text loses tokens
  first); "truncate" keeps them from the start, "head_tail" the first head_tokens (at most
  what the text keeps) and the rest from the end.
  """
  if tokens_b:
    kept_a, kept_b = list(tokens_a), list(tokens_b)
    _truncate_seq_pair(kept_a, kept_b, max_seq_length - 3)  # [CLS] [SEP] [SEP]
    rooms = (len(kept_a), len(kept_b))
  else:
    rooms = (max_seq_length - 2, 0)  # [CLS] [SEP]
  if options.long_text != "head_tail":
    return tokens_a[:rooms[0]], tokens_b[:rooms[1]]
  return tuple(long_text.head_tail(tokens, room, None if options.head_tokens is None else
                                   min(options.head_tokens, room))
               for tokens, room in ((tokens_a, rooms[0]), (tokens_b, rooms[1])))


def convert_example_counting_truncation(example, label_map, max_seq_length, tokenizer,
                                        options=FeatureOptions()):
  """convert_single_example (with long_text "truncate" or "head_tail"), and whether the
  texts had to be cut."""
  tokens_a = tokenizer.tokenize(example.text_a)
  tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else []
  num_tokens = len(tokens_a) + len(tokens_b)
  tokens_a, tokens_b = _fit_tokens(tokens_a, tokens_b, max_seq_length, options)
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

  features = InputFeatures(input_ids, input_mask, segment_ids,
                           _label_ids(example, label_map, options.multi_label),
                           is_real_example=True)
  return features, truncated


def windowed_record(example, label_map, max_seq_length, tokenizer, options):
  """The serialized windowed record of one example (--long_text=windows), and whether text
  was left out (windows past max_windows, or the end of a text_b too long for a window)."""
  tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else None
  windows = long_text.document_windows(
      tokenizer.tokenize(example.text_a), tokens_b, max_seq_length, options.doc_stride,
      options.max_windows, tokenizer.convert_tokens_to_ids)
  feature_map = tfrecord_io.windowed_features(
      {name: getattr(windows, name) for name in tfrecord_io.MODEL_INPUTS})
  feature_map.update(_label_features(_label_ids(example, label_map, options.multi_label)))
  return _serialize(feature_map), bool(windows.windows_cut or windows.text_b_cut)


def _label_ids(example, label_map, multi_label):
  """The label id of an example (0 without a label); with multi_label, its multi-hot list
  [num_labels] (all zeros without labels)."""
  for label in _example_labels(example):
    if label not in label_map:
      raise _unknown_label_error(example, sorted(label_map, key=label_map.get), label)
  if not multi_label:
    return label_map[example.label] if example.label is not None else 0
  multi_hot = [0] * len(label_map)
  for label in _example_labels(example):
    multi_hot[label_map[label]] = 1
  return multi_hot


def convert_single_example(example, label_map, max_seq_length, tokenizer, multi_label=False):
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
    multi_label: the example's label is a tuple of labels; label_id becomes their
      multi-hot list [len(label_map)].

  Returns:
    InputFeatures; label_id is 0 when the example has no label.

  Raises:
    UsageError: the example's label is not in label_map.
  """
  return convert_example_counting_truncation(example, label_map, max_seq_length, tokenizer,
                                             FeatureOptions(multi_label=multi_label))[0]


def _label_features(label_id):
  """label_ids ([] for one label, [num_labels] multi-hot with --multi_label) and
  is_real_example."""
  return {"label_ids": tfrecord_io.int64_feature(
              label_id if isinstance(label_id, list) else [label_id]),
          "is_real_example": tfrecord_io.int64_feature([1])}


def serialize_features(features):
  """Serializes InputFeatures as a tf.train.Example (docs/FORMATS.md 6)."""
  feature_map = {
      "input_ids": tfrecord_io.int64_feature(features.input_ids),
      "input_mask": tfrecord_io.int64_feature(features.input_mask),
      "segment_ids": tfrecord_io.int64_feature(features.segment_ids),
  }
  feature_map.update(_label_features(features.label_id))
  return _serialize(feature_map)


def _serialize(feature_map):
  example = tf.train.Example(features=tf.train.Features(feature=feature_map))
  # Deterministic: the same features give the same bytes in every process.
  return example.SerializeToString(deterministic=True)


def input_feature_spec(max_seq_length, multi_label_count=None, windows=False):
  """The feature dict that parses the records write_features writes.

  Args:
    max_seq_length: the records' sequence length.
    multi_label_count: None for one label id per record; with --multi_label, the number of
      labels (label_ids is then a multi-hot [multi_label_count]).
    windows: records of --long_text=windows (tfrecord_io.windowed_feature_spec).
  """
  spec = {
      "input_ids": tf.FixedLenFeature([max_seq_length], tf.int64),
      "input_mask": tf.FixedLenFeature([max_seq_length], tf.int64),
      "segment_ids": tf.FixedLenFeature([max_seq_length], tf.int64),
      "label_ids": tf.FixedLenFeature(
          [multi_label_count] if multi_label_count is not None else [], tf.int64),
      "is_real_example": tf.FixedLenFeature([], tf.int64),
  }
  return tfrecord_io.windowed_feature_spec(spec) if windows else spec


def read_lengths_and_label_ids(record_path):
  """Each record's length and label ids, read back from a feature file (write_features).

  A few seconds per 100k records (parsing them in Python).

  Args:
    record_path: a TFRecord file of features (windowed records too).

  Returns:
    (int64 array [n]: the sum of each record's input_mask, all its windows' tokens for
    windowed records; int64 array [n, m]: its label_ids, m = 1 for one label id, else
    the multi-hot [num_labels]).
  """
  lengths, label_ids = [], []
  for record in tfrecord_io.read_records(record_path):
    feature = tf.train.Example.FromString(record).features.feature
    lengths.append(sum(feature["input_mask"].int64_list.value))
    label_ids.append(list(feature["label_ids"].int64_list.value))
  if not lengths:
    return np.zeros([0], np.int64), np.zeros([0, 1], np.int64)
  return np.array(lengths, np.int64), np.array(label_ids, np.int64)


def label_skew_inputs(record_path, num_labels, multi_label, within_label):
  """What length_grouping.label_skew needs of a training feature file.

  Returns:
    (lengths int [n], targets float [n, num_labels]: the one-hot label or the multi-hot,
    strata int [n]: the labels when batches are grouped within each label, else None).
  """
  lengths, label_ids = read_lengths_and_label_ids(record_path)
  if multi_label:
    return lengths, label_ids.astype(np.float32), None
  targets = length_grouping.one_hot(label_ids[:, 0], num_labels)  # [n, num_labels]
  return lengths, targets, label_ids[:, 0] if within_label else None


def _check_vocab(vocab_file):
  """Fails early, in this process, when the vocab cannot serve the tokenizer."""
  if os.path.isdir(vocab_file):
    raise UsageError("%s is a directory, not a vocab file; give vocab.txt itself" % vocab_file)
  try:
    tokens = tokenization.load_vocab(vocab_file)  # the tokenizer's own reading of it
  except ValueError as e:
    raise UsageError(str(e))
  missing = tokenization.missing_special_token(tokens)
  if missing:
    raise UsageError("%s: the vocab has no %s token; use the vocab.txt that came with the "
                     "checkpoint" % (vocab_file, missing))


def _check_max_seq_length(max_seq_length):
  if max_seq_length < 3:
    raise UsageError("--max_seq_length=%d is too small; it must leave room for [CLS] and two "
                     "[SEP] tokens (use at least 3, typically 128)" % max_seq_length)


def check_featurizing_inputs(max_seq_length, vocab_file):
  """The checks write_features makes before featurizing, for a script to make first.

  run_classifier_mgpu.py calls it before claiming output_dir, so that a
  too small --max_seq_length or a vocab without [CLS]/[SEP]/[UNK] creates no output_dir.

  Raises:
    UsageError: max_seq_length below 3, or the vocab lacks a special token.
  """
  _check_max_seq_length(max_seq_length)
  _check_vocab(vocab_file)


# State of a featurizing process: the tokenizer is built once per process.
_FEATURIZER = {}


def _init_featurizer(vocab_file, do_lower_case, label_map, max_seq_length, options):
  """Builds this process's tokenizer (the pool initializer; also used serially).

  It never raises: a pool whose initializer fails restarts the worker forever,
  so the error is kept and raised by the first _featurize_chunk call instead.
  """
  _FEATURIZER.clear()
  _FEATURIZER.update(label_map=label_map, max_seq_length=max_seq_length, options=options,
                     error=None)
  try:
    _FEATURIZER["tokenizer"] = tokenization.FullTokenizer(
        vocab_file=vocab_file, do_lower_case=do_lower_case,
        literal_special_tokens=options.literal_special_tokens)
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
  serialized = []
  num_truncated = 0
  options = _FEATURIZER["options"]
  for example in examples:
    if options.long_text == "windows":
      record, truncated = windowed_record(example, label_map, max_seq_length, tokenizer,
                                          options)
    else:
      features, truncated = convert_example_counting_truncation(
          example, label_map, max_seq_length, tokenizer, options)
      record = serialize_features(features)
    serialized.append(record)
    num_truncated += int(truncated)
  return serialized, num_truncated


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


class FeaturizingPool(object):
  """The processes that featurize a run's splits, forked once.

  run_classifier_mgpu.py makes it before the device check (prepare_output_dir): forking after
  TensorFlow has started its GPU runtime (and its threads) is not safe. Each worker builds
  its tokenizer once; examples travel in chunks and come back in input order. With one
  worker, or when no split to featurize (cached ones are not) is large enough to gain from
  processes, no process is forked and featurizing runs here; both give byte-identical
  files.

  A context manager: leaving it ends the workers.
  """

  def __init__(self, vocab_file, do_lower_case, label_list, max_seq_length, num_workers=None,
               largest_split=None, pool_threshold=POOL_THRESHOLD, options=FeatureOptions()):
    """Args:
      vocab_file, do_lower_case, label_list, max_seq_length, options: as in write_features.
      num_workers: worker processes; None: one per available CPU.
      largest_split: the most examples of a split that will be featurized
        (largest_split_to_featurize; None: unknown, fork anyway).
      pool_threshold: smallest number of examples that uses the processes.
    """
    label_map = dict((label, index) for index, label in enumerate(label_list))
    self.init_args = (vocab_file, do_lower_case, label_map, max_seq_length, options)
    self.num_workers = num_workers or processes.available_cpus()
    self.pool_threshold = max(pool_threshold, 1)
    self._pool = None
    if self.num_workers > 1 and (largest_split is None or largest_split >= self.pool_threshold):
      self._pool = multiprocessing.Pool(self.num_workers, initializer=_init_featurizer,
                                        initargs=self.init_args)

  def __enter__(self):
    return self

  def __exit__(self, *unused_exc):
    self.close()

  def close(self):
    if self._pool is not None:
      self._pool.terminate()
      self._pool.join()
      self._pool = None

  def uses_processes(self, num_examples):
    return self._pool is not None and num_examples >= self.pool_threshold

  def featurize(self, examples):
    """Yields (serialized records, number truncated) per chunk of `examples`, in order."""
    if self.uses_processes(len(examples)):
      # Chunks: big enough to amortize pickling, small enough to balance the workers.
      chunk_size = max(1, min(512, len(examples) // (8 * self.num_workers)))
      return self._pool.imap(_featurize_chunk, _chunks(examples, chunk_size))
    _init_featurizer(*self.init_args)
    return (_featurize_chunk(chunk) for chunk in _chunks(examples, 512))


def write_features(examples, label_list, max_seq_length, vocab_file, do_lower_case,
                   output_file, num_workers=None, pool_threshold=POOL_THRESHOLD, pool=None,
                   options=FeatureOptions()):
  """Featurizes examples into a TFRecord file, written through a temp file and a rename.

  Args:
    examples: list of InputExample.
    label_list: the labels in label-id order.
    max_seq_length: sequence length of the records.
    vocab_file: the WordPiece vocab.
    do_lower_case: whether the tokenizer lower-cases.
    output_file: the TFRecord file to write.
    num_workers, pool_threshold: for a FeaturizingPool made for this call alone.
    pool: a FeaturizingPool made with the same vocab, labels, max_seq_length and options;
      None makes one for this call.
    options: FeatureOptions.

  Returns:
    The number of records written.

  Raises:
    UsageError: unknown label, unusable vocab, too small max_seq_length, or a refused write.
  """
  _check_max_seq_length(max_seq_length)
  _check_vocab(vocab_file)
  check_labels(examples, label_list)
  if pool is not None:
    return _write_features_with(pool, examples, max_seq_length, output_file)
  with FeaturizingPool(vocab_file, do_lower_case, label_list, max_seq_length, num_workers,
                       len(examples), pool_threshold, options) as own_pool:
    return _write_features_with(own_pool, examples, max_seq_length, output_file)


def _write_features_with(pool, examples, max_seq_length, output_file):
  """write_features() through a FeaturizingPool."""
  what = "featurizing %s" % os.path.basename(output_file)
  if pool.uses_processes(len(examples)):
    _LOGGER.info("%s: %d examples with %d processes", what, len(examples), pool.num_workers)
  progress = _Progress(len(examples), what)
  num_truncated = [0]

  def serialized_records(record_chunks):
    num_done = 0
    for chunk_records, chunk_truncated in record_chunks:
      for record in chunk_records:
        yield record
      num_done += len(chunk_records)
      num_truncated[0] += chunk_truncated
      progress.update(num_done)

  try:
    num_written = tfrecord_io.write_records_atomically(
        output_file, serialized_records(pool.featurize(examples)))
  finally:
    _FEATURIZER.clear()
  num_truncated = num_truncated[0]
  options = pool.init_args[-1]
  if options.long_text == "windows":
    cut = ("did not fit in max_windows=%d windows of max_seq_length=%d (or had a text_b "
           "longer than half a window) and lost text" % (options.max_windows, max_seq_length))
    log = _LOGGER.warning if num_truncated else _LOGGER.info
  else:
    cut = "were longer than max_seq_length=%d and %s" % (
        max_seq_length, "lost their middle" if options.long_text == "head_tail" else
        "truncated")
    log = _LOGGER.info
  log("%s: wrote %d records to %s in %.1fs; %d examples (%.1f%%) %s", what, num_written,
      output_file, progress.elapsed(), num_truncated,
      100.0 * num_truncated / max(num_written, 1), cut)
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
                       do_lower_case, task_name, options=FeatureOptions()):
  """The sha256 (hex) of everything the records of a split depend on.

  The bytes of the data files, the vocab and tokenization.py, and the settings:
  split, task name, max_seq_length, label list, do_lower_case and
  FEATURE_FORMAT_VERSION, and the FeatureOptions that are not the default.
  """
  settings = {
      "format_version": FEATURE_FORMAT_VERSION,
      "split": split,
      "task_name": task_name.lower(),
      "max_seq_length": int(max_seq_length),
      "label_list": list(label_list),
      "do_lower_case": bool(do_lower_case),
  }
  settings.update(options_settings(options))
  settings = json.dumps(settings, sort_keys=True, ensure_ascii=False)
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


def split_caches(splits, processor, data_dir, **settings):
  """{split: FeatureCache} of each of `splits` (the inputs are hashed once, here).

  Args:
    splits: the split names (e.g. a dict split -> list of InputExample).
    processor: their DataProcessor (its input_files are part of the cache key).
    data_dir: --data_dir.
    **settings: label_list, max_seq_length, vocab_file, do_lower_case, task_name, options.
  """
  return {split: FeatureCache(split, processor.input_files(data_dir, split), **settings)
          for split in splits}


def largest_split_to_featurize(splits, caches, cache_dir):
  """The most examples of a split that has no valid cache in cache_dir (0 when all have):
  the largest_split of a FeaturizingPool that forks only when featurizing will use it.

  Args:
    splits: dict split -> list of InputExample.
    caches: dict split -> its FeatureCache (split_caches).
    cache_dir: where the caches live.
  """
  return max([len(examples) for split, examples in splits.items()
              if caches[split].info(cache_dir) is None] or [0])


def featurizing_plan(splits, processor, data_dir, cache_dir, task_name, num_workers=None,
                     **settings):
  """(caches, pool): each split's FeatureCache (split_caches) and a FeaturizingPool that
  forks only when a split without a valid cache in cache_dir is large enough to use it.

  Args:
    splits, processor, data_dir: as in split_caches.
    cache_dir: where the caches live (known before the device check, so the pool can fork
      first: run_settings.planned_cache_dir).
    task_name: the task (part of the cache key).
    num_workers: as in FeaturizingPool.
    **settings: label_list, max_seq_length, vocab_file, do_lower_case, options.
  """
  caches = split_caches(splits, processor, data_dir, task_name=task_name, **settings)
  largest = largest_split_to_featurize(splits, caches, cache_dir)
  return caches, FeaturizingPool(num_workers=num_workers, largest_split=largest, **settings)


def cached_split_features(splits, caches, cache_dir, pool):
  """{split: TFRecord path} of each split through FeatureCache.features (featurized only
  when no valid cache exists).

  Args:
    splits: dict split -> list of InputExample.
    caches: dict split -> its FeatureCache (split_caches).
    cache_dir: where the caches live.
    pool: a FeaturizingPool.
  """
  return {split: caches[split].features(examples, cache_dir, pool=pool)[0]
          for split, examples in splits.items()}


def _one_line(text):
  return " ".join((text or "").split())


def example_rows(examples, columns, details, gold_column, separator=","):
  """The rows of predict_detail.tsv: a header, then per example its id, text_a, text_b
  (when any example has one), its `details` and its gold label (when any has one), each
  field on one line.

  Args:
    examples: the InputExamples, in order.
    columns: the header of the detail fields.
    details: per example, a list of strings.
    gold_column: the header of the gold field.
    separator: joins a multi-label gold set.

  Returns:
    list of lists of strings.
  """
  has_text_b = any(e.text_b is not None for e in examples)
  has_gold = any(e.label is not None for e in examples)
  rows = [["id", "text_a"] + (["text_b"] if has_text_b else []) + list(columns) +
          ([gold_column] if has_gold else [])]
  for example, detail in zip(examples, details):
    fields = [_one_line(str(example.guid)), _one_line(example.text_a)]
    if has_text_b:
      fields.append(_one_line(example.text_b))
    fields += detail
    if has_gold:
      gold = example.label
      fields.append(_one_line(separator.join(gold) if isinstance(gold, tuple) else gold))
    rows.append(fields)
  return rows


class FeatureCache(object):
  """The feature cache of one split: cache_dir/<split>-<key>.tf_record, with
  <split>-<key>.json next to it holding the example count; <key> starts the sha256 of
  features_cache_key, computed once when the FeatureCache is made.

  Both files are written atomically, the .json last, so a crash never leaves a cache that
  looks valid. Older caches of the same split are deleted.
  """

  def __init__(self, split, examples_file_paths, label_list, max_seq_length, vocab_file,
               do_lower_case, task_name, options=FeatureOptions()):
    """Args:
      split: cache name prefix ("train", "dev", "test").
      examples_file_paths: the data files the examples come from
        (processor.input_files(data_dir, split)).
      label_list, max_seq_length, vocab_file, do_lower_case, options: as in write_features.
      task_name: the task (part of the key).
    """
    self.split = split
    self.examples_file_paths = examples_file_paths
    self.label_list = label_list
    self.max_seq_length = max_seq_length
    self.vocab_file = vocab_file
    self.do_lower_case = do_lower_case
    self.task_name = task_name
    self.options = options
    self.key = features_cache_key(split, examples_file_paths, label_list, max_seq_length,
                                  vocab_file, do_lower_case, task_name, options)
    self.base_name = "%s-%s" % (split, self.key[:16])

  def paths(self, cache_dir):
    """(record_path, info_path) of the cache in cache_dir."""
    return (os.path.join(cache_dir, self.base_name + ".tf_record"),
            os.path.join(cache_dir, self.base_name + ".json"))

  def info(self, cache_dir):
    """The info dict of a valid cache in cache_dir, else None (the split needs
    featurizing)."""
    record_path, info_path = self.paths(cache_dir)
    return _read_cache_info(info_path, record_path, self.key)

  def features(self, examples, cache_dir, num_workers=None, pool_threshold=POOL_THRESHOLD,
               pool=None):
    """Returns the split's TFRecord file, featurizing only when no valid cache exists.

    Args:
      examples: list of InputExample, or a function of no arguments that returns
        it; the function is called only when the cache has to be built.
      cache_dir: where the cache lives (created if needed).
      num_workers, pool_threshold, pool: as in write_features.

    Returns:
      (tfrecord_path, num_examples).
    """
    record_path, info_path = self.paths(cache_dir)
    info = self.info(cache_dir)
    if info is not None:
      _LOGGER.info("reusing cached %s features %s (%d examples)", self.split, record_path,
                   info["num_examples"])
      return record_path, info["num_examples"]

    if callable(examples):
      examples = examples()
    _make_dirs(cache_dir)
    try:
      if os.path.lexists(info_path):
        os.remove(info_path)
    except OSError as e:
      raise write_error(info_path, e)
    num_examples = write_features(examples, self.label_list, self.max_seq_length,
                                  self.vocab_file, self.do_lower_case, record_path,
                                  num_workers=num_workers, pool_threshold=pool_threshold,
                                  pool=pool, options=self.options)
    info = {
        "key": self.key,
        "num_examples": num_examples,
        "record_bytes": os.path.getsize(record_path),
        "split": self.split,
        "task_name": self.task_name,
        "max_seq_length": self.max_seq_length,
        "do_lower_case": bool(self.do_lower_case),
        "num_labels": len(self.label_list),
        "data_files": [os.path.abspath(path) for path in self.examples_file_paths],
        "vocab_file": os.path.abspath(self.vocab_file),
        "format_version": FEATURE_FORMAT_VERSION,
    }
    try:
      atomic_write_text(info_path, json.dumps(info, indent=2, sort_keys=True) + "\n")
    except OSError as e:
      raise write_error(info_path, e)
    _remove_stale_caches(cache_dir, self.split,
                         (os.path.basename(record_path), os.path.basename(info_path)))
    return record_path, num_examples
