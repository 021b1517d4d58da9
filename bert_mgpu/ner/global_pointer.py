# coding=utf-8
"""The span heads of run_ner_mgpu.py (--ner_head=global_pointer|efficient_global_pointer):
a score for every (start, end) pair of pieces per entity type, so entities may nest.

GlobalPointer (Su Jianlin, 2021) projects each piece to a query and a key per type, turns
both by rotary position embeddings (so their dot product depends on the distance between
start and end), and scores span (m, n) of type t as q_t[m] . k_t[n] / sqrt(head_size).
The efficient variant shares one query/key projection between the types and adds two
per-type biases, one read at the start piece and one at the end piece.

Training uses the multi-label categorical cross-entropy over all pairs of a (window, type):
  log(1 + sum_{negative pairs} e^s) + log(1 + sum_{gold spans} e^-s),
so every gold span is pushed above 0 and every other pair below it; decoding keeps the
pairs scored above 0.

Variables (under cls/ner, float32 whatever the compute precision):
  global_pointer:  span_weights [hidden, types * 2 * head_size], span_bias [same]; per type
                   the first head_size outputs are its query, the next its key.
  efficient:       span_weights [hidden, 2 * head_size], span_bias [same] (queries at even
                   outputs, keys at odd ones); type_weights [2 * head_size, 2 * types],
                   type_bias [2 * types] (even outputs: the end bias, odd: the start bias).

The scores are [batch, types, seq, seq] float32: the masking (pairs outside the window's
pieces, end before start) is computed in float32 under any --precision.
"""

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu.errors import UsageError
from bert_mgpu.ner import model as ner_model
from bert_mgpu.training import checkpoints
import modeling

SPAN_HEADS = ("global_pointer", "efficient_global_pointer")
HEAD_SIZE = 64  # bert4keras' and the paper's default
# The score of a pair that cannot be a span: exp() of it is 0 in float32.
MASKED_SCORE = -1e12
ROTARY_BASE = 10000.0

SPAN_WEIGHTS = ner_model.HEAD_SCOPE + "/span_weights"
TYPE_WEIGHTS = ner_model.HEAD_SCOPE + "/type_weights"
# The bound on one tower's span scores, [batch, types, seq, seq] float32 (docs/NER.md). The
# head holds several tensors of that size while training (the masked scores, the labels, the
# loss's terms and their gradients), so the bound keeps the head's share of memory to a few
# GiB per tower.
SCORE_BYTES_BOUND = 1 << 30


def check_score_memory(head, per_tower_batches, num_types, max_seq_length):
  """Refuses batches whose span scores alone exceed SCORE_BYTES_BOUND on a tower.

  Args:
    head: the --ner_head value, for the message.
    per_tower_batches: list of (flag name, examples per tower).
    num_types: entity types.
    max_seq_length: the windows' length.

  Raises:
    UsageError: naming the figure, the bound and what to lower.
  """
  for flag, batch_size in per_tower_batches:
    size = 4 * batch_size * num_types * max_seq_length ** 2
    if size > SCORE_BYTES_BOUND:
      raise UsageError(
          "--ner_head=%s: the span scores of one tower's batch take %.1f GiB (%s=%d x %d "
          "types x %d^2 pairs x 4 bytes), above the %d GiB bound (docs/NER.md); lower %s or "
          "--max_seq_length." % (head, size / 2.0 ** 30, flag, batch_size, num_types,
                                 max_seq_length, SCORE_BYTES_BOUND >> 30, flag))


def check_head(checkpoint, head):
  """Refuses a checkpoint to predict with that has no span head, or the other variant's.

  Raises:
    UsageError: naming the checkpoint and the variable it lacks or has.
  """
  checkpoints.check_fine_tuned(checkpoint, SPAN_WEIGHTS, "named-entity recognition")
  has_types = tf.train.load_checkpoint(checkpoint).has_tensor(TYPE_WEIGHTS)
  if has_types != (head == SPAN_HEADS[1]):
    raise UsageError("%s %s %s: it was trained with --ner_head=%s. Pass that head, or point "
                     "--output_dir at a model trained with --ner_head=%s." % (
                         checkpoint, "has no" if not has_types else "has", TYPE_WEIGHTS,
                         SPAN_HEADS[0] if not has_types else SPAN_HEADS[1], head))


# ---------------------------------------------------------------------------
# The scores
# ---------------------------------------------------------------------------

def rotary_angles(seq_length, head_size):
  """The rotation angle of pair i (components 2i, 2i + 1) at each position.

  Returns:
    float32 [seq, head_size / 2]: position * ROTARY_BASE^(-2i / head_size).
  """
  inverse_frequencies = np.power(ROTARY_BASE, -2.0 * np.arange(head_size // 2) / head_size)
  positions = tf.cast(tf.range(seq_length), tf.float32)
  return positions[:, None] * tf.constant(inverse_frequencies, tf.float32)[None, :]


def rotate(vectors, angles):
  """Rotary position embedding: turns each pair (x[2i], x[2i + 1]) by its angle.

  Args:
    vectors: float32 [batch, seq, ..., head_size].
    angles: float32 [seq, head_size / 2] (rotary_angles).

  Returns:
    float32, the shape of `vectors`.
  """
  extra_axes = vectors.shape.ndims - 3  # the axes between seq and head_size
  shape = tf.stack([1, tf.shape(angles)[0]] + [1] * extra_axes + [tf.shape(angles)[1]])
  cos, sin = tf.reshape(tf.cos(angles), shape), tf.reshape(tf.sin(angles), shape)
  even, odd = vectors[..., 0::2], vectors[..., 1::2]
  turned = tf.stack([even * cos - odd * sin, odd * cos + even * sin], axis=-1)
  return tf.reshape(turned, tf.shape(vectors))


def span_pair_mask(input_mask):
  """Which (start, end) pairs can be a span: both on the window's pieces ([CLS], [SEP] and
  padding excluded) and start <= end.

  Args:
    input_mask: int [batch, seq], 1 on [CLS], the pieces and [SEP].

  Returns:
    bool [batch, 1, seq, seq].
  """
  seq_length = tf.shape(input_mask)[1]
  lengths = tf.reduce_sum(tf.cast(input_mask, tf.int32), axis=1)  # [batch]
  positions = tf.range(seq_length)
  on_piece = tf.logical_and(positions[None, :] >= 1,
                            positions[None, :] < lengths[:, None] - 1)  # [batch, seq]
  ordered = positions[:, None] <= positions[None, :]  # [seq, seq]: start <= end
  pairs = tf.logical_and(on_piece[:, :, None], on_piece[:, None, :])
  return tf.logical_and(pairs, ordered[None])[:, None]


def _dense(inputs, name, width):
  """inputs [batch, seq, in] (any float dtype) @ a float32 kernel [in, width] + bias, in the
  inputs' dtype; returned as float32."""
  kernel = tf.get_variable(name + "_weights", [int(inputs.shape[-1]), width],
                           initializer=modeling.create_initializer(0.02))
  bias = tf.get_variable(name + "_bias", [width], initializer=tf.zeros_initializer())
  outputs = tf.einsum("bsi,io->bso", inputs, tf.cast(kernel, inputs.dtype))
  return tf.cast(outputs, tf.float32) + bias


def span_scores(sequence, input_mask, num_types, efficient=False, head_size=HEAD_SIZE):
  """The span scores of BERT's sequence output (call under the head's variable scope).

  Args:
    sequence: [batch, seq, hidden], the compute dtype.
    input_mask: int [batch, seq].
    num_types: entity types.
    efficient: the efficient variant (module docstring).
    head_size: the query and key size.

  Returns:
    float32 [batch, types, seq, seq]: MASKED_SCORE where span_pair_mask is False.
  """
  angles = rotary_angles(tf.shape(sequence)[1], head_size)
  batch_size, seq_length = tf.shape(sequence)[0], tf.shape(sequence)[1]
  if efficient:
    projected = _dense(sequence, "span", 2 * head_size)  # [batch, seq, 2 * head]
    queries = rotate(projected[..., 0::2], angles)  # [batch, seq, head]
    keys = rotate(projected[..., 1::2], angles)
    shared = tf.einsum("bmd,bnd->bmn", queries, keys) / np.sqrt(head_size)
    type_bias = tf.transpose(_dense(projected, "type", 2 * num_types), [0, 2, 1]) / 2.0
    # [batch, types, seq, seq]: the end bias along n, the start bias along m.
    scores = (shared[:, None] + type_bias[:, 0::2, None, :] + type_bias[:, 1::2, :, None])
  else:
    projected = _dense(sequence, "span", num_types * 2 * head_size)
    projected = tf.reshape(projected, [batch_size, seq_length, num_types, 2 * head_size])
    queries = rotate(projected[..., :head_size], angles)  # [batch, seq, types, head]
    keys = rotate(projected[..., head_size:], angles)
    scores = tf.einsum("bmtd,bntd->btmn", queries, keys) / np.sqrt(head_size)
  mask = span_pair_mask(input_mask)
  return tf.where(tf.broadcast_to(mask, tf.shape(scores)), scores,
                  tf.fill(tf.shape(scores), MASKED_SCORE))


# ---------------------------------------------------------------------------
# The loss and the labels
# ---------------------------------------------------------------------------

def multilabel_crossentropy(scores, labels):
  """The multi-label categorical cross-entropy of each row.

  Args:
    scores: float32 [rows, n].
    labels: float32 [rows, n], 1 on the positive entries.

  Returns:
    float32 [rows]: log(1 + sum_neg e^s) + log(1 + sum_pos e^-s).
  """
  positive = labels > 0.5
  hidden = tf.fill(tf.shape(scores), MASKED_SCORE)
  zero = tf.zeros_like(scores[:, :1])
  negative_terms = tf.concat([tf.where(positive, hidden, scores), zero], axis=1)
  positive_terms = tf.concat([tf.where(positive, -scores, hidden), zero], axis=1)
  return (tf.reduce_logsumexp(negative_terms, axis=1) +
          tf.reduce_logsumexp(positive_terms, axis=1))


def span_labels(span_triples, num_types, seq_length):
  """The dense labels of the records' spans.

  Args:
    span_triples: int [batch, max_spans * 3] (the records' layout) or
      [batch, max_spans, 3]: (type, start, end) with positions in the window (end
      inclusive); padded with -1.
    num_types: entity types.
    seq_length: the batch's (possibly trimmed) length.

  Returns:
    float32 [batch, types, seq, seq], 1 at each span.
  """
  triples = tf.cast(span_triples, tf.int32)
  triples = tf.reshape(triples, [tf.shape(triples)[0], -1, 3])  # [batch, max_spans, 3]
  valid = triples[..., 0] >= 0  # [batch, max_spans]
  rows = tf.broadcast_to(tf.range(tf.shape(triples)[0])[:, None], tf.shape(valid))
  indices = tf.stack([rows, tf.maximum(triples[..., 0], 0), tf.maximum(triples[..., 1], 0),
                      tf.maximum(triples[..., 2], 0)], axis=-1)  # [batch, max_spans, 4]
  shape = tf.stack([tf.shape(triples)[0], num_types, seq_length, seq_length])
  counts = tf.scatter_nd(indices, tf.cast(valid, tf.float32), shape)
  return tf.minimum(counts, 1.0)  # a span listed twice is one label


def row_losses(scores, labels):
  """The loss of each window: the multi-label cross-entropy summed over the types.

  Args:
    scores, labels: float32 [batch, types, seq, seq].

  Returns:
    float32 [batch].
  """
  batch_size, num_types = tf.shape(scores)[0], tf.shape(scores)[1]
  flat_scores = tf.reshape(scores, [batch_size * num_types, -1])
  flat_labels = tf.reshape(labels, [batch_size * num_types, -1])
  per_type = multilabel_crossentropy(flat_scores, flat_labels)
  return tf.reduce_sum(tf.reshape(per_type, [batch_size, num_types]), axis=1)


# ---------------------------------------------------------------------------
# Decoding: the best-scored pairs of each window
# ---------------------------------------------------------------------------

def top_spans(scores, max_spans):
  """The max_spans best pairs of each window, whatever their score.

  Args:
    scores: float32 [batch, types, seq, seq].
    max_spans: how many per window (padded with MASKED_SCORE when there are fewer pairs).

  Returns:
    dict of [batch, max_spans] tensors: "span_types", "span_starts", "span_ends" (int32,
    window positions, end inclusive) and "span_scores" (float32, best first). The
    caller keeps those above 0.
  """
  batch_size, seq_length = tf.shape(scores)[0], tf.shape(scores)[2]
  flat = tf.reshape(scores, [batch_size, -1])
  padding = tf.maximum(max_spans - tf.shape(flat)[1], 0)
  flat = tf.pad(flat, [[0, 0], [0, padding]], constant_values=MASKED_SCORE)
  values, indices = tf.nn.top_k(flat, k=max_spans, sorted=True)
  pairs = seq_length * seq_length
  return {"span_types": indices // pairs, "span_starts": indices % pairs // seq_length,
          "span_ends": indices % seq_length, "span_scores": values}


# ---------------------------------------------------------------------------
# The model function
# ---------------------------------------------------------------------------

RDROP_WITH_SPANS = ("--rdrop_alpha=%s with --ner_head=%s: R-Drop compares per-token tag "
                    "distributions, which a span head does not give; drop one.")


def create_model_fn(bert_config, num_types, head, max_spans, head_size=HEAD_SIZE):
  """Returns model_fn(features, is_training): BERT + a span head.

  Args:
    bert_config: BertConfig.
    num_types: entity types (the label list).
    head: one of SPAN_HEADS.
    max_spans: the best pairs each window outputs (top_spans).
    head_size: the query and key size.

  Returns:
    model_fn; its outputs are top_spans()'s and, with span_triples in the features,
    "row_loss" [batch] (the window's loss summed over types) and "loss", the mean over the
    tower's windows and types. Training batches are whole (the last partial one is
    dropped), so every tower holds as many windows and the mean of the towers' losses is
    the global batch's mean: no loss weights are needed, unlike the tag heads, whose towers
    hold different numbers of labelled tokens.
  """
  if head not in SPAN_HEADS:
    raise ValueError("head %r is not one of %s" % (head, SPAN_HEADS))

  def model_fn(features, is_training):
    sequence = ner_model.sequence_output(bert_config, features, is_training)
    with tf.variable_scope(ner_model.HEAD_SCOPE):
      scores = span_scores(sequence, features["input_mask"], num_types,
                           efficient=head == SPAN_HEADS[1], head_size=head_size)
    outputs = top_spans(scores, max_spans)
    if "span_triples" in features:
      labels = span_labels(features["span_triples"], num_types, tf.shape(scores)[2])
      outputs["row_loss"] = row_losses(scores, labels)
      outputs["loss"] = tf.reduce_mean(outputs["row_loss"]) / num_types
    return outputs
  return model_fn
