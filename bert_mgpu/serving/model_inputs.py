# coding=utf-8
"""Model inputs: raw texts featurized exactly as training did (NumPy), and their run through a
model in batches of similar length.

No TensorFlow import: the ONNX Runtime predictor featurizes with it too; the serving graph's
placeholders are serving_graph.py's.
"""

import collections
import logging

import numpy as np

from bert_mgpu.classifier import featurizing
from bert_mgpu.classifier import input_examples
from bert_mgpu.classifier import long_text
from bert_mgpu.data import batch_shapes
from bert_mgpu.data.batch_shapes import MODEL_INPUTS

# TensorFlow's logger (tf.get_logger() is this logger on TF 1.15 and 2.x).
_LOGGER = logging.getLogger("tensorflow")


# ---------------------------------------------------------------------------
# Texts to features
# ---------------------------------------------------------------------------

Features = collections.namedtuple("Features", ["arrays", "truncated"])
Features.__doc__ = """Model inputs of a list of texts (or, for NER, of their windows).

Fields:
  arrays: dict input_ids / input_mask / segment_ids (NER: and tag_mask) -> np.int32
    [n, max_seq_length].
  truncated: np.bool_ [n], whether the text (pair) was cut to max_seq_length (NER windows:
    never).
"""


class NoTokensError(ValueError):
  """A text whose tokenization is empty (only spaces, control or zero-width characters).

  Attributes:
    row: its index in the texts given to featurize().
    field: "a" (texts_a) or "b" (texts_b).
  """

  def __init__(self, row, field):
    super(NoTokensError, self).__init__(
        "text_%s of row %d has no tokens (only spaces, control or invisible characters)" %
        (field, row))
    self.row = row
    self.field = field


def _check_tokens(arrays, row, pair):
  """Raises NoTokensError when text_a, or text_b of a pair, had no tokens.

  Read off the converted row rather than tokenizing twice: a single text without tokens is
  [CLS] [SEP]; a pair whose text_a has none puts text_b (segment 1) right after [CLS] [SEP];
  one whose text_b has none is converted as a single text (no segment 1 at all).
  """
  segment_ids = arrays["segment_ids"][row]
  if arrays["input_mask"][row].sum() == 2 or (pair and segment_ids[2] == 1):
    raise NoTokensError(row, "a")
  if pair and segment_ids.sum() == 0:
    raise NoTokensError(row, "b")


def featurize(tokenizer, max_seq_length, texts_a, texts_b=None,
              options=input_examples.FeatureOptions()):
  """Tokenizes texts exactly as training did ([CLS] a [SEP] (b [SEP]), cut as
  options.long_text says).

  Args:
    tokenizer: the model's FullTokenizer.
    max_seq_length: the length the model was trained with.
    texts_a: list of str.
    texts_b: list of str of the same length (sentence pairs), or None.
    options: the model's input_examples.FeatureOptions (model_files.feature_options(settings)).

  Returns:
    Features; with --long_text=windows the arrays are [n, windows, max_seq_length], padded
    to the most windows of a text with all-zero windows.

  Raises:
    NoTokensError: a text tokenizes to nothing (the first such one is named).
  """
  if options.long_text == "windows":
    return _featurize_windows(tokenizer, max_seq_length, texts_a, texts_b, options)
  arrays = {name: np.zeros([len(texts_a), max_seq_length], np.int32)
            for name in MODEL_INPUTS}
  truncated = np.zeros([len(texts_a)], np.bool_)
  for row, text_a in enumerate(texts_a):
    example = input_examples.InputExample(
        guid=row, text_a=text_a, text_b=texts_b[row] if texts_b is not None else None)
    # The training code's own conversion, which also says whether it truncated.
    features, truncated[row] = featurizing.convert_example_counting_truncation(
        example, {}, max_seq_length, tokenizer, options)
    arrays["input_ids"][row] = features.input_ids
    arrays["input_mask"][row] = features.input_mask
    arrays["segment_ids"][row] = features.segment_ids
    _check_tokens(arrays, row, texts_b is not None)
  return Features(arrays, truncated)


def _featurize_windows(tokenizer, max_seq_length, texts_a, texts_b, options):
  """featurize() of a --long_text=windows classifier: the windows of training's featurizing."""
  documents = []
  for row, text_a in enumerate(texts_a):
    tokens_b = tokenizer.tokenize(texts_b[row]) if texts_b is not None else None
    documents.append(long_text.document_windows(
        tokenizer.tokenize(text_a), tokens_b, max_seq_length, options.doc_stride,
        options.max_windows, tokenizer.convert_tokens_to_ids))
  most_windows = max([len(document.input_ids) for document in documents] + [1])
  arrays = {name: np.zeros([len(texts_a), most_windows, max_seq_length], np.int32)
            for name in MODEL_INPUTS}
  truncated = np.zeros([len(texts_a)], np.bool_)
  for row, document in enumerate(documents):
    for name in MODEL_INPUTS:
      arrays[name][row, :len(document.input_ids)] = getattr(document, name)
    truncated[row] = bool(document.windows_cut or document.text_b_cut)
    # The first window holds the start of both texts: an empty one shows there.
    _check_tokens({name: arrays[name][:, 0] for name in MODEL_INPUTS}, row,
                  texts_b is not None)
  return Features(arrays, truncated)


def concatenate_features(parts):
  """One Features of several, in order."""
  return Features(
      {name: np.concatenate([p.arrays[name] for p in parts]) for name in parts[0].arrays},
      np.concatenate([p.truncated for p in parts]))


def log_truncated(count, total, max_seq_length):
  if count:
    _LOGGER.warning("%d of %d text(s) had more than max_seq_length=%d tokens and were "
                    "truncated to it.", count, total, max_seq_length)


# ---------------------------------------------------------------------------
# Running featurized texts in batches
# ---------------------------------------------------------------------------

def is_windowed(settings):
  """Whether a model reads [batch, windows, seq] inputs (a --long_text=windows classifier)."""
  return settings.get("long_text") == "windows"


def predict_in_batches(arrays, run_batch, batch_size, max_seq_length, length_multiple=None,
                       num_outputs=None):
  """Runs featurized texts through a model in batches of similar length, each cut to its
  longest text: far less padding than max_seq_length on short texts.

  Args:
    arrays: dict name -> np.int32 [n, seq] (windowed: [n, windows, seq]); the names fed.
    run_batch: dict name -> array [batch, ...] -> np.ndarray [batch, ...] (the model).
    batch_size: rows per run_batch call.
    max_seq_length: the longest a batch is ever fed.
    length_multiple: feed lengths rounded up to a multiple of this (None: max_seq_length,
      i.e. no cut).
    num_outputs: the width of a [n, num_outputs] result, so that n = 0 gives [0, width].

  Returns:
    The outputs of every row, in input order: [n, ...].
  """
  mask = arrays["input_mask"]
  # [n] or, windowed, [n, windows]: the tokens of each text (window).
  window_lengths = mask.sum(axis=-1)
  lengths = window_lengths.reshape([len(mask), -1]).sum(axis=1)  # [n]
  order = np.argsort(-lengths, kind="stable")  # longest first: similar lengths batch together
  result = None
  if num_outputs is not None:
    result = np.zeros([len(lengths), num_outputs], np.float32)
  for start in range(0, len(order), batch_size):
    rows = order[start:start + batch_size]
    longest = batch_shapes.padded_length(int(window_lengths[rows].max()), length_multiple,
                                         max_seq_length)
    # Windowed: also cut to the batch's most windows (padded windows come last).
    cut = ((slice(None, int((window_lengths[rows] > 0).sum(axis=1).max())),)
           if mask.ndim == 3 else ())
    values = run_batch({name: array[(rows,) + cut + (slice(None, longest),)]
                        for name, array in arrays.items()})
    if result is None:
      result = np.zeros((len(lengths),) + values.shape[1:], values.dtype)
    result[rows] = values
  return result
