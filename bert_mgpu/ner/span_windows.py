# coding=utf-8
"""Entity spans in the windows of the span heads (ner/global_pointer.py), and the windows'
predicted spans back to the sentence's.

A span (type, start, end) of a sentence counts tokens, end exclusive; in a window it is
(type id, start position, end position) with the positions of its first and last word
piece ([CLS] is position 0), end inclusive. A token that gives no piece (a space) takes no
part: a span starts at the first piece of its first token that has pieces and ends at the
last piece of its last one.

A span lies in every window that holds all its pieces. Training gives each window the spans
it holds; prediction keeps a span from the window where it is farthest from an edge (the
smaller of its distances to the window's first and last piece; the first window wins
ties), so a span predicted by several overlapping windows is kept once.

No TensorFlow import.
"""

import collections

import numpy as np

from bert_mgpu.data import length_grouping

SpanCounts = collections.namedtuple("SpanCounts", ["spans", "longer_than_window",
                                                   "without_pieces"])
SpanCounts.__doc__ = """What became of a split's gold spans: how many there are, how many
hold more pieces than a window (no window can learn them) and how many cover only tokens
without pieces."""


def last_pieces(aligned):
  """The index of each token's last piece, or -1 for a token without pieces."""
  last = [-1] * len(aligned.first_pieces)
  for piece, token in enumerate(aligned.piece_tokens):
    last[token] = piece
  return last


def piece_span(aligned, last, start, end):
  """(first piece, last piece) of the tokens [start, end), or None when none has pieces.

  Args:
    aligned: the sentence's featurizing.SentencePieces.
    last: last_pieces(aligned).
    start, end: token indexes, end exclusive.
  """
  with_pieces = [token for token in range(start, end) if aligned.first_pieces[token] >= 0]
  if not with_pieces:
    return None
  return aligned.first_pieces[with_pieces[0]], last[with_pieces[-1]]


def window_span_triples(aligned, windows, spans, type_ids):
  """The spans each window holds.

  Args:
    aligned: the sentence's SentencePieces.
    windows: its list of featurizing.NerWindow.
    spans: list of (type, start, end), token indexes, end exclusive.
    type_ids: dict type -> id.

  Returns:
    (list [len(windows)] of lists of (type id, start position, end position),
     SpanCounts of the sentence).
  """
  last = last_pieces(aligned)
  per_window = [[] for _ in windows]
  too_long = without_pieces = 0
  for entity_type, start, end in spans:
    pieces = piece_span(aligned, last, start, end)
    if pieces is None:
      without_pieces += 1
      continue
    held = False
    for index, window in enumerate(windows):
      if window.piece_start <= pieces[0] and pieces[1] < window.piece_start + window.num_pieces:
        per_window[index].append((type_ids[entity_type], pieces[0] - window.piece_start + 1,
                                  pieces[1] - window.piece_start + 1))
        held = True
    too_long += not held
  return per_window, SpanCounts(len(spans), too_long, without_pieces)


def _context(window, first_piece, last_piece):
  """How far a piece span is from the nearer edge of a window (pieces)."""
  return min(first_piece - window.piece_start,
             window.piece_start + window.num_pieces - 1 - last_piece)


def _best_window(windows, first_piece, last_piece):
  """The index of the window that holds the piece span farthest from an edge."""
  best, best_context = None, None
  for index, window in enumerate(windows):
    if window.piece_start <= first_piece and last_piece < window.piece_start + window.num_pieces:
      context = _context(window, first_piece, last_piece)
      if best is None or context > best_context:
        best, best_context = index, context
  return best


def spans_from_windows(aligned, windows, window_outputs, label_list):
  """The predicted spans of one sentence.

  Args:
    aligned: the sentence's SentencePieces.
    windows: its list of NerWindow, in order.
    window_outputs: for each window, (types, starts, ends, scores): the window's best
      pairs (global_pointer.top_spans), window positions, end inclusive.
    label_list: the entity types; a type id is an index.

  Returns:
    sorted list of (type, start, end): token indexes, end exclusive; each span once.
  """
  found = set()
  for index, (window, outputs) in enumerate(zip(windows, window_outputs)):
    for type_id, start, end, score in zip(*outputs):
      if not (score > 0 and 0 <= type_id < len(label_list)
              and 1 <= start <= end <= window.num_pieces):
        continue
      first_piece = window.piece_start + int(start) - 1
      last_piece = window.piece_start + int(end) - 1
      if _best_window(windows, first_piece, last_piece) == index:
        found.add((label_list[type_id], aligned.piece_tokens[first_piece],
                   aligned.piece_tokens[last_piece] + 1))
  return sorted(found, key=lambda span: (span[1], span[2], span[0]))


def max_spans_per_window(window_triples):
  """The most spans any window holds (at least 1): the records' padded span count."""
  return max([len(triples) for triples in window_triples] + [1])


def type_shares(window_spans, num_types):
  """--group_by_length's skew targets of the span heads: the share of each entity type
  among a window's spans (length_grouping.tag_shares of their type ids).

  Returns:
    float32 array [windows, num_types]; all zero for a window without spans.
  """
  width = max_spans_per_window(window_spans)
  type_ids = np.zeros([len(window_spans), width], np.int64)
  present = np.zeros([len(window_spans), width], np.int64)
  for row, triples in enumerate(window_spans):
    type_ids[row, :len(triples)] = [triple[0] for triple in triples]
    present[row, :len(triples)] = 1
  return length_grouping.tag_shares(type_ids, present, num_types)
