# coding=utf-8
"""Named-entity data: the conll and CLUENER formats, word-piece alignment and windows.

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
in it, which predictions use for character offsets.

Alignment: each token is tokenized on its own; its tag goes to its first word piece
and the others get label mask 0. A token that gives no piece (a space, a control
character) is predicted O (see tags_from_windows for the one exception).

Windows: a sentence longer than max_seq_length - 2 pieces is cut into windows whose
starts are doc_stride pieces apart; each token takes its prediction from the window
where it has the most context (SQuAD's rule: min(pieces left, pieces right) + 0.01 *
window length, the first window wins ties).

Outputs: predict.txt (conll: each test-file line with its predicted tag appended),
predict.json (CLUENER's submission format) and predict_entities.jsonl (both formats).

No TensorFlow import. Bad input raises errors.UsageError with one line that names the
file, the line (1-based) and the value, and says what to do.
"""

import collections
import json
import os
import re

import numpy as np

from bert_mgpu.data import length_grouping
from bert_mgpu.ner import scoring as ner_scoring
from bert_mgpu.data import output_files
from bert_mgpu.data import text_files
import tokenization
from bert_mgpu.data import sequence_windows
from bert_mgpu.errors import UsageError

DATA_FORMATS = ("conll", "cluener")
SPLITS = ("train", "dev", "test")
SPLIT_FILE_NAMES = {
    "conll": ("{}.txt", "{}.bio", "{}.bmes", "{}.char.bmes"),
    "cluener": ("{}.json",),
}
# The flag that makes a run read each split.
_SPLIT_FLAGS = {"train": "--do_train", "dev": "--do_eval", "test": "--do_predict"}
DOCSTART = "-DOCSTART-"
LABELS_FILE = "labels.txt"
# Longest value quoted in an error message.
_MAX_QUOTED_CHARS = 60
_COLUMN_SEPARATOR = re.compile(u"[ \t]+")


def _quote(value):
  """A value for an error message: JSON-quoted (shows spaces and escapes), shortened."""
  text = json.dumps(value, ensure_ascii=False)
  return text if len(text) <= _MAX_QUOTED_CHARS else text[:_MAX_QUOTED_CHARS] + "..."


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
          path, index + 1, "carriage return (\\r) inside the line: %s" % _quote(line),
          "save the file with \\n line ends")
  return lines


def _is_blank(line):
  return not line.strip(" \t")


def _columns(line):
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
            path, line_number, "tag %s is not O nor B-, I-, M-, E- or S-<type>" % _quote(tag),
            "write the tags in the BIO, BIOES/BMES or IO scheme (e.g. B-PER, I-PER, O)")
  text, starts = join_conll_tokens(tokens)
  return NerSentence(tokens, tags, text, starts, source_file=path, source_line=rows[0][0],
                     token_lines=[line_number for line_number, _ in rows])


def read_conll(path):
  """Reads a conll file (see the module docstring).

  Returns:
    A NerFile with the file's lines kept for write_conll_predictions.

  Raises:
    UsageError: unreadable or not UTF-8, no sentence, a token line with a tag column
      in a file whose first token line has none (or the reverse), or a malformed tag.
  """
  lines = _file_lines(path)
  sentences, rows = [], []
  tagged, first_token_line = None, None
  for index, line in enumerate(lines + [""]):
    columns = None if _is_blank(line) else _columns(line)
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
              "has one" if tagged else "has none", _quote(line)),
          "give every token line a tag (token, then tag, separated by spaces or a tab), "
          "or none (a test file)")
    rows.append((index + 1, columns))
  if not sentences:
    raise UsageError("%s: no sentences (no token lines); give one token per line, with a "
                     "blank line between sentences" % path)
  return NerFile(path, "conll", sentences, tagged, lines=lines)


def format_conll(sentences, tags_per_sentence=None):
  """conll text: `token<TAB>tag` lines, a blank line after each sentence.

  Args:
    sentences: list of NerSentence.
    tags_per_sentence: list of tag lists, or None for the sentences' own tags (or none).
  """
  lines = []
  for index, sentence in enumerate(sentences):
    tags = sentence.tags if tags_per_sentence is None else tags_per_sentence[index]
    for position, token in enumerate(sentence.tokens):
      lines.append(token if tags is None else token + "\t" + tags[position])
    lines.append("")
  return "".join(line + "\n" for line in lines)


def write_conll_predictions(path, conll_file, predicted_tags):
  """Writes predict.txt: one line per line of the test file, in order.

  A token line becomes the line (trailing spaces and tabs removed) + TAB + its predicted
  tag; a `-DOCSTART-` line gets the tag O; blank lines stay as they are. With a tagged
  test file, each line is then `token gold pred`, conlleval's input.

  Args:
    path: the file to write.
    conll_file: the NerFile of the test file (read_conll).
    predicted_tags: list [len(conll_file.sentences)] of tag lists.
  """
  _check_prediction_lengths(conll_file.sentences, predicted_tags)
  appended = {}
  for sentence, tags in zip(conll_file.sentences, predicted_tags):
    appended.update(zip(sentence.token_lines, tags))
  out = []
  for index, line in enumerate(conll_file.lines):
    tag = appended.get(index + 1)
    if tag is None and not _is_blank(line) and _columns(line)[0] == DOCSTART:
      tag = ner_scoring.OUTSIDE
    out.append(line if tag is None else line.rstrip(" \t") + "\t" + tag)
  output_files.atomic_write_text(path, "".join(line + "\n" for line in out))


def _check_prediction_lengths(sentences, predicted_tags):
  """ValueError unless there is one tag list per sentence and one tag per token."""
  if len(predicted_tags) != len(sentences):
    raise ValueError("%d predictions for %d sentences" % (len(predicted_tags), len(sentences)))
  for sentence, tags in zip(sentences, predicted_tags):
    if len(tags) != len(sentence.tokens):
      raise ValueError("%d tags for the %d tokens of the sentence at %s line %d" % (
          len(tags), len(sentence.tokens), sentence.source_file, sentence.source_line))


# ---------------------------------------------------------------------------
# Tag scheme and label list
# ---------------------------------------------------------------------------

def _tagged_positions(ner_file):
  """Yields (sentence, token index, tag) over every tag of a tagged file."""
  for sentence in ner_file.sentences:
    for index, tag in enumerate(sentence.tags or ()):
      yield sentence, index, tag


def detect_file_scheme(ner_file):
  """The tag scheme of a file (the training file's decides a run's scheme).

  Returns:
    One of ner_scoring.SCHEMES (see ner_scoring.detect_scheme).

  Raises:
    UsageError: the file has both I- and M- tags (the message names a line of each).
  """
  first_of_prefix = collections.OrderedDict()
  for sentence, index, tag in _tagged_positions(ner_file):
    first_of_prefix.setdefault(tag[0], (tag, sentence.line_of_token(index)))
  try:
    return ner_scoring.detect_scheme(tag for tag, _ in first_of_prefix.values())
  except ValueError:
    (i_tag, i_line), (m_tag, m_line) = first_of_prefix["I"], first_of_prefix["M"]
    raise text_files.line_error(
        ner_file.path, m_line, "tag %s is BMES but line %d has %s, a BIO/BIOES tag"
        % (_quote(m_tag), i_line, _quote(i_tag)),
        "write all tags in one scheme (M- and I- both mean inside)")


def _not_in_labels_error(sentence, index, num_labels):
  """The UsageError for token `index` of `sentence`, whose tag is not a known label."""
  return text_files.line_error(
      sentence.source_file, sentence.line_of_token(index),
      "tag %s is not in the label list (%d labels)" % (_quote(sentence.tags[index]),
                                                       num_labels),
      "fix the tag, or list every tag in labels.txt in the data directory and train again")


def check_tags(ner_file, scheme, label_list=None):
  """Checks that every tag of a file is in `scheme` and, if given, in `label_list`.

  Raises:
    UsageError: the first tag outside them, with its file, line and value.
  """
  known = frozenset(label_list) if label_list is not None else None
  for sentence, index, tag in _tagged_positions(ner_file):
    if not ner_scoring.is_valid_tag(tag, scheme):
      raise text_files.line_error(
          ner_file.path, sentence.line_of_token(index),
          "tag %s is outside the %s scheme of the training file" % (_quote(tag), scheme),
          "write the tags of every split in one scheme (%s allows O and %s-<type>)"
          % (scheme, "-, ".join(sorted(ner_scoring.SCHEME_PREFIXES[scheme]))))
    if known is not None and tag not in known:
      raise _not_in_labels_error(sentence, index, len(known))


def read_label_file(path):
  """Reads labels.txt: one tag per line, in label-id order; blank lines ignored.

  Raises:
    UsageError: a tag listed twice, a malformed tag, no O, or no label at all.
  """
  labels, first_line = [], {}
  for index, line in enumerate(_file_lines(path)):
    label = line.strip()
    if not label:
      continue
    if label in first_line:
      raise text_files.line_error(path, index + 1, "label %s is listed twice (first on line "
                                  "%d)" % (_quote(label), first_line[label]),
                                  "list every label once")
    if ner_scoring.split_tag(label) is None:
      raise text_files.line_error(path, index + 1, "label %s is not O nor B-, I-, M-, E- or "
                                  "S-<type>" % _quote(label), "list the tags of the data")
    first_line[label] = index + 1
    labels.append(label)
  if ner_scoring.OUTSIDE not in first_line:
    raise UsageError("%s: no label O; list O and every other tag, one per line" % path)
  return labels


def resolve_label_list(train_file, data_dir):
  """The label list: data_dir/labels.txt when present, else O and the training file's
  other tags sorted.

  Args:
    train_file: the NerFile of the training split.
    data_dir: the data directory.

  Returns:
    list of str; the index of a tag is its label id.
  """
  path = os.path.join(data_dir, LABELS_FILE)
  if os.path.exists(path):
    return read_label_file(path)
  tags = set(tag for _, _, tag in _tagged_positions(train_file))
  tags.discard(ner_scoring.OUTSIDE)
  return [ner_scoring.OUTSIDE] + sorted(tags)


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
                                  % _quote(e.args[0]), "give each key once")
    except (ValueError, RecursionError) as e:
      raise text_files.line_error(path, index + 1, "invalid JSON (%s): %s"
                                  % (e, _quote(line)), "write one JSON object per line")
    if not isinstance(value, dict):
      raise text_files.line_error(path, index + 1, "expected a JSON object, got %s"
                                  % _quote(line), "write one JSON object per line")
    yield index + 1, value


def _cluener_text(path, line_number, obj):
  text = obj.get("text")
  if not isinstance(text, str):
    raise text_files.line_error(path, line_number, "\"text\" is %s, not a string"
                                % _quote(text), "give every line its \"text\"")
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
    raise text_files.line_error(path, line_number, "\"id\" is %s" % _quote(value),
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
    raise _span_error(path, line_number, "\"label\" is %s, not an object" % _quote(label))
  spans = []
  for entity_type, mentions in label.items():
    if not entity_type or any(char.isspace() for char in entity_type):
      raise _span_error(path, line_number, "entity type %s is empty or holds whitespace"
                        % _quote(entity_type))
    if not isinstance(mentions, dict):
      raise _span_error(path, line_number, "label %s holds %s, not an object"
                        % (_quote(entity_type), _quote(mentions)))
    for entity_text, positions in mentions.items():
      for span in positions if isinstance(positions, list) else [positions]:
        if (not isinstance(span, list) or len(span) != 2
            or any(isinstance(n, bool) or not isinstance(n, int) for n in span)):
          raise _span_error(path, line_number, "%s %s: %s is not a [start, end] pair"
                            % (entity_type, _quote(entity_text), _quote(span)))
        start, end = span
        if not 0 <= start <= end < len(text) or text[start:end + 1] != entity_text:
          raise _span_error(path, line_number, "%s span [%d, %d] of %s slices the text to "
                            "%s" % (entity_type, start, end, _quote(entity_text),
                                    _quote(text[max(start, 0):max(end + 1, 0)])))
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


def cluener_label(sentence, tags):
  """CLUENER's "label" value of a sentence's tags: {type: {entity text: [[start, end]]}}.

  Offsets are characters of sentence.text with inclusive ends; types and texts keep
  their order of first appearance.
  """
  label = collections.OrderedDict()
  for record in entity_records(sentence, tags)["entities"]:
    mentions = label.setdefault(record["type"], collections.OrderedDict())
    mentions.setdefault(record["text"], []).append([record["start"], record["end"] - 1])
  return label


def _json_line(value):
  return json.dumps(value, ensure_ascii=False) + "\n"


def format_cluener(sentences, tags_per_sentence=None):
  """CLUENER training-format lines: {"id", "text", "label"} per sentence.

  Args:
    sentences: list of NerSentence.
    tags_per_sentence: list of tag lists, or None for the sentences' own tags.
  """
  lines = []
  for index, sentence in enumerate(sentences):
    tags = sentence.tags if tags_per_sentence is None else tags_per_sentence[index]
    record = collections.OrderedDict([("id", sentence.example_id), ("text", sentence.text)])
    if tags is not None:
      record["label"] = cluener_label(sentence, tags)
    lines.append(_json_line(record))
  return "".join(lines)


def write_cluener_predictions(path, sentences, predicted_tags):
  """Writes predict.json, CLUENER's submission format: {"id", "label"} per line.

  Ids are those of the test file with their JSON type (the 0-based line index where a
  line had none); a sentence without entities has "label": {}.
  """
  _check_prediction_lengths(sentences, predicted_tags)
  output_files.atomic_write_text(path, "".join(
      _json_line(collections.OrderedDict([("id", sentence.example_id),
                                          ("label", cluener_label(sentence, tags))]))
      for sentence, tags in zip(sentences, predicted_tags)))


# ---------------------------------------------------------------------------
# Entities with character offsets
# ---------------------------------------------------------------------------

def entity_records(sentence, tags):
  """A predict_entities.jsonl record: {"text", "entities": [{"type", "start", "end",
  "text"}]}, offsets into sentence.text, `end` exclusive.

  Entities are read from `tags` by ner_scoring's decoding rule, so ill-formed sequences
  are read as conlleval reads them.
  """
  records = []
  for entity_type, first, end in ner_scoring.entities(tags):
    start = sentence.token_starts[first]
    stop = sentence.token_starts[end - 1] + len(sentence.tokens[end - 1])
    records.append(collections.OrderedDict([
        ("type", entity_type), ("start", start), ("end", stop),
        ("text", sentence.text[start:stop])]))
  return collections.OrderedDict([("text", sentence.text), ("entities", records)])


def write_predict_entities(path, sentences, predicted_tags):
  """Writes predict_entities.jsonl: one entity_records() line per sentence, in order."""
  _check_prediction_lengths(sentences, predicted_tags)
  output_files.atomic_write_text(path, "".join(
      _json_line(entity_records(sentence, tags))
      for sentence, tags in zip(sentences, predicted_tags)))


# ---------------------------------------------------------------------------
# Word pieces: the first piece of each token carries its tag
# ---------------------------------------------------------------------------

class SentencePieces(object):
  """The word pieces of a sentence's tokens.

  Attributes:
    pieces: list of str, the pieces of all tokens in order.
    piece_ids: list of int [len(pieces)], their vocab ids.
    piece_tokens: list of int [len(pieces)], the token each piece came from.
    first_pieces: list of int [num tokens], the index of each token's first piece, or
      -1 for a token that gives no piece.
  """

  def __init__(self, pieces, piece_ids, piece_tokens, first_pieces):
    self.pieces = pieces
    self.piece_ids = piece_ids
    self.piece_tokens = piece_tokens
    self.first_pieces = first_pieces


def align_pieces(tokens, tokenizer, cache=None):
  """Tokenizes each token on its own, keeping which token each piece came from.

  Args:
    tokens: list of str.
    tokenizer: a tokenization.FullTokenizer (tokenize, convert_tokens_to_ids).
    cache: optional dict token -> (pieces, ids), shared between sentences (most
      Chinese tokens are characters that recur).

  Returns:
    A SentencePieces.
  """
  cache = {} if cache is None else cache
  pieces, piece_ids, piece_tokens, first_pieces = [], [], [], []
  for index, token in enumerate(tokens):
    entry = cache.get(token)
    if entry is None:
      token_pieces = tokenizer.tokenize(token)
      entry = cache[token] = (token_pieces, tokenizer.convert_tokens_to_ids(token_pieces))
    first_pieces.append(len(pieces) if entry[0] else -1)
    pieces.extend(entry[0])
    piece_ids.extend(entry[1])
    piece_tokens.extend([index] * len(entry[0]))
  return SentencePieces(pieces, piece_ids, piece_tokens, first_pieces)


# ---------------------------------------------------------------------------
# Windows over long sentences
# ---------------------------------------------------------------------------

def check_window_settings(max_seq_length, doc_stride):
  """Raises UsageError unless max_seq_length >= 3 and doc_stride >= 1."""
  if max_seq_length < 3:
    raise UsageError("--max_seq_length=%d leaves no room for a piece between [CLS] and "
                     "[SEP]; give 3 or more (128 is usual)" % max_seq_length)
  if doc_stride < 1:
    raise UsageError("--doc_stride=%d: windows must start at least 1 piece apart; give a "
                     "positive number (64 is the default)" % doc_stride)


class NerWindow(object):
  """The model input of one window: [CLS] pieces [SEP], zero-padded to max_seq_length.

  Attributes:
    sentence_index: the sentence it belongs to.
    window_index: its index among the sentence's windows.
    piece_start, num_pieces: the pieces of the sentence it holds (position 1 + i holds
      piece piece_start + i).
    input_ids, input_mask, segment_ids: lists of int [max_seq_length].
    label_ids: list of int [max_seq_length]: the tag id at each token's first piece, 0
      elsewhere (and everywhere for a sentence without tags).
    label_mask: list of int [max_seq_length]: 1 at first pieces, which carry a tag.
    is_max_context: list of int [max_seq_length]: 1 at the pieces whose most context is
      in this window; a token is predicted where its first piece has the flag.
  """

  def __init__(self, **fields):
    self.__dict__.update(fields)


def _special_ids(tokenizer):
  """The ids of [CLS] and [SEP]; UsageError when the vocab lacks them."""
  vocab = tokenizer.vocab
  missing = tokenization.missing_special_token(vocab, ("[CLS]", "[SEP]"))
  if missing:
    raise UsageError("The vocab (--vocab_file) has no %s token, which every window needs. "
                     "Use the vocab.txt that came with the checkpoint." % missing)
  return vocab["[CLS]"], vocab["[SEP]"]


def _padded(values, length):
  return values + [0] * (length - len(values))


def sentence_windows(aligned, tag_ids, max_seq_length, doc_stride, special_ids,
                     sentence_index=0):
  """The windows of one sentence.

  Args:
    aligned: the SentencePieces of the sentence.
    tag_ids: list of int [num tokens], the label id of each token, or None.
    max_seq_length: positions per window, [CLS] and [SEP] included.
    doc_stride: pieces between window starts.
    special_ids: (id of [CLS], id of [SEP]).
    sentence_index: stored in each window.

  Returns:
    list of NerWindow; one when the sentence has at most max_seq_length - 2 pieces.
  """
  num_pieces = len(aligned.pieces)
  windows = sequence_windows.sliding_windows(num_pieces, max_seq_length - 2, doc_stride)
  best = sequence_windows.max_context_windows(windows, num_pieces)
  first_piece_tags = {}
  for token, piece in enumerate(aligned.first_pieces):
    if piece >= 0:
      first_piece_tags[piece] = tag_ids[token] if tag_ids is not None else 0
  result = []
  cls_id, sep_id = special_ids
  for window_index, (start, length) in enumerate(windows):
    pieces = range(start, start + length)
    result.append(NerWindow(
        sentence_index=sentence_index, window_index=window_index, piece_start=start,
        num_pieces=length,
        input_ids=_padded([cls_id] + aligned.piece_ids[start:start + length] + [sep_id],
                          max_seq_length),
        input_mask=_padded([1] * (length + 2), max_seq_length),
        segment_ids=[0] * max_seq_length,
        label_ids=_padded([0] + [first_piece_tags.get(p, 0) for p in pieces], max_seq_length),
        label_mask=_padded([0] + [int(p in first_piece_tags) for p in pieces], max_seq_length),
        is_max_context=_padded([0] + [int(best[p] == window_index) for p in pieces],
                               max_seq_length)))
  return result


def _tag_ids(sentence, label_map):
  """The label id of each tag of a sentence; UsageError naming a tag not in the map."""
  ids = []
  for index, tag in enumerate(sentence.tags):
    if tag not in label_map:
      raise _not_in_labels_error(sentence, index, len(label_map))
    ids.append(label_map[tag])
  return ids


def featurize_sentences(sentences, tokenizer, label_list, max_seq_length, doc_stride):
  """The alignment and the windows of every sentence.

  Args:
    sentences: list of NerSentence (tags are used when present).
    tokenizer: a tokenization.FullTokenizer.
    label_list: list of str; a tag's label id is its index.
    max_seq_length, doc_stride: the flags (check_window_settings).

  Returns:
    list [len(sentences)] of (SentencePieces, list of NerWindow).

  Raises:
    UsageError: bad settings, a vocab without [CLS] or [SEP], or a tag not in label_list.
  """
  check_window_settings(max_seq_length, doc_stride)
  special_ids = _special_ids(tokenizer)
  label_map = {label: index for index, label in enumerate(label_list)}
  cache = {}
  result = []
  for index, sentence in enumerate(sentences):
    aligned = align_pieces(sentence.tokens, tokenizer, cache)
    tag_ids = _tag_ids(sentence, label_map) if sentence.tags is not None else None
    result.append((aligned, sentence_windows(aligned, tag_ids, max_seq_length, doc_stride,
                                             special_ids, sentence_index=index)))
  return result


# ---------------------------------------------------------------------------
# Window predictions back to one tag per token
# ---------------------------------------------------------------------------

def _fill_tokens_without_pieces(tags, first_pieces, scheme):
  """Tags the tokens that gave no piece: O, unless they sit inside one entity.

  A run of such tokens (e.g. the space in "New York" as CLUENER writes it, one token
  per character) between a token that opens or continues an entity (B-, I-, M-) and
  one that continues it with the same type (I-, M-, E-) gets the inside tag, so the
  entity is not cut in two; anywhere else it gets O.
  """
  inside = "M" if scheme == "BMES" else "I"
  index = 0
  while index < len(tags):
    if first_pieces[index] >= 0:
      index += 1
      continue
    end = index
    while end < len(tags) and first_pieces[end] < 0:
      end += 1
    before = ner_scoring.split_tag(tags[index - 1]) if index else None
    after = ner_scoring.split_tag(tags[end]) if end < len(tags) else None
    fill = ner_scoring.OUTSIDE
    if (before and after and before[0] in ("B", "I", "M") and after[0] in ("I", "M", "E")
        and before[1] == after[1]):
      fill = "%s-%s" % (inside, before[1])
    tags[index:end] = [fill] * (end - index)
    index = end
  return tags


def tags_from_windows(aligned, windows, window_label_ids, label_list, scheme):
  """The predicted tag of every token of one sentence, from its windows' predictions.

  Each token takes the prediction at its first piece in the window flagged as that
  piece's max-context window. Tokens without a piece are filled by
  _fill_tokens_without_pieces. The tags are returned as predicted (possibly ill-formed;
  ner_scoring.repair rewrites them).

  Args:
    aligned: the sentence's SentencePieces.
    windows: its list of NerWindow, in window order.
    window_label_ids: for each window, the predicted label id at each position (at least
      its num_pieces + 1 first positions; [CLS] is position 0).
    label_list: list of str.
    scheme: one of ner_scoring.SCHEMES.

  Returns:
    list of str [num tokens].
  """
  predicted = {}  # piece index -> label id
  for window, label_ids in zip(windows, window_label_ids):
    for offset in range(window.num_pieces):
      if window.is_max_context[offset + 1]:
        predicted[window.piece_start + offset] = label_ids[offset + 1]
  tags = [label_list[predicted[piece]] if piece >= 0 else ner_scoring.OUTSIDE
          for piece in aligned.first_pieces]
  return _fill_tokens_without_pieces(tags, aligned.first_pieces, scheme)


def tag_skew_inputs(windows):
  """What length_grouping.label_skew needs of the training windows: lengths int [n] (the
  pieces with [CLS] and [SEP]) and tag ids [n, seq] with their mask [n, seq]."""
  lengths = np.array([window.num_pieces + 2 for window in windows])  # [n]
  tag_ids = np.array([window.label_ids for window in windows], np.int32)  # [n, seq]
  tag_mask = np.array([window.label_mask for window in windows], np.int8)  # [n, seq]
  return lengths, tag_ids, tag_mask
