# coding=utf-8
"""Reading the classifier's data files: UTF-8 lines, tab-separated and CSV rows, one JSON
object per line (labels.txt: bert_mgpu/data/label_files.py).

Bad input raises `UsageError` with a one-line message that names the file, the
line (1-based, as an editor shows it) and the value, and says what to do.
"""

import csv
import io
import logging

from bert_mgpu.data import text_files
from bert_mgpu.data.text_files import (DuplicateKeyError, find_surrogate, line_error, parse_json,  # pylint: disable=g-multiple-import
                                       read_text_file)

# Child of TensorFlow's logger (tf.get_logger() is the "tensorflow" logger; naming it
# needs no TensorFlow import): the messages appear next to tf.logging's and
# follow tf.logging.set_verbosity(). The classifier's data modules share it, under the
# name their log lines have always shown.
_LOGGER = logging.getLogger("tensorflow").getChild("classifier_data")

def quote(value):
  """A value for an error message in the classifier's quoting (text_files.quote_value)."""
  return text_files.quote_value(value)


def tab_rows(path):
  """Reads a tab-separated file into (line number, fields) for non-blank lines.

  Quote characters are ordinary text, as in Google's readers (quotechar=None).
  """
  rows = []
  for line_number, line in text_files.text_lines(path):
    if line.strip():
      rows.append((line_number, line.split("\t")))
  return rows


def csv_rows(path):
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


def json_objects(path):
  """Reads one JSON object per line into (line number, dict); blank lines skipped."""
  objects = []
  for line_number, line in text_files.numbered_lines(read_text_file(path)):
    if not line.strip():
      continue
    try:
      value = parse_json(line)
    except DuplicateKeyError as e:
      raise line_error(path, line_number,
                        "the object has the key %s twice: %s" % (quote(e.args[0]), quote(line)),
                        "give each key once (JSON readers keep only one of the values)")
    except RecursionError:
      raise line_error(path, line_number, "the JSON is nested too deeply: %s" % quote(line),
                        "write one flat JSON object per line")
    except ValueError as e:
      raise line_error(path, line_number, "invalid JSON (%s): %s" % (e, quote(line)),
                        "write one JSON object per line")
    if not isinstance(value, dict):
      raise line_error(path, line_number, "expected a JSON object, got %s" % quote(line),
                        "write one JSON object per line")
    objects.append((line_number, value))
  return objects


def check_no_surrogates(text, make_error):
  """Raises make_error(problem) if `text` holds an unpaired UTF-16 surrogate.

  JSON's \\u escapes can make one (\\ud800 without its pair); it would pass
  reading and tokenizing and then fail, after training, when the text is written
  out as UTF-8.
  """
  surrogate = find_surrogate(text)
  if surrogate:
    raise make_error("an unpaired surrogate \\u%04x at character %d: %s"
                     % (ord(surrogate[0]), surrogate[1], quote(text)))
