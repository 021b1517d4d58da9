# coding=utf-8
"""The benchmark data tools and scorer whose figures docs/PERFORMANCE.md records."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import make_ner_subset  # pylint: disable=wrong-import-position
import make_review_data  # pylint: disable=wrong-import-position
import score_multi_label  # pylint: disable=wrong-import-position


def test_entity_types_of_bio_and_bioes_tags():
  sentence = [("张", "B-PER"), ("三", "I-PER"), ("在", "O"), ("京", "S-LOC"), ("。", "O")]
  assert make_ner_subset.entity_types(sentence) == ["LOC", "PER"]
  assert make_ner_subset.entity_types([("好", "O")]) == []


def test_multi_label_set_written_from_sentences(tmp_path):
  splits = {"train": [[("张", "B-PER"), ("在", "O"), ("京", "B-LOC")], [("好", "O")]],
            "dev": [[("委", "B-ORG")]], "test": [[("京", "B-LOC"), ("张", "B-PER")]]}
  counts = make_ner_subset.write_multi_label(str(tmp_path), splits)
  assert (tmp_path / "train.tsv").read_text("utf-8") == "label\ttext_a\nLOC,PER\t张在京\n\t好\n"
  assert (tmp_path / "labels.txt").read_text("utf-8") == "LOC\nORG\nPER\n"
  assert counts["train"] == {"no_entity": 1, "several_types": 1}


def test_scores_against_hand_computed_counts():
  labels = ["a", "b", "c"]
  gold = [{"a", "b"}, set(), {"c"}, {"a"}]
  predicted = [{"a"}, {"b"}, {"c"}, {"a", "c"}]
  # true positives a:2 b:0 c:1 = 3; predicted 5; gold 4: micro-F1 2*3/9.
  # per label F1: a 1.0, b 0 (1 predicted, 1 gold, none right), c 2*1/(2+1).
  result = score_multi_label.scores(gold, predicted, labels)
  assert result["micro_f1"] == pytest.approx(round(6 / 9, 4))
  assert result["macro_f1"] == pytest.approx(round((1.0 + 0.0 + 2 / 3) / 3, 4))
  assert result["exact_match"] == 0.25


def test_scores_refuse_an_unknown_label():
  with pytest.raises(SystemExit, match="'z' is not in the label list"):
    score_multi_label.scores([{"a"}], [{"z"}], ["a"])


def test_review_rows_by_category_kept_when_long(tmp_path):
  path = tmp_path / "reviews.csv"
  path.write_text("cat,label,review\n书籍,1,很好的书,值得一读\n酒店,0,差\n书籍,0,一般般的书吧\n",
                  encoding="utf-8")
  rows, empty = make_review_data.read_rows(str(path), label_column=0, text_column=2)
  assert rows == [("书籍", "很好的书,值得一读"), ("酒店", "差"), ("书籍", "一般般的书吧")]
  assert empty == 0
  assert make_review_data.keep_rows(rows, min_chars=2, max_per_label=1) == [
      ("书籍", "很好的书,值得一读")]
  assert make_review_data.keep_rows(rows, min_chars=0, max_per_label=0) == rows
