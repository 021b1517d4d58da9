# coding=utf-8
"""NER data files: the conll and CLUENER formats read into NerSentences.

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

Both become NerSentences: tokens, tags, and the sentence text with each token's offset
in it, which predictions use for character offsets (writers.py writes them back).

No TensorFlow import. Bad input raises errors.UsageError with one line that names the
file, the line (1-based) and the value, and says what to do.
"""

import os
import re

from bert_mgpu.data import text_files
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import scoring as ner_scoring
import tokenization

DATA_FORMATS = ("conll", "cluener")
SPLITS = ("train", "dev", "test")
SPLIT_FILE_NAMES = {
    "conll": ("{}.txt", "{}.bio", "{}.bmes", "{}.char.bmes"),
    "cluener": ("{}.json",),
}
# The flag that makes a run read each split.
_SPLIT_FLAGS = {"train": "--do_train", "dev": "--do_eval", "test": "--do_predict"}
DOCSTART = "-DOCSTART-"
_COLUMN_SEPARATOR = re.compile(u"[ \t]+")


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
    text: str, the text that entity offsets index: tokens[i] is
      text[token_starts[i]:token_starts[i] + len(tokens[i])].
    token_starts: list of int [len(tokens)].
    source_file: the file it was read from.
    source_line: 1-based line where it starts (cluener: its line).
    token_lines: list of int, the 1-based line of each token (conll), or None (cluener).
    example_id: cluener's "id" as read (a JSON int or string), else the 0-based index
      of its line; None for conll.
  """

  def __init__(self, tokens, tags, text, token_starts, source_file=None, source_line=None,
               token_lines=None, example_id=None):
    self.tokens = tokens
    self.tags = tags
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
    data_format: "conll" or "cluener".
    sentences: list of NerSentence.
    tagged: whether the sentences have tags.
    lines: conll: every line of the file as read (line ends removed), for predict.txt;
      None for cluener.
    dropped_overlaps: cluener: how many entities were dropped for overlapping an
      earlier one, and first_overlap_line the first line where it happened.
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

def _candidates(data_format, split):
  return [pattern.format(split) for pattern in SPLIT_FILE_NAMES[data_format]]


def detect_data_format(data_dir):
  """The format of data_dir's files, by their names (--data_format=auto).

  Raises:
    UsageError: files of both formats, or of neither.
  """
  present = {}
  for data_format in DATA_FORMATS:
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
    data_format: "conll" or "cluener".
    split: "train", "dev" or "test".
    cluener_scheme: the scheme CLUENER spans are written in as tags.

  Returns:
    A NerFile.

  Raises:
    UsageError: a missing file, bad input (see read_conll, read_cluener), or a training
      or dev file without tags.
  """
  path = split_path(data_dir, data_format, split)
  if data_format == "conll":
    data = read_conll(path)
  else:
    data = read_cluener(path, cluener_scheme)
  if split != "test" and not data.tagged:
    if data_format == "conll":
      problem, advice = "no tag column", "give every token line a tag after the token"
    else:
      problem, advice = "no \"label\"", "give every line its \"label\" ({} for no entity)"
    raise text_files.line_error(path, data.sentences[0].source_line,
                                "%s in a %s file, which needs tags" % (problem, split), advice)
  return data


# ---------------------------------------------------------------------------
# conll
# ---------------------------------------------------------------------------

def _file_lines(path):
  """The lines of a UTF-8 file, line ends (\\n or \\r\\n) removed; no line after a final
  line end.

  Raises:
    UsageError: unreadable or not UTF-8 (text_files.read_text_file), or a carriage
      return inside a line (old Mac line ends would make the file one line).
  """
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
  tags = None
  if tagged:
    tags = [columns[-1] for _, columns in rows]
    for (line_number, _), tag in zip(rows, tags):
      if ner_scoring.split_tag(tag) is None:
        raise text_files.line_error(
            path, line_number, "tag %s is not O nor B-, I-, M-, E- or S-<type>" % quote(tag),
            "write the tags in the BIO, BIOES/BMES or IO scheme (e.g. B-PER, I-PER, O)")
  text, starts = join_conll_tokens(tokens)
  return NerSentence(tokens, tags, text, starts, source_file=path, source_line=rows[0][0],
                     token_lines=[line_number for line_number, _ in rows])


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

def _json_lines(path):
  """Yields (line number, dict) for every non-blank line of a JSON-lines file.

  Raises:
    UsageError: invalid JSON, a key given twice, or a line that is not an object.
  """
  for index, line in enumerate(_file_lines(path)):
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


def _cluener_text(path, line_number, obj):
  text = obj.get("text")
  if not isinstance(text, str):
    raise text_files.line_error(path, line_number, "\"text\" is %s, not a string"
                                % quote(text), "give every line its \"text\"")
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


def read_cluener(path, scheme="BIO"):
  """Reads a CLUENER2020 file (see the module docstring).

  Args:
    path: the JSON-lines file.
    scheme: the scheme the spans are written in as tags.

  Returns:
    A NerFile; overlapping spans are dropped and counted (see _drop_overlaps).

  Raises:
    UsageError: invalid JSON, a line without "text", a bad id or label, a span that does
      not slice the text to its entity text, lines with a "label" mixed with lines
      without one, or no lines.
  """
  sentences, tagged, first_line = [], None, None
  dropped_overlaps, first_overlap_line = 0, None
  for line_number, obj in _json_lines(path):
    text = _cluener_text(path, line_number, obj)
    has_label = obj.get("label") is not None
    if tagged is None:
      tagged, first_line = has_label, line_number
    elif has_label != tagged:
      raise text_files.line_error(
          path, line_number, "%s \"label\" but line %d %s" % (
              "no" if tagged else "a", first_line, "has one" if tagged else "has none"),
          "give every line of a training or dev file its \"label\" ({} for no entity)")
    tags = None
    if tagged:
      spans, dropped = _drop_overlaps(_cluener_spans(path, line_number, text, obj["label"]))
      if dropped and not dropped_overlaps:
        first_overlap_line = line_number
      dropped_overlaps += dropped
      tags = ner_scoring.tags_from_entities(spans, len(text), scheme)
    sentences.append(NerSentence(list(text), tags, text, list(range(len(text))),
                                 source_file=path, source_line=line_number,
                                 example_id=_cluener_id(path, line_number, obj)))
  if not sentences:
    raise UsageError("%s: no lines; write one JSON object per line" % path)
  return NerFile(path, "cluener", sentences, bool(tagged), dropped_overlaps=dropped_overlaps,
                 first_overlap_line=first_overlap_line)

