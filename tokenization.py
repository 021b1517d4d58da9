# coding=utf-8
"""BERT tokenization: basic cleaning/splitting, then greedy WordPiece.

The output is the same as the original BERT tokenizer's on any text (the rules
are in docs/FORMATS.md section 5); only the speed differs. The speed comes from:

  * Cleaning and splitting a whole text with C-level string methods and
    regular expressions instead of a Python loop over its characters (most
    texts pass str.isprintable(), which proves there is nothing to delete).
  * A bounded cache from each whitespace token (a CJK character or a run of
    other non-space characters) to its final word pieces. Every later step of
    the original algorithm (lower-casing, accent stripping, punctuation
    splitting, WordPiece) works on one whitespace token at a time, so caching
    per token gives exactly the same output. Chinese text is nearly all
    single-character tokens, so after a few texts almost every token is a hit.

This module needs only the standard library (no TensorFlow) and reads vocab
files from local paths.
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

import collections
import itertools
import re
import unicodedata

# Cached whitespace tokens per tokenizer before the cache is emptied. An entry
# is a short string and a tuple of word pieces: well under 1 KB.
_DEFAULT_CACHE_SIZE = 1 << 16

# Released BERT checkpoints by casing, keyed by the directory name of
# `bert_model.ckpt`. The Chinese and the original multilingual models were
# trained on lower-cased text; `multi_cased` keeps case.
_LOWER_CASED_MODELS = frozenset([
    "uncased_L-12_H-768_A-12",
    "uncased_L-24_H-1024_A-16",
    "wwm_uncased_L-24_H-1024_A-16",
    "multilingual_L-12_H-768_A-12",
    "chinese_L-12_H-768_A-12",
])
_CASED_MODELS = frozenset([
    "cased_L-12_H-768_A-12",
    "cased_L-24_H-1024_A-16",
    "wwm_cased_L-24_H-1024_A-16",
    "multi_cased_L-12_H-768_A-12",
])

# Code point ranges (inclusive) whose characters become one token each.
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def is_cjk_character(char):
  """Whether `char` (one character) is a CJK ideograph, which BERT makes a token of its own."""
  code_point = ord(char)
  return any(low <= code_point <= high for low, high in _CJK_RANGES)


# ASCII characters that are punctuation for BERT although some are symbols (S*)
# in Unicode: 33-47, 58-64, 91-96 and 123-126.
_ASCII_PUNCTUATION = frozenset(
    chr(cp) for cp in itertools.chain(
        range(33, 48), range(58, 65), range(91, 97), range(123, 127)))


def _char_class(ranges):
  """Returns a regex character class body matching the inclusive `ranges`."""
  parts = []
  for first, last in ranges:
    if first == last:
      parts.append("\\U%08x" % first)
    else:
      parts.append("\\U%08x-\\U%08x" % (first, last))
  return "".join(parts)


def _code_points_to_ranges(code_points):
  """Merges sorted code points into a list of inclusive (first, last) ranges."""
  ranges = []
  for cp in code_points:
    if ranges and ranges[-1][1] == cp - 1:
      ranges[-1] = (ranges[-1][0], cp)
    else:
      ranges.append((cp, cp))
  return ranges


_CJK_CLASS = _char_class(_CJK_RANGES)
# A whitespace token: one CJK character, or a run of characters that are
# neither whitespace (as str.split() sees it) nor CJK. Python's `\s` and
# str.split() use the same whitespace test.
_TOKEN_RE = re.compile(u"[%s]|[^\\s%s]+" % (_CJK_CLASS, _CJK_CLASS))
# An ASCII token split on punctuation: one punctuation character, or a run of
# other characters.
_ASCII_PUNCTUATION_CLASS = "".join(re.escape(c) for c in sorted(_ASCII_PUNCTUATION))
_ASCII_PIECE_RE = re.compile(u"[%s]|[^%s]+" % (_ASCII_PUNCTUATION_CLASS,
                                               _ASCII_PUNCTUATION_CLASS))

# Built on first use (a scan of every code point takes ~0.2 s): matches the
# characters cleaning deletes.
_deleted_chars_re = None


def _get_deleted_chars_re():
  """Returns a regex matching U+0000, U+FFFD and Cc/Cf characters but \\t \\n \\r.

  The set comes from the running Python's unicodedata, the same database the
  per-character rules consult, so both agree on every Unicode version.
  """
  global _deleted_chars_re
  if _deleted_chars_re is None:
    control_categories = frozenset(["Cc", "Cf"])
    categories = map(unicodedata.category, map(chr, range(0x110000)))
    code_points = set(itertools.compress(
        range(0x110000), map(control_categories.__contains__, categories)))
    code_points.difference_update([ord("\t"), ord("\n"), ord("\r")])
    code_points.update([0, 0xFFFD])
    ranges = _code_points_to_ranges(sorted(code_points))
    _deleted_chars_re = re.compile(u"[%s]+" % _char_class(ranges))
  return _deleted_chars_re


def validate_case_matches_checkpoint(do_lower_case, init_checkpoint):
  """Checks that do_lower_case matches the casing of a released checkpoint.

  The casing is not stored in bert_config.json, so it is inferred from the
  directory name of `.../<model_name>/bert_model.ckpt`. Unknown names pass.

  Args:
    do_lower_case: bool, the --do_lower_case flag.
    init_checkpoint: str or None, the --init_checkpoint flag.

  Raises:
    ValueError: the checkpoint is a known release of the other casing.
  """
  if not init_checkpoint:
    return
  match = re.match(r"^.*?([A-Za-z0-9_-]+)/bert_model.ckpt", init_checkpoint)
  if match is None:
    return
  model_name = match.group(1)
  if model_name in _LOWER_CASED_MODELS and not do_lower_case:
    given, casing, wanted = "False", "lower-cased (uncased)", "True"
  elif model_name in _CASED_MODELS and do_lower_case:
    given, casing, wanted = "True", "cased", "False"
  else:
    return
  raise ValueError(
      "--do_lower_case=%s does not match --init_checkpoint=%s: `%s` is a %s "
      "model, so pass --do_lower_case=%s to tokenize text the way it was "
      "pre-trained." % (given, init_checkpoint, model_name, casing, wanted))


def convert_to_unicode(text):
  """Returns `text` as str; bytes are decoded as UTF-8 (invalid bytes dropped).

  Args:
    text: str or bytes.

  Returns:
    str.

  Raises:
    ValueError: `text` is neither str nor bytes.
  """
  if isinstance(text, str):
    return text
  if isinstance(text, bytes):
    # Like the original: bad bytes in a corpus are skipped, not fatal.
    return text.decode("utf-8", "ignore")
  raise ValueError("Unsupported string type: %s (expected str or bytes)" %
                   type(text))


def printable_text(text):
  """Returns `text` as a str suitable for print() and logging."""
  return convert_to_unicode(text)


def load_vocab(vocab_file):
  """Loads a vocab file: one token per line, id = 0-based line number.

  Lines are split on "\\n" only and each token is the line with surrounding
  whitespace stripped, as the original loader did. A token that appears twice
  keeps its first position in the dict and its last line number as id. A UTF-8
  byte order mark before the first token is dropped (the original kept it, so
  the first token was never matched).

  Args:
    vocab_file: path of a UTF-8 text file.

  Returns:
    collections.OrderedDict mapping token (str) to id (int).

  Raises:
    ValueError: the file cannot be read, is UTF-16/UTF-32 (with a byte order
      mark), or a line is not valid UTF-8 or holds a carriage return inside it
      (CR-only line ends would make the whole file one token).
  """
  try:
    with open(vocab_file, "rb") as reader:
      data = reader.read()
  except (IOError, OSError) as e:
    raise ValueError("Cannot read vocab file %s: %s. Check the --vocab_file "
                     "flag (vocab.txt of the checkpoint)." % (vocab_file, e))
  for bom, encoding in ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
                        (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16")):
    if data.startswith(bom):
      raise ValueError(
          "Vocab file %s is %s (it starts with the %s byte order mark). The "
          "vocab file must be UTF-8 text with one token per line; convert it "
          "(e.g. `iconv -f %s -t UTF-8`)." % (vocab_file, encoding, encoding,
                                              encoding))
  if data.startswith(b"\xef\xbb\xbf"):
    data = data[3:]
  lines = data.split(b"\n")
  if lines and not lines[-1]:
    lines.pop()  # The newline that ends the last line does not start a line.
  vocab = collections.OrderedDict()
  for index, line in enumerate(lines):
    try:
      token = line.decode("utf-8")
    except UnicodeDecodeError as e:
      raise ValueError(
          "Vocab file %s, line %d: bytes %r are not valid UTF-8 (%s). The vocab "
          "file must be UTF-8 text with one token per line." %
          (vocab_file, index + 1, line[max(0, e.start - 8):e.end + 8], e.reason))
    token = token.strip()
    if "\r" in token:
      raise ValueError(
          "Vocab file %s, line %d: the token %r holds a carriage return: the "
          "file has CR-only line ends (so it would be one token). Save it with "
          "\\n line ends, one token per line." % (vocab_file, index + 1, token[:40]))
    vocab[token] = index
  return vocab


# The special tokens every BERT input needs ([MASK] too for pretraining).
SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[UNK]")
# The special tokens that FullTokenizer(literal_special_tokens=True) reads as one token
# when they are written in the text (those of them that the vocab has).
LITERAL_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def missing_special_token(vocab, tokens=SPECIAL_TOKENS):
  """The first of `tokens` that `vocab` (dict token -> id) lacks, or None.

  Callers name their vocab file in the error: a vocab without [CLS] is not a BERT vocab.
  """
  for token in tokens:
    if token not in vocab:
      return token
  return None


class VocabLookupError(KeyError):
  """A token (or id) that is not in the vocab; a KeyError, as in the original."""

  def __str__(self):
    return str(self.args[0]) if self.args else ""


def convert_by_vocab(vocab, items):
  """Maps each item through `vocab` (token->id or id->token).

  Args:
    vocab: dict.
    items: iterable of keys of `vocab`.

  Returns:
    list of the mapped values.

  Raises:
    VocabLookupError (a KeyError): an item is not in `vocab`; names the item.
  """
  items = list(items)
  try:
    return [vocab[item] for item in items]
  except KeyError:
    pass
  for position, item in enumerate(items):
    if item not in vocab:
      raise VocabLookupError(
          "%r (item %d of the input) is not in the vocab of %d entries. Tokens "
          "should come from the tokenizer built with the same vocab file." %
          (item, position, len(vocab)))
  raise AssertionError("unreachable")


def convert_tokens_to_ids(vocab, tokens):
  """Returns the ids of `tokens` in `vocab` (token -> id)."""
  return convert_by_vocab(vocab, tokens)


def convert_ids_to_tokens(inv_vocab, ids):
  """Returns the tokens of `ids` in `inv_vocab` (id -> token)."""
  return convert_by_vocab(inv_vocab, ids)


def whitespace_tokenize(text):
  """Strips `text` and splits it on whitespace (str.split())."""
  return text.split()


def _split_into_whitespace_tokens(text):
  """Cleans `text` and splits it into whitespace tokens with CJK chars apart.

  Equivalent to the original steps: delete U+0000, U+FFFD and control
  characters, map whitespace to spaces, put spaces around CJK characters and
  split on whitespace.

  Args:
    text: str.

  Returns:
    list of str, each a single CJK character or a run of non-space characters.
  """
  if text.isprintable():
    # No Cc/Cf characters (nor any whitespace but " "): only U+FFFD can go.
    if u"\ufffd" in text:
      text = text.replace(u"\ufffd", "")
  else:
    text = _get_deleted_chars_re().sub("", text)
  if text.isascii():
    return text.split()
  return _TOKEN_RE.findall(text)


def _strip_accents(text):
  """NFD-normalizes `text` and drops the non-spacing marks (category Mn)."""
  text = unicodedata.normalize("NFD", text)
  if text.isascii():
    return text
  category = unicodedata.category
  return "".join([char for char in text if category(char) != "Mn"])


def _is_punctuation(char):
  """Whether `char` is punctuation for BERT: ASCII 33-47, 58-64, 91-96, 123-126 or P*."""
  return char in _ASCII_PUNCTUATION or unicodedata.category(char).startswith("P")


def _split_on_punctuation(text):
  """Splits `text` into runs of non-punctuation and single punctuation chars."""
  if text.isascii():
    return _ASCII_PIECE_RE.findall(text)
  pieces = []
  run_start = 0
  for i, char in enumerate(text):
    if _is_punctuation(char):
      if run_start < i:
        pieces.append(text[run_start:i])
      pieces.append(char)
      run_start = i + 1
  if run_start < len(text):
    pieces.append(text[run_start:])
  return pieces


def _bounded_cache_put(cache, limit, key, value):
  """Stores key->value in `cache`, first emptying it if it holds `limit` entries."""
  if len(cache) >= limit:
    cache.clear()
  cache[key] = value


class BasicTokenizer(object):
  """Cleans text and splits it on whitespace, punctuation and CJK characters.

  With do_lower_case, tokens are also lower-cased and stripped of accents.
  """

  def __init__(self, do_lower_case=True):
    """Constructs a BasicTokenizer.

    Args:
      do_lower_case: bool, whether to lower-case and strip accents.
    """
    self._do_lower_case = bool(do_lower_case)
    self.version = 0  # Changes whenever a setting changes (for callers' caches).
    self._cache = {}
    self.cache_size = _DEFAULT_CACHE_SIZE

  @property
  def do_lower_case(self):
    return self._do_lower_case

  @do_lower_case.setter
  def do_lower_case(self, value):
    self._do_lower_case = bool(value)
    self.version += 1
    self._cache.clear()

  def tokenize_whitespace_token(self, token):
    """Returns the basic tokens (a tuple of str) of one whitespace token.

    Args:
      token: str without whitespace, a single CJK character or containing none.
    """
    if self._do_lower_case:
      # Lower-case the whole token, punctuation included: final sigma and
      # dotted capital I depend on their neighbours.
      token = _strip_accents(token.lower())
    pieces = _split_on_punctuation(token)
    if token.isascii():
      return tuple(pieces)
    # Lower-casing or NFD could in principle produce whitespace; re-split as
    # the original does when it joins and splits the pieces again.
    return tuple(" ".join(pieces).split())

  def tokenize(self, text):
    """Tokenizes `text` (str or UTF-8 bytes) into a list of basic tokens."""
    text = convert_to_unicode(text)
    return _tokenize_through_cache(text, self._cache, self.cache_size,
                                   self.tokenize_whitespace_token)


def _tokenize_through_cache(text, cache, cache_size, tokenize_token):
  """Splits `text` on whitespace and maps each token through `cache`.

  Args:
    text: str.
    cache: dict whitespace token -> tuple of output tokens.
    cache_size: the most entries `cache` may hold.
    tokenize_token: function(token) -> tuple, called on a cache miss.

  Returns:
    The list of output tokens.
  """
  tokens = _split_into_whitespace_tokens(text)
  try:
    # All hits, the usual case for short Chinese texts: one comprehension.
    return [piece for token in tokens for piece in cache[token]]
  except KeyError:
    pass
  output = []
  for token in tokens:
    pieces = cache.get(token)
    if pieces is None:
      pieces = tokenize_token(token)
      _bounded_cache_put(cache, cache_size, token, pieces)
    output.extend(pieces)
  return output


def _cache_resetting_property(attribute, doc):
  """A property stored in `attribute` whose setter calls self._settings_changed().

  Changing a setting then empties the owner's cache, so no stale result survives it.
  """
  def getter(self):
    return getattr(self, attribute)

  def setter(self, value):
    setattr(self, attribute, value)
    self._settings_changed()  # pylint: disable=protected-access

  return property(getter, setter, doc=doc)


class WordpieceTokenizer(object):
  """Splits words into word pieces by greedy longest match against a vocab."""

  def __init__(self, vocab, unk_token="[UNK]", max_input_chars_per_word=200):
    """Constructs a WordpieceTokenizer.

    Args:
      vocab: dict (or set-like) whose keys are the vocab tokens.
      unk_token: str, emitted for a word that cannot be split into vocab
        pieces or is longer than `max_input_chars_per_word`.
      max_input_chars_per_word: int, longest word (in code points) to split.
    """
    self._vocab = vocab
    self._unk_token = unk_token
    self._max_input_chars_per_word = max_input_chars_per_word
    self.version = 0  # Changes whenever a setting changes (for callers' caches).
    self._cache = {}
    self.cache_size = _DEFAULT_CACHE_SIZE
    self._snapshot_vocab_size = -1
    self._longest_token = 0
    self._check_vocab()

  def _settings_changed(self):
    self.version += 1
    self._cache.clear()
    self._snapshot_vocab_size = -1
    self._check_vocab()

  vocab = _cache_resetting_property("_vocab", "dict whose keys are the vocab tokens.")
  unk_token = _cache_resetting_property("_unk_token", "token for unsplittable words.")
  max_input_chars_per_word = _cache_resetting_property(
      "_max_input_chars_per_word", "longest word (in code points) to split.")

  def _check_vocab(self):
    """Empties the cache if tokens were added to or removed from the vocab.

    Returns:
      bool, whether the cache was emptied.
    """
    if len(self._vocab) == self._snapshot_vocab_size:
      return False
    self._snapshot_vocab_size = len(self._vocab)
    self._longest_token = max([len(token) for token in self._vocab] or [0])
    self._cache.clear()
    self.version += 1
    return True

  def tokenize_word(self, word):
    """Returns the word pieces (a tuple of str) of one word without whitespace."""
    length = len(word)
    if length > self._max_input_chars_per_word:
      return (self._unk_token,)
    vocab = self._vocab
    longest = self._longest_token
    pieces = []
    start = 0
    while start < length:
      # No vocab token is longer than `longest`, so longer candidates can't match.
      end = min(length, start + longest)
      piece = None
      while start < end:
        candidate = word[start:end] if start == 0 else "##" + word[start:end]
        if candidate in vocab:
          piece = candidate
          break
        end -= 1
      if piece is None:
        return (self._unk_token,)
      pieces.append(piece)
      start = end
    return tuple(pieces)

  def tokenize(self, text):
    """Splits `text` on whitespace and each word into word pieces.

    Args:
      text: str or UTF-8 bytes, normally the output of BasicTokenizer.

    Returns:
      list of word pieces (str); continuation pieces start with "##".
    """
    text = convert_to_unicode(text)
    self._check_vocab()
    cache = self._cache
    output = []
    for word in text.split():
      pieces = cache.get(word)
      if pieces is None:
        pieces = self.tokenize_word(word)
        _bounded_cache_put(cache, self.cache_size, word, pieces)
      output.extend(pieces)
    return output


class FullTokenizer(object):
  """Runs end-to-end tokenization: BasicTokenizer, then WordpieceTokenizer."""

  def __init__(self, vocab_file, do_lower_case=True, literal_special_tokens=False):
    """Constructs a FullTokenizer.

    Args:
      vocab_file: path of the vocab file (one token per line).
      do_lower_case: bool, must match how the checkpoint was pre-trained.
      literal_special_tokens: bool; True reads the vocab's special tokens
        (LITERAL_SPECIAL_TOKENS: [MASK], [SEP], [UNK], ...) written in the text as
        single tokens, matched case-sensitively before lower-casing, also inside a
        word ("天[MASK]好" gives 天 [MASK] 好; the text on each side is tokenized on
        its own). False (Google's behaviour) splits them like any text.
    """
    self.literal_special_tokens = literal_special_tokens
    self.vocab = load_vocab(vocab_file)
    self.inv_vocab = {index: token for token, index in self.vocab.items()}
    self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
    self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)
    # Whitespace token -> tuple of final word pieces, valid for `_cache_state`.
    self._cache = {}
    self.cache_size = _DEFAULT_CACHE_SIZE
    self._cache_state = None

  def _special_token_spans(self, text):
    """Cuts `text` at its literal special tokens (see literal_special_tokens).

    Returns:
      list of (start, end, is_special): text[start:end] is a special token, or the
      text between two of them (never empty).
    """
    specials = [token for token in LITERAL_SPECIAL_TOKENS if token in self.vocab]
    spans = []
    position = 0
    if specials:
      for match in re.finditer("|".join(re.escape(token) for token in specials), text):
        if match.start() > position:
          spans.append((position, match.start(), False))
        spans.append((match.start(), match.end(), True))
        position = match.end()
    if position < len(text):
      spans.append((position, len(text), False))
    return spans

  def tokenize(self, text):
    """Tokenizes `text` (str or UTF-8 bytes) into a list of word pieces."""
    if not isinstance(text, str):
      text = convert_to_unicode(text)
    if not self.literal_special_tokens:
      return self._tokenize_text(text)
    pieces = []
    for start, end, is_special in self._special_token_spans(text):
      if is_special:
        pieces.append(text[start:end])
      else:
        pieces.extend(self._tokenize_text(text[start:end]))
    return pieces

  def _tokenize_text(self, text):
    """tokenize() of a str, special tokens written in it split like any text."""
    basic = self.basic_tokenizer
    wordpiece = self.wordpiece_tokenizer
    wordpiece._check_vocab()  # pylint: disable=protected-access
    state = (basic, basic.version, wordpiece, wordpiece.version)
    if state != self._cache_state:
      # A sub-tokenizer, one of its settings or the vocab changed since the
      # cache was filled.
      self._cache.clear()
      self._cache_state = state

    def word_pieces(token):
      return tuple(piece for word in basic.tokenize_whitespace_token(token)
                   for piece in wordpiece.tokenize_word(word))

    return _tokenize_through_cache(text, self._cache, self.cache_size, word_pieces)

  def tokenize_with_offsets(self, text):
    """Tokenizes `text` and says which characters of it each word piece came from.

    The pieces are those of tokenize(text). Offsets index the original `text`, before
    cleaning, lower-casing and accent stripping, so text[start:end] is the original
    spelling of a piece (reading comprehension cuts its answers out this way).

    Args:
      text: str.

    Returns:
      (pieces, starts, ends): lists of equal length; piece i came from text[starts[i]:ends[i]].
      A piece that is part of a word ("##..."), covers only its own characters; an [UNK]
      covers the whole word it replaced.
    """
    if not self.literal_special_tokens:
      return self._tokenize_text_with_offsets(text)
    pieces, starts, ends = [], [], []
    for start, end, is_special in self._special_token_spans(text):
      if is_special:
        pieces.append(text[start:end])
        starts.append(start)
        ends.append(end)
        continue
      part_pieces, part_starts, part_ends = self._tokenize_text_with_offsets(text[start:end])
      pieces.extend(part_pieces)
      starts.extend(offset + start for offset in part_starts)
      ends.extend(offset + start for offset in part_ends)
    return pieces, starts, ends

  def _tokenize_text_with_offsets(self, text):
    """tokenize_with_offsets() with special tokens written in the text split like any text."""
    pieces, starts, ends = [], [], []
    for token, owners in _whitespace_tokens_with_owners(text):
      normalized, normalized_owners = self._normalize_with_owners(token, owners)
      for word_start, word_end in _basic_word_spans(normalized):
        word = normalized[word_start:word_end]
        position = word_start
        word_pieces = self.wordpiece_tokenizer.tokenize_word(word)
        for piece in word_pieces:
          if piece == self.wordpiece_tokenizer._unk_token:  # pylint: disable=protected-access
            length = word_end - position
          else:
            length = len(piece) - 2 if piece.startswith("##") and position > word_start \
                else len(piece)
          pieces.append(piece)
          starts.append(normalized_owners[position][0])
          ends.append(normalized_owners[position + length - 1][1])
          position += length
    return pieces, starts, ends

  def _normalize_with_owners(self, token, owners):
    """Lower-cases and strips accents as BasicTokenizer does, keeping each char's origin.

    Args:
      token: a whitespace token (cleaned, no whitespace).
      owners: list of int, the index in the original text of each char of `token`.

    Returns:
      (normalized str, list of (start, end): the span of original text each normalized char
      came from; a letter and the combining marks after it share one span).
    """
    if not self.basic_tokenizer.do_lower_case:
      return token, [(owner, owner + 1) for owner in owners]
    # Lower-case the whole token (final sigma depends on neighbours), then cut it back into
    # each character's share: only the length of a character's lower case can differ.
    lowered = token.lower()
    shares, position = [], 0
    for char in token:
      length = len(char.lower())
      shares.append(lowered[position:position + length])
      position += length
    if position != len(lowered):  # No known case; fall back to one share per character.
      shares = [char.lower() for char in token]
    # NFD reorders combining marks and attaches them to their base, so a base and the
    # marks after it are normalized together and share the base..last-mark span.
    clusters = []  # [text, first owner, last owner]
    for share, owner in zip(shares, owners):
      decomposed = unicodedata.normalize("NFD", share)
      if clusters and decomposed and unicodedata.combining(decomposed[0]):
        clusters[-1][0] += share
        clusters[-1][2] = owner
      else:
        clusters.append([share, owner, owner])
    normalized, normalized_owners = [], []
    for text, first, last in clusters:
      stripped = _strip_accents(text)
      normalized.append(stripped)
      normalized_owners.extend([(first, last + 1)] * len(stripped))
    return "".join(normalized), normalized_owners


  def convert_tokens_to_ids(self, tokens):
    """Returns the vocab ids of `tokens`."""
    return convert_by_vocab(self.vocab, tokens)

  def convert_ids_to_tokens(self, ids):
    """Returns the tokens of vocab `ids`."""
    return convert_by_vocab(self.inv_vocab, ids)


def _whitespace_tokens_with_owners(text):
  """Yields (whitespace token, original index of each of its chars), as the tokenizer splits.

  Deleted characters (control, U+0000, U+FFFD) join their neighbours, as in the original
  cleaning, so a token's characters need not be contiguous in `text`.
  """
  if text.isprintable() and u"\ufffd" not in text:
    kept = None
    cleaned = text
  else:
    deleted = _get_deleted_chars_re()
    kept = [i for i, char in enumerate(text) if not deleted.match(char)]
    cleaned = "".join(text[i] for i in kept)
  for match in _TOKEN_RE.finditer(cleaned):
    start, end = match.span()
    owners = list(range(start, end)) if kept is None else kept[start:end]
    yield match.group(), owners


def _basic_word_spans(normalized):
  """The [start, end) spans of the basic tokens of a normalized whitespace token.

  Punctuation characters stand alone; whitespace that normalization produced splits.
  """
  spans = []
  run_start = None
  for i, char in enumerate(normalized):
    if char.isspace() or _is_punctuation(char):
      if run_start is not None:
        spans.append((run_start, i))
        run_start = None
      if not char.isspace():
        spans.append((i, i + 1))
    elif run_start is None:
      run_start = i
  if run_start is not None:
    spans.append((run_start, len(normalized)))
  return spans
