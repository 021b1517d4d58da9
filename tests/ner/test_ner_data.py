# coding=utf-8
"""Tests of bert_mgpu/ner/{formats,tag_labels,writers,featurizing}.py: the conll and CLUENER
formats read and written back, first-piece alignment on mixed Chinese/Latin/digit/space
text, windows of long sentences, mapping window predictions back to tokens, and the bad
inputs (one-line errors naming file, line and value)."""

import collections
import json
import random

import pytest

from bert_mgpu.data import sequence_windows
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import featurizing
from bert_mgpu.ner import formats
from bert_mgpu.ner import scoring as ner_scoring
from bert_mgpu.ner import tag_labels
from bert_mgpu.ner import writers
import tokenization

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CHINESE = u"我在北京买了部手机他说你好中国人民银行上海，。李明去"
LATIN_PIECES = [u"new", u"york", u"ip", u"##hone", u"##12", u"12", u"2019"] + list(
    u"abcdefghijklmnopqrstuvwxyz0123456789")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("vocab") / "vocab.txt")
  with open(path, "w", encoding="utf-8") as f:
    f.write(u"".join(t + u"\n" for t in SPECIAL_TOKENS + list(CHINESE) + LATIN_PIECES))
  return tokenization.FullTokenizer(path, do_lower_case=True)


def write(path, text):
  with open(str(path), "w", encoding="utf-8", newline="") as f:
    f.write(text)
  return str(path)


def read(path):
  with open(str(path), encoding="utf-8", newline="") as f:
    return f.read()


def error_of(function, *args):
  with pytest.raises(UsageError) as info:
    function(*args)
  message = str(info.value)
  assert "\n" not in message
  return message


# ---------------------------------------------------------------------------
# conll
# ---------------------------------------------------------------------------

CONLL_TRAIN = (u"-DOCSTART- O\n"
               u"\n"
               u"李 B-PER\r\n"
               u"明\tI-PER\n"
               u"去  \t O\n"
               u"北 x B-LOC\n"
               u"京 I-LOC\n"
               u"\n"
               u"\n"
               u"  \n"
               u"你 O\n"
               u"好 O")


def test_conll_read(tmp_path):
  path = write(tmp_path / "train.txt", CONLL_TRAIN)
  data = formats.read_conll(path)
  assert data.tagged and data.data_format == "conll"
  assert len(data.lines) == 12 and data.lines[2] == u"李 B-PER"
  first, second = data.sentences
  assert first.tokens == list(u"李明去北京")
  assert first.tags == ["B-PER", "I-PER", "O", "B-LOC", "I-LOC"]
  assert first.token_lines == [3, 4, 5, 6, 7] and first.source_line == 3
  assert first.text == u"李明去北京" and first.token_starts == [0, 1, 2, 3, 4]
  assert second.tokens == list(u"你好") and second.token_lines == [11, 12]
  assert tag_labels.detect_file_scheme(data) == "BIO"


def test_conll_written_back_reads_the_same(tmp_path):
  data = formats.read_conll(write(tmp_path / "train.txt", CONLL_TRAIN))
  again = formats.read_conll(write(tmp_path / "copy.txt", writers.format_conll(
      data.sentences)))
  assert [(s.tokens, s.tags) for s in again.sentences] == [
      (s.tokens, s.tags) for s in data.sentences]


def test_conll_predict_txt_has_one_line_per_test_line(tmp_path):
  test_text = u"李\n明\n \n\n北 \n京\n"
  data = formats.read_conll(write(tmp_path / "test.txt", test_text))
  assert not data.tagged and data.sentences[0].tags is None
  out = str(tmp_path / "predict.txt")
  writers.write_conll_predictions(out, data, [["B-PER", "I-PER"], ["B-LOC", "I-LOC"]])
  assert read(out) == u"李\tB-PER\n明\tI-PER\n \n\n北\tB-LOC\n京\tI-LOC\n"
  # A tagged test file gives conlleval's `token gold pred`; -DOCSTART- gets O.
  data = formats.read_conll(write(tmp_path / "test2.txt", CONLL_TRAIN))
  writers.write_conll_predictions(out, data, [s.tags for s in data.sentences])
  lines = read(out).split("\n")
  assert len(lines) == len(data.lines) + 1 and lines[-1] == ""
  assert lines[0] == u"-DOCSTART- O\tO"
  assert lines[2] == u"李 B-PER\tB-PER" and lines[4] == u"去  \t O\tO"
  assert lines[9] == u"  " and lines[11] == u"好 O\tO"
  with pytest.raises(ValueError):
    writers.write_conll_predictions(out, data, [["O"]])


def test_join_conll_tokens():
  assert formats.join_conll_tokens(list(u"1997年")) == (u"1997年", [0, 1, 2, 3, 4])
  text, starts = formats.join_conll_tokens([u"我", u"爱", u"New", u"York", u"，", u"2019"])
  assert text == u"我爱New York ， 2019"
  assert starts == [0, 1, 2, 6, 11, 13]


def test_conll_bad_inputs(tmp_path):
  message = error_of(formats.read_conll, write(tmp_path / "mixed.txt", u"李 B-PER\n明\n"))
  assert "mixed.txt line 2" in message and "no tag column" in message and u'"明"' in message
  message = error_of(formats.read_conll, write(tmp_path / "bad.txt",
                                               u"李 B-PER\n\n明 X-FOO\n"))
  assert "bad.txt line 3" in message and '"X-FOO"' in message
  message = error_of(formats.read_conll, write(tmp_path / "empty.txt", u"\n \n"))
  assert "empty.txt" in message and "no sentences" in message
  message = error_of(formats.read_conll, write(tmp_path / "cr.txt", u"李 O\r明 O\n"))
  assert "cr.txt line 1" in message
  error_of(formats.read_conll, str(tmp_path / "missing.txt"))


def test_tags_outside_the_training_scheme(tmp_path):
  train = formats.read_conll(write(tmp_path / "train.txt", u"李 B-PER\n明 I-PER\n"))
  dev = formats.read_conll(write(tmp_path / "dev.txt", u"李 O\n\n李 B-PER\n明 E-PER\n"))
  scheme = tag_labels.detect_file_scheme(train)
  message = error_of(tag_labels.check_tags, dev, scheme)
  assert "dev.txt line 4" in message and '"E-PER"' in message and "BIO" in message
  labels = tag_labels.resolve_label_list(train, str(tmp_path))
  other = formats.read_conll(write(tmp_path / "other.txt", u"李 B-ORG\n"))
  message = error_of(tag_labels.check_tags, other, scheme, labels)
  assert "other.txt line 1" in message and '"B-ORG"' in message


def test_bmes_scheme_and_mixed_schemes(tmp_path):
  bmes = formats.read_conll(write(tmp_path / "train.char.bmes",
                                  u"中 B-ORG\n国 M-ORG\n人 E-ORG\n李 S-PER\n"))
  assert tag_labels.detect_file_scheme(bmes) == "BMES"
  mixed = formats.read_conll(write(tmp_path / "mixed.txt", u"中 B-ORG\n国 I-ORG\n\n人 M-ORG\n"))
  message = error_of(tag_labels.detect_file_scheme, mixed)
  assert "mixed.txt line 4" in message and "line 2" in message and '"I-ORG"' in message


def test_label_list(tmp_path):
  train = formats.read_conll(write(tmp_path / "train.txt",
                                   u"李 B-PER\n明 I-PER\n在 O\n北 B-LOC\n京 I-LOC\n"))
  assert tag_labels.resolve_label_list(train, str(tmp_path)) == [
      "O", "B-LOC", "B-PER", "I-LOC", "I-PER"]
  write(tmp_path / "labels.txt", u"O\nB-PER\nI-PER\n\nB-LOC\nI-LOC\nB-ORG\n")
  assert tag_labels.resolve_label_list(train, str(tmp_path)) == [
      "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG"]
  write(tmp_path / "labels.txt", u"B-PER\nI-PER\n")
  assert "no label O" in error_of(tag_labels.resolve_label_list, train, str(tmp_path))
  write(tmp_path / "labels.txt", u"O\nB-PER\nB-PER\n")
  assert "labels.txt line 3" in error_of(tag_labels.resolve_label_list, train, str(tmp_path))


def test_labels_txt_holds_tags_and_o(tmp_path):
  path = write(tmp_path / "labels.txt", u"O\nB-PER\n\nI-PER\n")
  assert tag_labels.read_label_file(path) == ["O", "B-PER", "I-PER"]
  write(tmp_path / "labels.txt", u"O\nB-PER\nB-PER \n")
  assert error_of(tag_labels.read_label_file, path) == (
      '%s line 3: label "B-PER" is listed twice (first on line 2); list every label once'
      % path)
  write(tmp_path / "labels.txt", u"O\nB-PER\nPER\n")
  assert error_of(tag_labels.read_label_file, path) == (
      '%s line 3: label "PER" is not O nor B-, I-, M-, E- or S-<type>; list the tags of the '
      'data' % path)
  write(tmp_path / "labels.txt", u"B-PER\nI-PER\n")
  assert error_of(tag_labels.read_label_file, path) == (
      "%s: no label O; list O and every other tag, one per line" % path)
  write(tmp_path / "labels.txt", u"\n")
  assert "no labels in the file" in error_of(tag_labels.read_label_file, path)


# ---------------------------------------------------------------------------
# CLUENER
# ---------------------------------------------------------------------------

CLUENER_LINES = [
    {"id": 7, "text": u"李明在北京买了iPhone",
     "label": {"name": {u"李明": [[0, 1]]}, "address": {u"北京": [[3, 4]]},
               "product": {u"iPhone": [[7, 12]]}}},
    {"text": u"你好", "label": {}},
    {"id": "x-3", "text": u"北京北京 New York",
     "label": {"address": {u"北京": [[0, 1], [2, 3]], u"New York": [[5, 12]]}}},
]


def cluener_file(tmp_path, lines, name="train.json"):
  return write(tmp_path / name, u"".join(json.dumps(line, ensure_ascii=False) + u"\n"
                                         for line in lines))


def test_cluener_read_bio_and_bioes(tmp_path):
  path = cluener_file(tmp_path, CLUENER_LINES)
  data = formats.read_cluener(path)
  assert data.tagged and data.lines is None and data.dropped_overlaps == 0
  first = data.sentences[0]
  assert first.tokens == list(u"李明在北京买了iPhone") and first.example_id == 7
  assert first.tags == ["B-name", "I-name", "O", "B-address", "I-address", "O", "O",
                        "B-product"] + ["I-product"] * 5
  assert data.sentences[1].tags == ["O", "O"] and data.sentences[1].example_id == 1
  assert data.sentences[2].example_id == "x-3"
  bioes = formats.read_cluener(path, "BIOES")
  assert bioes.sentences[2].tags[:4] == ["B-address", "E-address", "B-address", "E-address"]


def test_cluener_written_back_gives_the_same_labels(tmp_path):
  data = formats.read_cluener(cluener_file(tmp_path, CLUENER_LINES))
  for sentence, line in zip(data.sentences, CLUENER_LINES):
    assert writers.cluener_label(sentence, sentence.spans) == line["label"]
  again = formats.read_cluener(write(tmp_path / "copy.json",
                                     writers.format_cluener(data.sentences)))
  assert [(s.text, s.tags, s.spans, s.example_id) for s in again.sentences] == [
      (s.text, s.tags, s.spans, s.example_id) for s in data.sentences]


def test_cluener_predict_json(tmp_path):
  test_lines = [{"id": 0, "text": u"李明"}, {"text": u"北京"}, {"id": "a", "text": u"你好"}]
  text = u"".join(json.dumps(line, ensure_ascii=False) + u"\n" for line in test_lines)
  data = formats.read_cluener(write(tmp_path / "test.json", text.replace(u"\n", u"\n\n", 1)))
  assert not data.tagged
  out = str(tmp_path / "predict.json")
  writers.write_cluener_predictions(out, data.sentences,
                                    [[("name", 0, 2)], [("address", 0, 2)], []])
  assert [json.loads(line) for line in read(out).splitlines()] == [
      {"id": 0, "label": {"name": {u"李明": [[0, 1]]}}},
      {"id": 2, "label": {"address": {u"北京": [[0, 1]]}}},  # line 3: index 2
      {"id": "a", "label": {}}]
  assert read(out).startswith(u'{"id": 0, "label": {"name": {"李明"')


def test_cluener_bad_inputs(tmp_path):
  bad_span = [{"text": u"李明在北京", "label": {"address": {u"北京": [[2, 3]]}}}]
  message = error_of(formats.read_cluener, cluener_file(tmp_path, [{"text": u"你好",
                                                                    "label": {}}] + bad_span))
  assert "train.json line 2" in message and u'"北京"' in message and u'"在北"' in message
  out_of_range = [{"text": u"李明", "label": {"name": {u"李明": [[0, 5]]}}}]
  assert "[0, 5]" in error_of(formats.read_cluener, cluener_file(tmp_path, out_of_range))
  not_pair = [{"text": u"李明", "label": {"name": {u"李明": [0, 1]}}}]
  assert "line 1" in error_of(formats.read_cluener, cluener_file(tmp_path, not_pair))
  mixed = [{"text": u"李明", "label": {}}, {"text": u"李明"}]
  assert "line 2" in error_of(formats.read_cluener, cluener_file(tmp_path, mixed))
  write(tmp_path / "broken.json", u'{"text": "a"}\n{"text": \n')
  assert "broken.json line 2" in error_of(formats.read_cluener, str(tmp_path / "broken.json"))
  assert '"text"' in error_of(formats.read_cluener, cluener_file(tmp_path, [{"id": 1}]))
  bad_id = [{"id": [1], "text": u"a"}]
  assert '"id"' in error_of(formats.read_cluener, cluener_file(tmp_path, bad_id))
  write(tmp_path / "empty.json", u"\n")
  assert "no lines" in error_of(formats.read_cluener, str(tmp_path / "empty.json"))


def test_cluener_overlapping_spans_are_dropped_and_counted(tmp_path):
  lines = [{"text": u"中国人民银行", "label": {"organization": {u"中国人民银行": [[0, 5]]},
                                              "address": {u"中国": [[0, 1]]}}},
           {"text": u"中国", "label": {"address": {u"中国": [[0, 1], [0, 1]]}}}]
  data = formats.read_cluener(cluener_file(tmp_path, lines))
  assert data.dropped_overlaps == 1 and data.first_overlap_line == 1
  assert data.sentences[0].tags == ["B-organization"] + ["I-organization"] * 5
  assert data.sentences[1].tags == ["B-address", "I-address"]


def test_data_dir_files(tmp_path):
  data_dir = str(tmp_path)
  assert "no NER data files" in error_of(formats.detect_data_format, data_dir)
  cluener_file(tmp_path, CLUENER_LINES, "train.json")
  assert formats.detect_data_format(data_dir) == "cluener"
  write(tmp_path / "dev.bmes", u"李 S-PER\n")
  assert "--data_format" in error_of(formats.detect_data_format, data_dir)
  assert formats.split_path(data_dir, "conll", "dev").endswith("dev.bmes")
  assert "--do_predict" in error_of(formats.split_path, data_dir, "conll", "test")
  write(tmp_path / "train.txt", u"李\n明\n")
  message = error_of(formats.read_split, data_dir, "conll", "train")
  assert "train.txt line 1" in message and "no tag column in a train file" in message
  assert formats.read_split(data_dir, "cluener", "train").tagged


# ---------------------------------------------------------------------------
# Entities with character offsets
# ---------------------------------------------------------------------------

def test_predict_entities_offsets(tmp_path):
  data = formats.read_cluener(cluener_file(tmp_path, CLUENER_LINES))
  records = [writers.entity_records(s, s.spans) for s in data.sentences]
  assert records[0]["entities"][2] == {"type": "product", "start": 7, "end": 13,
                                       "text": u"iPhone"}
  for record in records:
    for entity in record["entities"]:
      assert record["text"][entity["start"]:entity["end"]] == entity["text"]
  words = formats.read_conll(write(tmp_path / "w.txt", u"我 O\n爱 O\nNew B-LOC\nYork I-LOC\n"))
  assert words.sentences[0].spans == [("LOC", 2, 4)]
  record = writers.entity_records(words.sentences[0], words.sentences[0].spans)
  assert record == {"text": u"我爱New York", "entities": [
      {"type": "LOC", "start": 2, "end": 10, "text": u"New York"}]}
  out = str(tmp_path / "predict_entities.jsonl")
  writers.write_predict_entities(out, data.sentences, [s.spans for s in data.sentences])
  assert [json.loads(line) for line in read(out).splitlines()] == records


# ---------------------------------------------------------------------------
# Alignment and windows
# ---------------------------------------------------------------------------

MIXED_TEXT = u"李明在New York买了2部iPhone12，\u200b 好"


def test_first_piece_alignment_on_mixed_text(tokenizer):
  # CLUENER-style: every character a token.
  aligned = featurizing.align_pieces(list(MIXED_TEXT), tokenizer)
  no_piece = [index for index, char in enumerate(MIXED_TEXT) if char in u" \u200b"]
  assert len(no_piece) == 3
  assert aligned.pieces == [char.lower() for char in MIXED_TEXT if char not in u" \u200b"]
  piece = 0
  for index in range(len(MIXED_TEXT)):
    if index in no_piece:
      assert aligned.first_pieces[index] == -1
    else:
      assert aligned.first_pieces[index] == piece and aligned.piece_tokens[piece] == index
      piece += 1
  # conll-style: Latin and digit runs are single tokens with several pieces.
  tokens = [u"我", u"iPhone12", u"\u3000", u"2019", u"a.b", u"\x07"]
  aligned = featurizing.align_pieces(tokens, tokenizer)
  assert aligned.pieces == [u"我", u"ip", u"##hone", u"##12", u"2019", u"a", u"[UNK]", u"b"]
  assert aligned.piece_tokens == [0, 1, 1, 1, 3, 4, 4, 4]
  assert aligned.first_pieces == [0, 1, -1, 4, 5, -1]
  assert aligned.piece_ids == tokenizer.convert_tokens_to_ids(aligned.pieces)


def test_sentence_that_fits_is_one_window_as_unwindowed(tokenizer):
  tokens = [u"李", u"明", u"iPhone12", u" ", u"去"]
  tags = ["B-PER", "I-PER", "B-PRO", "O", "O"]
  labels = ["O", "B-PER", "I-PER", "B-PRO"]
  sentence = formats.NerSentence(tokens, tags, u"", [0] * len(tokens))
  [(aligned, windows)] = featurizing.featurize_sentences([sentence], tokenizer, labels, 12, 2)
  [window] = windows
  ids = tokenizer.convert_tokens_to_ids(
      [u"[CLS]", u"李", u"明", u"ip", u"##hone", u"##12", u"去", u"[SEP]"])
  assert window.input_ids == ids + [0] * 4
  assert window.input_mask == [1] * 8 + [0] * 4 and window.segment_ids == [0] * 12
  assert window.label_ids == [0, 1, 2, 3, 0, 0, 0] + [0] * 5
  assert window.label_mask == [0, 1, 1, 1, 0, 0, 1] + [0] * 5
  assert window.is_max_context == [0, 1, 1, 1, 1, 1, 1] + [0] * 5
  assert (window.piece_start, window.num_pieces) == (0, 6)


def test_unk_tokens_keep_their_tag(tokenizer):
  sentence = formats.NerSentence([u"龘", u"李"], ["B-PER", "I-PER"], u"龘李", [0, 1])
  [(aligned, [window])] = featurizing.featurize_sentences(
      [sentence], tokenizer, ["O", "B-PER", "I-PER"], 8, 4)
  assert aligned.pieces == [u"[UNK]", u"李"]
  assert window.label_ids[:3] == [0, 1, 2] and window.label_mask[:3] == [0, 1, 1]


def test_piece_windows():
  assert sequence_windows.sliding_windows(0, 4, 2) == [(0, 0)]
  assert sequence_windows.sliding_windows(4, 4, 2) == [(0, 4)]
  assert sequence_windows.sliding_windows(7, 4, 2) == [(0, 4), (2, 4), (4, 3)]
  assert sequence_windows.sliding_windows(9, 3, 5) == [(0, 3), (3, 3), (6, 3)]  # no piece skipped
  best = sequence_windows.max_context_windows([(0, 4), (2, 4), (4, 3)], 7)
  # piece 2: min(2, 1) = 1 in window 0, min(0, 3) = 0 in window 1 -> window 0 (+0.04);
  # piece 3: min(3, 0) in 0, min(1, 2) = 1 in 1 -> window 1.
  assert best == [0, 0, 0, 1, 1, 2, 2]


def random_sentence(rng, length):
  choices = list(CHINESE) + [u"iPhone12", u"New", u" ", u"2019", u"龘"]
  tokens = [rng.choice(choices) for _ in range(length)]
  tags = ner_scoring.repair([rng.choice(["O", "B-X", "I-X", "B-Y"]) for _ in tokens], "BIO")
  return formats.NerSentence(tokens, tags, u"", [0] * length)


LABELS = ["O", "B-X", "B-Y", "I-X", "I-Y"]


def test_long_sentences_cover_every_token_once(tokenizer):
  rng = random.Random(1)
  sentences = [random_sentence(rng, n) for n in (0, 1, 5, 17, 40, 63)]
  for max_seq_length, doc_stride in ((8, 3), (10, 4), (6, 1), (9, 20)):
    featurized = featurizing.featurize_sentences(sentences, tokenizer, LABELS, max_seq_length,
                                                 doc_stride)
    for index, (aligned, windows) in enumerate(featurized):
      flagged = collections.Counter()
      for number, window in enumerate(windows):
        assert window.sentence_index == index and window.window_index == number
        assert window.num_pieces <= max_seq_length - 2
        assert len(window.input_ids) == max_seq_length
        if number:
          step = window.piece_start - windows[number - 1].piece_start
          assert 0 < step <= doc_stride
        for offset in range(window.num_pieces):
          assert window.input_ids[offset + 1] == aligned.piece_ids[window.piece_start + offset]
          if window.is_max_context[offset + 1]:
            flagged[window.piece_start + offset] += 1
      assert windows[-1].piece_start + windows[-1].num_pieces == len(aligned.pieces)
      assert flagged == collections.Counter(range(len(aligned.pieces)))


def context_free_predictions(windows, aligned, tag_of_piece):
  """A stand-in model: each position predicts from its piece alone."""
  predictions = []
  for window in windows:
    ids = [0] * len(window.input_ids)
    for offset in range(window.num_pieces):
      ids[offset + 1] = tag_of_piece(window.piece_start + offset)
    predictions.append(ids)
  return predictions


def test_windowed_predictions_equal_an_unwindowed_run(tokenizer):
  rng = random.Random(2)
  sentences = [random_sentence(rng, n) for n in (3, 30, 70)]
  whole = featurizing.featurize_sentences(sentences, tokenizer, LABELS, 512, 64)
  parts = featurizing.featurize_sentences(sentences, tokenizer, LABELS, 9, 3)
  for sentence, (aligned, one), (_, many) in zip(sentences, whole, parts):
    assert len(one) == 1
    gold_ids = {piece: LABELS.index(tag) for tag, piece in
                zip(sentence.tags, aligned.first_pieces) if piece >= 0}

    def oracle(piece):
      return gold_ids.get(piece, 0)

    unwindowed = featurizing.tags_from_windows(
        aligned, one, context_free_predictions(one, aligned, oracle), LABELS, "BIO")
    windowed = featurizing.tags_from_windows(
        aligned, many, context_free_predictions(many, aligned, oracle), LABELS, "BIO")
    assert windowed == unwindowed
    for tag, gold, piece in zip(windowed, sentence.tags, aligned.first_pieces):
      if piece >= 0:
        assert tag == gold


def test_each_token_is_predicted_from_its_max_context_window(tokenizer):
  sentence = random_sentence(random.Random(3), 40)
  [(aligned, windows)] = featurizing.featurize_sentences([sentence], tokenizer, LABELS, 8, 2)
  # The "model" predicts its window's index, so the tags say which window was used.
  window_labels = [str(number) for number in range(len(windows))]
  predictions = [[number] * len(window.input_ids) for number, window in enumerate(windows)]
  tags = featurizing.tags_from_windows(aligned, windows, predictions, window_labels, "BIO")
  best = sequence_windows.max_context_windows(
      [(w.piece_start, w.num_pieces) for w in windows], len(aligned.pieces))
  for tag, piece in zip(tags, aligned.first_pieces):
    assert tag == ("O" if piece < 0 else str(best[piece]))


def test_tokens_without_pieces_are_o_or_bridge_an_entity(tokenizer):
  tokens = list(u"在New York买 李")
  aligned = featurizing.align_pieces(tokens, tokenizer)
  sentence = formats.NerSentence(tokens, None, u"", [0] * len(tokens))
  [(_, windows)] = featurizing.featurize_sentences([sentence], tokenizer, LABELS, 32, 8)
  token_tags = ["O", "B-X"] + ["I-X"] * 7 + ["O", "O", "B-Y"]
  predictions = context_free_predictions(
      windows, aligned, lambda piece: LABELS.index(token_tags[aligned.piece_tokens[piece]]))
  tags = featurizing.tags_from_windows(aligned, windows, predictions, LABELS, "BIO")
  assert tags == ["O", "B-X", "I-X", "I-X", "I-X", "I-X", "I-X", "I-X", "I-X", "O", "O",
                  "B-Y"]  # the space in "New York" bridges; the one before 李 is O
  bmes = featurizing._fill_tokens_without_pieces(["B-X", "O", "E-X"], [0, -1, 1], "BMES")
  assert bmes == ["B-X", "M-X", "E-X"]
  assert featurizing._fill_tokens_without_pieces(["B-X", "O", "B-X"], [0, -1, 1], "BIO") == [
      "B-X", "O", "B-X"]
  assert featurizing._fill_tokens_without_pieces(["O", "O"], [-1, -1], "BIO") == ["O", "O"]


def test_featurizing_bad_inputs(tokenizer, tmp_path):
  sentence = formats.NerSentence([u"李"], ["B-ORG"], u"李", [0], source_file="dev.txt",
                                 source_line=4, token_lines=[4])
  message = error_of(featurizing.featurize_sentences, [sentence], tokenizer, LABELS, 8, 2)
  assert "dev.txt line 4" in message and '"B-ORG"' in message
  assert "--max_seq_length" in error_of(featurizing.check_window_settings, 2, 1)
  assert "--doc_stride" in error_of(featurizing.check_window_settings, 8, 0)
  vocab = write(tmp_path / "vocab.txt", u"[PAD]\n[UNK]\n[SEP]\n李\n")
  no_cls = tokenization.FullTokenizer(vocab)
  assert "[CLS]" in error_of(featurizing.featurize_sentences, [sentence], no_cls, LABELS, 8, 2)
