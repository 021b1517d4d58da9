# coding=utf-8
"""Extracts BERT's hidden states for every line of a text file, on every GPU.

The flags, defaults and output are those of Google's extract_features.py (docs/FORMATS.md
10) plus the runner's multi-GPU flags. Input: one text per line, `text_a ||| text_b` for a
pair. Output (--output_file), one JSON line per input line, in input order:

  {"linex_index": 0, "features": [{"token": "[CLS]", "layers": [{"index": -1,
   "values": [0.123456, ...]}, ...]}, ...]}

Beyond Google's: --pooling=cls or mean also writes one sentence vector per line, from
the last encoder layer, to a float32 .npy array [lines, hidden] beside it
(--pooled_output_file, by default `<output_file>.cls.npy` / `<output_file>.mean.npy`);
--write_json=false then skips the JSON lines. Every file is written through a temp file
and a rename.
"""

import collections
import contextlib
import json
import os
import re
import time

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import featurizing
from bert_mgpu.classifier import input_examples
from bert_mgpu import bert_files
from bert_mgpu import command_line
from bert_mgpu.data import output_files
from bert_mgpu.data import text_files
from bert_mgpu.data import tfrecord_io
from bert_mgpu import errors
from bert_mgpu.errors import UsageError
from bert_mgpu.training import checkpoints
import modeling
import multigpu

# Google's pair separator: the line splits at its last " ||| ".
_PAIR_PATTERN = re.compile(r"^(.*) \|\|\| (.*)$")

# Google's rounding of every value written to the JSON lines.
_DECIMALS = 6


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
  lines = [line for _, line in text_files.text_lines(path)]
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
    example = input_examples.InputExample(guid=index, text_a=text_a, text_b=text_b)
    converted = featurizing.convert_single_example(example, {}, max_seq_length, tokenizer)
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
           for name in tfrecord_io.MODEL_INPUTS}
  for row, (input_ids, segment_ids) in enumerate(features):
    batch["input_ids"][row, :len(input_ids)] = input_ids
    batch["input_mask"][row, :len(input_ids)] = 1
    batch["segment_ids"][row, :len(input_ids)] = segment_ids
  return batch


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------

POOLINGS = ("none", "cls", "mean")

# The encoder layer the sentence vectors come from, whatever --layers says.
POOLED_LAYER = -1


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


def pool(last_layer, input_mask, pooling):
  """One sentence vector per example from the token vectors of one layer.

  Args:
    last_layer: float32 [batch, seq, hidden].
    input_mask: int32 [batch, seq], 1 on the real tokens ([CLS] and [SEP] included).
    pooling: "cls": the vector at position 0 ([CLS]); "mean": the mean over the positions
      where input_mask is 1, padding excluded.

  Returns:
    float32 [batch, hidden].
  """
  if pooling == "cls":
    return last_layer[:, 0, :]
  mask = tf.cast(input_mask, tf.float32)[:, :, None]  # [batch, seq, 1]
  # The rows build_inference pads a partial batch with have no token: max() avoids 0/0.
  count = tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)  # [batch, 1]
  return tf.reduce_sum(last_layer * mask, axis=1) / count


def create_model_fn(bert_config, layer_indexes, pooling="none", use_one_hot_embeddings=False,
                    write_layers=True):
  """Returns model_fn(features, is_training): the encoder outputs of each example.

  Args:
    bert_config: BertConfig.
    layer_indexes: encoder layers of "layers", in this order.
    pooling: "none", or "cls" / "mean" to add "pooled" (see pool()): float32
      [batch, hidden] from layer POOLED_LAYER, whatever `layer_indexes` are.
    use_one_hot_embeddings: look the word embeddings up with a one-hot matmul.
    write_layers: return "layers", float32 [batch, layers, seq, hidden]. False (with a
      pooling) leaves the big per-token output out of the graph's fetches.
  """
  if pooling not in POOLINGS:
    raise ValueError("pooling %r is not one of %s" % (pooling, POOLINGS))
  if pooling == "none" and not write_layers:
    raise ValueError("nothing to output: no layers and no pooling")

  def model_fn(features, is_training):
    del is_training  # always inference: dropout off
    model = modeling.BertModel(
        config=bert_config, is_training=False, input_ids=features["input_ids"],
        input_mask=features["input_mask"], token_type_ids=features["segment_ids"],
        use_one_hot_embeddings=use_one_hot_embeddings)
    all_layers = model.get_all_encoder_layers()
    outputs = {}
    if write_layers:
      # [batch, layers, seq, hidden], float32 whatever the compute precision.
      outputs["layers"] = tf.cast(tf.stack([all_layers[i] for i in layer_indexes], axis=1),
                                  tf.float32)
    if pooling != "none":
      # Pooled in float32, so that a 16-bit compute precision does not round the sum.
      outputs["pooled"] = pool(tf.cast(all_layers[POOLED_LAYER], tf.float32),
                               features["input_mask"], pooling)
    return outputs
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


def build_extraction(devices, model_fn, batch_size, max_seq_length, init_checkpoint):
  """Builds the towers over fed batches, with the weights of `init_checkpoint`.

  Each fed batch is cut to its longest example (rounded up to devices.length_multiple;
  tfrecord_io.trim_to_longest), or kept at max_seq_length with --pad_to_max_seq_length.

  Args:
    devices: checked run_settings.DeviceSettings (plan, precision, XLA, padding).
    model_fn: create_model_fn()'s function.
    batch_size: examples per sess.run over all towers.
    max_seq_length: the longest token sequence.
    init_checkpoint: the weights.

  Returns:
    An Extraction.

  Raises:
    UsageError: the checkpoint does not fit the model (load_pretrained_weights).
  """
  graph = tf.Graph()
  with graph.as_default():
    placeholders = {name: tf.placeholder(tf.int32, [None, max_seq_length], name=name)
                    for name in tfrecord_io.MODEL_INPUTS}
    features = placeholders
    if devices.length_multiple:
      features = tfrecord_io.trim_to_longest(placeholders, devices.length_multiple)
    outputs = multigpu.build_inference(
        devices.plan.for_inference(), model_fn, features, batch_size,
        precision=devices.precision, use_xla=devices.use_xla)
    checkpoints.load_pretrained_weights(init_checkpoint)
    init_op = tf.global_variables_initializer()
    graph.finalize()
  return Extraction(graph, placeholders, outputs, init_op, batch_size, max_seq_length)


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


def write_outputs(batches, features, tokenizer, layer_indexes, json_path=None,
                  pooled_path=None, hidden_size=None):
  """Writes Google's JSON lines and/or the pooled .npy from run_batches()' output.

  Both files are streamed batch by batch into temp files beside their paths, so memory
  does not grow with the line count, and renamed only once every line is written: an
  error or a crash leaves each path as it was (the old file or none), never half a file.

  Args:
    batches: run_batches()' (start, outputs) pairs, in input order.
    features: list of (input_ids, segment_ids), as convert_lines() returns them.
    tokenizer: turns the ids back into the JSON's tokens.
    layer_indexes: the --layers indexes, in the order of outputs["layers"].
    json_path: where the JSON lines go (outputs["layers"]), or None for none.
    pooled_path: where the float32 .npy [examples, hidden] goes (outputs["pooled"]), or
      None for none.
    hidden_size: the vectors' width, for the .npy header written before the rows.

  Returns:
    The number of examples written.
  """
  count = 0
  with contextlib.ExitStack() as stack:
    json_file = (stack.enter_context(output_files.atomic_output(json_path)) if json_path
                 else None)
    pooled_file = None
    if pooled_path:
      pooled_file = stack.enter_context(output_files.atomic_output(pooled_path, binary=True))
      np.lib.format.write_array_header_1_0(pooled_file, {
          "descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
          "fortran_order": False, "shape": (len(features), hidden_size)})
    for start, outputs in batches:
      if json_file:
        for row, values in enumerate(outputs["layers"]):  # values: [layers, seq, hidden]
          input_ids = features[start + row][0]
          tokens = tokenizer.convert_ids_to_tokens(input_ids.tolist())
          _write(json_file, json_path,
                 format_json_line(start + row, tokens, layer_indexes, values))
      if pooled_file:
        pooled = np.ascontiguousarray(outputs["pooled"], dtype=np.float32)
        if pooled.shape[1:] != (hidden_size,):
          raise AssertionError("pooled shape %s, hidden size %d" % (pooled.shape, hidden_size))
        _write(pooled_file, pooled_path, pooled.tobytes())
      count += len(next(iter(outputs.values())))
    # Before the renames (the .npy's, then the JSON's): no short file under either path.
    _check_count(count, len(features))
  return count


def _write(f, path, data):
  # Named here: with two files open, atomic_output would name whichever is innermost.
  try:
    f.write(data)
  except OSError as e:
    raise errors.write_error(path, e)


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
  flags.DEFINE_string("output_file", None, "Google's JSON lines, one per input line. With "
                      "--write_json=false it is not written (an existing file is left as "
                      "it is) and only names the default --pooled_output_file.")
  flags.DEFINE_string("layers", "-1,-2,-3,-4", "Encoder layers to output, comma-separated; "
                      "-1 is the last.")
  command_line.define_shared_flags(["bert_config_file", "vocab_file", "init_checkpoint",
                                    "do_lower_case", "max_seq_length"], training=False)
  flags.DEFINE_integer("batch_size", 32, "Batch size PER TOWER (Google's: per device); the "
                       "global batch is batch_size x towers.")
  flags.DEFINE_bool("use_one_hot_embeddings", False, "Look up word embeddings with a one-hot "
                    "matmul instead of a gather (same values).")
  flags.DEFINE_enum("pooling", "none", list(POOLINGS), "none: Google's JSON lines only. "
                    "cls / mean: also one sentence vector per line from the LAST encoder "
                    "layer (whatever --layers says): the [CLS] vector / the mean over the "
                    "line's tokens ([CLS] and [SEP] included, padding excluded), as a "
                    "float32 .npy array [lines, hidden] at --pooled_output_file.")
  flags.DEFINE_string("pooled_output_file", None, "Where --pooling writes its .npy; default "
                      "<output_file>.cls.npy or <output_file>.mean.npy.")
  flags.DEFINE_bool("write_json", True, "Write the JSON lines to --output_file. false (with "
                    "--pooling=cls or mean) writes only the .npy and leaves --output_file "
                    "as it is.")


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------

def default_pooled_output_file(output_file, pooling):
  """`<output_file>.cls.npy` or `<output_file>.mean.npy`: beside the JSON, named by both."""
  return "%s.%s.npy" % (output_file, pooling)


def output_paths(output_file, pooling, pooled_output_file, write_json):
  """The files this run writes, from the flags (not checked on disk).

  Returns:
    (JSON lines path or None, pooled .npy path or None).

  Raises:
    UsageError: nothing to write, or a flag missing or out of place.
  """
  if pooling == "none":
    if not write_json:
      raise UsageError("--write_json=false leaves nothing to write without "
                       "--pooling=cls or --pooling=mean.")
    if pooled_output_file:
      raise UsageError("--pooled_output_file=%s needs --pooling=cls or --pooling=mean." %
                       pooled_output_file)
    if not output_file:
      raise UsageError("--output_file is required.")
    return output_file, None
  if not pooled_output_file:
    if not output_file:
      raise UsageError("--output_file is required (it also names the .npy: "
                       "<output_file>.%s.npy)." % pooling)
    pooled_output_file = default_pooled_output_file(output_file, pooling)
  json_path = output_file if write_json else None
  if json_path and os.path.realpath(json_path) == os.path.realpath(pooled_output_file):
    raise UsageError("--pooled_output_file=%s is the --output_file: give another path." %
                     pooled_output_file)
  return json_path, pooled_output_file


def check_flags():
  """Validates the flags and files before anything is written.

  Returns:
    (BertConfig, checked DeviceSettings, the layer indexes, JSON path or None, .npy path
    or None).
  """
  bert_files.require_file("input_file", FLAGS.input_file)
  if not FLAGS.init_checkpoint:
    raise UsageError("--init_checkpoint is required, e.g. "
                     "chinese_L-12_H-768_A-12/bert_model.ckpt.")
  json_path, pooled_path = output_paths(FLAGS.output_file, FLAGS.pooling,
                                        FLAGS.pooled_output_file, FLAGS.write_json)
  for flag_name, path in (("output_file", json_path), ("pooled_output_file", pooled_path)):
    if not path:
      continue
    command_line.output_directory(path, flag_name)
    if os.path.exists(path) and os.path.samefile(path, FLAGS.input_file):
      raise UsageError("--%s=%s is the --input_file: give another path." % (flag_name, path))
  command_line.check_run_flags(positive_flag_names=("batch_size",))
  bert_config = bert_files.load_bert_config(FLAGS.bert_config_file, FLAGS.max_seq_length)
  layer_indexes = parse_layer_indexes(FLAGS.layers, bert_config.num_hidden_layers)
  devices = command_line.device_settings().check()
  return bert_config, devices, layer_indexes, json_path, pooled_path


def main(_):
  bert_config, devices, layer_indexes, json_path, pooled_path = check_flags()
  tokenizer = bert_files.load_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case, bert_config,
                                        FLAGS.bert_config_file)
  featurizing.check_featurizing_inputs(FLAGS.max_seq_length, FLAGS.vocab_file)
  features = convert_lines(read_lines(FLAGS.input_file), tokenizer, FLAGS.max_seq_length)
  batch_size = FLAGS.batch_size * devices.num_towers
  plan = devices.plan.for_inference()
  for line in plan.describe():
    tf.logging.info("Devices: %s", line)
  tf.logging.info("%d lines, %d tower(s) x batch %d = %d lines per step, layers %s, "
                  "pooling %s, precision %s", len(features), devices.num_towers,
                  FLAGS.batch_size, batch_size, ",".join(map(str, layer_indexes)),
                  FLAGS.pooling, devices.precision)
  model_fn = create_model_fn(bert_config, layer_indexes, FLAGS.pooling,
                             FLAGS.use_one_hot_embeddings, write_layers=bool(json_path))
  extraction = build_extraction(devices, model_fn, batch_size, FLAGS.max_seq_length,
                                FLAGS.init_checkpoint)
  paths = [path for path in (json_path, pooled_path) if path]
  for path in paths:
    tf.gfile.MakeDirs(os.path.dirname(os.path.abspath(path)))
  with tf.Session(graph=extraction.graph, config=plan.session_config()) as sess:
    sess.run(extraction.init_op)
    batches = run_batches(sess, extraction, features, log_every=FLAGS.log_steps)
    count = write_outputs(batches, features, tokenizer, layer_indexes, json_path=json_path,
                          pooled_path=pooled_path, hidden_size=bert_config.hidden_size)
  tf.logging.info("Wrote %d lines to %s", count, " and ".join(paths))


if __name__ == "__main__":
  define_flags()
  command_line.run_main(main)
