# coding=utf-8
"""A plain, obviously-correct BERT tokenizer: the oracle for tests and benchmarks.

Written directly from the rules of docs/FORMATS.md section 5, one character at a
time with unicodedata, with no caching or other speed tricks. Splitting on
whitespace uses str.split(), as the original tokenizer does.
"""

import unicodedata


def is_whitespace(char):
  """Space, \\t, \\n, \\r or Unicode category Zs."""
  if char in (" ", "\t", "\n", "\r"):
    return True
  return unicodedata.category(char) == "Zs"


def is_control(char):
  """Category Cc or Cf, except \\t, \\n and \\r (they count as whitespace)."""
  if char in ("\t", "\n", "\r"):
    return False
  return unicodedata.category(char) in ("Cc", "Cf")


def is_punctuation(char):
  """ASCII 33-47, 58-64, 91-96, 123-126, or any category starting with P."""
  cp = ord(char)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(char).startswith("P")


def is_cjk(char):
  """Whether `char` is in one of the CJK ideograph ranges."""
  cp = ord(char)
  return (0x4E00 <= cp <= 0x9FFF or
          0x3400 <= cp <= 0x4DBF or
          0x20000 <= cp <= 0x2A6DF or
          0x2A700 <= cp <= 0x2B73F or
          0x2B740 <= cp <= 0x2B81F or
          0x2B820 <= cp <= 0x2CEAF or
          0xF900 <= cp <= 0xFAFF or
          0x2F800 <= cp <= 0x2FA1F)


def clean_text(text):
  """Drops U+0000, U+FFFD and control characters; whitespace becomes a space."""
  output = []
  for char in text:
    if ord(char) == 0 or ord(char) == 0xFFFD or is_control(char):
      continue
    if is_whitespace(char):
      output.append(" ")
    else:
      output.append(char)
  return "".join(output)


def space_cjk(text):
  """Puts a space on both sides of every CJK character."""
  output = []
  for char in text:
    if is_cjk(char):
      output.append(" " + char + " ")
    else:
      output.append(char)
  return "".join(output)


def strip_accents(text):
  """NFD, then drop characters of category Mn."""
  output = []
  for char in unicodedata.normalize("NFD", text):
    if unicodedata.category(char) != "Mn":
      output.append(char)
  return "".join(output)


def split_on_punctuation(text):
  """Each punctuation character becomes its own piece; other runs stay whole."""
  pieces = []
  current = []
  for char in text:
    if is_punctuation(char):
      if current:
        pieces.append("".join(current))
        current = []
      pieces.append(char)
    else:
      current.append(char)
  if current:
    pieces.append("".join(current))
  return pieces


def basic_tokenize(text, do_lower_case):
  """Clean, space CJK, split on whitespace, (lower + strip accents), split punctuation."""
  text = space_cjk(clean_text(text))
  pieces = []
  for token in text.split():
    if do_lower_case:
      token = token.lower()  # The whole token: str.lower() is context-sensitive.
      token = strip_accents(token)
    pieces.extend(split_on_punctuation(token))
  return " ".join(pieces).split()


def wordpiece_tokenize(text, vocab, unk_token="[UNK]", max_input_chars_per_word=200):
  """Greedy longest-match-first WordPiece of each whitespace-separated word."""
  output = []
  for word in text.split():
    chars = list(word)
    if len(chars) > max_input_chars_per_word:
      output.append(unk_token)
      continue
    pieces = []
    start = 0
    failed = False
    while start < len(chars):
      end = len(chars)
      match = None
      while end > start:
        candidate = "".join(chars[start:end])
        if start > 0:
          candidate = "##" + candidate
        if candidate in vocab:
          match = candidate
          break
        end -= 1
      if match is None:
        failed = True
        break
      pieces.append(match)
      start = end
    if failed:
      output.append(unk_token)
    else:
      output.extend(pieces)
  return output


def full_tokenize(text, vocab, do_lower_case, unk_token="[UNK]",
                  max_input_chars_per_word=200):
  """basic_tokenize, then wordpiece_tokenize of every basic token."""
  output = []
  for token in basic_tokenize(text, do_lower_case):
    output.extend(wordpiece_tokenize(token, vocab, unk_token, max_input_chars_per_word))
  return output


class ReferenceFullTokenizer(object):
  """The reference pipeline behind a FullTokenizer-like interface."""

  def __init__(self, vocab, do_lower_case=True):
    """vocab: dict token -> id (or any container of tokens)."""
    self.vocab = vocab
    self.do_lower_case = do_lower_case

  def tokenize(self, text):
    return full_tokenize(text, self.vocab, self.do_lower_case)
