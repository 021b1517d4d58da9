# coding=utf-8
"""Reading the input of create_pretraining_data.py and tokenizing it.

Documents: UTF-8 text, one sentence per line, a blank line (or the end of a file) between
documents; lines that are not UTF-8 are skipped and counted. For whole-word masking a
token that continues a word is a `WordContinuation`, the Chinese words found by spaces or
by a segmenter (jieba). For --pretraining_task=pair_span the input is TSV rows instead
(`read_pair_rows`), each with at most one blank in text_b.
"""

import collections
import logging
import re
import time

import tensorflow.compat.v1 as tf

from bert_mgpu.errors import UsageError
from bert_mgpu.pretraining import data_settings
import tokenization

CHINESE_SEGMENTERS = ("jieba",)
# The literal blank, also accepted in a text_b.
MASK_TOKEN = "[MASK]"


class WordContinuation(str):
  """A token (a plain str for every other purpose) that continues the word before it.

  Whole-word masking marks the second and later characters of a Chinese word
  with this type. It compares and hashes like the plain token, so vocab
  look-ups and the written ids are those of the character itself.
  """
  __slots__ = ()


# One WordContinuation object per distinct character, shared by every use:
# a chunk holds millions of tokens.
_CONTINUATIONS = {}


def _continuation(piece):
  """Returns the shared WordContinuation of a token."""
  marked = _CONTINUATIONS.get(piece)
  if marked is None:
    marked = _CONTINUATIONS.setdefault(piece, WordContinuation(piece))
  return marked


# Segmenter name -> its function, once loaded in this process.
_LOADED_SEGMENTERS = {}


def load_chinese_segmenter(name):
  """Returns the function that cuts Chinese text into words, for --chinese_segmenter.

  Args:
    name: "" or None (no segmenter) or one of CHINESE_SEGMENTERS.

  Returns:
    None, or a function str -> list of str whose concatenation is its input.

  Raises:
    UsageError: an unknown name, or jieba is not installed.
  """
  if not name:
    return None
  if name != "jieba":
    raise UsageError("--chinese_segmenter=%s: unknown segmenter. Use --chinese_segmenter=jieba, "
                     "or leave it empty for Chinese text already split into words by spaces."
                     % name)
  try:
    import jieba  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise UsageError("--chinese_segmenter=jieba needs the jieba package, which is not "
                     "installed: pip install jieba")
  if name in _LOADED_SEGMENTERS:  # e.g. in a worker forked from the main process
    return _LOADED_SEGMENTERS[name]
  # Loads the dictionary now: worker processes forked later share it. jieba
  # reports the loading in four lines of its own, each printed twice next to
  # TensorFlow's handler; one line of ours says it instead.
  jieba_logger = logging.getLogger("jieba")
  level = jieba_logger.level
  jieba_logger.setLevel(logging.WARNING)
  start = time.time()
  try:
    jieba.initialize()
  finally:
    jieba_logger.setLevel(level)
  tf.logging.info("Chinese words are found with jieba %s (dictionary loaded in %.1f s).",
                  getattr(jieba, "__version__", "?"), time.time() - start)
  _LOADED_SEGMENTERS[name] = jieba.lcut
  return jieba.lcut


def mark_chinese_word_boundaries(line, segment):
  """Puts a space between two Chinese characters wherever `segment` starts a new word.

  Only boundaries between two CJK characters are used: BERT's tokenizer puts
  spaces around every CJK character anyway, so the tokens of the line stay the
  same, whereas jieba also cuts Latin letters with accents, kana and the like
  one character at a time, which would change their word pieces.

  Args:
    line: str.
    segment: function str -> list of str (e.g. jieba.lcut).

  Returns:
    str, the line with the spaces added; the line unchanged if the words do
    not add up to it.
  """
  words = [word for word in segment(line) if word]
  if "".join(words) != line:
    return line
  pieces = []
  for index, word in enumerate(words):
    if (index and tokenization.is_cjk_character(words[index - 1][-1]) and
        tokenization.is_cjk_character(word[0])):
      pieces.append(" ")
    pieces.append(word)
  return "".join(pieces)


def is_segmented_chinese(line):
  """Whether some whitespace in `line` separates two Chinese characters (pre-segmented text)."""
  for gap in re.finditer(r"\s+", line):
    start, end = gap.span()
    if 0 < start and end < len(line) and tokenization.is_cjk_character(line[start - 1]) \
        and tokenization.is_cjk_character(line[end]):
      return True
  return False


def tokenize_line(tokenizer, line, do_whole_word_mask, segment=None):
  """Tokenizes one sentence.

  Args:
    tokenizer: tokenization.FullTokenizer.
    line: str, one sentence.
    do_whole_word_mask: bool; when set, the second and later characters of a
      space-separated Chinese word come back as `WordContinuation`s, in lines
      where spaces separate Chinese words (see `is_segmented_chinese`). The line
      is then tokenized word by word (split on Python whitespace), which gives
      the tokens of the whole line except around the rare characters that
      Python counts as whitespace but BERT does not (controls such as U+000B,
      U+001C..U+001F and U+0085, and U+2028/U+2029).
    segment: None, or a function that cuts Chinese text into words (see
      `load_chinese_segmenter`); its words then delimit the Chinese words, on
      top of the spaces. Used only with do_whole_word_mask.

  Returns:
    list of str (word pieces).
  """
  if not do_whole_word_mask:
    return tokenizer.tokenize(line)
  if segment is not None:
    line = mark_chinese_word_boundaries(line, segment)
  # A line with no space between Chinese characters is not segmented: each character is
  # then its own word, as in Google's script, not the whole run up to the next space.
  group_chinese = segment is not None or is_segmented_chinese(line)
  tokens = []
  for word in line.split():
    previous_was_cjk = False
    for basic_token in tokenizer.basic_tokenizer.tokenize(word):
      is_cjk = (group_chinese and len(basic_token) == 1 and
                tokenization.is_cjk_character(basic_token))
      for piece in tokenizer.wordpiece_tokenizer.tokenize(basic_token):
        tokens.append(_continuation(piece) if is_cjk and previous_was_cjk else piece)
      previous_was_cjk = is_cjk
  return tokens


def tokenize_document(tokenizer, lines, do_whole_word_mask, segment=None):
  """Tokenizes the lines of one document (see `tokenize_line`).

  Returns:
    list of non-empty token lists (sentences); empty if no line has a token.
  """
  sentences = []
  for line in lines:
    tokens = tokenize_line(tokenizer, line, do_whole_word_mask, segment)
    if tokens:
      sentences.append(tokens)
  return sentences


# A document this long most likely means the input lacks blank lines between documents.
LONG_DOCUMENT_LINES = 100000

# A file whose lines are not UTF-8 this often is in another encoding (GBK, UTF-16, ...):
# skipping its lines would silently drop much of the corpus.
MAX_BAD_LINE_SHARE = 0.05
MIN_BAD_LINES_FOR_ERROR = 10


def _check_encoding(input_file, line_number, bad_lines):
  """Raises UsageError when too many of a file's lines so far were not UTF-8."""
  if bad_lines >= MIN_BAD_LINES_FOR_ERROR and bad_lines > MAX_BAD_LINE_SHARE * line_number:
    raise UsageError(
        "%s: %d of its first %d lines are not valid UTF-8: the file is in another encoding "
        "(for Chinese text often GBK). Convert it to UTF-8, e.g. iconv -f gbk -t utf-8 %s > "
        "out.txt." % (input_file, bad_lines, line_number, input_file))


def _read_file_lines(input_file, stats, progress):
  """Yields the lines of one file that are valid UTF-8, decoded but not stripped.

  Lines that are not UTF-8 are skipped and counted in `stats`; too many of them
  is an error (the file is in another encoding).

  Yields:
    (line_number, line): 1-based, as an editor shows it.
  """
  with tf.gfile.GFile(input_file, "rb") as reader:
    line_number = 0
    bad_lines = 0
    while True:
      raw_line = reader.readline()
      if not raw_line:
        break
      line_number += 1
      if line_number == 1 and raw_line[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise UsageError("%s is UTF-16 (it starts with a UTF-16 byte order mark); the input "
                         "must be UTF-8. Convert it, e.g. iconv -f utf-16 -t utf-8." %
                         input_file)
      if progress is not None:
        progress.bytes_read += len(raw_line)
        progress.maybe_log()
      try:
        line = raw_line.decode("utf-8")
      except UnicodeDecodeError:
        stats.skipped_lines += 1
        bad_lines += 1
        if stats.first_skipped_line is None:
          stats.first_skipped_line = "%s:%d" % (input_file, line_number)
          tf.logging.warning("%s line %d is not valid UTF-8: skipped (and counted).",
                             input_file, line_number)
        _check_encoding(input_file, line_number, bad_lines)
        continue
      yield line_number, line


def read_raw_documents(input_files, stats, progress=None):
  """Yields the documents of the input files one at a time, as text lines.

  A blank line or the end of a file ends a document. Only the current document
  is held, so a corpus of any size can be read.

  Args:
    input_files: list of paths.
    stats: pipeline.CorpusStats; skipped_lines and first_skipped_line are counted.
    progress: parallel.ProgressLog or None; bytes and documents read are counted and
      progress is logged.

  Yields:
    list of str: the stripped, non-blank lines of one document, in input order.
  """
  for input_file in input_files:
    lines = []
    for line_number, line in _read_file_lines(input_file, stats, progress):
      line = line.strip()
      if line:
        lines.append(line)
        if len(lines) == LONG_DOCUMENT_LINES:
          tf.logging.warning(
              "%s: a document reaches line %d without a blank line. Documents must be "
              "separated by blank lines: random next sentences come from other documents, "
              "and a document is held in memory whole.", input_file, line_number)
      elif lines:
        if progress is not None:
          progress.documents_read += 1
        yield lines
        lines = []
    # A file ends the document even without a trailing blank line.
    if lines:
      if progress is not None:
        progress.documents_read += 1
      yield lines


# ---------------------------------------------------------------------------
# pair_span input: label<TAB>id<TAB>text_a<TAB>text_b rows
# ---------------------------------------------------------------------------

RawPair = collections.namedtuple("RawPair", [
    "location", "label", "text_a", "b_before", "b_after", "has_blank"])
RawPair.__doc__ = """One pair_span row as read (see `parse_pair_row`).

Fields:
  location: str, "file line N", for messages.
  label: int, 1 = text_a belongs in text_b, 0 = it does not.
  text_a: str.
  b_before, b_after: str, text_b before and after its blank (all of it in
    b_before when it has none).
  has_blank: bool.
"""

PairTokens = collections.namedtuple("PairTokens", [
    "location", "label", "tokens_a", "tokens_b", "blank_start", "blank_length"])
PairTokens.__doc__ = """A pair_span row tokenized (see `tokenize_pair`).

Fields:
  location, label: as RawPair.
  tokens_a: list of str.
  tokens_b: list of str, the blank written as len(tokens_a) [MASK] tokens.
  blank_start: int, where the blank starts in tokens_b, or -1 without one.
  blank_length: int, its length (0 without one).
"""


def find_blank(text, blank_marker):
  """Finds the blank of a text: a run of `blank_marker` or one literal [MASK].

  Args:
    text: str.
    blank_marker: str, non-empty.

  Returns:
    None (no blank), or (start, end): the blank is text[start:end].

  Raises:
    ValueError: more than one blank; the message says how many.
  """
  pattern = "(?:%s)+|%s" % (re.escape(blank_marker), re.escape(MASK_TOKEN))
  blanks = [match.span() for match in re.finditer(pattern, text)]
  if len(blanks) > 1:
    raise ValueError("%d blanks (runs of %r or literal %s); one is allowed" % (
        len(blanks), blank_marker, MASK_TOKEN))
  return blanks[0] if blanks else None


def parse_pair_row(location, line, blank_marker):
  """Reads one `label<TAB>id<TAB>text_a<TAB>text_b` row.

  Args:
    location: str, "file line N".
    line: str, without its line end.
    blank_marker: str (--blank_marker).

  Returns:
    RawPair.

  Raises:
    UsageError: not 4 fields, a label other than 0 or 1, an empty text, or more
      than one blank; the message names the location and the value.
  """
  fields = line.split("\t")
  if len(fields) != 4:
    raise UsageError("%s: %d tab-separated field(s), expected 4: label<TAB>id<TAB>text_a"
                     "<TAB>text_b (no header row)." % (location, len(fields)))
  label, _, text_a, text_b = fields
  if label.strip() not in ("0", "1"):
    raise UsageError("%s: label %r: use 1 (text_a belongs in text_b) or 0 (it does not); "
                     "the file has no header row." % (location, label))
  for name, text in (("text_a", text_a), ("text_b", text_b)):
    if not text.strip():
      raise UsageError("%s: %s is empty." % (location, name))
  try:
    blank = find_blank(text_b, blank_marker)
  except ValueError as e:
    raise UsageError("%s: text_b holds %s. Pick a --blank_marker that the text lacks." %
                     (location, e))
  if blank is None:
    return RawPair(location, int(label), text_a, text_b, "", False)
  return RawPair(location, int(label), text_a, text_b[:blank[0]], text_b[blank[1]:], True)


def read_pair_rows(input_files, stats, blank_marker, progress=None):
  """Yields the rows of pair_span TSV files one at a time; blank lines are skipped.

  Args:
    input_files: list of paths.
    stats: pipeline.CorpusStats; lines that are not UTF-8 are skipped and counted.
    blank_marker: str (--blank_marker).
    progress: parallel.ProgressLog or None.

  Yields:
    RawPair.
  """
  for input_file in input_files:
    for line_number, line in _read_file_lines(input_file, stats, progress):
      line = line.rstrip("\r\n")
      if not line.strip():
        continue
      if progress is not None:
        progress.documents_read += 1
      yield parse_pair_row("%s line %d" % (input_file, line_number), line, blank_marker)


def tokenize_pair(tokenizer, pair):
  """Tokenizes a RawPair; the blank becomes as many [MASK] tokens as text_a has.

  Returns:
    PairTokens.
  """
  tokens_a = tokenizer.tokenize(pair.text_a)
  tokens_b = tokenizer.tokenize(pair.b_before)
  if not pair.has_blank:
    return PairTokens(pair.location, pair.label, tokens_a, tokens_b, -1, 0)
  blank_start = len(tokens_b)
  tokens_b = tokens_b + [MASK_TOKEN] * len(tokens_a) + tokenizer.tokenize(pair.b_after)
  return PairTokens(pair.location, pair.label, tokens_a, tokens_b, blank_start,
                    len(tokens_a))


def pair_fits(pair, max_seq_length):
  """Whether `[CLS] a [SEP] b [SEP]` can keep all of a, b's blank and a token of b."""
  least_b = max(1, pair.blank_length)
  return bool(pair.tokens_a) and bool(pair.tokens_b) and (
      len(pair.tokens_a) + least_b + 3 <= max_seq_length)


def tokenize_item(tokenizer, item, settings, segment):
  """Tokenizes one item of the input: a document (lines) or, for pair_span, a RawPair.

  Args:
    tokenizer: tokenization.FullTokenizer.
    item: list of str, or RawPair.
    settings: data_settings.InstanceSettings.
    segment: the Chinese segmenter function or None.

  Returns:
    list of token lists (see `tokenize_document`), or PairTokens.
  """
  if settings.pretraining_task == data_settings.PAIR_SPAN:
    return tokenize_pair(tokenizer, item)
  return tokenize_document(tokenizer, item, settings.do_whole_word_mask, segment)

