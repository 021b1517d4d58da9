# coding=utf-8
"""Texts longer than max_seq_length: head-and-tail truncation and a document's windows as
model inputs; the --long_text flags and their checks.

Plain Python, no TensorFlow (the featurizing processes and predict_text run it, the ONNX
Runtime predictor too); window_pooling.py combines the windows' vectors in the model.
"""

import collections

from bert_mgpu.data import sequence_windows
from bert_mgpu.errors import UsageError


def head_tail(tokens, room, head_tokens=None):
  """The first `head_tokens` tokens and the last `room - head_tokens` of a text.

  Args:
    tokens: list of word pieces.
    room: how many tokens may be kept (>= 0).
    head_tokens: tokens kept from the start, 0 <= head_tokens <= room; None: room // 4.

  Returns:
    A new list: `tokens` unchanged if they fit in `room`, else head + tail, `room` long.

  Raises:
    ValueError: room < 0, or head_tokens outside [0, room].
  """
  if room < 0:
    raise ValueError("room must be >= 0, got %d" % room)
  if head_tokens is None:
    head_tokens = room // 4
  if not 0 <= head_tokens <= room:
    raise ValueError("head_tokens must be in [0, %d], got %d" % (room, head_tokens))
  if len(tokens) <= room:
    return list(tokens)
  return list(tokens[:head_tokens]) + list(tokens[len(tokens) - (room - head_tokens):])


# The model inputs of one document's windows, in window order (the first window starts at
# the text's start, the last ends at its end unless max_windows cut the windows).
#   tokens: list [windows] of token lists, unpadded: [CLS] a-part [SEP] (b [SEP]).
#   input_ids, input_mask, segment_ids: lists [windows][max_seq_length] of int,
#     zero-padded, in featurizing.convert_single_example's layout.
#   windows_cut: windows dropped by max_windows (0 when all fit).
#   text_b_cut: tokens cut from text_b's end to leave text_a its minimum room (0: whole).
DocumentWindows = collections.namedtuple(
    "DocumentWindows",
    ["tokens", "input_ids", "input_mask", "segment_ids", "windows_cut", "text_b_cut"])


def _text_a_room(num_a, num_b, max_seq_length, min_a_tokens):
  """(tokens of text_a per window, tokens of text_b kept) for a document."""
  if not num_b:
    if max_seq_length < 3:
      raise ValueError("max_seq_length must be >= 3, got %d" % max_seq_length)
    return max_seq_length - 2, 0  # [CLS] a [SEP]
  room = max_seq_length - 3  # [CLS] a [SEP] b [SEP]
  if room < 2:
    raise ValueError("a text pair needs max_seq_length >= 5, got %d" % max_seq_length)
  if min_a_tokens is None:
    min_a_tokens = room // 2
  if not 1 <= min_a_tokens < room:
    raise ValueError("min_a_tokens must be in [1, %d], got %d" % (room - 1, min_a_tokens))
  # text_b is cut only as far as text_a needs: a pair that fits is kept whole.
  keep_b = min(num_b, max(room - min_a_tokens, room - num_a))
  return room - keep_b, keep_b


def document_windows(tokens_a, tokens_b, max_seq_length, doc_stride, max_windows,
                     convert_tokens_to_ids, min_a_tokens=None):
  """Cuts one document into windows, each a complete model input.

  Single text: a window holds `max_seq_length - 2` tokens of text_a,
  [CLS] a-part [SEP]. Pair: text_b stands whole in every window, [CLS] a-part [SEP] b [SEP],
  and a window holds the `max_seq_length - 3 - len(b)` tokens of text_a that remain. When
  text_b would leave text_a fewer than `min_a_tokens` per window (default half of
  max_seq_length - 3), text_b's end is cut until text_a has that room, or all the room it
  needs if it is shorter; the cut is counted in `text_b_cut`, so it can be logged.

  Windows start `doc_stride` tokens apart (or one window apart, if that is shorter, so no
  token is skipped) until one reaches the end of text_a: the last window ends at the
  text's end and none starts beyond what is needed (sequence_windows.sliding_windows,
  SQuAD's rule). A document that fits gives exactly one window, identical to
  featurizing.convert_single_example's truncating features (an empty or missing
  text_b makes a single-text example there too). At most `max_windows` windows are kept,
  the first ones; the others are counted in `windows_cut`.

  Args:
    tokens_a: list of word pieces of text_a.
    tokens_b: list of word pieces of text_b, or None (an empty list: a single text).
    max_seq_length: tokens per window, special tokens included.
    doc_stride: tokens between the starts of consecutive windows (>= 1).
    max_windows: windows kept at most (>= 1), or None for no limit.
    convert_tokens_to_ids: function(list of tokens) -> list of ids, e.g. a
      tokenization.FullTokenizer's convert_tokens_to_ids.
    min_a_tokens: for pairs, text_a's minimum room per window (1 .. max_seq_length - 4);
      None: (max_seq_length - 3) // 2.

  Returns:
    DocumentWindows.

  Raises:
    ValueError: a size argument out of range.
  """
  if doc_stride < 1:
    raise ValueError("doc_stride must be >= 1, got %d" % doc_stride)
  if max_windows is not None and max_windows < 1:
    raise ValueError("max_windows must be >= 1, got %d" % max_windows)
  tokens_b = list(tokens_b or [])
  room_a, keep_b = _text_a_room(len(tokens_a), len(tokens_b), max_seq_length, min_a_tokens)
  b_part = tokens_b[:keep_b] + ["[SEP]"] if tokens_b else []
  spans = sequence_windows.sliding_windows(len(tokens_a), room_a, doc_stride)
  kept = spans if max_windows is None else spans[:max_windows]
  windows = DocumentWindows([], [], [], [], len(spans) - len(kept), len(tokens_b) - keep_b)
  for start, size in kept:
    a_part = ["[CLS]"] + list(tokens_a[start:start + size]) + ["[SEP]"]
    padding = [0] * (max_seq_length - len(a_part) - len(b_part))
    windows.tokens.append(a_part + b_part)
    windows.input_ids.append(list(convert_tokens_to_ids(a_part + b_part)) + padding)
    windows.input_mask.append([1] * (len(a_part) + len(b_part)) + padding)
    windows.segment_ids.append([0] * len(a_part) + [1] * len(b_part) + padding)
  return windows


# --long_text: what is done with a text longer than max_seq_length.
MODES = ("truncate", "head_tail", "windows")


def define_flags(flags):
  """run_classifier_mgpu.py's --long_text flags (`flags`: tf.flags)."""
  flags.DEFINE_enum("long_text", "truncate", list(MODES),
                    "A text longer than max_seq_length: truncate (cut its end, Google's), "
                    "head_tail (keep --head_tokens from its start and the rest from its end), or "
                    "windows (read it whole: windows --doc_stride apart, their pooled vectors "
                    "combined by --window_pooling, one prediction per text).")
  flags.DEFINE_integer("head_tokens", None, "With --long_text=head_tail: tokens kept from the "
                       "start of a long text (default: a quarter of the room).")
  flags.DEFINE_integer("doc_stride", 64, "With --long_text=windows: tokens between the starts "
                       "of a long text's windows.")
  flags.DEFINE_integer("max_windows", 8, "With --long_text=windows: the most windows read per "
                       "text; text past them is left out and counted in the log.")
  flags.DEFINE_enum("window_pooling", "max", ["max", "mean"], "With --long_text=windows: how "
                    "the windows' pooled vectors are combined into the text's.")


# The --long_text flags that one mode alone reads, and that mode.
MODE_OF_FLAG = {"head_tokens": "head_tail", "doc_stride": "windows", "max_windows": "windows",
                "window_pooling": "windows"}


def unread_flags(mode):
  """{flag name: the setting that reads it} of the flags --long_text=`mode` ignores
  (command_line.refuse_unread_flags)."""
  return {name: "--long_text=" + flag_mode for name, flag_mode in MODE_OF_FLAG.items()
          if flag_mode != mode}


def check_options(options, max_seq_length):
  """The --long_text settings' checks (input_examples.FeatureOptions), before anything is
  written. Raises UsageError."""
  if options.long_text == "head_tail" and options.head_tokens is not None and not (
      0 <= options.head_tokens <= max_seq_length - 2):
    raise UsageError("--head_tokens=%d: use 0 to max_seq_length - 2 = %d tokens from the "
                     "start." % (options.head_tokens, max_seq_length - 2))
  if options.long_text == "windows":
    for name in ("doc_stride", "max_windows"):
      if getattr(options, name) < 1:
        raise UsageError("--%s=%d: it must be at least 1." % (name, getattr(options, name)))
    if max_seq_length < 5:
      raise UsageError("--long_text=windows needs --max_seq_length of at least 5.")
