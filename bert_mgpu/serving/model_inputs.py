# coding=utf-8
"""Model inputs of any kind: featurized rows (each kind featurizes its texts in its unit's
serving.py), and their run through a model in batches of similar length.

No TensorFlow import: the ONNX Runtime predictor runs with it too; the serving graph's
placeholders are serving_graph.py's.
"""

import collections
import logging

import numpy as np

from bert_mgpu.data import batch_shapes

# TensorFlow's logger (tf.get_logger() is this logger on TF 1.15 and 2.x).
_LOGGER = logging.getLogger("tensorflow")


# ---------------------------------------------------------------------------
# Texts to features
# ---------------------------------------------------------------------------

Features = collections.namedtuple("Features", ["arrays", "truncated"])
Features.__doc__ = """Model inputs of n rows: texts, or a kind's windows of them.

Fields:
  arrays: dict input_ids / input_mask / segment_ids (and what else a kind feeds, e.g. NER's
    tag_mask) -> np.int32 [n, max_seq_length] (a windowed classifier: [n, windows,
    max_seq_length]).
  truncated: np.bool_ [n], whether the row's text was cut to fit (windows: never).
"""


class NoTokensError(ValueError):
  """A text whose tokenization is empty (only spaces, control or zero-width characters),
  raised by a kind's featurizing.

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


def concatenate_features(parts):
  """One Features of several, in order; windowed rows of different window counts are
  padded with all-zero windows to the most (as featurizing pads them)."""
  arrays = {}
  for name in parts[0].arrays:
    pieces = [part.arrays[name] for part in parts]
    if pieces[0].ndim == 3:  # [rows, windows, seq]
      most = max(piece.shape[1] for piece in pieces)
      pieces = [np.pad(piece, [(0, 0), (0, most - piece.shape[1]), (0, 0)])
                for piece in pieces]
    arrays[name] = np.concatenate(pieces)
  return Features(arrays, np.concatenate([part.truncated for part in parts]))


def log_truncated(count, total, max_seq_length):
  if count:
    _LOGGER.warning("%d of %d text(s) had more than max_seq_length=%d tokens and were "
                    "truncated to it.", count, total, max_seq_length)


# ---------------------------------------------------------------------------
# Running featurized texts in batches
# ---------------------------------------------------------------------------

# An output's sequence axis in OutputSpec.shape: its size is the length a batch is fed.
SEQUENCE = "sequence"

OutputSpec = collections.namedtuple("OutputSpec", ["shape", "dtype", "padding"])
OutputSpec.__new__.__defaults__ = ((), np.float32, 0)
OutputSpec.__doc__ = """One named output of a model run on featurized rows.

Fields:
  shape: its sizes after the rows' axis, SEQUENCE at the sequence axis (at most one): () for
    [rows], (num_labels,) for [rows, num_labels], (SEQUENCE,) for [rows, seq].
  dtype: its NumPy dtype.
  padding: the value past a row's fed length, when batches cut to different lengths are
    joined (predict_in_batches).
"""


def _row_shape(spec, length):
  """The sizes after the rows' axis of an output joined at sequence length `length`."""
  return [length if size == SEQUENCE else size for size in spec.shape]


def empty_outputs(output_specs):
  """The outputs of no rows: dict name -> an empty array of each output's shape."""
  return {name: np.zeros([0] + _row_shape(spec, 0), spec.dtype)
          for name, spec in output_specs.items()}


def predict_in_batches(arrays, run_batch, batch_size, max_seq_length, length_multiple,
                       output_specs):
  """Runs featurized rows through a model in batches of similar length, each cut to its
  longest row: far less padding than max_seq_length on short texts.

  Args:
    arrays: dict name -> np.int32 [n, seq] (windowed: [n, windows, seq]): the rows.
    run_batch: dict name -> array [batch, ...] -> dict name -> np.ndarray [batch, ...]: the
      model, returning every output of output_specs (a sequence axis as long as the batch
      was fed).
    batch_size: rows per run_batch call.
    max_seq_length: the longest a batch is ever fed.
    length_multiple: feed lengths rounded up to a multiple of this (None: max_seq_length,
      i.e. no cut).
    output_specs: dict name -> OutputSpec.

  Returns:
    dict name -> the output of every row, in input order: [n, ...], a sequence axis as
    long as the longest batch fed, `padding` past each batch's length. No rows give
    empty_outputs.

  Raises:
    ValueError: an output of another shape than its OutputSpec says.
  """
  mask = arrays["input_mask"]
  if not len(mask):
    return empty_outputs(output_specs)
  # [n] or, windowed, [n, windows]: the tokens of each text (window).
  window_lengths = mask.sum(axis=-1)
  lengths = window_lengths.reshape([len(mask), -1]).sum(axis=1)  # [n]
  order = np.argsort(-lengths, kind="stable")  # longest first: similar lengths batch together
  batches = []  # (rows, the length they are fed)
  for start in range(0, len(order), batch_size):
    rows = order[start:start + batch_size]
    batches.append((rows, batch_shapes.padded_length(
        int(window_lengths[rows].max()), length_multiple, max_seq_length)))
  joined_length = max(fed_length for _, fed_length in batches)
  results = {name: np.full([len(lengths)] + _row_shape(spec, joined_length), spec.padding,
                           spec.dtype)
             for name, spec in output_specs.items()}
  for rows, fed_length in batches:
    # Windowed: also cut to the batch's most windows (padded windows come last).
    cut = ((slice(None, int((window_lengths[rows] > 0).sum(axis=1).max())),)
           if mask.ndim == 3 else ())
    values = run_batch({name: array[(rows,) + cut + (slice(None, fed_length),)]
                        for name, array in arrays.items()})
    for name, spec in output_specs.items():
      wanted = [len(rows)] + _row_shape(spec, fed_length)
      if list(values[name].shape) != wanted:
        raise ValueError("the model's %r output is %s for a batch of %d row(s) fed %d long; "
                         "its OutputSpec says %s" % (name, list(values[name].shape),
                                                     len(rows), fed_length, wanted))
      if not np.can_cast(values[name].dtype, spec.dtype, "same_kind"):
        raise ValueError("the model's %r output is %s; its OutputSpec says %s" % (
            name, values[name].dtype, np.dtype(spec.dtype)))
      results[name][(rows,) + tuple(slice(None, size) for size in wanted[1:])] = values[name]
  return results
