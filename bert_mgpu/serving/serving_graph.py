# coding=utf-8
"""The TensorFlow side of serving that the export and the predictor share: the graph's int32
inputs, their check against the position table, and the check that a checkpoint's weights
belong to the graph being built.
"""

import collections

import tensorflow.compat.v1 as tf

from bert_mgpu.data.batch_shapes import MODEL_INPUTS
from bert_mgpu.errors import UsageError
from bert_mgpu.training import checkpoints


def serving_inputs(names=MODEL_INPUTS, rank=2):
  """int32 placeholders [batch, seq] (rank 3: [batch, windows, seq]), every dimension
  dynamic."""
  shape = [None] * rank
  return collections.OrderedDict(
      (name, tf.placeholder(tf.int32, shape, name=name)) for name in names)


def checked_features(inputs, bert_config):
  """The serving inputs as model features, behind a check that the sequences fit the
  position table (a clear error rather than a gather out of range)."""
  max_length = bert_config.max_position_embeddings
  check = tf.assert_less_equal(
      tf.shape(inputs["input_ids"])[-1], max_length,
      message="sequences may have at most max_position_embeddings=%d tokens" % max_length)
  with tf.control_dependencies([check]):
    return {name: tf.identity(tensor) for name, tensor in inputs.items()}


def check_checkpoint_variables(checkpoint, labels_file, kind):
  """Raises UsageError unless `checkpoint` holds every variable of the graph being built.

  Call it inside the graph, after the model is built. A SQuAD or pretraining checkpoint
  lacks the classifier (or NER) head; one trained with another label list has another head
  shape; an NER model trained without --use_crf lacks the CRF's transitions.

  Args:
    kind: the model's serving/kinds.ServableKind (for the message).
  """
  variables = tf.global_variables()
  missing = checkpoints.missing_variables(checkpoint, variables)
  if missing:
    name, script = kind.description, kind.script
    raise checkpoints.lacking_variables_error(
        checkpoint, missing, "the %s's" % name.split(" ", 1)[1], "it is not %s trained with "
        "%s (a pretraining checkpoint, or one of another kind?). Give %s's "
        "output_dir or export." % (name, script, name))
  saved = tf.train.load_checkpoint(checkpoint).get_variable_to_shape_map()
  for variable in variables:
    shape = variable.shape.as_list()
    if list(saved[variable.op.name]) != shape:
      sources = "bert_config.json" if labels_file is None else "%s and bert_config.json" % (
          labels_file)
      raise UsageError(
          "%s: %s has shape %s there but %s here (from %s): the checkpoint was trained with "
          "%sanother config. Use the %sconfig it was trained with." % (
              checkpoint, variable.op.name, list(saved[variable.op.name]), shape, sources,
              "" if labels_file is None else "other labels or ",
              "" if labels_file is None else "labels.txt and "))
