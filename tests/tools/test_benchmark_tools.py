# coding=utf-8
"""The benchmark data tools and scorer whose figures docs/PERFORMANCE.md records."""

import json
import sys

import pytest

import cli

sys.path.insert(0, cli.script_path("benchmarks"))

import make_cmeee_corpus  # pylint: disable=wrong-import-position
import make_ner_subset  # pylint: disable=wrong-import-position
import make_pretraining_corpus  # pylint: disable=wrong-import-position
import make_review_data  # pylint: disable=wrong-import-position
import score_multi_label  # pylint: disable=wrong-import-position
import score_spans  # pylint: disable=wrong-import-position


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


def test_rest_of_the_corpus_leaves_out_what_shares_a_run_with_dev_or_test(tmp_path):
  def chars(text):
    return [(char, "O") for char in text]

  held_out = ["我们在北京的人民大会堂开会讨论了今年的经济工作", "好"]
  rest = [chars("今天天气很好"), chars("今天天气很好"),  # a duplicate, written once
          chars("他们在北京的人民大会堂开会讨论了今年的经济工作安排"),  # a 20-char run shared
          chars("好"),  # equals a held-out sentence
          chars("上海是一座城市")]
  rest_file, corpus_file = tmp_path / "rest.txt", tmp_path / "corpus.txt"
  texts, left_out = make_ner_subset.write_rest(str(rest_file), str(corpus_file), rest,
                                               held_out, seed=1)
  assert sorted(texts) == ["上海是一座城市", "今天天气很好"] and left_out == 2
  assert rest_file.read_text("utf-8") == "".join(t + "\n" for t in texts)
  assert corpus_file.read_text("utf-8") == rest_file.read_text("utf-8")  # one document


def test_cmeee_corpus_reads_chip_and_cmeee_texts_and_leaves_out_dev_and_test(
    tmp_path, monkeypatch, capsys):
  held = "患者出现持续性发热伴咳嗽三天余，查体见双肺呼吸音粗"
  (tmp_path / "chip.txt").write_text(
      "胸痛|||0 1 sym|||\n\n" + "入院后" + held[:22] + "|||\n头晕|||\n", encoding="utf-8")
  (tmp_path / "train.json").write_text(json.dumps(
      [{"text": "腹痛", "entities": []}, {"text": "胸痛", "entities": []}]), encoding="utf-8")
  (tmp_path / "dev.json").write_text(json.dumps([{"text": held, "entities": []}]),
                                     encoding="utf-8")
  monkeypatch.setattr(sys, "argv", [
      "make_cmeee_corpus.py", "--chip", str(tmp_path / "chip.txt"),
      "--cmeee", str(tmp_path / "train.json"), "--held_out", str(tmp_path / "dev.json"),
      "--output_file", str(tmp_path / "corpus.txt"), "--texts_per_document", "2"])
  make_cmeee_corpus.main()
  summary = json.loads(capsys.readouterr().out)
  assert summary["read"] == 5 and summary["distinct"] == 4
  assert summary["left_out_as_held_out"] == 1 and summary["documents"] == 2
  documents = (tmp_path / "corpus.txt").read_text("utf-8").split("\n\n")
  assert sorted("\n".join(documents).split()) == ["头晕", "胸痛", "腹痛"]


def test_span_scores_count_exact_triples_and_nested_ones(tmp_path, monkeypatch):
  def write(name, entity_lists):
    text = "0123456789"
    records = [{"text": text, "entities": [
        {"start_idx": s, "end_idx": e, "type": t, "entity": text[s:e + 1]}
        for t, s, e in entities]} for entities in entity_lists]
    (tmp_path / name).write_text(json.dumps(records), encoding="utf-8")
    return str(tmp_path / name)

  # Gold: dis 0-5 holding bod 2-3 (nested), sym 7-8. Predicted: dis 0-5 and bod 2-3 right,
  # sym 7-9 wrong (end), dis 9-9 extra.
  gold = score_spans.read_spans(write("gold.json", [[("dis", 0, 5), ("bod", 2, 3)],
                                                    [("sym", 7, 8)]]))
  predicted = score_spans.read_spans(write("pred.json", [[("bod", 2, 3), ("dis", 0, 5)],
                                                         [("sym", 7, 9), ("dis", 9, 9)]]))
  result = score_spans.summary(gold, predicted)
  assert (result["gold"], result["predicted"]) == (3, 4)
  assert result["precision"] == pytest.approx(0.5) and result["recall"] == pytest.approx(2 / 3)
  assert (result["nested_found"], result["nested_support"]) == (1, 1)
  assert result["nested_recall"] == 1.0
  bad = write("bad.json", [[("dis", 3, 12)]])  # past the text's end
  monkeypatch.setattr(sys, "argv", ["score_spans.py", "--gold", bad, bad])
  with pytest.raises(SystemExit, match=r"^error: .*bad.json line 1: dis span \[3, 12\]"):
    score_spans.main()


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


def test_bury_in_filler_puts_each_cue_whole_at_its_offset_among_fillers():
  import random  # pylint: disable=import-outside-toplevel
  rows = [("书籍", "这本书很好看"), ("手机", "手机屏幕清楚"), ("水果", "苹果很甜")]
  fillers = ["送餐很快", "味道一般般", "米饭有点硬", "下次还点"]
  documents, offsets = make_review_data.bury_in_filler(rows, fillers, random.Random(3), 20, 30)
  assert [label for label, _ in documents] == ["书籍", "手机", "水果"]
  cue_first = set()
  for (_, cue), (_, document), offset in zip(rows, documents, offsets):
    assert document[offset:offset + len(cue)] == cue
    assert len(document) >= 20
    rest = (document[:offset] + document[offset + len(cue):]).split()
    assert rest and all(text in fillers for text in rest)
    cue_first.add(offset == 0)
  assert cue_first == {True, False}  # with this seed, cues both first and after fillers
  with pytest.raises(ValueError, match="no filler texts"):
    make_review_data.bury_in_filler(rows, [], random.Random(3), 20, 30)


def test_bury_splits_gives_each_split_its_own_fillers_and_counts_cue_tokens():
  import random  # pylint: disable=import-outside-toplevel
  splits = {"dev": [("a", "甲乙")], "test": [("b", "丙丁")],
            "train": [("a", "甲乙丙"), ("b", "丁戊"), ("a", "己庚")]}
  fillers = ["填%d号" % i for i in range(20)]
  places = make_review_data.bury_splits(splits, fillers, random.Random(0), (12, 16), 0.25,
                                        0.25)
  used = {}
  for name, documents in splits.items():
    words = set(w for _, document in documents for w in document.split())
    used[name] = words & set(fillers)
    assert used[name]
  assert not (used["dev"] & used["test"] or used["dev"] & used["train"] or
              used["test"] & used["train"])
  cues = ("甲乙", "丙丁", "甲乙丙", "丁戊", "己庚")
  for name, documents in splits.items():
    for (_, document), (start, end) in zip(documents, places[name]):
      tokens = document.replace(" ", "")
      assert tokens[start:end] in cues and (start == 0) == (document.split()[0] in cues)
    # Cues of 2-3 tokens: wholly within 4 tokens exactly when they come first.
    first = [document.split()[0] in cues for _, document in documents]
    shares = make_review_data.shares_within(places[name], 4)
    assert shares[1] == round(sum(first) / float(len(first)), 4)
    assert shares[0] >= shares[1]


def test_sampled_rows_leave_no_label_crowding_dev_and_test():
  import random  # pylint: disable=import-outside-toplevel
  rows = [("common", "好评%d" % i) for i in range(900)] + [("rare", "差评%d" % i)
                                                         for i in range(100)]
  kept = make_review_data.sample_rows(rows, random.Random(5), 0, 50)
  assert len(kept) == 100
  splits = make_review_data.split_rows(kept, 0.2, 0.2)
  for name in ("dev", "test"):
    common = sum(label == "common" for label, _ in splits[name]) / float(len(splits[name]))
    # 0.5 overall; without the second shuffle, 0.85 in dev.
    assert 0.25 <= common <= 0.75, (name, common)


def test_pretraining_corpus_leaves_out_every_held_out_text(tmp_path, monkeypatch):
  (tmp_path / "a.csv").write_text(
      "cat,label,review\n书籍,1,这本书很好看\n水果,0,苹果不新鲜\n手机,1,屏幕很清楚\n", "utf-8")
  (tmp_path / "b.csv").write_text("label,review\n1,送餐很快\n0,菜凉了\n1,送餐很快\n", "utf-8")
  # A dev document buries one review among fillers; a test document is one review alone.
  (tmp_path / "dev.tsv").write_text("label\ttext_a\n水果\t菜凉了 苹果不新鲜 好吃\n", "utf-8")
  (tmp_path / "test.tsv").write_text("label\ttext_a\n手机\t屏幕很清楚\n", "utf-8")
  output = tmp_path / "corpus.txt"
  monkeypatch.setattr(sys, "argv", [
      "make_pretraining_corpus.py", "--csv", str(tmp_path / "a.csv") + ":2",
      "--csv", str(tmp_path / "b.csv"), "--held_out", str(tmp_path / "dev.tsv"),
      "--held_out", str(tmp_path / "test.tsv"), "--output_file", str(output),
      "--texts_per_document", "1"])
  make_pretraining_corpus.main()
  documents = output.read_text("utf-8").split("\n\n")
  assert sorted(document.strip() for document in documents) == ["这本书很好看", "送餐很快"]


def test_pretraining_corpus_leaves_out_texts_sharing_a_run_with_a_held_out_text():
  held_out = ["菜凉了 屏幕很清楚，电池也耐用 好吃"]
  texts = ["屏幕很清楚，电池也耐用，推荐购买",  # holds a held-out review: shares a run
           "我觉得屏幕很清楚，电池也耐用",  # a near-copy
           "1,屏幕很清楚，电池也耐用",  # read from the wrong column
           "电池也耐",  # short, inside a held-out text
           "屏幕很清楚，物流也很快，下次再来"]  # shares only 6 characters
  kept, left_out = make_pretraining_corpus.leave_out_held_out(texts, held_out, 8)
  assert kept == ["屏幕很清楚，物流也很快，下次再来"] and left_out == 4


def test_pretraining_corpus_groups_texts_into_documents_of_lines():
  assert make_pretraining_corpus.group_documents(list("abcde"), 2) == [["a", "b"], ["c", "d"],
                                                                      ["e"]]
  assert make_pretraining_corpus.parse_csv_argument("/x/a.csv:2") == ("/x/a.csv", 2)
  assert make_pretraining_corpus.parse_csv_argument("/x/a.csv") == ("/x/a.csv", 1)
