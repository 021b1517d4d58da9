# coding=utf-8
"""Fills the [MASK]s of texts, or ranks candidates for a blank, with a BERT masked LM on
every tower.

The weights are a pretraining checkpoint with its masked-LM head (cls/predictions):
--init_checkpoint is a checkpoint prefix (bert_model.ckpt, model.ckpt-1000) or a
run_pretraining_mgpu.py output_dir, meaning its latest checkpoint. The text is tokenized
with the vocab's special tokens read as written ([MASK], [SEP], [UNK]; "天[MASK]好" is three
tokens), so a mask can sit inside a word. Segment ids are 0 through the first [SEP] and 1
after, as in the pretraining records ("短语[SEP]有一个[MASK][MASK]的句子" is a pair).

Fill mode (default). Input: UTF-8, one text per line with one or more literal [MASK].
Output (--output_file), one JSON line per input line, in input order:

  {"text": "今天天[MASK]很好", "masks": [{"position": 4, "fills": [{"token": "气",
   "probability": 0.93}, ...]}]}

position is the mask's index in the model input ([CLS] is 0); the --top_k fills of every
mask come from one pass over the line (all masks hidden at once), and each probability is
the softmax over the whole vocab, nothing excluded, as Hugging Face's masked LM gives it.

--candidates mode. Input lines `text_with_blank<TAB>cand1|cand2|...`; the blank is a run of
--blank_marker (default U+201C) or one literal [MASK], as in create_pretraining_data.py
--pretraining_task=pair_span. For each candidate the blank becomes as many [MASK] as the
candidate has word pieces, all hidden at once, and its score is the sum of the
log-probabilities of its pieces at those positions. Output, one JSON line per input line,
best first (ties keep the input order):

  {"text": "...", "candidates": [{"candidate": "很好", "score": -1.25}, ...]}

Each global batch (--batch_size per tower x towers) is padded to its longest sequence and
its largest number of masks. Bad input (a line without a mask or a blank, an empty
candidate, a line longer than --max_seq_length, bytes that are not UTF-8) is a one-line
error naming the file and line; nothing is written then.
"""

import collections
import json
import os

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu import bert_files
from bert_mgpu import command_line
from bert_mgpu.data import output_files
from bert_mgpu.data import text_files
from bert_mgpu.data import tfrecord_io
from bert_mgpu.errors import UsageError
from bert_mgpu.pretraining import data_settings
from bert_mgpu.pretraining import model as pretraining_model
from bert_mgpu.pretraining import text_input
from bert_mgpu.training import checkpoints
import modeling
import multigpu
import tokenization

FLAGS = tf.flags.FLAGS

MASK_TOKEN = "[MASK]"


def define_flags():
  """Defines the flags; called only under __main__, so the module imports anywhere."""
  flags = tf.flags
  flags.DEFINE_string("init_checkpoint", None, "A checkpoint with the masked-LM head: its "
                      "prefix (e.g. model.ckpt-1000), or a run_pretraining_mgpu.py output_dir "
                      "(its latest checkpoint).")
  flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model.")
  flags.DEFINE_string("vocab_file", None, "vocab.txt of the model.")
  flags.DEFINE_bool("do_lower_case", True, "Lower-case the input (True for uncased and "
                    "Chinese models).")
  flags.DEFINE_string("input_file", None, "UTF-8 text, one line per example: texts with "
                      "[MASK], or with --candidates text_with_blank<TAB>cand1|cand2|...")
  flags.DEFINE_string("output_file", None, "JSON lines, one per input line.")
  flags.DEFINE_integer("max_seq_length", 128, "The longest line in word pieces, with [CLS] "
                       "and [SEP]; a longer line is an error.")
  flags.DEFINE_integer("batch_size", 32, "Examples per tower per step (a line in fill mode, "
                       "a line and one candidate with --candidates).")
  flags.DEFINE_integer("top_k", 5, "Fills written for each mask.")
  flags.DEFINE_bool("candidates", False, "Rank the candidates of each line's blank instead "
                    "of filling [MASK]s.")
  flags.DEFINE_string("blank_marker", data_settings.DEFAULT_BLANK_MARKER,
                      "With --candidates: a run of this character (or one literal [MASK]) "
                      "is the blank.")
  command_line.define_device_flags()


# ---------------------------------------------------------------------------
# Input: lines to examples
# ---------------------------------------------------------------------------

Example = collections.namedtuple("Example", [
    "line_index", "input_ids", "segment_ids", "mask_positions", "label_ids"])
Example.__doc__ = """One sequence for the model.

Fields:
  line_index: int, the input line it belongs to (0-based).
  input_ids, segment_ids: list of int, `[CLS] ... [SEP]`.
  mask_positions: list of int, the [MASK] positions to read.
  label_ids: list of int (the candidate's word pieces, one per mask position), or [] in
    fill mode.
"""

Line = collections.namedtuple("Line", ["text", "candidates"])
Line.__doc__ = """An input line: its text and, with --candidates, the candidate strings."""


def segment_ids_of(tokens):
  """Segment ids: 0 through the first [SEP], 1 after (a text with a literal [SEP] is a pair)."""
  first_sep = tokens.index("[SEP]")
  return [0] * (first_sep + 1) + [1] * (len(tokens) - first_sep - 1)


def _sequence(tokenizer, pieces, max_seq_length, location):
  """`[CLS] pieces [SEP]` as (input_ids, segment_ids, tokens); UsageError when too long."""
  tokens = ["[CLS]"] + pieces + ["[SEP]"]
  if len(tokens) > max_seq_length:
    raise UsageError("%s: %d word pieces with [CLS] and [SEP], more than --max_seq_length=%d: "
                     "shorten the line or raise --max_seq_length." %
                     (location, len(tokens), max_seq_length))
  return tokenizer.convert_tokens_to_ids(tokens), segment_ids_of(tokens), tokens


def fill_example(tokenizer, line_index, text, max_seq_length, location):
  """The Example of a fill-mode line.

  Raises:
    UsageError: no [MASK] in the line, or the line is too long.
  """
  pieces = tokenizer.tokenize(text)
  input_ids, segment_ids, tokens = _sequence(tokenizer, pieces, max_seq_length, location)
  positions = [i for i, token in enumerate(tokens) if token == MASK_TOKEN]
  if not positions:
    raise UsageError("%s: no [MASK] in %r: write [MASK] where a token is to be filled (or "
                     "use --candidates)." % (location, text[:80]))
  return Example(line_index, input_ids, segment_ids, positions, [])


def candidate_examples(tokenizer, line_index, line, blank_marker, max_seq_length, location):
  """The Examples of a --candidates line, one per candidate.

  Returns:
    (Line, list of Example in candidate order).

  Raises:
    UsageError: no tab, no blank or two, an empty candidate, or a line too long.
  """
  fields = line.split("\t")
  if len(fields) != 2:
    raise UsageError("%s: %d tab-separated field(s), expected 2: "
                     "text_with_blank<TAB>cand1|cand2|..." % (location, len(fields)))
  text, candidates_field = fields
  try:
    blank = text_input.find_blank(text, blank_marker)
  except ValueError as e:
    raise UsageError("%s: the text holds %s." % (location, e))
  if blank is None:
    raise UsageError("%s: no blank in %r: write the blank as a run of %r (--blank_marker) "
                     "or as [MASK]." % (location, text[:80], blank_marker))
  before = tokenizer.tokenize(text[:blank[0]])
  after = tokenizer.tokenize(text[blank[1]:])
  candidates = candidates_field.split("|")
  examples = []
  for number, candidate in enumerate(candidates, 1):
    pieces = tokenizer.tokenize(candidate)
    if not pieces:
      raise UsageError("%s: candidate %d (%r) is empty: give candidates separated by |, "
                       "each with at least one token." % (location, number, candidate))
    input_ids, segment_ids, _ = _sequence(
        tokenizer, before + [MASK_TOKEN] * len(pieces) + after, max_seq_length, location)
    positions = list(range(1 + len(before), 1 + len(before) + len(pieces)))
    examples.append(Example(line_index, input_ids, segment_ids, positions,
                            tokenizer.convert_tokens_to_ids(pieces)))
  return Line(text, candidates), examples


def read_examples(path, tokenizer, max_seq_length, candidates, blank_marker):
  """Reads the input file.

  Returns:
    (list of Line, list of Example).

  Raises:
    UsageError: the file is unreadable, not UTF-8, empty, or a line is bad (named).
  """
  lines = text_files.read_text_file(path).split("\n")
  if lines and lines[-1] == "":
    lines.pop()  # the newline that ends the last line
  if not lines:
    raise UsageError("--input_file=%s is empty: give one text per line." % path)
  parsed, examples = [], []
  for index, line in enumerate(lines):
    line = line[:-1] if line.endswith("\r") else line
    location = "%s line %d" % (path, index + 1)
    if not line.strip():
      raise UsageError("%s is empty: give one text per line." % location)
    if candidates:
      parsed_line, line_examples = candidate_examples(tokenizer, index, line, blank_marker,
                                                      max_seq_length, location)
      parsed.append(parsed_line)
      examples.extend(line_examples)
    else:
      parsed.append(Line(line, None))
      examples.append(fill_example(tokenizer, index, line, max_seq_length, location))
  return parsed, examples


def pad_examples(examples, length_multiple, max_seq_length):
  """Zero-pads a batch of Examples to its longest sequence and its most masks.

  Args:
    examples: list of Example.
    length_multiple: round the length up to a multiple of this; None pads to
      max_seq_length.
    max_seq_length: int.

  Returns:
    dict input_ids, input_mask, segment_ids -> int32 [batch, length]; mask_positions,
    label_ids -> int32 [batch, most masks].
  """
  length = tfrecord_io.padded_length(max(len(example.input_ids) for example in examples),
                                     length_multiple, max_seq_length)
  num_masks = max(len(example.mask_positions) for example in examples)
  batch = {name: np.zeros([len(examples), length], np.int32)
           for name in ("input_ids", "input_mask", "segment_ids")}
  batch.update({name: np.zeros([len(examples), num_masks], np.int32)
                for name in ("mask_positions", "label_ids")})
  for row, example in enumerate(examples):
    size = len(example.input_ids)
    batch["input_ids"][row, :size] = example.input_ids
    batch["input_mask"][row, :size] = 1
    batch["segment_ids"][row, :size] = example.segment_ids
    batch["mask_positions"][row, :len(example.mask_positions)] = example.mask_positions
    batch["label_ids"][row, :len(example.label_ids)] = example.label_ids
  return batch


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------

def create_model_fn(bert_config, top_k):
  """Returns model_fn(features, is_training) for multigpu.build_inference.

  Outputs per example, float32 whatever the compute precision:
    top_probabilities [batch, masks, top_k] and top_ids (int32) [batch, masks, top_k]: the
      best fills of each mask position, softmax over the whole vocab;
    label_log_probs [batch, masks]: the log-probability of label_ids at each position.
  """
  def model_fn(features, is_training):
    del is_training  # always inference: dropout off
    model = modeling.BertModel(
        config=bert_config, is_training=False, input_ids=features["input_ids"],
        input_mask=features["input_mask"], token_type_ids=features["segment_ids"])
    positions = features["mask_positions"]
    batch_and_masks = modeling.get_shape_list(positions, expected_rank=2)
    log_probs = pretraining_model.masked_lm_log_probs(  # [batch * masks, vocab]
        bert_config, model.get_sequence_output(), model.get_embedding_table(), positions)
    top_log_probs, top_ids = tf.nn.top_k(log_probs, k=top_k)  # [batch * masks, top_k]
    flat_labels = tf.reshape(features["label_ids"], [-1])  # [batch * masks]
    label_log_probs = tf.reduce_sum(  # [batch * masks]
        tf.one_hot(flat_labels, depth=bert_config.vocab_size, dtype=tf.float32) * log_probs,
        axis=-1)
    return {
        "top_probabilities": tf.reshape(tf.exp(top_log_probs), batch_and_masks + [top_k]),
        "top_ids": tf.reshape(top_ids, batch_and_masks + [top_k]),
        "label_log_probs": tf.reshape(label_log_probs, batch_and_masks),
    }
  return model_fn


Filler = collections.namedtuple("Filler", ["graph", "placeholders", "outputs", "init_op"])
Filler.__doc__ = """The inference graph over fed batches (build_filler): the finalized
graph, dict name -> placeholder, the towers' outputs in input order, and the op that
initialises the variables from the checkpoint."""


def load_masked_lm_weights(checkpoint):
  """Sets up the graph's variables to be initialised from `checkpoint`.

  Raises:
    UsageError: the checkpoint has no masked-LM head, lacks encoder variables, or a shape
      differs.
  """
  saved = tf.train.load_checkpoint(checkpoint).get_variable_to_shape_map()
  if not any(name.startswith("cls/predictions/") for name in saved):
    raise UsageError("--init_checkpoint=%s has no masked-LM head (cls/predictions): "
                     "fill_mask needs one. Use a pretraining checkpoint that has it (Google's "
                     "releases do; HFL's large ones do not), or continue pretraining with "
                     "run_pretraining_mgpu.py first." % checkpoint)
  checkpoints.load_pretrained_weights(checkpoint)


def build_filler(devices, bert_config, top_k, global_batch_size, checkpoint):
  """Builds the towers over fed batches with the weights of `checkpoint`.

  Args:
    devices: checked run_settings.DeviceSettings.
    bert_config: BertConfig.
    top_k: int.
    global_batch_size: examples per sess.run over all towers.
    checkpoint: the checkpoint prefix.

  Returns:
    Filler.
  """
  graph = tf.Graph()
  with graph.as_default():
    placeholders = {name: tf.placeholder(tf.int32, [None, None], name=name) for name in (
        "input_ids", "input_mask", "segment_ids", "mask_positions", "label_ids")}
    outputs = multigpu.build_inference(
        devices.plan.for_inference(), create_model_fn(bert_config, top_k), placeholders,
        global_batch_size, precision=devices.precision, use_xla=devices.use_xla)
    load_masked_lm_weights(checkpoint)
    init_op = tf.global_variables_initializer()
    graph.finalize()
  return Filler(graph, placeholders, outputs, init_op)


def run_examples(sess, filler, examples, global_batch_size, length_multiple, max_seq_length):
  """Runs every example through the graph, a global batch at a time.

  Returns:
    list of dict name -> np.ndarray for each example (its own masks only).
  """
  results = []
  for start in range(0, len(examples), global_batch_size):
    chunk = examples[start:start + global_batch_size]
    batch = pad_examples(chunk, length_multiple, max_seq_length)
    values = sess.run(filler.outputs, {filler.placeholders[name]: batch[name]
                                       for name in batch})
    for row, example in enumerate(chunk):
      count = len(example.mask_positions)
      results.append({name: value[row, :count] for name, value in values.items()})
  return results


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------

def fill_records(lines, examples, results, tokenizer):
  """The JSON objects of fill mode, one per line."""
  records = []
  for line, example, result in zip(lines, examples, results):
    masks = []
    for index, position in enumerate(example.mask_positions):
      tokens = tokenizer.convert_ids_to_tokens(result["top_ids"][index].tolist())
      fills = [{"token": token, "probability": float(probability)} for token, probability
               in zip(tokens, result["top_probabilities"][index])]
      masks.append({"position": position, "fills": fills})
    records.append({"text": line.text, "masks": masks})
  return records


def candidate_records(lines, examples, results):
  """The JSON objects of --candidates mode, one per line, candidates best first."""
  scores = [[] for _ in lines]
  for example, result in zip(examples, results):
    scores[example.line_index].append(float(np.sum(result["label_log_probs"], dtype=np.float64)))
  records = []
  for line, line_scores in zip(lines, scores):
    order = sorted(range(len(line_scores)), key=lambda i: -line_scores[i])  # stable on ties
    records.append({"text": line.text, "candidates": [
        {"candidate": line.candidates[i], "score": line_scores[i]} for i in order]})
  return records


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------

def resolve_checkpoint(init_checkpoint):
  """The checkpoint prefix of --init_checkpoint (a prefix, or a directory: its latest).

  Raises:
    UsageError: missing flag, or no checkpoint there.
  """
  if not init_checkpoint:
    raise UsageError("--init_checkpoint is required: a checkpoint prefix with the masked-LM "
                     "head, or a run_pretraining_mgpu.py output_dir.")
  if tf.gfile.IsDirectory(init_checkpoint):
    latest = checkpoints.latest_checkpoint(init_checkpoint)
    if latest is None:
      raise UsageError("--init_checkpoint=%s is a directory without a checkpoint file: give a "
                       "checkpoint prefix (e.g. %s/model.ckpt-1000) or a pretraining "
                       "output_dir." % (init_checkpoint, init_checkpoint))
    return latest
  if not tf.gfile.Exists(init_checkpoint + ".index"):
    raise UsageError("--init_checkpoint=%s: no checkpoint there (expected %s.index). Give the "
                     "prefix without .index/.data, or a pretraining output_dir."
                     % (init_checkpoint, init_checkpoint))
  return init_checkpoint


def check_flags():
  """Validates flags and files before any work.

  Returns:
    (BertConfig, checked DeviceSettings, checkpoint prefix, FullTokenizer).
  """
  bert_files.require_file("input_file", FLAGS.input_file)
  command_line.output_directory(FLAGS.output_file)
  if os.path.exists(FLAGS.output_file) and os.path.samefile(FLAGS.output_file,
                                                            FLAGS.input_file):
    raise UsageError("--output_file=%s is the --input_file: give another path."
                     % FLAGS.output_file)
  command_line.check_positive(("batch_size", "top_k"))
  bert_config = bert_files.load_bert_config(FLAGS.bert_config_file, FLAGS.max_seq_length)
  if FLAGS.top_k > bert_config.vocab_size:
    raise UsageError("--top_k=%d: the vocab has only %d tokens." %
                     (FLAGS.top_k, bert_config.vocab_size))
  if not FLAGS.blank_marker or any(char.isspace() for char in FLAGS.blank_marker):
    raise UsageError("--blank_marker=%r: give one or more characters, no whitespace or tab."
                     % FLAGS.blank_marker)
  checkpoint = resolve_checkpoint(FLAGS.init_checkpoint)
  tokenizer = bert_files.load_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case, bert_config,
                                        FLAGS.bert_config_file)
  if tokenization.missing_special_token(tokenizer.vocab, (MASK_TOKEN,)):
    raise UsageError("%s has no [MASK] token: use the vocab.txt of a BERT model."
                     % FLAGS.vocab_file)
  tokenizer.literal_special_tokens = True
  devices = command_line.device_settings().check()
  return bert_config, devices, checkpoint, tokenizer


def main(_):
  bert_config, devices, checkpoint, tokenizer = check_flags()
  lines, examples = read_examples(FLAGS.input_file, tokenizer, FLAGS.max_seq_length,
                                  FLAGS.candidates, FLAGS.blank_marker)
  global_batch_size = FLAGS.batch_size * devices.num_towers
  plan = devices.plan.for_inference()
  for line in plan.describe():
    tf.logging.info("Devices: %s", line)
  tf.logging.info("%d lines, %d sequences; %s; %d tower(s) x batch %d; weights %s",
                  len(lines), len(examples), "ranking candidates" if FLAGS.candidates else
                  "top %d fills" % FLAGS.top_k, devices.num_towers, FLAGS.batch_size,
                  checkpoint)
  filler = build_filler(devices, bert_config, min(FLAGS.top_k, bert_config.vocab_size),
                        global_batch_size, checkpoint)
  with tf.Session(graph=filler.graph, config=plan.session_config()) as sess:
    sess.run(filler.init_op)
    results = run_examples(sess, filler, examples, global_batch_size, devices.length_multiple,
                           FLAGS.max_seq_length)
  if FLAGS.candidates:
    records = candidate_records(lines, examples, results)
  else:
    records = fill_records(lines, examples, results, tokenizer)
  tf.gfile.MakeDirs(command_line.output_directory(FLAGS.output_file))
  with output_files.atomic_output(FLAGS.output_file) as f:
    for record in records:
      f.write(json.dumps(record, ensure_ascii=False) + "\n")
  tf.logging.info("Wrote %d lines to %s", len(records), FLAGS.output_file)


if __name__ == "__main__":
  define_flags()
  command_line.run_main(main)
