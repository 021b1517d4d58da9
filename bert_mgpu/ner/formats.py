# coding=utf-8
"""NER data files: the conll, CLUENER and CMeEE formats read into NerSentences.

Formats (files in data_dir; see split_path):

  conll    {train,dev,test}.txt (also .bio, .bmes, .char.bmes): one token per line,
           columns split at runs of spaces or tabs, the first column the token and the
           last the tag, a blank line (or a `-DOCSTART-` line) between sentences. The
           MSRA and People's Daily releases have one Chinese character per line. The
           test file may have no tag column; a file where some token lines have a tag
           and others do not is refused.
  cluener  {train,dev,test}.json as CLUENER2020 ships them: one JSON object per line,
           {"id"?, "text", "label"?: {type: {entity text: [[start, end], ...]}}} with
           character offsets and inclusive ends. Every character is a token, so every
           span can be tagged; tags are written in the scheme asked for (BIO by default).
  cmeee    CMeEE_{train,dev,test}.json (else {train,dev,test}.json) as CBLUE ships them: a
           JSON array of {"text", "entities"?: [{"start_idx", "end_idx", "type",
           "entity"?}]}, character offsets, end_idx inclusive; JSON lines (one object per
           line) are read too (a file whose first non-space character is "[" is an
           array). The test file has no "entities". Every character is a token, as in
           cluener. --data_format=auto never picks it (train.json means cluener).

All become NerSentences: tokens, tags, the entity spans (cluener and cmeee: every span
as given, nested or overlapping ones included; the tags keep only spans that overlap no
earlier one, see _drop_overlaps), and the sentence text with each token's offset in it,
which predictions use for character offsets (writers.py writes them back).

No TensorFlow import. Bad input raises errors.UsageError with one line that names the
file, the line (1-based) and the value, and says what to do.
"""

import os
import re

from bert_mgpu.data import text_files
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import scoring as ner_scoring
import tokenization

DATA_FORMATS = ("conll", "cluener", "cmeee")
# What --data_format=auto chooses from: cmeee's {split}.json would read as cluener's.
AUTO_FORMATS = ("conll", "cluener")
SPLITS = ("train", "dev", "test")
SPLIT_FILE_NAMES = {
    "conll": ("{}.txt", "{}.bio", "{}.bmes", "{}.char.bmes"),
    "cluener": ("{}.json",),
    "cmeee": ("CMeEE_{}.json", "{}.json"),
}
# The flag that makes a run read each split.
_SPLIT_FLAGS = {"train": "--do_train", "dev": "--do_eval", "test": "--do_predict"}
DOCSTART = "-DOCSTART-"
_COLUMN_SEPARATOR = re.compile(u"[ \t]+")
_JSON_WHITESPACE = re.compile(u"[ \t\n\r]*")


def quote(value):
  """A value for an error message: JSON-quoted (shows spaces and escapes), shortened."""
  return text_files.quote_value(value, as_json=True)


# ---------------------------------------------------------------------------
# Data model
# ---------------------------------------------------------------------------

class NerSentence(object):
  """One sentence of tokens with their tags.

  Attributes:
    tokens: list of non-empty str (conll: the first column; cluener: one character each).
    tags: list of str [len(tokens)], or None when its file has no tags.
    spans: list of (type, start, end) over token indexes, end exclusive, sorted by
      (start, end, type) without duplicates (normalize_spans); nested and overlapping
      spans kept (cluener, cmeee); None when its file has no tags.
    text: str, the text that entity offsets index: tokens[i] is
      text[token_starts[i]:token_starts[i] + len(tokens[i])].
    token_starts: list of int [len(tokens)].
    source_file: the file it was read from.
    source_line: 1-based line where it starts (cluener: its line).
    token_lines: list of int, the 1-based line of each token (conll), or None (cluener).
    example_id: cluener's "id" as read (a JSON int or string), else the 0-based index
      of its line; cmeee: the 0-based index of its record; None for conll.
  """

  def __init__(self, tokens, tags, text, token_starts, source_file=None, source_line=None,
               token_lines=None, example_id=None, spans=None):
    self.tokens = tokens
    self.tags = tags
    self.spans = spans
    self.text = text
    self.token_starts = token_starts
    self.source_file = source_file
    self.source_line = source_line
    self.token_lines = token_lines
    self.example_id = example_id

  def line_of_token(self, index):
    """The 1-based line of token `index` in its file, for error messages."""
    return self.token_lines[index] if self.token_lines else self.source_line


class NerFile(object):
  """The sentences of one data file.

  Attributes:
    path: the file.
    data_format: one of DATA_FORMATS.
    sentences: list of NerSentence.
    tagged: whether the sentences have tags.
    lines: conll: every line of the file as read (line ends removed), for predict.txt;
      None for cluener and cmeee.
    dropped_overlaps: cluener and cmeee: how many entities the tags leave out for
      overlapping an earlier one (the spans keep them), and first_overlap_line the first
      line where it happened.
  """

  def __init__(self, path, data_format, sentences, tagged, lines=None, dropped_overlaps=0,
               first_overlap_line=None):
    self.path = path
    self.data_format = data_format
    self.sentences = sentences
    self.tagged = tagged
    self.lines = lines
    self.dropped_overlaps = dropped_overlaps
    self.first_overlap_line = first_overlap_line


# ---------------------------------------------------------------------------
# Files of a data directory
# ---------------------------------------------------------------------------

def normalize_spans(spans):
  """Spans as NerSentence.spans holds them: (type, start, end) tuples sorted by (start,
  end, type), each once."""
  return sorted(set(tuple(span) for span in spans), key=lambda s: (s[1], s[2], s[0]))


def _candidates(data_format, split):
  return [pattern.format(split) for pattern in SPLIT_FILE_NAMES[data_format]]


def detect_data_format(data_dir):
  """The format of data_dir's files, by their names (--data_format=auto): conll or
  cluener, never cmeee (its train.json is cluener's name).

  Raises:
    UsageError: files of both formats, or of neither (naming --data_format=cmeee when
      the directory holds CMeEE_*.json files).
  """
  present = {}
  for data_format in AUTO_FORMATS:
    names = [name for split in SPLITS for name in _candidates(data_format, split)
             if os.path.isfile(os.path.join(data_dir, name))]
    if names:
      present[data_format] = names[0]
  if len(present) == 1:
    return list(present)[0]
  if present:
    raise UsageError("%s holds both conll (%s) and cluener (%s) files; pass "
                     "--data_format=conll or --data_format=cluener"
                     % (data_dir, present["conll"], present["cluener"]))
  cmeee_files = sorted(name for name in os.listdir(data_dir)
                       if name.startswith("CMeEE_") and name.endswith(".json"))
  if cmeee_files:
    raise UsageError("%s holds no conll or cluener files but CMeEE files (%s); pass "
                     "--data_format=cmeee" % (data_dir, ", ".join(cmeee_files)))
  raise UsageError("%s has no NER data files: expected train/dev/test.txt (also .bio, "
                   ".bmes, .char.bmes) for conll or train/dev/test.json for cluener; check "
                   "--data_dir" % data_dir)


def split_path(data_dir, data_format, split):
  """The file of one split: the first of its candidate names that exists in data_dir.

  Raises:
    UsageError: none of them exists (the message names the flag that needs the split).
  """
  names = _candidates(data_format, split)
  for name in names:
    path = os.path.join(data_dir, name)
    if os.path.isfile(path):
      return path
  raise UsageError("%s has no %s file for %s (looked for %s); add it or drop %s"
                   % (data_dir, data_format, split, ", ".join(names), _SPLIT_FLAGS[split]))


def read_split(data_dir, data_format, split, cluener_scheme="BIO"):
  """Reads one split; training and dev files must have tags, the test file may not.

  Args:
    data_dir: the data directory.
    data_format: one of DATA_FORMATS.
    split: "train", "dev" or "test".
    cluener_scheme: the scheme CLUENER's and CMeEE's spans are written in as tags.

  Returns:
    A NerFile.

  Raises:
    UsageError: a missing file, bad input (see read_conll, read_cluener, read_cmeee), or
      a training or dev file without tags.
  """
  path = split_path(data_dir, data_format, split)
  if data_format == "conll":
    data = read_conll(path)
  elif data_format == "cluener":
    data = read_cluener(path, cluener_scheme)
  else:
    data = read_cmeee(path, cluener_scheme)
  if split != "test" and not data.tagged:
    if data_format == "conll":
      problem, advice = "no tag column", "give every token line a tag after the token"
    elif data_format == "cluener":
      problem, advice = "no \"label\"", "give every line its \"label\" ({} for no entity)"
    else:
      problem, advice = ("no \"entities\"",
                         "give every record its \"entities\" ([] for no entity)")
    raise text_files.line_error(path, data.sentences[0].source_line,
                                "%s in a %s file, which needs tags" % (problem, split), advice)
  return data


# ---------------------------------------------------------------------------
# conll
# ---------------------------------------------------------------------------

def _file_lines(path, text=None):
  """The lines of a UTF-8 file, line ends (\\n or \\r\\n) removed; no line after a final
  line end.

  Args:
    path: the file.
    text: its text when read already, else None to read it.

  Raises:
    UsageError: unreadable or not UTF-8 (text_files.read_text_file), or a carriage
      return inside a line (old Mac line ends would make the file one line).
  """
  if text is None:
    text = text_files.read_text_file(path)
  lines = text.split("\n")
  if lines[-1] == "":
    lines.pop()
  for index, line in enumerate(lines):
    if line.endswith("\r"):
      line = lines[index] = line[:-1]
    if "\r" in line:
      raise text_files.line_error(
          path, index + 1, "carriage return (\\r) inside the line: %s" % quote(line),
          "save the file with \\n line ends")
  return lines


def is_blank(line):
  """Whether a conll line holds only spaces and tabs (a sentence break)."""
  return not line.strip(" \t")


def conll_columns(line):
  """The columns of a conll token line, split at runs of spaces or tabs."""
  return _COLUMN_SEPARATOR.split(line.strip(" \t"))


def join_conll_tokens(tokens):
  """The text of a conll sentence and the offset of each token in it.

  When every token is one character (MSRA, People's Daily), the text is the tokens
  joined as they are: the original text. Otherwise a space goes between two tokens
  unless one side of it is a CJK character (Chinese has no spaces between words).

  Returns:
    (text, token_starts).
  """
  spaced = any(len(token) > 1 for token in tokens)
  parts, starts, position = [], [], 0
  for index, token in enumerate(tokens):
    if (spaced and index and not tokenization.is_cjk_character(token[0])
        and not tokenization.is_cjk_character(tokens[index - 1][-1])):
      parts.append(" ")
      position += 1
    starts.append(position)
    parts.append(token)
    position += len(token)
  return "".join(parts), starts


def _conll_sentence(path, rows, tagged):
  """A NerSentence from (line number, columns) rows; tags checked to be well-formed."""
  tokens = [columns[0] for _, columns in rows]
  tags = spans = None
  if tagged:
    tags = [columns[-1] for _, columns in rows]
    for (line_number, _), tag in zip(rows, tags):
      if ner_scoring.split_tag(tag) is None:
        raise text_files.line_error(
            path, line_number, "tag %s is not O nor B-, I-, M-, E- or S-<type>" % quote(tag),
            "write the tags in the BIO, BIOES/BMES or IO scheme (e.g. B-PER, I-PER, O)")
    spans = normalize_spans(ner_scoring.entities(tags))
  text, starts = join_conll_tokens(tokens)
  return NerSentence(tokens, tags, text, starts, source_file=path, source_line=rows[0][0],
                     token_lines=[line_number for line_number, _ in rows], spans=spans)


def read_conll(path):
  """Reads a conll file (see the module docstring).

  Returns:
    A NerFile with the file's lines kept for writers.write_conll_predictions.

  Raises:
    UsageError: unreadable or not UTF-8, no sentence, a token line with a tag column
      in a file whose first token line has none (or the reverse), or a malformed tag.
  """
  lines = _file_lines(path)
  sentences, rows = [], []
  tagged, first_token_line = None, None
  for index, line in enumerate(lines + [""]):
    columns = None if is_blank(line) else conll_columns(line)
    if columns is None or columns[0] == DOCSTART:
      if rows:
        sentences.append(_conll_sentence(path, rows, tagged))
        rows = []
      continue
    if tagged is None:
      tagged, first_token_line = len(columns) > 1, index + 1
    elif tagged != (len(columns) > 1):
      raise text_files.line_error(
          path, index + 1, "%s but line %d %s: %s" % (
              "no tag column" if tagged else "a tag column", first_token_line,
              "has one" if tagged else "has none", quote(line)),
          "give every token line a tag (token, then tag, separated by spaces or a tab), "
          "or none (a test file)")
    rows.append((index + 1, columns))
  if not sentences:
    raise UsageError("%s: no sentences (no token lines); give one token per line, with a "
                     "blank line between sentences" % path)
  return NerFile(path, "conll", sentences, tagged, lines=lines)


# ---------------------------------------------------------------------------
# CLUENER
# ---------------------------------------------------------------------------

def _json_lines(path, text=None):
  """Yields (line number, dict) for every non-blank line of a JSON-lines file.

  Args:
    path: the file.
    text: its text when read already, else None to read it.

  Raises:
    UsageError: invalid JSON, a key given twice, or a line that is not an object.
  """
  for index, line in enumerate(_file_lines(path, text)):
    if not line.strip():
      continue
    try:
      value = text_files.parse_json(line)
    except text_files.DuplicateKeyError as e:
      raise text_files.line_error(path, index + 1, "the object has the key %s twice"
                                  % quote(e.args[0]), "give each key once")
    except (ValueError, RecursionError) as e:
      raise text_files.line_error(path, index + 1, "invalid JSON (%s): %s"
                                  % (e, quote(line)), "write one JSON object per line")
    if not isinstance(value, dict):
      raise text_files.line_error(path, index + 1, "expected a JSON object, got %s"
                                  % quote(line), "write one JSON object per line")
    yield index + 1, value


def _cluener_text(path, line_number, obj, unit="line"):
  """The "text" of a JSON object (a CLUENER line, a CMeEE record), checked."""
  text = obj.get("text")
  if not isinstance(text, str):
    raise text_files.line_error(path, line_number, "\"text\" is %s, not a string"
                                % quote(text), "give every %s its \"text\"" % unit)
  surrogate = text_files.find_surrogate(text)
  if surrogate:
    raise text_files.line_error(
        path, line_number, "the text holds an unpaired surrogate \\u%04x at character %d"
        % (ord(surrogate[0]), surrogate[1]), "fix the \\u escape or remove it")
  return text


def _cluener_id(path, line_number, obj):
  """The "id" as read (a JSON int or string), or the 0-based line index when absent."""
  if "id" not in obj:
    return line_number - 1
  value = obj["id"]
  if isinstance(value, bool) or not isinstance(value, (int, str)):
    raise text_files.line_error(path, line_number, "\"id\" is %s" % quote(value),
                                "write the id as a JSON number or string")
  return value


def _span_error(path, line_number, problem):
  return text_files.line_error(
      path, line_number, problem, "each label is {type: {entity text: [[start, end], ...]}} "
      "with 0-based character offsets and inclusive ends, text[start:end + 1] == entity text")


def _cluener_spans(path, line_number, text, label):
  """The entities of a "label" value as (type, start, end exclusive), in reading order.

  Raises:
    UsageError: a malformed label, or a span that does not slice `text` to its entity text.
  """
  if not isinstance(label, dict):
    raise _span_error(path, line_number, "\"label\" is %s, not an object" % quote(label))
  spans = []
  for entity_type, mentions in label.items():
    if not entity_type or any(char.isspace() for char in entity_type):
      raise _span_error(path, line_number, "entity type %s is empty or holds whitespace"
                        % quote(entity_type))
    if not isinstance(mentions, dict):
      raise _span_error(path, line_number, "label %s holds %s, not an object"
                        % (quote(entity_type), quote(mentions)))
    for entity_text, positions in mentions.items():
      for span in positions if isinstance(positions, list) else [positions]:
        if (not isinstance(span, list) or len(span) != 2
            or any(isinstance(n, bool) or not isinstance(n, int) for n in span)):
          raise _span_error(path, line_number, "%s %s: %s is not a [start, end] pair"
                            % (entity_type, quote(entity_text), quote(span)))
        start, end = span
        if not 0 <= start <= end < len(text) or text[start:end + 1] != entity_text:
          raise _span_error(path, line_number, "%s span [%d, %d] of %s slices the text to "
                            "%s" % (entity_type, start, end, quote(entity_text),
                                    quote(text[max(start, 0):max(end + 1, 0)])))
        spans.append((entity_type, start, end + 1))
  return spans


def _drop_overlaps(spans):
  """Keeps the spans that overlap no earlier kept one (by start, then longest first).

  A tag sequence holds no overlapping entities. CLUENER's own baseline tags the spans
  one after another, so the last in JSON order wins; keeping the earliest (and, of
  those, the longest) is as arbitrary but does not depend on key order. A (type, span)
  listed twice is kept once and not counted.

  Returns:
    (sorted kept spans, number dropped).
  """
  kept, dropped = [], 0
  for span in sorted(set(spans), key=lambda s: (s[1], -s[2], spans.index(s))):
    if kept and span[1] < kept[-1][2]:
      dropped += 1
    else:
      kept.append(span)
  return kept, dropped


class _SpanFile(object):
  """A CLUENER or CMeEE file's sentences as they are read: whether every record has
  entities (or none has), and the spans the tags drop."""

  def __init__(self, path, data_format, label_key, scheme):
    self.path, self.data_format, self.scheme = path, data_format, scheme
    self._label_key = label_key
    self.sentences, self.tagged, self._first_line = [], None, None
    self.dropped_overlaps, self.first_overlap_line = 0, None

  def check_tagged(self, line_number, has_label, unit, advice):
    """Refuses a record with entities in a file whose first record has none, or the
    reverse."""
    if self.tagged is None:
      self.tagged, self._first_line = has_label, line_number
    elif has_label != self.tagged:
      key = '"%s"' % self._label_key
      raise text_files.line_error(
          self.path, line_number, "%s but %s %d %s" % (
              "no " + key if self.tagged else key + " given", unit, self._first_line,
              "has one" if self.tagged else "has none"), advice)

  def add(self, line_number, text, spans, example_id):
    """Adds one sentence of `text`, every character a token; `spans` (type, start, end
    exclusive) as read, or None for no labels."""
    tags = None
    if spans is not None:
      kept, dropped = _drop_overlaps(spans)
      if dropped and not self.dropped_overlaps:
        self.first_overlap_line = line_number
      self.dropped_overlaps += dropped
      tags = ner_scoring.tags_from_entities(kept, len(text), self.scheme)
      spans = normalize_spans(spans)
    self.sentences.append(NerSentence(list(text), tags, text, list(range(len(text))),
                                      source_file=self.path, source_line=line_number,
                                      example_id=example_id, spans=spans))

  def ner_file(self, if_empty):
    """The NerFile; UsageError when the file held no record (`if_empty` says so)."""
    if not self.sentences:
      raise UsageError("%s: %s" % (self.path, if_empty))
    return NerFile(self.path, self.data_format, self.sentences, bool(self.tagged),
                   dropped_overlaps=self.dropped_overlaps,
                   first_overlap_line=self.first_overlap_line)


def read_cluener(path, scheme="BIO"):
  """Reads a CLUENER2020 file (see the module docstring).

  Args:
    path: the JSON-lines file.
    scheme: the scheme the spans are written in as tags.

  Returns:
    A NerFile; the tags leave out the spans that overlap an earlier one, and count them
    (see _drop_overlaps); each sentence's spans keep them all.

  Raises:
    UsageError: invalid JSON, a line without "text", a bad id or label, a span that does
      not slice the text to its entity text, lines with a "label" mixed with lines
      without one, or no lines.
  """
  span_file = _SpanFile(path, "cluener", "label", scheme)
  for line_number, obj in _json_lines(path):
    text = _cluener_text(path, line_number, obj)
    has_label = obj.get("label") is not None
    span_file.check_tagged(line_number, has_label, "line", "give every line of a training "
                           "or dev file its \"label\" ({} for no entity)")
    spans = _cluener_spans(path, line_number, text, obj["label"]) if has_label else None
    span_file.add(line_number, text, spans, _cluener_id(path, line_number, obj))
  return span_file.ner_file("no lines; write one JSON object per line")


# ---------------------------------------------------------------------------
# CMeEE
# ---------------------------------------------------------------------------

def _array_error(path, text, offset, problem):
  return text_files.line_error(path, text.count("\n", 0, offset) + 1, problem,
                               "write a JSON array of objects, or one JSON object per line")


def _json_array(path, text):
  """Yields (line number, value) for every element of a JSON array, parsed one element at
  a time so that each comes with the line where it starts.

  Raises:
    UsageError: invalid JSON (at its line), a key given twice (the element's line), or
      anything but white space after the array.
  """
  decoder, skip = text_files.json_decoder(), _JSON_WHITESPACE.match
  position = skip(text, skip(text).end() + 1).end()  # after the "["
  line_number, counted_to = 1, 0
  while not text.startswith("]", position):
    line_number += text.count("\n", counted_to, position)
    counted_to = position
    try:
      value, end = decoder.raw_decode(text, position)
    except text_files.DuplicateKeyError as e:
      raise text_files.line_error(path, line_number, "the object has the key %s twice"
                                  % quote(e.args[0]), "give each key once")
    except ValueError as e:  # json.JSONDecodeError: pos is an offset into the whole text
      raise _array_error(path, text, getattr(e, "pos", position), "invalid JSON (%s)" % e)
    except RecursionError:
      raise _array_error(path, text, position, "JSON nested too deeply")
    yield line_number, value
    position = skip(text, end).end()
    if position == len(text):
      raise _array_error(path, text, position, "the array is not closed with \"]\"")
    if text.startswith(",", position):
      position = skip(text, position + 1).end()
      if text.startswith("]", position):
        raise _array_error(path, text, position, "a \",\" before the closing \"]\"")
    elif not text.startswith("]", position):
      raise _array_error(path, text, position, "expected \",\" or \"]\" after an element, "
                         "got %s" % quote(text[position:position + 20]))
  rest = skip(text, position + 1).end()
  if rest < len(text):
    raise _array_error(path, text, rest, "%s after the array" % quote(text[rest:rest + 20]))


def _cmeee_records(path):
  """Yields (line number, dict) for every record of a CMeEE file: a JSON array, or JSON
  lines when the first non-space character is not "[".

  Raises:
    UsageError: unreadable, invalid JSON, a key given twice, or a record that is not an
      object.
  """
  text = text_files.read_text_file(path)
  if not text.startswith("[", _JSON_WHITESPACE.match(text).end()):
    for record in _json_lines(path, text):
      yield record
    return
  for line_number, value in _json_array(path, text):
    if not isinstance(value, dict):
      raise text_files.line_error(path, line_number, "expected a JSON object, got %s"
                                  % quote(value), "make every element of the array an object")
    yield line_number, value


def _entity_error(path, line_number, problem):
  return text_files.line_error(
      path, line_number, problem, "each entity is {\"start_idx\", \"end_idx\", \"type\", "
      "\"entity\"} with 0-based character offsets, end_idx inclusive, and "
      "text[start_idx:end_idx + 1] == entity")


def _cmeee_span(path, line_number, text, entity):
  """One CMeEE entity object as (type, start, end exclusive), checked against the text."""
  if not isinstance(entity, dict):
    raise _entity_error(path, line_number, "entity %s is not an object" % quote(entity))
  start, end = entity.get("start_idx"), entity.get("end_idx")
  entity_type, entity_text = entity.get("type"), entity.get("entity")
  for key, value in (("start_idx", start), ("end_idx", end)):
    if isinstance(value, bool) or not isinstance(value, int):
      raise _entity_error(path, line_number, "\"%s\" is %s, not an integer, in %s"
                          % (key, quote(value), quote(entity)))
  if (not isinstance(entity_type, str) or not entity_type
      or any(char.isspace() for char in entity_type)):
    raise _entity_error(path, line_number, "entity type %s is not a non-empty string "
                        "without white space" % quote(entity_type))
  if entity_text is not None and not isinstance(entity_text, str):
    raise _entity_error(path, line_number, "\"entity\" is %s, not a string"
                        % quote(entity_text))
  if not 0 <= start <= end < len(text):
    raise _entity_error(path, line_number, "%s span [%d, %d] is outside the text of %d "
                        "characters" % (entity_type, start, end, len(text)))
  if entity_text is not None and text[start:end + 1] != entity_text:
    raise _entity_error(path, line_number, "%s span [%d, %d] of %s slices the text to %s"
                        % (entity_type, start, end, quote(entity_text),
                           quote(text[start:end + 1])))
  return entity_type, start, end + 1


def read_cmeee(path, scheme="BIO"):
  """Reads a CMeEE file (see the module docstring).

  Args:
    path: the JSON array or JSON-lines file.
    scheme: the scheme the spans are written in as tags.

  Returns:
    A NerFile as read_cluener's: every span in the sentences' spans, the tags without
    those that overlap an earlier one (counted). example_id is the record's 0-based index.

  Raises:
    UsageError: invalid JSON, a record without "text", an entity that is malformed or
      does not slice the text to its "entity", records with "entities" mixed with records
      without, or no records.
  """
  span_file = _SpanFile(path, "cmeee", "entities", scheme)
  for index, (line_number, obj) in enumerate(_cmeee_records(path)):
    text = _cluener_text(path, line_number, obj, "record")
    entities = obj.get("entities")
    span_file.check_tagged(line_number, entities is not None, "the record on line",
                           "give every record of a training or dev file its \"entities\" "
                           "([] for no entity)")
    spans = None
    if entities is not None:
      if not isinstance(entities, list):
        raise _entity_error(path, line_number, "\"entities\" is %s, not a list"
                            % quote(entities))
      spans = [_cmeee_span(path, line_number, text, entity) for entity in entities]
    span_file.add(line_number, text, spans, index)
  return span_file.ner_file("no records; write a JSON array of {\"text\", \"entities\"} "
                            "objects")
