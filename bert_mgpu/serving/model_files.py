# coding=utf-8
"""The files a trained model needs beside its weights, and the check that weights belong to it.

A trained classifier or NER model is complete when its directory holds, beside the weights:

  vocab.txt            the WordPiece vocab it was trained with
  bert_config.json     its BERT config
  labels.txt           the label (tag) list, in label-id order
  model_settings.json  {"model": "classifier", "task_name", "do_lower_case", "max_seq_length"}
                       or {"model": "ner", "do_lower_case", "max_seq_length", "doc_stride",
                       "use_crf"} (bert_mgpu/ner/serving.py)

run_classifier_mgpu.py and run_ner_mgpu.py --do_train write them into output_dir; an export
carries them in its assets.extra/ directory (export.py, docs/SERVING.md), so either is enough
to serve.

No TensorFlow import: predict_text.py --backend=onnxruntime reads these files without it.
"""

import collections
import json
import logging
import os

import numpy as np

from bert_mgpu.classifier import input_examples
from bert_mgpu.classifier import multi_label
from bert_mgpu.data import label_files
from bert_mgpu.data.output_files import atomic_write_text
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import tag_labels

# TensorFlow's logger (tf.get_logger() is this logger on TF 1.15 and 2.x).
_LOGGER = logging.getLogger("tensorflow")

VOCAB_FILE = "vocab.txt"
CONFIG_FILE = "bert_config.json"
LABELS_FILE = "labels.txt"
SETTINGS_FILE = "model_settings.json"
ASSET_FILES = (VOCAB_FILE, CONFIG_FILE, LABELS_FILE, SETTINGS_FILE)

# The `model` value of model_settings.json for a sentence (pair) classifier, and for a
# token classifier (named-entity recognition, bert_mgpu/ner/serving.py).
CLASSIFIER_KIND = "classifier"
NER_KIND = "ner"
# predict_text.py takes either kind.
ANY_KIND = (CLASSIFIER_KIND, NER_KIND)

# Per kind: what a message calls it, the script that trains and exports it, the settings it
# needs beside "model", "do_lower_case" and "max_seq_length", and its label-file reader.
KINDS = {
    CLASSIFIER_KIND: ("a classifier", "run_classifier_mgpu.py", (),
                      label_files.read_label_file),
    NER_KIND: ("an NER model", "run_ner_mgpu.py", ("doc_stride", "use_crf"),
               tag_labels.read_label_file),
}


def read_labels(kind, path):
  """The label list of a model of `kind`, read by that kind's reader. Raises UsageError."""
  return KINDS[kind][3](path)


def kind_name(kind):
  return KINDS[kind][0] if kind in KINDS else "a %r model" % kind


def kind_script(kind):
  return KINDS[kind][1] if kind in KINDS else "run_classifier_mgpu.py"


# ---------------------------------------------------------------------------
# The files a model needs: vocab, config, labels and tokenizer settings
# ---------------------------------------------------------------------------

def classifier_settings(task_name, do_lower_case, max_seq_length,
                        options=input_examples.FeatureOptions(), window_pooling="max"):
  """The model_settings.json content of a classifier. The settings of
  input_examples.FeatureOptions appear only when they are not the default, so settings
  files stay as they were for models trained without them.

  Args:
    options: input_examples.FeatureOptions of the training run.
    window_pooling: the --window_pooling of a --long_text=windows model.
  """
  settings = collections.OrderedDict([
      ("model", CLASSIFIER_KIND), ("task_name", task_name),
      ("do_lower_case", bool(do_lower_case)), ("max_seq_length", int(max_seq_length))])
  settings.update(sorted(input_examples.options_settings(options).items()))
  if options.long_text == "windows":
    settings["window_pooling"] = window_pooling
  return settings


def feature_options(settings):
  """The input_examples.FeatureOptions of a classifier's model_settings.json."""
  defaults = input_examples.FeatureOptions()
  return input_examples.FeatureOptions(**{
      field: settings.get(field, getattr(defaults, field)) for field in defaults._fields})


def read_utf8(path):
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
      atomic_write_text(target, read_utf8(source))
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
    settings = json.loads(read_utf8(path))
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
  labels = read_labels(settings["model"], labels_file)
  return ModelFiles(vocab_file, bert_config_file, labels_file, settings, labels,
                    _thresholds(os.path.dirname(labels_file), settings, labels))


def _thresholds(directory, settings, labels):
  """A multi-label classifier's thresholds (multi_label.DEFAULT_THRESHOLD for a model saved
  without thresholds.json, with a warning); None for other models."""
  if not settings.get("multi_label"):
    return None
  thresholds = multi_label.read_thresholds(directory, labels)
  if thresholds is None:
    _LOGGER.warning("%s has no %s: predicting every label with probability >= %s.",
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
  _LOGGER.warning("%s lacks the model files: exporting with --vocab_file, "
                  "--bert_config_file, --do_lower_case and --max_seq_length.", output_dir)
  return model_files(vocab_file, bert_config_file, os.path.join(output_dir, LABELS_FILE),
                     settings)


def has_model_files(directory):
  return all(os.path.isfile(os.path.join(directory, name)) for name in ASSET_FILES)


# ---------------------------------------------------------------------------
# What a model predicts
# ---------------------------------------------------------------------------

def is_ner(model):
  """Whether a loaded model (anything with .files: predictor.LoadedModel,
  onnx_predictor.OnnxModel; a predictor's .model) is an NER model."""
  return model.files.settings["model"] == NER_KIND


def predicted_labels(files, probabilities):
  """Per row of a classifier's probabilities [n, labels]: the most probable label, or, for a
  multi-label classifier, the list of labels that reach their thresholds.

  Args:
    files: the classifier's ModelFiles.
    probabilities: float [n, len(files.labels)], columns in label-list order.
  """
  if files.thresholds is None:
    return [files.labels[int(row.argmax())] for row in probabilities]
  chosen = multi_label.predicted_sets(probabilities, files.thresholds)
  return [[label for label, keep in zip(files.labels, row) if keep] for row in chosen]
