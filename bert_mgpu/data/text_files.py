# coding=utf-8
"""Users' text files, read strictly: UTF-8 or a one-line error naming the file and line.

Shared by the task data modules (classifier/file_readers.py, bert_mgpu/squad/data.py). A
file in another encoding, a NUL byte, a JSON key given twice or an unpaired surrogate is
refused where it is, instead of being read silently wrong.
"""

import codecs
import json
import os
import re

from bert_mgpu.errors import UsageError


def line_error(path, line_number, problem, advice):
  """The UsageError for a problem at one line (1-based, as an editor shows it) of a file."""
  return UsageError("%s line %d: %s; %s" % (path, line_number, problem, advice))


# Byte order marks of the encodings that UTF-8 readers meet most often by mistake.
_FOREIGN_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"),
)


def _line_and_column(data, offset):
  """The 1-based line of byte `offset` in `data`, and its 0-based byte offset in that line."""
  return data.count(b"\n", 0, offset) + 1, offset - (data.rfind(b"\n", 0, offset) + 1)


def check_utf8_bytes(path, data):
  """Raises UsageError unless `data` (the bytes of `path`) can be read as UTF-8 text.

  A UTF-16 or UTF-32 file, and a NUL byte anywhere (UTF-16 without a byte order
  mark, or a binary file), are refused with the line where they are: Python 3.7's
  csv module refuses NUL bytes but 3.11's keeps them, and the tokenizer then drops
  them silently.
  """
  for bom, encoding in _FOREIGN_BOMS:
    if data.startswith(bom):
      raise UsageError("%s: the file is %s (it starts with the %s byte order mark); save it "
                       "as UTF-8 (e.g. `iconv -f %s -t UTF-8`)"
                       % (path, encoding, encoding, encoding))
  nul = data.find(b"\x00")
  if nul >= 0:
    line_number, column = _line_and_column(data, nul)
    raise line_error(
        path, line_number,
        "NUL byte (0x00) at byte offset %d of the line (offset %d in the file)" % (column, nul),
        "the file is probably UTF-16 or binary; save it as UTF-8 text")


def read_text_file(path):
  """Reads a whole file as UTF-8 text (a leading byte order mark is dropped).

  Args:
    path: the file.

  Returns:
    The decoded text.

  Raises:
    UsageError: the file is missing or unreadable, is UTF-16/UTF-32, holds a NUL
      byte, or holds bytes that are not UTF-8 (the message gives the line and
      the byte offsets).
  """
  if os.path.isdir(path):
    raise UsageError("%s is a directory, not a file; give the file itself" % path)
  if not os.path.isfile(path):
    raise UsageError("%s: file not found; check the path" % path)
  try:
    with open(path, "rb") as f:
      data = f.read()
  except (IOError, OSError) as e:
    raise UsageError("%s: cannot read it (%s); check its permissions" % (path, e.strerror or e))
  return decode_utf8(path, data, "save the file as UTF-8 (e.g. `iconv -f GB18030 -t UTF-8`)")


def decode_utf8(name, data, advice):
  """Decodes UTF-8 bytes read from `name` (a leading byte order mark is dropped).

  Raises:
    UsageError: UTF-16/UTF-32, a NUL byte, or bytes that are not UTF-8 (the message names
      the line and the byte offsets, then gives `advice`).
  """
  check_utf8_bytes(name, data)
  # The BOM goes first, so that the error's offsets and byte are those of `data` itself.
  start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
  try:
    return data[start:].decode("utf-8")
  except UnicodeDecodeError as e:
    offset = start + e.start
    line_number, column = _line_and_column(data, offset)
    raise line_error(
        name, line_number,
        "byte 0x%02x at byte offset %d of the line (offset %d in the file) is not valid UTF-8"
        % (data[offset], column, offset), advice)


# Unpaired UTF-16 surrogates: JSON's \uD800-style escapes can make them, and no UTF-8 file
# can hold them, so writing such a text out (predictions) would fail after training.
_SURROGATE = re.compile(u"[\ud800-\udfff]")


def find_surrogate(text):
  """The first unpaired surrogate of `text` as (character, 1-based position), or None."""
  match = _SURROGATE.search(text)
  return (match.group(), match.start() + 1) if match else None


class DuplicateKeyError(ValueError):
  """A JSON object gives a key twice. Args: (key, first value, second value)."""


def _unique_keys_object(pairs):
  """object_pairs_hook of json.loads: a dict, refusing a key given twice."""
  result = {}
  for key, value in pairs:
    if key in result:
      raise DuplicateKeyError(key, result[key], value)
    result[key] = value
  return result


def parse_json(text):
  """json.loads that refuses duplicate keys (json keeps the last one silently).

  Raises:
    DuplicateKeyError: a key given twice in one object.
    ValueError: invalid JSON.
    RecursionError: nested too deeply for Python's parser.
  """
  return json.loads(text, object_pairs_hook=_unique_keys_object)


def json_decoder():
  """A json.JSONDecoder that refuses duplicate keys as parse_json does; its raw_decode
  reads one value at a time out of a longer text (a JSON array element by element)."""
  return json.JSONDecoder(object_pairs_hook=_unique_keys_object)


# Longest value quoted in an error message: the text for repr quotes, the quoted text
# for JSON quotes (the two callers' limits before they shared this module).
_MAX_REPR_QUOTED_CHARS = 80
_MAX_JSON_QUOTED_CHARS = 60


def quote_value(value, as_json=False):
  """A value for an error message, shortened when long.

  Args:
    value: the value (any JSON value when as_json, else anything str() takes).
    as_json: False: Python's repr of its text, 'like this' (the classifier's messages);
      True: JSON-quoted with non-ASCII kept, "like this" (NER's messages), which shows
      spaces and escapes and quotes non-strings as JSON (null, [0, 5]).

  Returns:
    str.
  """
  if as_json:
    text = json.dumps(value, ensure_ascii=False)
    if len(text) > _MAX_JSON_QUOTED_CHARS:
      text = text[:_MAX_JSON_QUOTED_CHARS] + "..."
    return text
  text = value if isinstance(value, str) else str(value)
  if len(text) > _MAX_REPR_QUOTED_CHARS:
    text = text[:_MAX_REPR_QUOTED_CHARS] + "..."
  return repr(text)


def numbered_lines(text):
  """(1-based line number, line) of a text, line ends (\\n or \\r\\n) removed.

  Splits on "\\n" only: str.splitlines() would also split on characters such as U+2028 or
  U+001C that can occur inside a text, and then the line numbers an editor shows would no
  longer match.
  """
  for index, line in enumerate(text.split("\n")):
    if line.endswith("\r"):
      line = line[:-1]
    yield index + 1, line


def text_lines(path, as_json=False):
  """numbered_lines of a UTF-8 file, refusing a carriage return left inside a line: a file
  with old Mac (CR-only) line ends would otherwise be one long line.

  Args:
    path: the file.
    as_json: how the line is quoted in the error (see quote_value).

  Raises:
    UsageError: unreadable or not UTF-8 (read_text_file), or a carriage return inside a
      line.
  """
  return checked_lines(path, read_text_file(path), as_json)


def checked_lines(name, text, as_json=False):
  """text_lines of `text` already read from the file `name`."""
  for line_number, line in numbered_lines(text):
    if "\r" in line:
      raise line_error(
          name, line_number, "carriage return (\\r) inside the line, at character %d: %s"
          % (line.index("\r") + 1, quote_value(line, as_json)),
          "the file has CR (old Mac) line ends or a stray CR; save it with \\n line ends "
          "and remove CRs from the texts")
    yield line_number, line
