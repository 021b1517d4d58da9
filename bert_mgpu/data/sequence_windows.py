# coding=utf-8
"""Windows over a sequence longer than the model takes, and which window predicts each
position: shared by SQuAD's contexts (bert_mgpu/squad/data.py) and NER's sentences (bert_mgpu/ner/).
No TensorFlow import."""


def sliding_windows(length, window_length, stride):
  """The (start, length) windows over a sequence of `length` items.

  Windows start `stride` items apart (or one window length apart, if that is shorter, so
  that no item is skipped) until one reaches the end. An empty sequence gets one empty
  window, so it is still predicted.
  """
  windows, start = [], 0
  while True:
    size = min(length - start, window_length)
    windows.append((start, size))
    if start + size >= length:
      return windows
    start += min(size, stride)


def max_context_windows(windows, length):
  """For each item, the window where it has the most context (SQuAD's rule).

  An item's context in a window is min(items to its left, items to its right) + 0.01 *
  the window's length; the first window wins a tie, as in Google's run_squad.py.

  Returns:
    list of int [length], window indexes.
  """
  best_scores = [None] * length
  best = [0] * length
  for index, (start, size) in enumerate(windows):
    for position in range(start, start + size):
      score = min(position - start, start + size - 1 - position) + 0.01 * size
      if best_scores[position] is None or score > best_scores[position]:
        best_scores[position], best[position] = score, index
  return best
