# coding=utf-8
"""The BERT model in TensorFlow graph mode, compatible with Google's checkpoints.

Variable names, shapes and numerics follow Google's released BERT checkpoints
(bert/embeddings/..., bert/encoder/layer_i/..., bert/pooler/...), so that
`chinese_L-12_H-768_A-12` and friends load unchanged, and the public names
(BertConfig, BertModel, gelu, attention_layer, ...) follow Google's modeling.py
so that existing user code keeps working.

Runs unchanged on TF 1.15 and on TF 2.x through `tensorflow.compat.v1`. Every
variable is created with tf.get_variable inside scopes opened by name, so the
multi-GPU tower builder can call BertModel once per tower under a reusing
variable scope and all towers share one set of `bert/...` variables.
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

import collections
import contextlib
import copy
import json
import math
import numbers

import tensorflow.compat.v1 as tf


# Added to the attention scores of padding positions before the softmax. The
# released checkpoints were trained with this value, so keep it.
_MASKED_SCORE_ADDER = -10000.0

# LayerNorm epsilon of the released checkpoints.
_LAYER_NORM_EPSILON = 1e-12

_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)

# Fields of bert_config.json the model reads, grouped by the type they need.
_INT_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers",
               "num_attention_heads", "intermediate_size",
               "max_position_embeddings", "type_vocab_size")
_FLOAT_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob",
                 "initializer_range")


class BertConfig(object):
  """Hyperparameters of a BertModel (the contents of bert_config.json).

  Keys the model does not use (for example `directionality` or `pooler_type`
  in the released Chinese config) are accepted, stored as attributes, and
  written back by to_dict() / to_json_string().
  """

  def __init__(self,
               vocab_size,
               hidden_size=768,
               num_hidden_layers=12,
               num_attention_heads=12,
               intermediate_size=3072,
               hidden_act="gelu",
               hidden_dropout_prob=0.1,
               attention_probs_dropout_prob=0.1,
               max_position_embeddings=512,
               type_vocab_size=16,
               initializer_range=0.02,
               **extra_fields):
    """Constructs a BertConfig.

    Args:
      vocab_size: Number of rows of the word embedding table.
      hidden_size: Width of the embeddings, encoder layers and pooler.
      num_hidden_layers: Number of Transformer layers.
      num_attention_heads: Attention heads per layer; must divide hidden_size.
      intermediate_size: Width of the feed-forward ("intermediate") layer.
      hidden_act: Activation of the feed-forward layer: a name accepted by
        get_activation() or a callable.
      hidden_dropout_prob: Dropout probability of embeddings, attention output
        and feed-forward output.
      attention_probs_dropout_prob: Dropout probability of attention weights.
      max_position_embeddings: Longest sequence the model supports (rows of
        the position embedding table).
      type_vocab_size: Number of token types (segments).
      initializer_range: Stddev of the truncated normal initializer.
      **extra_fields: Any other keys; kept as attributes and round-tripped.
    """
    self.vocab_size = vocab_size
    self.hidden_size = hidden_size
    self.num_hidden_layers = num_hidden_layers
    self.num_attention_heads = num_attention_heads
    self.hidden_act = hidden_act
    self.intermediate_size = intermediate_size
    self.hidden_dropout_prob = hidden_dropout_prob
    self.attention_probs_dropout_prob = attention_probs_dropout_prob
    self.max_position_embeddings = max_position_embeddings
    self.type_vocab_size = type_vocab_size
    self.initializer_range = initializer_range
    for key, value in extra_fields.items():
      setattr(self, key, value)

  @classmethod
  def from_dict(cls, json_object, source="the config dict"):
    """Builds a BertConfig from a Python dict of parameters.

    Args:
      json_object: dict as parsed from bert_config.json. Must hold vocab_size;
        other model fields fall back to their defaults; unknown keys are kept.
      source: Where the dict came from, used in error messages.

    Returns:
      A BertConfig.

    Raises:
      ValueError: if the dict is not a dict, lacks vocab_size, or a model
        field has the wrong type.
    """
    if not isinstance(json_object, dict):
      raise ValueError(
          "%s must be a JSON object like {\"vocab_size\": 21128, ...}, got %s. "
          "Pass the bert_config.json that came with the checkpoint."
          % (source, type(json_object).__name__))
    _check_config_fields(json_object, source)
    config = cls(vocab_size=None)
    for key, value in json_object.items():
      setattr(config, key, value)
    return config

  @classmethod
  def from_json_file(cls, json_file):
    """Reads a BertConfig from a bert_config.json file.

    Args:
      json_file: Path of the JSON file.

    Returns:
      A BertConfig.

    Raises:
      ValueError: if the file is missing, is not valid JSON or does not hold a
        usable config; the message names the path (and line/column for JSON
        syntax errors) and says what to do.
    """
    if not tf.gfile.Exists(json_file):
      raise ValueError(
          "BERT config file %s does not exist. Pass the path of the "
          "bert_config.json that came with the checkpoint (for example "
          "chinese_L-12_H-768_A-12/bert_config.json)." % json_file)
    if tf.gfile.IsDirectory(json_file):
      raise ValueError(
          "BERT config file %s is a directory. Pass the bert_config.json file "
          "inside it instead." % json_file)
    try:
      with tf.gfile.GFile(json_file, "rb") as reader:
        text = reader.read().decode("utf-8")
    except UnicodeDecodeError as e:
      raise ValueError(
          "BERT config file %s is not UTF-8 text (byte %d): %s. Pass the "
          "bert_config.json that came with the checkpoint." % (json_file, e.start, e))
    try:
      json_object = json.loads(text)
    except ValueError as e:
      # json.JSONDecodeError (a ValueError) carries the position of the error.
      line = getattr(e, "lineno", "?")
      column = getattr(e, "colno", "?")
      message = getattr(e, "msg", str(e))
      raise ValueError(
          "BERT config file %s is not valid JSON: %s at line %s, column %s. "
          "Fix the file or use the bert_config.json that came with the "
          "checkpoint." % (json_file, message, line, column))
    return cls.from_dict(json_object, source="BERT config file %s" % json_file)

  def to_dict(self):
    """Returns every field, including unknown ones, as a new dict."""
    return copy.deepcopy(self.__dict__)

  def to_json_string(self):
    """Returns the config as an indented JSON string with sorted keys."""
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

  def __repr__(self):
    return "BertConfig(%s)" % json.dumps(self.to_dict(), sort_keys=True)


def _check_config_fields(json_object, source):
  """Raises ValueError when a model field of a config dict is unusable."""
  if json_object.get("vocab_size") is None:
    raise ValueError(
        "%s has no \"vocab_size\". Add it (the number of lines in vocab.txt, "
        "21128 for chinese_L-12_H-768_A-12)." % source)
  for key in _INT_FIELDS:
    if key not in json_object:
      continue
    value = json_object[key]
    if (isinstance(value, bool) or not isinstance(value, numbers.Integral) or
        value <= 0):
      raise ValueError(
          "%s: \"%s\" must be a positive integer, got %r. Fix the value."
          % (source, key, value))
  for key in _FLOAT_FIELDS:
    if key not in json_object:
      continue
    value = json_object[key]
    # json.loads accepts NaN and Infinity, and NaN < 0 is False.
    if (isinstance(value, bool) or not isinstance(value, numbers.Real) or
        not math.isfinite(value) or value < 0):
      raise ValueError(
          "%s: \"%s\" must be a non-negative number, got %r. Fix the value."
          % (source, key, value))
  for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
    if key in json_object and json_object[key] >= 1.0:
      raise ValueError(
          "%s: \"%s\" must be below 1.0, got %r. Fix the value."
          % (source, key, json_object[key]))
  if "hidden_act" in json_object:
    try:
      get_activation(json_object["hidden_act"])
    except ValueError as e:
      raise ValueError("%s: \"hidden_act\": %s" % (source, e))
  # Checked here, not only when the model is built, so that a run stops before it
  # writes anything (the defaults are BertConfig.__init__'s).
  hidden_size = json_object.get("hidden_size", 768)
  num_attention_heads = json_object.get("num_attention_heads", 12)
  if hidden_size % num_attention_heads != 0:
    raise ValueError(
        "%s: \"hidden_size\" %d is not a multiple of \"num_attention_heads\" %d. Fix the "
        "values so that the heads split the hidden size evenly." %
        (source, hidden_size, num_attention_heads))


class BertModel(object):
  """BERT: embeddings, a Transformer encoder and a pooler.

  Example:

  ```python
  input_ids = tf.placeholder(tf.int32, [None, 128])
  input_mask = tf.placeholder(tf.int32, [None, 128])
  token_type_ids = tf.placeholder(tf.int32, [None, 128])

  config = modeling.BertConfig.from_json_file("bert_config.json")
  model = modeling.BertModel(config=config, is_training=True,
                             input_ids=input_ids, input_mask=input_mask,
                             token_type_ids=token_type_ids)
  pooled = model.get_pooled_output()  # [batch, hidden]
  ```
  """

  def __init__(self,
               config,
               is_training,
               input_ids,
               input_mask=None,
               token_type_ids=None,
               use_one_hot_embeddings=False,
               scope=None):
    """Builds the model graph.

    Args:
      config: BertConfig.
      is_training: bool. False turns every dropout off.
      input_ids: int32/int64 Tensor [batch, seq]. Either dimension may be
        dynamic (a batch padded only to its longest example); a static
        sequence length is checked against max_position_embeddings here, a
        dynamic one when the graph runs.
      input_mask: optional int Tensor [batch, seq], 1 for real tokens and 0
        for padding. Defaults to all ones.
      token_type_ids: optional int Tensor [batch, seq]. Defaults to zeros.
      use_one_hot_embeddings: bool. True looks up word embeddings with a
        one-hot matmul (dense gradient), False with tf.gather (sparse
        IndexedSlices gradient).
      scope: variable scope name; defaults to "bert". Opened by name, so a
        second build under a reusing scope shares the first build's variables.

    Raises:
      ValueError: if the config does not fit the input (sequence longer than
        max_position_embeddings, hidden_size not divisible by the number of
        attention heads) or input_ids has the wrong rank.
    """
    # Work on a copy: turning dropout off must not change the caller's config.
    config = copy.deepcopy(config)
    if not is_training:
      config.hidden_dropout_prob = 0.0
      config.attention_probs_dropout_prob = 0.0

    input_shape = get_shape_list(input_ids, expected_rank=2, name="input_ids")
    seq_length = input_shape[1]
    _check_sequence_fits(seq_length, config.max_position_embeddings)
    _check_heads_divide_hidden(config.hidden_size, config.num_attention_heads)

    if input_mask is None:
      input_mask = tf.ones_like(input_ids, dtype=tf.int32)
    if token_type_ids is None:
      token_type_ids = tf.zeros_like(input_ids, dtype=tf.int32)

    with tf.variable_scope(scope or "bert"):
      with tf.variable_scope("embeddings"):
        # [batch, seq, hidden], [vocab, hidden]
        (word_embeddings, self.embedding_table) = embedding_lookup(
            input_ids=input_ids,
            vocab_size=config.vocab_size,
            embedding_size=config.hidden_size,
            initializer_range=config.initializer_range,
            word_embedding_name="word_embeddings",
            use_one_hot_embeddings=use_one_hot_embeddings)

        # [batch, seq, hidden]
        self.embedding_output = embedding_postprocessor(
            input_tensor=word_embeddings,
            use_token_type=True,
            token_type_ids=token_type_ids,
            token_type_vocab_size=config.type_vocab_size,
            token_type_embedding_name="token_type_embeddings",
            use_position_embeddings=True,
            position_embedding_name="position_embeddings",
            initializer_range=config.initializer_range,
            max_position_embeddings=config.max_position_embeddings,
            dropout_prob=config.hidden_dropout_prob)

      with tf.variable_scope("encoder"):
        # [batch, seq, seq]
        attention_mask = create_attention_mask_from_input_mask(
            input_ids, input_mask)

        # num_hidden_layers tensors of [batch, seq, hidden]
        self.all_encoder_layers = transformer_model(
            input_tensor=self.embedding_output,
            attention_mask=attention_mask,
            hidden_size=config.hidden_size,
            num_hidden_layers=config.num_hidden_layers,
            num_attention_heads=config.num_attention_heads,
            intermediate_size=config.intermediate_size,
            intermediate_act_fn=get_activation(config.hidden_act),
            hidden_dropout_prob=config.hidden_dropout_prob,
            attention_probs_dropout_prob=config.attention_probs_dropout_prob,
            initializer_range=config.initializer_range,
            do_return_all_layers=True)

      # [batch, seq, hidden]
      self.sequence_output = self.all_encoder_layers[-1]
      # Under mixed precision the table stays float32 for the lookup (only the gathered
      # rows are cast); users of the whole table (the tied masked-LM output) get it in the
      # compute dtype, cast only if they use it.
      self.embedding_table = _cast_if_needed(self.embedding_table,
                                             self.embedding_output.dtype)

      with tf.variable_scope("pooler"):
        # The pooled output summarises the sequence by the final hidden state
        # of its first token ([CLS]).
        first_token_tensor = self.sequence_output[:, 0, :]  # [batch, hidden]
        self.pooled_output = dense_layer(
            first_token_tensor,
            config.hidden_size,
            activation=tf.tanh,
            kernel_initializer=create_initializer(config.initializer_range),
            name="dense")  # [batch, hidden]

  def get_pooled_output(self):
    """Returns the pooled [CLS] representation, [batch, hidden]."""
    return self.pooled_output

  def get_sequence_output(self):
    """Returns the final encoder layer, [batch, seq, hidden]."""
    return self.sequence_output

  def get_all_encoder_layers(self):
    """Returns a list with the output of every encoder layer, each [batch, seq, hidden]."""
    return self.all_encoder_layers

  def get_embedding_output(self):
    """Returns the embeddings after LayerNorm and dropout, [batch, seq, hidden]."""
    return self.embedding_output

  def get_embedding_table(self):
    """Returns the word embedding table variable, [vocab, hidden]."""
    return self.embedding_table


def _check_sequence_fits(seq_length, max_position_embeddings):
  """Raises ValueError when a static sequence length exceeds the position table.

  A dynamic length (a Tensor) is checked by the position-table slice when the graph
  runs.
  """
  if not isinstance(seq_length, int):
    return
  if seq_length > max_position_embeddings:
    raise ValueError(
        "Sequence length %d is longer than max_position_embeddings %d of the "
        "BERT config. Use a max_seq_length of at most %d."
        % (seq_length, max_position_embeddings, max_position_embeddings))


def _check_heads_divide_hidden(hidden_size, num_attention_heads):
  """Raises ValueError unless the heads split the hidden size evenly."""
  if hidden_size % num_attention_heads != 0:
    raise ValueError(
        "hidden_size %d is not a multiple of num_attention_heads %d. Fix the "
        "BERT config so that the heads split the hidden size evenly."
        % (hidden_size, num_attention_heads))


def gelu(x):
  """Gaussian Error Linear Unit, exact form: 0.5 * x * (1 + erf(x / sqrt(2))).

  This is what "gelu" meant when the released checkpoints were trained. The gradient is
  written out, x Phi'(x) + Phi(x) with Phi' = exp(-x^2 / 2) / sqrt(2 pi), reusing the
  forward pass's x / sqrt(2) and Phi(x): fewer elementwise ops over the [rows, intermediate]
  activations than differentiating the formula op by op (docs/PERFORMANCE.md, issue #22).

  Args:
    x: float Tensor.

  Returns:
    `x` with the activation applied.
  """
  return _gelu_with_gradient(x)


@tf.custom_gradient
def _gelu_with_gradient(x):
  """gelu(x), and a gradient function that reuses its x / sqrt(2) and Phi(x)."""
  scaled = x * _INV_SQRT_2
  cdf = 0.5 * (1.0 + tf.math.erf(scaled))  # Phi(x)
  output = x * cdf

  def grad(dy):
    # d/dx [x Phi(x)] = Phi(x) + x Phi'(x), Phi'(x) = exp(-s^2) / sqrt(2 pi) with s = x / sqrt 2,
    # so x Phi'(x) = s exp(-s^2) / sqrt(pi). Square, Neg, Exp is a chain of unary ops, which
    # Grappler runs as one pass (_UnaryOpsComposition) on CPU.
    s_pdf = scaled * tf.exp(tf.negative(tf.square(scaled)))
    return dy * (cdf + s_pdf * _INV_SQRT_PI)

  return output, grad


def gelu_new(x):
  """GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).

  Args:
    x: float Tensor.

  Returns:
    `x` with the activation applied.
  """
  inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
  return 0.5 * x * (1.0 + tf.tanh(inner))


_ACTIVATIONS = collections.OrderedDict([
    ("gelu", gelu),
    ("gelu_new", gelu_new),
    ("relu", tf.nn.relu),
    ("tanh", tf.tanh),
    ("linear", None),
])


def get_activation(activation_string):
  """Maps an activation name to its function.

  Args:
    activation_string: a name ("gelu", "gelu_new", "relu", "tanh", "linear"),
      None or "" (no activation), or a callable, which is returned as is.

  Returns:
    A function of one Tensor, or None for a linear activation.

  Raises:
    ValueError: for an unknown name; the message lists the supported names.
  """
  if not isinstance(activation_string, str):
    if activation_string is None or callable(activation_string):
      return activation_string
    raise ValueError(
        "Activation must be a name or a function, got %r. Use one of: %s."
        % (activation_string, ", ".join(_ACTIVATIONS)))
  if not activation_string:
    return None
  name = activation_string.lower()
  if name not in _ACTIVATIONS:
    raise ValueError(
        "Unsupported activation %r. Use one of: %s."
        % (activation_string, ", ".join(_ACTIVATIONS)))
  return _ACTIVATIONS[name]


def _strip_output_index(tensor_name):
  """Turns a variable's tensor name "a/b:0" into its checkpoint name "a/b"."""
  base, colon, index = tensor_name.rpartition(":")
  if colon and index.isdigit():
    return base
  return tensor_name


def get_assignment_map_from_checkpoint(tvars, init_checkpoint):
  """Matches model variables to checkpoint variables of the same name.

  Args:
    tvars: list of model variables (typically tf.trainable_variables()).
    init_checkpoint: checkpoint prefix (".../bert_model.ckpt") or a directory
      holding a checkpoint.

  Returns:
    (assignment_map, initialized_variable_names): an OrderedDict mapping each
    checkpoint name found in the model to itself (for
    tf.train.init_from_checkpoint), and a dict with both "name" and "name:0"
    set to 1 for each of those variables.

  Raises:
    ValueError: if the checkpoint cannot be read, or a variable's shape in the
      checkpoint differs from its shape in the model.
  """
  model_variables = collections.OrderedDict()
  for var in tvars:
    model_variables[_strip_output_index(var.name)] = var

  try:
    checkpoint_variables = tf.train.list_variables(init_checkpoint)
  except (tf.errors.OpError, ValueError, IOError) as e:
    raise ValueError(
        "Cannot read checkpoint %s: %s. Pass the checkpoint prefix, for "
        "example chinese_L-12_H-768_A-12/bert_model.ckpt (the part before "
        ".index), or a directory that holds a checkpoint."
        % (init_checkpoint, str(e).strip().splitlines()[0] if str(e).strip()
           else type(e).__name__))

  assignment_map = collections.OrderedDict()
  initialized_variable_names = {}
  for name, checkpoint_shape in checkpoint_variables:
    if name not in model_variables:
      continue
    model_shape = model_variables[name].shape.as_list()
    if list(checkpoint_shape) != model_shape:
      raise ValueError(
          "Variable %s has shape %s in checkpoint %s but %s in the model: the "
          "BERT config does not match the checkpoint. Use the bert_config.json "
          "that came with the checkpoint."
          % (name, list(checkpoint_shape), init_checkpoint, model_shape))
    assignment_map[name] = name
    initialized_variable_names[name] = 1
    initialized_variable_names[name + ":0"] = 1

  return (assignment_map, initialized_variable_names)


# Dropout decides each value with 16 random bits: values below the threshold are dropped.
_DROPOUT_LEVELS = 1 << 16


def dropout(input_tensor, dropout_prob):
  """Applies inverted dropout: each value dropped with `dropout_prob`, the rest scaled up.

  Each value gets 16 random bits, two from each 32-bit integer that TensorFlow's generator
  draws: half the draws of tf.nn.dropout (one float per value), and no float conversion.
  The drop probability is round(dropout_prob * 65536) / 65536 (0.1 -> 0.100006) in every
  dtype; tf.nn.dropout's bfloat16 uniform has 7 random bits and drops 10.16% for 0.1. A
  probability under 2^-17 rounds to no dropout, one above 1 - 2^-17 to 65535 / 65536. In
  bfloat16 and float16 the scale 1 / (1 - p) is rounded to the dtype, as in tf.nn.dropout
  (docs/PERFORMANCE.md, issue #22).

  Args:
    input_tensor: float Tensor.
    dropout_prob: probability of dropping each value (not of keeping it), below 1.
      None or 0.0 returns the input unchanged.

  Returns:
    The Tensor after dropout, of the input's shape and dtype.
  """
  if dropout_prob is None or dropout_prob == 0.0:
    return input_tensor
  if not 0.0 <= dropout_prob < 1.0:
    raise ValueError("dropout_prob=%r: use a probability from 0 to below 1." % dropout_prob)
  threshold = min(int(round(dropout_prob * _DROPOUT_LEVELS)), _DROPOUT_LEVELS - 1)
  if threshold == 0:
    return input_tensor
  keep_scale = float(_DROPOUT_LEVELS) / (_DROPOUT_LEVELS - threshold)
  with tf.name_scope("dropout"):
    shape = tf.shape(input_tensor)
    size = tf.reduce_prod(shape)
    # An even last dimension (BERT's widths and sequence lengths) makes the size even: the
    # bits then fill the shape exactly, with no int16 slice (TF 1.15 has no GPU kernel for
    # one, and would copy the bits to the host and back).
    last = (tf.compat.dimension_value(input_tensor.shape[-1]) if input_tensor.shape.ndims
            else None)
    even = last is not None and last % 2 == 0
    words = tf.random.uniform([size // 2 if even else (size + 1) // 2], minval=-2**31,
                              maxval=2**31 - 1, dtype=tf.int32)
    # Each int32 word is two int16 values, uniform over [-32768, 32767].
    bits = tf.reshape(tf.bitcast(words, tf.int16), [-1])
    mask = tf.cast(bits >= threshold - _DROPOUT_LEVELS // 2, input_tensor.dtype) * keep_scale
    if not even:
      mask = mask[:size]  # one value too many; sliced in the float dtype
    mask = tf.reshape(mask, shape)
    mask.set_shape(input_tensor.shape)
    return input_tensor * mask


def layer_norm(input_tensor, name=None):
  """Layer normalization over the last axis, as in the released checkpoints.

  Creates `<name>/beta` (zeros) and `<name>/gamma` (ones) of the size of the
  last axis; `name` defaults to "LayerNorm". Statistics are computed in
  float32 with epsilon 1e-12, and so is the gradient, which is written out
  (_layer_norm_with_gradient) rather than differentiated op by op.

  Args:
    input_tensor: float Tensor [..., width] with a static last dimension.
    name: variable scope name.

  Returns:
    The normalized Tensor, same shape and dtype as the input.
  """
  width = input_tensor.shape.as_list()[-1]
  if width is None:
    raise ValueError(
        "layer_norm needs a static last dimension, got shape %s."
        % input_tensor.shape)
  with tf.variable_scope(name or "LayerNorm"):
    beta = tf.get_variable("beta", [width], initializer=tf.zeros_initializer())
    gamma = tf.get_variable("gamma", [width], initializer=tf.ones_initializer())
    return _layer_norm_with_gradient(input_tensor, gamma, beta)


@tf.custom_gradient
def _layer_norm_with_gradient(input_tensor, gamma, beta):
  """LayerNorm of the last axis in float32, output in the input's dtype.

  The gradient is the closed form (x_hat the normalized input, g = dy * gamma, means
  over the last axis):
    dx = rsqrt(var + eps) * (g - mean(g) - x_hat * mean(g * x_hat))
    dgamma = sum(dy * x_hat), dbeta = sum(dy)   (over every axis but the last)
  About half the elementwise passes of the op-by-op gradient, and no broadcast-shape ops.
  """
  x = tf.cast(input_tensor, tf.float32)
  mean = tf.reduce_mean(x, axis=-1, keepdims=True)
  centered = x - mean
  variance = tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True)
  inverse_std = tf.math.rsqrt(variance + _LAYER_NORM_EPSILON)
  normalized = centered * inverse_std
  output = tf.cast(normalized * gamma + beta, input_tensor.dtype)

  def grad(dy):
    dy = tf.cast(dy, tf.float32)
    outer_axes = list(range(dy.shape.ndims - 1))
    d_beta = tf.reduce_sum(dy, axis=outer_axes)
    d_gamma = tf.reduce_sum(dy * normalized, axis=outer_axes)
    g = dy * gamma
    d_x = inverse_std * (g - tf.reduce_mean(g, axis=-1, keepdims=True) - normalized *
                         tf.reduce_mean(g * normalized, axis=-1, keepdims=True))
    return tf.cast(d_x, input_tensor.dtype), d_gamma, d_beta

  return output, grad


def layer_norm_and_dropout(input_tensor, dropout_prob, name=None):
  """Runs layer_norm and then dropout.

  Args:
    input_tensor: float Tensor [..., width].
    dropout_prob: dropout probability (None or 0.0 for none).
    name: variable scope of the LayerNorm variables (default "LayerNorm").

  Returns:
    The normalized Tensor after dropout.
  """
  output_tensor = layer_norm(input_tensor, name)
  return dropout(output_tensor, dropout_prob)


# Distributions of newly created weights (those no checkpoint gives): Google's truncated
# normal (the default; cut at 2 stddev, so its real stddev is 0.88 x initializer_range), or
# transformers' BERT's untruncated normal, with the [PAD] row of the word embeddings zero.
INITIALIZERS = ("truncated_normal", "normal")
_initializer = ["truncated_normal"]  # the one in force; set by weight_initializer()

# The id whose word-embedding row starts at zero under the "normal" initializer: [PAD]
# in Google's vocabularies, transformers' pad_token_id.
PAD_ID = 0


@contextlib.contextmanager
def weight_initializer(name):
  """Within the context, create_initializer (and the word-embedding table) draw from
  `name`, one of INITIALIZERS; the model functions build their variables inside it.

  Args:
    name: "truncated_normal" (Google's) or "normal" (transformers').
  """
  if name not in INITIALIZERS:
    raise ValueError("initializer %r: use one of %s" % (name, ", ".join(INITIALIZERS)))
  previous = _initializer[0]
  _initializer[0] = name
  try:
    yield
  finally:
    _initializer[0] = previous


def create_initializer(initializer_range=0.02):
  """Returns the weight initializer with stddev `initializer_range`: truncated normal
  (Google's), or normal inside weight_initializer("normal")."""
  if _initializer[0] == "normal":
    return tf.random_normal_initializer(stddev=initializer_range)
  return tf.truncated_normal_initializer(stddev=initializer_range)


def _word_embedding_initializer(initializer_range):
  """create_initializer's, with row PAD_ID zero under the "normal" initializer (as
  transformers' nn.Embedding(padding_idx=pad_token_id) starts)."""
  initializer = create_initializer(initializer_range)
  if _initializer[0] != "normal":
    return initializer

  def pad_row_zero(shape, dtype=tf.float32, partition_info=None):
    values = initializer(shape, dtype=dtype, partition_info=partition_info)  # [vocab, width]
    keep = tf.cast(tf.not_equal(tf.range(shape[0]), PAD_ID), values.dtype)  # [vocab]
    return values * keep[:, None]
  return pad_row_zero


def dense_layer(input_tensor, units, activation=None, kernel_initializer=None,
                name=None):
  """A fully connected layer: activation(x @ kernel + bias).

  Replaces tf.layers.dense, which TF 2 no longer has, with the same variable
  names: `<name>/kernel` [in, units] and `<name>/bias` [units] (zeros).

  Args:
    input_tensor: float Tensor of rank 2 [batch, in] or rank 3
      [batch, seq, in]; the last dimension must be static.
    units: output width.
    activation: function applied to the result, or None.
    kernel_initializer: initializer of the kernel; None gives tf.get_variable's
      default (Glorot uniform, like tf.layers.dense).
    name: variable scope name; defaults to "dense".

  Returns:
    Tensor of the input's rank with last dimension `units`.
  """
  input_shape = get_shape_list(input_tensor, expected_rank=[2, 3], name=name)
  in_width = input_shape[-1]
  if not isinstance(in_width, int):
    raise ValueError(
        "dense_layer %s needs a static last input dimension, got shape %s."
        % (name or "dense", input_tensor.shape))
  with tf.variable_scope(name or "dense"):
    kernel = tf.get_variable(
        "kernel", [in_width, units], initializer=kernel_initializer)
    bias = tf.get_variable("bias", [units], initializer=tf.zeros_initializer())
    matrix = reshape_to_matrix(input_tensor)  # [rows, in]
    output = tf.nn.bias_add(tf.matmul(matrix, kernel), bias)  # [rows, units]
    if activation is not None:
      output = activation(output)
    if len(input_shape) == 3:
      output = reshape_from_matrix(output, input_shape[:-1] + [units])
    return output


def embedding_lookup(input_ids,
                     vocab_size,
                     embedding_size=128,
                     initializer_range=0.02,
                     word_embedding_name="word_embeddings",
                     use_one_hot_embeddings=False):
  """Looks up word embeddings for ids.

  Args:
    input_ids: int Tensor [batch, seq] (a trailing dimension of size 1, as in
      Google's code, is accepted too).
    vocab_size: rows of the embedding table.
    embedding_size: width of the embeddings.
    initializer_range: stddev of the table's initializer (create_initializer's; row
      PAD_ID zero under weight_initializer("normal")).
    word_embedding_name: name of the table variable.
    use_one_hot_embeddings: True multiplies a one-hot matrix with the table
      (dense gradient); False gathers rows (IndexedSlices gradient).

  Returns:
    (output, embedding_table): float Tensor [batch, seq, embedding_size] and
    the table variable [vocab_size, embedding_size].
  """
  id_shape = get_shape_list(input_ids, expected_rank=[2, 3], name="input_ids")
  if len(id_shape) == 3:
    if id_shape[2] != 1:
      raise ValueError(
          "input_ids of rank 3 must have a last dimension of 1, got shape %s."
          % input_ids.shape)
    id_shape = id_shape[:2]

  embedding_table = tf.get_variable(
      name=word_embedding_name,
      shape=[vocab_size, embedding_size],
      initializer=_word_embedding_initializer(initializer_range))

  flat_ids = tf.reshape(input_ids, [-1])  # [batch * seq]
  if use_one_hot_embeddings:
    one_hot_ids = tf.one_hot(flat_ids, depth=vocab_size,
                             dtype=embedding_table.dtype.base_dtype)  # [batch * seq, vocab]
    flat_output = tf.matmul(one_hot_ids, embedding_table)
  else:
    flat_output = tf.gather(embedding_table, flat_ids)
  # [batch * seq, embedding_size] -> [batch, seq, embedding_size]
  output = tf.reshape(flat_output, id_shape + [embedding_size])
  return (output, embedding_table)


def embedding_postprocessor(input_tensor,
                            use_token_type=False,
                            token_type_ids=None,
                            token_type_vocab_size=16,
                            token_type_embedding_name="token_type_embeddings",
                            use_position_embeddings=True,
                            position_embedding_name="position_embeddings",
                            initializer_range=0.02,
                            max_position_embeddings=512,
                            dropout_prob=0.1):
  """Adds token type and position embeddings, then LayerNorm and dropout.

  Args:
    input_tensor: float Tensor [batch, seq, width] (the word embeddings).
    use_token_type: whether to add token type embeddings.
    token_type_ids: int Tensor [batch, seq]; required if use_token_type.
    token_type_vocab_size: rows of the token type table.
    token_type_embedding_name: name of the token type table variable.
    use_position_embeddings: whether to add position embeddings.
    position_embedding_name: name of the position table variable.
    initializer_range: stddev of the tables' truncated normal initializer.
    max_position_embeddings: rows of the position table; the sequence may not
      be longer.
    dropout_prob: dropout probability applied after LayerNorm.

  Returns:
    float Tensor [batch, seq, width].

  Raises:
    ValueError: if token_type_ids is missing while use_token_type is set, or
      the sequence is longer than max_position_embeddings.
  """
  input_shape = get_shape_list(input_tensor, expected_rank=3, name="embeddings")
  seq_length = input_shape[1]
  width = input_shape[2]

  output = input_tensor
  if use_token_type:
    if token_type_ids is None:
      raise ValueError("token_type_ids must be given when use_token_type is True.")
    token_type_table = tf.get_variable(
        name=token_type_embedding_name,
        shape=[token_type_vocab_size, width],
        initializer=create_initializer(initializer_range))
    # The type vocabulary is tiny, so a one-hot matmul is cheap and avoids a
    # sparse gradient.
    flat_type_ids = tf.reshape(token_type_ids, [-1])  # [batch * seq]
    one_hot_types = tf.one_hot(flat_type_ids, depth=token_type_vocab_size,
                               dtype=token_type_table.dtype.base_dtype)
    type_embeddings = tf.matmul(one_hot_types, token_type_table)
    output = _cast_if_needed(output, type_embeddings.dtype)
    output += tf.reshape(type_embeddings, input_shape)  # [batch, seq, width]

  if use_position_embeddings:
    _check_sequence_fits(seq_length, max_position_embeddings)
    position_table = tf.get_variable(
        name=position_embedding_name,
        shape=[max_position_embeddings, width],
        initializer=create_initializer(initializer_range))
    # Positions are 0 .. seq-1 for every example, so take the first seq rows
    # and broadcast them over the batch. tf.slice fails at run time for a
    # dynamic seq longer than the table, where [:seq] would silently stop short.
    position_embeddings = tf.slice(position_table, [0, 0], [seq_length, -1])  # [seq, width]
    output = _cast_if_needed(output, position_embeddings.dtype)
    output += tf.expand_dims(position_embeddings, 0)  # [batch, seq, width]

  return layer_norm_and_dropout(output, dropout_prob)


def _cast_if_needed(value, dtype):
  """`value` (a tensor or variable) as `dtype`; itself when it already has that dtype."""
  if value.dtype.base_dtype == dtype:
    return value
  return tf.cast(value, dtype)


def create_attention_mask_from_input_mask(from_tensor, to_mask):
  """Builds the 3D attention mask from a 2D padding mask.

  Args:
    from_tensor: Tensor [batch, from_seq, ...] (only its first two dimensions
      are used).
    to_mask: int Tensor [batch, to_seq], 1 for positions that may be attended.

  Returns:
    float32 Tensor [batch, from_seq, to_seq]: mask[b, i, j] = to_mask[b, j].
  """
  from_shape = get_shape_list(from_tensor, expected_rank=[2, 3], name="from_tensor")
  batch_size = from_shape[0]
  from_seq_length = from_shape[1]
  to_shape = get_shape_list(to_mask, expected_rank=2, name="to_mask")
  to_seq_length = to_shape[1]

  to_mask = tf.cast(tf.expand_dims(to_mask, 1), tf.float32)  # [batch, 1, to_seq]
  # Every query position sees the same keys; padding in the query positions
  # is left alone (their outputs are ignored downstream).
  return tf.broadcast_to(to_mask, [batch_size, from_seq_length, to_seq_length])


def attention_layer(from_tensor,
                    to_tensor,
                    attention_mask=None,
                    num_attention_heads=1,
                    size_per_head=512,
                    query_act=None,
                    key_act=None,
                    value_act=None,
                    attention_probs_dropout_prob=0.0,
                    initializer_range=0.02,
                    do_return_2d_tensor=False,
                    batch_size=None,
                    from_seq_length=None,
                    to_seq_length=None):
  """Multi-headed scaled dot-product attention from `from_tensor` to `to_tensor`.

  Creates the variables query/, key/ and value/ (kernel and bias) in the
  current variable scope.

  Args:
    from_tensor: float Tensor [batch, from_seq, from_width], or
      [batch * from_seq, from_width] with batch_size and from_seq_length given.
    to_tensor: float Tensor [batch, to_seq, to_width], or
      [batch * to_seq, to_width] with batch_size and to_seq_length given.
    attention_mask: optional float Tensor [batch, from_seq, to_seq]; 1 where
      attending is allowed, 0 where not.
    num_attention_heads: number of heads.
    size_per_head: width of each head.
    query_act, key_act, value_act: activations of the projections (or None).
    attention_probs_dropout_prob: dropout probability of the attention weights.
    initializer_range: stddev of the kernels' truncated normal initializer.
    do_return_2d_tensor: True returns [batch * from_seq, heads * size_per_head].
    batch_size, from_seq_length, to_seq_length: needed for rank-2 inputs.

  Returns:
    float Tensor [batch, from_seq, heads * size_per_head] (or its 2D form).

  Raises:
    ValueError: on inputs of the wrong or mismatched rank, or rank-2 inputs
      without the sizes.
  """
  from_shape = get_shape_list(from_tensor, expected_rank=[2, 3], name="from_tensor")
  to_shape = get_shape_list(to_tensor, expected_rank=[2, 3], name="to_tensor")
  if len(from_shape) != len(to_shape):
    raise ValueError(
        "from_tensor and to_tensor must have the same rank, got %d and %d."
        % (len(from_shape), len(to_shape)))
  if len(from_shape) == 3:
    batch_size = from_shape[0]
    from_seq_length = from_shape[1]
    to_seq_length = to_shape[1]
  elif batch_size is None or from_seq_length is None or to_seq_length is None:
    raise ValueError(
        "attention_layer with rank-2 inputs needs batch_size, from_seq_length "
        "and to_seq_length.")

  initializer = create_initializer(initializer_range)
  all_heads_width = num_attention_heads * size_per_head

  from_matrix = reshape_to_matrix(from_tensor)  # [batch * from_seq, from_width]
  to_matrix = reshape_to_matrix(to_tensor)  # [batch * to_seq, to_width]

  # Each [rows, heads * size_per_head]
  query = dense_layer(from_matrix, all_heads_width, activation=query_act,
                      kernel_initializer=initializer, name="query")
  key = dense_layer(to_matrix, all_heads_width, activation=key_act,
                    kernel_initializer=initializer, name="key")
  value = dense_layer(to_matrix, all_heads_width, activation=value_act,
                      kernel_initializer=initializer, name="value")

  def split_heads(matrix, seq_length):
    """[batch * seq, heads * size] -> [batch, heads, seq, size]."""
    split = tf.reshape(
        matrix, [batch_size, seq_length, num_attention_heads, size_per_head])
    return tf.transpose(split, [0, 2, 1, 3])

  # The 1/sqrt(size_per_head) of the scores, applied to the queries: a pass over
  # [rows, hidden] instead of [batch, heads, from_seq, to_seq] (exact for sizes 4^k, as 64).
  query *= 1.0 / math.sqrt(float(size_per_head))
  query = split_heads(query, from_seq_length)  # [batch, heads, from_seq, size]
  key = split_heads(key, to_seq_length)  # [batch, heads, to_seq, size]
  value = split_heads(value, to_seq_length)  # [batch, heads, to_seq, size]

  # [batch, heads, from_seq, to_seq]; the mask and the softmax in float32 whatever the
  # compute precision: -10000 and exp() of large scores do not fit float16.
  scores = tf.cast(tf.matmul(query, key, transpose_b=True), tf.float32)

  if attention_mask is not None:
    mask = tf.expand_dims(tf.cast(attention_mask, tf.float32), 1)  # [batch, 1, from_seq, to_seq]
    # A large negative score makes a masked position's softmax weight ~0.
    scores += (1.0 - mask) * _MASKED_SCORE_ADDER

  probs = tf.nn.softmax(scores)  # [batch, heads, from_seq, to_seq]
  probs = tf.cast(dropout(probs, attention_probs_dropout_prob), value.dtype)

  context = tf.matmul(probs, value)  # [batch, heads, from_seq, size]
  context = tf.transpose(context, [0, 2, 1, 3])  # [batch, from_seq, heads, size]
  if do_return_2d_tensor:
    return tf.reshape(context, [-1, all_heads_width])
  return tf.reshape(context, [batch_size, from_seq_length, all_heads_width])


def transformer_model(input_tensor,
                      attention_mask=None,
                      hidden_size=768,
                      num_hidden_layers=12,
                      num_attention_heads=12,
                      intermediate_size=3072,
                      intermediate_act_fn=gelu,
                      hidden_dropout_prob=0.1,
                      attention_probs_dropout_prob=0.1,
                      initializer_range=0.02,
                      do_return_all_layers=False):
  """The Transformer encoder of BERT (post-LayerNorm).

  Each layer computes
    a = LayerNorm(dropout(dense(self_attention(x))) + x)
    y = LayerNorm(dropout(dense_H(act(dense_I(a)))) + a)
  with variables under layer_<i>/attention/self, layer_<i>/attention/output,
  layer_<i>/intermediate and layer_<i>/output of the current variable scope.

  Args:
    input_tensor: float Tensor [batch, seq, hidden_size].
    attention_mask: optional float Tensor [batch, seq, seq], 1 where attending
      is allowed.
    hidden_size: width of the layers.
    num_hidden_layers: number of layers.
    num_attention_heads: heads per layer; must divide hidden_size.
    intermediate_size: width of the feed-forward layer.
    intermediate_act_fn: activation of the feed-forward layer.
    hidden_dropout_prob: dropout probability of the layer outputs.
    attention_probs_dropout_prob: dropout probability of attention weights.
    initializer_range: stddev of the kernels' truncated normal initializer.
    do_return_all_layers: True returns every layer's output.

  Returns:
    float Tensor [batch, seq, hidden_size] of the last layer, or a list of
    such Tensors, one per layer.

  Raises:
    ValueError: if hidden_size is not divisible by num_attention_heads or the
      input width is not hidden_size.
  """
  _check_heads_divide_hidden(hidden_size, num_attention_heads)
  size_per_head = hidden_size // num_attention_heads

  input_shape = get_shape_list(input_tensor, expected_rank=3, name="input_tensor")
  batch_size = input_shape[0]
  seq_length = input_shape[1]
  input_width = input_shape[2]
  if input_width != hidden_size:
    raise ValueError(
        "The width of the transformer input (%d) must equal hidden_size (%d)."
        % (input_width, hidden_size))

  initializer = create_initializer(initializer_range)

  # Work on [batch * seq, hidden] matrices between layers to avoid reshaping
  # back and forth around every dense layer.
  prev_output = reshape_to_matrix(input_tensor)

  all_layer_outputs = []
  for layer_idx in range(num_hidden_layers):
    with tf.variable_scope("layer_%d" % layer_idx):
      layer_input = prev_output  # [batch * seq, hidden]

      with tf.variable_scope("attention"):
        with tf.variable_scope("self"):
          attention_heads = attention_layer(
              from_tensor=layer_input,
              to_tensor=layer_input,
              attention_mask=attention_mask,
              num_attention_heads=num_attention_heads,
              size_per_head=size_per_head,
              attention_probs_dropout_prob=attention_probs_dropout_prob,
              initializer_range=initializer_range,
              do_return_2d_tensor=True,
              batch_size=batch_size,
              from_seq_length=seq_length,
              to_seq_length=seq_length)  # [batch * seq, hidden]

        with tf.variable_scope("output"):
          attention_output = dense_layer(
              attention_heads, hidden_size, kernel_initializer=initializer,
              name="dense")
          attention_output = dropout(attention_output, hidden_dropout_prob)
          attention_output = layer_norm(attention_output + layer_input)

      with tf.variable_scope("intermediate"):
        intermediate_output = dense_layer(
            attention_output, intermediate_size,
            activation=intermediate_act_fn, kernel_initializer=initializer,
            name="dense")  # [batch * seq, intermediate]

      with tf.variable_scope("output"):
        layer_output = dense_layer(
            intermediate_output, hidden_size, kernel_initializer=initializer,
            name="dense")  # [batch * seq, hidden]
        layer_output = dropout(layer_output, hidden_dropout_prob)
        layer_output = layer_norm(layer_output + attention_output)

      prev_output = layer_output
      all_layer_outputs.append(layer_output)

  if do_return_all_layers:
    return [reshape_from_matrix(layer_output, input_shape)
            for layer_output in all_layer_outputs]
  return reshape_from_matrix(prev_output, input_shape)


def get_shape_list(tensor, expected_rank=None, name=None):
  """Returns a tensor's shape as a list, static where known.

  Args:
    tensor: a Tensor.
    expected_rank: optional int or list of ints; a different rank raises.
    name: name of the tensor for error messages.

  Returns:
    A list with a Python int for each static dimension and a scalar int32
    Tensor for each dynamic one.
  """
  if expected_rank is not None:
    assert_rank(tensor, expected_rank, name)

  static_shape = tensor.shape.as_list()
  if all(dim is not None for dim in static_shape):
    return static_shape
  dynamic_shape = tf.shape(tensor)
  return [dim if dim is not None else dynamic_shape[index]
          for index, dim in enumerate(static_shape)]


def reshape_to_matrix(input_tensor):
  """Reshapes a Tensor of rank >= 2 to [rows, last_dim]."""
  ndims = input_tensor.shape.ndims
  if ndims is None or ndims < 2:
    raise ValueError(
        "reshape_to_matrix needs a tensor of rank 2 or more, got shape %s."
        % input_tensor.shape)
  if ndims == 2:
    return input_tensor
  width = input_tensor.shape.as_list()[-1]
  return tf.reshape(input_tensor, [-1, width])


def reshape_from_matrix(output_tensor, orig_shape_list):
  """Reshapes a [rows, width] matrix back to `orig_shape_list[:-1] + [width]`."""
  if len(orig_shape_list) == 2:
    return output_tensor
  width = get_shape_list(output_tensor, expected_rank=2)[-1]
  return tf.reshape(output_tensor, list(orig_shape_list[:-1]) + [width])


def assert_rank(tensor, expected_rank, name=None):
  """Raises ValueError unless the tensor has (one of) the expected rank(s).

  Args:
    tensor: a Tensor.
    expected_rank: int or list of ints.
    name: name of the tensor for the error message (defaults to tensor.name).
  """
  if name is None:
    name = getattr(tensor, "name", "tensor")
  if isinstance(expected_rank, numbers.Integral):
    allowed = [int(expected_rank)]
  else:
    allowed = [int(rank) for rank in expected_rank]
  actual_rank = tensor.shape.ndims
  if actual_rank not in allowed:
    raise ValueError(
        "Tensor %s has rank %s (shape %s) but rank %s was expected."
        % (name, actual_rank, tensor.shape,
           allowed[0] if len(allowed) == 1 else " or ".join(map(str, allowed))))
