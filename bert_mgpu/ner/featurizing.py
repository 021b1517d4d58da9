# coding=utf-8
"""NER sentences as model inputs: word-piece alignment and windows, and the windows'
predictions back to one tag per token.

Alignment: each token is tokenized on its own; its tag goes to its first word piece
and the others get label mask 0. A token that gives no piece (a space, a control
character) is predicted O (see tags_from_windows for the one exception).

Windows: a sentence longer than max_seq_length - 2 pieces is cut into windows whose
starts are doc_stride pieces apart; each token takes its prediction from the window
where it has the most context (SQuAD's rule: min(pieces left, pieces right) + 0.01 *
window length, the first window wins ties).

No TensorFlow import.
"""

import numpy as np

from bert_mgpu.data import sequence_windows
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import scoring as ner_scoring
from bert_mgpu.ner import tag_labels
import tokenization


# ---------------------------------------------------------------------------
# Word pieces: the first piece of each token carries its tag
# ---------------------------------------------------------------------------

class SentencePieces(object):
  """The word pieces of a sentence's tokens.

  Attributes:
    pieces: list of str, the pieces of all tokens in order.
    piece_ids: list of int [len(pieces)], their vocab ids.
    piece_tokens: list of int [len(pieces)], the token each piece came from.
    first_pieces: list of int [num tokens], the index of each token's first piece, or
      -1 for a token that gives no piece.
  """

  def __init__(self, pieces, piece_ids, piece_tokens, first_pieces):
    self.pieces = pieces
    self.piece_ids = piece_ids
    self.piece_tokens = piece_tokens
    self.first_pieces = first_pieces


def align_pieces(tokens, tokenizer, cache=None):
  """Tokenizes each token on its own, keeping which token each piece came from.

  Args:
    tokens: list of str.
    tokenizer: a tokenization.FullTokenizer (tokenize, convert_tokens_to_ids).
    cache: optional dict token -> (pieces, ids), shared between sentences (most
      Chinese tokens are characters that recur).

  Returns:
    A SentencePieces.
  """
  cache = {} if cache is None else cache
  pieces, piece_ids, piece_tokens, first_pieces = [], [], [], []
  for index, token in enumerate(tokens):
    entry = cache.get(token)
    if entry is None:
      token_pieces = tokenizer.tokenize(token)
      entry = cache[token] = (token_pieces, tokenizer.convert_tokens_to_ids(token_pieces))
    first_pieces.append(len(pieces) if entry[0] else -1)
    pieces.extend(entry[0])
    piece_ids.extend(entry[1])
    piece_tokens.extend([index] * len(entry[0]))
  return SentencePieces(pieces, piece_ids, piece_tokens, first_pieces)


# ---------------------------------------------------------------------------
# Windows over long sentences
# ---------------------------------------------------------------------------

def check_window_settings(max_seq_length, doc_stride):
  """Raises UsageError unless max_seq_length >= 3 and doc_stride >= 1."""
  if max_seq_length < 3:
    raise UsageError("--max_seq_length=%d leaves no room for a piece between [CLS] and "
                     "[SEP]; give 3 or more (128 is usual)" % max_seq_length)
  if doc_stride < 1:
    raise UsageError("--doc_stride=%d: windows must start at least 1 piece apart; give a "
                     "positive number (64 is the default)" % doc_stride)


class NerWindow(object):
  """The model input of one window: [CLS] pieces [SEP], zero-padded to max_seq_length.

  Attributes:
    sentence_index: the sentence it belongs to.
    window_index: its index among the sentence's windows.
    piece_start, num_pieces: the pieces of the sentence it holds (position 1 + i holds
      piece piece_start + i).
    input_ids, input_mask, segment_ids: lists of int [max_seq_length].
    label_ids: list of int [max_seq_length]: the tag id at each token's first piece, 0
      elsewhere (and everywhere for a sentence without tags).
    label_mask: list of int [max_seq_length]: 1 at first pieces, which carry a tag.
    is_max_context: list of int [max_seq_length]: 1 at the pieces whose most context is
      in this window; a token is predicted where its first piece has the flag.
  """

  def __init__(self, **fields):
    self.__dict__.update(fields)


def _special_ids(tokenizer):
  """The ids of [CLS] and [SEP]; UsageError when the vocab lacks them."""
  vocab = tokenizer.vocab
  missing = tokenization.missing_special_token(vocab, ("[CLS]", "[SEP]"))
  if missing:
    raise UsageError("The vocab (--vocab_file) has no %s token, which every window needs. "
                     "Use the vocab.txt that came with the checkpoint." % missing)
  return vocab["[CLS]"], vocab["[SEP]"]


def _padded(values, length):
  return values + [0] * (length - len(values))


def sentence_windows(aligned, tag_ids, max_seq_length, doc_stride, special_ids,
                     sentence_index=0):
  """The windows of one sentence.

  Args:
    aligned: the SentencePieces of the sentence.
    tag_ids: list of int [num tokens], the label id of each token, or None.
    max_seq_length: positions per window, [CLS] and [SEP] included.
    doc_stride: pieces between window starts.
    special_ids: (id of [CLS], id of [SEP]).
    sentence_index: stored in each window.

  Returns:
    list of NerWindow; one when the sentence has at most max_seq_length - 2 pieces.
  """
  num_pieces = len(aligned.pieces)
  windows = sequence_windows.sliding_windows(num_pieces, max_seq_length - 2, doc_stride)
  best = sequence_windows.max_context_windows(windows, num_pieces)
  first_piece_tags = {}
  for token, piece in enumerate(aligned.first_pieces):
    if piece >= 0:
      first_piece_tags[piece] = tag_ids[token] if tag_ids is not None else 0
  result = []
  cls_id, sep_id = special_ids
  for window_index, (start, length) in enumerate(windows):
    pieces = range(start, start + length)
    result.append(NerWindow(
        sentence_index=sentence_index, window_index=window_index, piece_start=start,
        num_pieces=length,
        input_ids=_padded([cls_id] + aligned.piece_ids[start:start + length] + [sep_id],
                          max_seq_length),
        input_mask=_padded([1] * (length + 2), max_seq_length),
        segment_ids=[0] * max_seq_length,
        label_ids=_padded([0] + [first_piece_tags.get(p, 0) for p in pieces], max_seq_length),
        label_mask=_padded([0] + [int(p in first_piece_tags) for p in pieces], max_seq_length),
        is_max_context=_padded([0] + [int(best[p] == window_index) for p in pieces],
                               max_seq_length)))
  return result


def _tag_ids(sentence, label_map):
  """The label id of each tag of a sentence; UsageError naming a tag not in the map."""
  ids = []
  for index, tag in enumerate(sentence.tags):
    if tag not in label_map:
      raise tag_labels.not_in_labels_error(sentence, index, len(label_map))
    ids.append(label_map[tag])
  return ids


def featurize_sentences(sentences, tokenizer, label_list, max_seq_length, doc_stride,
                        use_tags=True):
  """The alignment and the windows of every sentence.

  Args:
    sentences: list of NerSentence (tags are used when present and use_tags).
    tokenizer: a tokenization.FullTokenizer.
    label_list: list of str; a tag's label id is its index.
    max_seq_length, doc_stride: the flags (check_window_settings).
    use_tags: False for the span heads, whose labels are spans (ner/span_windows.py):
      the windows' label_ids are then all 0.

  Returns:
    list [len(sentences)] of (SentencePieces, list of NerWindow).

  Raises:
    UsageError: bad settings, a vocab without [CLS] or [SEP], or a tag not in label_list.
  """
  check_window_settings(max_seq_length, doc_stride)
  special_ids = _special_ids(tokenizer)
  label_map = {label: index for index, label in enumerate(label_list)}
  cache = {}
  result = []
  for index, sentence in enumerate(sentences):
    aligned = align_pieces(sentence.tokens, tokenizer, cache)
    tag_ids = (_tag_ids(sentence, label_map) if use_tags and sentence.tags is not None
               else None)
    result.append((aligned, sentence_windows(aligned, tag_ids, max_seq_length, doc_stride,
                                             special_ids, sentence_index=index)))
  return result


# ---------------------------------------------------------------------------
# Window predictions back to one tag per token
# ---------------------------------------------------------------------------

def _fill_tokens_without_pieces(tags, first_pieces, scheme):
  """Tags the tokens that gave no piece: O, unless they sit inside one entity.

  A run of such tokens (e.g. the space in "New York" as CLUENER writes it, one token
  per character) between a token that opens or continues an entity (B-, I-, M-) and
  one that continues it with the same type (I-, M-, E-) gets the inside tag, so the
  entity is not cut in two; anywhere else it gets O.
  """
  inside = "M" if scheme == "BMES" else "I"
  index = 0
  while index < len(tags):
    if first_pieces[index] >= 0:
      index += 1
      continue
    end = index
    while end < len(tags) and first_pieces[end] < 0:
      end += 1
    before = ner_scoring.split_tag(tags[index - 1]) if index else None
    after = ner_scoring.split_tag(tags[end]) if end < len(tags) else None
    fill = ner_scoring.OUTSIDE
    if (before and after and before[0] in ("B", "I", "M") and after[0] in ("I", "M", "E")
        and before[1] == after[1]):
      fill = "%s-%s" % (inside, before[1])
    tags[index:end] = [fill] * (end - index)
    index = end
  return tags


def tags_from_windows(aligned, windows, window_label_ids, label_list, scheme):
  """The predicted tag of every token of one sentence, from its windows' predictions.

  Each token takes the prediction at its first piece in the window flagged as that
  piece's max-context window. Tokens without a piece are filled by
  _fill_tokens_without_pieces. The tags are returned as predicted (possibly ill-formed;
  ner_scoring.repair rewrites them).

  Args:
    aligned: the sentence's SentencePieces.
    windows: its list of NerWindow, in window order.
    window_label_ids: for each window, the predicted label id at each position (at least
      its num_pieces + 1 first positions; [CLS] is position 0).
    label_list: list of str.
    scheme: one of ner_scoring.SCHEMES.

  Returns:
    list of str [num tokens].
  """
  predicted = {}  # piece index -> label id
  for window, label_ids in zip(windows, window_label_ids):
    for offset in range(window.num_pieces):
      if window.is_max_context[offset + 1]:
        predicted[window.piece_start + offset] = label_ids[offset + 1]
  tags = [label_list[predicted[piece]] if piece >= 0 else ner_scoring.OUTSIDE
          for piece in aligned.first_pieces]
  return _fill_tokens_without_pieces(tags, aligned.first_pieces, scheme)


def tag_skew_inputs(windows):
  """What length_grouping.label_skew needs of the training windows: lengths int [n] (the
  pieces with [CLS] and [SEP]) and tag ids [n, seq] with their mask [n, seq]."""
  lengths = np.array([window.num_pieces + 2 for window in windows])  # [n]
  tag_ids = np.array([window.label_ids for window in windows], np.int32)  # [n, seq]
  tag_mask = np.array([window.label_mask for window in windows], np.int8)  # [n, seq]
  return lengths, tag_ids, tag_mask
