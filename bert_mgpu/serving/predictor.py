# coding=utf-8
"""Putting a trained model to work: the files a model needs, SavedModel export, and a
predictor that runs featurized texts on every tower.

A trained classifier or NER model is complete when its directory holds, beside the weights:

  vocab.txt            the WordPiece vocab it was trained with
  bert_config.json     its BERT config
  labels.txt           the label (tag) list, in label-id order
  model_settings.json  {"model": "classifier", "task_name", "do_lower_case", "max_seq_length"}
                       or {"model": "ner", "do_lower_case", "max_seq_length", "doc_stride",
                       "use_crf"} (ner_serving.py)

run_classifier_mgpu.py and run_ner_mgpu.py --do_train write them into output_dir; an export
carries them in its assets.extra/ directory (docs/SERVING.md), so either is enough to serve.
"""

import collections
import json
import os
import queue
import re
import shutil
import threading
import time

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu.training import checkpoints
from bert_mgpu.classifier import data as classifier_data
from bert_mgpu import command_line
from bert_mgpu.classifier import long_text
from bert_mgpu.classifier import multi_label
import multigpu
from bert_mgpu.ner import data as ner_data
from bert_mgpu.errors import UsageError, write_error
from bert_mgpu.data.output_files import atomic_write_text
from bert_mgpu.data import tfrecord_io
from bert_mgpu.data.tfrecord_io import MODEL_INPUTS

VOCAB_FILE = "vocab.txt"
CONFIG_FILE = "bert_config.json"
LABELS_FILE = "labels.txt"
SETTINGS_FILE = "model_settings.json"
ASSET_FILES = (VOCAB_FILE, CONFIG_FILE, LABELS_FILE, SETTINGS_FILE)

# Files the model graph does not read go here; TF Serving and Triton ignore the directory.
EXPORT_ASSETS_DIR = "assets.extra"

# The `model` value of model_settings.json for a sentence (pair) classifier, and for a
# token classifier (named-entity recognition, ner_serving.py).
CLASSIFIER_KIND = "classifier"
NER_KIND = "ner"

# Per kind: what a message calls it, the script that trains and exports it, the settings it
# needs beside "model", "do_lower_case" and "max_seq_length", and its label-file reader.
KINDS = {
    CLASSIFIER_KIND: ("a classifier", "run_classifier_mgpu.py", (),
                      classifier_data.read_label_file),
    NER_KIND: ("an NER model", "run_ner_mgpu.py", ("doc_stride", "use_crf"),
               ner_data.read_label_file),
}


def kind_name(kind):
  return KINDS[kind][0] if kind in KINDS else "a %r model" % kind


def kind_script(kind):
  return KINDS[kind][1] if kind in KINDS else "run_classifier_mgpu.py"


# ---------------------------------------------------------------------------
# The files a model needs: vocab, config, labels and tokenizer settings
# ---------------------------------------------------------------------------

def classifier_settings(task_name, do_lower_case, max_seq_length,
                        options=classifier_data.FeatureOptions(), window_pooling="max"):
  """The model_settings.json content of a classifier. The settings of
  classifier_data.FeatureOptions appear only when they are not the default, so settings
  files stay as they were for models trained without them.

  Args:
    options: classifier_data.FeatureOptions of the training run.
    window_pooling: the --window_pooling of a --long_text=windows model.
  """
  settings = collections.OrderedDict([
      ("model", CLASSIFIER_KIND), ("task_name", task_name),
      ("do_lower_case", bool(do_lower_case)), ("max_seq_length", int(max_seq_length))])
  settings.update(sorted(classifier_data.options_settings(options).items()))
  if options.long_text == "windows":
    settings["window_pooling"] = window_pooling
  return settings


def feature_options(settings):
  """The classifier_data.FeatureOptions of a classifier's model_settings.json."""
  defaults = classifier_data.FeatureOptions()
  return classifier_data.FeatureOptions(**{
      field: settings.get(field, getattr(defaults, field)) for field in defaults._fields})


def _read_utf8(path):
  with open(path, "r", encoding="utf-8", newline="") as f:
    return f.read()


def save_model_files(directory, vocab_file, bert_config_file, settings):
  """Copies the vocab and the config into `directory` and writes model_settings.json there.

  Each file is written atomically; labels.txt is written by the caller (it is the task's).

  Args:
    directory: an existing directory (output_dir, or an export's assets.extra).
    vocab_file, bert_config_file: the files the model was trained with.
    settings: dict from classifier_settings().
  """
  for source, name in ((vocab_file, VOCAB_FILE), (bert_config_file, CONFIG_FILE)):
    target = os.path.join(directory, name)
    if os.path.abspath(source) != os.path.abspath(target):
      atomic_write_text(target, _read_utf8(source))
  atomic_write_text(os.path.join(directory, SETTINGS_FILE),
                    json.dumps(settings, indent=2) + "\n")


def read_settings(path, kinds=(CLASSIFIER_KIND,)):
  """Reads and checks a model_settings.json. Raises UsageError.

  Args:
    path: the file.
    kinds: the `model` values the caller takes (CLASSIFIER_KIND, NER_KIND); another one is
      a one-line error naming it.
  """
  script = " or ".join(kind_script(kind) for kind in kinds)
  try:
    settings = json.loads(_read_utf8(path))
  except (OSError, ValueError) as e:
    raise UsageError("%s: cannot read it as JSON (%s); export the model again with "
                     "%s --export_dir." % (path, e, script))
  missing = [key for key in ("model", "do_lower_case", "max_seq_length")
             if not isinstance(settings, dict) or key not in settings]
  if missing:
    raise UsageError("%s lacks %s; export the model again with %s --export_dir." %
                     (path, ", ".join(missing), script))
  if settings["model"] not in kinds:
    raise UsageError("%s says this is a %r model, not %s: give the output_dir or export of a "
                     "%s model." % (path, settings["model"],
                                    " or ".join(kind_name(kind) for kind in kinds), script))
  missing = [key for key in KINDS[settings["model"]][2] if key not in settings]
  if missing:
    raise UsageError("%s lacks %s; export the model again with %s --export_dir." %
                     (path, ", ".join(missing), kind_script(settings["model"])))
  return settings


ModelFiles = collections.namedtuple(
    "ModelFiles", ["vocab_file", "bert_config_file", "labels_file", "settings", "labels",
                   "thresholds"], defaults=(None,))
ModelFiles.__doc__ = """The checked files of a classifier or an NER model.

Fields:
  vocab_file, bert_config_file, labels_file: paths.
  settings: the model_settings.json dict (classifier_settings(), ner_serving.ner_settings());
    settings["model"] is its kind.
  labels: the label list, in label-id order.
  thresholds: a multi-label classifier's thresholds (float [labels], from the
    thresholds.json beside labels.txt); None for other models.
"""


def model_files(vocab_file, bert_config_file, labels_file, settings):
  """ModelFiles of files given one by one (the labels file is read, by the reader of the
  settings' kind). Raises UsageError."""
  if not os.path.isfile(labels_file):
    raise UsageError("%s: file not found: the label list of the model is missing; train "
                     "with %s --do_train, which writes it." %
                     (labels_file, kind_script(settings["model"])))
  labels = KINDS[settings["model"]][3](labels_file)
  return ModelFiles(vocab_file, bert_config_file, labels_file, settings, labels,
                    _thresholds(os.path.dirname(labels_file), settings, labels))


def _thresholds(directory, settings, labels):
  """A multi-label classifier's thresholds (multi_label.DEFAULT_THRESHOLD for a model saved
  without thresholds.json, with a warning); None for other models."""
  if not settings.get("multi_label"):
    return None
  thresholds = multi_label.read_thresholds(directory, labels)
  if thresholds is None:
    tf.logging.warning("%s has no %s: predicting every label with probability >= %s.",
                       directory, multi_label.THRESHOLDS_FILE, multi_label.DEFAULT_THRESHOLD)
    thresholds = np.full([len(labels)], multi_label.DEFAULT_THRESHOLD)
  return thresholds


def find_model_files(directory, advice, kinds=(CLASSIFIER_KIND,)):
  """The model files in `directory` (output_dir or an export's assets.extra), checked.

  Args:
    directory: the directory.
    advice: what to do when a file is missing (ends the error message).
    kinds: the kinds of model the caller takes (read_settings).

  Raises:
    UsageError: a file is missing or unreadable, or the model is of another kind.
  """
  for name in ASSET_FILES:
    if not os.path.isfile(os.path.join(directory, name)):
      raise UsageError("%s has no %s: it is not a complete %s model; %s" %
                       (directory, name, "classifier" if kinds == (CLASSIFIER_KIND,) else
                        "trained", advice))
  settings = read_settings(os.path.join(directory, SETTINGS_FILE), kinds)
  return model_files(os.path.join(directory, VOCAB_FILE),
                     os.path.join(directory, CONFIG_FILE),
                     os.path.join(directory, LABELS_FILE), settings)


def classifier_files_to_export(output_dir, vocab_file, bert_config_file, settings):
  """The model files of a classifier's output_dir; for a model trained before output_dir kept
  them, the given vocab, config and settings (the run's flags) instead."""
  if has_model_files(output_dir) or not (vocab_file and bert_config_file):
    return find_model_files(
        output_dir, "train with --do_train, or pass the --vocab_file, --bert_config_file, "
        "--do_lower_case and --max_seq_length it was trained with.")
  tf.logging.warning("%s lacks the model files: exporting with --vocab_file, "
                     "--bert_config_file, --do_lower_case and --max_seq_length.", output_dir)
  return model_files(vocab_file, bert_config_file, os.path.join(output_dir, LABELS_FILE),
                     settings)


def has_model_files(directory):
  return all(os.path.isfile(os.path.join(directory, name)) for name in ASSET_FILES)


# ---------------------------------------------------------------------------
# Checkpoints: which weights, and do they belong to this model?
# ---------------------------------------------------------------------------

def check_checkpoint_variables(checkpoint, labels_file, kind=CLASSIFIER_KIND):
  """Raises UsageError unless `checkpoint` holds every variable of the graph being built.

  Call it inside the graph, after the model is built. A SQuAD or pretraining checkpoint
  lacks the classifier (or NER) head; one trained with another label list has another head
  shape; an NER model trained without --use_crf lacks the CRF's transitions.
  """
  variables = tf.global_variables()
  missing = checkpoints.missing_variables(checkpoint, variables)
  if missing:
    name, script = KINDS[kind][:2]
    raise checkpoints.lacking_variables_error(
        checkpoint, missing, "the %s's" % name.split(" ", 1)[1], "it is not %s trained with "
        "%s (a SQuAD or pretraining checkpoint, or one of another kind?). Give %s's "
        "output_dir or export." % (name, script, name))
  saved = tf.train.load_checkpoint(checkpoint).get_variable_to_shape_map()
  for variable in variables:
    shape = variable.shape.as_list()
    if list(saved[variable.op.name]) != shape:
      raise UsageError(
          "%s: %s has shape %s there but %s here (from %s and bert_config.json): the "
          "checkpoint was trained with other labels or another config. Use the labels.txt "
          "and config it was trained with." %
          (checkpoint, variable.op.name, list(saved[variable.op.name]), shape, labels_file))


def checkpoint_of_export(version_dir):
  """The weights of a SavedModel version directory (its variables/ is a checkpoint)."""
  return os.path.join(version_dir, "variables", "variables")


# ---------------------------------------------------------------------------
# SavedModel export
# ---------------------------------------------------------------------------

def _version_numbers(export_base):
  """The numbers of the numbered directories under `export_base`, ascending (complete or not)."""
  if not os.path.isdir(export_base):
    return []
  return sorted(int(name) for name in os.listdir(export_base)
                if name.isdigit() and os.path.isdir(os.path.join(export_base, name)))


def _is_complete_version(version_dir):
  return os.path.isfile(os.path.join(version_dir, "saved_model.pb"))


def newest_version_dir(export_dir):
  """`export_dir` itself when it is a version directory, else its highest complete one.

  A numbered directory without saved_model.pb (left by a crash) is skipped with a warning.

  Raises:
    UsageError: neither.
  """
  if _is_complete_version(export_dir):
    return export_dir
  for version in reversed(_version_numbers(export_dir)):
    version_dir = os.path.join(export_dir, str(version))
    if _is_complete_version(version_dir):
      return version_dir
    tf.logging.warning("Skipping %s: it holds no saved_model.pb (left by a crashed export?).",
                       version_dir)
  raise UsageError("--export_dir=%s holds no SavedModel (no saved_model.pb, in it or in a "
                   "numbered version directory): export one with run_classifier_mgpu.py "
                   "--export_dir=%s --output_dir=<trained model>." % (export_dir, export_dir))


def _serving_inputs(names=MODEL_INPUTS, windowed=False):
  """int32 placeholders [batch, seq] (windowed: [batch, windows, seq]), every dimension
  dynamic."""
  shape = [None, None, None] if windowed else [None, None]
  return collections.OrderedDict(
      (name, tf.placeholder(tf.int32, shape, name=name)) for name in names)


def is_windowed(settings):
  """Whether a model reads [batch, windows, seq] inputs (a --long_text=windows classifier)."""
  return settings.get("long_text") == "windows"


def checked_features(inputs, bert_config):
  """The serving inputs as model features, behind a check that the sequences fit the
  position table (a clear error rather than a gather out of range)."""
  max_length = bert_config.max_position_embeddings
  check = tf.assert_less_equal(
      tf.shape(inputs["input_ids"])[-1], max_length,
      message="sequences may have at most max_position_embeddings=%d tokens" % max_length)
  with tf.control_dependencies([check]):
    return {name: tf.identity(tensor) for name, tensor in inputs.items()}


def _signature_outputs(model_fn, inputs, bert_config, files):
  """Builds the serving graph on `inputs`; returns the signature's output tensors."""
  features = checked_features(inputs, bert_config)
  probabilities = model_fn(features, False)["probabilities"]  # [batch, num_labels]
  labels = files.labels
  if files.thresholds is not None:
    return _multi_label_outputs(probabilities, labels, files.thresholds,
                                files.settings["label_separator"])
  label_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)  # [batch]
  return collections.OrderedDict([
      ("probabilities", tf.identity(probabilities, name="probabilities")),
      ("label_id", tf.identity(label_id, name="label_id")),
      ("label", tf.gather(tf.constant(labels), label_id, name="label")),  # [batch] strings
  ])


def _multi_label_outputs(probabilities, labels, thresholds, separator):
  """probabilities [batch, labels], predicted [batch, labels] int32 (1: the label reaches its
  threshold), and label [batch]: the predicted labels joined by the separator."""
  chosen = probabilities >= tf.constant(thresholds, tf.float32)  # [batch, labels]
  # Each chosen label preceded by the separator, joined, then the first separator cut.
  pieces = tf.where(chosen, tf.broadcast_to(tf.constant([separator + l for l in labels]),
                                            tf.shape(chosen)),
                    tf.fill(tf.shape(chosen), ""))
  joined = tf.strings.reduce_join(pieces, axis=-1)  # [batch]
  label = tf.strings.regex_replace(joined, "^" + re.escape(separator), "",
                                   replace_global=False)
  return collections.OrderedDict([
      ("probabilities", tf.identity(probabilities, name="probabilities")),
      ("predicted", tf.cast(chosen, tf.int32, name="predicted")),
      ("label", tf.identity(label, name="label")),
  ])


def _write_saved_model(path, graph, checkpoint, inputs, outputs):
  """Restores `checkpoint` into `graph` and saves it as a SavedModel at `path`."""
  with tf.Session(graph=graph) as sess:
    tf.train.Saver(tf.global_variables()).restore(sess, checkpoint)
    builder = tf.saved_model.builder.SavedModelBuilder(path)
    signature = tf.saved_model.signature_def_utils.predict_signature_def(
        inputs=inputs, outputs=outputs)
    builder.add_meta_graph_and_variables(
        sess, [tf.saved_model.tag_constants.SERVING],
        signature_def_map={
            tf.saved_model.signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY: signature},
        strip_default_attrs=True)
    builder.save()


_TEMP_PREFIX = ".tmp-export-"

# An empty numbered directory older than this is a crash's leftover, not a claim in progress
# (an export renames its temp directory onto its claim microseconds after the mkdir).
_STALE_CLAIM_SECONDS = 60


def _pid_alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True  # another user's process
  return True


def remove_export_leftovers(export_base):
  """Removes what crashed exports left in `export_base`.

  That is: `.tmp-export-<pid>` directories of processes no longer running (or of this one),
  and empty numbered directories older than _STALE_CLAIM_SECONDS (a crash between claiming
  the number and the rename), which TF Serving would otherwise try to load.
  """
  for name in os.listdir(export_base):
    path = os.path.join(export_base, name)
    if name.startswith(_TEMP_PREFIX) and name[len(_TEMP_PREFIX):].isdigit():
      pid = int(name[len(_TEMP_PREFIX):])
      if pid == os.getpid() or not _pid_alive(pid):
        tf.logging.info("Removing %s, left by a crashed export.", path)
        shutil.rmtree(path, ignore_errors=True)  # another export may be removing it too
    elif (name.isdigit() and os.path.isdir(path) and not os.listdir(path) and
          time.time() - os.path.getmtime(path) > _STALE_CLAIM_SECONDS):
      tf.logging.warning("Removing the empty version directory %s, left by a crashed export.",
                         path)
      try:
        os.rmdir(path)
      except OSError:
        pass  # filled or removed meanwhile by another export


def _claim_version_dir(export_base, temp_dir):
  """Renames `temp_dir` to the next free version number under `export_base`; returns it.

  The number follows every numbered directory, complete or not, so that a number TF Serving
  may have seen is never reused.
  """
  version = (_version_numbers(export_base) or [0])[-1] + 1
  while True:
    target = os.path.join(export_base, str(version))
    try:
      # os.rename replaces an empty directory silently: claim the name with mkdir first.
      os.mkdir(target)
    except FileExistsError:
      version += 1
      continue
    os.rename(temp_dir, target)
    return target


def export_classifier(export_base, files, checkpoint, model_fn, bert_config):
  """Writes a SavedModel of the classifier into the next version directory of export_base.

  The serving_default signature takes input_ids, input_mask and segment_ids, int32
  [batch, seq] with both dimensions dynamic, and returns probabilities [batch, num_labels],
  label_id [batch] and label [batch] (the label name); a multi-label classifier's returns
  probabilities, predicted [batch, num_labels] int32 and label [batch] (its predicted labels
  joined by its separator). assets.extra/ gets the model files (and thresholds.json).
  The export is assembled in a temp directory and renamed, so a crash leaves no half export.

  Args:
    export_base: the --export_dir (created if missing).
    files: ModelFiles of the trained model.
    checkpoint: the weights to export.
    model_fn: run_classifier_mgpu.create_model_fn(bert_config, num_labels).
    bert_config: the model's BertConfig.

  Returns:
    The version directory written.

  Raises:
    UsageError: the checkpoint does not match the model, or export_base cannot be written.
  """
  return export_saved_model(
      export_base, files, checkpoint,
      lambda inputs: _signature_outputs(model_fn, inputs, bert_config, files))


def export_saved_model(export_base, files, checkpoint, build_outputs):
  """Writes a SavedModel into the next version directory of export_base (any kind).

  Args:
    export_base: the --export_dir (created if missing).
    files: ModelFiles of the trained model; they go into assets.extra/.
    checkpoint: the weights to export.
    build_outputs: builds the model on the dict of int32 [batch, seq] placeholders
      input_ids, input_mask and segment_ids; returns the signature's outputs (a dict).

  Returns:
    The version directory written.

  Raises:
    UsageError: the checkpoint does not match the model, or export_base cannot be written.
  """
  graph = tf.Graph()
  with graph.as_default():
    inputs = _serving_inputs(windowed=is_windowed(files.settings))
    outputs = build_outputs(inputs)
    check_checkpoint_variables(checkpoint, files.labels_file, files.settings["model"])
  try:
    os.makedirs(export_base, exist_ok=True)
  except OSError as e:
    raise write_error(export_base, e)
  temp_dir = os.path.join(export_base, "%s%d" % (_TEMP_PREFIX, os.getpid()))
  try:
    remove_export_leftovers(export_base)
    _write_saved_model(temp_dir, graph, checkpoint, inputs, outputs)
    assets = os.path.join(temp_dir, EXPORT_ASSETS_DIR)
    os.mkdir(assets)
    save_model_files(assets, files.vocab_file, files.bert_config_file, files.settings)
    atomic_write_text(os.path.join(assets, LABELS_FILE), _read_utf8(files.labels_file))
    if files.thresholds is not None:
      multi_label.write_thresholds(assets, files.labels, files.thresholds,
                                   "the thresholds of the exported model")
    return _claim_version_dir(export_base, temp_dir)
  except (OSError, tf.errors.OpError) as e:
    raise write_error(export_base, e)
  finally:
    if os.path.exists(temp_dir):
      tf.gfile.DeleteRecursively(temp_dir)


# ---------------------------------------------------------------------------
# Texts to features
# ---------------------------------------------------------------------------

Features = collections.namedtuple("Features", ["arrays", "truncated"])
Features.__doc__ = """Model inputs of a list of texts (or, for NER, of their windows).

Fields:
  arrays: dict input_ids / input_mask / segment_ids (NER: and tag_mask) -> np.int32
    [n, max_seq_length].
  truncated: np.bool_ [n], whether the text (pair) was cut to max_seq_length (NER windows:
    never).
"""


class NoTokensError(ValueError):
  """A text whose tokenization is empty (only spaces, control or zero-width characters).

  Attributes:
    row: its index in the texts given to featurize().
    field: "a" (texts_a) or "b" (texts_b).
  """

  def __init__(self, row, field):
    super(NoTokensError, self).__init__(
        "text_%s of row %d has no tokens (only spaces, control or invisible characters)" %
        (field, row))
    self.row = row
    self.field = field


def _check_tokens(arrays, row, pair):
  """Raises NoTokensError when text_a, or text_b of a pair, had no tokens.

  Read off the converted row rather than tokenizing twice: a single text without tokens is
  [CLS] [SEP]; a pair whose text_a has none puts text_b (segment 1) right after [CLS] [SEP];
  one whose text_b has none is converted as a single text (no segment 1 at all).
  """
  segment_ids = arrays["segment_ids"][row]
  if arrays["input_mask"][row].sum() == 2 or (pair and segment_ids[2] == 1):
    raise NoTokensError(row, "a")
  if pair and segment_ids.sum() == 0:
    raise NoTokensError(row, "b")


def featurize(tokenizer, max_seq_length, texts_a, texts_b=None,
              options=classifier_data.FeatureOptions()):
  """Tokenizes texts exactly as training did ([CLS] a [SEP] (b [SEP]), cut as
  options.long_text says).

  Args:
    tokenizer: the model's FullTokenizer.
    max_seq_length: the length the model was trained with.
    texts_a: list of str.
    texts_b: list of str of the same length (sentence pairs), or None.
    options: the model's classifier_data.FeatureOptions (feature_options(settings)).

  Returns:
    Features; with --long_text=windows the arrays are [n, windows, max_seq_length], padded
    to the most windows of a text with all-zero windows.

  Raises:
    NoTokensError: a text tokenizes to nothing (the first such one is named).
  """
  if options.long_text == "windows":
    return _featurize_windows(tokenizer, max_seq_length, texts_a, texts_b, options)
  arrays = {name: np.zeros([len(texts_a), max_seq_length], np.int32)
            for name in MODEL_INPUTS}
  truncated = np.zeros([len(texts_a)], np.bool_)
  for row, text_a in enumerate(texts_a):
    example = classifier_data.InputExample(
        guid=row, text_a=text_a, text_b=texts_b[row] if texts_b is not None else None)
    # The training code's own conversion, which also says whether it truncated.
    features, truncated[row] = classifier_data.convert_example_counting_truncation(
        example, {}, max_seq_length, tokenizer, options)
    arrays["input_ids"][row] = features.input_ids
    arrays["input_mask"][row] = features.input_mask
    arrays["segment_ids"][row] = features.segment_ids
    _check_tokens(arrays, row, texts_b is not None)
  return Features(arrays, truncated)


def _featurize_windows(tokenizer, max_seq_length, texts_a, texts_b, options):
  """featurize() of a --long_text=windows classifier: the windows of training's featurizing."""
  documents = []
  for row, text_a in enumerate(texts_a):
    tokens_b = tokenizer.tokenize(texts_b[row]) if texts_b is not None else None
    documents.append(long_text.document_windows(
        tokenizer.tokenize(text_a), tokens_b, max_seq_length, options.doc_stride,
        options.max_windows, tokenizer.convert_tokens_to_ids))
  most_windows = max([len(document.input_ids) for document in documents] + [1])
  arrays = {name: np.zeros([len(texts_a), most_windows, max_seq_length], np.int32)
            for name in MODEL_INPUTS}
  truncated = np.zeros([len(texts_a)], np.bool_)
  for row, document in enumerate(documents):
    for name in MODEL_INPUTS:
      arrays[name][row, :len(document.input_ids)] = getattr(document, name)
    truncated[row] = bool(document.windows_cut or document.text_b_cut)
    # The first window holds the start of both texts: an empty one shows there.
    _check_tokens({name: arrays[name][:, 0] for name in MODEL_INPUTS}, row,
                  texts_b is not None)
  return Features(arrays, truncated)


def concatenate_features(parts):
  """One Features of several, in order."""
  return Features(
      {name: np.concatenate([p.arrays[name] for p in parts]) for name in parts[0].arrays},
      np.concatenate([p.truncated for p in parts]))


# ---------------------------------------------------------------------------
# The predictor
# ---------------------------------------------------------------------------

LoadedModel = collections.namedtuple(
    "LoadedModel", ["files", "bert_config", "tokenizer", "checkpoint", "description"])
LoadedModel.__doc__ = """A classifier ready to build: its files, config, tokenizer, weights.

Fields:
  files: ModelFiles.
  bert_config: modeling.BertConfig.
  tokenizer: tokenization.FullTokenizer with the trained do_lower_case.
  checkpoint: the weights (a checkpoint path; for an export, its variables/variables).
  description: where the weights come from, for the log.
"""


def load_model(files, checkpoint, description):
  """A LoadedModel of checked model files and the weights to use."""
  max_seq_length = files.settings["max_seq_length"]
  bert_config = command_line.load_bert_config(files.bert_config_file, max_seq_length)
  tokenizer = command_line.load_tokenizer(
      files.vocab_file, files.settings["do_lower_case"], bert_config, files.bert_config_file,
      literal_special_tokens=bool(files.settings.get("literal_special_tokens", False)))
  return LoadedModel(files, bert_config, tokenizer, checkpoint, description)


def load_output_dir(output_dir, kinds=(CLASSIFIER_KIND,)):
  """The model of a run_classifier_mgpu.py (or, in `kinds`, run_ner_mgpu.py) --do_train
  output_dir: best checkpoint first.

  Raises:
    UsageError: a model file or the checkpoint is missing, or the model is of another kind.
  """
  if not os.path.isdir(output_dir):
    raise UsageError("--output_dir=%s: no such directory." % output_dir)
  files = find_model_files(output_dir, "train it with this version of %s --do_train, which "
                           "saves them there." % " or ".join(kind_script(k) for k in kinds),
                           kinds)
  checkpoint, why = checkpoints.checkpoint_for_inference(output_dir, None, best_subdir="best")
  return load_model(files, checkpoint, "%s (%s)" % (checkpoint, why))


def load_export(export_dir, kinds=(CLASSIFIER_KIND,)):
  """The model of an export: `export_dir` is a version directory or the base of several.

  Raises:
    UsageError: no SavedModel there, one without our assets.extra files, or one of a kind
      not in `kinds`.
  """
  version_dir = newest_version_dir(export_dir)
  files = find_model_files(os.path.join(version_dir, EXPORT_ASSETS_DIR),
                           "export the model with %s --export_dir." %
                           " or ".join(kind_script(k) for k in kinds), kinds)
  checkpoint = checkpoint_of_export(version_dir)
  if not tf.gfile.Exists(checkpoint + ".index"):
    raise UsageError("%s has no variables/variables.index: the export is incomplete; export "
                     "again." % version_dir)
  return load_model(files, checkpoint, "the export %s" % version_dir)


class Predictor(object):
  """A model graph on every tower of a DevicePlan, in one session, built once.

  Texts are sorted by length, batched, and each batch is padded only to its longest text.
  A classifier by default; ner_serving.NerPredictor feeds tag_mask too and reads tag_ids.
  """

  def __init__(self, model, model_fn, devices, batch_size_per_tower, input_names=MODEL_INPUTS,
               output_name="probabilities"):
    """Builds the graph and restores the weights.

    Args:
      model: LoadedModel.
      model_fn: run_classifier_mgpu.create_model_fn(bert_config, num_labels), or another
        model_fn whose `output_name` output is [batch, ...] with a fixed shape after the
        batch (ner_model's pads its outputs back to max_seq_length).
      devices: a checked run_settings.DeviceSettings (towers, precision, XLA, padding).
      batch_size_per_tower: texts per tower per sess.run.
      input_names: the int32 [batch, seq] features fed (Features.arrays keys).
      output_name: the model output predict() returns.

    Raises:
      UsageError: the weights do not belong to this model (another task's checkpoint).
    """
    self.model = model
    self.labels = model.files.labels
    self.max_seq_length = model.files.settings["max_seq_length"]
    plan = devices.plan.for_inference()
    self.global_batch_size = batch_size_per_tower * plan.num_towers
    # Fed batches are cut to their longest text rounded up to this (None: max_seq_length).
    self.length_multiple = devices.length_multiple
    graph = tf.Graph()
    with graph.as_default():
      self._inputs = _serving_inputs(input_names, is_windowed(model.files.settings))
      self._output_name = output_name
      self._output = multigpu.build_inference(
          plan, model_fn, dict(self._inputs), self.global_batch_size,
          precision=devices.precision, use_xla=devices.use_xla)[output_name]
      check_checkpoint_variables(model.checkpoint, model.files.labels_file,
                                 model.files.settings["model"])
      saver = tf.train.Saver(tf.global_variables())
      graph.finalize()
      self._session = tf.Session(graph=graph, config=plan.session_config())
      saver.restore(self._session, model.checkpoint)

  def featurize(self, texts_a, texts_b=None):
    return featurize(self.model.tokenizer, self.max_seq_length, texts_a, texts_b,
                     feature_options(self.model.files.settings))

  def predict(self, features):
    """Class probabilities (or the chosen output) of featurized texts.

    Args:
      features: Features of n texts.

    Returns:
      np.float32 [n, num_labels], in input order, columns in label-list order (another
      output: its rows, in input order).
    """
    mask = features.arrays["input_mask"]
    # [n] or, windowed, [n, windows]: the tokens of each text (window).
    window_lengths = mask.sum(axis=-1)
    lengths = window_lengths.reshape([len(mask), -1]).sum(axis=1)  # [n]
    order = np.argsort(-lengths, kind="stable")  # longest first: similar lengths batch together
    result = None
    if self._output_name == "probabilities":
      result = np.zeros([len(lengths), len(self.labels)], np.float32)
    for start in range(0, len(order), self.global_batch_size):
      rows = order[start:start + self.global_batch_size]
      longest = tfrecord_io.padded_length(int(window_lengths[rows].max()),
                                          self.length_multiple, self.max_seq_length)
      # Windowed: also cut to the batch's most windows (padded windows come last).
      cut = ((slice(None, int((window_lengths[rows] > 0).sum(axis=1).max())),)
             if mask.ndim == 3 else ())
      feed = {placeholder: features.arrays[name][(rows,) + cut + (slice(None, longest),)]
              for name, placeholder in self._inputs.items()}
      values = self._session.run(self._output, feed)
      if result is None:
        result = np.zeros((len(lengths),) + values.shape[1:], values.dtype)
      result[rows] = values
    return result

  def predicted_labels(self, probabilities):
    """Per row of predict()'s probabilities: the most probable label, or, for a multi-label
    classifier, the list of labels that reach their thresholds."""
    thresholds = self.model.files.thresholds
    if thresholds is None:
      return [self.labels[int(row.argmax())] for row in probabilities]
    chosen = multi_label.predicted_sets(probabilities, thresholds)
    return [[label for label, keep in zip(self.labels, row) if keep] for row in chosen]

  def close(self):
    self._session.close()


# ---------------------------------------------------------------------------
# Micro-batching: concurrent requests run as one batch
# ---------------------------------------------------------------------------

class _Request(object):
  def __init__(self, features):
    self.features = features
    self.size = len(features.truncated)
    self.done = threading.Event()
    self.probabilities = None
    self.error = None


_STOP = object()


class MicroBatcher(object):
  """A queue and one thread: requests that arrive within `window_seconds` of the first one
  waiting run through the predictor as one batch of at most `max_batch` texts.

  A request that would take a batch past `max_batch` starts the next one; a request larger
  than `max_batch` runs alone (callers that mind its latency send chunks instead).

  Attributes:
    stats: dict batches / requests / texts run so far, and in_flight (submitted, unanswered).
  """

  def __init__(self, predict_fn, window_seconds, max_batch):
    """Args: predict_fn: Features -> probabilities [n, labels]; window_seconds; max_batch."""
    self._predict = predict_fn
    self._window = window_seconds
    self._max_batch = max_batch
    self._queue = queue.Queue()
    self._lock = threading.Lock()
    self.stats = {"batches": 0, "requests": 0, "texts": 0, "in_flight": 0}
    self._thread = threading.Thread(target=self._run, name="micro-batcher")
    self._thread.daemon = True
    self._thread.start()

  def _count(self, **deltas):
    with self._lock:
      for key, delta in deltas.items():
        self.stats[key] += delta

  def predict(self, features):
    """Queues the texts and waits for their probabilities (called by request threads).

    Raises:
      Whatever the predictor raised for the batch.
    """
    request = _Request(features)
    self._count(in_flight=1)
    self._queue.put(request)
    request.done.wait()
    self._count(in_flight=-1)
    if request.error is not None:
      raise request.error
    return request.probabilities

  def _collect(self, first):
    """The requests to run with `first`.

    Returns:
      (batch, the request that did not fit and starts the next batch or None, whether a
      stop came while waiting).
    """
    batch, size = [first], first.size
    deadline = time.time() + self._window
    while size < self._max_batch:
      timeout = deadline - time.time()
      if timeout <= 0:
        break
      try:
        item = self._queue.get(timeout=timeout)
      except queue.Empty:
        break
      if item is _STOP:
        return batch, None, True
      if size + item.size > self._max_batch:
        return batch, item, False
      batch.append(item)
      size += item.size
    return batch, None, False

  def _run_batch(self, batch):
    try:
      probabilities = self._predict(concatenate_features([r.features for r in batch]))
    except Exception as e:  # pylint: disable=broad-except
      for request in batch:
        request.error = e
        request.done.set()
      return
    start = 0
    for request in batch:
      request.probabilities = probabilities[start:start + request.size]
      start += request.size
      request.done.set()
    self._count(batches=1, requests=len(batch), texts=start)
    tf.logging.info("micro-batch %d: %d request(s), %d text(s)", self.stats["batches"],
                    len(batch), start)

  def _run(self):
    carried, stopping = None, False
    while carried is not None or not stopping:
      first, carried = carried, None
      if first is None:
        first = self._queue.get()
        if first is _STOP:
          break
      batch, carried, stop_seen = self._collect(first)
      stopping = stopping or stop_seen
      self._run_batch(batch)

  def stop(self, timeout=None):
    """Runs what is queued, then ends the thread.

    Args:
      timeout: seconds to wait for that, or None (no limit).

    Returns:
      Whether the thread ended.
    """
    self._queue.put(_STOP)
    self._thread.join(timeout)
    return not self._thread.is_alive()
