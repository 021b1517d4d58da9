# coding=utf-8
"""The classifier's task processors: the DataProcessor base class and the generic formats.

A processor reads the data files of one format in --data_dir into `InputExample`s, split
by split, and gives the task's label list. This module holds the base class and

  tsv, csv   {train,dev,test}.tsv / .csv with a header row naming the columns.
  jsonl      {train,dev,test}.jsonl, one JSON object per line.
  thucnews   `label<TAB>text` lines, no header: {train,dev,test}.txt or
             cnews.{train,val,test}.txt.

Google's GLUE/XNLI processors are in glue_processors.py, CLUE's in clue_processors.py;
task_registry.py registers them all under their --task_name.

Label list: data_dir/labels.txt (one label per line), else the task's fixed list, else the
sorted labels of the training file. With --multi_label (tsv, csv, jsonl) an example's label
is a tuple of labels.

Bad input raises `UsageError` with a one-line message that names the file, the
line (1-based, as an editor shows it) and the value, and says what to do.
"""

import collections
import json
import os

from bert_mgpu.classifier import file_readers
from bert_mgpu.classifier import input_examples
from bert_mgpu.data import label_files
from bert_mgpu.data import text_files
from bert_mgpu.data.text_files import line_error
from bert_mgpu.errors import UsageError

# The flag that makes a run read each split.
_SPLIT_FLAGS = {"train": "--do_train", "dev": "--do_eval", "test": "--do_predict"}


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
    labels_path = os.path.join(data_dir, label_files.LABELS_FILE)
    if os.path.exists(labels_path):
      return label_files.read_label_file(labels_path)
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
    """The --task_name the processor is registered under, else its class name."""
    # Imported here: task_registry.py imports the processor modules, which import this one.
    from bert_mgpu.classifier import task_registry  # pylint: disable=g-import-not-at-top
    for name, processor_class in task_registry.PROCESSORS.items():
      if type(self) is processor_class:
        return name
    return type(self).__name__

  def _read_examples(self, path, split):
    """Parses one file into InputExamples. Implemented by each format."""
    raise NotImplementedError()


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
  return input_examples.InputExample(guid, values["text_a"], text_b, label, path, line_number)


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
        raise line_error(path, header_line,
                         "the header names column %s twice" % file_readers.quote(name),
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
                         "the header %s has no %s column"
                         % (file_readers.quote(self._join(header)), field),
                         "the first line must name the columns: " + _COLUMNS_ADVICE)
    examples = []
    for line_number, fields in rows[1:]:
      if len(fields) < len(header):
        raise line_error(path, line_number,
                         "column %s is missing: the row has %s, the header %d: %s"
                         % (file_readers.quote(header[len(fields)].strip()), _fields(len(fields)),
                            len(header), file_readers.quote(self._join(fields))),
                         self.SHORT_ROW_ADVICE)
      if len(fields) > len(header):
        raise line_error(path, line_number,
                         "the row has %s, the header only %d: %s"
                         % (_fields(len(fields)), len(header),
                            file_readers.quote(self._join(fields))),
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
    return file_readers.tab_rows(path)

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
    return file_readers.csv_rows(path)

  def _join(self, fields):
    return ",".join(fields)


def json_value(path, line_number, obj, keys):
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
                         % (file_readers.quote(key),
                            file_readers.quote(json.dumps(value, ensure_ascii=False))),
                         "write the value as a JSON string")
      if isinstance(value, str):
        file_readers.check_no_surrogates(value, lambda problem: line_error(
            path, line_number, "key %s holds %s" % (file_readers.quote(key), problem),
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
              file_readers.quote(key), file_readers.quote(json.dumps(labels, ensure_ascii=False))),
                           "write the labels as a JSON list of strings, e.g. [\"a\", \"b\"]")
      return [json_value(path, line_number, {key: label}, (key,)) for label in labels]
  return json_value(path, line_number, obj, keys)


class JsonlProcessor(DataProcessor):
  """{train,dev,test}.jsonl: one JSON object per line, blank lines skipped.

  Keys as the tsv task's columns: label, text_a (or text, sentence), optional
  text_b and id. Test objects may lack `label`.
  """

  SPLIT_FILES = {"train": ("train.jsonl",), "dev": ("dev.jsonl",), "test": ("test.jsonl",)}
  KEYS = _FIELD_ALIASES

  def _read_examples(self, path, split):
    examples = []
    for line_number, obj in file_readers.json_objects(path):
      shown = file_readers.quote(json.dumps(obj, ensure_ascii=False))
      values = {}
      for field, keys in self.KEYS.items():
        if field == "label" and self.label_separator is not None:
          values[field] = _json_labels(path, line_number, obj, keys)
        else:
          values[field] = json_value(path, line_number, obj, keys)
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
    for line_number, line in text_files.text_lines(path):
      if not line.strip():
        continue
      if "\t" in line:
        label, text = line.split("\t", 1)
        label = label.strip() or None
      elif split == "test":
        label, text = None, line
      else:
        raise line_error(path, line_number,
                          "no tab between label and text: %s" % file_readers.quote(line),
                          "write each example as label<TAB>text")
      if label is None and split != "test":
        raise line_error(path, line_number, "the label is empty",
                          "write each example as label<TAB>text")
      examples.append(input_examples.InputExample("%s-%d" % (split, len(examples)), text, None,
                                                  label, path, line_number))
    return examples
