# coding=utf-8
"""A Google-named checkpoint (ours or Google's release) to a directory in transformers' format.

The directory holds what transformers' AutoConfig, AutoTokenizer and AutoModelFor... load:
config.json, model.safetensors, vocab.txt, tokenizer_config.json, special_tokens_map.json.
What transformers has no place for is written beside them: the CRF's transitions
(crf_transitions.json), a multi-label classifier's tuned thresholds (thresholds.json) and our
model_settings.json (long-text windows, tokenizer options), which --to=tensorflow --keep_head
reads back. Optimizer slots, global_step and loss-scale variables are never written.
"""

import collections
import glob
import os
import re

import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import multi_label
from bert_mgpu.classifier import serving as classifier_serving
from bert_mgpu.data import label_files
from bert_mgpu.data import output_files
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import crf_numpy
from bert_mgpu.ner import global_pointer
from bert_mgpu.ner import model as ner_model
from bert_mgpu.ner import serving as ner_serving
from bert_mgpu.serving import model_files
from bert_mgpu.training import checkpoints
from bert_mgpu.training import weight_averages
from bert_mgpu.transformers_format import heads
from bert_mgpu.transformers_format import model_config
from bert_mgpu.transformers_format import weight_files
from bert_mgpu.transformers_format import weight_names

# Variables of the training state, not of the model.
_TRAINING_STATE_SUFFIXES = ("/adam_m", "/adam_v", "/accumulated_grad", "/Adam", "/Adam_1",
                            "/Momentum")
_TRAINING_STATE_PREFIXES = ("loss_scaling/",)
# tf.train.AdamOptimizer's own state, at the top level.
_TRAINING_STATE_NAMES = ("global_step", "beta1_power", "beta2_power")

Source = collections.namedtuple("Source", ["checkpoint", "why", "directory"])


def is_training_state(name):
  """Whether checkpoint variable `name` is optimizer or loop state (never converted), the
  record of the averages' rule, or a weight average (converted in place of its weight:
  weight_averages.read_weights)."""
  return (name in _TRAINING_STATE_NAMES or name.endswith(_TRAINING_STATE_SUFFIXES) or
          name.startswith(_TRAINING_STATE_PREFIXES) or weight_averages.is_average(name) or
          weight_averages.is_record(name))


def find_checkpoint(input_path):
  """The checkpoint to convert: of an output_dir (best/ when there, else the latest), of a
  directory holding one checkpoint without a `checkpoint` file (Google's release), or a
  checkpoint prefix. Raises UsageError."""
  input_path = re.sub(r"\.(index|data-\d+-of-\d+)$", "", input_path)  # a file given for its prefix
  if os.path.isdir(input_path):
    if os.path.isfile(os.path.join(input_path, model_config.CONFIG_FILE)):
      raise UsageError("--input=%s holds %s: it is in transformers' format already; use "
                       "--to=tensorflow to convert it." % (input_path, model_config.CONFIG_FILE))
    if (os.path.isfile(os.path.join(input_path, "checkpoint")) or
        os.path.isdir(os.path.join(input_path, checkpoints.BEST_SUBDIR))):
      checkpoint, why = checkpoints.checkpoint_for_inference(
          input_path, None, best_subdir=checkpoints.BEST_SUBDIR, output_dir_flag="--input")
      return Source(checkpoint, why, input_path)
    indexes = sorted(glob.glob(os.path.join(glob.escape(input_path), "*.index")))
    if len(indexes) == 1:
      return Source(indexes[0][:-len(".index")], "the only checkpoint there", input_path)
    raise UsageError("--input=%s holds %s checkpoint and no `checkpoint` file naming one: give "
                     "the checkpoint's prefix (e.g. %s)." % (
                         input_path, "more than one" if indexes else "no",
                         os.path.join(input_path, "bert_model.ckpt")))
  if os.path.isfile(input_path + ".index"):
    return Source(input_path, "--input", os.path.dirname(os.path.abspath(input_path)))
  raise UsageError("--input=%s: no such directory or checkpoint (expected a directory or "
                   "%s.index)." % (input_path, input_path))


def _model_file(directory, name, flag_value, flag):
  """A model file: the flag's value, else the one in the model's directory."""
  if flag_value:
    if not os.path.isfile(flag_value):
      raise UsageError("--%s=%s: no such file." % (flag, flag_value))
    return flag_value
  path = os.path.join(directory, name)
  if not os.path.isfile(path):
    raise UsageError("%s has no %s (SQuAD's and pretraining's output_dirs hold none): give "
                     "--%s." % (directory, name, flag))
  return path


def _check_body(arrays, bert_config, checkpoint):
  """Refuses a checkpoint that lacks a BERT variable of the config, has another shape, or
  has more encoder layers."""
  mismatch = weight_names.body_mismatch(arrays, bert_config)
  if mismatch is None:
    return
  name, found, expected = mismatch
  if found is None:
    raise UsageError("%s lacks %s of its config's BERT: give the bert_config.json it was "
                     "trained with (or it is not a BERT checkpoint)." % (checkpoint, name))
  if expected is None:
    raise UsageError("%s has %s, which its config's BERT lacks: give the bert_config.json it "
                     "was trained with." % (checkpoint, name))
  raise UsageError("%s: %s is %s, the config makes it %s: give the bert_config.json it was "
                   "trained with." % (checkpoint, name, found, expected))


def _labels(directory, head, num_labels):
  """The label list of a classifier or tagger (labels.txt), or LABEL_0.. without one."""
  path = os.path.join(directory, label_files.LABELS_FILE)
  if os.path.isfile(path):
    reader = ner_serving.NerKind() if head.kind == "ner" else classifier_serving.ClassifierKind()
    labels = reader.read_labels(path)
    if len(labels) != num_labels:
      raise UsageError("%s lists %d labels, the checkpoint's head has %d: it belongs to "
                       "another model." % (path, len(labels), num_labels))
    return labels
  tf.logging.warning("%s has no %s: the labels are named LABEL_0 .. LABEL_%d.",
                     directory, label_files.LABELS_FILE, num_labels - 1)
  return ["LABEL_%d" % i for i in range(num_labels)]


def _weights(arrays, head):
  """model.safetensors's arrays by transformers' names, and the variables left out."""
  converted, unused = {}, []
  for name, array in arrays.items():
    if name in head.names:
      target = head.names[name]
    elif weight_names.is_body_name(name):
      if name.startswith(weight_names.POOLER_PREFIX) and not head.has_pooler:
        continue  # built, never read, and transformers' class has no place for it
      target = weight_names.body_to_transformers(name)
      if head.kind == "encoder":  # BertModel's own names carry no "bert." prefix
        target = target[len("bert."):]
    else:
      unused.append(name)
      continue
    converted[target] = weight_names.to_transformers_layout(name, array)
  return converted, unused


def _beside_files(source, head, arrays, labels):
  """The files transformers does not read: {file name: text}."""
  files = {}
  if ner_model.CRF_TRANSITIONS in arrays:
    files[crf_numpy.CRF_TRANSITIONS_FILE] = crf_numpy.transitions_json(
        arrays[ner_model.CRF_TRANSITIONS], labels)
  for name in (model_files.SETTINGS_FILE, multi_label.THRESHOLDS_FILE):
    path = os.path.join(source.directory, name)
    if os.path.isfile(path) and head.kind in ("classifier", "multi_label", "ner"):
      files[name] = model_files.read_utf8(path)
  return files


def convert(input_path, output_dir, bert_config_file=None, vocab_file=None,
            do_lower_case=None, add_files=None):
  """Writes `output_dir` in transformers' format from a Google-named checkpoint.

  Args:
    input_path: an output_dir, a directory holding one checkpoint, or a checkpoint prefix.
    output_dir: a directory that does not exist yet or is empty.
    bert_config_file, vocab_file: override the input directory's files (needed for SQuAD's
      and pretraining's output_dirs, which hold none).
    do_lower_case: None takes model_settings.json's, else True.
    add_files: None, or function(directory, arrays) that writes more files into the
      directory being filled (arrays: the checkpoint's, by Google's names), e.g.
      sentence-transformers' modules; it returns their names.

  Returns:
    A dict summary: "architecture", "checkpoint", "files", "beside", "training_only" (the
    heads used only in training, left out).

  Raises:
    UsageError: one line; nothing is written.
  """
  check_output_dir(output_dir)
  weight_files.check_safetensors_installed()
  source = find_checkpoint(input_path)
  reader = tf.train.load_checkpoint(source.checkpoint)
  arrays = weight_averages.read_weights(reader, [
      name for name in reader.get_variable_to_shape_map() if not is_training_state(name)])
  config_path = _model_file(source.directory, model_files.CONFIG_FILE, bert_config_file,
                            "bert_config_file")
  bert_config = model_config.read_json(config_path)
  _check_body(arrays, bert_config, source.checkpoint)
  head = heads.detect(arrays)
  vocab = model_config.read_vocab_lines(
      _model_file(source.directory, model_files.VOCAB_FILE, vocab_file, "vocab_file"))
  if len(vocab) > bert_config["vocab_size"]:
    raise UsageError("the vocab has %d tokens but vocab_size is %d in %s: they belong to "
                     "different models." % (len(vocab), bert_config["vocab_size"], config_path))
  settings_path = os.path.join(source.directory, model_files.SETTINGS_FILE)
  settings = model_config.read_json(settings_path) if os.path.isfile(settings_path) else {}
  if do_lower_case is None:
    do_lower_case = settings.get("do_lower_case", True)
  labels = None
  if head.kind in ("classifier", "multi_label", "ner"):
    labels = _labels(source.directory, head, len(arrays[heads.output_layer(head)[1]]))
  weights, unused = _weights(arrays, head)
  unused = [name for name in unused if name != ner_model.CRF_TRANSITIONS]
  training_only = [name for name in unused if heads.is_training_only(name)]
  _check_nothing_lost([name for name in unused if name not in training_only], head,
                      source.checkpoint)
  beside = _beside_files(source, head, arrays, labels)
  config = model_config.transformers_config(
      bert_config, head.architecture, labels, head.kind == "multi_label",
      vocab.index("[PAD]") if "[PAD]" in vocab else 0)
  texts = {model_config.CONFIG_FILE: model_config.json_text(config),
           model_config.VOCAB_FILE: "".join(token + "\n" for token in vocab)}
  for name, content in model_config.tokenizer_files(
      do_lower_case, bert_config["max_position_embeddings"]).items():
    texts[name] = model_config.json_text(content)
  texts.update(beside)

  def fill(directory):
    weight_files.write_safetensors(weights, os.path.join(directory,
                                                         weight_files.SAFETENSORS_FILE))
    for name, text in texts.items():
      output_files.atomic_write_text(os.path.join(directory, name), text)
    if add_files is not None:
      added.extend(add_files(directory, arrays))

  added = []
  output_files.replace_directory(os.path.abspath(output_dir), fill)
  return {"architecture": head.architecture, "checkpoint": source.checkpoint,
          "why": source.why,
          "files": sorted(list(texts) + added + [weight_files.SAFETENSORS_FILE]),
          "beside": sorted(beside), "training_only": sorted(training_only), "weights": len(weights)}


def _check_nothing_lost(lost, head, checkpoint):
  """Refuses a model whose trained variables `lost` no transformers class receives:
  converting the rest would drop part of the model without a word."""
  if not lost:
    return
  if global_pointer.SPAN_WEIGHTS in lost:
    raise UsageError("%s has a span head (--ner_head=global_pointer or "
                     "efficient_global_pointer), for which transformers has no class: it is not "
                     "converted. Serve it from its output_dir or an export (docs/NER.md)."
                     % checkpoint)
  shown = ", ".join(sorted(lost)[:5]) + (" and %d more" % (len(lost) - 5) if len(lost) > 5
                                          else "")
  raise UsageError("%s has variables that %s does not receive (%s): the model would lose "
                   "them, so it is not converted. Serve it from its output_dir or an export "
                   "(docs/SERVING.md)." % (checkpoint, head.architecture, shown))


def check_output_dir(output_dir):
  """Refuses an --output that exists and is not an empty directory."""
  if os.path.exists(output_dir) and (not os.path.isdir(output_dir) or os.listdir(output_dir)):
    raise UsageError("--output=%s %s: give a new or empty directory (nothing is overwritten)."
                     % (output_dir, "is not empty" if os.path.isdir(output_dir) else
                        "is a file"))
