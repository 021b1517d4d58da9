# coding=utf-8
"""Tests of tokenization.py against the plain reference tokenizer and by hand."""

import random
import subprocess
import sys

import pytest

import cli
import reference_tokenizer
import tokenization

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def write_vocab(tmp_path, tokens, name="vocab.txt"):
  """Writes `tokens` one per line (UTF-8) and returns the file's path."""
  path = str(tmp_path / name)
  with open(path, "w", encoding="utf-8", newline="\n") as f:
    f.write("".join(token + "\n" for token in tokens))
  return path


def make_tokenizer(tmp_path, tokens, do_lower_case=True):
  return tokenization.FullTokenizer(write_vocab(tmp_path, tokens), do_lower_case)


def reference_full(vocab, text, do_lower_case):
  return reference_tokenizer.full_tokenize(text, vocab, do_lower_case)


# A vocab for the edge cases: a few words and pieces in several scripts.
EDGE_VOCAB = SPECIAL_TOKENS + [
    u"我", u"爱", u"中", u"文", u"北", u"京", u"nlp", u"!", u"！", u"，", u"。",
    u"hello", u"world", u"he", u"##llo", u"##l", u"##o", u"a", u"b", u"ab",
    u"##b", u"i", u"##stanbul", u"οδος", u"οδοσ", u"ο", u"##δος", u".", u"α",
    u"cafe", u"café", u"ｎｌｐ", u"ｎ", u"##ｌ", u"##ｐ", u"1", u"2", u"3", u"##2",
    u"##3", u"123", u"k", u"`", u"\U00020000", u"\u8c48", u"\uf900",
    u"\U0002f800", u"\u4e3d", u"😀", u"\u200d", u"e", u"##e", u"\u0301",
]

# (name, text): each must tokenize exactly as the reference does.
EDGE_CASES = [
    ("empty", u""),
    ("only_whitespace", u" \t\n\r\u3000\u00a0 "),
    ("chinese", u"我爱北京，北京爱我。"),
    ("mixed_chinese_english_digits", u"我爱NLP!2023年用Hello World123"),
    ("emoji", u"我😀爱👍🏽 he😀llo 👨\u200d👩\u200d👧"),
    ("zero_width_space", u"a\u200bb 中\u200b文"),
    ("zero_width_joiner", u"a\u200db"),
    ("control_chars", u"a\x01b\x7fc\x85d\x0be\x0cf\x1cg\x9fh"),
    ("tab_newline_cr", u"hello\tworld\nab\r中"),
    ("accents", u"Café naïve résumé Ångström"),
    ("combining_marks_alone", u"\u0301 e\u0301 \u0301\u0300x"),
    ("full_width", u"ＮＬＰ！ｎｌｐ１２３"),
    ("cjk_extension_b", u"\U00020000\U0002a6df\U0002a700 中\U00020001文"),
    ("cjk_compatibility", u"\uf900\ufa0e\U0002f800\U0002fa1d"),
    ("outside_cjk_ranges", u"\u9fff\ua000\u4dbf\u4dc0\u33ff\u3400"),
    ("nbsp", u"hello\u00a0world\u202fab"),
    ("replacement_and_nul", u"a\ufffdb\x00c \ufffd \x00"),
    ("final_sigma", u"ΟΔΟΣ ΟΔΟΣ. ΟΔΟΣ.Α Σ"),
    ("dotted_capital_i", u"İstanbul İ"),
    ("line_and_paragraph_separators", u"a\u2028b\u2029c"),
    ("greek_varia_becomes_backtick", u"a\u1fefb"),
    ("kelvin_and_ohm", u"5\u212a \u2126"),
    ("ligature_and_roman_numeral", u"\ufb01ne \u2160\u2161"),
    ("soft_hyphen_and_bom", u"co\u00adop \ufeffab"),
    ("punctuation_ascii_and_unicode", u"a$b^c`d~e|f¿g«h»i–j—k…l"),
    ("unassigned_private_surrogate", u"a\u0378b\ue000c\ud800d"),
    ("long_word", u"a" * 250 + u" " + u"中" * 3),
    ("hangul_kana", u"한국어 日本語のテキスト"),
    ("arabic_devanagari", u"مَرْحَبًا नमस्ते"),
]


@pytest.mark.parametrize("do_lower_case", [True, False])
@pytest.mark.parametrize("name,text", EDGE_CASES, ids=[name for name, _ in EDGE_CASES])
def test_edge_cases_match_reference(tmp_path, name, text, do_lower_case):
  del name
  tokenizer = make_tokenizer(tmp_path, EDGE_VOCAB, do_lower_case)
  expected = reference_full(tokenizer.vocab, text, do_lower_case)
  assert tokenizer.tokenize(text) == expected
  # Twice: the second call is served from the cache.
  assert tokenizer.tokenize(text) == expected
  assert tokenizer.basic_tokenizer.tokenize(text) == (
      reference_tokenizer.basic_tokenize(text, do_lower_case))
  assert tokenization.BasicTokenizer(do_lower_case).tokenize(text) == (
      reference_tokenizer.basic_tokenize(text, do_lower_case))


# Hand-checked basic tokens: (text, do_lower_case, expected).
HAND_CHECKED_BASIC = [
    (u"我爱NLP!", True, [u"我", u"爱", u"nlp", u"!"]),
    (u"我爱NLP!", False, [u"我", u"爱", u"NLP", u"!"]),
    (u"a\u200bb", True, [u"ab"]),                       # Cf dropped, no split.
    (u"a\u200db", False, [u"ab"]),
    (u"a\u00a0b", True, [u"a", u"b"]),                  # NBSP is Zs: a space.
    (u"\x00a\ufffdb", True, [u"ab"]),
    (u"a\x0bb", True, [u"ab"]),                         # \x0b is Cc: dropped.
    (u"a\u2028b", True, [u"a", u"b"]),                  # str.split() splits Zl.
    (u"ΟΔΟΣ", True, [u"οδος"]),                         # final sigma.
    (u"ΟΔΟΣ.Α", True, [u"οδοσ", u".", u"α"]),          # not final: "." between.
    (u"İ", True, [u"i"]),                               # i + U+0307, then Mn dropped.
    (u"Café", True, [u"cafe"]),
    (u"Café", False, [u"Café"]),
    (u"ｎｌｐ！", True, [u"ｎｌｐ", u"！"]),            # full-width stays full-width.
    (u"a\u1fefb", True, [u"a", u"`", u"b"]),            # varia -> "`" after NFD.
    (u"a\u1fefb", False, [u"a\u1fefb"]),                # Sk: not punctuation.
    (u"中\U00020000文", True, [u"中", u"\U00020000", u"文"]),
    (u"x\uf900y", True, [u"x", u"\u8c48", u"y"]),       # compat ideograph, NFD.
    (u"x\uf900y", False, [u"x", u"\uf900", u"y"]),
    (u"a$b", True, [u"a", u"$", u"b"]),                 # ASCII symbol = punct.
]


@pytest.mark.parametrize("text,do_lower_case,expected", HAND_CHECKED_BASIC)
def test_basic_tokenizer_hand_checked(text, do_lower_case, expected):
  assert tokenization.BasicTokenizer(do_lower_case).tokenize(text) == expected
  assert reference_tokenizer.basic_tokenize(text, do_lower_case) == expected


def test_full_tokenizer_hand_checked(tmp_path):
  vocab = SPECIAL_TOKENS + [u"我", u"爱", u"nl", u"##p", u"!", u"hello", u"##s"]
  lower = make_tokenizer(tmp_path, vocab, do_lower_case=True)
  assert lower.tokenize(u"我爱NLP!") == [u"我", u"爱", u"nl", u"##p", u"!"]
  assert lower.tokenize(u"Hellos 你") == [u"hello", u"##s", u"[UNK]"]
  cased = make_tokenizer(tmp_path, vocab, do_lower_case=False)
  assert cased.tokenize(u"我爱NLP!") == [u"我", u"爱", u"[UNK]", u"!"]
  ids = lower.convert_tokens_to_ids(lower.tokenize(u"我爱NLP!"))
  assert ids == [5, 6, 7, 8, 9]
  assert lower.convert_ids_to_tokens(ids) == [u"我", u"爱", u"nl", u"##p", u"!"]


def test_bytes_input(tmp_path):
  tokenizer = make_tokenizer(tmp_path, EDGE_VOCAB)
  assert tokenizer.tokenize(u"我爱NLP!".encode("utf-8")) == [u"我", u"爱", u"nlp", u"!"]
  # Invalid UTF-8 bytes are dropped, as by the original convert_to_unicode.
  assert tokenizer.tokenize(b"ab\xff") == [u"ab"]
  assert tokenizer.basic_tokenizer.tokenize(b"A b") == [u"a", u"b"]
  assert tokenizer.wordpiece_tokenizer.tokenize(b"hello") == [u"hello"]


# ---------------------------------------------------------------------------
# Randomized comparison with the reference
# ---------------------------------------------------------------------------

def _code_point_range(first, last):
  return [chr(cp) for cp in range(first, last + 1)]


FUZZ_POOLS = [
    ("ascii", _code_point_range(0x20, 0x7E)),
    ("ascii_letters", _code_point_range(0x61, 0x7A) + _code_point_range(0x41, 0x5A)),
    ("cjk", _code_point_range(0x4E00, 0x4E80) + _code_point_range(0x9F00, 0x9FFF)),
    ("cjk_ext_a", _code_point_range(0x3400, 0x3420) + _code_point_range(0x4DB0, 0x4DC5)),
    ("cjk_ext_b_to_f", _code_point_range(0x20000, 0x20020) +
     _code_point_range(0x2A6D0, 0x2A6E5) + _code_point_range(0x2A700, 0x2A710) +
     _code_point_range(0x2B730, 0x2B750) + _code_point_range(0x2B810, 0x2B830) +
     _code_point_range(0x2CEA0, 0x2CEB5)),
    ("cjk_compatibility", _code_point_range(0xF900, 0xF930) +
     _code_point_range(0xFA00, 0xFAFF) + _code_point_range(0x2F800, 0x2F820) +
     _code_point_range(0x2FA10, 0x2FA25)),
    ("latin1_accents", _code_point_range(0xC0, 0xFF) + [u"\u0130", u"\u0131", u"\u1e9e"]),
    ("combining", _code_point_range(0x300, 0x36F)),
    ("greek", _code_point_range(0x391, 0x3C9) + _code_point_range(0x1F00, 0x1FFE) +
     [u"\u03a3", u"\u03a3", u"\u03c2", u"\u0345"]),
    ("emoji", _code_point_range(0x1F600, 0x1F64F) + _code_point_range(0x1F3FB, 0x1F3FF) +
     [u"\u200d", u"\ufe0f", u"\u2764", u"\U0001F468", u"\U0001F469"]),
    ("cc", _code_point_range(0x0, 0x1F) + _code_point_range(0x7F, 0x9F)),
    ("cf", _code_point_range(0x200B, 0x200F) + _code_point_range(0x2060, 0x2064) +
     [u"\u00ad", u"\ufeff", u"\u061c", u"\U000E0001", u"\U000E0041", u"\u180e"]),
    ("whitespace", [u" ", u"\t", u"\n", u"\r", u"\u00a0", u"\u1680", u"\u3000",
                    u"\u202f", u"\u205f", u"\u2028", u"\u2029"] +
     _code_point_range(0x2000, 0x200A)),
    ("full_width", _code_point_range(0xFF01, 0xFF5E) + _code_point_range(0xFF61, 0xFF70)),
    ("cjk_punctuation", _code_point_range(0x3000, 0x303F)),
    ("general_punctuation_symbols", _code_point_range(0x2010, 0x2027) +
     _code_point_range(0x2100, 0x218F) + _code_point_range(0x20A0, 0x20C0) +
     [u"\u00a1", u"\u00bf", u"\u00a7", u"\u00b6", u"\u00b7", u"\u037e", u"\u0387"]),
    ("replacement_nul", [u"\ufffd", u"\x00"]),
    ("other_scripts", _code_point_range(0xAC00, 0xAC20) + _code_point_range(0x3040, 0x30FF) +
     _code_point_range(0x0600, 0x0660) + _code_point_range(0x0900, 0x0970) +
     _code_point_range(0x13A0, 0x13F5) + _code_point_range(0xAB70, 0xABBF) +
     _code_point_range(0xFB00, 0xFB06) + [u"\u0378", u"\ue000", u"\ud800", u"\U0010ffff"]),
]


def make_fuzz_vocab(rng):
  """A vocab holding most fuzz characters, lower-cased and not, most with "##"
  forms, and short ASCII words, so WordPiece both matches and fails."""
  tokens = list(SPECIAL_TOKENS)
  seen = set(tokens)

  def add(token):
    # A vocab file line holds no surrounding whitespace and no lone surrogate.
    if (token and token.strip() == token and token not in seen and
        not any(0xD800 <= ord(char) <= 0xDFFF for char in token)):
      seen.add(token)
      tokens.append(token)

  for _, pool in FUZZ_POOLS:
    for char in pool:
      if rng.random() < 0.8:
        for form in (char, char.lower(), reference_tokenizer.strip_accents(char.lower())):
          add(form)
          if rng.random() < 0.8:
            add(u"##" + form)
  letters = u"abcdefghijklmnopqrstuvwxyz0123456789"
  for _ in range(300):
    word = u"".join(rng.choice(letters) for _ in range(rng.randint(2, 5)))
    add(word if rng.random() < 0.5 else u"##" + word)
  return tokens


def make_fuzz_text(rng, ascii_words):
  """A random string of 0-40 pieces: pool characters, ASCII words and spaces."""
  pieces = []
  for _ in range(rng.randint(0, 40)):
    roll = rng.random()
    if roll < 0.15:
      word = rng.choice(ascii_words)
      pieces.append(word.upper() if rng.random() < 0.3 else word)
    elif roll < 0.35:
      pieces.append(u" ")  # Short words: more of them match the vocab.
    else:
      _, pool = rng.choice(FUZZ_POOLS)
      pieces.append(rng.choice(pool))
  return u"".join(pieces)


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_fuzz_matches_reference(tmp_path, do_lower_case):
  rng = random.Random(20240611)
  vocab_tokens = make_fuzz_vocab(rng)
  tokenizer = make_tokenizer(tmp_path, vocab_tokens, do_lower_case)
  # A second tokenizer with a tiny cache: it is emptied again and again.
  small_cache = make_tokenizer(tmp_path, vocab_tokens, do_lower_case)
  small_cache.cache_size = 7
  small_cache.basic_tokenizer.cache_size = 5
  basic = tokenization.BasicTokenizer(do_lower_case)
  ascii_words = [t.lstrip("#") for t in vocab_tokens if t.lstrip("#").isalnum() and
                 t.isascii() and len(t) > 2]
  num_texts = 3000
  num_tokens = 0
  num_unk = 0
  for _ in range(num_texts):
    text = make_fuzz_text(rng, ascii_words)
    expected = reference_full(tokenizer.vocab, text, do_lower_case)
    assert tokenizer.tokenize(text) == expected, repr(text)
    assert small_cache.tokenize(text) == expected, repr(text)
    assert basic.tokenize(text) == reference_tokenizer.basic_tokenize(
        text, do_lower_case), repr(text)
    num_tokens += len(expected)
    num_unk += expected.count(u"[UNK]")
  assert len(small_cache._cache) <= 7  # pylint: disable=protected-access
  assert len(small_cache.basic_tokenizer._cache) <= 5  # pylint: disable=protected-access
  # The vocab must make the comparison meaningful: mostly matched pieces.
  assert num_tokens > 10 * num_texts
  assert num_unk < 0.25 * num_tokens


def test_fuzz_wordpiece_matches_reference():
  rng = random.Random(7)
  letters = u"abcdé中"
  vocab = {}
  for _ in range(200):
    piece = u"".join(rng.choice(letters) for _ in range(rng.randint(1, 6)))
    vocab[piece if rng.random() < 0.5 else u"##" + piece] = len(vocab)
  vocab[u"[UNK]"] = len(vocab)
  wordpiece = tokenization.WordpieceTokenizer(vocab, max_input_chars_per_word=12)
  for _ in range(2000):
    text = u" ".join(
        u"".join(rng.choice(letters) for _ in range(rng.randint(1, 15)))
        for _ in range(rng.randint(0, 4)))
    assert wordpiece.tokenize(text) == reference_tokenizer.wordpiece_tokenize(
        text, vocab, max_input_chars_per_word=12), repr(text)


# ---------------------------------------------------------------------------
# WordPiece
# ---------------------------------------------------------------------------

def test_wordpiece_greedy_longest_match():
  vocab = {token: i for i, token in enumerate(
      [u"[UNK]", u"un", u"##aff", u"##able", u"u", u"##n", u"##a", u"##ff"])}
  wordpiece = tokenization.WordpieceTokenizer(vocab)
  assert wordpiece.tokenize(u"unaffable") == [u"un", u"##aff", u"##able"]
  assert wordpiece.tokenize(u"unaffablex") == [u"[UNK]"]  # "x" matches nothing.
  assert wordpiece.tokenize(u"xun un") == [u"[UNK]", u"un"]
  assert wordpiece.tokenize(u"") == []


def test_wordpiece_max_input_chars_per_word():
  vocab = {u"[UNK]": 0, u"a": 1, u"##a": 2, u"<unk>": 3}
  wordpiece = tokenization.WordpieceTokenizer(vocab, max_input_chars_per_word=5)
  assert wordpiece.tokenize(u"aaaaa") == [u"a"] + [u"##a"] * 4
  assert wordpiece.tokenize(u"aaaaaa") == [u"[UNK]"]
  custom = tokenization.WordpieceTokenizer(vocab, unk_token=u"<unk>",
                                           max_input_chars_per_word=3)
  assert custom.tokenize(u"aaaa b aa") == [u"<unk>", u"<unk>", u"a", u"##a"]


def test_default_max_input_chars_is_200(tmp_path):
  tokenizer = make_tokenizer(tmp_path, SPECIAL_TOKENS + [u"a", u"##a"])
  assert tokenizer.tokenize(u"a" * 200) == [u"a"] + [u"##a"] * 199
  assert tokenizer.tokenize(u"a" * 201) == [u"[UNK]"]


def test_cache_follows_vocab_and_setting_changes(tmp_path):
  tokenizer = make_tokenizer(tmp_path, SPECIAL_TOKENS + [u"hello", u"中"])
  assert tokenizer.tokenize(u"Hello 中文") == [u"hello", u"中", u"[UNK]"]
  tokenizer.vocab[u"文"] = len(tokenizer.vocab)  # Users add tokens in place.
  assert tokenizer.tokenize(u"Hello 中文") == [u"hello", u"中", u"文"]
  tokenizer.basic_tokenizer.do_lower_case = False
  assert tokenizer.tokenize(u"Hello 中文") == [u"[UNK]", u"中", u"文"]
  tokenizer.basic_tokenizer = tokenization.BasicTokenizer(do_lower_case=True)
  assert tokenizer.tokenize(u"Hello 中文") == [u"hello", u"中", u"文"]
  tokenizer.wordpiece_tokenizer.unk_token = u"[MASK]"
  assert tokenizer.tokenize(u"Hello 中文x") == [u"hello", u"中", u"文", u"[MASK]"]
  tokenizer.vocab[u"helloworldtoken"] = len(tokenizer.vocab)  # Longer than any.
  assert tokenizer.tokenize(u"helloworldtoken") == [u"helloworldtoken"]


def test_results_are_not_shared_between_calls(tmp_path):
  tokenizer = make_tokenizer(tmp_path, EDGE_VOCAB)
  first = tokenizer.tokenize(u"我爱nlp")
  first.append(u"junk")
  assert tokenizer.tokenize(u"我爱nlp") == [u"我", u"爱", u"nlp"]


# ---------------------------------------------------------------------------
# Vocab files and id conversion
# ---------------------------------------------------------------------------

def test_load_vocab_ids_are_line_numbers(tmp_path):
  path = str(tmp_path / "vocab.txt")
  # CRLF, surrounding spaces, a blank line, U+2028 inside a line (not a line
  # break for the original loader) and no newline after the last line.
  with open(path, "wb") as f:
    f.write(u"[PAD]\r\n  [UNK] \n\n中\na\u2028b\n##文\tx\n末".encode("utf-8"))
  vocab = tokenization.load_vocab(path)
  assert list(vocab.items()) == [
      (u"[PAD]", 0), (u"[UNK]", 1), (u"", 2), (u"中", 3), (u"a\u2028b", 4),
      (u"##文\tx", 5), (u"末", 6)]


def test_load_vocab_missing_file(tmp_path):
  path = str(tmp_path / "no_such_vocab.txt")
  with pytest.raises(ValueError) as info:
    tokenization.load_vocab(path)
  assert path in str(info.value)
  with pytest.raises(ValueError):
    tokenization.FullTokenizer(path)


def test_load_vocab_bad_utf8_names_file_and_line(tmp_path):
  path = str(tmp_path / "vocab.txt")
  with open(path, "wb") as f:
    f.write(b"[PAD]\n[UNK]\nok\xe4\xb8\n\xe4\xb8\xad\n")
  with pytest.raises(ValueError) as info:
    tokenization.load_vocab(path)
  message = str(info.value)
  assert path in message
  assert "line 3" in message


def test_convert_tokens_and_ids_both_ways(tmp_path):
  tokens = SPECIAL_TOKENS + [u"我", u"爱", u"##爱"]
  tokenizer = make_tokenizer(tmp_path, tokens)
  assert tokenizer.convert_tokens_to_ids([u"[CLS]", u"我", u"##爱", u"[SEP]"]) == [2, 5, 7, 3]
  assert tokenizer.convert_ids_to_tokens([2, 5, 7, 3]) == [u"[CLS]", u"我", u"##爱", u"[SEP]"]
  assert tokenization.convert_tokens_to_ids(tokenizer.vocab, [u"爱"]) == [6]
  assert tokenization.convert_ids_to_tokens(tokenizer.inv_vocab, [6]) == [u"爱"]
  assert tokenization.convert_by_vocab(tokenizer.vocab, iter([u"[PAD]"])) == [0]
  assert tokenizer.inv_vocab == {i: t for i, t in enumerate(tokens)}


def test_unknown_token_or_id_raises_key_error_naming_it(tmp_path):
  tokenizer = make_tokenizer(tmp_path, SPECIAL_TOKENS + [u"我"])
  with pytest.raises(KeyError) as info:
    tokenizer.convert_tokens_to_ids([u"我", u"你好"])
  assert u"你好" in str(info.value)
  assert "item 1" in str(info.value)
  with pytest.raises(KeyError) as info:
    tokenizer.convert_ids_to_tokens([0, 99])
  assert "99" in str(info.value)


# ---------------------------------------------------------------------------
# Small functions
# ---------------------------------------------------------------------------

def test_convert_to_unicode_and_printable_text():
  assert tokenization.convert_to_unicode(u"中文") == u"中文"
  assert tokenization.convert_to_unicode(u"中文".encode("utf-8")) == u"中文"
  assert tokenization.convert_to_unicode(b"a\xffb") == u"ab"
  assert tokenization.printable_text(u"中".encode("utf-8")) == u"中"
  assert tokenization.printable_text(u"x") == u"x"
  with pytest.raises(ValueError):
    tokenization.convert_to_unicode(123)


def test_whitespace_tokenize():
  assert tokenization.whitespace_tokenize(u"  a b\t c\n") == [u"a", u"b", u"c"]
  assert tokenization.whitespace_tokenize(u" \u3000 ") == []
  assert tokenization.whitespace_tokenize(u"") == []


@pytest.mark.parametrize("model_name,lower_cased", [
    ("chinese_L-12_H-768_A-12", True),
    ("multilingual_L-12_H-768_A-12", True),
    ("uncased_L-12_H-768_A-12", True),
    ("uncased_L-24_H-1024_A-16", True),
    ("multi_cased_L-12_H-768_A-12", False),
    ("cased_L-12_H-768_A-12", False),
    ("cased_L-24_H-1024_A-16", False),
])
def test_validate_case_matches_checkpoint(model_name, lower_cased):
  checkpoint = "/models/%s/bert_model.ckpt" % model_name
  tokenization.validate_case_matches_checkpoint(lower_cased, checkpoint)
  with pytest.raises(ValueError) as info:
    tokenization.validate_case_matches_checkpoint(not lower_cased, checkpoint)
  message = str(info.value)
  assert model_name in message
  assert "--do_lower_case=%s" % lower_cased in message


def test_validate_case_ignores_unknown_checkpoints():
  for do_lower_case in (True, False):
    tokenization.validate_case_matches_checkpoint(do_lower_case, None)
    tokenization.validate_case_matches_checkpoint(do_lower_case, "")
    tokenization.validate_case_matches_checkpoint(
        do_lower_case, "/out/my_model/bert_model.ckpt")
    tokenization.validate_case_matches_checkpoint(
        do_lower_case, "/out/chinese_L-12_H-768_A-12/model.ckpt-1000")


def test_module_does_not_import_tensorflow():
  code = ("import sys; sys.path.insert(0, %r); import tokenization; "
          "print('tensorflow' in sys.modules)" % cli.REPO_DIR)
  result = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE,
                          universal_newlines=True, check=True)
  assert result.stdout.strip() == "False"
