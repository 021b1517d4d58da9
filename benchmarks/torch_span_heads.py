# coding=utf-8
"""GlobalPointer and Efficient GlobalPointer (Su Jianlin, 2021) in PyTorch, written from the
paper, on transformers' BertModel: the reference of global_pointer_vs_torch.py and the model
of hf_span_ner.py.

  * SpanHead: per-type query/key projections (GlobalPointer), or one shared projection with
    queries at its even outputs and keys at its odd ones plus per-type start and end biases
    from a dense layer over it, halved (Efficient GlobalPointer); rotary position embedding
    (rotary) on both; score q.k / sqrt(head_size), [batch, types, start m, end n].
  * span_loss: the multi-label categorical cross-entropy per (window, type) row,
    log(1 + sum_neg e^s) + log(1 + sum_pos e^-s), over the candidate pairs (both ends on a
    piece, not [CLS], [SEP] or padding; start <= end), averaged over the rows.
  * candidate_pairs: those candidates, also what prediction keeps.

The torch parameter names map onto ours under cls/ner by weight_names.google_name (head
weights: head.span.*, head.types.*). Not part of the project: imports torch and
transformers (the benchmark virtualenv, benchmarks/README.md).
"""

import collections

import torch
import transformers

HEADS = ("global_pointer", "efficient_global_pointer")  # bert_mgpu.ner.global_pointer.SPAN_HEADS
HEAD_SIZE = 64  # global_pointer.HEAD_SIZE
ROTARY_BASE = 10000.0

SpanOutput = collections.namedtuple("SpanOutput", ["loss", "scores"])


def rotary(vectors, pairs="interleaved"):
  """Rotary position embedding of vectors [batch, seq, ..., head_size]: pair i at position p
  turned by the angle p * 10000^(-2i / head_size), as the complex product
  (x_a + i x_b) e^(i angle). The pair is (x[2i], x[2i + 1]) ("interleaved", the paper's) or
  (x[i], x[i + head_size / 2]) ("halves", for contrast)."""
  seq, size = vectors.shape[1], vectors.shape[-1]
  exponents = torch.arange(0, size, 2, dtype=torch.float64) / size
  angles = torch.arange(seq, dtype=torch.float64)[:, None] * ROTARY_BASE ** (-exponents)[None, :]
  turns = torch.polar(torch.ones_like(angles), angles)  # [seq, size / 2], complex128
  turns = turns.reshape([1, seq] + [1] * (vectors.dim() - 3) + [size // 2])
  if pairs == "interleaved":
    split = vectors.reshape(vectors.shape[:-1] + (size // 2, 2))
  else:
    split = vectors.reshape(vectors.shape[:-1] + (2, size // 2)).transpose(-1, -2)
  complex_pairs = torch.view_as_complex(split.contiguous())
  turned = torch.view_as_real(complex_pairs * turns.to(complex_pairs.dtype))
  if pairs != "interleaved":
    turned = turned.transpose(-1, -2)
  return turned.reshape(vectors.shape)


def _google_init(linear, initializer_range):
  """Our dense layers' start: truncated normal kernel (cut at 2 stddev), zero bias."""
  torch.nn.init.trunc_normal_(linear.weight, std=initializer_range, a=-2 * initializer_range,
                              b=2 * initializer_range)
  torch.nn.init.zeros_(linear.bias)
  return linear


class SpanHead(torch.nn.Module):
  """GlobalPointer or Efficient GlobalPointer over BERT's sequence output.

  variant: "paper"; "halves" lays the rotary pairs out as halves and "biases_swapped" reads
  the efficient head's even outputs as the start bias and the odd ones as the end bias
  (global_pointer_vs_torch.py's contrasts).
  """

  def __init__(self, hidden, num_types, efficient, head_size=HEAD_SIZE, variant="paper",
               initializer_range=0.02):
    super().__init__()
    self.num_types, self.head_size, self.efficient = num_types, head_size, efficient
    self.variant = variant
    self.pairs = "halves" if variant == "halves" else "interleaved"
    if efficient:
      self.span = _google_init(torch.nn.Linear(hidden, 2 * head_size), initializer_range)
      self.types = _google_init(torch.nn.Linear(2 * head_size, 2 * num_types),
                                initializer_range)
    else:
      self.span = _google_init(torch.nn.Linear(hidden, num_types * 2 * head_size),
                               initializer_range)

  def forward(self, sequence):
    """[batch, types, seq (start m), seq (end n)] scores, nothing masked."""
    projected = self.span(sequence)
    size = self.head_size
    if self.efficient:
      queries = rotary(projected[..., 0::2], self.pairs)
      keys = rotary(projected[..., 1::2], self.pairs)
      shared = torch.einsum("bmd,bnd->bmn", queries, keys) / size ** 0.5
      biases = self.types(projected).permute(0, 2, 1) / 2  # [batch, 2 * types, seq]
      end_bias, start_bias = biases[:, 0::2], biases[:, 1::2]  # [batch, types, seq]
      if self.variant == "biases_swapped":
        end_bias, start_bias = start_bias, end_bias
      return shared[:, None] + start_bias[:, :, :, None] + end_bias[:, :, None, :]
    batch, seq = projected.shape[:2]
    projected = projected.reshape(batch, seq, self.num_types, 2 * size)
    queries = rotary(projected[..., :size], self.pairs)
    keys = rotary(projected[..., size:], self.pairs)
    return torch.einsum("bmtd,bntd->btmn", queries, keys) / size ** 0.5


class SpanModel(torch.nn.Module):
  """transformers' BertModel (as .bert; without the pooler unless asked, the span heads do
  not use it) and a SpanHead (as .head). forward returns SpanOutput(loss or None, scores)."""

  def __init__(self, config, num_types, head, head_size=HEAD_SIZE, variant="paper",
               pooler=False):
    super().__init__()
    if head not in HEADS:
      raise ValueError("head %r is not one of %s" % (head, HEADS))
    self.bert = transformers.BertModel(config, add_pooling_layer=pooler)
    self.head = SpanHead(config.hidden_size, num_types, head == HEADS[1], head_size, variant,
                         config.initializer_range)
    self.edge = int(variant == "sep_candidate")

  def forward(self, input_ids, input_mask, segment_ids, span_triples=None):
    sequence = self.bert(input_ids=input_ids, attention_mask=input_mask,
                         token_type_ids=segment_ids).last_hidden_state
    scores = self.head(sequence)
    if span_triples is None:
      return SpanOutput(None, scores)
    return SpanOutput(span_loss(scores, input_mask, span_triples, self.edge), scores)


def candidate_pairs(input_mask, edge=0):
  """bool [batch, seq (start), seq (end)]: both ends on a piece (positions 1 .. length - 2,
  not [CLS], [SEP] or padding) and start <= end. edge=1 (a contrast) lets the [SEP]
  position count as a piece."""
  seq = input_mask.shape[1]
  positions = torch.arange(seq)
  last_piece = input_mask.sum(dim=1)[:, None] - 2 + edge
  on_piece = (positions[None] >= 1) & (positions[None] <= last_piece)  # [batch, seq]
  return (on_piece[:, :, None] & on_piece[:, None, :] &
          (positions[:, None] <= positions[None, :])[None])


def span_loss(scores, input_mask, span_triples, edge=0):
  """The paper's loss: per (window, type) row, log(1 + sum over the row's other candidate
  pairs of e^s) + log(1 + sum over its gold spans of e^-s), averaged over the rows.

  Args:
    scores: [batch, types, seq, seq].
    input_mask: int [batch, seq].
    span_triples: int [batch, 3 * k] (our records' layout): (type, start, end) per span,
      window positions, end inclusive; padded with -1.
    edge: see candidate_pairs.
  """
  batch, types, seq = scores.shape[:3]
  candidate = candidate_pairs(input_mask, edge)[:, None].expand(batch, types, seq, seq)
  gold = torch.zeros(batch, types, seq, seq, dtype=torch.bool)
  for row, triples in enumerate(span_triples.reshape(batch, -1, 3).tolist()):
    for span_type, start, end in triples:
      if span_type >= 0:
        gold[row, span_type, start, end] = True
  assert bool((candidate | ~gold).all()), "a gold span on a pair that is no candidate"
  flat = scores.reshape(batch * types, -1)
  negative = (candidate & ~gold).reshape(batch * types, -1)
  gold = gold.reshape(batch * types, -1)
  none = torch.tensor(-float("inf"), dtype=scores.dtype)
  zero = torch.zeros(batch * types, 1, dtype=scores.dtype)
  rows = (torch.logsumexp(torch.cat([torch.where(negative, flat, none), zero], dim=1), dim=1) +
          torch.logsumexp(torch.cat([torch.where(gold, -flat, none), zero], dim=1), dim=1))
  return rows.mean()
