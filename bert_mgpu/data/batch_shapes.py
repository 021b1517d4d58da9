# coding=utf-8
"""The model inputs and the length a batch of them is cut to, without TensorFlow: the
ONNX Runtime predictor shapes its batches as tfrecord_io's datasets do."""

# BERT's inputs, one value per token position.
MODEL_INPUTS = ("input_ids", "input_mask", "segment_ids")


def padded_length(longest, length_multiple, max_length):
  """The length a batch of fed arrays is cut to (trim_to_longest's rule, in NumPy): its
  longest example rounded up to length_multiple, at most max_length; None pads to
  max_length."""
  if not length_multiple:
    return max_length
  return min(-(-longest // length_multiple) * length_multiple, max_length)
