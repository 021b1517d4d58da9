# coding=utf-8
"""Unit tests of squad_data.py and squad_scoring.py: the data path, prediction and scoring.

Oracles are independent of the code under test: the answer texts themselves
(cutting a target span out of the context must give the answer back), straight
re-implementations of the rules of Google's run_squad.py (windows, max context,
n-best) and of the SQuAD/CMRC 2018 scorers, and values computed by hand.
"""

import collections
import json
import math
import os
import random

import numpy as np
import pytest

from bert_mgpu import errors
import reference_tokenizer
from bert_mgpu.data import sequence_windows
from bert_mgpu.squad import data as squad_data
from bert_mgpu.squad import records as squad_records
from bert_mgpu.squad import scoring as squad_scoring
import tokenization

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# Words and pieces for the English and accented texts; everything else that is
# not a CJK character below becomes [UNK] (which must not disturb the offsets).
ENGLISH_PIECES = [
    u"cafe", u"mu", u"##ller", u"is", u"a", u"ballet", u"by", u"pina", u"the", u"who",
    u"what", u"where", u"wrote", u"it", u"ip", u"##hone", u"il", u"visite", u"zurich",
    u"hello", u"big", u"world", u"new", u"york", u"city", u"in", u"?", u".", u",", u"'",
    u"s", u"2018", u"##s"]

CHINESE_TEXT = (u"北京是中国的首都。他说：“你好！”然后走了（很快）。我买了一部手机很好用哪里谁什么"
                u"一二三四五六七八九十海淀区大学在年月日？，《》")


def write_vocab(path, tokens):
  with open(path, "w", encoding="utf-8", newline="\n") as f:
    f.write(u"".join(token + u"\n" for token in tokens))
  return path


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  chars = sorted(set(CHINESE_TEXT))
  path = write_vocab(str(tmp_path_factory.mktemp("vocab") / "vocab.txt"),
                     SPECIAL_TOKENS + chars + ENGLISH_PIECES)
  return tokenization.FullTokenizer(path, do_lower_case=True)


def write_squad(tmp_path, paragraphs, name="data.json", version="1.1"):
  """paragraphs: list of (context, [(id, question, answers, is_impossible)]),
  answers a list of (text, answer_start)."""
  data = {"version": version, "data": [{"title": "t", "paragraphs": [
      {"context": context,
       "qas": [dict([("id", qid), ("question", question),
                     ("answers", [{"text": t, "answer_start": s} for t, s in answers])] +
                    ([("is_impossible", True)] if impossible else []))
               for qid, question, answers, impossible in qas]}
      for context, qas in paragraphs]}]}
  path = str(tmp_path / name)
  with open(path, "w", encoding="utf-8") as f:
    json.dump(data, f, ensure_ascii=False)
  return path


def qa(qid, context, answer, question=u"哪里？", occurrence=0):
  """A question whose answer is the `occurrence`-th appearance of `answer` in `context`."""
  start = -1
  for _ in range(occurrence + 1):
    start = context.index(answer, start + 1)
  return (qid, question, [(answer, start)], False)


# ---------------------------------------------------------------------------
# Straight re-implementations of Google's run_squad.py rules
# ---------------------------------------------------------------------------

def google_doc_spans(num_tokens, max_tokens_for_doc, doc_stride):
  """Google's loop; this project adds one empty window for an empty context."""
  spans = []
  start = 0
  while start < num_tokens:
    length = min(num_tokens - start, max_tokens_for_doc)
    spans.append((start, length))
    if start + length == num_tokens:
      break
    start += min(length, doc_stride)
  return spans or [(0, 0)]


def google_is_max_context(spans, span_index, position):
  best_score, best_index = None, None
  for index, (start, length) in enumerate(spans):
    end = start + length - 1
    if position < start or position > end:
      continue
    score = min(position - start, end - position) + 0.01 * length
    if best_score is None or score > best_score:
      best_score, best_index = score, index
  return best_index == span_index


# ---------------------------------------------------------------------------
# 1. Reading, locating answers, features: offsets on tricky text
# ---------------------------------------------------------------------------

TRICKY_CONTEXTS = [
    # (context, answer, occurrence): answers at the very start and end, leading
    # spaces, control chars, U+FFFD, full-width punctuation, English inside
    # Chinese, accented words.
    (u"北京是中国的首都", u"北京", 0),
    (u"北京是中国的首都", u"首都", 0),
    (u"北京是中国的首都。", u"首都。", 0),
    (u"  \x07\u3000北京\x00大学在海淀区\ufffd。", u"北京\x00大学", 0),
    (u"  \x07\u3000北京\x00大学在海淀区\ufffd。", u"海淀区", 0),
    (u"\ufffd北京\u200b大学", u"北京\u200b大学", 0),
    (u"他说：“你好！”然后走了（很快）。", u"“你好！”", 0),
    (u"他说：“你好！”然后走了（很快）。", u"（很快）", 0),
    (u"我买了一部iPhone手机，很好用。", u"iPhone", 0),
    (u"我买了一部iPhone手机，很好用。", u"iPhone手机", 0),
    (u"iPhone是2018年的", u"iPhone", 0),
    (u"我买了一部iPhone", u"一部iPhone", 0),
    (u"Café Müller is a ballet by Pina Bausch.", u"Café Müller", 0),
    (u"Café Müller is a ballet by Pina Bausch.", u"Pina Bausch", 0),
    (u"Il a visité Zürich", u"Zürich", 0),
    (u"Il a visité Zürich", u"visité", 0),
    (u"ΟΔΟΣ Café", u"ΟΔΟΣ", 0),
    (u"İstanbul 北京", u"İstanbul", 0),
    (u"北京北京北京", u"北京", 2),
]


def check_answer_windows(example, features):
  """Asserts the targets of each window: the cut reproduces the answer text
  exactly, or the window is a 0/0 no-answer target. Returns (#with, #without)."""
  with_answer = without_answer = 0
  for feature in features:
    if feature.start_position == 0:
      assert feature.end_position == 0
      assert feature.is_impossible
      without_answer += 1
      continue
    assert not feature.is_impossible
    start, end = feature.start_position, feature.end_position
    assert 0 < start <= end
    # Both targets are context tokens (segment 1, real positions).
    assert feature.segment_ids[start] == feature.segment_ids[end] == 1
    assert feature.token_starts[start] >= 0 and feature.token_ends[end] >= 0
    cut = example.context_text[feature.token_starts[start]:feature.token_ends[end]]
    assert cut == example.context_text[example.answer_start:example.answer_end], (
        cut, example.qas_id)
    with_answer += 1
  return with_answer, without_answer


@pytest.mark.parametrize("context,answer,occurrence", TRICKY_CONTEXTS)
def test_training_targets_cut_out_the_answer(tmp_path, tokenizer, context, answer,
                                             occurrence):
  path = write_squad(tmp_path, [(context, [qa("q", context, answer, occurrence=occurrence)])])
  examples, counts = squad_data.read_squad_examples(path, True, False)
  assert counts == {}
  (example,) = examples
  assert example.context_text[example.answer_start:example.answer_end] == answer
  counts = collections.Counter()
  features = list(squad_data.convert_examples_to_features(
      examples, tokenizer, max_seq_length=64, doc_stride=16, max_query_length=8,
      is_training=True, counts=counts))
  with_answer, without_answer = check_answer_windows(example, features)
  assert (with_answer, without_answer) == (1, 0)
  assert counts["windows_without_answer"] == 0
  for feature in features:
    assert len(feature.input_ids) == len(feature.input_mask) == len(feature.segment_ids) == 64
    assert len(feature.token_starts) == len(feature.token_ends) == 64
    assert len(feature.token_is_max_context) == 64


@pytest.mark.parametrize("context,answer,occurrence", TRICKY_CONTEXTS)
def test_predicted_text_is_the_answer_exactly(tmp_path, tokenizer, context, answer,
                                              occurrence):
  """Logits peaked on the answer's tokens predict exactly the answer text."""
  path = write_squad(tmp_path, [(context, [qa("q", context, answer, occurrence=occurrence)])])
  train_examples, _ = squad_data.read_squad_examples(path, True, False)
  predict_examples, _ = squad_data.read_squad_examples(path, False, False)
  assert predict_examples[0].gold_answers == [answer]
  args = dict(tokenizer=tokenizer, max_seq_length=64, doc_stride=16, max_query_length=8,
              counts=collections.Counter())
  (train_feature,) = list(squad_data.convert_examples_to_features(train_examples, is_training=True,
                                                             **args))
  (feature,) = list(squad_data.convert_examples_to_features(predict_examples, is_training=False,
                                                       **args))
  assert feature.start_position == feature.end_position == 0
  start_logits = np.zeros([1, 64], np.float32)
  end_logits = np.zeros([1, 64], np.float32)
  start_logits[0, train_feature.start_position] = 5.0
  end_logits[0, train_feature.end_position] = 5.0
  predictions, _, _ = squad_data.predict_answers(predict_examples, [feature], start_logits,
                                            end_logits, 20, 30, False, 0.0)
  assert predictions == {"q": answer}


@pytest.mark.parametrize("context,answer", [
    (u"Cafe\u0301 Mu\u0308ller is a ballet by Pina Bausch.", u"Cafe\u0301"),
    (u"Il a visite\u0301", u"visite\u0301"),                 # at the very end
    (u"Cafe\u0301 Mu\u0308ller is a ballet", u"Cafe\u0301 Mu\u0308ller"),
])
def test_decomposed_accent_answer_is_cut_whole(tmp_path, tokenizer, context, answer):
  """Context and answer typed with combining accents (NFD text, common from macOS):
  the cut target must still be the answer text, the final accent included."""
  path = write_squad(tmp_path, [(context, [qa("q", context, answer)])])
  examples, _ = squad_data.read_squad_examples(path, True, False)
  features = list(squad_data.convert_examples_to_features(
      examples, tokenizer, 64, 16, 8, True, collections.Counter()))
  assert check_answer_windows(examples[0], features) == (1, 0)


LONG_CONTEXT = u"\x07 " + u"一二三四五六七八九十" * 3   # 2 deleted/space chars, then 30 tokens


@pytest.mark.parametrize("answer_token_start,answer_length", [
    (0, 2), (9, 3), (13, 2), (27, 3), (29, 1), (16, 5)])
def test_long_context_windows(tmp_path, tokenizer, answer_token_start, answer_length):
  """30 one-char tokens, 10 per window, stride 4: the answer lands in later windows;
  windows without it are 0/0 targets and counted."""
  char_start = answer_token_start + 2  # every context char after the first 2 is one token
  answer = LONG_CONTEXT[char_start:char_start + answer_length]
  question = u"哪里？"  # 3 tokens: max_tokens_for_doc = 16 - 3 - 3 = 10
  path = write_squad(tmp_path, [(LONG_CONTEXT, [(u"q", question, [(answer, char_start)],
                                                 False)])])
  examples, _ = squad_data.read_squad_examples(path, True, False)
  counts = collections.Counter()
  features = list(squad_data.convert_examples_to_features(
      examples, tokenizer, max_seq_length=16, doc_stride=4, max_query_length=8,
      is_training=True, counts=counts))
  windows = google_doc_spans(30, 10, 4)
  assert [f.doc_span_index for f in features] == list(range(len(windows)))
  offset = 1 + 3 + 1
  first, last = answer_token_start, answer_token_start + answer_length - 1
  expected_without = 0
  for feature, (start, length) in zip(features, windows):
    if start <= first and last < start + length:
      assert (feature.start_position, feature.end_position) == (
          offset + first - start, offset + last - start)
      assert not feature.is_impossible
    else:
      assert (feature.start_position, feature.end_position) == (0, 0)
      assert feature.is_impossible
      expected_without += 1
    # Each window's context tokens and their max-context flags.
    for position in range(length):
      token_index = start + position
      assert feature.token_starts[offset + position] == token_index + 2
      assert feature.token_ends[offset + position] == token_index + 3
      assert feature.token_is_max_context[offset + position] == google_is_max_context(
          windows, feature.doc_span_index, token_index)
    assert feature.token_starts[:offset] == [-1] * offset
    assert feature.token_starts[offset + length:] == [-1] * (16 - offset - length)
    assert feature.segment_ids == [0] * offset + [1] * (length + 1) + [0] * (15 - offset -
                                                                             length)
    assert feature.input_mask == [1] * (offset + length + 1) + [0] * (15 - offset - length)
  assert counts["windows_without_answer"] == expected_without
  assert expected_without < len(windows)
  with_answer, _ = check_answer_windows(examples[0], features)
  assert with_answer == len(windows) - expected_without


def test_answer_in_second_and_third_windows_only(tmp_path, tokenizer):
  path = write_squad(tmp_path, [(LONG_CONTEXT, [(u"q", u"哪里？", [(u"十一二", 11)], False)])])
  examples, _ = squad_data.read_squad_examples(path, True, False)
  counts = collections.Counter()
  features = list(squad_data.convert_examples_to_features(examples, tokenizer, 16, 4, 8, True,
                                                     counts))
  # Windows start at tokens 0, 4, 8, 12, 16, 20; the answer is tokens 9-11.
  assert [f.start_position > 0 for f in features] == [False, True, True, False, False, False]
  assert [(f.start_position, f.end_position) for f in features[1:3]] == [(10, 12), (6, 8)]
  assert counts["windows_without_answer"] == 4
  assert counts["features"] == 6


def test_input_ids_are_cls_question_sep_window_sep(tmp_path, tokenizer):
  context = u"北京是中国的首都"
  path = write_squad(tmp_path, [(context, [(u"q", u"首都在哪里？", [], False)])])
  examples, _ = squad_data.read_squad_examples(path, False, False)
  (feature,) = list(squad_data.convert_examples_to_features(
      examples, tokenizer, 24, 8, max_query_length=4, is_training=False,
      counts=collections.Counter()))
  tokens = [u"[CLS]", u"首", u"都", u"在", u"哪", u"[SEP]"] + list(context) + [u"[SEP]"]
  expected = [tokenizer.vocab[t] for t in tokens]
  assert feature.input_ids == expected + [0] * (24 - len(expected))


def test_locate_answer_nearest_occurrence_and_counts(tmp_path):
  context = u"北京和北京和北京"   # occurrences at 0, 3, 6
  assert squad_data.locate_answer(context, u"北京", 3) == (3, 5, False)
  assert squad_data.locate_answer(context, u"北京", 4) == (3, 5, True)
  assert squad_data.locate_answer(context, u"北京", 1) == (0, 2, True)
  assert squad_data.locate_answer(context, u"北京", 7) == (6, 8, True)
  assert squad_data.locate_answer(context, u"北京", 100) == (6, 8, True)
  assert squad_data.locate_answer(context, u"上海", 0) is None
  path = write_squad(tmp_path, [(context, [
      (u"moved", u"哪里？", [(u"北京", 5)], False),
      (u"exact", u"哪里？", [(u"北京", 6)], False),
      (u"missing", u"哪里？", [(u"上海", 0)], False),
      (u"moved2", u"哪里？", [(u"和北京", 0)], False)])])
  examples, counts = squad_data.read_squad_examples(path, True, False)
  assert [e.qas_id for e in examples] == [u"moved", u"exact", u"moved2"]
  assert [(e.answer_start, e.answer_end) for e in examples] == [(6, 8), (6, 8), (2, 5)]
  assert counts == {"answers_moved": 2, "answers_not_found": 1}
  # Not training: nothing is located, nothing skipped; the golds are kept.
  examples, counts = squad_data.read_squad_examples(path, False, False)
  assert len(examples) == 4 and counts == {}
  assert examples[2].gold_answers == [u"上海"]


def test_locate_answer_overlapping_occurrences():
  """Occurrences may overlap: "哈哈" is at 0, 1, 2 and 3 of "哈哈哈哈哈", so for a stale
  answer_start of 4 the nearest is 3."""
  assert squad_data.locate_answer(u"哈哈哈哈哈", u"哈哈", 4) == (3, 5, True)
  assert squad_data.locate_answer(u"ababab", u"abab", 3)[:2] == (2, 6)


def test_locate_answer_matches_brute_force():
  rng = random.Random(5)
  for _ in range(3000):
    context = u"".join(rng.choice(u"ab北") for _ in range(rng.randint(0, 10)))
    answer = u"".join(rng.choice(u"ab北") for _ in range(rng.randint(1, 3)))
    answer_start = rng.randint(0, 11)
    occurrences = [i for i in range(len(context)) if context.startswith(answer, i)]
    result = squad_data.locate_answer(context, answer, answer_start)
    if not occurrences:
      assert result is None
      continue
    start, end, moved = result
    assert context[start:end] == answer
    assert moved == (start != answer_start)
    assert abs(start - answer_start) == min(abs(i - answer_start) for i in occurrences), (
        context, answer, answer_start, start)


def test_v2_impossible_training_questions(tmp_path, tokenizer):
  context = u"北京是中国的首都"
  path = write_squad(tmp_path, [(context, [
      (u"no", u"哪里？", [], True), qa(u"yes", context, u"首都")])], version="v2.0")
  examples, counts = squad_data.read_squad_examples(path, True, True)
  assert [e.is_impossible for e in examples] == [True, False]
  assert examples[0].gold_answers == [u""]
  counts = collections.Counter()
  features = list(squad_data.convert_examples_to_features(examples, tokenizer, 32, 8, 8, True,
                                                     counts))
  assert [(f.start_position, f.end_position, f.is_impossible) for f in features] == [
      (0, 0, True), (5 + 6, 5 + 7, False)]
  # A v2 impossible window is not a "window without answer": it has none to miss.
  assert counts["windows_without_answer"] == 0


def test_empty_context_gets_one_window(tmp_path, tokenizer):
  path = write_squad(tmp_path, [(u"", [(u"q", u"哪里？", [], False)]),
                                (u" \x00 ", [(u"r", u"哪里？", [], False)])])
  examples, _ = squad_data.read_squad_examples(path, False, False)
  features = list(squad_data.convert_examples_to_features(examples, tokenizer, 16, 4, 8, False,
                                                     collections.Counter()))
  assert [f.example_index for f in features] == [0, 1]
  for feature in features:
    assert feature.token_starts == [-1] * 16
    assert sum(feature.input_mask) == 6  # [CLS] 哪 里 ？ [SEP] [SEP]


# ---------------------------------------------------------------------------
# 2. Windows and max context against Google's rules
# ---------------------------------------------------------------------------

def test_doc_windows_and_max_context_match_google():
  checked = 0
  for num_tokens in range(0, 41):
    for max_tokens in (1, 2, 3, 5, 8, 13):
      for stride in (1, 2, 3, 4, 7, 13, 20):
        windows = sequence_windows.sliding_windows(num_tokens, max_tokens, stride)
        expected = google_doc_spans(num_tokens, max_tokens, stride)
        assert windows == expected, (num_tokens, max_tokens, stride)
        # Every token is the max-context token of exactly one window.
        owners = collections.Counter()
        for index, (start, length) in enumerate(windows):
          flags = squad_data.max_context_flags(windows, index)
          assert flags == [google_is_max_context(windows, index, p)
                           for p in range(start, start + length)]
          owners.update(p for p, flag in zip(range(start, start + length), flags) if flag)
        assert sorted(owners) == list(range(num_tokens))
        assert set(owners.values()) <= {1}
        checked += 1
  assert checked == 41 * 6 * 7


def test_doc_windows_hand_checked():
  assert sequence_windows.sliding_windows(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
  assert sequence_windows.sliding_windows(10, 4, 2) == [(0, 4), (2, 4), (4, 4), (6, 4)]
  assert sequence_windows.sliding_windows(10, 4, 9) == [(0, 4), (4, 4), (8, 2)]   # stride capped at length
  assert sequence_windows.sliding_windows(3, 4, 2) == [(0, 3)]
  assert sequence_windows.sliding_windows(0, 4, 2) == [(0, 0)]
  windows = [(0, 4), (2, 4)]
  # Token 2: window 0 scores min(2, 1) + 0.04 = 1.04, window 1 min(0, 3) + 0.04.
  assert squad_data.max_context_flags(windows, 0) == [True, True, True, False]
  # Token 3: window 0 scores min(3, 0) + 0.04, window 1 min(1, 2) + 0.04 = 1.04.
  assert squad_data.max_context_flags(windows, 1) == [False, True, True, True]


# ---------------------------------------------------------------------------
# 3. predict_answers
# ---------------------------------------------------------------------------

def make_feature(example_index, spans, question_length, max_seq_length, max_context=None):
  """A feature laid out as [CLS] question [SEP] context [SEP] padding, with the given
  char spans for the context tokens."""
  offset = question_length + 2
  padding = max_seq_length - offset - len(spans)
  assert padding >= 1
  if max_context is None:
    max_context = [True] * len(spans)
  return squad_data.InputFeatures(
      unique_id=0, example_index=example_index, doc_span_index=0,
      token_starts=[-1] * offset + [s for s, _ in spans] + [-1] * padding,
      token_ends=[-1] * offset + [e for _, e in spans] + [-1] * padding,
      token_is_max_context=[False] * offset + list(max_context) + [False] * padding,
      start_position=0, end_position=0, is_impossible=False)


def logits_with(length, values):
  """An array of -10 with values {position: logit}."""
  row = np.full([length], -10.0, np.float32)
  for position, value in values.items():
    row[position] = value
  return row


HELLO = squad_data.SquadExample(u"h", u"q", u"Hello big world")
HELLO_SPANS = [(0, 5), (6, 9), (10, 15)]  # positions 4, 5, 6 with a 2-token question


def predict_one(starts, ends, n_best_size=20, max_answer_length=30, max_context=None,
                version_2=False, threshold=0.0, example=HELLO, spans=HELLO_SPANS):
  feature = make_feature(0, spans, 2, 10, max_context)
  return squad_data.predict_answers([example], [feature], np.stack([logits_with(10, starts)]),
                               np.stack([logits_with(10, ends)]), n_best_size,
                               max_answer_length, version_2, threshold)


def test_predict_excludes_end_before_start():
  # (world, hello) would score 10 but ends before it starts; best valid: world.
  predictions, nbest, _ = predict_one({4: 3.0, 6: 5.0}, {4: 5.0, 6: 4.0})
  assert predictions == {u"h": u"world"}
  texts = [entry["text"] for entry in nbest[u"h"]]
  assert texts[:2] == [u"world", u"Hello"]  # 9, then 8
  assert set(texts) == {u"world", u"Hello", u"Hello big world", u"big", u"big world",
                        u"Hello big"}


def test_predict_excludes_too_long_spans():
  # Hello big world 10; big world 6; Hello big 5.5; big 1.5; Hello and world -5.
  starts, ends = {4: 5.0, 5: 1.0}, {6: 5.0, 5: 0.5}
  assert predict_one(starts, ends)[0] == {u"h": u"Hello big world"}
  assert predict_one(starts, ends, max_answer_length=2)[0] == {u"h": u"big world"}
  predictions, nbest, _ = predict_one(starts, ends, max_answer_length=1)
  assert predictions == {u"h": u"big"}
  assert all(len(entry["text"].split()) == 1 for entry in nbest[u"h"])


def test_predict_excludes_starts_without_max_context():
  starts, ends = {4: 5.0, 5: 2.0}, {6: 5.0}
  assert predict_one(starts, ends)[0] == {u"h": u"Hello big world"}
  predictions, nbest, _ = predict_one(starts, ends, max_context=[False, True, True])
  assert predictions == {u"h": u"big world"}
  assert not any(entry["text"].startswith(u"Hello") for entry in nbest[u"h"])
  # Only starts need max context: a span may end on a token without it.
  assert predict_one({5: 5.0}, {6: 5.0}, max_context=[True, True, False])[0] == {
      u"h": u"big world"}


def test_predict_excludes_question_special_and_padding_tokens():
  # Question positions 1-2, [CLS] 0, [SEP] 3 and 7, padding 8-9 score highest.
  starts = {0: 20.0, 1: 20.0, 2: 20.0, 3: 20.0, 7: 20.0, 8: 20.0, 9: 20.0, 5: 1.0}
  ends = {0: 20.0, 1: 20.0, 2: 20.0, 3: 20.0, 7: 20.0, 8: 20.0, 9: 20.0, 5: 1.0}
  predictions, nbest, _ = predict_one(starts, ends)
  assert predictions == {u"h": u"big"}
  assert [entry["text"] for entry in nbest[u"h"]][0] == u"big"
  assert u"" not in [entry["text"] for entry in nbest[u"h"]]


def test_predict_only_looks_at_the_top_n_logits_of_context_tokens():
  # Question tokens (1, 2) do not use up n_best_size=1: the top context start is 4
  # (hello), the top context end 6 (world); "big" (5) is never a start or an end.
  starts, ends = {1: 9.0, 4: 3.0, 5: 2.0}, {2: 9.0, 6: 3.0, 5: 2.5}
  predictions, nbest, _ = predict_one(starts, ends, n_best_size=1)
  assert predictions == {u"h": u"Hello big world"}
  assert [entry["text"] for entry in nbest[u"h"]] == [u"Hello big world"]
  _, nbest, _ = predict_one(starts, ends, n_best_size=2)
  assert [entry["text"] for entry in nbest[u"h"]] == [u"Hello big world", u"Hello big"]


def test_predicted_text_is_cut_from_the_original_context():
  example = squad_data.SquadExample(u"c", u"q", u"  \x07北京\x00大学 Café Müller!")
  spans = [(3, 4), (4, 5), (6, 7), (7, 8), (9, 13), (14, 16), (16, 20), (20, 21)]
  assert len(spans) == 8
  feature = make_feature(0, spans, 1, 12)
  start_logits = np.stack([logits_with(12, {3: 5.0})])
  end_logits = np.stack([logits_with(12, {6: 5.0})])
  predictions, _, _ = squad_data.predict_answers([example], [feature], start_logits, end_logits,
                                            5, 30, False, 0.0)
  assert predictions == {u"c": u"北京\x00大学"}
  start_logits = np.stack([logits_with(12, {7: 5.0})])
  end_logits = np.stack([logits_with(12, {9: 5.0})])
  predictions, _, _ = squad_data.predict_answers([example], [feature], start_logits, end_logits,
                                            5, 30, False, 0.0)
  assert predictions == {u"c": u"Café Müller"}


def test_nbest_deduplicated_bounded_and_probabilities():
  # Two windows of one example hold the same tokens: every span appears twice.
  feature_a = make_feature(0, HELLO_SPANS, 2, 10)
  feature_b = make_feature(0, HELLO_SPANS, 2, 10)
  rng = np.random.RandomState(0)
  # Context positions 4-6 lead, so the top 3 starts and ends are always theirs.
  start_logits = rng.randn(2, 10).astype(np.float32)
  end_logits = rng.randn(2, 10).astype(np.float32)
  start_logits[:, 4:7] += 10.0
  end_logits[:, 4:7] += 10.0
  for n_best_size in (1, 2, 3, 4, 10):
    predictions, nbest, null_odds = squad_data.predict_answers(
        [HELLO], [feature_a, feature_b], start_logits, end_logits, n_best_size, 30, False,
        0.0)
    entries = nbest[u"h"]
    texts = [entry["text"] for entry in entries]
    assert len(texts) == len(set(texts))
    assert u"" not in texts
    if n_best_size < 3:
      assert 1 <= len(texts) <= n_best_size
      continue
    assert len(texts) == min(n_best_size, 6)   # 6 spans over 3 tokens
    assert abs(sum(entry["probability"] for entry in entries) - 1.0) < 1e-6
    scores = [entry["start_logit"] + entry["end_logit"] for entry in entries]
    assert scores == sorted(scores, reverse=True)
    expected = np.exp(np.array(scores) - max(scores))
    np.testing.assert_allclose([entry["probability"] for entry in entries],
                               expected / expected.sum(), rtol=1e-5)
    assert predictions[u"h"] == texts[0]
    assert null_odds == {}
    # The kept score of each text is its best over both windows.
    for entry in entries:
      best = max(float(start_logits[f, s] + end_logits[f, e])
                 for f in (0, 1) for s in (4, 5, 6) for e in (4, 5, 6)
                 if s <= e and HELLO.context_text[HELLO_SPANS[s - 4][0]:
                                                  HELLO_SPANS[e - 4][1]] == entry["text"])
      assert entry["start_logit"] + entry["end_logit"] == pytest.approx(best, abs=1e-5)


def test_v2_null_odds_and_threshold():
  # Null score = start[0] + end[0] = 1 + 1 = 2; best span "world" = 1.5 + 1.0 = 2.5.
  starts, ends = {0: 1.0, 6: 1.5, 4: 0.5}, {0: 1.0, 6: 1.0}
  predictions, nbest, null_odds = predict_one(starts, ends, version_2=True, threshold=0.0)
  assert null_odds == {u"h": pytest.approx(2.0 - 2.5)}
  assert predictions == {u"h": u"world"}
  texts = [entry["text"] for entry in nbest[u"h"]]
  assert texts[:3] == [u"world", u"", u"Hello big world"]  # 2.5, 2.0, 1.5
  assert abs(sum(entry["probability"] for entry in nbest[u"h"]) - 1.0) < 1e-6
  # A threshold below -0.5 predicts no answer; at exactly -0.5 it still answers.
  assert predict_one(starts, ends, version_2=True, threshold=-0.6)[0] == {u"h": u""}
  assert predict_one(starts, ends, version_2=True, threshold=-0.5)[0] == {u"h": u"world"}
  # The null entry is in the n-best even when it does not make the top n.
  _, nbest, _ = predict_one({0: -5.0, 4: 1.0, 5: 1.0, 6: 1.0}, {0: -5.0, 6: 1.0},
                            n_best_size=2, version_2=True)
  assert [entry["text"] for entry in nbest[u"h"]][-1] == u""
  assert len(nbest[u"h"]) == 3  # Google appends it after the top n_best_size


def test_v2_null_score_is_the_minimum_over_windows():
  feature_a = make_feature(0, HELLO_SPANS, 2, 10)
  feature_b = make_feature(0, HELLO_SPANS, 2, 10, max_context=[False, False, False])
  start_logits = np.stack([logits_with(10, {0: 3.0, 5: 2.0}), logits_with(10, {0: 0.5})])
  end_logits = np.stack([logits_with(10, {0: 3.0, 5: 2.0}), logits_with(10, {0: 1.0})])
  predictions, nbest, null_odds = squad_data.predict_answers(
      [HELLO], [feature_a, feature_b], start_logits, end_logits, 20, 30, True, 0.0)
  # min(6, 1.5) - (2 + 2) = -2.5: answered.
  assert null_odds == {u"h": pytest.approx(-2.5)}
  assert predictions == {u"h": u"big"}
  null_entry = [entry for entry in nbest[u"h"] if entry["text"] == u""]
  assert [(e["start_logit"], e["end_logit"]) for e in null_entry] == [(0.5, 1.0)]


# Two windows over one context, "Paris" in it twice: window A holds tokens 0-5 (max context
# for 0-3), window B tokens 3-7 (max context for 4-7), with a 2-token question and
# max_seq_length 12, so context tokens sit at positions 4-9 (A) and 4-8 (B).
PARIS = squad_data.SquadExample(u"p", u"q", u"Paris is big. Paris is old.")
PARIS_SPANS = [(0, 5), (6, 8), (9, 12), (12, 13), (14, 19), (20, 22), (23, 26), (26, 27)]


def paris_answers(n_best_size, version_2, threshold=0.0, cls=((0.5, 0.5), (1.0, 1.5))):
  """question_answers and predict_answers of PARIS. Logits (all others -10):
    A: start Paris#1 2.0, Paris#2 5.0 (no max context in A); end Paris#1 2.5, big 1.0,
       Paris#2 4.0.
    B: start Paris#2 3.0, old 1.5; end Paris#2 3.5, old 2.0.
  so the spans score: Paris (B, the second one) 6.5, "Paris is big. Paris" (A) 6.0,
  "Paris is old" (B) 5.0, Paris (A, the first one) 4.5, old 3.5, "Paris is big" 3.0, and
  the rest (some -10 logit) less than -5. `cls`: the [CLS] (start, end) of A and B."""
  features = [make_feature(0, PARIS_SPANS[:6], 2, 12, [True] * 4 + [False] * 2),
              make_feature(0, PARIS_SPANS[3:], 2, 12, [False] + [True] * 4)]
  start_logits = np.stack([logits_with(12, {0: cls[0][0], 4: 2.0, 8: 5.0}),
                           logits_with(12, {0: cls[1][0], 5: 3.0, 7: 1.5})])
  end_logits = np.stack([logits_with(12, {0: cls[0][1], 4: 2.5, 6: 1.0, 8: 4.0}),
                         logits_with(12, {0: cls[1][1], 5: 3.5, 7: 2.0})])
  args = (n_best_size, 30, version_2, threshold)
  return (squad_data.question_answers(PARIS, features, start_logits, end_logits, *args),
          squad_data.predict_answers([PARIS], features, start_logits, end_logits, *args))


def softmax(scores):
  exps = [math.exp(s - max(scores)) for s in scores]
  return [e / sum(exps) for e in exps]


def assert_candidates_stand_at_their_starts(answers):
  for candidate in answers.nbest + [answers.answer]:
    if candidate.text:
      start = candidate.char_start
      assert PARIS.context_text[start:start + len(candidate.text)] == candidate.text
    else:
      assert candidate.char_start == -1


def test_question_answers_keep_the_predictions_and_say_where_each_answer_starts():
  """The values below are those of predict_answers before question_answers (#43) split it
  out, on the same logits (checked then); the chosen "Paris" is the second one, the
  occurrence of the best score, at character 14 (str.find would say 0)."""
  answers, (predictions, nbest, null_odds) = paris_answers(5, False)
  texts = [u"Paris", u"Paris is big. Paris", u"Paris is old", u"old", u"Paris is big"]
  scores = [6.5, 6.0, 5.0, 3.5, 3.0]
  assert [c.text for c in answers.nbest] == texts
  assert [c.char_start for c in answers.nbest] == [14, 0, 14, 23, 0]
  assert [c.score for c in answers.nbest] == scores
  assert answers.probabilities == pytest.approx(softmax(scores), abs=1e-12)
  assert answers.answer == answers.nbest[0] and answers.null_odds is None
  assert squad_data.answer_probability(answers) == answers.probabilities[0]
  assert_candidates_stand_at_their_starts(answers)
  assert predictions == {u"p": u"Paris"} and null_odds == {}
  assert nbest == {u"p": [
      {"text": t, "probability": pytest.approx(p, abs=1e-12), "start_logit": c.start_logit,
       "end_logit": c.end_logit}
      for t, p, c in zip(texts, softmax(scores), answers.nbest)]}
  assert [(e["start_logit"], e["end_logit"]) for e in nbest[u"p"]] == [
      (3.0, 3.5), (2.0, 4.0), (3.0, 2.0), (1.5, 2.0), (2.0, 1.0)]


def test_question_answers_v2_keep_the_predictions_and_the_null_entry():
  # Null score: the lower [CLS] sum over the windows, A's 0.5 + 0.5 = 1.0; null odds
  # 1.0 - 6.5 = -5.5.
  scores = [6.5, 6.0, 5.0, 1.0]
  for threshold, answer, start in ((0.0, u"Paris", 14), (-5.5, u"Paris", 14),
                                   (-5.6, u"", -1)):
    answers, (predictions, nbest, null_odds) = paris_answers(3, True, threshold)
    assert [c.text for c in answers.nbest] == [u"Paris", u"Paris is big. Paris",
                                               u"Paris is old", u""]
    assert [c.char_start for c in answers.nbest] == [14, 0, 14, -1]
    assert answers.probabilities == pytest.approx(softmax(scores), abs=1e-12)
    assert answers.null_odds == pytest.approx(-5.5) and null_odds == {
        u"p": pytest.approx(-5.5)}
    assert (answers.answer.text, answers.answer.char_start) == (answer, start), threshold
    assert predictions == {u"p": answer}
    assert [e["text"] for e in nbest[u"p"]] == [c.text for c in answers.nbest]
    assert nbest[u"p"][-1]["start_logit"] == 0.5 and nbest[u"p"][-1]["end_logit"] == 0.5
    assert squad_data.answer_probability(answers) == pytest.approx(
        softmax(scores)[0 if answer else 3], abs=1e-12)
    assert_candidates_stand_at_their_starts(answers)


def test_question_answers_v2_a_span_the_null_entry_crowds_out_of_the_nbest():
  """n_best_size 1 and the null entry best (8.0, from A's [CLS]): the n-best holds it alone,
  yet a threshold of 2.0 above the null odds 1.5 answers "Paris": its probability is then
  its softmax over the n-best and it."""
  answers, (predictions, nbest, null_odds) = paris_answers(
      1, True, 2.0, cls=((4.0, 4.0), (4.5, 4.0)))
  assert [c.text for c in answers.nbest] == [u""] and answers.probabilities == [1.0]
  assert null_odds == {u"p": pytest.approx(1.5)}
  assert predictions == {u"p": u"Paris"}
  assert [e["text"] for e in nbest[u"p"]] == [u""]
  assert (answers.answer.text, answers.answer.char_start) == (u"Paris", 14)
  assert squad_data.answer_probability(answers) == pytest.approx(
      1.0 / (1.0 + math.exp(1.5)), abs=1e-12)


def test_every_question_gets_a_prediction(tmp_path, tokenizer):
  """Empty contexts and contexts whose only candidates are invalid still get one."""
  paragraphs = [
      (u"", [(u"empty", u"哪里？", [(u"", 0)], False)]),
      (u"\x00\ufffd ", [(u"deleted", u"哪里？", [], False)]),
      (u"北京是中国的首都", [(u"a", u"哪里？", [], False), (u"b", u"谁？", [], False)]),
      (LONG_CONTEXT, [(u"long", u"哪里？", [], False)]),
  ]
  path = write_squad(tmp_path, paragraphs)
  examples, _ = squad_data.read_squad_examples(path, False, False)
  features = list(squad_data.convert_examples_to_features(examples, tokenizer, 16, 4, 8, False,
                                                     collections.Counter()))
  rng = np.random.RandomState(1)
  start_logits = rng.randn(len(features), 16).astype(np.float32)
  end_logits = rng.randn(len(features), 16).astype(np.float32)
  ids = [e.qas_id for e in examples]
  for version_2 in (False, True):
    predictions, nbest, null_odds = squad_data.predict_answers(
        examples, features, start_logits, end_logits, 5, 3, version_2, 0.0)
    assert list(predictions) == ids and list(nbest) == ids
    assert list(null_odds) == (ids if version_2 else [])
    assert predictions[u"empty"] == predictions[u"deleted"] == u""
    for qid in ids:
      assert nbest[qid]
      assert abs(sum(entry["probability"] for entry in nbest[qid]) - 1.0) < 1e-6
      assert all(math.isfinite(value) for value in null_odds.values())
    if not version_2:
      assert predictions[u"long"] in LONG_CONTEXT
      assert 1 <= len(predictions[u"long"]) <= 3


def reference_predictions(examples, features, start_logits, end_logits, n_best_size,
                          max_answer_length, version_2, threshold):
  """Google's write_predictions, with texts cut by char offsets and "" for an example
  without any candidate."""
  predictions, all_nbest, all_odds = {}, {}, {}
  for example_index, example in enumerate(examples):
    prelim, null = [], None
    for index, feature in enumerate(features):
      if feature.example_index != example_index:
        continue
      starts, ends = list(start_logits[index]), list(end_logits[index])
      # The top n among context tokens (Google's takes them among all positions).
      context = [i for i in range(len(starts)) if feature.token_starts[i] >= 0]
      top_starts = sorted(context, key=lambda i: starts[i], reverse=True)
      top_ends = sorted(context, key=lambda i: ends[i], reverse=True)
      if version_2 and (null is None or starts[0] + ends[0] < null[0]):
        null = (starts[0] + ends[0], starts[0], ends[0], u"")
      for first in top_starts[:n_best_size]:
        for last in top_ends[:n_best_size]:
          if feature.token_starts[first] < 0 or feature.token_starts[last] < 0:
            continue
          if last < first or last - first + 1 > max_answer_length:
            continue
          if not feature.token_is_max_context[first]:
            continue
          text = example.context_text[feature.token_starts[first]:feature.token_ends[last]]
          prelim.append((starts[first] + ends[last], starts[first], ends[last], text))
    non_null = sorted(prelim, key=lambda p: p[0], reverse=True)
    if null is not None:
      prelim.append(null)
    prelim.sort(key=lambda p: p[0], reverse=True)
    nbest, seen = [], set()
    for entry in prelim:
      if len(nbest) >= n_best_size:
        break
      if entry[3] in seen:
        continue
      seen.add(entry[3])
      nbest.append(entry)
    if null is not None and u"" not in seen:
      nbest.append(null)
    if not nbest:
      nbest.append((0.0, 0.0, 0.0, u""))
    scores = np.array([entry[0] for entry in nbest], np.float64)
    probabilities = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
    all_nbest[example.qas_id] = [(entry[3], p, entry[1], entry[2])
                                 for entry, p in zip(nbest, probabilities)]
    if not version_2:
      predictions[example.qas_id] = nbest[0][3]
    elif not non_null:
      all_odds[example.qas_id] = squad_data.NO_SPAN_NULL_ODDS
      predictions[example.qas_id] = u""
    else:
      best = non_null[0]
      all_odds[example.qas_id] = null[0] - best[1] - best[2]
      predictions[example.qas_id] = u"" if all_odds[example.qas_id] > threshold else best[3]
  return predictions, all_nbest, all_odds


def test_predict_matches_google_rules_on_random_logits(tmp_path, tokenizer):
  contexts = [u"北京是中国的首都。他说：“你好！”然后走了（很快）。", LONG_CONTEXT, u"",
              u"Café Müller is a ballet by Pina Bausch. Hello big world, hello!"]
  paragraphs = [(context, [(u"%d-%d" % (i, j), u"哪里？", [], False) for j in range(2)])
                for i, context in enumerate(contexts)]
  path = write_squad(tmp_path, paragraphs)
  examples, _ = squad_data.read_squad_examples(path, False, False)
  features = list(squad_data.convert_examples_to_features(examples, tokenizer, 20, 5, 8, False,
                                                     collections.Counter()))
  assert len(features) > len(examples) + 4
  rng = np.random.RandomState(3)
  for trial in range(40):
    # Multiples of 0.5 add exactly, and ties exercise the ordering rules.
    start_logits = (rng.randint(-6, 7, size=(len(features), 20)) / 2.0).astype(np.float32)
    end_logits = (rng.randint(-6, 7, size=(len(features), 20)) / 2.0).astype(np.float32)
    n_best_size = (2, 3, 5, 20)[trial % 4]
    max_answer_length = (1, 2, 4, 30)[(trial // 4) % 4]
    version_2 = trial % 3 == 0
    threshold = (-1.0, 0.0, 1.5)[trial % 3]
    got = squad_data.predict_answers(examples, features, start_logits, end_logits, n_best_size,
                                max_answer_length, version_2, threshold)
    want = reference_predictions(examples, features, start_logits, end_logits, n_best_size,
                                 max_answer_length, version_2, threshold)
    assert dict(got[0]) == want[0]
    assert set(got[1]) == set(want[1])
    for qid, entries in got[1].items():
      assert [(e["text"], e["start_logit"], e["end_logit"]) for e in entries] == [
          (text, start, end) for text, _, start, end in want[1][qid]]
      np.testing.assert_allclose([e["probability"] for e in entries],
                                 [p for _, p, _, _ in want[1][qid]], rtol=1e-6)
    assert dict(got[2]) == pytest.approx(want[2])


# ---------------------------------------------------------------------------
# 4. Scoring
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    (u"The Cat!", u"cat"),
    (u"  New   York\tCity ", u"new york city"),
    (u"U.S. Army's", u"us armys"),
    (u"an apple, a pear and the fig", u"apple pear and fig"),
    (u"Theater banana", u"theater banana"),   # articles only as whole words
    (u"A", u""),
    (u"the-end", u"theend"),   # punctuation goes first, so "the" here is not a word
    (u"Café", u"café"),
])
def test_normalize_english_answer(text, expected):
  assert squad_scoring.normalize_english_answer(text) == expected


@pytest.mark.parametrize("prediction,gold,exact,f1", [
    (u"The Cat!", u"cat", 1.0, 1.0),
    (u"a cat sat on the mat", u"cat on mat", 0.0, 6.0 / 7.0),   # P 3/4, R 1
    (u"the the cat cat cat", u"cat cat dog", 0.0, 2.0 / 3.0),   # repeats count min(3, 2)
    (u"cat", u"dog", 0.0, 0.0),
    (u"", u"", 1.0, 1.0),
    (u"the", u"", 1.0, 1.0),          # both normalize to nothing
    (u"", u"cat", 0.0, 0.0),
    (u"Denver Broncos", u"broncos", 0.0, 2.0 / 3.0),
    (u"New York", u"new  york.", 1.0, 1.0),
])
def test_english_exact_and_f1(prediction, gold, exact, f1):
  got_exact, got_f1 = squad_scoring.english_exact_and_f1(prediction, gold)
  assert got_exact == exact
  assert got_f1 == pytest.approx(f1)


@pytest.mark.parametrize("text,expected", [
    (u"北京大学", [u"北", u"京", u"大", u"学"]),
    (u"我买了iPhone手机", [u"我", u"买", u"了", u"iphone", u"手", u"机"]),
    (u"iPhone 11 Pro", [u"iphone", u"11", u"pro"]),
    (u"“你好！”，他说。", [u"你", u"好", u"他", u"说"]),
    (u"（2018年）", [u"2018", u"年"]),
    (u"Hello,world", [u"hello", u",", u"world"]),  # unlisted ASCII punctuation: a segment
    (u"《三体》——刘慈欣", [u"三", u"体", u"—", u"—", u"刘", u"慈", u"欣"]),  # — not listed
    (u"C++语言~", [u"c", u"语", u"言"]),            # listed ASCII symbols are deleted
    (u"＄100，ＡＢ", [u"＄100ａｂ"]),  # listed "，" deleted without splitting; ＄ is no P*
    (u"", []),
    (u"。，！", []),
])
def test_chinese_segments(text, expected):
  assert squad_scoring.chinese_segments(text) == expected


@pytest.mark.parametrize("prediction,gold,exact,f1", [
    (u"北京大学", u"北京", 0.0, 2.0 / 3.0),            # P 2/4, R 1
    (u"在北京", u"北京市", 0.0, 2.0 / 3.0),            # common run 北京
    (u"北A京", u"北京", 0.0, 0.4),                     # contiguous run 1, not 2: P 1/3, R 1/2
    (u"北京。", u"北京", 1.0, 1.0),                    # punctuation dropped
    (u"“北京”", u"北京！", 1.0, 1.0),
    (u"iPhone手机", u"iphone", 0.0, 0.5),               # P 1/3, R 1
    (u"上海", u"北京", 0.0, 0.0),
    (u"京北", u"北京", 0.0, 0.5),                       # P 1/2, R 1/2
    (u"北京北京", u"北京", 0.0, 2.0 / 3.0),
    (u"Bordeaux.", u"Bordeaux", 0.0, 2.0 / 3.0),      # "." is not on CMRC's list: P 1/2, R 1
    (u"市场里的Wi-Fi苹果", u"苹果", 0.0, 4.0 / 9.0),   # "-" deleted: wifi is one unit, P 2/7
    (u"Wi-Fi", u"wifi", 1.0, 1.0),
    (u"北 京", u"北京", 0.0, 1.0),                      # exact match compares the text
    (u" 北京 ", u"北京", 1.0, 1.0),                     # ... after strip()
])
def test_chinese_exact_and_f1(prediction, gold, exact, f1):
  got_exact, got_f1 = squad_scoring.chinese_exact_and_f1(prediction, gold)
  assert got_exact == exact
  assert got_f1 == pytest.approx(f1)


def make_examples(golds):
  return [squad_data.SquadExample(qid, u"q", u"c", gold_answers=list(answers))
          for qid, answers in golds]


def test_score_predictions_v1_max_over_golds():
  examples = make_examples([
      (u"1", [u"Denver Broncos", u"Broncos"]),
      (u"2", [u"Carolina Panthers", u"Panthers football team"]),
      (u"3", [u"Santa Clara, California"]),
      (u"4", [])])  # no gold: not scored
  predictions = {u"1": u"the Broncos", u"2": u"Panthers team", u"3": u"Santa", u"4": u"x"}
  results = squad_scoring.score_predictions(examples, predictions, "squad")
  # 1: exact 1 (second gold), f1 1. 2: exact 0, f1 max(1/2 vs {carolina, panthers},
  # P 1 R 2/3 -> 4/5 vs {panthers, football, team}). 3: exact 0, f1 P 1 R 1/3 -> 1/2.
  assert results["total"] == 3
  assert results["exact_match"] == pytest.approx(100.0 / 3)
  assert results["f1"] == pytest.approx(100.0 * (1 + 0.8 + 0.5) / 3)
  assert "HasAns_total" not in results


def test_score_predictions_cmrc2018():
  examples = make_examples([(u"1", [u"北京", u"北京市"]), (u"2", [u"《三体》"]),
                            (u"3", [u"2018年"])])
  predictions = {u"1": u"北京市区", u"2": u"三体", u"3": u"在2018年"}
  results = squad_scoring.score_predictions(examples, predictions, "cmrc2018")
  # 1: vs 北京 P 2/4 R 1 -> 2/3; vs 北京市 P 3/4 R 1 -> 6/7. 2: exact. 3: P 2/3 R 1 -> 4/5.
  assert results["exact_match"] == pytest.approx(100.0 / 3)
  assert results["f1"] == pytest.approx(100.0 * (6.0 / 7 + 1 + 0.8) / 3)


def test_score_predictions_v2_hand_computed():
  examples = make_examples([
      (u"q1", [u"Denver Broncos", u"Broncos"]), (u"q2", [u"Carolina Panthers"]),
      (u"q3", [u""]), (u"q4", [u""]), (u"q5", [u"Levi's Stadium"])])
  predictions = {u"q1": u"the Broncos", u"q2": u"Panthers team", u"q3": u"",
                 u"q4": u"Santa Clara", u"q5": u""}
  nbest = {u"q1": [{"text": u"the Broncos"}, {"text": u""}],
           u"q2": [{"text": u"Panthers team"}],
           u"q3": [{"text": u""}, {"text": u"Santa"}],
           u"q4": [{"text": u"Santa Clara"}, {"text": u""}],
           u"q5": [{"text": u""}, {"text": u"Levi's Stadium"}]}
  null_odds = {u"q1": -2.0, u"q2": -1.0, u"q3": 3.0, u"q4": -0.5, u"q5": 0.5}
  results = squad_scoring.score_predictions(examples, predictions, "squad", null_odds, nbest)
  assert results["total"] == 5
  assert results["exact_match"] == pytest.approx(40.0)        # q1, q3
  assert results["f1"] == pytest.approx(50.0)                 # 1 + 1/2 + 1
  assert results["HasAns_total"] == 3 and results["NoAns_total"] == 2
  assert results["HasAns_exact"] == pytest.approx(100.0 / 3)
  assert results["HasAns_f1"] == pytest.approx(50.0)
  assert results["NoAns_exact"] == pytest.approx(50.0)
  assert results["NoAns_f1"] == pytest.approx(50.0)
  # Answering in null_odds order q1, q2, q4, q5, q3 (2 = all unanswered):
  #   exact: 3, 3, 2, 3, 2 -> best 3 (60%) first at -2.
  #   f1:    3, 3.5, 2.5, 3.5, 2.5 -> best 3.5 (70%) first at -1.
  assert results["best_exact"] == pytest.approx(60.0)
  assert results["best_exact_thresh"] == -2.0
  assert results["best_f1"] == pytest.approx(70.0)
  assert results["best_f1_thresh"] == -1.0


def score_at(threshold, best_scores, null_odds, has_answer):
  total = 0.0
  for qid, odds in null_odds.items():
    answered = odds <= threshold
    if has_answer[qid]:
      total += best_scores[qid] if answered else 0.0
    else:
      total += 0.0 if answered else 1.0
  return total


def test_best_null_threshold_hand_checked():
  has = {u"a": True, u"b": False, u"c": True}
  # Answering nothing is best: the threshold must be below every null_odds.
  best, threshold = squad_scoring.best_null_threshold({u"a": 0.0, u"c": 0.0},
                                              {u"a": 1.0, u"b": 2.0, u"c": 3.0}, has)
  assert best == pytest.approx(100.0 / 3)
  assert threshold < 1.0
  # A tie in null_odds: a and b share 1.0, so answering a means answering b too.
  best, threshold = squad_scoring.best_null_threshold({u"a": 1.0, u"c": 0.0},
                                              {u"a": 1.0, u"b": 1.0, u"c": 3.0}, has)
  assert best == pytest.approx(100.0 / 3)   # answering {a, b}: 1 + 0 + 0; none: 1
  assert threshold < 1.0
  best, threshold = squad_scoring.best_null_threshold({u"a": 1.0, u"c": 1.0},
                                              {u"a": 1.0, u"b": 1.0, u"c": 0.5}, has)
  assert best == pytest.approx(200.0 / 3)   # answer c only: 1 + 1 + 0
  assert threshold == 0.5


def test_best_null_threshold_matches_brute_force():
  rng = random.Random(11)
  for trial in range(1500):
    size = rng.randint(1, 7)
    ids = [u"q%d" % i for i in range(size)]
    has_answer = {q: rng.random() < 0.6 for q in ids}
    # Few distinct odds: plenty of ties.
    null_odds = {q: float(rng.randint(-3, 3)) / 2 for q in ids}
    best_scores = {q: rng.choice([0.0, 0.25, 0.5, 1.0]) for q in ids if has_answer[q]}
    best, threshold = squad_scoring.best_null_threshold(best_scores, null_odds, has_answer)
    candidates = [min(null_odds.values()) - 1.0] + sorted(set(null_odds.values()))
    scores = [score_at(t, best_scores, null_odds, has_answer) for t in candidates]
    assert best == pytest.approx(100.0 * max(scores) / size), (trial, null_odds)
    # The threshold, applied as --null_score_diff_threshold, gets that score...
    assert score_at(threshold, best_scores, null_odds, has_answer) == pytest.approx(
        max(scores))
    # ...and is the lowest one that does (a threshold below all when answering
    # nothing is best).
    first_best = candidates[scores.index(max(scores))]
    if first_best == candidates[0]:
      assert threshold < min(null_odds.values())
    else:
      assert threshold == first_best


def test_choose_scoring():
  chinese = squad_data.SquadExample(u"1", u"q", u"北京是首都")
  english = squad_data.SquadExample(u"2", u"q", u"Paris is the capital")
  assert squad_scoring.choose_scoring([chinese, chinese, english]) == "cmrc2018"
  assert squad_scoring.choose_scoring([chinese, english, english]) == "squad"
  assert squad_scoring.choose_scoring([chinese, english]) == "squad"


# ---------------------------------------------------------------------------
# 5. read_squad_examples errors
# ---------------------------------------------------------------------------

def write_raw(tmp_path, content, name="bad.json"):
  path = str(tmp_path / name)
  with open(path, "wb") as f:
    f.write(content if isinstance(content, bytes) else content.encode("utf-8"))
  return path


def read_error(path, is_training=True, version_2=False):
  with pytest.raises(errors.UsageError) as info:
    squad_data.read_squad_examples(path, is_training, version_2)
  message = str(info.value)
  assert path in message
  return message


def good_question(**changes):
  question = {"id": "q1", "question": u"哪里？", "answers": [{"text": u"北京",
                                                               "answer_start": 0}]}
  question.update(changes)
  return question


def squad_json(paragraphs):
  return json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]})


def test_invalid_json_names_the_file(tmp_path):
  read_error(write_raw(tmp_path, u'{"data": [ {"paragraphs": '))
  read_error(write_raw(tmp_path, u"", name="empty.json"))
  assert "line 2" in read_error(write_raw(tmp_path, b'{"data": []\n\xff\xfe}', "latin.json"))
  read_error(write_raw(tmp_path, u'{"version": "1.1"}', name="nodata.json"))
  read_error(write_raw(tmp_path, u'[1, 2]', name="list.json"))
  with pytest.raises(errors.UsageError) as info:
    squad_data.read_squad_examples(str(tmp_path / "missing.json"), True, False)
  assert "missing.json" in str(info.value)


@pytest.mark.parametrize("document,where,key", [
    ({"version": "1.1", "data": [{"title": "t"}]}, "data[0]", "paragraphs"),
    ({"data": [{"paragraphs": [{"qas": []}]}]}, "data[0].paragraphs[0]", "context"),
    ({"data": [{"paragraphs": [{"context": u"北京"}]}]}, "data[0].paragraphs[0]", "qas"),
    ({"data": [{"paragraphs": [{"context": u"北京", "qas": [
        good_question(), {"question": u"哪？", "answers": []}]}]}]},
     "data[0].paragraphs[0].qas[1]", "id"),
    ({"data": [{"paragraphs": [{"context": u"北京", "qas": [
        {"id": "q1", "answers": []}]}]}]}, "data[0].paragraphs[0].qas[0]", "question"),
    ({"data": [{"paragraphs": [{"context": u"北京", "qas": [
        good_question(answers=[{"answer_start": 0}])]}]}]},
     "data[0].paragraphs[0].qas[0].answers[0]", "text"),
    ({"data": [{"paragraphs": [{"context": u"北京", "qas": [
        good_question(answers=[{"text": u"北京"}])]}]}]},
     "data[0].paragraphs[0].qas[0].answers[0]", "answer_start"),
    ({"data": [{"paragraphs": [{"context": 5, "qas": []}]}]}, "data[0].paragraphs[0]",
     "context"),
    ({"data": [{"paragraphs": [{"context": u"北京", "qas": [
        good_question(answers={"text": u"北京"})]}]}]},
     "data[0].paragraphs[0].qas[0]", "answers"),
])
def test_missing_or_wrong_keys_name_the_json_path(tmp_path, document, where, key):
  message = read_error(write_raw(tmp_path, json.dumps(document, ensure_ascii=False)))
  assert where in message
  assert key in message


def test_duplicate_ids(tmp_path):
  path = write_raw(tmp_path, squad_json([
      {"context": u"北京", "qas": [good_question()]},
      {"context": u"北京", "qas": [good_question(), good_question(id="q2")]}]))
  message = read_error(path, is_training=False)
  assert "q1" in message
  assert "data[0].paragraphs[1].qas[0]" in message
  assert "data[0].paragraphs[0].qas[0]" in message
  # Integer ids are the same question as their string form.
  path = write_raw(tmp_path, squad_json([
      {"context": u"北京", "qas": [good_question(id=7), good_question(id="7")]}]), "int.json")
  assert "data[0].paragraphs[0].qas[1]" in read_error(path, is_training=False)


def test_v1_training_question_without_answers(tmp_path):
  path = write_raw(tmp_path, squad_json([
      {"context": u"北京", "qas": [good_question(), good_question(id="q9", answers=[])]}]))
  message = read_error(path, is_training=True, version_2=False)
  assert "data[0].paragraphs[0].qas[1]" in message
  assert "q9" in message
  # Fine for prediction, and for v2 when marked impossible.
  examples, _ = squad_data.read_squad_examples(path, False, False)
  assert [e.gold_answers for e in examples] == [[u"北京"], []]
  path = write_raw(tmp_path, squad_json([
      {"context": u"北京", "qas": [good_question(id="q9", answers=[], is_impossible=True)]}]),
      "v2.json")
  examples, _ = squad_data.read_squad_examples(path, True, True)
  assert examples[0].is_impossible and examples[0].gold_answers == [u""]
  # A v2 file read as v1 training: the impossible question has no answer.
  assert "q9" in read_error(path, is_training=True, version_2=False)


def test_reads_utf8_with_bom_and_keeps_order(tmp_path):
  path = write_raw(tmp_path, b"\xef\xbb\xbf" + squad_json([
      {"context": u"北京是首都", "qas": [good_question(id="b"), good_question(id="a")]},
      {"context": u"首都北京", "qas": [good_question(
          id="c", answers=[{"text": u"北京", "answer_start": 2}])]}]).encode("utf-8"))
  examples, counts = squad_data.read_squad_examples(path, True, False)
  assert [e.qas_id for e in examples] == [u"b", u"a", u"c"]
  assert [(e.answer_start, e.answer_end) for e in examples] == [(0, 2), (0, 2), (2, 4)]
  assert counts == {}


def test_reference_tokenizer_agrees_on_training_contexts(tokenizer):
  """The features' pieces are the plain tokenizer's, for every tricky context."""
  for context, _, _ in TRICKY_CONTEXTS + [(LONG_CONTEXT, None, None)]:
    pieces, _, _ = tokenizer.tokenize_with_offsets(context)
    assert pieces == reference_tokenizer.full_tokenize(context, tokenizer.vocab, True)


def test_all_tricky_contexts_together(tmp_path, tokenizer):
  """One file with every tricky question; small windows so answers straddle them."""
  paragraphs = [(context, [qa(u"q%d" % i, context, answer, occurrence=occurrence)])
                for i, (context, answer, occurrence) in enumerate(TRICKY_CONTEXTS)]
  path = write_squad(tmp_path, paragraphs)
  examples, _ = squad_data.read_squad_examples(path, True, False)
  counts = collections.Counter()
  features = list(squad_data.convert_examples_to_features(examples, tokenizer, 16, 3, 8, True,
                                                     counts))
  by_example = collections.defaultdict(list)
  for feature in features:
    by_example[feature.example_index].append(feature)
  total_without = 0
  for index, example in enumerate(examples):
    with_answer, without_answer = check_answer_windows(example, by_example[index])
    assert with_answer >= 1, example.qas_id
    total_without += without_answer
  assert counts["windows_without_answer"] == total_without > 0
  assert [f.unique_id for f in features] == list(
      range(squad_data.FIRST_UNIQUE_ID, squad_data.FIRST_UNIQUE_ID + len(features)))


# ---------------------------------------------------------------------------
# Review fixes
# ---------------------------------------------------------------------------

def test_v2_null_odds_use_the_best_span_even_outside_a_small_nbest():
  # With n_best_size=1 the null entry (score 2) tops the n-best; null_odds must still
  # compare it with the best span ("world", 2.5), not fall back to a made-up value.
  starts, ends = {0: 1.0, 6: 1.5, 4: 0.5}, {0: 1.0, 6: 1.0}
  starts[0], ends[0] = 2.0, 1.0  # null score 3 > 2.5
  predictions, nbest, null_odds = predict_one(starts, ends, n_best_size=1, version_2=True)
  assert null_odds == {u"h": pytest.approx(3.0 - 2.5)}
  assert predictions == {u"h": u""}
  predictions, _, _ = predict_one(starts, ends, n_best_size=1, version_2=True, threshold=0.6)
  assert predictions == {u"h": u"world"}


@pytest.mark.parametrize("value", ["false", "true", 2, None])
def test_is_impossible_must_be_a_json_boolean(tmp_path, value):
  path = write_squad(tmp_path, [(u"北京。", [qa(u"q1", u"北京。", u"北京")])])
  with open(path, encoding="utf-8") as f:
    data = json.load(f)
  data["data"][0]["paragraphs"][0]["qas"][0]["is_impossible"] = value
  with open(path, "w", encoding="utf-8") as f:
    json.dump(data, f)
  with pytest.raises(errors.UsageError, match=r"qas\[0\]\.is_impossible is"):
    squad_data.read_squad_examples(path, True, True)


def test_questions_without_an_answers_key_are_not_scored(tmp_path):
  path = write_squad(tmp_path, [(u"北京。", [qa(u"q1", u"北京。", u"北京"),
                                            (u"q2", u"哪里？", [], True)])], version="2.0")
  with open(path, encoding="utf-8") as f:
    data = json.load(f)
  for question in data["data"][0]["paragraphs"][0]["qas"]:
    del question["answers"]
  with open(path, "w", encoding="utf-8") as f:
    json.dump(data, f)
  examples, _ = squad_data.read_squad_examples(path, False, True)
  # No gold at all, not [""] for the unanswerable one: nothing to score against.
  assert [e.gold_answers for e in examples] == [None, None]
  assert [e.is_impossible for e in examples] == [False, True]


def test_cmrc_numbers_keep_their_decimal_point_and_thousands_comma():
  assert squad_scoring.chinese_segments(u"3.5亿元") == [u"3.5", u"亿", u"元"]
  assert squad_scoring.chinese_segments(u"1,000人") == [u"1,000", u"人"]
  assert squad_scoring.chinese_exact_and_f1(u"3.5", u"3.5亿") == (0.0, pytest.approx(2.0 / 3.0))
  assert squad_scoring.chinese_segments(u"end.") == [u"end", u"."]


def test_v2_golds_that_normalize_to_nothing_are_ignored():
  example = squad_data.SquadExample(u"q", u"?", u"the cat", gold_answers=[u"the", u"cat"])
  results = squad_scoring.score_predictions([example], {u"q": u""}, "squad", {u"q": 0.0},
                                    {u"q": [{"text": u""}]})
  assert results["exact_match"] == 0.0  # "" no longer matches the gold "the"
  results = squad_scoring.score_predictions([example], {u"q": u"cat"}, "squad", {u"q": 0.0},
                                    {u"q": [{"text": u"cat"}]})
  assert results["exact_match"] == 100.0


def test_max_context_flags_match_with_and_without_precomputed_best_windows():
  windows = sequence_windows.sliding_windows(50, 12, 5)
  best = sequence_windows.max_context_windows(windows, 50)
  for index in range(len(windows)):
    assert squad_data.max_context_flags(windows, index, best) == \
        squad_data.max_context_flags(windows, index)


# ---------------------------------------------------------------------------
# Input that used to be read silently wrong or to end in a traceback
# ---------------------------------------------------------------------------

def test_negative_answer_start_is_an_error(tmp_path, tokenizer):
  # context[-3:-1] is "首都": the old reader took the span (-3, -1), which overlaps no
  # token, and trained the question as "no answer" ([CLS]) without a word.
  context = u"北京是中国的首都。"
  path = write_raw(tmp_path, squad_json([{"context": context, "qas": [
      good_question(answers=[{"text": u"首都", "answer_start": -3}])]}]))
  message = read_error(path)
  assert "qas[0].answers[0].answer_start" in message and "-3" in message
  # Beyond the end is still moved to the nearest occurrence (and counted).
  path = write_raw(tmp_path, squad_json([{"context": context, "qas": [
      good_question(answers=[{"text": u"首都", "answer_start": 40}])]}]), "beyond.json")
  examples, counts = squad_data.read_squad_examples(path, True, False)
  assert (examples[0].answer_start, examples[0].answer_end) == (6, 8)
  assert counts == {"answers_moved": 1}


@pytest.mark.parametrize("question", [u"", u"  \u3000"])
@pytest.mark.parametrize("is_training", [True, False])
def test_empty_question_is_an_error(tmp_path, question, is_training):
  path = write_raw(tmp_path, squad_json([{"context": u"北京", "qas": [
      good_question(), good_question(id="q2", question=question)]}]))
  message = read_error(path, is_training=is_training)
  assert "qas[1]" in message and "'q2'" in message and "empty question" in message


def test_boolean_id_is_an_error(tmp_path):
  # true was read as the id "True".
  path = write_raw(tmp_path, squad_json([{"context": u"北京", "qas": [
      good_question(id=True)]}]))
  assert "qas[0].id is True" in read_error(path, is_training=False)


def test_key_given_twice_is_an_error(tmp_path):
  # json.loads kept the second context silently, so the answer was not found.
  path = write_raw(tmp_path, u'{"data": [{"paragraphs": [{"context": "北京", "context": '
                   u'"上海", "qas": []}]}]}')
  message = read_error(path)
  assert '"context" twice' in message and u'"北京"' in message and u'"上海"' in message


def test_unpaired_surrogate_is_an_error(tmp_path):
  # Read fine; writing predictions.json then failed with UnicodeEncodeError.
  path = write_raw(tmp_path, u'{"data": [{"paragraphs": [{"context": "\\ud800北京", "qas": '
                   u'[{"id": "a", "question": "x", "answers": []}]}]}]}')
  message = read_error(path, is_training=False)
  assert "data[0].paragraphs[0].context" in message and "\\ud800" in message
  # A proper pair is one character.
  path = write_raw(tmp_path, u'{"data": [{"paragraphs": [{"context": "\\ud83d\\ude00北京", '
                   u'"qas": [{"id": "a", "question": "x", "answers": []}]}]}]}', "pair.json")
  examples, _ = squad_data.read_squad_examples(path, False, False)
  assert examples[0].context_text == u"\U0001F600北京"


def test_nested_too_deeply_is_an_error(tmp_path):
  # A RecursionError traceback.
  assert "nested too deeply" in read_error(write_raw(tmp_path, "[" * 100000 + "]" * 100000))


def test_utf16_is_named(tmp_path):
  text = squad_json([{"context": u"北京", "qas": [good_question()]}])
  assert "UTF-16" in read_error(write_raw(tmp_path, text.encode("utf-16")))
  # Without a byte order mark, ASCII JSON in UTF-16 is NUL bytes between the characters.
  message = read_error(write_raw(tmp_path, text.encode("utf-16-le"), "le.json"))
  assert "line 1" in message and "NUL" in message and "UTF-16" in message


def test_vocab_without_special_tokens_is_a_usage_error(tmp_path):
  # A VocabLookupError (KeyError) traceback from the first window.
  path = write_vocab(str(tmp_path / "vocab.txt"),
                     [t for t in SPECIAL_TOKENS if t != "[CLS]"] + [u"北", u"京"])
  no_cls = tokenization.FullTokenizer(path, do_lower_case=True)
  example = squad_data.SquadExample("q", u"北京", u"北京")
  with pytest.raises(errors.UsageError) as info:
    list(squad_data.convert_examples_to_features([example], no_cls, 16, 8, 4, False,
                                                 collections.Counter()))
  assert "[CLS]" in str(info.value) and "--vocab_file" in str(info.value)


def test_write_features_names_a_refused_write(tmp_path, tokenizer):
  # A directory where the record file goes: an IsADirectoryError traceback.
  record_path = str(tmp_path / "train.tf_record")
  os.makedirs(record_path)
  example = squad_data.SquadExample("q", u"北京", u"北京是中国的首都")
  features = squad_data.convert_examples_to_features([example], tokenizer, 16, 8, 4, False,
                                                     collections.Counter())
  with pytest.raises(errors.UsageError) as info:
    squad_records.write_features(features, record_path, False, keep_metadata=True)
  assert record_path in str(info.value) and "directory" in str(info.value)
  assert os.listdir(str(tmp_path)) == ["train.tf_record"]  # no temp file left
