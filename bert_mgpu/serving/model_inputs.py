# coding=utf-8
"""Model inputs: raw texts featurized exactly as training did (numpy), and the int32
placeholders of the serving graph that take them.
"""

import collections

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import featurizing
from bert_mgpu.classifier import input_examples
from bert_mgpu.classifier import long_text
from bert_mgpu.data.tfrecord_io import MODEL_INPUTS


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
    tf.logging.warning("%d of %d text(s) had more than max_seq_length=%d tokens and were "
                       "truncated to it.", count, total, max_seq_length)


# ---------------------------------------------------------------------------
# The serving graph's inputs
# ---------------------------------------------------------------------------

def serving_inputs(names=MODEL_INPUTS, windowed=False):
  """int32 placeholders [batch, seq] (windowed: [batch, windows, seq]), every dimension
  dynamic."""
  shape = [None, None, None] if windowed else [None, None]
  return collections.OrderedDict(
      (name, tf.placeholder(tf.int32, shape, name=name)) for name in names)


def is_windowed(settings):
  """Whether a model reads [batch, windows, seq] inputs (a --long_text=windows classifier)."""
  return settings.get("long_text") == "windows"


def checked_features(inputs, bert_config):
  """The serving inputs as model features, behind a check that the sequences fit the
  position table (a clear error rather than a gather out of range)."""
  max_length = bert_config.max_position_embeddings
  check = tf.assert_less_equal(
      tf.shape(inputs["input_ids"])[-1], max_length,
      message="sequences may have at most max_position_embeddings=%d tokens" % max_length)
  with tf.control_dependencies([check]):
    return {name: tf.identity(tensor) for name, tensor in inputs.items()}
