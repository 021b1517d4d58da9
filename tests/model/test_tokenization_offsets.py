# coding=utf-8
"""Tests of FullTokenizer.tokenize_with_offsets and its module helpers.

The oracles are independent of the code under test: tokenize() and the plain
reference tokenizer (tests/helpers/reference_tokenizer.py) for the pieces, and for the
offsets a re-normalization of each cut `text[start:end]` written here from the
rules of docs/FORMATS.md section 5.
"""

import random
import unicodedata

import pytest

import reference_tokenizer
import tokenization

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# Pieces for the fuzz: letters a-m (and A-F for the cased runs) split into
# single-letter pieces, so "##" pieces are common; n-z have no piece, so their
# words become [UNK]. Some whole words and pieces in other scripts too.
FUZZ_VOCAB = SPECIAL_TOKENS + (
    [chr(c) for c in range(ord("a"), ord("n"))] +
    ["##" + chr(c) for c in range(ord("a"), ord("n"))] +
    [chr(c) for c in range(ord("A"), ord("G"))] +
    ["##" + chr(c) for c in range(ord("A"), ord("G"))] +
    [u"cafe", u"café", u"Café", u"##e", u"he", u"##llo", u"hello", u"mu", u"##ller",
     u"σ", u"##σ", u"##ς", u"ο", u"##δ", u"οδος", u"ς", u"i", u"##i", u"İ", u"k", u"å",
     u"中", u"文", u"我", u"\u8c48", u"\U00020000",  # not 北, 京, \uf900: [UNK]
     u"!", u"！", u"，", u"。", u".", u"`", u";", u"1", u"##2", u"12",
     u"ᄒ", u"##ᅡ", u"##ᆫ", u"한", u"😀", u"ß", u"\ufb01"])

# Building blocks of the fuzz strings (several are more than one character).
FUZZ_ATOMS = (
    list(u"abcdefghijklmnopqrstuvwxyzABCDEFGHXYZ0123456789") +
    list(u"!.,;:'\"()-_$`~#") +                                      # ASCII punctuation
    [u" ", u"  ", u"\t", u"\n", u"\r", u"\u3000", u"\u00a0"] +       # whitespace
    list(u"中文我北京\U00020000\uf900") +                             # CJK (ext B, compat)
    list(u"éÉüÜñÅåÇ") + [u"e\u0301", u"u\u0308", u"Cafe\u0301"] +   # accented Latin
    [u"\u0301", u"\u0308", u"\u0327"] +                               # lone combining marks
    list(u"ΣσςΟΔοδα") + [u"ΟΔΟΣ", u"ΟΔΟΣ ", u"ΟΔΟΣ.", u"Σ"] +         # Greek, final sigma
    [u"İ", u"İstanbul", u"ı", u"\u212a", u"\u212b", u"ß", u"\ufb01"] +
    [u"\x00", u"\x07", u"\x1f", u"\x7f", u"\x85", u"\u200b", u"\u200d", u"\ufeff",
     u"\u00ad", u"\ufffd"] +                                          # deleted characters
    list(u"！，。（）：“”《》、ＡｂＣ１") +                             # full-width
    [u"\u1fef", u"\u037e", u"\u0387"] +         # NFD turns these into punctuation
    [u"😀", u"👍", u"\U0001f3fd", u"👨\u200d👩"] +                    # emoji
    list(u"한국") + [u"Café", u"Müller", u"hello", u"iPhone"])


def write_vocab(tmp_path, tokens):
  """Writes `tokens` one per line and returns the file's path."""
  path = str(tmp_path / "vocab.txt")
  with open(path, "w", encoding="utf-8", newline="\n") as f:
    f.write("".join(token + "\n" for token in tokens))
  return path


def make_tokenizer(tmp_path, tokens, do_lower_case=True):
  return tokenization.FullTokenizer(write_vocab(tmp_path, tokens), do_lower_case)


def random_text(rng, max_atoms=25):
  return u"".join(rng.choice(FUZZ_ATOMS) for _ in range(rng.randint(0, max_atoms)))


def is_deleted(char):
  """Characters cleaning removes: U+0000, U+FFFD, Cc/Cf except \\t \\n \\r."""
  return ord(char) in (0, 0xFFFD) or reference_tokenizer.is_control(char)


def fold_sigma(text):
  """Final and medial sigma are one letter: a cut piece lower-cases without its
  neighbours, so "Σ" may become either."""
  return text.replace(u"ς", u"σ")


def normalize_cut(cut, do_lower_case):
  """What the tokenizer makes of an original substring: clean, then lower + NFD +
  drop Mn when lower-casing."""
  cut = u"".join(char for char in cut if not is_deleted(char))
  if do_lower_case:
    cut = unicodedata.normalize("NFD", cut.lower())
    cut = u"".join(char for char in cut if unicodedata.category(char) != "Mn")
  return fold_sigma(cut)


def piece_text(piece):
  """A piece without its continuation marker ("#" is punctuation, so a word never
  contains it: a leading "##" is always the marker)."""
  return fold_sigma(piece[2:] if piece.startswith(u"##") else piece)


def check_offsets(text, pieces, starts, ends, vocab, do_lower_case):
  """Asserts every property the offsets must have; returns nothing."""
  assert len(pieces) == len(starts) == len(ends)
  # 1. Each span is a non-empty range of the text with no whitespace in it.
  for piece, start, end in zip(pieces, starts, ends):
    assert 0 <= start < end <= len(text), (piece, start, end)
    kept = [c for c in text[start:end] if not is_deleted(c)]
    assert not any(c.isspace() for c in kept), (piece, text[start:end])
    assert not is_deleted(text[start]) and not is_deleted(text[end - 1]), (piece, start, end)
  # 2. Increasing; two pieces overlap only inside one original character that
  #    normalizes to several characters (a Hangul syllable becomes 2-3 jamo),
  #    possibly with combining marks after it.
  for i in range(1, len(pieces)):
    assert starts[i] >= starts[i - 1] and ends[i] >= ends[i - 1], (pieces[i - 1:i + 1],)
    if starts[i] < ends[i - 1]:
      shared = text[starts[i]:ends[i - 1]]
      assert all(unicodedata.category(c) == "Mn" or is_deleted(c) for c in shared[1:]), (
          pieces[i - 1:i + 1], starts, ends)
  # 3. Each non-[UNK] piece is its cut, normalized; a piece that shares its first
  #    (last) original character with a neighbour holds only a part of it.
  for i, (piece, start, end) in enumerate(zip(pieces, starts, ends)):
    if piece == u"[UNK]":
      continue
    normalized = normalize_cut(text[start:end], do_lower_case)
    expected = piece_text(piece)
    shares_first = i > 0 and ends[i - 1] > start
    shares_last = i + 1 < len(pieces) and starts[i + 1] < end
    assert expected in normalized, (piece, text[start:end], normalized)
    if not shares_first:
      assert normalized.startswith(expected), (piece, text[start:end], normalized)
    if not shares_last:
      assert normalized.endswith(expected), (piece, text[start:end], normalized)
  # 4. Per basic word (from the reference tokenizer): its pieces together cover
  #    exactly that word; an [UNK] covers the whole word.
  position = 0
  for word in reference_tokenizer.basic_tokenize(text, do_lower_case):
    word_pieces = reference_tokenizer.wordpiece_tokenize(word, vocab)
    count = len(word_pieces)
    assert pieces[position:position + count] == word_pieces
    first, last = position, position + count - 1
    assert normalize_cut(text[starts[first]:ends[last]], do_lower_case) == fold_sigma(word), (
        word, text[starts[first]:ends[last]])
    if word_pieces != [u"[UNK]"]:
      assert u"".join(piece_text(p) for p in word_pieces) == fold_sigma(word)
    position += count
  assert position == len(pieces)
  # 5. Every original character that normalizes to something is covered.
  for index, char in enumerate(text):
    if not is_deleted(char) and not char.isspace() and normalize_cut(char, do_lower_case):
      assert any(s <= index < e for s, e in zip(starts, ends)), (index, char, text)
  # 6. A CJK character's piece spans exactly that character, and no other piece
  #    touches it.
  for index, char in enumerate(text):
    if reference_tokenizer.is_cjk(char):
      covering = [(s, e) for s, e in zip(starts, ends) if s <= index < e]
      assert covering == [(index, index + 1)], (char, covering)


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_fuzz_pieces_match_tokenize_and_reference_and_offsets_hold(tmp_path, do_lower_case):
  tokenizer = make_tokenizer(tmp_path, FUZZ_VOCAB, do_lower_case)
  rng = random.Random(20240517 + int(do_lower_case))
  seen_unk = seen_continuation = seen_shared = 0
  for _ in range(2500):
    text = random_text(rng)
    pieces, starts, ends = tokenizer.tokenize_with_offsets(text)
    assert pieces == tokenizer.tokenize(text), repr(text)
    assert pieces == reference_tokenizer.full_tokenize(text, tokenizer.vocab, do_lower_case), \
        repr(text)
    check_offsets(text, pieces, starts, ends, tokenizer.vocab, do_lower_case)
    seen_unk += pieces.count(u"[UNK]")
    seen_continuation += sum(1 for p in pieces if p.startswith(u"##"))
    seen_shared += sum(1 for i in range(1, len(pieces)) if starts[i] < ends[i - 1])
  # The fuzz really exercised [UNK], "##" pieces and shared characters.
  assert seen_unk > 500 and seen_continuation > 150
  if do_lower_case:
    assert seen_shared > 20


def test_check_offsets_catches_wrong_spans(tmp_path):
  """The oracle above can fail: a shifted or widened span is rejected."""
  tokenizer = make_tokenizer(tmp_path, FUZZ_VOCAB, True)
  text = u"Café 中文 hello"
  pieces, starts, ends = tokenizer.tokenize_with_offsets(text)
  check_offsets(text, pieces, starts, ends, tokenizer.vocab, True)
  for index in range(len(pieces)):
    for shifted_starts, shifted_ends in (
        (starts[:index] + [starts[index] + 1] + starts[index + 1:], ends),
        (starts, ends[:index] + [ends[index] + 1] + ends[index + 1:])):
      with pytest.raises(AssertionError):
        check_offsets(text, pieces, shifted_starts, shifted_ends, tokenizer.vocab, True)


# Hand-computed: (text, do_lower_case, [(piece, start, end), ...]).
HAND_CHECKED = [
    (u"Café Müller", True, [(u"cafe", 0, 4), (u"mu", 5, 7), (u"##ller", 7, 11)]),
    (u"Café Müller", False, [(u"Café", 0, 4), (u"[UNK]", 5, 11)]),
    (u"我爱iPhone！", True,
     [(u"我", 0, 1), (u"[UNK]", 1, 2), (u"ip", 2, 4), (u"##hone", 4, 8), (u"！", 8, 9)]),
    (u"  \x07中\ufffd文\x00 ", True, [(u"中", 3, 4), (u"文", 5, 6)]),
    (u"he\x00llo", True, [(u"he", 0, 2), (u"##llo", 3, 6)]),   # deleted char inside a word
    (u"he\u200bllo!", True, [(u"he", 0, 2), (u"##llo", 3, 6), (u"!", 6, 7)]),
    (u"ΟΔΟΣ", True, [(u"οδος", 0, 4)]),
    (u"ΟΔΟΣ.", True, [(u"οδος", 0, 4), (u".", 4, 5)]),
    (u"İstanbul", True, [(u"i", 0, 1), (u"##stanbul", 1, 8)]),
    (u"abz abc", True, [(u"[UNK]", 0, 3), (u"ab", 4, 6), (u"##c", 6, 7)]),
    (u"a\u1fefb", True, [(u"a", 0, 1), (u"`", 1, 2), (u"[UNK]", 2, 3)]),
    (u"한", True, [(u"ᄒ", 0, 1), (u"##ᅡ", 0, 1), (u"##ᆫ", 0, 1)]),
    (u"x\uf900y", True, [(u"x", 0, 1), (u"\u8c48", 1, 2), (u"[UNK]", 2, 3)]),
    (u"", True, []),
    (u" \t\n\u3000\x00\ufffd", True, []),
    (u"\u0301\u0301", True, []),    # lone marks vanish when lower-casing
]
HAND_VOCAB = SPECIAL_TOKENS + [
    u"cafe", u"Café", u"mu", u"##ller", u"我", u"ip", u"##hone", u"！", u"中", u"文",
    u"he", u"##llo", u"!", u"οδος", u".", u"i", u"##stanbul", u"ab", u"##c", u"a", u"`",
    u"ᄒ", u"##ᅡ", u"##ᆫ", u"x", u"\u8c48"]


@pytest.mark.parametrize("text,do_lower_case,expected", HAND_CHECKED)
def test_hand_checked_offsets(tmp_path, text, do_lower_case, expected):
  tokenizer = make_tokenizer(tmp_path, HAND_VOCAB, do_lower_case)
  pieces, starts, ends = tokenizer.tokenize_with_offsets(text)
  assert list(zip(pieces, starts, ends)) == expected
  assert pieces == tokenizer.tokenize(text)


def test_long_word_is_one_unk_over_the_whole_word(tmp_path):
  tokenizer = make_tokenizer(tmp_path, SPECIAL_TOKENS + [u"a", u"##a", u"中"], True)
  text = u"中 " + u"a" * 201 + u" aaa"
  pieces, starts, ends = tokenizer.tokenize_with_offsets(text)
  assert pieces == tokenizer.tokenize(text)
  assert list(zip(pieces, starts, ends)) == [
      (u"中", 0, 1), (u"[UNK]", 2, 203), (u"a", 204, 205), (u"##a", 205, 206),
      (u"##a", 206, 207)]


def test_offsets_do_not_depend_on_the_tokenize_cache(tmp_path):
  tokenizer = make_tokenizer(tmp_path, FUZZ_VOCAB, True)
  text = u"Café ΟΔΟΣ 中文 hello"
  first = tokenizer.tokenize_with_offsets(text)
  tokenizer.tokenize(text)
  assert tokenizer.tokenize_with_offsets(text) == first
  tokenizer.basic_tokenizer.do_lower_case = False
  pieces, _, _ = tokenizer.tokenize_with_offsets(text)
  assert pieces == reference_tokenizer.full_tokenize(text, tokenizer.vocab, False)


def test_decomposed_accent_stays_with_its_letter(tmp_path):
  """An answer typed with a combining accent ("e" + U+0301, as macOS and many
  Vietnamese texts store it) must be cut out whole: the span of the word's last
  piece has to reach past the mark that lower-casing drops."""
  tokenizer = make_tokenizer(tmp_path, SPECIAL_TOKENS + [u"cafe", u"mu", u"##ller"], True)
  text = u"Cafe\u0301 Mu\u0308ller"
  pieces, starts, ends = tokenizer.tokenize_with_offsets(text)
  assert pieces == [u"cafe", u"mu", u"##ller"]
  assert text[starts[0]:ends[0]] == u"Cafe\u0301"
  assert text[starts[1]:ends[2]] == u"Mu\u0308ller"


def test_reordered_combining_marks_match_tokenize(tmp_path):
  """NFD reorders combining marks by combining class across characters. U+1D165
  and U+1D16D are spacing marks (Mc, classes 216 and 226), so lower-casing keeps
  them and NFD of the whole token swaps them; the pieces must still be tokenize()'s."""
  vocab = SPECIAL_TOKENS + [u"x", u"##\U0001d165", u"##\U0001d16d"]
  tokenizer = make_tokenizer(tmp_path, vocab, True)
  text = u"x\U0001d16d\U0001d165"
  pieces, _, _ = tokenizer.tokenize_with_offsets(text)
  assert pieces == tokenizer.tokenize(text) == [u"x", u"##\U0001d165", u"##\U0001d16d"]


# ---------------------------------------------------------------------------
# Module helpers
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [1, 2, 3])
def test_whitespace_tokens_with_owners_fuzz(seed):
  """Tokens are those of clean + space CJK + split; each owner holds that char."""
  rng = random.Random(seed)
  for _ in range(500):
    text = random_text(rng)
    pairs = list(tokenization._whitespace_tokens_with_owners(text))  # pylint: disable=protected-access
    expected = reference_tokenizer.space_cjk(reference_tokenizer.clean_text(text)).split()
    assert [token for token, _ in pairs] == expected, repr(text)
    all_owners = []
    for token, owners in pairs:
      assert len(owners) == len(token)
      assert u"".join(text[i] for i in owners) == token
      # Only deleted characters may sit between a token's characters.
      for a, b in zip(owners, owners[1:]):
        assert all(is_deleted(c) for c in text[a + 1:b]), repr(text[a:b + 1])
      all_owners.extend(owners)
    assert all_owners == sorted(set(all_owners))


def test_whitespace_tokens_with_owners_hand_checked():
  helper = tokenization._whitespace_tokens_with_owners  # pylint: disable=protected-access
  assert list(helper(u" ab\x00c 中文d\ufffd ")) == [
      (u"abc", [1, 2, 4]), (u"中", [6]), (u"文", [7]), (u"d", [8])]
  assert list(helper(u"")) == []
  assert list(helper(u"a\u3000b\tc")) == [(u"a", [0]), (u"b", [2]), (u"c", [4])]


def test_basic_word_spans_hand_checked():
  spans = tokenization._basic_word_spans  # pylint: disable=protected-access
  assert spans(u"") == []
  assert spans(u"abc") == [(0, 3)]
  assert spans(u"a.b") == [(0, 1), (1, 2), (2, 3)]
  assert spans(u"..") == [(0, 1), (1, 2)]
  assert spans(u"a$b！c") == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
  assert spans(u"ab cd") == [(0, 2), (3, 5)]
  assert spans(u"\u00bfab?") == [(0, 1), (1, 3), (3, 4)]


def test_basic_word_spans_fuzz():
  """Against the reference punctuation split of each whitespace-separated run."""
  rng = random.Random(7)
  alphabet = list(u"ab.!$ ！，中\u00a0\u2028é`~")
  for _ in range(3000):
    text = u"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
    spans = tokenization._basic_word_spans(text)  # pylint: disable=protected-access
    expected = [piece for run in text.split()
                for piece in reference_tokenizer.split_on_punctuation(run)]
    assert [text[s:e] for s, e in spans] == expected, repr(text)
    assert all(s < e for s, e in spans)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
