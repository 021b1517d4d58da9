# coding=utf-8
"""Creates masked-LM / next-sentence TFRecord files for BERT pre-training.

The flags, the algorithm and the TFRecord features are those of Google's
create_pretraining_data.py (docs/FORMATS.md sections 6 and 8), so existing run
scripts and run_pretraining readers keep working:

  * Input: UTF-8 text, one sentence per line, a blank line between documents.
  * Each document is cut into pieces of about max_seq_length tokens; a piece
    becomes `[CLS] A [SEP] B [SEP]` where B either continues A
    (next_sentence_labels 0) or, half of the time, is taken from a random
    other document (next_sentence_labels 1).
  * Of the tokens (never [CLS]/[SEP]) min(max_predictions_per_seq,
    max(1, round(len(tokens) * masked_lm_prob))) are predicted: 80% become
    [MASK], 10% stay, 10% become a random vocab token.
  * The documents are processed dupe_factor times with different masks, and
    the instances are shuffled and written round-robin to the output files.

Streaming. Google's script holds the whole corpus and every instance in
memory. Here the documents are read in chunks of --docs_per_chunk documents
(default 20000; 0 = the whole corpus in one chunk, like Google's). A chunk is
tokenized, gives its instances (random next sentences come from documents of
the same chunk; the dupe_factor passes run over the chunk; the chunk's
instances are shuffled together), they are written and the chunk is dropped,
so memory follows the chunk size, not the corpus size. The chunks are written
in input order, so instances of one chunk stay together in the output files:
shuffle the documents of a corpus whose files are sorted by topic or date
first. Memory: in one process about (20 + 11 * dupe_factor) bytes per token of
the chunk, 130 bytes with dupe_factor 10 and max_seq_length 128 (measured on
generated Chinese text of 260 tokens per document), e.g. 1.3 GB for the
default 20000 documents of 500 tokens; with worker processes about three times
that in all, as each worker also holds its shard's instances and their copy on
the way back.

--pretraining_task chooses what an instance is (the streaming, workers, progress
and the options below work for all three):

  * nsp (the default): Google's pairs above, with next_sentence_labels.
  * mlm: `[CLS] tokens [SEP]`, filled with consecutive sentences of one document
    up to max_seq_length (short_seq_prob as Google's; a long document gives
    several instances), all segment ids 0, for the masked LM alone (HFL's
    RoBERTa-wwm-ext and MacBERT were pre-trained so). No next_sentence_labels
    feature is written; run_pretraining_mgpu.py then trains no NSP head.
  * pair_span (bert-ad's text rewriting): the input is TSV rows
    `label<TAB>id<TAB>text_a<TAB>text_b`, no header row, label 1 when text_a
    belongs in text_b and 0 when it does not. Each row gives one instance per
    dupe_factor pass, `[CLS] a [SEP] b [SEP]` (segment ids 0 through the first
    [SEP], 1 after). text_b may hold one blank, a run of --blank_marker (default
    U+201C, as in bert-ad's data; pick a character your text lacks) or one
    literal [MASK], written as as many [MASK] tokens as a has word pieces. b is
    cut to fit around the blank; a is kept whole, or the row is skipped and
    counted. One contiguous span of b as long as a (at most
    max_predictions_per_seq) is predicted, from a seeded random start (it may
    overlap the blank), 80/10/10 per position. next_sentence_labels = 1 - label:
    Google's meaning, 0 = the pair belongs together. --do_whole_word_mask is
    refused. A malformed row is a one-line error naming the file and line.

With --do_whole_word_mask, a word is masked as a whole: a token is grouped
with the `##` pieces that follow it and, for Chinese text segmented into words
by spaces (e.g. "北京 是 首都"), the characters of one word are grouped; a run
of Chinese characters without spaces counts as one word.
--chinese_segmenter=jieba finds the words of raw Chinese text with jieba
(https://github.com/fxsjy/jieba, `pip install jieba`; optional) instead. The
token ids written are the plain characters either way.

--num_workers (not in Google's script; default 0 = one process per CPU core)
tokenizes and creates the instances of each chunk in parallel, each worker on a
contiguous shard of the chunk's shuffled documents with its own random stream.

Determinism: the output is the same for the same seed, number of workers and
chunk size. With --num_workers=1 the instances come from one random stream in
Google's order, so with one chunk holding the whole corpus the output files
are those of Google's algorithm.

Progress (documents and bytes read, instances written, their rate and an ETA)
is logged at most every 30 seconds.

Stopping: Ctrl-C (SIGINT to the terminal's whole process group) and SIGTERM
(from Slurm, Kubernetes, kill) stop the run cleanly, without a traceback: the
worker processes end, the temporary files are deleted and no output file is
written; the exit code is 130 for Ctrl-C and 143 for SIGTERM. Only the main
process decides: the workers ignore Ctrl-C and end at once on SIGTERM, which
the main process sends them when it stops (or Linux, when it dies).

Differences from Google's script: lines that are not valid UTF-8 are skipped
and counted (Google silently drops the bad bytes), the end of an input file
also ends a document, a missing file or an empty corpus is a one-line error,
the output is written through temporary files renamed at the end, and a `##`
piece is grouped only with the token right before it (Google could group the
first `##` piece of segment B with the last token of segment A).
"""

import collections
import datetime
import itertools
import logging
import multiprocessing
import os
import random
import re
import signal
import sys
import time

import tensorflow.compat.v1 as tf

from bert_mgpu.data import processes
from bert_mgpu.data import tfrecord_io
import tokenization
from bert_mgpu.errors import UsageError

# Instances whose tokens are logged, as Google's script does for its first ones.
_NUM_INSTANCES_TO_LOG = 3
# Documents per chunk: about 1.3 GB of memory in one process for documents of
# 500 tokens with dupe_factor 10 (see above).
DEFAULT_DOCS_PER_CHUNK = 20000
DEFAULT_PROGRESS_INTERVAL_SECONDS = 30.0
# How often the main process looks at the workers' progress counters.
_POLL_SECONDS = 0.5
CHINESE_SEGMENTERS = ("jieba",)
# --pretraining_task: Google's pairs with next-sentence labels, single segments for the
# masked LM alone, or bert-ad's text-rewriting pairs (see the module docstring).
NSP, MLM, PAIR_SPAN = "nsp", "mlm", "pair_span"
PRETRAINING_TASKS = (NSP, MLM, PAIR_SPAN)
# The blank of a pair_span text_b: a run of this character (bert-ad's data uses it).
DEFAULT_BLANK_MARKER = u"\u201c"
# The literal blank, also accepted in a text_b.
MASK_TOKEN = "[MASK]"


class DataSettings(collections.namedtuple("DataSettings", [
    "input_file", "output_file", "vocab_file", "do_lower_case", "do_whole_word_mask",
    "max_seq_length", "max_predictions_per_seq", "random_seed", "dupe_factor",
    "masked_lm_prob", "short_seq_prob", "num_workers", "docs_per_chunk",
    "chinese_segmenter", "pretraining_task", "blank_marker"], defaults=(
        True, False, 128, 20, 12345, 10, 0.15, 0.1, 1, DEFAULT_DOCS_PER_CHUNK, "", NSP,
        DEFAULT_BLANK_MARKER))):
  """What a run reads, writes and how: the flags of the same names (`define_flags`).

  Built from the flags by `data_settings_from_flags`; in code, e.g.
  `DataSettings(input_file=..., output_file=..., vocab_file=..., dupe_factor=5)`.
  The defaults are Google's, and those of the flags, except num_workers.

  Attributes:
    input_file: str, comma-separated globs of text files.
    output_file: str, comma-separated TFRecord paths, written round-robin.
    vocab_file: str, vocab.txt.
    do_lower_case: bool (True).
    do_whole_word_mask: bool (False), mask whole words.
    max_seq_length: int (128), tokens per instance with [CLS] and two [SEP]s.
    max_predictions_per_seq: int (20), the most masked-LM predictions per instance.
    random_seed: int (12345).
    dupe_factor: int (10), passes over the documents, each with different masks.
    masked_lm_prob: float (0.15), share of the tokens to predict.
    short_seq_prob: float (0.1), share of instances that aim for a random
      shorter length.
    num_workers: int, processes that tokenize and create instances; 0 means one
      per CPU core (the flag's default). With 1 (the default here) the
      instances come from one random stream as in Google's script.
    docs_per_chunk: int (DEFAULT_DOCS_PER_CHUNK), documents held in memory at a
      time; 0 means all.
    chinese_segmenter: str, "" (Chinese words are delimited by spaces) or
      "jieba".
    pretraining_task: str, "nsp" (Google's, the default), "mlm" or "pair_span".
    blank_marker: str (DEFAULT_BLANK_MARKER), with pair_span: a run of it in text_b
      is the blank.
  """
  __slots__ = ()


def data_settings_from_flags(flag_values):
  """Returns the DataSettings of the flags that `define_flags` defines (same names)."""
  return DataSettings(**{name: getattr(flag_values, name) for name in DataSettings._fields})


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


class TrainingInstance(object):
  """One pre-training example before it becomes ids.

  Attributes:
    tokens: list of str, `[CLS] A [SEP] B [SEP]` after masking.
    segment_ids: list of int, 0 for [CLS], A and the first [SEP], 1 after.
    is_random_next: bool, whether B was taken from a random document (for pair_span:
      whether text_a does not belong in text_b); None for mlm, which writes no
      next_sentence_labels.
    masked_lm_positions: sorted list of int, the positions to predict.
    masked_lm_labels: list of str, the original token at each position.
  """

  def __init__(self, tokens, segment_ids, is_random_next, masked_lm_positions,
               masked_lm_labels):
    self.tokens = tokens
    self.segment_ids = segment_ids
    self.is_random_next = is_random_next
    self.masked_lm_positions = masked_lm_positions
    self.masked_lm_labels = masked_lm_labels

  def __str__(self):
    return ("tokens: %s\nsegment_ids: %s\nis_random_next: %s\nmasked_lm_positions: %s\n"
            "masked_lm_labels: %s" % (" ".join(self.tokens), self.segment_ids,
                                      self.is_random_next, self.masked_lm_positions,
                                      " ".join(self.masked_lm_labels)))


class CorpusStats(object):
  """Counts reported at the end of a run.

  Attributes:
    documents: documents with at least one token.
    empty_documents: documents dropped because no line of them had a token.
    documents_without_instances: documents that gave no instance in any pass.
    instances: instances written.
    skipped_lines: lines dropped because they are not valid UTF-8.
    first_skipped_line: "file:line" of the first of them, or None.
    chunks: chunks of documents processed.
    skipped_pairs: pair_span rows dropped because text_a does not fit.
  """

  def __init__(self):
    self.documents = 0
    self.empty_documents = 0
    self.documents_without_instances = 0
    self.instances = 0
    self.skipped_lines = 0
    self.first_skipped_line = None
    self.chunks = 0
    self.skipped_pairs = 0


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
    stats: CorpusStats; skipped_lines and first_skipped_line are counted.
    progress: ProgressLog or None; bytes and documents read are counted and
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
    stats: CorpusStats; lines that are not UTF-8 are skipped and counted.
    blank_marker: str (--blank_marker).
    progress: ProgressLog or None.

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
    settings: InstanceSettings.
    segment: the Chinese segmenter function or None.

  Returns:
    list of token lists (see `tokenize_document`), or PairTokens.
  """
  if settings.pretraining_task == PAIR_SPAN:
    return tokenize_pair(tokenizer, item)
  return tokenize_document(tokenizer, item, settings.do_whole_word_mask, segment)


def iter_chunks(items, chunk_size):
  """Yields lists of `chunk_size` consecutive items (the last may be shorter).

  Args:
    items: iterable, consumed only as far as the chunk being yielded.
    chunk_size: int; 0 means all items in one chunk.
  """
  iterator = iter(items)
  while True:
    chunk = list(itertools.islice(iterator, chunk_size or None))
    if not chunk:
      return
    yield chunk


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
  """Cuts the longer of two token lists, at a random end, until both fit.

  Args:
    tokens_a: list, shortened in place.
    tokens_b: list, shortened in place.
    max_num_tokens: int, the most tokens the two may hold together.
    rng: random.Random.
  """
  while len(tokens_a) + len(tokens_b) > max_num_tokens:
    longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
    # Cutting at both ends adds noise; always cutting the end would bias the data.
    if rng.random() < 0.5:
      del longer[0]
    else:
      longer.pop()


def whole_word_candidates(tokens, do_whole_word_mask):
  """Groups token positions into the units masking picks from.

  Args:
    tokens: list of str, `[CLS] A [SEP] B [SEP]`.
    do_whole_word_mask: bool; without it every position is its own group.

  Returns:
    list of lists of positions; [CLS] and [SEP] are in none. With whole-word
    masking a `##` piece or a `WordContinuation` joins the group of the token
    right before it (never across [SEP]).
  """
  groups = []
  previous_position = None
  for position, token in enumerate(tokens):
    if token == "[CLS]" or token == "[SEP]":
      previous_position = None
      continue
    continues_word = isinstance(token, WordContinuation) or token.startswith("##")
    if do_whole_word_mask and continues_word and previous_position == position - 1:
      groups[-1].append(position)
    else:
      groups.append([position])
    previous_position = position
  return groups


def _masked_token(token, vocab_words, rng):
  """What a position to predict shows: [MASK] 80%, itself 10%, a random token 10%."""
  if rng.random() < 0.8:
    return MASK_TOKEN
  if rng.random() < 0.5:
    return token
  return vocab_words[rng.randint(0, len(vocab_words) - 1)]


def create_masked_lm_predictions(tokens, masked_lm_prob, max_predictions_per_seq,
                                 vocab_words, rng, do_whole_word_mask=False):
  """Chooses the positions to predict and masks them.

  Args:
    tokens: list of str, `[CLS] A [SEP] B [SEP]`.
    masked_lm_prob: float, share of the tokens to predict.
    max_predictions_per_seq: int, the most positions to predict.
    vocab_words: list of str, the vocab, to draw random replacements from.
    rng: random.Random.
    do_whole_word_mask: bool, mask whole words (see `whole_word_candidates`).

  Returns:
    (output_tokens, masked_lm_positions, masked_lm_labels): the masked tokens, the
    sorted positions to predict and the original token at each.
  """
  candidates = whole_word_candidates(tokens, do_whole_word_mask)
  rng.shuffle(candidates)
  num_to_predict = min(max_predictions_per_seq,
                       max(1, int(round(len(tokens) * masked_lm_prob))))
  output_tokens = list(tokens)
  masked = []  # (position, original token)
  for group in candidates:
    if len(masked) >= num_to_predict:
      break
    # A whole word that would overshoot the budget is skipped, not cut.
    if len(masked) + len(group) > num_to_predict:
      continue
    for position in group:
      output_tokens[position] = _masked_token(tokens[position], vocab_words, rng)
      masked.append((position, tokens[position]))
  masked.sort(key=lambda item: item[0])
  positions = [position for position, _ in masked]
  labels = [str(label) for _, label in masked]
  return output_tokens, positions, labels


def _flatten(sentences):
  """Concatenates a list of token lists."""
  return [token for sentence in sentences for token in sentence]


def _target_length(max_num_tokens, short_seq_prob, rng):
  """The length an instance aims for: mostly max_num_tokens, sometimes (short_seq_prob) a
  random shorter one, so that the model also sees the short sequences of fine-tuning."""
  if rng.random() < short_seq_prob:
    return rng.randint(2, max_num_tokens)
  return max_num_tokens


def create_instances_from_document(all_documents, document_index, max_seq_length,
                                   short_seq_prob, masked_lm_prob, max_predictions_per_seq,
                                   vocab_words, rng, do_whole_word_mask=False):
  """Cuts one document into training instances.

  Args:
    all_documents: list of documents (lists of token lists).
    document_index: int, the document to cut.
    max_seq_length: int, tokens per instance with [CLS] and two [SEP]s.
    short_seq_prob: float, how often to aim for a random shorter length.
    masked_lm_prob, max_predictions_per_seq, vocab_words, do_whole_word_mask: see
      `create_masked_lm_predictions`.
    rng: random.Random.

  Returns:
    list of TrainingInstance.
  """
  document = all_documents[document_index]
  max_num_tokens = max_seq_length - 3  # [CLS], [SEP], [SEP]
  target_seq_length = _target_length(max_num_tokens, short_seq_prob, rng)

  instances = []
  current_chunk = []
  current_length = 0
  i = 0
  while i < len(document):
    sentence = document[i]
    current_chunk.append(sentence)
    current_length += len(sentence)
    if i == len(document) - 1 or current_length >= target_seq_length:
      # Sentences [0, a_end) of the chunk form A.
      a_end = 1
      if len(current_chunk) >= 2:
        a_end = rng.randint(1, len(current_chunk) - 1)
      tokens_a = _flatten(current_chunk[:a_end])
      is_random_next = len(current_chunk) == 1 or rng.random() < 0.5
      if is_random_next:
        target_b_length = target_seq_length - len(tokens_a)
        # Another document, if ten tries find one (a one-document corpus cannot).
        for _ in range(10):
          random_document_index = rng.randint(0, len(all_documents) - 1)
          if random_document_index != document_index:
            break
        random_document = all_documents[random_document_index]
        random_start = rng.randint(0, len(random_document) - 1)
        tokens_b = []
        for j in range(random_start, len(random_document)):
          tokens_b.extend(random_document[j])
          if len(tokens_b) >= target_b_length:
            break
        # The chunk's sentences after A were not used: start the next chunk with them.
        i -= len(current_chunk) - a_end
      else:
        tokens_b = _flatten(current_chunk[a_end:])
      truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
      if tokens_a and tokens_b:
        tokens = ["[CLS]"] + tokens_a + ["[SEP]"] + tokens_b + ["[SEP]"]
        segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
        tokens, positions, labels = create_masked_lm_predictions(
            tokens, masked_lm_prob, max_predictions_per_seq, vocab_words, rng,
            do_whole_word_mask)
        instances.append(TrainingInstance(tokens, segment_ids, is_random_next, positions,
                                          labels))
      current_chunk = []
      current_length = 0
    i += 1
  return instances


def create_mlm_instances_from_document(document, max_seq_length, short_seq_prob,
                                       masked_lm_prob, max_predictions_per_seq, vocab_words,
                                       rng, do_whole_word_mask=False):
  """Cuts one document into `[CLS] tokens [SEP]` instances for the masked LM alone.

  Consecutive sentences fill an instance up to the target length (max_seq_length
  - 2, or with probability short_seq_prob a random shorter one, as in Google's
  pairs); a sentence longer than the room is cut at random ends.

  Args:
    document: list of token lists (sentences).
    max_seq_length: int, tokens per instance with [CLS] and [SEP].
    short_seq_prob, masked_lm_prob, max_predictions_per_seq, vocab_words, rng,
      do_whole_word_mask: as for `create_instances_from_document`.

  Returns:
    list of TrainingInstance, is_random_next None and segment ids all 0.
  """
  max_num_tokens = max_seq_length - 2  # [CLS], [SEP]
  target_seq_length = _target_length(max_num_tokens, short_seq_prob, rng)
  instances = []
  current_chunk = []
  current_length = 0
  for i, sentence in enumerate(document):
    current_chunk.append(sentence)
    current_length += len(sentence)
    if i == len(document) - 1 or current_length >= target_seq_length:
      tokens = _flatten(current_chunk)
      truncate_seq_pair(tokens, [], max_num_tokens, rng)
      tokens = ["[CLS]"] + tokens + ["[SEP]"]
      tokens, positions, labels = create_masked_lm_predictions(
          tokens, masked_lm_prob, max_predictions_per_seq, vocab_words, rng,
          do_whole_word_mask)
      instances.append(TrainingInstance(tokens, [0] * len(tokens), None, positions, labels))
      current_chunk = []
      current_length = 0
  return instances


def create_pair_span_instance(pair, max_seq_length, max_predictions_per_seq, vocab_words,
                              rng):
  """Makes the instance of one pair_span row (one per dupe_factor pass).

  `[CLS] a [SEP] b [SEP]`, segment ids 0 through the first [SEP], 1 after. b is
  cut to fit around its blank (the blank in the middle of what is kept, as far
  as b allows), or keeps its start when it has no blank. A contiguous span of b as long as a (at most
  max_predictions_per_seq, at most b) is predicted, from a random start; each of
  its positions shows [MASK] 80%, itself 10%, a random token 10%.

  Args:
    pair: PairTokens for which `pair_fits`.
    max_seq_length, max_predictions_per_seq: int.
    vocab_words: list of str.
    rng: random.Random.

  Returns:
    TrainingInstance; is_random_next is True for label 0 (next_sentence_labels
    1 = text_a does not belong in text_b, Google's meaning).
  """
  tokens_a = list(pair.tokens_a)
  room = max_seq_length - 3 - len(tokens_a)
  tokens_b = list(pair.tokens_b)
  if len(tokens_b) > room:
    start = 0
    if pair.blank_length:  # the blank in the middle of what is kept
      start = min(max(0, pair.blank_start - (room - pair.blank_length) // 2),
                  len(tokens_b) - room)
    tokens_b = tokens_b[start:start + room]
  span_length = min(len(tokens_a), max_predictions_per_seq, len(tokens_b))
  span_start = len(tokens_a) + 2 + rng.randint(0, len(tokens_b) - span_length)
  tokens = ["[CLS]"] + tokens_a + ["[SEP]"] + tokens_b + ["[SEP]"]
  segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
  positions = list(range(span_start, span_start + span_length))
  labels = [str(tokens[position]) for position in positions]
  for position in positions:
    tokens[position] = _masked_token(tokens[position], vocab_words, rng)
  return TrainingInstance(tokens, segment_ids, pair.label == 0, positions, labels)


def create_instances(documents, document_index, settings, vocab_words, rng):
  """The instances of one document (or pair_span row) in one pass, for settings' task.

  Args:
    documents: list of tokenized documents (lists of token lists) or PairTokens.
    document_index: int.
    settings: InstanceSettings.
    vocab_words: list of str, the vocab in id order.
    rng: random.Random.

  Returns:
    list of TrainingInstance.
  """
  if settings.pretraining_task == MLM:
    return create_mlm_instances_from_document(
        documents[document_index], settings.max_seq_length, settings.short_seq_prob,
        settings.masked_lm_prob, settings.max_predictions_per_seq, vocab_words, rng,
        settings.do_whole_word_mask)
  if settings.pretraining_task == PAIR_SPAN:
    return [create_pair_span_instance(documents[document_index], settings.max_seq_length,
                                      settings.max_predictions_per_seq, vocab_words, rng)]
  return create_instances_from_document(
      documents, document_index, settings.max_seq_length, settings.short_seq_prob,
      settings.masked_lm_prob, settings.max_predictions_per_seq, vocab_words, rng,
      settings.do_whole_word_mask)


def _float_feature(values):
  return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def instance_to_example(instance, tokenizer, max_seq_length, max_predictions_per_seq):
  """Turns an instance into the tf.train.Example Google's run_pretraining reads.

  Args:
    instance: TrainingInstance.
    tokenizer: tokenization.FullTokenizer (for the vocab).
    max_seq_length: int, length of input_ids, input_mask and segment_ids.
    max_predictions_per_seq: int, length of the masked_lm_* features.

  Returns:
    tf.train.Example with input_ids, input_mask, segment_ids, masked_lm_positions,
    masked_lm_ids, masked_lm_weights and (unless is_random_next is None, the mlm
    task) next_sentence_labels, zero padded.
  """
  input_ids = tokenizer.convert_tokens_to_ids(instance.tokens)
  num_tokens = len(input_ids)
  assert num_tokens <= max_seq_length
  pad = [0] * (max_seq_length - num_tokens)
  masked_lm_ids = tokenizer.convert_tokens_to_ids(instance.masked_lm_labels)
  num_masked = len(masked_lm_ids)
  assert num_masked <= max_predictions_per_seq
  prediction_pad = [0] * (max_predictions_per_seq - num_masked)
  features = collections.OrderedDict()
  features["input_ids"] = tfrecord_io.int64_feature(input_ids + pad)
  features["input_mask"] = tfrecord_io.int64_feature([1] * num_tokens + pad)
  features["segment_ids"] = tfrecord_io.int64_feature(list(instance.segment_ids) + pad)
  features["masked_lm_positions"] = tfrecord_io.int64_feature(
      list(instance.masked_lm_positions) + prediction_pad)
  features["masked_lm_ids"] = tfrecord_io.int64_feature(masked_lm_ids + prediction_pad)
  features["masked_lm_weights"] = _float_feature([1.0] * num_masked + [0.0] * len(prediction_pad))
  if instance.is_random_next is not None:
    features["next_sentence_labels"] = tfrecord_io.int64_feature(
        [1 if instance.is_random_next else 0])
  return tf.train.Example(features=tf.train.Features(feature=features))


def serialize_instance(instance, tokenizer, max_seq_length, max_predictions_per_seq):
  """Returns the serialized tf.train.Example of an instance (see `instance_to_example`)."""
  example = instance_to_example(instance, tokenizer, max_seq_length, max_predictions_per_seq)
  # Map fields (the feature dict) serialize in hash order unless told otherwise,
  # which would make the bytes differ from run to run.
  return example.SerializeToString(deterministic=True)


class RoundRobinRecordWriter(object):
  """Writes records round-robin to TFRecord files, each through `<path>.tmp`.

  The files get their final names only in `commit`, so a run that fails or is
  killed leaves no half-written file under an output name.

  Attributes:
    output_files: list of the final paths.
    counts: list of int, the records written to each file.
  """

  def __init__(self, output_files):
    self.output_files = list(output_files)
    self.counts = [0] * len(self.output_files)
    self._temp_files = [path + ".tmp" for path in self.output_files]
    self._writers = []
    try:
      for temp_file in self._temp_files:
        self._writers.append(tf.io.TFRecordWriter(temp_file))
    except BaseException:
      self.abort()
      raise
    self._next = 0

  def write(self, record):
    """Writes one serialized Example to the next file in turn."""
    self._writers[self._next].write(record)
    self.counts[self._next] += 1
    self._next = (self._next + 1) % len(self._writers)

  def commit(self):
    """Closes the files and gives them their final names."""
    for writer in self._writers:
      writer.close()
    for temp_file, path in zip(self._temp_files, self.output_files):
      tf.gfile.Rename(temp_file, path, overwrite=True)

  def abort(self):
    """Closes and deletes the temporary files."""
    for writer in self._writers:
      writer.close()
    for temp_file in self._temp_files:
      if tf.gfile.Exists(temp_file):
        tf.gfile.Remove(temp_file)


def _format_bytes(num_bytes):
  """A byte count for people: "812.4 KB", "3.2 MB", "1.25 GB"."""
  if num_bytes >= 1e9:
    return "%.2f GB" % (num_bytes / 1e9)
  if num_bytes >= 1e6:
    return "%.1f MB" % (num_bytes / 1e6)
  return "%.1f KB" % (num_bytes / 1e3)


class ProgressLog(object):
  """Logs how far the run is, at most once per interval.

  The ETA extrapolates the time so far over the input bytes not yet done. A
  chunk's bytes count as done in proportion to its documents' passes that have
  given their instances (tokenizing and writing are counted in the time, not
  in the share), so the ETA settles once the first chunk is under way.

  Attributes (set by the caller as the run goes):
    bytes_read: int, input bytes read.
    documents_read: int, documents read.
    bytes_done: float, input bytes whose instances are made.
    instances_written: int.
  """

  def __init__(self, total_bytes, interval_seconds=DEFAULT_PROGRESS_INTERVAL_SECONDS,
               clock=time.time, log_function=None):
    """Creates the log.

    Args:
      total_bytes: int, the size of all input files.
      interval_seconds: float, the least time between two progress lines.
      clock: function returning seconds.
      log_function: function(format, *args); tf.logging.info by default.
    """
    self.total_bytes = total_bytes
    self.interval_seconds = interval_seconds
    self._clock = clock
    self._log_function = log_function or tf.logging.info
    self._start = clock()
    self._last_log = self._start
    self.bytes_read = 0
    self.documents_read = 0
    self.bytes_done = 0.0
    self.instances_written = 0

  def eta_seconds(self, now):
    """Seconds left at time `now`, or None before anything is done."""
    if self.bytes_done <= 0:
      return None
    remaining = max(0.0, self.total_bytes - self.bytes_done)
    return (now - self._start) * remaining / self.bytes_done

  def message(self, now):
    """The progress line for time `now`."""
    elapsed = max(now - self._start, 1e-9)
    eta = self.eta_seconds(now)
    eta_text = "unknown" if eta is None else str(datetime.timedelta(seconds=int(round(eta))))
    share = 100.0 * self.bytes_done / self.total_bytes if self.total_bytes else 100.0
    return ("Progress: %.1f%% done; read %s of %s, %d documents; %d instances written "
            "(%.1f/s); elapsed %s, ETA %s" % (
                share, _format_bytes(self.bytes_read), _format_bytes(self.total_bytes),
                self.documents_read, self.instances_written, self.instances_written / elapsed,
                datetime.timedelta(seconds=int(round(elapsed))), eta_text))

  def maybe_log(self):
    """Logs the progress line if the interval has passed since the last one."""
    now = self._clock()
    if now - self._last_log >= self.interval_seconds:
      self._last_log = now
      self._log_function("%s", self.message(now))


# What every worker process needs besides the documents: a subset of DataSettings.
InstanceSettings = collections.namedtuple("InstanceSettings", [
    "max_seq_length", "short_seq_prob", "masked_lm_prob", "max_predictions_per_seq",
    "dupe_factor", "do_whole_word_mask", "random_seed", "chinese_segmenter",
    "pretraining_task"], defaults=(NSP,))


def instance_settings(settings):
  """Returns the InstanceSettings of a DataSettings (chinese_segmenter None becomes "")."""
  values = {name: getattr(settings, name) for name in InstanceSettings._fields}
  values["chinese_segmenter"] = values["chinese_segmenter"] or ""
  return InstanceSettings(**values)


# The state of a worker process, set by `_init_worker`.
_WORKER_STATE = {}


class Terminated(BaseException):
  """SIGTERM asked the run to stop; raised in the main process by `StopOnSignals`.

  A BaseException, like KeyboardInterrupt, so that no `except Exception` on the
  way out takes it for an error of its own. main() turns it into one line and
  exit 143.
  """


class StopOnSignals(object):
  """While installed, Ctrl-C and SIGTERM stop the main process cleanly.

  The first SIGINT raises KeyboardInterrupt and the first SIGTERM raises
  Terminated in the main thread, so that the `try` blocks on the way out end
  the worker pool and delete the temporary files. Later signals are ignored:
  that clean-up is not cut short. After `stop_raising()` (the output
  files are being renamed, or another failure is being cleaned up) a signal is
  only recorded too. The pool workers ignore SIGINT themselves (`_init_worker`).

  A context manager, for the main thread. On leaving, the previous handlers come
  back, unless a signal came: the process is then on its way out and ignores
  any further one (SIG_IGN, which, unlike a Python handler, also holds while
  the interpreter shuts down).

  Attributes:
    signum: the first signal received, or None.
  """

  SIGNALS = (signal.SIGINT, signal.SIGTERM)

  def __init__(self):
    self.signum = None
    self._raising = True
    self._pid = None
    self._previous = {}

  def __enter__(self):
    self._pid = os.getpid()
    for signum in self.SIGNALS:
      self._previous[signum] = signal.signal(signum, self._handle)
    return self

  def __exit__(self, *unused_exc):
    for signum, handler in self._previous.items():
      if self.signum is not None:
        handler = signal.SIG_IGN
      elif handler is None:  # a handler not set from Python, which cannot be set back
        handler = signal.SIG_DFL
      signal.signal(signum, handler)
    return False

  def stop_raising(self):
    """From now on a signal is only recorded: what runs must run to its end."""
    self._raising = False

  def _handle(self, signum, unused_frame):
    if os.getpid() != self._pid:
      # A pool worker between its fork and _init_worker: it behaves as it will after.
      if signum == signal.SIGTERM:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
      return
    if self.signum is not None:
      return
    self.signum = signum
    if not self._raising:
      return
    if signum == signal.SIGINT:
      raise KeyboardInterrupt()
    raise Terminated()


def _init_worker(state, parent_pid):
  """Pool initializer: keeps `state` (documents, tokenizer, settings, counters).

  Only the main process decides when to stop: a worker ignores Ctrl-C (which the
  terminal sends to the whole process group, and which would only print the
  worker's traceback) and ends at once on SIGTERM (sent by pool.terminate() and,
  through PR_SET_PDEATHSIG, by Linux when the parent dies), instead of running
  the handlers of `StopOnSignals` that it inherited with the fork.

  Where fork exists the state is inherited, not pickled; jieba, loaded by the
  parent, comes along. Elsewhere the segmenter is loaded here.
  """
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.signal(signal.SIGTERM, signal.SIG_DFL)
  processes.die_with_parent(parent_pid)
  _WORKER_STATE.clear()
  _WORKER_STATE.update(state)
  _WORKER_STATE["segment"] = load_chinese_segmenter(state["settings"].chinese_segmenter)


def _run_in_pool(context, num_workers, state, function, tasks, on_wait):
  """Runs `function` over `tasks` in `num_workers` fresh processes.

  Args:
    context: a multiprocessing context.
    num_workers: int.
    state: dict for `_init_worker`.
    function: a module-level function of one task.
    tasks: list.
    on_wait: function called about every _POLL_SECONDS while waiting.

  Returns:
    list of the results, in task order.
  """
  pool = context.Pool(num_workers, initializer=_init_worker,
                      initargs=(state, os.getpid()))
  try:
    result = pool.map_async(function, tasks, chunksize=1)
    while not result.ready():
      result.wait(_POLL_SECONDS)
      on_wait()
    return result.get()
  finally:
    pool.terminate()
    pool.join()


def _split_range(length, num_parts):
  """Cuts range(length) into `num_parts` contiguous (start, end) pairs of near equal size."""
  bounds = [length * i // num_parts for i in range(num_parts + 1)]
  return [(bounds[i], bounds[i + 1]) for i in range(num_parts)]


def _tokenize_shard(shard):
  """Worker: tokenizes raw documents [start, end) of the chunk.

  Args:
    shard: (shard_index, start, end).

  Returns:
    list of token-list documents (empty ones included, to be counted).
  """
  shard_index, start, end = shard
  tokenizer = _WORKER_STATE["tokenizer"]
  settings = _WORKER_STATE["settings"]
  counter = _WORKER_STATE["counter"]
  documents = []
  for item in _WORKER_STATE["documents"][start:end]:
    documents.append(tokenize_item(tokenizer, item, settings, _WORKER_STATE["segment"]))
    counter[shard_index] += 1
  return documents


def tokenize_chunk(raw_documents, tokenizer, settings, segment, num_workers, context,
                   progress):
  """Tokenizes a chunk of documents, in `num_workers` processes if more than one.

  Args:
    raw_documents: list of documents as lists of lines (see `read_raw_documents`).
    tokenizer: tokenization.FullTokenizer.
    settings: InstanceSettings.
    segment: the Chinese segmenter function or None.
    num_workers: int >= 1.
    context: multiprocessing context (unused for one worker).
    progress: ProgressLog.

  Returns:
    list of tokenized documents (lists of token lists), in input order; a
    document without tokens gives an empty list.
  """
  num_workers = min(num_workers, len(raw_documents))
  if num_workers <= 1:
    documents = []
    for item in raw_documents:
      documents.append(tokenize_item(tokenizer, item, settings, segment))
      progress.maybe_log()
    return documents
  counter = context.RawArray("q", num_workers)
  state = {"documents": raw_documents, "tokenizer": tokenizer, "settings": settings,
           "counter": counter}
  shards = [(index, start, end)
            for index, (start, end) in enumerate(_split_range(len(raw_documents), num_workers))]
  results = _run_in_pool(context, num_workers, state, _tokenize_shard, shards,
                         progress.maybe_log)
  return [document for shard_documents in results for document in shard_documents]


def _create_shard_records(documents, start, end, rng, settings, tokenizer, vocab_words,
                          on_document_done, num_to_log):
  """The serialized instances of documents [start, end) over all passes, in order made.

  Args:
    documents: list of tokenized documents (the chunk); random next sentences
      may come from any of them.
    start, end: int, the documents to cut into instances.
    rng: random.Random.
    settings: InstanceSettings.
    tokenizer: tokenization.FullTokenizer.
    vocab_words: list of str, the vocab in id order.
    on_document_done: function called after each document of each pass.
    num_to_log: int, how many of the first instances to return as text.

  Returns:
    (list of bytes, number of the documents that gave no instance, list of the
    first `num_to_log` instances as text).
  """
  records = []
  instances_per_document = [0] * (end - start)
  logged = []
  for _ in range(settings.dupe_factor):
    for document_index in range(start, end):
      instances = create_instances(documents, document_index, settings, vocab_words, rng)
      instances_per_document[document_index - start] += len(instances)
      for instance in instances:
        if len(logged) < num_to_log:
          logged.append(str(instance))
        records.append(serialize_instance(instance, tokenizer, settings.max_seq_length,
                                          settings.max_predictions_per_seq))
      on_document_done()
  return records, instances_per_document.count(0), logged


def _shard_rng(random_seed, chunk_index, shard_index):
  # A string seed is hashed with SHA-512: the same stream on every Python version.
  return random.Random("%d/%d/%d" % (random_seed, chunk_index, shard_index))


def _create_records_of_shard(shard):
  """Worker: `_create_shard_records` for (shard_index, start, end) of the chunk."""
  shard_index, start, end = shard
  settings = _WORKER_STATE["settings"]
  tokenizer = _WORKER_STATE["tokenizer"]
  counter = _WORKER_STATE["counter"]

  def count_document():
    counter[shard_index] += 1

  return _create_shard_records(
      _WORKER_STATE["documents"], start, end,
      _shard_rng(settings.random_seed, _WORKER_STATE["chunk_index"], shard_index), settings,
      tokenizer, list(tokenizer.vocab.keys()), count_document, _WORKER_STATE["num_to_log"])


def create_chunk_records(documents, chunk_index, tokenizer, settings, num_workers, rng,
                         context, progress, num_to_log):
  """Creates the shuffled, serialized instances of one chunk of documents.

  The documents are shuffled with `rng`. With one worker every instance is
  drawn from `rng`, in Google's order. With more, the documents are cut into
  contiguous shards, one per worker, each with its own stream seeded by
  (random_seed, chunk_index, shard). Random next sentences come from the
  whole chunk. The records are then shuffled with `rng`.

  Args:
    documents: list of tokenized, non-empty documents; shuffled in place.
    chunk_index: int, the chunk's number, counted from 0.
    tokenizer: tokenization.FullTokenizer.
    settings: InstanceSettings.
    num_workers: int >= 1; 1 means Google's single random stream.
    rng: random.Random, the run's main stream.
    context: multiprocessing context.
    progress: ProgressLog; bytes_done is moved through the chunk's bytes.
    num_to_log: int, how many of the first instances to return as text.

  Returns:
    (list of bytes, number of documents that gave no instance, list of str: the
    first `num_to_log` instances).
  """
  rng.shuffle(documents)
  total_passes = float(len(documents) * settings.dupe_factor)
  chunk_start_bytes = progress.bytes_done
  chunk_bytes = progress.bytes_read - chunk_start_bytes

  def report(passes_done):
    progress.bytes_done = chunk_start_bytes + chunk_bytes * passes_done / total_passes
    progress.maybe_log()

  passes_done = [0]

  def count_document():
    passes_done[0] += 1
    report(passes_done[0])

  vocab_words = list(tokenizer.vocab.keys())
  num_shards = min(num_workers, len(documents))
  if num_workers == 1:
    records, without_instances, logged = _create_shard_records(
        documents, 0, len(documents), rng, settings, tokenizer, vocab_words, count_document,
        num_to_log)
  elif num_shards == 1:
    records, without_instances, logged = _create_shard_records(
        documents, 0, len(documents), _shard_rng(settings.random_seed, chunk_index, 0),
        settings, tokenizer, vocab_words, count_document, num_to_log)
  else:
    shards = [(index, start, end)
              for index, (start, end) in enumerate(_split_range(len(documents), num_shards))]
    counter = context.RawArray("q", num_shards)
    state = {"documents": documents, "tokenizer": tokenizer, "settings": settings,
             "counter": counter, "chunk_index": chunk_index, "num_to_log": num_to_log}
    results = _run_in_pool(context, num_shards, state, _create_records_of_shard, shards,
                           lambda: report(sum(counter)))
    records = []
    without_instances = 0
    logged = []
    for shard_records, shard_without_instances, shard_logged in results:
      records.extend(shard_records)
      without_instances += shard_without_instances
      logged.extend(shard_logged)
    del results
    logged = logged[:num_to_log]
  report(total_passes)
  rng.shuffle(records)
  return records, without_instances, logged


def _check_task(settings):
  """Raises UsageError for a --pretraining_task, or task options, that cannot work."""
  task = settings.pretraining_task
  if task not in PRETRAINING_TASKS:
    raise UsageError("--pretraining_task=%s: use one of %s." % (task, ", ".join(PRETRAINING_TASKS)))
  if task != PAIR_SPAN:
    return
  if settings.do_whole_word_mask:
    raise UsageError("--do_whole_word_mask does not apply to --pretraining_task=pair_span: its "
                     "masked span is as long as text_a, counted in word pieces. Drop "
                     "--do_whole_word_mask.")
  marker = settings.blank_marker
  if not marker or any(char.isspace() for char in marker):
    raise UsageError("--blank_marker=%r: give one or more characters, no whitespace or tab "
                     "(the default is %s)." % (marker, DEFAULT_BLANK_MARKER))


def check_settings(settings):
  """Raises UsageError for settings the algorithm cannot work with.

  Args:
    settings: DataSettings; its numbers, num_workers, docs_per_chunk and
      chinese_segmenter are checked, not its files.
  """
  _check_task(settings)
  least_length = 4 if settings.pretraining_task == MLM else 5
  if settings.max_seq_length < least_length:
    raise UsageError("--max_seq_length=%d: it must be at least %d with --pretraining_task=%s "
                     "([CLS], the [SEP]s and tokens of each segment)."
                     % (settings.max_seq_length, least_length, settings.pretraining_task))
  if settings.max_predictions_per_seq < 1:
    raise UsageError("--max_predictions_per_seq=%d: it must be at least 1."
                     % settings.max_predictions_per_seq)
  if settings.dupe_factor < 1:
    raise UsageError("--dupe_factor=%d: it must be at least 1." % settings.dupe_factor)
  if not 0.0 < settings.masked_lm_prob <= 1.0:
    raise UsageError("--masked_lm_prob=%s: it must be in (0, 1]." % settings.masked_lm_prob)
  if not 0.0 <= settings.short_seq_prob <= 1.0:
    raise UsageError("--short_seq_prob=%s: it must be in [0, 1]." % settings.short_seq_prob)
  if settings.num_workers < 0:
    raise UsageError("--num_workers=%d: give 0 (one per CPU core) or a positive number."
                     % settings.num_workers)
  if settings.docs_per_chunk < 0 or (settings.docs_per_chunk == 1 and
                                     settings.pretraining_task == NSP):
    raise UsageError("--docs_per_chunk=%d: give 2 or more documents (random next sentences "
                     "come from the other documents of a chunk), or 0 to hold the whole "
                     "corpus in memory." % settings.docs_per_chunk)
  if settings.chinese_segmenter and not settings.do_whole_word_mask:
    raise UsageError("--chinese_segmenter=%s only changes whole-word masking: add "
                     "--do_whole_word_mask, or drop --chinese_segmenter."
                     % settings.chinese_segmenter)


def _check_files(settings):
  """Checks the vocab and output paths, finds the input files and makes the output directories.

  Args:
    settings: DataSettings.

  Returns:
    (list of input paths, list of output paths).

  Raises:
    UsageError: no vocab file, no input file, no output path, an output path
      given twice or one that is a directory.
  """
  if not settings.vocab_file or not tf.gfile.Exists(settings.vocab_file):
    raise UsageError("--vocab_file=%s: no such file. Give the vocab.txt of the model."
                     % settings.vocab_file)
  input_files = tfrecord_io.expand_input_files(settings.input_file)
  output_files = [p.strip() for p in (settings.output_file or "").split(",") if p.strip()]
  if not output_files:
    raise UsageError("--output_file is empty: give one or more TFRecord paths "
                     "(comma-separated).")
  seen_outputs = set()
  for path in output_files:
    if os.path.abspath(path) in seen_outputs:
      raise UsageError("--output_file names %s twice: give each output file once." % path)
    seen_outputs.add(os.path.abspath(path))
    if tf.gfile.IsDirectory(path):
      raise UsageError("--output_file=%s is a directory: give file paths, e.g. %s" %
                       (path, os.path.join(path, "pretrain_data.tfrecord")))
  for path in output_files:
    directory = os.path.dirname(path)
    if directory and not tf.gfile.IsDirectory(directory):
      tf.gfile.MakeDirs(directory)
  return input_files, output_files


def _load_tokenizer(settings):
  """Returns the FullTokenizer of settings.vocab_file; UsageError if it is not a BERT vocab."""
  try:
    tokenizer = tokenization.FullTokenizer(settings.vocab_file,
                                           do_lower_case=settings.do_lower_case)
  except ValueError as e:
    raise UsageError(str(e))
  missing = tokenization.missing_special_token(tokenizer.vocab, ("[CLS]", "[SEP]", "[MASK]"))
  if missing:
    raise UsageError("--vocab_file=%s has no %s token: use the vocab.txt of a BERT model."
                     % (settings.vocab_file, missing))
  return tokenizer


def _usable_documents(tokenized, settings, stats):
  """The documents (or pair_span rows) that can give instances; the others are counted.

  Args:
    tokenized: list of tokenized documents, or of PairTokens.
    settings: InstanceSettings.
    stats: CorpusStats; empty_documents, or for pair_span skipped_pairs, is counted.

  Returns:
    list, the usable ones in order.
  """
  if settings.pretraining_task != PAIR_SPAN:
    documents = [document for document in tokenized if document]
    stats.empty_documents += len(tokenized) - len(documents)
    return documents
  documents = []
  for pair in tokenized:
    if pair_fits(pair, settings.max_seq_length):
      documents.append(pair)
      continue
    if not stats.skipped_pairs:
      tf.logging.warning("%s: skipped (and counted): text_a has %d word piece(s) and text_b "
                         "%d; [CLS] a [SEP] b [SEP] must keep all of a, b's blank and a "
                         "token of b within --max_seq_length=%d.", pair.location,
                         len(pair.tokens_a), len(pair.tokens_b), settings.max_seq_length)
    stats.skipped_pairs += 1
  return documents


def _log_summary(stats, progress, output_files, counts):
  """Logs the end of a run: the last progress line, the output files and the counts."""
  tf.logging.info("%s", progress.message(time.time()))
  tf.logging.info("*** Wrote %d output file(s) ***", len(output_files))
  for path, count in zip(output_files, counts):
    tf.logging.info("  %s: %d instances", path, count)
  tf.logging.info("documents: %d, documents without tokens (dropped): %d, documents that "
                  "gave no instance: %d, instances: %d, non-UTF-8 lines skipped: %d, "
                  "chunks: %d", stats.documents, stats.empty_documents,
                  stats.documents_without_instances, stats.instances, stats.skipped_lines,
                  stats.chunks)
  if stats.skipped_pairs:
    tf.logging.warning("pair_span: %d pair(s) skipped because text_a and the blank do not "
                       "fit in --max_seq_length.", stats.skipped_pairs)


_INPUT_NOUN = {NSP: "document with any token", MLM: "document with any token",
               PAIR_SPAN: "row whose text_a fits"}
_INPUT_LAYOUT = {
    NSP: "The input is one sentence per line with a blank line between documents.",
    MLM: "The input is one sentence per line with a blank line between documents.",
    PAIR_SPAN: "The input is label<TAB>id<TAB>text_a<TAB>text_b rows.",
}


def create_pretraining_data(settings, stop_signals=None,
                            progress_interval_seconds=DEFAULT_PROGRESS_INTERVAL_SECONDS):
  """Reads text files and writes pre-training TFRecord files (the whole script).

  Args:
    settings: DataSettings: the files and the flags of the run.
    stop_signals: None, or the StopOnSignals installed around the call; once the
      output files are being renamed (or a failure cleaned up), a signal no
      longer stops the run.
    progress_interval_seconds: float, the least time between two progress lines.

  Returns:
    CorpusStats.

  Raises:
    UsageError: a missing file, bad settings, a missing segmenter or a corpus
      without documents.
  """
  check_settings(settings)
  segment = load_chinese_segmenter(settings.chinese_segmenter)
  input_files, output_files = _check_files(settings)
  tokenizer = _load_tokenizer(settings)

  num_workers = settings.num_workers or processes.available_cpus()
  per_instance = instance_settings(settings)
  if "fork" in multiprocessing.get_all_start_methods():
    context = multiprocessing.get_context("fork")
  else:
    context = multiprocessing.get_context()
  total_bytes = sum(tf.gfile.Stat(path).length for path in input_files)
  tf.logging.info("*** Reading %s from %d input file(s), %s documents per chunk, %d "
                  "worker process(es) ***", _format_bytes(total_bytes), len(input_files),
                  settings.docs_per_chunk or "all", num_workers)
  for path in input_files:
    tf.logging.info("  %s", path)

  stats = CorpusStats()
  progress = ProgressLog(total_bytes, progress_interval_seconds)
  # One stream for the whole run: with one chunk and one worker it is used
  # exactly as in Google's script.
  rng = random.Random(settings.random_seed)
  writer = RoundRobinRecordWriter(output_files)
  num_logged = 0
  try:
    if settings.pretraining_task == PAIR_SPAN:
      raw_documents = read_pair_rows(input_files, stats, settings.blank_marker, progress)
    else:
      raw_documents = read_raw_documents(input_files, stats, progress)
    for chunk_index, raw_chunk in enumerate(iter_chunks(raw_documents,
                                                        settings.docs_per_chunk)):
      tokenized = tokenize_chunk(raw_chunk, tokenizer, per_instance, segment, num_workers,
                                 context, progress)
      documents = _usable_documents(tokenized, per_instance, stats)
      del tokenized
      if not documents:
        progress.bytes_done = progress.bytes_read
        continue
      stats.documents += len(documents)
      stats.chunks += 1
      records, without_instances, logged = create_chunk_records(
          documents, chunk_index, tokenizer, per_instance, num_workers, rng, context,
          progress, _NUM_INSTANCES_TO_LOG - num_logged)
      del documents
      stats.documents_without_instances += without_instances
      for text in logged:
        tf.logging.info("*** Example %d ***\n%s", num_logged, text)
        num_logged += 1
      for record in records:
        writer.write(record)
        progress.instances_written += 1
        progress.maybe_log()
      del records
    if stats.skipped_lines:
      tf.logging.warning("Skipped %d line(s) that are not valid UTF-8; the first is %s.",
                         stats.skipped_lines, stats.first_skipped_line)
    if not stats.documents:
      raise UsageError("--input_file=%s: no %s in %s. %s" % (
          settings.input_file, _INPUT_NOUN[settings.pretraining_task],
          ", ".join(input_files), _INPUT_LAYOUT[settings.pretraining_task]))
    if not progress.instances_written:
      raise UsageError("--input_file=%s: no instance could be made from %d document(s)."
                       % (settings.input_file, stats.documents))
    if stop_signals is not None:
      stop_signals.stop_raising()  # all output files get their names, or none
    writer.commit()
  except BaseException:
    if stop_signals is not None:
      stop_signals.stop_raising()
    writer.abort()
    raise
  stats.instances = sum(writer.counts)
  _log_summary(stats, progress, output_files, writer.counts)
  return stats


def define_flags(flag_values=None):
  """Defines Google's flags. Called only when run as a script, so that importing this
  module next to run_classifier_mgpu (which defines some of the same names) works.

  Args:
    flag_values: the absl FlagValues to define them in; None means tf.flags.FLAGS.
  """
  flags = tf.flags
  where = {} if flag_values is None else {"flag_values": flag_values}
  flags.DEFINE_string("input_file", None,
                      "Input text file(s): comma-separated globs. One sentence per line, a "
                      "blank line between documents.", **where)
  flags.DEFINE_string("output_file", None,
                      "Output TFRecord file(s), comma-separated; instances are written "
                      "round-robin.", **where)
  flags.DEFINE_string("vocab_file", None, "The vocab.txt the BERT model was trained with.",
                      **where)
  flags.DEFINE_bool("do_lower_case", True,
                    "Lower-case the input (True for uncased and Chinese models).", **where)
  flags.DEFINE_bool("do_whole_word_mask", False,
                    "Mask whole words: a token with its ## pieces, the characters of a "
                    "Chinese word (words separated by spaces, or found by "
                    "--chinese_segmenter).", **where)
  flags.DEFINE_integer("max_seq_length", 128, "Tokens per instance, with [CLS] and [SEP]s.",
                       **where)
  flags.DEFINE_integer("max_predictions_per_seq", 20,
                       "Most masked-LM predictions per instance.", **where)
  flags.DEFINE_integer("random_seed", 12345, "Seed: the same seed gives the same files.", **where)
  flags.DEFINE_integer("dupe_factor", 10, "Passes over the input, each with different masks.",
                       **where)
  flags.DEFINE_float("masked_lm_prob", 0.15, "Share of the tokens to predict.", **where)
  flags.DEFINE_float("short_seq_prob", 0.1,
                     "Share of instances that aim for a random length below max_seq_length.",
                     **where)
  flags.DEFINE_integer("num_workers", 0,
                       "Processes that tokenize and create instances (0: one per CPU core). "
                       "The output depends on the seed, this number and --docs_per_chunk; 1 "
                       "follows Google's single random stream.", **where)
  flags.DEFINE_integer("docs_per_chunk", DEFAULT_DOCS_PER_CHUNK,
                       "Documents held in memory at a time (0: the whole corpus, as Google's "
                       "script). Random next sentences and the shuffle stay within a chunk. "
                       "Memory: about 130 bytes per token of a chunk with dupe_factor=10 in "
                       "one process, about three times that with worker processes.", **where)
  flags.DEFINE_string("chinese_segmenter", "",
                      "With --do_whole_word_mask: 'jieba' finds the words of raw Chinese text "
                      "with jieba (pip install jieba). Empty: Chinese words are separated by "
                      "spaces in the input.", **where)
  flags.DEFINE_enum("pretraining_task", NSP, list(PRETRAINING_TASKS),
                    "nsp: Google's sentence pairs with next_sentence_labels. mlm: [CLS] "
                    "tokens [SEP] of consecutive sentences, masked LM only (no "
                    "next_sentence_labels). pair_span: TSV rows label<TAB>id<TAB>text_a"
                    "<TAB>text_b; a span of b as long as a is masked and "
                    "next_sentence_labels = 1 - label.", **where)
  flags.DEFINE_string("blank_marker", DEFAULT_BLANK_MARKER,
                      "With --pretraining_task=pair_span: a run of this character in text_b "
                      "(or one literal [MASK]) is the blank. Pick one your text lacks.",
                      **where)


def main(_):
  FLAGS = tf.flags.FLAGS
  for name in ("input_file", "output_file", "vocab_file"):
    if not getattr(FLAGS, name):
      raise UsageError("--%s is required." % name)
  # Ctrl-C ends as a KeyboardInterrupt, which command_line.run_main turns into exit 130.
  with StopOnSignals() as stop:
    try:
      create_pretraining_data(data_settings_from_flags(FLAGS), stop_signals=stop)
    except Terminated:
      sys.stderr.write("Stopped by SIGTERM; no output written.\n")
      sys.stderr.flush()
      sys.exit(128 + signal.SIGTERM)
  if stop.signum is not None:
    tf.logging.warning("%s came while the output files were being renamed: they are "
                       "complete.", "SIGTERM" if stop.signum == signal.SIGTERM else "Ctrl-C")


if __name__ == "__main__":
  # Imported here: the command line module loads the training stack, which the data
  # functions above do not need.
  from bert_mgpu import command_line  # pylint: disable=g-import-not-at-top
  define_flags()
  command_line.run_main(main)
