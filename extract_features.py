# coding=utf-8
"""Extracts BERT's hidden states for every line of a text file, on every GPU.

The flags, defaults and output are those of Google's extract_features.py (docs/FORMATS.md
10) plus the runner's multi-GPU flags. Input: one text per line, `text_a ||| text_b` for a
pair. Output (--output_file), one JSON line per input line, in input order:

  {"linex_index": 0, "features": [{"token": "[CLS]", "layers": [{"index": -1,
   "values": [0.123456, ...]}, ...]}, ...]}

With --pooling=cls or mean, the output is instead one .npy array [lines, layers, hidden]
of sentence vectors. Either file is written through a temp file and a rename.
"""

import collections
import contextlib
import json
import os
import re
import tempfile
import time

import numpy as np
import tensorflow.compat.v1 as tf

import classifier_data
import modeling
import multigpu
import runner
import tfrecord_io
from runner import UsageError

# Google's pair separator: the line splits at its last " ||| ".
_PAIR_PATTERN = re.compile(r"^(.*) \|\|\| (.*)$")

# Google's rounding of every value written to the JSON lines.
_DECIMALS = 6

# Variables that BertModel builds but whose values no extracted layer depends on: a
# checkpoint may lack them.
_UNUSED_SCOPES = ("bert/pooler/",)


# ---------------------------------------------------------------------------
# Input: lines, examples and features
# ---------------------------------------------------------------------------

def read_lines(path):
  """The lines of a UTF-8 text file, as Google's reader sees them.

  Lines end at "\\n" only; a final "\\n" does not start another line, so a file of n
  newline-terminated lines gives n lines. Empty lines are kept (each one is a text).

  Raises:
    UsageError: the file is unreadable, not UTF-8 (file and line named), has a carriage
      return inside a line (old Mac line ends), or has no line at all.
  """
  # pylint: disable=protected-access  # the classifier's strict line reader, shared
  lines = [line for _, line in classifier_data.text_lines(path)]
  if lines and lines[-1] == "":
    lines.pop()  # the "line" after the final newline
  if not lines:
    raise UsageError("--input_file=%s is empty: give one text per line ('text_a ||| text_b' "
                     "for a pair)." % path)
  return lines


def parse_line(line):
  """Google's reading of one line: (text_a, text_b or None), stripped, split at " ||| "."""
  line = line.strip()
  match = _PAIR_PATTERN.match(line)
  if match is None:
    return line, None
  return match.group(1), match.group(2)


def convert_lines(lines, tokenizer, max_seq_length):
  """Tokenizes the lines as Google's extract_features.py does.

  Each line becomes [CLS] a [SEP] (or [CLS] a [SEP] b [SEP]), truncated to max_seq_length
  (the longer text loses tokens first); an empty line becomes [CLS] [SEP].

  Args:
    lines: list of str.
    tokenizer: a tokenization.FullTokenizer.
    max_seq_length: the longest token sequence (>= 3).

  Returns:
    A list of (input_ids, segment_ids), int32 arrays [num_tokens] with no padding.
  """
  features = []
  for index, line in enumerate(lines):
    text_a, text_b = parse_line(line)
    example = classifier_data.InputExample(guid=index, text_a=text_a, text_b=text_b)
    converted = classifier_data.convert_single_example(example, {}, max_seq_length, tokenizer)
    num_tokens = sum(converted.input_mask)
    features.append((np.array(converted.input_ids[:num_tokens], np.int32),
                     np.array(converted.segment_ids[:num_tokens], np.int32)))
  return features


def pad_batch(features, max_seq_length):
  """Zero-pads a list of (input_ids, segment_ids) to arrays [batch, max_seq_length].

  Returns:
    dict input_ids, input_mask, segment_ids -> int32 [batch, max_seq_length].
  """
  batch = {name: np.zeros([len(features), max_seq_length], np.int32)
           for name in tfrecord_io.SEQUENCE_FEATURES}
  for row, (input_ids, segment_ids) in enumerate(features):
    batch["input_ids"][row, :len(input_ids)] = input_ids
    batch["input_mask"][row, :len(input_ids)] = 1
    batch["segment_ids"][row, :len(input_ids)] = segment_ids
  return batch


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------

POOLINGS = ("none", "cls", "mean")


def parse_layer_indexes(layers_flag, num_hidden_layers):
  """The layer indexes of --layers, checked against the model.

  Indexes count as Python's do: 0 is the first encoder layer, -1 the last.

  Raises:
    UsageError: an index that is not an integer or is out of range (the range is named).
  """
  valid = "from %d to %d (-1 is the last layer of this %d-layer model)" % (
      -num_hidden_layers, num_hidden_layers - 1, num_hidden_layers)
  indexes = []
  for item in layers_flag.split(","):
    try:
      index = int(item)
    except ValueError:
      raise UsageError("--layers=%s: %r is not a layer index; give comma-separated integers "
                       "%s, e.g. --layers=-1,-2,-3,-4." % (layers_flag, item.strip(), valid))
    if not -num_hidden_layers <= index < num_hidden_layers:
      raise UsageError("--layers=%s: layer %d does not exist; use indexes %s." %
                       (layers_flag, index, valid))
    indexes.append(index)
  return indexes


def create_model_fn(bert_config, layer_indexes, pooling="none", use_one_hot_embeddings=False):
  """Returns model_fn(features, is_training): the chosen encoder layers of each example.

  Args:
    bert_config: BertConfig.
    layer_indexes: encoder layers to return, in this order.
    pooling: "none": every token's vector, {"layers": [batch, layers, seq, hidden]};
      "cls": the [CLS] vector, "mean": the mean over the real tokens (mask 1),
      {"pooled": [batch, layers, hidden]}.
    use_one_hot_embeddings: look the word embeddings up with a one-hot matmul.
  """
  def model_fn(features, is_training):
    del is_training  # always inference: dropout off
    model = modeling.BertModel(
        config=bert_config, is_training=False, input_ids=features["input_ids"],
        input_mask=features["input_mask"], token_type_ids=features["segment_ids"],
        use_one_hot_embeddings=use_one_hot_embeddings)
    all_layers = model.get_all_encoder_layers()
    # [batch, layers, seq, hidden], float32 whatever the compute precision.
    layers = tf.cast(tf.stack([all_layers[i] for i in layer_indexes], axis=1), tf.float32)
    if pooling == "none":
      return {"layers": layers}
    if pooling == "cls":
      return {"pooled": layers[:, :, 0, :]}
    mask = tf.cast(features["input_mask"], tf.float32)[:, None, :, None]  # [batch, 1, seq, 1]
    # The rows build_inference pads a partial batch with have no token: max() avoids 0/0.
    count = tf.maximum(tf.reduce_sum(mask, axis=2), 1.0)  # [batch, 1, 1]
    return {"pooled": tf.reduce_sum(layers * mask, axis=2) / count}
  return model_fn


Extraction = collections.namedtuple(
    "Extraction", ["graph", "placeholders", "outputs", "init_op", "batch_size",
                   "max_seq_length"])
Extraction.__doc__ = """The inference graph over fed batches (build_extraction).

Fields:
  graph: the finalized tf.Graph.
  placeholders: dict input_ids, input_mask, segment_ids -> int32 [None, max_seq_length].
  outputs: model_fn's outputs gathered from the towers, in input order.
  init_op: initialises the variables from the checkpoint.
  batch_size: examples per sess.run over all towers (the last batch may have fewer).
  max_seq_length: the width of the fed arrays.
"""


def build_extraction(config, model_fn, batch_size, max_seq_length, init_checkpoint):
  """Builds the towers over fed batches, with the weights of `init_checkpoint`.

  Each fed batch is cut to its longest example (rounded up to config.length_multiple;
  tfrecord_io.trim_to_longest), or kept at max_seq_length with --pad_to_max_seq_length.

  Args:
    config: RunConfig (device plan, precision, XLA, padding).
    model_fn: create_model_fn()'s function.
    batch_size: examples per sess.run over all towers.
    max_seq_length: the longest token sequence.
    init_checkpoint: the weights.

  Returns:
    An Extraction.

  Raises:
    UsageError: the checkpoint does not fit the model (load_weights).
  """
  graph = tf.Graph()
  with graph.as_default():
    placeholders = {name: tf.placeholder(tf.int32, [None, max_seq_length], name=name)
                    for name in tfrecord_io.SEQUENCE_FEATURES}
    features = placeholders
    if config.length_multiple:
      features = tfrecord_io.trim_to_longest(placeholders, config.length_multiple)
    outputs = multigpu.build_inference(
        config.plan().for_inference(), model_fn, features, batch_size,
        precision=config.precision, use_xla=config.use_xla)
    load_weights(init_checkpoint)
    init_op = tf.global_variables_initializer()
    graph.finalize()
  return Extraction(graph, placeholders, outputs, init_op, batch_size, max_seq_length)


def load_weights(init_checkpoint):
  """Sets up the graph's variables to be initialised from `init_checkpoint`.

  Raises:
    UsageError: the checkpoint lacks variables the layers depend on, or a shape differs
      (the variable and both shapes are named).
  """
  missing = [name for name in runner.init_from_checkpoint(init_checkpoint)
             if not name.startswith(_UNUSED_SCOPES)]
  if missing:
    raise UsageError(
        "--init_checkpoint=%s lacks %d of BERT's variables (%s): it is not a BERT checkpoint "
        "of this --bert_config_file. Use the bert_model.ckpt that came with the config." %
        (init_checkpoint, len(missing), ", ".join(missing[:3] + ["..."] * (len(missing) > 3))))


def run_batches(sess, extraction, features, log_every=100):
  """Runs the extraction graph over `features`, one global batch at a time.

  The caller owns the session: a generator that held it open would close it only when
  garbage-collected, which at interpreter exit deadlocks TF 2.x.

  Args:
    sess: a tf.Session of extraction.graph, its variables initialised.
    extraction: build_extraction()'s Extraction.
    features: list of (input_ids, segment_ids), as convert_lines() returns them.
    log_every: log progress every this many batches.

  Yields:
    (index of the batch's first example, dict name -> np.ndarray [batch examples, ...]).
  """
  batch_size = extraction.batch_size
  start_time = time.time()
  for batch_index, start in enumerate(range(0, len(features), batch_size)):
    batch = pad_batch(features[start:start + batch_size], extraction.max_seq_length)
    yield start, sess.run(extraction.outputs, {
        extraction.placeholders[name]: batch[name] for name in batch})
    done = min(start + batch_size, len(features))
    if (batch_index + 1) % log_every == 0 or done == len(features):
      elapsed = max(time.time() - start_time, 1e-9)
      tf.logging.info("%d of %d lines, %.1f lines/s, about %.0f s left", done,
                      len(features), done / elapsed, elapsed / done * (len(features) - done))


# ---------------------------------------------------------------------------
# Output files
# ---------------------------------------------------------------------------

def round_as_google(values):
  """round(float(v), 6) of every float32 value, vectorised: exactly the same doubles.

  A float32 times 1e6 is exact in float64 (24 + 14 significant bits), so rint rounds the
  exact value half to even, as round() does; dividing by 1e6 then gives the double
  nearest to that 6-decimal number, as round() does. About 10x faster than round().

  Args:
    values: float32 array.

  Returns:
    float64 array of the same shape.
  """
  return np.rint(np.asarray(values, np.float32).astype(np.float64) * 10.0**_DECIMALS) / (
      10.0**_DECIMALS)


def format_json_line(line_index, tokens, layer_indexes, values):
  """One line of Google's output: every token with the values of every chosen layer.

  Args:
    line_index: 0-based index of the input line (Google's key is spelt "linex_index").
    tokens: the example's word pieces, [CLS] and [SEP] included.
    layer_indexes: the --layers indexes, in the order of `values`.
    values: float32 array [layers, >= len(tokens), hidden].

  Returns:
    The JSON text and a newline, byte for byte Google's: values rounded to 6 decimals
    as Python's round() does, json.dumps with its defaults, keys in Google's order.
  """
  # [layers, tokens, hidden] of Python floats
  layers = round_as_google(values[:, :len(tokens)]).tolist()
  features = []
  for position, token in enumerate(tokens):
    features.append({"token": token, "layers": [
        {"index": index, "values": layers[j][position]}
        for j, index in enumerate(layer_indexes)]})
  return json.dumps({"linex_index": line_index, "features": features}) + "\n"


@contextlib.contextmanager
def atomic_output(path, binary=False):
  """Opens a temp file beside `path`; renames it to `path` when the block ends without error.

  A crash or an error leaves the old file (or none) under `path`, never half a file.

  Raises:
    UsageError: the file system refused the write (the path and the reason named).
  """
  directory = os.path.dirname(os.path.abspath(path))
  try:
    fd, tmp_path = tempfile.mkstemp(dir=directory, prefix=".tmp-" + os.path.basename(path))
  except OSError as e:
    raise runner.write_error(path, e)
  try:
    if binary:
      f = os.fdopen(fd, "wb")
    else:
      f = os.fdopen(fd, "w", encoding="utf-8", newline="")
    with f:
      yield f
    runner.make_file_readable(tmp_path)
    os.replace(tmp_path, path)
  except OSError as e:
    _remove_quietly(tmp_path)
    raise runner.write_error(path, e)
  except BaseException:
    _remove_quietly(tmp_path)
    raise


def _remove_quietly(path):
  if os.path.exists(path):
    os.remove(path)


def write_json_lines(path, batches, features, tokenizer, layer_indexes):
  """Writes Google's JSON lines, one per example, from run_batches()' output.

  Returns:
    The number of lines written.
  """
  count = 0
  with atomic_output(path) as f:
    for start, outputs in batches:
      for row, values in enumerate(outputs["layers"]):  # values: [layers, seq, hidden]
        input_ids = features[start + row][0]
        tokens = tokenizer.convert_ids_to_tokens(input_ids.tolist())
        f.write(format_json_line(start + row, tokens, layer_indexes, values))
        count += 1
    _check_count(count, len(features))  # before the rename: no short file under `path`
  return count


def write_npy(path, batches, num_examples, num_layers, hidden_size):
  """Writes the pooled vectors as one float32 .npy array [examples, layers, hidden].

  The header is written first and the rows batch by batch, so the whole array is never
  held in memory.

  Returns:
    The number of examples written.
  """
  count = 0
  with atomic_output(path, binary=True) as f:
    np.lib.format.write_array_header_1_0(f, {
        "descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False,
        "shape": (num_examples, num_layers, hidden_size)})
    for _, outputs in batches:
      pooled = np.ascontiguousarray(outputs["pooled"], dtype=np.float32)
      f.write(pooled.tobytes())
      count += len(pooled)
    _check_count(count, num_examples)  # before the rename: no short file under `path`
  return count


def _check_count(count, num_examples):
  if count != num_examples:
    raise AssertionError("%d outputs for %d input lines" % (count, num_examples))


# ---------------------------------------------------------------------------
# Flags: Google's extract_features.py flags with their defaults, then ours
# ---------------------------------------------------------------------------

FLAGS = tf.flags.FLAGS


def define_flags():
  """Defines the flags; called only under __main__, so the module imports anywhere."""
  flags = tf.flags
  flags.DEFINE_string("input_file", None, "Text file, one text per line ('text_a ||| text_b' "
                      "for a pair).")
  flags.DEFINE_string("output_file", None, "JSON lines, one per input line (with --pooling: "
                      "a .npy array).")
  flags.DEFINE_string("layers", "-1,-2,-3,-4", "Encoder layers to output, comma-separated; "
                      "-1 is the last.")
  runner.define_shared_flags(["bert_config_file", "vocab_file", "init_checkpoint",
                              "do_lower_case", "max_seq_length"])
  flags.DEFINE_integer("batch_size", 32, "Batch size PER TOWER (Google's: per device); the "
                       "global batch is batch_size x towers.")
  flags.DEFINE_bool("use_one_hot_embeddings", False, "Look up word embeddings with a one-hot "
                    "matmul instead of a gather (same values).")
  flags.DEFINE_enum("pooling", "none", list(POOLINGS), "none: Google's JSON lines, every "
                    "token's vectors. cls / mean: one .npy array [lines, layers, hidden] of "
                    "the [CLS] vector / the mean over each line's tokens.")


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------

class _RunFlags(object):
  """FLAGS as runner.check_run_flags and make_run_config read them, with the directory
  of --output_file standing in for --output_dir, which this script does not have."""

  def __init__(self, flag_values, output_dir):
    self._flag_values = flag_values
    self.output_dir = output_dir

  def __contains__(self, name):
    return name == "output_dir" or name in self._flag_values

  def __getattr__(self, name):
    return getattr(self._flag_values, name)


def output_directory(output_file):
  """Checks --output_file before any work; returns its directory (which may not exist yet).

  Raises:
    UsageError: the flag is missing, remote, a directory, or under a file.
  """
  if not output_file:
    raise UsageError("--output_file is required.")
  if "://" in output_file:
    raise UsageError("--output_file=%s: give a local path (the file is written through a "
                     "local temp file and a rename); copy it after the run." % output_file)
  if os.path.isdir(output_file):
    raise UsageError("--output_file=%s is a directory: give a file path." % output_file)
  directory = os.path.dirname(os.path.abspath(output_file))
  parent = directory
  while not os.path.exists(parent):
    parent = os.path.dirname(parent)
  if not os.path.isdir(parent):
    raise UsageError("--output_file=%s: %s is a file, not a directory." % (output_file, parent))
  return directory


def check_flags():
  """Validates the flags and files before anything is written.

  Returns:
    (BertConfig, RunConfig, the layer indexes).
  """
  runner.require_file("input_file", FLAGS.input_file)
  if not FLAGS.init_checkpoint:
    raise UsageError("--init_checkpoint is required, e.g. "
                     "chinese_L-12_H-768_A-12/bert_model.ckpt.")
  directory = output_directory(FLAGS.output_file)
  if os.path.exists(FLAGS.output_file) and os.path.samefile(FLAGS.output_file,
                                                            FLAGS.input_file):
    raise UsageError("--output_file=%s is the --input_file: give another path." %
                     FLAGS.output_file)
  run_flags = _RunFlags(FLAGS, directory)
  runner.check_run_flags(run_flags, positive_flag_names=("batch_size",))
  bert_config = runner.load_bert_config(FLAGS.bert_config_file, FLAGS.max_seq_length)
  layer_indexes = parse_layer_indexes(FLAGS.layers, bert_config.num_hidden_layers)
  return bert_config, runner.make_run_config(run_flags), layer_indexes


def main(_):
  bert_config, config, layer_indexes = check_flags()
  tokenizer = runner.load_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case, bert_config,
                                    FLAGS.bert_config_file)
  classifier_data.check_featurizing_inputs(FLAGS.max_seq_length, FLAGS.vocab_file)
  features = convert_lines(read_lines(FLAGS.input_file), tokenizer, FLAGS.max_seq_length)
  batch_size = FLAGS.batch_size * config.num_towers
  plan = config.plan().for_inference()
  for line in plan.describe():
    tf.logging.info("Devices: %s", line)
  tf.logging.info("%d lines, %d tower(s) x batch %d = %d lines per step, layers %s, "
                  "precision %s", len(features), config.num_towers, FLAGS.batch_size,
                  batch_size, ",".join(map(str, layer_indexes)), config.precision)
  model_fn = create_model_fn(bert_config, layer_indexes, FLAGS.pooling,
                             FLAGS.use_one_hot_embeddings)
  extraction = build_extraction(config, model_fn, batch_size, FLAGS.max_seq_length,
                                FLAGS.init_checkpoint)
  tf.gfile.MakeDirs(os.path.dirname(os.path.abspath(FLAGS.output_file)))
  with tf.Session(graph=extraction.graph, config=plan.session_config()) as sess:
    sess.run(extraction.init_op)
    batches = run_batches(sess, extraction, features, log_every=FLAGS.log_steps)
    if FLAGS.pooling == "none":
      count = write_json_lines(FLAGS.output_file, batches, features, tokenizer, layer_indexes)
    else:
      count = write_npy(FLAGS.output_file, batches, len(features), len(layer_indexes),
                        bert_config.hidden_size)
  tf.logging.info("Wrote %d lines to %s", count, FLAGS.output_file)


if __name__ == "__main__":
  define_flags()
  runner.run_main(main)
