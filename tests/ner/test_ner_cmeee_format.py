# coding=utf-8
"""Tests of the CMeEE format and of the span writers (bert_mgpu/ner/{formats,writers,
predictions}.py): CMeEE's JSON array and JSON lines read with their nested spans, every
refusal naming file and line, round trips through every format with nested spans kept,
the tags' overlap dropping for CMeEE, and --data_format=auto never guessing CMeEE."""

import json
import os

import pytest

from bert_mgpu.ner import formats
from bert_mgpu.ner import predictions
from bert_mgpu.ner import splits
from bert_mgpu.ner import writers
import tiny_task_files
import usage_errors

# Nested (肺 inside 肺部感染, 感染 inside it too), same span with two types (发热), and a
# record without entities.
RECORDS = [
    {"text": u"患者肺部感染伴发热。",
     "entities": [{"start_idx": 2, "end_idx": 5, "type": "dis", "entity": u"肺部感染"},
                  {"start_idx": 2, "end_idx": 2, "type": "bod", "entity": u"肺"},
                  {"start_idx": 4, "end_idx": 5, "type": "sym", "entity": u"感染"},
                  {"start_idx": 7, "end_idx": 8, "type": "sym", "entity": u"发热"},
                  {"start_idx": 7, "end_idx": 8, "type": "dis", "entity": u"发热"}]},
    {"text": u"无", "entities": []},
    {"text": u"口服阿司匹林", "entities": [{"start_idx": 2, "end_idx": 5, "type": "dru"}]},
]
SPANS = [[("dis", 2, 6), ("bod", 2, 3), ("sym", 4, 6), ("dis", 7, 9), ("sym", 7, 9)], [],
         [("dru", 2, 6)]]
SORTED_SPANS = [[("bod", 2, 3), ("dis", 2, 6), ("sym", 4, 6), ("dis", 7, 9), ("sym", 7, 9)],
                [], [("dru", 2, 6)]]


def write(path, text):
  return tiny_task_files.write_text(str(path), text)


def read(path):
  with open(str(path), encoding="utf-8") as f:
    return f.read()


def error_of(function, *args):
  """The one-line UsageError message of function(*args)."""
  return usage_errors.assert_usage_error(lambda: function(*args))


def array_file(tmp_path, records, name="CMeEE_train.json"):
  """CBLUE's layout: an indented JSON array (each record starts on its own line)."""
  return write(tmp_path / name, json.dumps(records, ensure_ascii=False, indent=2))


def lines_file(tmp_path, records, name="train.json"):
  return write(tmp_path / name, u"".join(json.dumps(r, ensure_ascii=False) + u"\n"
                                         for r in records))


def record_lines(tmp_path, records):
  """The 1-based line where each record of array_file's layout starts."""
  lines = read(array_file(tmp_path, records, "probe.json")).split("\n")
  return [number for number, line in enumerate(lines, 1) if line == "  {"]


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("layout", [array_file, lines_file])
def test_cmeee_read_with_nested_spans(tmp_path, layout):
  data = formats.read_cmeee(layout(tmp_path, RECORDS))
  assert data.data_format == "cmeee" and data.tagged and data.lines is None
  assert [s.spans for s in data.sentences] == SORTED_SPANS
  assert [s.example_id for s in data.sentences] == [0, 1, 2]
  first = data.sentences[0]
  assert first.tokens == list(RECORDS[0]["text"]) and first.token_starts == list(range(10))
  # The tags keep 肺部感染 (earliest, longest) and the first 发热 of (start, -end, order).
  assert first.tags == ["O", "O", "B-dis", "I-dis", "I-dis", "I-dis", "O", "B-sym", "I-sym",
                        "O"]
  assert data.dropped_overlaps == 3
  lines = record_lines(tmp_path, RECORDS) if layout is array_file else [1, 2, 3]
  assert data.first_overlap_line == lines[0]
  assert [s.source_line for s in data.sentences] == lines
  assert data.sentences[2].tags == ["O", "O", "B-dru", "I-dru", "I-dru", "I-dru"]
  bioes = formats.read_cmeee(layout(tmp_path, RECORDS), "BIOES")
  assert bioes.sentences[0].tags[7:9] == ["B-sym", "E-sym"]


def test_cmeee_test_file_without_entities(tmp_path):
  path = write(tmp_path / "CMeEE_test.json",
               u'\ufeff\n [ {"text": "患者发热"},\r\n{"text": ""} ]\n')
  data = formats.read_cmeee(path)
  assert not data.tagged
  assert [(s.text, s.tags, s.spans, s.source_line) for s in data.sentences] == [
      (u"患者发热", None, None, 2), (u"", None, None, 3)]


def test_cmeee_refusals_name_file_and_line(tmp_path):
  lines = record_lines(tmp_path, RECORDS + [{}])
  cases = [  # (records, index of the bad record, what the message quotes)
      ([{"text": u"肺部", "entities": [{"start_idx": 0, "end_idx": 1, "type": "bod",
                                       "entity": u"肺"}]}], 0, u'"肺部"'),
      ([{"text": u"肺", "entities": [{"start_idx": 0, "end_idx": 3, "type": "bod"}]}], 0,
       "[0, 3]"),
      ([{"text": u"肺", "entities": [{"start_idx": 0, "end_idx": -1, "type": "bod"}]}], 0,
       "[0, -1]"),
      ([{"text": u"肺", "entities": [{"start_idx": True, "end_idx": 0, "type": "bod"}]}], 0,
       '"start_idx" is true'),
      ([{"text": u"肺", "entities": [{"start_idx": 0, "type": "bod"}]}], 0,
       '"end_idx" is null'),
      ([{"text": u"肺", "entities": [{"start_idx": 0, "end_idx": 0, "type": "b od"}]}], 0,
       '"b od"'),
      ([{"text": u"肺", "entities": [{"start_idx": 0, "end_idx": 0, "type": ""}]}], 0, '""'),
      ([{"text": u"肺", "entities": [{"start_idx": 0, "end_idx": 0, "type": "bod",
                                     "entity": 1}]}], 0, '"entity" is 1'),
      ([{"text": u"肺", "entities": ["bod"]}], 0, '"bod"'),
      ([{"text": u"肺", "entities": {}}], 0, '"entities" is {}'),
      (RECORDS + [{"entities": []}], 3, '"text" is null'),
      (RECORDS + [{"text": u"肺"}], 3, 'no "entities" but the record on line {first} has one'),
      ([{"text": u"肺"}] + RECORDS, 1, '"entities" given but the record on line {first} has '
       'none'),
      (RECORDS + [[u"肺"]], 3, 'expected a JSON object, got '),
  ]
  for records, bad, quoted in cases:
    for layout, line in ((array_file, record_lines(tmp_path, records)[bad]
                          if isinstance(records[bad], dict) else None), (lines_file, bad + 1)):
      path = layout(tmp_path, records)
      message = error_of(formats.read_cmeee, path)
      if line is None:  # a non-object element: its line is that of its "["
        line = read(path).split("\n").index("  [") + 1
      assert message.startswith("%s line %d: " % (path, line)), (message, line)
      first = lines[0] if layout is array_file else 1
      assert quoted.replace("{first}", str(first)) in message, (message, quoted)


def test_cmeee_array_syntax_errors(tmp_path):
  cases = [  # (file text, line, what the message says)
      (u'[\n{"text": "a", "entities": []},\n{"text": "b", "text": "c"}\n]', 3,
       'the key "text" twice'),
      (u'[\n{"text": "a"},\n{"text": "b",\n "entities": [}\n]', 4, "invalid JSON"),
      (u'[\n{"text": "a"},\n{"text": "b"},\n]', 4, 'a "," before the closing "]"'),
      (u'[\n{"text": "a"}\n{"text": "b"}\n]', 3, 'expected "," or "]"'),
      (u'[\n{"text": "a"},\n{"text": "b"}\n', 4, 'not closed'),
      (u'[\n{"text": "a"}\n]\n\n[]\n', 5, '"[]\\n" after the array'),
      (u'[\n{"text": "a"},\n', 3, "invalid JSON"),
  ]
  for text, line, problem in cases:
    path = write(tmp_path / "CMeEE_dev.json", text)
    message = error_of(formats.read_cmeee, path)
    assert message.startswith("%s line %d: " % (path, line)), (message, line)
    assert problem in message, (message, problem)
  for text in (u"[]", u" \n"):
    assert "no records" in error_of(formats.read_cmeee, write(tmp_path / "e.json", text))
  message = error_of(formats.read_cmeee, write(tmp_path / "l.json", u'{"text": "a"}\n{"t\n'))
  assert "l.json line 2" in message and "invalid JSON" in message


# ---------------------------------------------------------------------------
# Data directories and the tags' overlap dropping
# ---------------------------------------------------------------------------

def test_auto_never_guesses_cmeee(tmp_path):
  data_dir = str(tmp_path)
  array_file(tmp_path, RECORDS, "CMeEE_train.json")
  array_file(tmp_path, RECORDS, "CMeEE_dev.json")
  message = error_of(formats.detect_data_format, data_dir)
  assert "--data_format=cmeee" in message and "CMeEE_dev.json, CMeEE_train.json" in message
  assert formats.split_path(data_dir, "cmeee", "train").endswith("CMeEE_train.json")
  lines_file(tmp_path, [{"text": u"李明", "label": {"name": {u"李明": [[0, 1]]}}}])
  assert formats.detect_data_format(data_dir) == "cluener"  # train.json is CLUENER's
  assert formats.split_path(data_dir, "cmeee", "train").endswith("CMeEE_train.json")
  os.remove(str(tmp_path / "CMeEE_train.json"))
  os.remove(str(tmp_path / "train.json"))
  lines_file(tmp_path, RECORDS, "train.json")
  assert formats.split_path(data_dir, "cmeee", "train").endswith(os.sep + "train.json")
  assert formats.read_split(data_dir, "cmeee", "train").data_format == "cmeee"
  message = error_of(formats.split_path, data_dir, "cmeee", "test")
  assert "CMeEE_test.json, test.json" in message and "--do_predict" in message


def test_read_split_needs_entities_in_train_and_dev(tmp_path):
  path = array_file(tmp_path, [{"text": u"肺"}], "CMeEE_dev.json")
  message = error_of(formats.read_split, str(tmp_path), "cmeee", "dev")
  assert message.startswith(path + " line 2: ") and 'no "entities" in a dev file' in message


def test_read_splits_warns_of_the_spans_the_tags_drop(tmp_path, monkeypatch):
  array_file(tmp_path, RECORDS, "CMeEE_train.json")
  array_file(tmp_path, RECORDS[1:], "CMeEE_dev.json")
  warnings = []
  monkeypatch.setattr(splits.tf.logging, "warning",
                      lambda message, *args: warnings.append(message % args))
  read, data_format, label_list, scheme = splits.read_splits(
      str(tmp_path), "cmeee", ["train", "dev"], str(tmp_path))
  assert data_format == "cmeee" and scheme == splits.CLUENER_SCHEME == "BIO"
  assert label_list == ["O", "B-dis", "B-dru", "B-sym", "I-dis", "I-dru", "I-sym"]
  assert read["dev"].data.dropped_overlaps == 0
  assert warnings == ["%s: 3 entities overlap an earlier one and were dropped from the tags "
                      "(first on line 2)." % read["train"].data.path]


# ---------------------------------------------------------------------------
# Round trips and the prediction files
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("layout", [array_file, lines_file])
def test_cmeee_round_trip(tmp_path, layout):
  data = formats.read_cmeee(layout(tmp_path, RECORDS))
  again = formats.read_cmeee(write(tmp_path / "copy.json", writers.format_cmeee(
      data.sentences)))
  assert [(s.text, s.spans) for s in again.sentences] == [
      (s.text, s.spans) for s in data.sentences]
  # The tags' choice between two types of one span follows the file's order (_drop_overlaps),
  # which format_cmeee sorts: the rest of the tags reads back the same.
  assert again.sentences[0].tags[:7] == data.sentences[0].tags[:7]
  assert [s.tags for s in again.sentences[1:]] == [s.tags for s in data.sentences[1:]]
  written = json.loads(writers.format_cmeee(data.sentences, SPANS))
  for record, original in zip(written, RECORDS):
    key = lambda e: (e["start_idx"], e["end_idx"], e["type"])
    assert record["entities"] == sorted(
        [dict(e, entity=original["text"][e["start_idx"]:e["end_idx"] + 1])
         for e in original["entities"]], key=key)
  assert list(written[0]["entities"][0]) == ["start_idx", "end_idx", "type", "entity"]


def test_cmeee_predictions_file(tmp_path):
  test = formats.read_cmeee(array_file(tmp_path, [{"text": r["text"]} for r in RECORDS],
                                       "CMeEE_test.json"))
  out = str(tmp_path / "CMeEE_test.json")
  writers.write_cmeee_predictions(out, test.sentences, SPANS)
  assert read(out).startswith(u'[\n  {\n    "text": "患者肺部感染伴发热。",\n')
  assert [s.spans for s in formats.read_cmeee(out).sentences] == SORTED_SPANS
  assert not [name for name in os.listdir(str(tmp_path)) if "tmp" in name]
  for bad in (SPANS[:2], [[("dis", 2, 11)], [], []], [[("dis", 3, 3)], [], []]):
    with pytest.raises(ValueError):
      writers.write_cmeee_predictions(out, test.sentences, bad)


def test_cluener_nested_spans_round_trip(tmp_path):
  lines = [{"id": 3, "text": u"中国人民银行北京分行",
            "label": {"organization": {u"中国人民银行北京分行": [[0, 9]],
                                       u"中国人民银行": [[0, 5]]},
                      "address": {u"中国": [[0, 1]], u"北京": [[6, 7]]}}}]
  path = lines_file(tmp_path, lines)
  data = formats.read_cluener(path)
  sentence = data.sentences[0]
  assert sentence.spans == [("address", 0, 2), ("organization", 0, 6),
                            ("organization", 0, 10), ("address", 6, 8)]
  assert data.dropped_overlaps == 3 and sentence.tags[9] == "I-organization"
  assert writers.cluener_label(sentence, sentence.spans) == lines[0]["label"]
  again = formats.read_cluener(write(tmp_path / "copy.json",
                                     writers.format_cluener(data.sentences)))
  assert again.sentences[0].spans == sentence.spans
  out = str(tmp_path / "predict.json")
  writers.write_cluener_predictions(out, data.sentences, [sentence.spans])
  assert json.loads(read(out)) == {"id": 3, "label": lines[0]["label"]}


class _Split(object):
  def __init__(self, data):
    self.data = data


def test_write_predictions_of_every_format(tmp_path):
  conll = formats.read_conll(write(tmp_path / "test.txt", u"李 B-PER\n明 I-PER\n去 O\n"
                                                           u"北 I-LOC\n京 E-LOC\n"))
  tags = [conll.sentences[0].tags]
  assert conll.sentences[0].spans == [("PER", 0, 2), ("LOC", 3, 5)]
  predictions.write_predictions(str(tmp_path), _Split(conll), "conll", tags)
  assert read(tmp_path / "predict.txt").split("\n")[3] == u"北 I-LOC\tI-LOC"
  entities = json.loads(read(tmp_path / "predict_entities.jsonl"))["entities"]
  assert [(e["type"], e["text"]) for e in entities] == [("PER", u"李明"), ("LOC", u"北京")]
  os.remove(str(tmp_path / "predict.txt"))
  predictions.write_predictions(str(tmp_path), _Split(conll), "conll", None,
                                [[("PER", 0, 2), ("LOC", 0, 3)]])
  assert not os.path.exists(str(tmp_path / "predict.txt"))  # a span head writes no tags
  entities = json.loads(read(tmp_path / "predict_entities.jsonl"))["entities"]
  assert [e["text"] for e in entities] == [u"李明", u"李明去"]
  cmeee = formats.read_cmeee(array_file(tmp_path, RECORDS, "in.json"))
  predictions.write_predictions(str(tmp_path), _Split(cmeee), "cmeee", None, SPANS)
  assert [s.spans for s in formats.read_cmeee(str(tmp_path / "CMeEE_test.json")).sentences
          ] == SORTED_SPANS
  assert [len(json.loads(line)["entities"]) for line in
          read(tmp_path / "predict_entities.jsonl").splitlines()] == [5, 0, 1]
  predictions.write_predictions(str(tmp_path), _Split(cmeee), "cluener",
                                [s.tags for s in cmeee.sentences])
  label = json.loads(read(tmp_path / "predict.json").split("\n")[0])["label"]
  assert label == {"dis": {u"肺部感染": [[2, 5]]}, "sym": {u"发热": [[7, 8]]}}
  with pytest.raises(ValueError):
    predictions.write_predictions(str(tmp_path), _Split(cmeee), "auto", None, SPANS)
