# coding=utf-8
"""The classifier as a servable kind (serving/kinds.py): its model_settings.json, raw texts
(or text pairs) featurized exactly as training did, and probabilities decoded into labels.

  model_settings.json  {"model": "classifier", "task_name", "do_lower_case",
                       "max_seq_length"}, plus the input_examples.FeatureOptions that differ
                       from the defaults (multi_label, label_separator, long_text, ...) and
                       a --long_text=windows model's window_pooling.
  assets               labels.txt; a multi-label classifier's thresholds.json.
  Outputs              probabilities [batch, num_labels] (the SavedModel's signature adds
                       label_id and label, or predicted and label: classifier/serving_graph.py).
  predict_text.py      label<TAB>probability<TAB>p_1...p_k per text (multi-label: labels
                       joined by the separator<TAB>p_1...p_k); HTTP {"labels",
                       "probabilities", "truncated"}.

No TensorFlow import: predict_text.py --backend=onnxruntime runs this.
"""

import collections
import logging
import os

import numpy as np

from bert_mgpu.classifier import featurizing
from bert_mgpu.classifier import input_examples
from bert_mgpu.classifier import long_text
from bert_mgpu.classifier import multi_label
from bert_mgpu.data.batch_shapes import MODEL_INPUTS
from bert_mgpu.serving import kinds
from bert_mgpu.serving import model_files
from bert_mgpu.serving import model_inputs

# TensorFlow's logger (tf.get_logger() is this logger on TF 1.15 and 2.x).
_LOGGER = logging.getLogger("tensorflow")

CLASSIFIER_KIND = "classifier"


# ---------------------------------------------------------------------------
# model_settings.json
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


def is_windowed(settings):
  """Whether a model reads [batch, windows, seq] inputs (a --long_text=windows classifier)."""
  return settings.get("long_text") == "windows"


def thresholds_of(files):
  """A multi-label classifier's thresholds (float [labels]); None for a single-label one."""
  return files.assets.get("thresholds")


def files_to_export(output_dir, vocab_file, bert_config_file, settings):
  """The model files of a classifier's output_dir; for a model trained before output_dir kept
  them, the given vocab, config and settings (the run's flags) instead."""
  if model_files.has_model_files(output_dir) or not (vocab_file and bert_config_file):
    return model_files.find_model_files(
        output_dir, "train with --do_train, or pass the --vocab_file, --bert_config_file, "
        "--do_lower_case and --max_seq_length it was trained with.", (CLASSIFIER_KIND,))
  _LOGGER.warning("%s lacks the model files: exporting with --vocab_file, "
                  "--bert_config_file, --do_lower_case and --max_seq_length.", output_dir)
  return model_files.model_files(vocab_file, bert_config_file,
                                 os.path.join(output_dir, model_files.LABELS_FILE), settings)


# ---------------------------------------------------------------------------
# Texts to features
# ---------------------------------------------------------------------------

def _check_tokens(arrays, row, pair):
  """Raises NoTokensError when text_a, or text_b of a pair, had no tokens.

  Read off the converted row rather than tokenizing twice: a single text without tokens is
  [CLS] [SEP]; a pair whose text_a has none puts text_b (segment 1) right after [CLS] [SEP];
  one whose text_b has none is converted as a single text (no segment 1 at all).
  """
  segment_ids = arrays["segment_ids"][row]
  if arrays["input_mask"][row].sum() == 2 or (pair and segment_ids[2] == 1):
    raise model_inputs.NoTokensError(row, "a")
  if pair and segment_ids.sum() == 0:
    raise model_inputs.NoTokensError(row, "b")


def featurize(tokenizer, max_seq_length, texts_a, texts_b=None,
              options=input_examples.FeatureOptions()):
  """Tokenizes texts exactly as training did ([CLS] a [SEP] (b [SEP]), cut as
  options.long_text says).

  Args:
    tokenizer: the model's FullTokenizer.
    max_seq_length: the length the model was trained with.
    texts_a: list of str.
    texts_b: list of str of the same length (sentence pairs), or None.
    options: the model's input_examples.FeatureOptions (feature_options(settings)).

  Returns:
    model_inputs.Features; with --long_text=windows the arrays are [n, windows,
    max_seq_length], padded to the most windows of a text with all-zero windows.

  Raises:
    model_inputs.NoTokensError: a text tokenizes to nothing (the first such one is named).
  """
  if options.long_text == "windows":
    return _featurize_windows(tokenizer, max_seq_length, texts_a, texts_b, options)
  arrays = {name: np.zeros([len(texts_a), max_seq_length], np.int32)
            for name in MODEL_INPUTS}
  truncated = np.zeros([len(texts_a)], np.bool_)
  for row, text_a in enumerate(texts_a):
    example = input_examples.InputExample(
        guid=row, text_a=text_a, text_b=texts_b[row] if texts_b is not None else None)
    # The training code's own conversion, which also says whether it truncated.
    features, truncated[row] = featurizing.convert_example_counting_truncation(
        example, {}, max_seq_length, tokenizer, options)
    arrays["input_ids"][row] = features.input_ids
    arrays["input_mask"][row] = features.input_mask
    arrays["segment_ids"][row] = features.segment_ids
    _check_tokens(arrays, row, texts_b is not None)
  return model_inputs.Features(arrays, truncated)


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
  return model_inputs.Features(arrays, truncated)


# ---------------------------------------------------------------------------
# Probabilities to labels
# ---------------------------------------------------------------------------

def predicted_labels(files, probabilities):
  """Per row of a classifier's probabilities [n, labels]: the most probable label, or, for a
  multi-label classifier, the list of labels that reach their thresholds.

  Args:
    files: the classifier's model_files.ModelFiles.
    probabilities: float [n, len(files.labels)], columns in label-list order.
  """
  thresholds = thresholds_of(files)
  if thresholds is None:
    return [files.labels[int(row.argmax())] for row in probabilities]
  chosen = multi_label.predicted_sets(probabilities, thresholds)
  return [[label for label, keep in zip(files.labels, row) if keep] for row in chosen]


ClassifierFeatures = collections.namedtuple("ClassifierFeatures", ["features"])
ClassifierFeatures.__doc__ = """Featurized texts: features, the model_inputs.Features run."""

ClassifierRecord = collections.namedtuple("ClassifierRecord", ["labels", "probabilities"])
ClassifierRecord.__doc__ = """What the classifier says of one text.

Fields:
  labels: the predicted label (str), or for a multi-label classifier the list of them.
  probabilities: np.float32 [num_labels], in label-list order.
"""


# The runners' one output: [texts, num_labels], in label-list order.
PROBABILITIES = "probabilities"


class ClassifierPredictor(kinds.TextPredictor):
  """A classifier: texts (or text pairs) in, labels and probabilities out."""

  def featurize(self, texts_a, texts_b=None):
    return ClassifierFeatures(featurize(self.model.tokenizer, self.max_seq_length, texts_a,
                                        texts_b, feature_options(self.model.files.settings)))

  def predicted_labels(self, probabilities):
    """Per row of predict()'s probabilities: the most probable label, or, for a multi-label
    classifier, the list of labels that reach their thresholds."""
    return predicted_labels(self.model.files, probabilities)

  def decode(self, featurized, outputs):
    probabilities = outputs[PROBABILITIES]  # [texts, num_labels]
    return [ClassifierRecord(labels, row)
            for labels, row in zip(self.predicted_labels(probabilities), probabilities)]

  def file_text(self, records):
    """label<TAB>probability<TAB>all probabilities per text; for a multi-label classifier,
    its labels joined by its separator<TAB>all probabilities."""
    lines = []
    separator = self.model.files.settings.get("label_separator")
    for record in records:
      row = record.probabilities
      if separator is None:
        head = [record.labels, str(row[self.labels.index(record.labels)])]
      else:
        head = [separator.join(record.labels)]
      lines.append("\t".join(head + [str(p) for p in row]) + "\n")
    return "".join(lines)

  def log_file_run(self, featurized, records, seconds, featurize_seconds):
    _LOGGER.info("Predicted %d text(s) in %.2f s (%.1f texts/s; tokenizing %.2f s).",
                 len(records), seconds, len(records) / max(seconds, 1e-9), featurize_seconds)

  def reply(self, records, truncated, inputs):
    del inputs
    return {"labels": [record.labels for record in records],
            "probabilities": [[float(p) for p in record.probabilities] for record in records],
            "truncated": truncated}


class ClassifierKind(kinds.ServableKind):
  """A sentence (pair) classifier, single- or multi-label (run_classifier_mgpu.py)."""

  name = CLASSIFIER_KIND
  description = "a classifier"
  script = "run_classifier_mgpu.py"
  model_noun = "classifier"
  takes_text_b = True

  def read_assets(self, directory, settings, labels):
    """A multi-label classifier's thresholds (multi_label.DEFAULT_THRESHOLD for a model saved
    without thresholds.json, with a warning)."""
    if not settings.get("multi_label"):
      return {}
    thresholds = multi_label.read_thresholds(directory, labels)
    if thresholds is None:
      _LOGGER.warning("%s has no %s: predicting every label with probability >= %s.",
                      directory, multi_label.THRESHOLDS_FILE, multi_label.DEFAULT_THRESHOLD)
      thresholds = np.full([len(labels)], multi_label.DEFAULT_THRESHOLD)
    return {"thresholds": thresholds}

  def write_assets(self, directory, files):
    super(ClassifierKind, self).write_assets(directory, files)
    if thresholds_of(files) is not None:
      multi_label.write_thresholds(directory, files.labels, thresholds_of(files),
                                   "the thresholds of the exported model")

  def input_rank(self, settings):
    return 3 if is_windowed(settings) else 2

  def outputs(self, files):
    return collections.OrderedDict([
        (PROBABILITIES, model_inputs.OutputSpec((len(files.labels),)))])

  def onnx_outputs(self, files):
    return {PROBABILITIES: ("tensor(float)", [None, len(files.labels)])}

  def text_predictor(self, model, runner):
    return ClassifierPredictor(model, runner)

  def graph(self):
    from bert_mgpu.classifier import serving_graph  # pylint: disable=import-outside-toplevel
    return serving_graph.ClassifierGraph()


kinds.register(ClassifierKind())
