# coding=utf-8
"""Tests of bert_mgpu/embedding/data.py: the embedding job's split files (pairs with or
without a score, triplets, sentences; .tsv, .jsonl, .txt), --data_format given or left to
auto, and each refusal as one line naming the file and the line.

Expected records are written out by hand from the files the tests create. No TensorFlow.
"""

import json
import os

import pytest

from bert_mgpu.embedding import data
from bert_mgpu.errors import UsageError
from usage_errors import assert_usage_error


def write(path, text):
  """Writes `text` as UTF-8, byte for byte (no newline translation); returns the path."""
  with open(str(path), "w", encoding="utf-8", newline="") as f:
    f.write(text)
  return str(path)


def write_bytes(path, raw):
  with open(str(path), "wb") as f:
    f.write(raw)
  return str(path)


def jsonl(path, objects):
  return write(path, "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objects))


def summary(text_set):
  """(format, scored, [(texts, score, line)]) of a TextSet."""
  return (text_set.data_format, text_set.scored,
          [(r.texts, r.score, r.line) for r in text_set.records])


# ---------------------------------------------------------------------------
# TSV
# ---------------------------------------------------------------------------

def test_tsv_pairs_without_a_score_keep_their_lines(tmp_path):
  path = write(tmp_path / "train.tsv", "how old are you\twhat is your age\n\n"
                                       "hello there\thi\r\n")
  text_set = data.read_split(path)
  assert text_set.path == path
  assert summary(text_set) == (data.PAIRS, False, [
      (("how old are you", "what is your age"), None, 1),
      (("hello there", "hi"), None, 3)])


def test_chinese_sts_b_headerless_scores_0_to_5(tmp_path):
  # Chinese STS-B's layout: sentence1<TAB>sentence2<TAB>score, no header, integer 0-5.
  rows = [(u"一架飞机要起飞了。", u"一架飞机正在起飞。", "5"),
          (u"一个男人在吹一支大笛子。", u"一个人在吹长笛。", "3"),
          (u"一个女人在切洋葱。", u"一个男人在弹吉他。", "0"),
          (u"三个人在下棋。", u"两个人在下棋。", "2.6")]
  path = write(tmp_path / "dev.tsv", "".join("\t".join(r) + "\n" for r in rows))
  assert summary(data.read_split(path)) == (data.PAIRS, True, [
      ((rows[0][0], rows[0][1]), 5.0, 1), ((rows[1][0], rows[1][1]), 3.0, 2),
      ((rows[2][0], rows[2][1]), 0.0, 3), ((rows[3][0], rows[3][1]), 2.6, 4)])


@pytest.mark.parametrize("header", ["sentence1\tsentence2\tlabel", "text_a\ttext_b\tscore",
                                    " Text_A \tTEXT_B\tSimilarity"])
def test_tsv_header_naming_the_columns_is_skipped(tmp_path, header):
  path = write(tmp_path / "train.tsv", header + "\n" + u"蚂蚁借呗\t借呗怎么还\t1\n"
                                       u"花呗\t信用卡\t0\n")
  assert summary(data.read_split(path)) == (data.PAIRS, True, [
      ((u"蚂蚁借呗", u"借呗怎么还"), 1.0, 2), ((u"花呗", u"信用卡"), 0.0, 3)])


def test_a_first_row_that_is_not_all_header_words_is_data(tmp_path):
  # "label" alone is a header word, but "good" is not: the row is an example.
  path = write(tmp_path / "train.tsv", "label\tgood\nfirst\tsecond\n")
  assert summary(data.read_split(path)) == (data.PAIRS, False, [
      (("label", "good"), None, 1), (("first", "second"), None, 2)])


def test_tsv_triplets_auto_and_by_header(tmp_path):
  path = write(tmp_path / "train.tsv", "q one\tp one\tn one\nq two\tp two\tn two\n")
  assert summary(data.read_split(path)) == (data.TRIPLETS, False, [
      (("q one", "p one", "n one"), None, 1), (("q two", "p two", "n two"), None, 2)])
  # A header names the third column a negative: triplets, even if a negative looks numeric.
  path = write(tmp_path / "dev.tsv", "anchor\tpositive\tnegative\nq\tp\t42\n")
  assert summary(data.read_split(path)) == (data.TRIPLETS, False, [(("q", "p", "42"), None, 2)])


def test_explicit_data_format_overrides_the_guess_of_auto(tmp_path):
  # A triplet file whose first negative is a number: auto takes the column for a score and
  # stops at the first negative that is not one; --data_format=triplets reads it.
  path = write(tmp_path / "train.tsv", "year\twhich year\t2024\nq\tp\tn\n")
  assert_usage_error(lambda: data.read_split(path), path + " line 2", '"n"', "not a number")
  assert summary(data.read_split(path, data.TRIPLETS)) == (data.TRIPLETS, False, [
      (("year", "which year", "2024"), None, 1), (("q", "p", "n"), None, 2)])
  # Numeric third columns read as pairs by both.
  path = write(tmp_path / "dev.tsv", "a\tb\t1\nc\td\t0\n")
  assert summary(data.read_split(path, data.PAIRS)) == summary(data.read_split(path, "auto"))
  # A one-column TSV: sentences, by auto or by name.
  path = write(tmp_path / "test.tsv", "one sentence\nanother\n")
  expected = (data.SENTENCES, False, [(("one sentence",), None, 1), (("another",), None, 2)])
  assert summary(data.read_split(path)) == expected
  assert summary(data.read_split(path, data.SENTENCES)) == expected


@pytest.mark.parametrize("text, data_format, fragments", [
    ("a\tb\n", data.TRIPLETS, ["line 1", "2 tab-separated columns for triplets"]),
    ("a\tb\tc\n", data.SENTENCES, ["line 1", "3 tab-separated columns for sentences"]),
    ("a\tb\tc\td\n", "auto", ["line 1", "4 tab-separated columns for triplets"]),
    ("a\n", data.PAIRS, ["line 1", "1 tab-separated columns for pairs"]),
])
def test_tsv_columns_that_do_not_fit_the_format(tmp_path, text, data_format, fragments):
  path = write(tmp_path / "train.tsv", text)
  assert_usage_error(lambda: data.read_split(path, data_format), path, *fragments)


# ---------------------------------------------------------------------------
# JSON lines
# ---------------------------------------------------------------------------

def test_clue_jsonl_pairs_with_integer_and_string_labels(tmp_path):
  # AFQMC / LCQMC / BUSTM: {"sentence1", "sentence2", "label"}; AFQMC gives "label": "1".
  path = jsonl(tmp_path / "train.jsonl", [
      {"sentence1": u"双十一花呗提额在哪", "sentence2": u"哪里可以提花呗额度", "label": "1"},
      {"sentence1": u"花呗支持高铁票支付吗", "sentence2": u"为什么友付宝不支持花呗付款",
       "label": 0},
      {"sentence1": u"借呗", "sentence2": u"借呗还款", "label": "0", "id": 7}])
  assert summary(data.read_split(path)) == (data.PAIRS, True, [
      ((u"双十一花呗提额在哪", u"哪里可以提花呗额度"), 1.0, 1),
      ((u"花呗支持高铁票支付吗", u"为什么友付宝不支持花呗付款"), 0.0, 2),
      ((u"借呗", u"借呗还款"), 0.0, 3)])


def test_jsonl_pairs_by_other_key_names_and_without_a_score(tmp_path):
  path = jsonl(tmp_path / "train.json", [{"text_a": "a", "text_b": "b", "score": 3.5},
                                         {"text_a": "c", "text_b": "d", "score": 0}])
  assert summary(data.read_split(path)) == (data.PAIRS, True, [
      (("a", "b"), 3.5, 1), (("c", "d"), 0.0, 2)])
  path = jsonl(tmp_path / "dev.jsonl", [{"text1": "a", "text2": "b"}])
  assert summary(data.read_split(path)) == (data.PAIRS, False, [(("a", "b"), None, 1)])


def test_jsonl_query_pos_neg_with_lists(tmp_path):
  path = write(tmp_path / "train.jsonl", "\n".join([
      json.dumps({"query": "q1", "pos": ["p1", "p1 second"], "neg": ["n1", "n2"]}),
      "",
      json.dumps({"query": "q2", "pos": "p2", "neg": "n3"}),
      json.dumps({"query": "q3", "pos": ["p3"], "neg": ["n4"]})]) + "\n")
  assert summary(data.read_split(path)) == (data.TRIPLETS, False, [
      (("q1", "p1", "n1", "n2"), None, 1),  # the first positive; every negative
      (("q2", "p2", "n3"), None, 3),
      (("q3", "p3", "n4"), None, 4)])


def test_jsonl_and_txt_sentences(tmp_path):
  path = jsonl(tmp_path / "train.jsonl", [{"text": u"第一句"}, {"text": "second", "id": 2}])
  assert summary(data.read_split(path)) == (data.SENTENCES, False, [
      ((u"第一句",), None, 1), (("second",), None, 2)])
  path = jsonl(tmp_path / "dev.jsonl", [{"sentence": "only"}])
  assert summary(data.read_split(path)) == (data.SENTENCES, False, [(("only",), None, 1)])
  # .txt: one sentence a line, a UTF-8 byte order mark dropped, blank lines skipped.
  path = write(tmp_path / "test.txt", u"\ufeff今天天气很好\n\n  \nIt rains.\r\nlast")
  assert summary(data.read_split(path)) == (data.SENTENCES, False, [
      ((u"今天天气很好",), None, 1), (("It rains.",), None, 4), (("last",), None, 5)])
  assert summary(data.read_split(path, data.SENTENCES)) == summary(data.read_split(path))


def test_jsonl_explicit_format_reads_only_its_layout(tmp_path):
  path = jsonl(tmp_path / "train.jsonl", [{"sentence1": "a", "sentence2": "b", "label": 1}])
  assert data.read_split(path, data.PAIRS).data_format == data.PAIRS
  assert_usage_error(lambda: data.read_split(path, data.TRIPLETS), path + " line 1",
                     "no fields of triplets", '"label"', '"sentence1"')
  assert_usage_error(lambda: data.read_split(path, data.SENTENCES), path + " line 1",
                     "no fields of sentences")
  # A record holding both a pair and a sentence: the format chooses.
  path = jsonl(tmp_path / "dev.jsonl", [{"text_a": "a", "text_b": "b", "text": "c"}])
  assert summary(data.read_split(path, data.SENTENCES)) == (data.SENTENCES, False,
                                                            [(("c",), None, 1)])
  assert summary(data.read_split(path)) == (data.PAIRS, False, [(("a", "b"), None, 1)])


def test_txt_refuses_another_format(tmp_path):
  path = write(tmp_path / "train.txt", "a sentence\n")
  assert_usage_error(lambda: data.read_split(path, data.PAIRS), path,
                     "--data_format=pairs needs a .tsv or .jsonl file")


# ---------------------------------------------------------------------------
# Refusals: one line naming the file and the line
# ---------------------------------------------------------------------------

def test_missing_score_on_a_later_line(tmp_path):
  path = jsonl(tmp_path / "train.jsonl", [
      {"sentence1": "a", "sentence2": "b", "label": 1},
      {"sentence1": "c", "sentence2": "d", "label": 0},
      {"sentence1": "e", "sentence2": "f"}])
  assert_usage_error(lambda: data.read_split(path), path + " line 3:",
                     "no score, where line 1 has one")
  # In a TSV, the score column left empty.
  path = write(tmp_path / "dev.tsv", "a\tb\t4\nc\td\t\n")
  assert_usage_error(lambda: data.read_split(path), path + " line 2:", 'the score ""',
                     "not a number")


@pytest.mark.parametrize("value, shown", [("four", '"four"'), ("nan", '"nan"'),
                                          ("inf", '"inf"')])
def test_non_numeric_tsv_score(tmp_path, value, shown):
  path = write(tmp_path / "train.tsv", "a\tb\t4\nc\td\t%s\n" % value)
  assert_usage_error(lambda: data.read_split(path), path + " line 2:",
                     "the score %s is not a number" % shown)


@pytest.mark.parametrize("label, shown", [("yes", '"yes"'), (True, "true"), (None, "null"),
                                          ([1], "[1]")])
def test_non_numeric_json_label(tmp_path, label, shown):
  path = jsonl(tmp_path / "train.jsonl", [
      {"sentence1": "a", "sentence2": "b", "label": 1},
      {"sentence1": "c", "sentence2": "d", "label": label}])
  assert_usage_error(lambda: data.read_split(path), path + " line 2:",
                     "the label %s is not a number" % shown)


def test_wrong_column_count_on_a_later_line(tmp_path):
  path = write(tmp_path / "train.tsv", "a\tb\t1\nc\td\t2\ne\tf\tg\t3\n")
  assert_usage_error(lambda: data.read_split(path), path + " line 3:",
                     "4 tab-separated columns, the file's first row has 3")
  path = write(tmp_path / "dev.tsv", "a\tb\t1\nc\td\n")
  assert_usage_error(lambda: data.read_split(path), path + " line 2:",
                     "2 tab-separated columns, the file's first row has 3")


@pytest.mark.parametrize("name, text, fragments", [
    ("train.tsv", "a\tb\n \tc\n", ["line 2:", "text_a is empty"]),
    ("train.tsv", "a\tb\t1\nc\t  \t2\n", ["line 2:", "text_b is empty"]),
    ("train.tsv", "q\tp\tn\nq\tp\t\n", ["line 2:", "negative is empty"]),
    ("train.jsonl", '{"sentence1": "a", "sentence2": "", "label": 1}\n',
     ["line 1:", "sentence2 is empty"]),
    ("train.jsonl", '{"query": "q", "pos": "p", "neg": ["n", " "]}\n',
     ["line 1:", "neg is empty"]),
    ("train.jsonl", '{"text": "a"}\n{"text": 5}\n', ["line 2:", "text is 5, not a text"]),
])
def test_empty_or_non_text_texts(tmp_path, name, text, fragments):
  path = write(tmp_path / name, text)
  assert_usage_error(lambda: data.read_split(path), path, *fragments)


@pytest.mark.parametrize("name", ["train.tsv", "train.jsonl", "train.txt"])
def test_gbk_bytes_are_refused_at_their_line(tmp_path, name):
  first = {"train.tsv": u"a\tb\n", "train.jsonl": u'{"text": "a"}\n',
           "train.txt": u"a\n"}[name]
  second = {"train.tsv": u"你好\t再见\n", "train.jsonl": u'{"text": "你好"}\n',
            "train.txt": u"你好\n"}[name]
  path = write_bytes(tmp_path / name, first.encode("utf-8") + second.encode("gbk"))
  assert_usage_error(lambda: data.read_split(path), path + " line 2:", "not valid UTF-8")


def test_utf16_files_are_refused(tmp_path):
  path = write_bytes(tmp_path / "train.tsv", u"a\tb\n你\t好\n".encode("utf-16"))
  assert_usage_error(lambda: data.read_split(path), path, "UTF-16")
  # Without a byte order mark: the NUL bytes of its ASCII, at line 1.
  path = write_bytes(tmp_path / "dev.txt", u"hello\n".encode("utf-16-le"))
  assert_usage_error(lambda: data.read_split(path), path + " line 1:", "NUL byte")


@pytest.mark.parametrize("name, text", [
    ("train.tsv", ""), ("train.tsv", "\n\n"), ("train.tsv", "sentence1\tsentence2\tlabel\n"),
    ("train.jsonl", "\n"), ("train.txt", "\n \n")])
def test_no_examples(tmp_path, name, text):
  path = write(tmp_path / name, text)
  message = assert_usage_error(lambda: data.read_split(path), path, "no examples")
  assert message.startswith(path + ":")


def test_split_file_finds_exactly_one_file(tmp_path):
  write(tmp_path / "train.jsonl", '{"text": "a"}\n')
  write(tmp_path / "dev.tsv", "a\tb\n")
  write(tmp_path / "notes.md", "not a split\n")
  os.makedirs(str(tmp_path / "test.tsv"))  # a directory is not a split file
  directory = str(tmp_path)
  assert data.split_file(directory, "train") == os.path.join(directory, "train.jsonl")
  assert data.split_file(directory, "dev") == os.path.join(directory, "dev.tsv")
  assert_usage_error(lambda: data.split_file(directory, "test"), directory, "no test file",
                     "test.tsv, test.jsonl, test.json, test.txt")
  write(tmp_path / "train.txt", "a\n")
  write(tmp_path / "train.json", '{"text": "a"}\n')
  assert_usage_error(lambda: data.split_file(directory, "train"), directory,
                     "several train files (train.jsonl, train.json, train.txt)")


@pytest.mark.parametrize("objects, fragments", [
    ([{"sentence1": "a", "sentence2": "b"}, {"query": "q", "pos": "p", "neg": "n"}],
     ["line 2:", "a triplets record after pairs ones"]),
    ([{"text": "a"}, {"text": "b"}, {"sentence1": "a", "sentence2": "b", "label": 1}],
     ["line 3:", "a pairs record after sentences ones"]),
    ([{"text": "a"}, {"label": 1}], ["line 2:", "no fields of pairs, triplets or sentences",
                                     '["label"]']),
])
def test_mixed_json_layouts(tmp_path, objects, fragments):
  path = jsonl(tmp_path / "train.jsonl", objects)
  assert_usage_error(lambda: data.read_split(path), path, *fragments)


@pytest.mark.parametrize("objects, line", [
    ([{"query": "q", "pos": "p"}], 1),
    ([{"query": "q", "pos": "p", "neg": "n"}, {"query": "q", "pos": "p", "neg": []}], 2),
])
def test_triplet_without_a_negative(tmp_path, objects, line):
  path = jsonl(tmp_path / "train.jsonl", objects)
  assert_usage_error(lambda: data.read_split(path), "%s line %d:" % (path, line),
                     "a triplet without a negative")


def test_invalid_json_names_its_line(tmp_path):
  path = write(tmp_path / "train.jsonl", '{"text": "a"}\n{"text": "b",}\n')
  assert_usage_error(lambda: data.read_split(path), path + " line 2:", "invalid JSON")


# ---------------------------------------------------------------------------
# Headers are read by their names; a mixed score column names both lines
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("text, by_name", [
    ("query\tneg\tpos\nq\tn\tp\n", [(("q", "p", "n"), None, 2)]),
    ("score\ttext_a\ttext_b\n3\tx\t5\n", [(("x", "5"), 3.0, 2)]),
    ("label\ttext_a\n1\thello\n", None),  # a classifier's file: one text, no pair at all
])
def test_a_header_in_another_order_is_read_by_its_names_or_refused(tmp_path, text, by_name):
  path = write(tmp_path / "train.tsv", text)
  try:
    text_set = data.read_split(path)
  except UsageError as e:
    assert str(e).startswith(path + " line "), e
    return
  assert by_name is not None, summary(text_set)  # None: only a refusal is right
  assert summary(text_set)[2] == by_name


def test_scores_given_only_from_a_later_line_name_a_line_that_has_an_earlier_score(tmp_path):
  path = jsonl(tmp_path / "train.jsonl", [
      {"sentence1": "a", "sentence2": "b"},
      {"sentence1": "c", "sentence2": "d", "label": 1}])
  message = assert_usage_error(lambda: data.read_split(path), path)
  # Either line is at fault, but line 1 has no earlier line with a score.
  assert not (" line 1:" in message and "earlier lines have one" in message), message


@pytest.mark.parametrize("text", [
    "s1\ts2\tscore\n今天\t明天\t5\n猫\t狗\t1\n",  # a header of unknown names
    "今天\t明天\t4.x\n猫\t狗\t1\n",  # a typo in the first row's score
])
def test_a_first_row_that_is_neither_scores_nor_triplets_is_refused_at_line_1(tmp_path, text):
  path = write(tmp_path / "train.tsv", text)
  assert_usage_error(lambda: data.read_split(path), path + " line 1:",
                     "neither a score nor a header", "line 2's is a number")
