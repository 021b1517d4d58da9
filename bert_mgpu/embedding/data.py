# coding=utf-8
"""run_embedding_mgpu.py's data files: pairs with a score, triplets, single sentences.

No TensorFlow. Each split is `train.*`, `dev.*` or `test.*` in --data_dir, one of:

  .tsv    text_a<TAB>text_b                 pairs without a score
          text_a<TAB>text_b<TAB>score       pairs with a score (Chinese STS-B: 0-5; 0/1 labels)
          anchor<TAB>positive<TAB>negative  triplets (the negative is a hard negative)
  .jsonl  {"sentence1", "sentence2", "label"} (CLUE: AFQMC, LCQMC, BUSTM), or
          {"text_a", "text_b", "score"}: pairs; {"query", "pos", "neg"}: triplets (pos a
          text, or a list whose first text is taken; neg a text or a list of them);
          {"text"} or {"sentence"}: sentences
  .txt    one sentence per line

--data_format=auto decides by the extension and the columns (a TSV's third column is a
score when its first row's is a number, else a negative) and the log says what it chose.
A TSV's first line is a header only when it names the columns (text_a, sentence1, score,
label, anchor, positive, negative, query, pos, neg...). Bad input raises UsageError naming
the file, line and value.
"""

import collections
import os

from bert_mgpu.classifier import file_readers
from bert_mgpu.data import text_files
from bert_mgpu.data.text_files import line_error
from bert_mgpu.errors import UsageError

PAIRS, TRIPLETS, SENTENCES = "pairs", "triplets", "sentences"
DATA_FORMATS = ("auto", PAIRS, TRIPLETS, SENTENCES)
EXTENSIONS = (".tsv", ".jsonl", ".json", ".txt")

# Header cells by the column they name: a first TSV line made only of these is a header,
# and its columns are read by name (0: the first text, 1: the second, 2: a negative).
_HEADER_COLUMNS = dict(
    [(name, 0) for name in ("text_a", "text1", "sentence1", "sentence_a", "anchor", "query")] +
    [(name, 1) for name in ("text_b", "text2", "sentence2", "sentence_b", "positive", "pos")] +
    [(name, 2) for name in ("negative", "neg", "hard_negative")] +
    [(name, "score") for name in ("score", "label", "similarity")])

Record = collections.namedtuple("Record", ["texts", "score", "line"])
Record.__doc__ = """One example.

Fields:
  texts: tuple of str: (text_a, text_b) of a pair, (anchor, positive, negatives...) of a
    triplet, (sentence,) of a sentence.
  score: float, or None when the file has none.
  line: its 1-based line in the file.
"""

TextSet = collections.namedtuple("TextSet", ["path", "data_format", "records", "scored"])
TextSet.__doc__ = """One split read.

Fields:
  path: the file.
  data_format: PAIRS, TRIPLETS or SENTENCES.
  records: list of Record, in file order.
  scored: whether every record has a score.
"""


def split_file(data_dir, split):
  """The file of `split` ("train", "dev", "test") in data_dir: exactly one of
  split + EXTENSIONS.

  Raises:
    UsageError: none, or several.
  """
  found = [split + ext for ext in EXTENSIONS if os.path.isfile(os.path.join(data_dir, split + ext))]
  if not found:
    raise UsageError("%s: no %s file (one of %s). Put the %s split there." % (
        data_dir, split, ", ".join(split + ext for ext in EXTENSIONS), split))
  if len(found) > 1:
    raise UsageError("%s: several %s files (%s); keep one." % (data_dir, split,
                                                               ", ".join(found)))
  return os.path.join(data_dir, found[0])


def _number(value):
  try:
    number = float(value)
  except (TypeError, ValueError):
    return None
  return number if number == number and abs(number) != float("inf") else None


def _check_text(path, line, text, column):
  if not isinstance(text, str):
    raise line_error(path, line, "%s is %s, not a text" % (
        column, text_files.quote_value(text, as_json=True)), "give a string")
  if not text.strip():
    raise line_error(path, line, "%s is empty" % column, "give a text, or remove the line")
  file_readers.check_no_surrogates(text, lambda problem: line_error(
      path, line, problem, "fix the text's escapes"))
  return text


def _score(path, line, value, column="the score"):
  number = _number(value) if not isinstance(value, bool) else None
  if number is None:
    raise line_error(path, line, "%s %s is not a number" % (
        column, text_files.quote_value(value, as_json=True)),
        "give a number (e.g. 0-5, or 0/1)")
  return number


def _header_order(path, line, cells):
  """The column order that puts a header's columns as (text 0, text 1, negative or score),
  or UsageError when they name a column twice or leave a text out."""
  roles = [_HEADER_COLUMNS[cell] for cell in cells]
  wanted = [role for role in (0, 1, 2, "score") if role in roles]
  texts = [role for role in wanted if role in (0, 1)]
  if (len(set(roles)) != len(roles) or texts != [0, 1][:len(texts)] or not texts or
      (len(texts) == 1 and len(roles) > 1) or (2 in roles and "score" in roles)):
    raise line_error(path, line, "the header %s names its columns ambiguously" %
                     file_readers.quote("\t".join(cells)),
                     "name a first text, a second text, then a score or a negative")
  return [roles.index(role) for role in wanted], "score" not in roles and 2 in roles


def _tsv(path, data_format):
  rows = file_readers.tab_rows(path)
  header_triplets = None
  cells = [cell.strip().lower() for cell in rows[0][1]] if rows else []
  if cells and all(cell in _HEADER_COLUMNS for cell in cells):
    order, header_triplets = _header_order(path, rows[0][0], cells)
    rows = [(line, [fields[i] for i in order] if len(fields) == len(order) else fields)
            for line, fields in rows[1:]]
  if not rows:
    return data_format if data_format != "auto" else PAIRS, []
  columns = len(cells) if header_triplets is not None else len(rows[0][1])
  if data_format == "auto":
    if columns == 1:
      data_format = SENTENCES
    elif columns == 2:
      data_format = PAIRS
    elif header_triplets is not None:
      data_format = TRIPLETS if header_triplets else PAIRS
    else:
      data_format = PAIRS if _number(rows[0][1][2]) is not None else TRIPLETS
      later_score = next((line for line, fields in rows[1:]
                          if len(fields) == 3 and _number(fields[2]) is not None), None)
      if data_format == TRIPLETS and later_score is not None:
        raise line_error(path, rows[0][0], "the third column %s is neither a score nor a "
                         "header this reader knows, and line %d's is a number" % (
                             file_readers.quote(rows[0][1][2]), later_score),
                         "name the columns text_a<TAB>text_b<TAB>score, or fix the score")
  expected = {SENTENCES: (1,), PAIRS: (2, 3), TRIPLETS: (3,)}[data_format]
  if columns not in expected:
    raise line_error(path, rows[0][0], "%d tab-separated columns for %s" % (columns, data_format),
                     "%s take %s columns" % (data_format, " or ".join(map(str, expected))))
  records = []
  for line, fields in rows:
    if len(fields) != columns:
      raise line_error(path, line, "%d tab-separated columns, the file's first row has %d: %s"
                       % (len(fields), columns, file_readers.quote("\t".join(fields))),
                       "give every line the same columns (a tab inside a text splits it)")
    if data_format == PAIRS and columns == 3:
      texts = [_check_text(path, line, fields[0], "text_a"),
               _check_text(path, line, fields[1], "text_b")]
      records.append(Record(tuple(texts), _score(path, line, fields[2].strip()), line))
    else:
      names = ("anchor", "positive", "negative") if data_format == TRIPLETS else (
          "text_a", "text_b") if data_format == PAIRS else ("the sentence",)
      records.append(Record(tuple(_check_text(path, line, f, n) for f, n in zip(fields, names)),
                            None, line))
  return data_format, records


def _first_of(value):
  return value[0] if isinstance(value, list) and value else value


def _json_record(path, line, obj, data_format):
  """The Record of one JSON line, and its format."""
  keys = set(obj)
  if data_format in ("auto", TRIPLETS) and {"query", "pos"} <= keys:
    negatives = obj.get("neg", [])
    negatives = negatives if isinstance(negatives, list) else [negatives]
    texts = ([_check_text(path, line, obj["query"], "query"),
              _check_text(path, line, _first_of(obj["pos"]), "pos")] +
             [_check_text(path, line, n, "neg") for n in negatives])
    return TRIPLETS, Record(tuple(texts), None, line)
  for a, b in (("sentence1", "sentence2"), ("text_a", "text_b"), ("text1", "text2")):
    if data_format in ("auto", PAIRS) and {a, b} <= keys:
      score = None
      for key in ("score", "label", "similarity"):
        if key in obj:
          score = _score(path, line, obj[key], "the %s" % key)
          break
      return PAIRS, Record((_check_text(path, line, obj[a], a),
                            _check_text(path, line, obj[b], b)), score, line)
  for key in ("text", "sentence"):
    if data_format in ("auto", SENTENCES) and key in keys:
      return SENTENCES, Record((_check_text(path, line, obj[key], key),), None, line)
  raise line_error(path, line, "no fields of %s: keys %s" % (
      data_format if data_format != "auto" else "pairs, triplets or sentences",
      text_files.quote_value(sorted(keys), as_json=True)),
      "give sentence1/sentence2 (and label or score), query/pos/neg, or text")


def _jsonl(path, data_format):
  records, formats = [], set()
  for line, obj in file_readers.json_objects(path):
    record_format, record = _json_record(path, line, obj, data_format)
    if formats and record_format not in formats:
      raise line_error(path, line, "a %s record after %s ones" % (record_format, formats.pop()),
                       "keep one layout per file")
    formats.add(record_format)
    records.append(record)
  return (formats.pop() if formats else PAIRS if data_format == "auto" else data_format,
          records)


def _txt(path):
  records = []
  for line, text in text_files.text_lines(path):
    if line == 1 and text.startswith("\ufeff"):
      text = text[1:]
    if not text.strip():
      continue  # blank lines separate nothing here
    records.append(Record((_check_text(path, line, text, "the sentence"),), None, line))
  return SENTENCES, records


def read_split(path, data_format="auto"):
  """Reads one split's file.

  Args:
    path: a .tsv, .jsonl (.json) or .txt file.
    data_format: "auto", PAIRS, TRIPLETS or SENTENCES.

  Returns:
    TextSet.

  Raises:
    UsageError: not UTF-8, a wrong column count, an empty text, a missing or non-numeric
      score, a layout that is not data_format's.
  """
  extension = os.path.splitext(path)[1].lower()
  if extension == ".txt":
    if data_format not in ("auto", SENTENCES):
      raise UsageError("%s: a .txt file holds sentences; --data_format=%s needs a .tsv or "
                       ".jsonl file." % (path, data_format))
    found, records = _txt(path)
  elif extension in (".jsonl", ".json"):
    found, records = _jsonl(path, data_format)
  else:
    found, records = _tsv(path, data_format)
  if not records:
    raise UsageError("%s: no examples. Check the file." % path)
  scored = [r.score is not None for r in records]
  if any(scored) and not all(scored):
    odd = records[scored.index(not scored[0])]
    raise line_error(path, odd.line, "%s, where line %d has %s" % (
        "a score" if odd.score is not None else "no score", records[0].line,
        "none" if odd.score is not None else "one"), "give every pair a score, or none")
  if found == TRIPLETS:
    counts = set(len(r.texts) for r in records)
    if min(counts) < 3:
      short = next(r for r in records if len(r.texts) < 3)
      raise line_error(path, short.line, "a triplet without a negative",
                       "give neg, or write the file as pairs")
  return TextSet(path, found, records, all(scored))
