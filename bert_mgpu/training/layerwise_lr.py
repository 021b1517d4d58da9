# coding=utf-8
"""Layer-wise learning-rate decay (--layerwise_lr_decay=d): lower layers learn more slowly.

With L encoder layers numbered 0 (bottom) to L-1, by Google's variable names:

  head and pooler (everything else)   the schedule's rate
  bert/encoder/layer_i/...            rate * d^(L - i)
  bert/embeddings/...                 rate * d^(L + 1)

ELECTRA's _get_layer_lrs gives the top layer d^2 and the embeddings d^(L + 2): one more
factor d everywhere below the head. Here the top layer is one step below the head (d^1).

The factor multiplies each variable's whole step (optimization.py's learning_rate_scales);
warmup and decay are the schedule's, unchanged.
"""

import logging
import re

from bert_mgpu.errors import UsageError

# Matches replica copies too ("replica_1/bert/encoder/layer_3/...").
_LAYER = re.compile(r"(?:^|/)bert/encoder/layer_(\d+)/")
_EMBEDDINGS = re.compile(r"(?:^|/)bert/embeddings/")


def check_decay(decay):
  """Raises UsageError unless 0 < decay <= 1."""
  if not 0.0 < decay <= 1.0:
    raise UsageError("--layerwise_lr_decay=%s: give a factor in (0, 1], e.g. 0.8 (1.0: "
                     "every layer at the full rate)." % decay)


def learning_rate_scales(variable_names, decay):
  """The learning-rate factor of each variable.

  Args:
    variable_names: the trained variables' names (var.op.name).
    decay: d, in (0, 1].

  Returns:
    dict name -> float, for every name.

  Raises:
    UsageError: no name is an encoder layer's (a model without Google's BERT names).
  """
  check_decay(decay)
  layers = {}
  for name in variable_names:
    match = _LAYER.search(name)
    if match:
      layers[name] = int(match.group(1))
  if not layers:
    raise UsageError("--layerwise_lr_decay=%s: no trained variable is in an encoder layer "
                     "(bert/encoder/layer_<i>/...), so the layers cannot be told apart; drop "
                     "--layerwise_lr_decay." % decay)
  num_layers = max(layers.values()) + 1
  scales = {}
  for name in variable_names:
    if name in layers:
      scales[name] = decay ** (num_layers - layers[name])
    elif _EMBEDDINGS.search(name):
      scales[name] = decay ** (num_layers + 1)
    else:
      scales[name] = 1.0
  return scales


def scales_of(pairs, decay):
  """learning_rate_scales of the variables of (gradient, variable) pairs, or None for
  decay 1.0; logs describe() for replica 0's (names without "replica_<r>/")."""
  if decay == 1.0:
    return None
  names = [variable.op.name for _, variable in pairs]
  scales = learning_rate_scales(names, decay)
  if not any(name.startswith("replica_") for name in names):
    logging.getLogger("tensorflow").info(describe(scales))
  return scales


def describe(scales):
  """One line for the log: the smallest and the largest factor and which variables get
  them."""
  def group(scale):
    names = sorted(name for name, s in scales.items() if s == scale)
    prefixes = sorted(set(_group_name(name) for name in names))
    return "%.4g for %d variable(s) (%s)" % (scale, len(names), ", ".join(prefixes))
  smallest, largest = min(scales.values()), max(scales.values())
  return "Layer-wise learning rates: the schedule's times %s ... %s; %d factors in all." % (
      group(smallest), group(largest), len(set(scales.values())))


def _group_name(name):
  """"bert/embeddings", "bert/encoder/layer_3", "bert/pooler" or the head's variable."""
  match = _LAYER.search(name) or _EMBEDDINGS.search(name)
  if match:
    return name[match.start():match.end()].strip("/")
  return name if not name.startswith("bert/pooler/") else "bert/pooler"
