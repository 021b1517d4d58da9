# coding=utf-8
"""The token-classification head of run_ner_mgpu.py: a dense layer over BERT's sequence
output, with an optional linear-chain CRF (bert_mgpu/ner/crf.py).

Variables (docs/FORMATS.md 11): cls/ner/output_weights [num_tags, hidden] and
cls/ner/output_bias [num_tags], laid out as Google's classifier head; with --use_crf,
cls/ner/crf/transitions [num_tags, num_tags].

Only the first word piece of each input token carries its tag (features["tag_mask"] = 1);
the other pieces, [CLS], [SEP] and padding are ignored in the loss and in decoding.
"""

import tensorflow.compat.v1 as tf

from bert_mgpu.distillation import losses as distillation_losses
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import crf
from bert_mgpu.training import checkpoints
from bert_mgpu.training import rdrop
import modeling

HEAD_SCOPE = "cls/ner"
OUTPUT_WEIGHTS = HEAD_SCOPE + "/output_weights"
OUTPUT_BIAS = HEAD_SCOPE + "/output_bias"
CRF_TRANSITIONS = "%s/%s/%s" % (HEAD_SCOPE, crf.TRANSITIONS_SCOPE, crf.TRANSITIONS_NAME)

# The head's variables by their names in transformers' BertForTokenClassification
# (convert_checkpoint.py), laid out alike. transformers has no CRF: the transitions are
# written beside its files.
TRANSFORMERS_NAMES = {OUTPUT_WEIGHTS: "classifier.weight", OUTPUT_BIAS: "classifier.bias"}


def check_head(checkpoint, use_crf):
  """Refuses a checkpoint to tag with that has no tagging head (a pretrained BERT's,
  checkpoints.check_fine_tuned), or, with use_crf, no CRF transitions.

  Raises:
    UsageError: naming the checkpoint and the variable it lacks.
  """
  checkpoints.check_fine_tuned(checkpoint, OUTPUT_WEIGHTS, "named-entity recognition")
  if use_crf and not tf.train.load_checkpoint(checkpoint).has_tensor(CRF_TRANSITIONS):
    raise UsageError("%s has no %s: it was trained without --use_crf. Drop --use_crf (or "
                     "use_crf in its model_settings.json), or point --output_dir at a model "
                     "trained with it." %
                     (checkpoint, CRF_TRANSITIONS))


def sequence_output(bert_config, features, is_training):
  """BERT's sequence output [batch, seq, hidden] for an NER head, with the head's dropout
  when training (both the tag heads and the span heads, ner/global_pointer.py, read it)."""
  model = modeling.BertModel(
      config=bert_config, is_training=is_training, input_ids=features["input_ids"],
      input_mask=features["input_mask"], token_type_ids=features["segment_ids"])
  sequence = model.get_sequence_output()  # [batch, seq, hidden]
  if is_training:
    sequence = modeling.dropout(sequence, bert_config.hidden_dropout_prob)
  return sequence


def _first_pieces_first(values, tag_mask):
  """Moves each row's first-piece positions to its front, in order.

  Args:
    values: [batch, seq, ...] tensor.
    tag_mask: int [batch, seq], 1 on first pieces.

  Returns:
    (the gathered values [batch, seq, ...], order [batch, seq]: the source position of
    each gathered entry, lengths [batch]: first pieces per row).
  """
  mask = tf.cast(tag_mask, tf.int32)
  # A stable sort on 0 (first piece) / 1 (other): the first pieces keep their order.
  order = tf.argsort(1 - mask, axis=1, stable=True)
  return tf.gather(values, order, batch_dims=1), order, tf.reduce_sum(mask, axis=1)


def _crf_outputs(logits, features, transitions):
  """The CRF's negative log-likelihood per row and its Viterbi tags per piece.

  The CRF runs over the first pieces only, moved together, so a tag's neighbour in the
  chain is the next token's tag, not the next piece's.
  """
  compact_logits, order, lengths = _first_pieces_first(logits, features["tag_mask"])
  best, _ = crf.crf_decode(compact_logits, lengths, transitions)  # [batch, seq]
  # Back to piece positions: the inverse of `order`; pieces that are not first get 0.
  piece_tags = tf.gather(best, tf.argsort(order, axis=1), batch_dims=1)
  piece_tags *= tf.cast(features["tag_mask"], tf.int32)
  nll = None
  if "tag_ids" in features:
    compact_tags = tf.gather(features["tag_ids"], order, batch_dims=1)
    nll = -crf.crf_log_likelihood(compact_logits, compact_tags, lengths, transitions)
  return nll, piece_tags


def _token_losses(logits, features):
  """The cross-entropy of every piece against its tag id: [batch, seq]."""
  log_probs = tf.nn.log_softmax(logits, axis=-1)  # [batch, seq, num_tags]
  one_hot = tf.one_hot(features["tag_ids"], depth=logits.shape[-1], dtype=tf.float32)
  return -tf.reduce_sum(one_hot * log_probs, axis=-1)


def _row_sums(per_token, features):
  """[batch]: a per-token quantity [batch, seq] summed over each row's first pieces."""
  return tf.reduce_sum(per_token * tf.cast(features["tag_mask"], tf.float32), axis=1)


def _row_token_losses(logits, features):
  """The cross-entropy of each row's first pieces, summed: [batch]."""
  return _row_sums(_token_losses(logits, features), features)


RDROP_WITH_CRF = ("--rdrop_alpha=%s with --use_crf: R-Drop compares per-token tag "
                  "distributions, which the CRF's sequence likelihood does not give; drop one.")


def _rdrop_loss(loss, logits, second_logits, features, alpha):
  """R-Drop's loss of the tag head from the first pass's `loss` and both passes' logits
  [batch, seq, tags]: the per-token divergence is summed over each row's labelled tokens
  and weighted like the token cross-entropy."""
  weight = features["loss_weight"]  # [batch]
  divergence = rdrop.categorical_divergence(logits, second_logits)  # [batch, seq]
  row_divergence = _row_sums(divergence, features)
  second_loss = tf.reduce_sum(_row_token_losses(second_logits, features) * weight)
  return rdrop.combined_loss(loss, second_loss, tf.reduce_sum(row_divergence * weight), alpha)


def _distillation_loss(logits, features, distillation, max_seq_length):
  """The tag head's distillation loss (distillation/losses.py): per labelled token,
  weighted like the token cross-entropy.

  Args:
    logits: the student's, float32 [batch, seq, tags] (a batch may be cut shorter than
      max_seq_length).
    features: the batch, with tag_ids, tag_mask, loss_weight, the teacher's logits
      [batch, max_seq_length * tags] and the label weight [batch].
    distillation: the DistillationOptions (temperature, alpha).
    max_seq_length: the records' positions.

  Returns:
    The scalar loss of this tower's share (summed with loss_weight: the mean over the
    global batch's tokens once the towers' losses are averaged).
  """
  num_tags = logits.shape[-1]
  teacher = tf.reshape(features[distillation_losses.TEACHER_LOGITS],
                       [-1, max_seq_length, num_tags])[:, :tf.shape(logits)[1], :]
  divergence = distillation_losses.categorical_divergence(teacher, logits,
                                                          distillation.temperature)
  per_token = distillation_losses.example_losses(  # [batch, seq]
      divergence, _token_losses(logits, features),
      features[distillation_losses.LABEL_WEIGHT][:, None], distillation.alpha)
  return tf.reduce_sum(_row_sums(per_token, features) * features["loss_weight"])


def create_model_fn(bert_config, num_tags, use_crf=False, max_seq_length=None,
                    rdrop_alpha=0.0, distillation=None, emit_logits=False):
  """Returns model_fn(features, is_training): BERT + the tagging head.

  Args:
    bert_config: BertConfig.
    num_tags: the size of the label list.
    use_crf: decode with a linear-chain CRF and train by its likelihood (the mean over
      rows of the negative log-likelihood) instead of the token cross-entropy.
    max_seq_length: if given, the per-piece outputs of a shorter batch are padded back
      to this length, so that prediction batches of any length concatenate.
    rdrop_alpha: > 0 (tag head only): training runs two passes and adds their per-token
      divergence (bert_mgpu/training/rdrop.py).
    distillation: distillation/options.DistillationOptions (tag head only; needs
      max_seq_length): training batches that carry the teacher's logits train on the
      distillation loss per labelled token, weighted like the token cross-entropy.
    emit_logits: also output "logits" (a teacher's pass stores them).

  Returns:
    model_fn; its outputs are "tag_ids" [batch, seq] (the Viterbi path with the CRF, else
    the argmax; 0 on pieces that are not first), "probabilities" [batch, seq, num_tags]
    (the softmax of the per-piece scores), with tag_ids in the features "loss", and with
    emit_logits "logits" [batch, seq, num_tags].
  """
  if use_crf and rdrop_alpha > 0:
    raise ValueError(RDROP_WITH_CRF % rdrop_alpha)

  def logits_of(features, is_training):
    """[batch, seq, num_tags] float32, and the CRF's transitions (None without)."""
    sequence = sequence_output(bert_config, features, is_training)  # [batch, seq, hidden]
    with tf.variable_scope(HEAD_SCOPE):
      output_weights = tf.get_variable(
          "output_weights", [num_tags, bert_config.hidden_size],
          initializer=modeling.create_initializer(0.02))
      output_bias = tf.get_variable("output_bias", [num_tags],
                                    initializer=tf.zeros_initializer())
      transitions = crf.transition_variable(num_tags) if use_crf else None
    logits = tf.einsum("bsh,kh->bsk", sequence, tf.cast(output_weights, sequence.dtype))
    return tf.cast(logits, tf.float32) + output_bias, transitions

  def model_fn(features, is_training):
    logits, transitions = logits_of(features, is_training)
    outputs = {"probabilities": tf.nn.softmax(logits, axis=-1)}
    if use_crf:
      nll, outputs["tag_ids"] = _crf_outputs(logits, features, transitions)
    else:
      outputs["tag_ids"] = tf.argmax(logits, axis=-1, output_type=tf.int32) * tf.cast(
          features["tag_mask"], tf.int32)
    if "tag_ids" in features:
      # Per row, for the eval loss: the CRF's NLL, or the summed token cross-entropy and
      # the tokens it sums over.
      outputs["row_loss"] = nll if use_crf else _row_token_losses(logits, features)
      outputs["row_tokens"] = tf.reduce_sum(tf.cast(features["tag_mask"], tf.float32), axis=1)
    if "loss_weight" in features:
      # The CRF: the mean over rows. Tokens: loss_weight = (towers x workers) / (first
      # pieces of the whole micro-batch), set by the input pipeline, so that the mean of
      # the towers' losses is the mean over every labelled token of the batch (Hugging
      # Face's token mean), whatever the tower count.
      outputs["loss"] = (tf.reduce_mean(outputs["row_loss"]) if use_crf else
                         tf.reduce_sum(outputs["row_loss"] * features["loss_weight"]))
      if is_training and rdrop_alpha > 0:
        with rdrop.second_pass_scope():
          second_logits, _ = logits_of(features, is_training)  # its own dropout masks
        outputs["loss"] = _rdrop_loss(outputs["loss"], logits, second_logits, features,
                                      rdrop_alpha)
      if (is_training and distillation is not None and
          distillation_losses.TEACHER_LOGITS in features):
        outputs["loss"] = _distillation_loss(logits, features, distillation, max_seq_length)
    if emit_logits:
      outputs["logits"] = logits
    if max_seq_length:
      padding = max_seq_length - tf.shape(logits)[1]
      outputs["tag_ids"] = tf.pad(outputs["tag_ids"], [[0, 0], [0, padding]])
      for name in ("probabilities", "logits"):
        if name in outputs:
          outputs[name] = tf.pad(outputs[name], [[0, 0], [0, padding], [0, 0]])
    return outputs
  return model_fn
