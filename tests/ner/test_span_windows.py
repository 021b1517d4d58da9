# coding=utf-8
"""The span heads' windows and scores (bert_mgpu/ner/span_windows.py, span_scoring.py): spans
into each window that holds them and back from the window where they are farthest from an
edge, once each; exact-triple scores with the entities that lie inside another."""

import numpy as np
import pytest

from bert_mgpu.ner import featurizing
from bert_mgpu.ner import span_scoring
from bert_mgpu.ner import span_windows
import tokenization

# "ab" gives two pieces (ab -> a, ##b); the space gives none.
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "##b"] + list(u"北京大学医院在")


@pytest.fixture
def tokenizer(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text(u"".join(t + u"\n" for t in VOCAB), encoding="utf-8")
  return tokenization.FullTokenizer(str(path), do_lower_case=True)


def featurized(tokenizer, tokens, max_seq_length, doc_stride):
  aligned = featurizing.align_pieces(tokens, tokenizer)
  windows = featurizing.sentence_windows(aligned, None, max_seq_length, doc_stride, (2, 3))
  return aligned, windows


def test_spans_go_to_every_window_that_holds_their_pieces(tokenizer):
  # Tokens: 北 京 大 学 ab " " 在 医 院; pieces: 北 京 大 学 a ##b 在 医 院 (9).
  tokens = list(u"北京大学") + ["ab", " ", u"在", u"医", u"院"]
  aligned, windows = featurized(tokenizer, tokens, max_seq_length=7, doc_stride=2)
  assert [(w.piece_start, w.num_pieces) for w in windows] == [(0, 5), (2, 5), (4, 5)]
  spans = [("ORG", 0, 4), ("LOC", 0, 2), ("X", 4, 6), ("Y", 5, 6), ("Z", 0, 9)]
  per_window, counts = span_windows.window_span_triples(
      aligned, windows, spans, {"ORG": 0, "LOC": 1, "X": 2, "Y": 3, "Z": 4})
  # ORG: pieces 0-3, only in window 0 (positions 1-4); LOC: pieces 0-1, window 0;
  # X = "ab" + the space: pieces 4-5, windows 1 and 2; Y (the space alone) has no piece;
  # Z covers 9 pieces, more than a window.
  assert per_window == [[(0, 1, 4), (1, 1, 2)], [(2, 3, 4)], [(2, 1, 2)]]
  assert counts == span_windows.SpanCounts(spans=5, longer_than_window=1, without_pieces=1)


def outputs_of(*triples):
  """One window's (types, starts, ends, scores), padded like top_spans with low scores."""
  rows = list(triples) + [(0, 0, 0, -1e12)] * 2
  return tuple(np.array(column) for column in zip(*rows))


def test_a_span_seen_by_two_windows_is_kept_once_from_the_farther_from_an_edge(tokenizer):
  tokens = list(u"北京大学医院在北京")
  aligned, windows = featurized(tokenizer, tokens, max_seq_length=7, doc_stride=2)
  assert [(w.piece_start, w.num_pieces) for w in windows] == [(0, 5), (2, 5), (4, 5)]
  # Piece 4 (医): window 0 position 5 (0 from its edge), window 1 position 3 (2 from
  # both), window 2 position 1 (0): window 1 keeps it.
  window_outputs = [outputs_of((0, 5, 5, 3.0), (1, 1, 2, 2.0)),
                    outputs_of((0, 3, 3, 1.5), (0, 1, 1, -0.5)),
                    outputs_of((0, 1, 1, 4.0), (1, 4, 5, 0.7))]
  spans = span_windows.spans_from_windows(aligned, windows, window_outputs, ["ORG", "LOC"])
  # 医 once (window 1's); 北京 from window 0; 在北 (pieces 7-8) from window 2, the only
  # window that holds it; the negative score is not a span.
  assert spans == [("LOC", 0, 2), ("ORG", 4, 5), ("LOC", 7, 9)]
  # Predicted only by a window where it is nearer an edge: not kept.
  window_outputs[1] = outputs_of()
  spans = span_windows.spans_from_windows(aligned, windows, window_outputs, ["ORG", "LOC"])
  assert ("ORG", 4, 5) not in spans


def test_scores_are_over_exact_triples_and_report_the_nested_entities():
  gold = [[("ORG", 0, 4), ("LOC", 0, 2), ("PER", 5, 7)], [("ORG", 0, 3)]]
  predicted = [[("ORG", 0, 4), ("LOC", 0, 3), ("PER", 5, 7)], [("LOC", 0, 3), ("ORG", 0, 3)]]
  result = span_scoring.score(gold, predicted)
  assert (result["num_gold"], result["num_predicted"], result["num_correct"]) == (4, 5, 3)
  assert result["precision"] == pytest.approx(3 / 5) and result["recall"] == 0.75
  assert result["per_type"]["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0,
                                       "support": 1, "predicted": 2, "correct": 0}
  # Gold inside another: LOC 0-2 (missed). Predicted inside another: LOC 0-3 (wrong); the
  # second sentence's two spans share one extent, so neither lies inside another.
  assert result["nested"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1,
                              "found": 0, "predicted": 1, "correct": 0}
  found = span_scoring.score(gold, [gold[0], []])["nested"]
  assert (found["recall"], found["precision"], found["found"]) == (1.0, 1.0, 1)
  report = span_scoring.format_report(result)
  assert report.startswith("4 entities; found: 5 entities; correct: 3.")
  assert "entities inside another: precision 0.0000, recall 0.0000" in report


def test_type_shares_count_each_windows_spans():
  shares = span_windows.type_shares([[(0, 1, 1), (2, 1, 3), (2, 2, 2)], []], 3)
  np.testing.assert_allclose(shares, [[1 / 3, 0, 2 / 3], [0, 0, 0]])
