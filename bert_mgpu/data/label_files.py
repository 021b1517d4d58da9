# coding=utf-8
"""labels.txt: one label per line, in label-id order, read strictly and written in one place.

Shared by the classifier (any label text) and NER (tags, checked by a callback), and by
everything that writes a model's label list (training, the transformers conversion). Blank
lines are ignored; a label listed twice, an empty file, a file that is not UTF-8 and a
carriage return inside a line are refused with a one-line error naming the file and line.

No TensorFlow import.
"""

import os

from bert_mgpu.data import output_files
from bert_mgpu.data import text_files
from bert_mgpu.errors import UsageError

# The label list's file name, in a data directory, an output_dir and an export's assets.
LABELS_FILE = "labels.txt"


def write_label_file(directory, labels):
  """Writes directory/labels.txt: each label on its own line, in label-id order.

  Args:
    directory: an existing directory.
    labels: the label strings (single-line), in label-id order.

  Returns:
    The path written.

  Raises:
    UsageError: the file cannot be written (output_files.atomic_write_text).
  """
  path = os.path.join(directory, LABELS_FILE)
  output_files.atomic_write_text(path, "".join(label + "\n" for label in labels))
  return path


def read_label_file(path, check_label=None, as_json=False):
  """Reads a label list: one label per line, in order; blank lines ignored.

  Args:
    path: the labels.txt file.
    check_label: optional function label -> None when the label is fine, else the rest
      of the error after "<path> line <n>: " ("what is wrong; what to do"). Called once
      per label, after the check for a label listed twice.
    as_json: how values are quoted in the errors (text_files.quote_value).

  Returns:
    The list of labels (surrounding whitespace stripped).

  Raises:
    UsageError: unreadable or not UTF-8, a carriage return inside a line, a label listed
      twice (the message names the line of the first), a label check_label refuses, or
      no label at all.
  """
  labels, first_line = [], {}
  for line_number, line in text_files.text_lines(path, as_json):
    label = line.strip()
    if not label:
      continue
    if label in first_line:
      raise text_files.line_error(path, line_number, "label %s is listed twice (first on "
                                  "line %d)" % (text_files.quote_value(label, as_json), first_line[label]),
                                  "list every label once")
    problem = check_label(label) if check_label is not None else None
    if problem:
      # text_files.line_error's form, with the problem and advice from the caller.
      raise UsageError("%s line %d: %s" % (path, line_number, problem))
    first_line[label] = line_number
    labels.append(label)
  if not labels:
    raise UsageError("%s: no labels in the file; write the labels one per line" % path)
  return labels
