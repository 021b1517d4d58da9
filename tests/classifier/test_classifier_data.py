# coding=utf-8
"""Tests of the classifier's data modules (bert_mgpu/classifier/: file readers, processors, tasks,
class labels, featurizing and its pool, feature cache) and of the eval report of metrics.py.

Expected values are written out by hand from the data files the tests create.
"""

import json
import logging
import os
import unicodedata

import numpy as np
import pytest
import tensorflow.compat.v1 as tf


from bert_mgpu.classifier import class_labels  # pylint: disable=g-import-not-at-top
from bert_mgpu.classifier import feature_cache  # pylint: disable=g-import-not-at-top
from bert_mgpu.classifier import featurizing  # pylint: disable=g-import-not-at-top
from bert_mgpu.classifier import featurizing_pool  # pylint: disable=g-import-not-at-top
from bert_mgpu.classifier import file_readers  # pylint: disable=g-import-not-at-top
from bert_mgpu.classifier import glue_processors  # pylint: disable=g-import-not-at-top
from bert_mgpu.classifier import input_examples  # pylint: disable=g-import-not-at-top
from bert_mgpu.classifier import metrics as classifier_metrics  # pylint: disable=g-import-not-at-top
from bert_mgpu.classifier import records as classifier_records  # pylint: disable=g-import-not-at-top
from bert_mgpu.classifier import task_registry  # pylint: disable=g-import-not-at-top
from bert_mgpu.data import label_files  # pylint: disable=g-import-not-at-top
from bert_mgpu.errors import UsageError  # pylint: disable=g-import-not-at-top
from usage_errors import assert_usage_error  # pylint: disable=g-import-not-at-top

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
         "hello", "world", ",", "!", "un", "##aff", "##able", "中", "国", "人",
         "a1", "a2", "a3", "a4", "a5", "b1", "b2", "b3", "the", "cat", "sat"]
VOCAB_IDS = dict((token, index) for index, token in enumerate(VOCAB))


def write(path, text):
  """Writes `text` as UTF-8, byte for byte (no newline translation)."""
  directory = os.path.dirname(str(path))
  if not os.path.isdir(directory):
    os.makedirs(directory)
  with open(str(path), "w", encoding="utf-8", newline="") as f:
    f.write(text)
  return str(path)


def write_vocab(tmp_path, tokens=VOCAB, name="vocab.txt"):
  return write(tmp_path / name, "".join(token + "\n" for token in tokens))


def read(processor_name, data_dir, split):
  processor = task_registry.get_processor(processor_name)
  return processor.get_examples(str(data_dir), split)


def summary(examples):
  return [(e.guid, e.text_a, e.text_b, e.label) for e in examples]


# ---------------------------------------------------------------------------
# Header-based formats: tsv, csv, jsonl
# ---------------------------------------------------------------------------

def test_tsv_splits_aliases_ids_and_literal_quotes(tmp_path):
  write(tmp_path / "train.tsv",
        "label\ttext_a\ttext_b\nyes\tHe said \"hi\"\tok\r\n\nno\tsecond\t\n")
  write(tmp_path / "dev.tsv", "ID\tSentence\tLabel\nd7\tdev text\tno\n")
  write(tmp_path / "test.tsv", "text\nfirst test\nsecond test\n")
  assert summary(read("tsv", tmp_path, "train")) == [
      ("train-0", 'He said "hi"', "ok", "yes"),
      ("train-1", "second", None, "no")]
  assert summary(read("tsv", tmp_path, "dev")) == [("d7", "dev text", None, "no")]
  assert summary(read("TSV", tmp_path, "test")) == [
      ("test-0", "first test", None, None), ("test-1", "second test", None, None)]
  train = read("tsv", tmp_path, "train")
  assert [(e.source_file, e.source_line) for e in train] == [
      (str(tmp_path / "train.tsv"), 2), (str(tmp_path / "train.tsv"), 4)]


def test_tsv_byte_order_mark_is_dropped(tmp_path):
  with open(str(tmp_path / "train.tsv"), "wb") as f:
    f.write(b"\xef\xbb\xbflabel\ttext\npos\t\xe4\xb8\xad\n")
  assert summary(read("tsv", tmp_path, "train")) == [("train-0", u"\u4e2d", None, "pos")]


def test_csv_quoted_commas_newlines_and_quotes(tmp_path):
  write(tmp_path / "train.csv",
        'id,text_a,text_b,label\n'
        'x1,"one, two","line1\nline2",pos\n'
        'x2,"say ""hi""",,neg\n')
  write(tmp_path / "dev.csv", 'sentence,label\r\nplain,pos\r\n')
  write(tmp_path / "test.csv", 'text_a\n"multi\nline"\nlast\n')
  train = read("csv", tmp_path, "train")
  assert summary(train) == [("x1", "one, two", "line1\nline2", "pos"),
                            ("x2", 'say "hi"', None, "neg")]
  # A record's line is where it starts; the quoted newline moves the next record down.
  assert [e.source_line for e in train] == [2, 4]
  assert summary(read("csv", tmp_path, "dev")) == [("dev-0", "plain", None, "pos")]
  test = read("csv", tmp_path, "test")
  assert summary(test) == [("test-0", "multi\nline", None, None), ("test-1", "last", None, None)]
  assert [e.source_line for e in test] == [2, 4]


def test_csv_error_line_counts_embedded_newlines(tmp_path):
  path = write(tmp_path / "train.csv", 'text,label\n"a\nb",pos\nc,pos,extra\n')
  assert_usage_error(lambda: read("csv", tmp_path, "train"), path, "line 4", "c,pos,extra")


def test_jsonl_keys_aliases_and_blank_lines(tmp_path):
  write(tmp_path / "train.jsonl",
        '{"text": "t0", "label": "a"}\n\n'
        '{"sentence": "t1", "text_b": "b1", "label": 3, "id": 17}\n'
        '{"text_a": "t2", "text": "ignored", "label": "b", "extra": [1]}\n')
  write(tmp_path / "dev.jsonl", '{"text_a": "d", "label": "a"}\n')
  write(tmp_path / "test.jsonl", '{"text": "x"}\n{"text": "y", "label": null}\n')
  train = read("jsonl", tmp_path, "train")
  assert summary(train) == [("train-0", "t0", None, "a"), ("17", "t1", "b1", "3"),
                            ("train-2", "t2", None, "b")]
  assert [e.source_line for e in train] == [1, 3, 4]
  assert summary(read("jsonl", tmp_path, "dev")) == [("dev-0", "d", None, "a")]
  assert summary(read("jsonl", tmp_path, "test")) == [("test-0", "x", None, None),
                                                      ("test-1", "y", None, None)]


# ---------------------------------------------------------------------------
# CLUE and THUCNews
# ---------------------------------------------------------------------------

def json_lines(objects):
  return "".join(json.dumps(obj, ensure_ascii=False) + "\n" for obj in objects)


@pytest.mark.parametrize("task", ["tnews", "iflytek"])
def test_clue_tasks(tmp_path, task):
  write(tmp_path / "train.json", json_lines([
      {"label": "102", "label_desc": "news_entertainment", "sentence": u"句子一",
       "keywords": u"关键词"},
      {"label": "110", "label_desc": "news_military", "sentence": u"句子二", "keywords": ""}]))
  write(tmp_path / "dev.json", json_lines([
      {"label": "116", "label_desc": "news_game", "sentence": u"开发", "keywords": ""}]))
  write(tmp_path / "test.json", json_lines([
      {"id": 0, "sentence": u"测试", "keywords": "k"}, {"id": 1, "sentence": u"再测"}]))
  assert summary(read(task, tmp_path, "train")) == [
      ("train-0", u"句子一", None, "102"), ("train-1", u"句子二", None, "110")]
  assert summary(read(task, tmp_path, "dev")) == [("dev-0", u"开发", None, "116")]
  assert summary(read(task, tmp_path, "test")) == [("0", u"测试", None, None),
                                                   ("1", u"再测", None, None)]


def test_clue_fixed_label_lists(tmp_path):
  tnews = task_registry.get_processor("tnews").get_labels(str(tmp_path))
  assert tnews == ["100", "101", "102", "103", "104", "106", "107", "108", "109", "110",
                   "112", "113", "114", "115", "116"]
  iflytek = task_registry.get_processor("iflytek").get_labels(str(tmp_path))
  assert iflytek == [str(i) for i in range(119)]


def test_thucnews_both_file_name_sets(tmp_path):
  cnews = tmp_path / "cnews"
  write(cnews / "cnews.train.txt", u"体育\t比赛\t结束\n\n财经\t股票\n")
  write(cnews / "cnews.val.txt", u"体育\t球\n")
  write(cnews / "cnews.test.txt", u"财经\t钱\n只有文本\n")
  assert summary(read("thucnews", cnews, "train")) == [
      ("train-0", u"比赛\t结束", None, u"体育"), ("train-1", u"股票", None, u"财经")]
  assert summary(read("thucnews", cnews, "dev")) == [("dev-0", u"球", None, u"体育")]
  assert summary(read("thucnews", cnews, "test")) == [
      ("test-0", u"钱", None, u"财经"), ("test-1", u"只有文本", None, None)]
  # {train,dev,test}.txt take precedence over the cnews names.
  write(cnews / "dev.txt", u"科技\t芯片\n")
  assert summary(read("thucnews", cnews, "dev")) == [("dev-0", u"芯片", None, u"科技")]
  assert (task_registry.get_processor("thucnews").input_files(str(cnews), "dev") ==
          [str(cnews / "dev.txt")])


def test_thucnews_line_without_tab_in_training_file(tmp_path):
  path = write(tmp_path / "train.txt", u"体育\t比赛\n没有标签\n")
  assert_usage_error(lambda: read("thucnews", tmp_path, "train"), path, "line 2", u"没有标签")


# ---------------------------------------------------------------------------
# Google's tasks
# ---------------------------------------------------------------------------

def test_cola(tmp_path):
  write(tmp_path / "train.tsv", "gj04\t1\t\tThe cat sat.\ngj04\t0\t*\tCat the sat.\n")
  write(tmp_path / "dev.tsv", "gj04\t1\t\tDev one.\n")
  write(tmp_path / "test.tsv", "index\tsentence\n0\tTest one.\n1\tTest two.\n")
  assert summary(read("cola", tmp_path, "train")) == [
      ("train-0", "The cat sat.", None, "1"), ("train-1", "Cat the sat.", None, "0")]
  assert summary(read("cola", tmp_path, "dev")) == [("dev-0", "Dev one.", None, "1")]
  assert summary(read("cola", tmp_path, "test")) == [
      ("test-0", "Test one.", None, None), ("test-1", "Test two.", None, None)]
  assert task_registry.get_processor("cola").get_labels(str(tmp_path)) == ["0", "1"]


def test_mrpc(tmp_path):
  header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
  write(tmp_path / "train.tsv", header + "1\t11\t12\tA \"quoted\" one\tA two\n")
  write(tmp_path / "dev.tsv", header + "0\t21\t22\tB one\tB two\n")
  write(tmp_path / "test.tsv", "index\t#1 ID\t#2 ID\t#1 String\t#2 String\n0\t1\t2\tC1\tC2\n")
  assert summary(read("mrpc", tmp_path, "train")) == [
      ("train-0", 'A "quoted" one', "A two", "1")]
  assert summary(read("mrpc", tmp_path, "dev")) == [("dev-0", "B one", "B two", "0")]
  assert summary(read("mrpc", tmp_path, "test")) == [("test-0", "C1", "C2", None)]
  assert task_registry.get_processor("mrpc").get_labels(str(tmp_path)) == ["0", "1"]


def mnli_row(index, s1, s2, labels):
  return "\t".join([str(index), "p", "q", "fiction", "bp1", "bp2", "p1", "p2", s1, s2]
                   + labels) + "\n"


def test_mnli(tmp_path):
  header = "index\tpromptID\tpairID\tgenre\tb1\tb2\tp1\tp2\tsentence1\tsentence2\n"
  write(tmp_path / "train.tsv", header + mnli_row(5, "s1", "s2", ["neutral", "entailment"]))
  write(tmp_path / "dev_matched.tsv",
        header + mnli_row(9, "d1", "d2", ["neutral", "neutral", "a", "b", "c", "contradiction"]))
  write(tmp_path / "test_matched.tsv", header + mnli_row(3, "t1", "t2", []))
  assert summary(read("mnli", tmp_path, "train")) == [("train-5", "s1", "s2", "entailment")]
  assert summary(read("mnli", tmp_path, "dev")) == [("dev-9", "d1", "d2", "contradiction")]
  assert summary(read("mnli", tmp_path, "test")) == [("test-3", "t1", "t2", None)]
  assert task_registry.get_processor("mnli").get_labels(str(tmp_path)) == [
      "contradiction", "entailment", "neutral"]


def xnli_row(language, label, s1, s2):
  return "\t".join([language, label, "b1", "b2", "p1", "p2", s1, s2, "1", "2"]) + "\n"


def test_xnli(tmp_path):
  write(tmp_path / "multinli" / "multinli.train.zh.tsv",
        u"premise\thypo\tlabel\n前提\t假设\tcontradictory\n甲\t乙\tneutral\n")
  header = "language\tgold_label\tb1\tb2\tp1\tp2\tsentence1\tsentence2\tpromptID\tpairID\n"
  write(tmp_path / "xnli.dev.tsv", header + xnli_row("en", "neutral", "x", "y")
        + xnli_row("zh", "entailment", u"中", u"国"))
  write(tmp_path / "xnli.test.tsv", header + xnli_row("zh", "neutral", u"人", u"国"))
  assert summary(read("xnli", tmp_path, "train")) == [
      ("train-0", u"前提", u"假设", "contradiction"), ("train-1", u"甲", u"乙", "neutral")]
  dev = read("xnli", tmp_path, "dev")
  assert summary(dev) == [("dev-0", u"中", u"国", "entailment")]
  assert dev[0].source_line == 3
  assert summary(read("xnli", tmp_path, "test")) == [("test-0", u"人", u"国", "neutral")]


def test_get_processor_names():
  assert isinstance(task_registry.get_processor("MrPc"), glue_processors.MrpcProcessor)
  message = assert_usage_error(lambda: task_registry.get_processor("sst2"), "sst2")
  for name in ["cola", "mnli", "mrpc", "xnli", "tsv", "csv", "jsonl", "tnews", "iflytek",
               "thucnews"]:
    assert name in message


# ---------------------------------------------------------------------------
# Label list
# ---------------------------------------------------------------------------

def test_labels_txt_wins_and_is_saved_when_training(tmp_path):
  data_dir, output_dir = tmp_path / "data", tmp_path / "out"
  write(data_dir / "train.tsv", "label\ttext\nb\tx\na\ty\n")
  write(data_dir / "labels.txt", "zeta\n\n  b \r\na\n")
  processor = task_registry.get_processor("tsv")
  labels = class_labels.resolve_label_list(processor, str(data_dir), str(output_dir), do_train=True)
  assert labels == ["zeta", "b", "a"]
  class_labels.write_label_list(str(output_dir), labels)
  with open(str(output_dir / "labels.txt"), encoding="utf-8") as f:
    assert f.read() == "zeta\nb\na\n"


def test_labels_from_training_file_sorted(tmp_path):
  data_dir, output_dir = tmp_path / "data", tmp_path / "out"
  write(data_dir / "train.tsv", u"label\ttext\n财经\tx\n10\ty\n2\tz\n财经\tw\n")
  labels = class_labels.resolve_label_list(task_registry.get_processor("tsv"), str(data_dir),
                                           str(output_dir), True)
  assert labels == ["10", "2", u"财经"]
  class_labels.write_label_list(str(output_dir), labels)
  assert label_files.read_label_file(str(output_dir / "labels.txt")) == labels


def test_fixed_labels_unless_labels_txt(tmp_path):
  data_dir = tmp_path / "data"
  os.makedirs(str(data_dir))
  assert class_labels.resolve_label_list(task_registry.get_processor("mrpc"), str(data_dir),
                                         str(tmp_path / "o"), True) == ["0", "1"]
  write(data_dir / "labels.txt", "1\n0\n")
  assert class_labels.resolve_label_list(task_registry.get_processor("mrpc"), str(data_dir),
                                         str(tmp_path / "o"), True) == ["1", "0"]


def test_eval_only_reuses_output_dir_labels(tmp_path):
  data_dir, output_dir = tmp_path / "data", tmp_path / "out"
  write(data_dir / "train.tsv", "label\ttext\na\tx\nb\ty\n")
  write(output_dir / "labels.txt", "b\nc\na\n")
  processor = task_registry.get_processor("tsv")
  assert class_labels.resolve_label_list(processor, str(data_dir), str(output_dir),
                                         False) == ["b", "c", "a"]
  # Training derives the list again; resolving writes nothing (main saves it after checks).
  assert class_labels.resolve_label_list(processor, str(data_dir), str(output_dir),
                                         True) == ["a", "b"]
  assert label_files.read_label_file(str(output_dir / "labels.txt")) == ["b", "c", "a"]


def test_eval_only_without_saved_labels_falls_back_and_writes_nothing(tmp_path):
  data_dir, output_dir = tmp_path / "data", tmp_path / "out"
  write(data_dir / "train.tsv", "label\ttext\nb\tx\na\ty\n")
  assert class_labels.resolve_label_list(task_registry.get_processor("tsv"), str(data_dir),
                                         str(output_dir), False) == ["a", "b"]
  assert not os.path.exists(str(output_dir / "labels.txt"))


def test_no_label_source_at_all(tmp_path):
  data_dir = tmp_path / "data"
  write(data_dir / "test.tsv", "text\nx\n")
  assert_usage_error(
      lambda: class_labels.resolve_label_list(task_registry.get_processor("tsv"), str(data_dir),
                                              str(tmp_path / "out"), False),
      os.path.join(str(data_dir), "labels.txt"), os.path.join(str(data_dir), "train.tsv"))


def test_duplicate_label_in_labels_txt(tmp_path):
  path = write(tmp_path / "labels.txt", "a\nb\n\na \n")
  assert_usage_error(lambda: label_files.read_label_file(path), path, "line 4", "'a'", "line 1")


def test_empty_labels_txt(tmp_path):
  path = write(tmp_path / "labels.txt", "\n  \n")
  assert_usage_error(lambda: label_files.read_label_file(path), path, "no labels")


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------

def test_row_with_missing_column(tmp_path):
  path = write(tmp_path / "train.tsv", "label\ttext_a\ttext_b\npos\tfine\tok\nneg\tshort\n")
  assert_usage_error(lambda: read("tsv", tmp_path, "train"), path, "line 3", "'text_b'",
                     "neg\\tshort")
  # An unclosed quote swallows the rest of the file into one field: the record where
  # it opens is named (csv strict mode; see also test_csv_unclosed_quote_*).
  path = write(tmp_path / "train.csv", 'text,label\n"abc,pos\nx,neg\n')
  assert_usage_error(lambda: read("csv", tmp_path, "train"), path, "line 2", "never closed",
                     "double quote")


def test_row_with_extra_tab(tmp_path):
  path = write(tmp_path / "train.tsv", "label\ttext\npos\tone\ttwo\n")
  assert_usage_error(lambda: read("tsv", tmp_path, "train"), path, "line 2", "one\\ttwo")


def test_google_row_with_missing_column(tmp_path):
  header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
  path = write(tmp_path / "train.tsv", header + "1\t11\t12\tonly one string\n")
  assert_usage_error(lambda: read("mrpc", tmp_path, "train"), path, "line 2", "'#2 String'")


def test_header_without_required_column(tmp_path):
  path = write(tmp_path / "train.tsv", "category\ttext\npos\tx\n")
  assert_usage_error(lambda: read("tsv", tmp_path, "train"), path, "line 1", "label",
                     "'category\\ttext'")
  path = write(tmp_path / "dev.csv", "label,body\npos,x\n")
  assert_usage_error(lambda: read("csv", tmp_path, "dev"), path, "line 1", "text_a",
                     "'label,body'")


def test_empty_label_in_training_row(tmp_path):
  path = write(tmp_path / "train.tsv", "label\ttext\npos\tx\n \ty\n")
  assert_usage_error(lambda: read("tsv", tmp_path, "train"), path, "line 3", "label")


def test_jsonl_missing_keys(tmp_path):
  path = write(tmp_path / "train.jsonl",
               '{"text": "a", "label": "x"}\n{"label": "x", "body": "q"}\n')
  assert_usage_error(lambda: read("jsonl", tmp_path, "train"), path, "line 2", "text_a",
                     '"body": "q"')
  path = write(tmp_path / "dev.jsonl", '\n{"text": "no label here"}\n')
  assert_usage_error(lambda: read("jsonl", tmp_path, "dev"), path, "line 2", "label",
                     "no label here")


def test_invalid_json_line(tmp_path):
  path = write(tmp_path / "train.jsonl", '{"text": "a", "label": "x"}\n{"text": "b", label}\n')
  assert_usage_error(lambda: read("jsonl", tmp_path, "train"), path, "line 2",
                     '{"text": "b", label}')
  path = write(tmp_path / "dev.json", '["sentence", "label"]\n')
  assert_usage_error(lambda: read("tnews", tmp_path, "dev"), path, "line 1",
                     '["sentence", "label"]')


def test_json_value_of_wrong_type(tmp_path):
  path = write(tmp_path / "train.jsonl", '{"text": ["a"], "label": "x"}\n')
  assert_usage_error(lambda: read("jsonl", tmp_path, "train"), path, "line 1", '["a"]')


def test_invalid_utf8_gives_line_and_byte_offset(tmp_path):
  path = str(tmp_path / "train.tsv")
  with open(path, "wb") as f:
    f.write(b"label\ttext\npos\tok\nneg\tab\xffcd\n")
  # 0xff is byte 6 of line 3 (0-based), byte 6 + 11 + 7 = 24 of the file.
  assert_usage_error(lambda: read("tsv", tmp_path, "train"), path, "line 3", "0xff",
                     "byte offset 6 of the line", "offset 24 in the file")
  path = str(tmp_path / "train.csv")
  with open(path, "wb") as f:
    f.write(u"text,label\n\"多\n行\",pos\n".encode("utf-8") + b"\xc3(,neg\n")
  assert_usage_error(lambda: read("csv", tmp_path, "train"), path, "line 4", "0xc3",
                     "byte offset 0 of the line")
  # The 3 bytes of a byte order mark count in the file offset: 3 + 9 + 10 = 22.
  path = str(tmp_path / "train.jsonl")
  with open(path, "wb") as f:
    f.write(b"\xef\xbb\xbf{\"a\": 1}\n{\"text\": \"\x80\"}\n")
  assert_usage_error(lambda: read("jsonl", tmp_path, "train"), path, "line 2", "0x80",
                     "byte offset 10 of the line", "offset 22 in the file")


def test_empty_split(tmp_path):
  path = write(tmp_path / "dev.tsv", "label\ttext\n\n")
  assert_usage_error(lambda: read("tsv", tmp_path, "dev"), path, "no examples", "--do_eval")
  path = write(tmp_path / "train.jsonl", "\n\n")
  assert_usage_error(lambda: read("jsonl", tmp_path, "train"), path, "no examples")
  os.makedirs(str(tmp_path / "x"))
  path = write(tmp_path / "x" / "xnli.dev.tsv", "language\tgold_label\n" +
               xnli_row("en", "neutral", "a", "b"))
  assert_usage_error(lambda: read("xnli", tmp_path / "x", "dev"), path, "no examples")


def test_missing_data_file(tmp_path):
  assert_usage_error(lambda: read("tsv", tmp_path, "dev"), str(tmp_path / "dev.tsv"))
  assert_usage_error(lambda: read("thucnews", tmp_path, "dev"), str(tmp_path / "dev.txt"),
                     str(tmp_path / "cnews.val.txt"))
  assert_usage_error(lambda: read("xnli", tmp_path, "train"),
                     os.path.join(str(tmp_path), "multinli", "multinli.train.zh.tsv"))


def test_label_not_in_label_list(tmp_path):
  write(tmp_path / "dev.tsv", "label\ttext\npos\tx\nmaybe\ty\n")
  path = str(tmp_path / "dev.tsv")
  examples = read("tsv", tmp_path, "dev")
  assert_usage_error(lambda: class_labels.check_labels(examples, ["neg", "pos"]), path, "line 3",
                     "'maybe'", "[neg, pos]")
  vocab_file = write_vocab(tmp_path)
  output_file = str(tmp_path / "out" / "dev.tf_record")
  os.makedirs(str(tmp_path / "out"))
  assert_usage_error(lambda: featurizing_pool.write_features(examples, ["neg", "pos"], 16,
                                                             vocab_file, True, output_file),
                     path, "line 3", "'maybe'")
  # No partial output: neither the record file nor a temp file is left behind.
  assert os.listdir(str(tmp_path / "out")) == []


def test_failure_while_writing_leaves_no_file(tmp_path, monkeypatch):
  vocab_file = write_vocab(tmp_path)
  examples = make_examples(40)
  real_featurize_chunk = featurizing_pool._featurize_chunk
  calls = []

  def failing_featurize_chunk(chunk):
    calls.append(len(chunk))
    if len(calls) == 2:
      raise UsageError("injected failure")
    return real_featurize_chunk(chunk)
  monkeypatch.setattr(featurizing_pool, "_featurize_chunk", failing_featurize_chunk)
  monkeypatch.setattr(featurizing_pool, "_chunks", lambda items, size: [items[:20], items[20:]])
  os.makedirs(str(tmp_path / "out"))
  with pytest.raises(UsageError):
    featurizing_pool.write_features(examples, ["a", "b"], 8, vocab_file, True,
                                    str(tmp_path / "out" / "f.tf_record"), num_workers=1)
  assert calls == [20, 20]
  assert os.listdir(str(tmp_path / "out")) == []


def test_vocab_without_special_tokens(tmp_path):
  vocab_file = write_vocab(tmp_path, ["[PAD]", "[UNK]", "[CLS]", "hello"])
  examples = [input_examples.InputExample("g", "hello", label="a")]
  assert_usage_error(lambda: featurizing_pool.write_features(examples, ["a"], 8, vocab_file, True,
                                                             str(tmp_path / "x.tf_record")),
                     vocab_file, "[SEP]")


# ---------------------------------------------------------------------------
# Featurizing
# ---------------------------------------------------------------------------

class WhitespaceTokenizer(object):
  """Splits on spaces: lets the tests count tokens by eye."""

  def tokenize(self, text):
    return text.split()

  def convert_tokens_to_ids(self, tokens):
    return [VOCAB_IDS[token] for token in tokens]


def ids(tokens):
  return [VOCAB_IDS[token] for token in tokens]


def check_features(features, tokens, segments, max_seq_length, label_id):
  padding = max_seq_length - len(tokens)
  assert features.input_ids == ids(tokens) + [0] * padding
  assert features.input_mask == [1] * len(tokens) + [0] * padding
  assert features.segment_ids == segments + [0] * padding
  assert features.label_id == label_id
  assert features.is_real_example


def test_pair_truncates_the_longer_text_first():
  example = input_examples.InputExample("g", "a1 a2 a3 a4 a5", "b1 b2", label="y")
  features = featurizing.convert_single_example(example, {"x": 0, "y": 1}, 8, WhitespaceTokenizer())
  # Room for 5 tokens: a loses a5, then a4 (it stays the longer one).
  check_features(features, ["[CLS]", "a1", "a2", "a3", "[SEP]", "b1", "b2", "[SEP]"],
                 [0, 0, 0, 0, 0, 1, 1, 1], 8, 1)


def test_pair_truncation_tie_takes_from_the_second_text():
  example = input_examples.InputExample("g", "a1 a2", "b1 b2", label="x")
  features = featurizing.convert_single_example(example, {"x": 0}, 6, WhitespaceTokenizer())
  # Room for 3: tie 2/2 -> b loses b2.
  check_features(features, ["[CLS]", "a1", "a2", "[SEP]", "b1", "[SEP]"],
                 [0, 0, 0, 0, 1, 1], 6, 0)
  example = input_examples.InputExample("g", "a1 a2 a3", "b1 b2 b3", label="x")
  features = featurizing.convert_single_example(example, {"x": 0}, 7, WhitespaceTokenizer())
  # Room for 4: tie 3/3 -> b loses b3; 3/2 -> a loses a3.
  check_features(features, ["[CLS]", "a1", "a2", "[SEP]", "b1", "b2", "[SEP]"],
                 [0, 0, 0, 0, 1, 1, 1], 7, 0)


def test_single_text_truncation_padding_and_no_label():
  tokenizer = WhitespaceTokenizer()
  example = input_examples.InputExample("g", "a1 a2 a3 a4 a5")
  check_features(featurizing.convert_single_example(example, {"x": 0, "y": 1}, 5, tokenizer),
                 ["[CLS]", "a1", "a2", "a3", "[SEP]"], [0] * 5, 5, 0)
  example = input_examples.InputExample("g", "the cat", "", label="y")
  check_features(featurizing.convert_single_example(example, {"x": 0, "y": 1}, 6, tokenizer),
                 ["[CLS]", "the", "cat", "[SEP]"], [0] * 4, 6, 1)


def test_real_tokenizer_example(tmp_path):
  import tokenization  # pylint: disable=g-import-not-at-top
  tokenizer = tokenization.FullTokenizer(write_vocab(tmp_path), do_lower_case=True)
  example = input_examples.InputExample("g", u"Hello, 中国人!", u"unaffable world", label="b")
  features = featurizing.convert_single_example(example, {"a": 0, "b": 1}, 14, tokenizer)
  check_features(features,
                 ["[CLS]", "hello", ",", u"中", u"国", u"人", "!", "[SEP]",
                  "un", "##aff", "##able", "world", "[SEP]"],
                 [0] * 8 + [1] * 5, 14, 1)


def read_records(path):
  return list(tf.io.tf_record_iterator(path))


def parse_records(path, max_seq_length):
  """Parses every record of `path` with input_feature_spec, in a graph."""
  with tf.Graph().as_default():
    serialized = tf.placeholder(tf.string, [])
    parsed = tf.parse_single_example(serialized,
                                     classifier_records.input_feature_spec(max_seq_length))
    with tf.Session() as sess:
      return [sess.run(parsed, {serialized: record}) for record in read_records(path)]


def test_tfrecord_round_trip(tmp_path):
  vocab_file = write_vocab(tmp_path)
  examples = [input_examples.InputExample("g0", "hello world", "the cat", label="b"),
              input_examples.InputExample("g1", u"中国 sat", label="a"),
              input_examples.InputExample("g2", "a1 a2 a3 a4 a5 a1 a2 a3 a4 a5")]
  output_file = str(tmp_path / "f.tf_record")
  count = featurizing_pool.write_features(examples, ["a", "b"], 8, vocab_file, True, output_file)
  assert count == 3
  records = parse_records(output_file, 8)
  expected = [
      (["[CLS]", "hello", "world", "[SEP]", "the", "cat", "[SEP]"], [0, 0, 0, 0, 1, 1, 1], 1),
      (["[CLS]", u"中", u"国", "sat", "[SEP]"], [0, 0, 0, 0, 0], 0),
      (["[CLS]", "a1", "a2", "a3", "a4", "a5", "a1", "[SEP]"], [0] * 8, 0),
  ]
  assert len(records) == len(expected)
  for record, (tokens, segments, label_id) in zip(records, expected):
    padding = 8 - len(tokens)
    np.testing.assert_array_equal(record["input_ids"], ids(tokens) + [0] * padding)
    np.testing.assert_array_equal(record["input_mask"], [1] * len(tokens) + [0] * padding)
    np.testing.assert_array_equal(record["segment_ids"], segments + [0] * padding)
    assert record["input_ids"].dtype == np.int64
    assert record["label_ids"] == label_id
    assert record["is_real_example"] == 1


def make_examples(count):
  words = ["hello", "world", "the", "cat", "sat", u"中", u"国", "unaffable", "zzz"]
  examples = []
  for i in range(count):
    text_a = " ".join(words[(i + k) % len(words)] for k in range(1 + i % 7))
    text_b = " ".join(words[(i * 3 + k) % len(words)] for k in range(i % 4)) or None
    examples.append(input_examples.InputExample("g%d" % i, text_a, text_b,
                                                label=["a", "b", None][i % 3]))
  return examples


def test_pool_gives_the_same_records_as_one_process(tmp_path):
  vocab_file = write_vocab(tmp_path)
  examples = make_examples(300)
  serial = str(tmp_path / "serial.tf_record")
  pooled = str(tmp_path / "pooled.tf_record")
  assert featurizing_pool.write_features(examples, ["a", "b"], 10, vocab_file, True, serial,
                                         num_workers=1) == 300
  assert featurizing_pool.write_features(examples, ["a", "b"], 10, vocab_file, True, pooled,
                                         num_workers=3, pool_threshold=1) == 300
  serial_records = read_records(serial)
  assert len(serial_records) == 300
  assert read_records(pooled) == serial_records
  # The serial records follow the input order: compare against convert_single_example.
  import tokenization  # pylint: disable=g-import-not-at-top
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  for example, parsed in zip(examples[:20], parse_records(serial, 10)[:20]):
    features = featurizing.convert_single_example(example, {"a": 0, "b": 1}, 10, tokenizer)
    np.testing.assert_array_equal(parsed["input_ids"], features.input_ids)
    np.testing.assert_array_equal(parsed["segment_ids"], features.segment_ids)
    assert parsed["label_ids"] == features.label_id


# ---------------------------------------------------------------------------
# Feature cache
# ---------------------------------------------------------------------------

class CacheFixture(object):
  """A tsv task, a vocab and a counter of write_features calls."""

  def __init__(self, tmp_path, monkeypatch):
    self.data_dir = str(tmp_path / "data")
    self.output_dir = str(tmp_path / "out")
    self.train_file = write(tmp_path / "data" / "train.tsv",
                            "label\ttext\na\thello world\nb\tthe cat sat\n")
    self.vocab_file = write_vocab(tmp_path)
    self.writes = 0
    real_write_features = featurizing_pool.write_features

    def counting_write_features(*args, **kwargs):
      self.writes += 1
      return real_write_features(*args, **kwargs)
    monkeypatch.setattr(featurizing_pool, "write_features", counting_write_features)

  def run(self, max_seq_length=8, labels=("a", "b"), do_lower_case=True, task_name="tsv"):
    processor = task_registry.get_processor("tsv")
    files = processor.input_files(self.data_dir, "train")
    cache = feature_cache.FeatureCache("train", files, list(labels), max_seq_length,
                                       self.vocab_file, do_lower_case, task_name)
    return cache.features(lambda: processor.get_train_examples(self.data_dir),
                          self.output_dir)

  def cache_files(self):
    return sorted(name for name in os.listdir(self.output_dir) if not name.startswith("."))


def test_cache_is_reused(tmp_path, monkeypatch):
  fixture = CacheFixture(tmp_path, monkeypatch)
  path, count = fixture.run()
  assert count == 2 and fixture.writes == 1
  assert os.path.dirname(path) == fixture.output_dir
  assert os.path.basename(path).startswith("train-")
  first_bytes = read_records(path)
  assert len(first_bytes) == 2
  path_again, count_again = fixture.run()
  assert (path_again, count_again) == (path, 2)
  assert fixture.writes == 1
  assert read_records(path) == first_bytes
  info_name = os.path.basename(path)[:-len(".tf_record")] + ".json"
  assert fixture.cache_files() == sorted([os.path.basename(path), info_name])


def test_cache_is_not_reused_when_an_input_changes(tmp_path, monkeypatch):
  fixture = CacheFixture(tmp_path, monkeypatch)
  paths = [fixture.run()[0]]
  write(fixture.train_file, "label\ttext\na\thello world\nb\tthe cat sat\nb\tcat\n")
  path, count = fixture.run()
  assert count == 3
  paths.append(path)
  write_vocab(tmp_path, VOCAB + ["extra"])
  paths.append(fixture.run()[0])
  paths.append(fixture.run(max_seq_length=9)[0])
  paths.append(fixture.run(labels=("b", "a"))[0])
  # The label order changed the label ids: "a" is id 1 now.
  assert [int(r["label_ids"]) for r in parse_records(paths[-1], 8)] == [1, 0, 0]
  paths.append(fixture.run(do_lower_case=False)[0])
  paths.append(fixture.run(task_name="csv")[0])
  assert fixture.writes == 7
  assert len(set(paths)) == 7
  # Stale caches are deleted: only the newest record file and its info remain.
  assert len(fixture.cache_files()) == 2
  assert os.path.basename(paths[-1]) in fixture.cache_files()


def test_cache_with_damaged_info_is_rebuilt(tmp_path, monkeypatch):
  fixture = CacheFixture(tmp_path, monkeypatch)
  path, _ = fixture.run()
  info_path = path[:-len(".tf_record")] + ".json"
  with open(info_path, "w") as f:
    f.write("{")
  assert fixture.run() == (path, 2)
  assert fixture.writes == 2
  with open(path, "ab") as f:
    f.write(b"junk")
  assert fixture.run() == (path, 2)
  assert fixture.writes == 3


def test_cache_hit_does_not_read_the_examples(tmp_path, monkeypatch):
  fixture = CacheFixture(tmp_path, monkeypatch)
  fixture.run()
  assert fixture.writes == 1

  def fail():
    raise AssertionError("examples were read although the cache is valid")
  files = [fixture.train_file]
  cache = feature_cache.FeatureCache("train", files, ["a", "b"], 8, fixture.vocab_file, True, "tsv")
  path, count = cache.features(fail, fixture.output_dir)
  assert count == 2


def test_eval_report_columns_line_up_with_chinese_labels():
  labels = [u"体育", u"财经新闻", u"sports"]
  matrix = [[3, 0, 1], [0, 2, 0], [1, 0, 4]]
  report = {"labels": labels, "num_examples": 11, "confusion_matrix": matrix,
            "per_class": dict((label, {"precision": 0.5, "recall": 0.5, "f1": 0.5,
                                       "support": 4}) for label in labels)}
  metrics = {"eval_accuracy": 0.8, "macro_f1": 0.7, "eval_loss": 0.3}
  text = classifier_metrics.format_eval_report(metrics, report)
  lines = text.splitlines()
  table = lines[2:6]
  matrix_lines = lines[-4:]

  def columns(line):  # display width up to each cell's end: the same for every row
    ends, width = [], 0
    for index, char in enumerate(line):
      width += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
      if char != " " and (index + 1 == len(line) or line[index + 1] == " "):
        ends.append(width)
    return ends

  # Labels are left-aligned; every column after them must end at the same place.
  for block in (table, matrix_lines[1:]):
    assert len(set(tuple(columns(line)[1:]) for line in block)) == 1, block
  # The header of the matrix ends each label where the counts below it end.
  assert columns(matrix_lines[0]) == columns(matrix_lines[1])[1:]


def test_each_split_is_parsed_once_even_when_labels_come_from_training(tmp_path):
  # main() reads train, dev and test, then the label list from the training file.
  for split in ("train", "dev", "test"):
    write(tmp_path / (split + ".jsonl"), '{"text": "a", "label": "x"}\n')
  processor = task_registry.get_processor("jsonl")
  parsed = []
  read_examples = processor._read_examples  # pylint: disable=protected-access

  def counting(path, split):
    parsed.append(split)
    return read_examples(path, split)

  processor._read_examples = counting  # pylint: disable=protected-access
  for split in ("train", "dev", "test"):
    processor.get_examples(str(tmp_path), split)
  assert processor.get_labels(str(tmp_path)) == ["x"]
  assert parsed == ["train", "dev", "test"]


# ---------------------------------------------------------------------------
# Input that used to be read silently wrong or to end in a traceback
# ---------------------------------------------------------------------------

def test_csv_unclosed_quote_is_an_error_not_merged_rows(tmp_path):
  # The header has two columns and so does the swallowing record: before strict mode the
  # three rows were read as one example whose text was 'hello\nb,world\nc,third\n'.
  path = write(tmp_path / "train.csv", 'label,text\na,"hello\nb,world\nc,third\n')
  assert_usage_error(lambda: read("csv", tmp_path, "train"), path, "line 2",
                     "never closed", "lines 2-4")


def test_csv_text_after_a_closing_quote_is_an_error(tmp_path):
  # Was read as 'hi there': the quotes dropped without a word.
  path = write(tmp_path / "train.csv", 'label,text\na,"hi" there\nb,ok\n')
  assert_usage_error(lambda: read("csv", tmp_path, "train"), path, "line 2",
                     "closing double quote")
  # A quote inside an unquoted field is text, as before.
  write(tmp_path / "train.csv", 'label,text\na,he said "hi" ok\n')
  assert summary(read("csv", tmp_path, "train")) == [("train-0", 'he said "hi" ok', None, "a")]


class _KeepMessages(logging.Handler):
  """A logging handler that keeps the messages of warnings and above."""

  def __init__(self):
    super(_KeepMessages, self).__init__(logging.WARNING)
    self.messages = []

  def emit(self, record):
    self.messages.append(record.getMessage())


def test_csv_records_spanning_lines_are_reported(tmp_path):
  # Legal CSV, but also what a quote closed too late looks like: say so.
  path = write(tmp_path / "train.csv", 'label,text\na,"two\nlines"\nb,one line\nc,"x\ny\nz"\n')
  records = _KeepMessages()
  file_readers._LOGGER.addHandler(records)  # pylint: disable=protected-access
  try:
    examples = read("csv", tmp_path, "train")
  finally:
    file_readers._LOGGER.removeHandler(records)  # pylint: disable=protected-access
  assert summary(examples) == [("train-0", "two\nlines", None, "a"),
                               ("train-1", "one line", None, "b"),
                               ("train-2", "x\ny\nz", None, "c")]
  warnings = [m for m in records.messages if path in m]
  assert len(warnings) == 1, records.messages
  assert "2 record(s)" in warnings[0] and "lines 2-3" in warnings[0]


@pytest.mark.parametrize("task,name", [("tsv", "train.tsv"), ("csv", "train.csv")])
def test_nul_byte_is_an_error_with_its_line(tmp_path, task, name):
  # Python 3.11's csv module and every TSV reader kept it (the tokenizer then dropped
  # it); Python 3.7's csv module refused it: now both refuse it, naming the line.
  sep = "\t" if task == "tsv" else ","
  path = write(tmp_path / name, "label%stext\na%sok\nb%shel\x00lo\n" % (sep, sep, sep))
  assert_usage_error(lambda: read(task, tmp_path, "train"), path, "line 3", "NUL",
                     "byte offset 5 of the line", "UTF-16")


def test_utf16_files_are_named_as_such(tmp_path):
  text = u"label\ttext\na\t中文\n"
  with open(str(tmp_path / "train.tsv"), "wb") as f:
    f.write(text.encode("utf-16"))
  path = str(tmp_path / "train.tsv")
  assert_usage_error(lambda: read("tsv", tmp_path, "train"), path, "UTF-16",
                     "iconv -f UTF-16")
  with open(path, "wb") as f:
    f.write(text.encode("utf-16-le"))  # no byte order mark: NUL bytes in ASCII
  assert_usage_error(lambda: read("tsv", tmp_path, "train"), path, "line 1", "NUL")


@pytest.mark.parametrize("task,name,text", [
    # Every row was merged into one example: label 'a', text 'one\rb\ttwo\rc\tthree'.
    ("thucnews", "train.txt", "a\tone\rb\ttwo\rc\tthree\r"),
    # CoLA has no header either: rows 2 and 3 were swallowed by row 1.
    ("cola", "train.tsv", "s\t1\t\tone\rs\t0\t\ttwo\rs\t1\t\tthree\r"),
    # With a header: a stray CR inside a row.
    ("tsv", "train.tsv", "label\ttext\na\tone\rb\ttwo\n"),
])
def test_carriage_return_inside_a_line_is_an_error(tmp_path, task, name, text):
  path = write(tmp_path / name, text)
  line = "line 2" if task == "tsv" else "line 1"
  assert_usage_error(lambda: read(task, tmp_path, "train"), path, line, "carriage return")


def test_labels_txt_with_cr_line_ends_is_an_error(tmp_path):
  write(tmp_path / "train.tsv", "label\ttext\na\tx\n")
  path = write(tmp_path / "labels.txt", "a\rb\r")
  assert_usage_error(lambda: task_registry.get_processor("tsv").get_labels(str(tmp_path)), path,
                     "line 1", "carriage return")


def test_jsonl_key_given_twice_is_an_error(tmp_path):
  # json.loads kept the last value silently.
  path = write(tmp_path / "train.jsonl",
               '{"label": "a", "text": "x"}\n{"label": "a", "text": "x", "text": "y"}\n')
  assert_usage_error(lambda: read("jsonl", tmp_path, "train"), path, "line 2", "'text' twice")


def test_jsonl_unpaired_surrogate_is_an_error(tmp_path):
  # Read and featurized fine; predict_detail.tsv then failed with UnicodeEncodeError.
  path = write(tmp_path / "test.jsonl",
               '{"text": "ok \\ud83d\\ude00"}\n{"text": "bad \\ud800 escape"}\n')
  assert_usage_error(lambda: read("jsonl", tmp_path, "test"), path, "line 2", "'text'",
                     "surrogate", "\\ud800", "character 5")
  write(tmp_path / "test.jsonl", '{"text": "ok \\ud83d\\ude00"}\n')
  assert summary(read("jsonl", tmp_path, "test")) == [("test-0", u"ok \U0001F600", None, None)]


def test_jsonl_nested_too_deeply_is_an_error(tmp_path):
  # A RecursionError traceback.
  path = write(tmp_path / "train.jsonl", "[" * 100000 + "]" * 100000 + "\n")
  assert_usage_error(lambda: read("jsonl", tmp_path, "train"), path, "line 1", "nested")


def test_jsonl_null_label_message_says_null(tmp_path):
  # The message said "no label key" for a label that is there, as null.
  path = write(tmp_path / "train.jsonl", '{"label": null, "text": "x"}\n')
  assert_usage_error(lambda: read("jsonl", tmp_path, "train"), path, "line 1",
                     "no label (no label key, or null)")


def test_data_file_that_is_a_directory(tmp_path):
  os.makedirs(str(tmp_path / "train.tsv"))
  assert_usage_error(lambda: read("tsv", tmp_path, "train"),
                     str(tmp_path / "train.tsv"), "is a directory")
  # THUCNews used to skip the directory silently and read the other file name.
  os.makedirs(str(tmp_path / "train.txt"))
  write(tmp_path / "cnews.train.txt", "a\tx\n")
  assert_usage_error(lambda: read("thucnews", tmp_path, "train"),
                     str(tmp_path / "train.txt"), "is a directory")


def test_label_list_that_cannot_be_written(tmp_path):
  # An IsADirectoryError traceback from the atomic writer.
  os.makedirs(str(tmp_path / "out" / "labels.txt"))
  assert_usage_error(lambda: class_labels.write_label_list(str(tmp_path / "out"), ["a", "b"]),
                     str(tmp_path / "out" / "labels.txt"), "cannot write", "a directory is in the way")


def test_check_featurizing_inputs_before_output_dir_is_claimed(tmp_path):
  # The checks write_features makes, for run_classifier_mgpu.py to make before
  # output_files.lock_output_dir() (a bad value then creates no output_dir).
  vocab_file = write_vocab(tmp_path)
  featurizing.check_featurizing_inputs(3, vocab_file)
  assert_usage_error(lambda: featurizing.check_featurizing_inputs(2, vocab_file),
                     "--max_seq_length=2")
  no_cls = write_vocab(tmp_path, [t for t in VOCAB if t != "[CLS]"], name="no_cls.txt")
  assert_usage_error(lambda: featurizing.check_featurizing_inputs(8, no_cls), no_cls, "[CLS]")
  assert sorted(os.listdir(str(tmp_path))) == ["no_cls.txt", "vocab.txt"]
