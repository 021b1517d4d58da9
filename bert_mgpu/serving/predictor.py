# coding=utf-8
"""The predictor: a trained model (an output_dir or an export) loaded once and run on every
tower, texts sorted by length and batched.
"""

import collections
import os

import tensorflow.compat.v1 as tf

from bert_mgpu import bert_files
from bert_mgpu.data.batch_shapes import MODEL_INPUTS
from bert_mgpu.errors import UsageError
from bert_mgpu.serving import export
from bert_mgpu.serving import export_versions
from bert_mgpu.serving import model_files
from bert_mgpu.serving import model_inputs
from bert_mgpu.serving import serving_graph
from bert_mgpu.training import checkpoints
import multigpu

LoadedModel = collections.namedtuple(
    "LoadedModel", ["files", "bert_config", "tokenizer", "checkpoint", "description"])
LoadedModel.__doc__ = """A classifier ready to build: its files, config, tokenizer, weights.

Fields:
  files: model_files.ModelFiles.
  bert_config: modeling.BertConfig.
  tokenizer: tokenization.FullTokenizer with the trained do_lower_case.
  checkpoint: the weights (a checkpoint path; for an export, its variables/variables).
  description: where the weights come from, for the log.
"""


def load_model(files, checkpoint, description):
  """A LoadedModel of checked model files and the weights to use."""
  max_seq_length = files.settings["max_seq_length"]
  bert_config = bert_files.load_bert_config(files.bert_config_file, max_seq_length)
  tokenizer = bert_files.load_tokenizer(
      files.vocab_file, files.settings["do_lower_case"], bert_config, files.bert_config_file,
      literal_special_tokens=bool(files.settings.get("literal_special_tokens", False)))
  return LoadedModel(files, bert_config, tokenizer, checkpoint, description)


def load_output_dir(output_dir, kinds=(model_files.CLASSIFIER_KIND,)):
  """The model of a run_classifier_mgpu.py (or, in `kinds`, run_ner_mgpu.py) --do_train
  output_dir: best checkpoint first.

  Raises:
    UsageError: a model file or the checkpoint is missing, or the model is of another kind.
  """
  if not os.path.isdir(output_dir):
    raise UsageError("--output_dir=%s: no such directory." % output_dir)
  files = model_files.find_model_files(
      output_dir, "train it with this version of %s --do_train, which saves them there." %
      " or ".join(model_files.kind_script(k) for k in kinds), kinds)
  checkpoint, why = checkpoints.checkpoint_for_inference(output_dir, None, best_subdir="best")
  return load_model(files, checkpoint, "%s (%s)" % (checkpoint, why))


def load_export(export_dir, kinds=(model_files.CLASSIFIER_KIND,)):
  """The model of an export: `export_dir` is a version directory or the base of several.

  Raises:
    UsageError: no SavedModel there, one without our assets.extra files, or one of a kind
      not in `kinds`.
  """
  version_dir = export_versions.newest_version_dir(export_dir)
  if not export_versions.has_saved_model(version_dir):
    raise UsageError("%s holds only %s (--export_format=onnx): run it with predict_text.py "
                     "--backend=onnxruntime, or export with --export_format=both for "
                     "TensorFlow." % (version_dir, export_versions.ONNX_FILE))
  files = model_files.find_model_files(
      export_versions.assets_dir(version_dir), "export the model with %s "
      "--export_dir." % " or ".join(model_files.kind_script(k) for k in kinds), kinds)
  checkpoint = export.checkpoint_of_export(version_dir)
  if not tf.gfile.Exists(checkpoint + ".index"):
    raise UsageError("%s has no variables/variables.index: the export is incomplete; export "
                     "again." % version_dir)
  return load_model(files, checkpoint, "the export %s" % version_dir)


class Predictor(object):
  """A model graph on every tower of a DevicePlan, in one session, built once.

  Texts are sorted by length, batched, and each batch is padded only to its longest text.
  A classifier by default; as the tagger of an NER model (ner/serving.load_predictor) it feeds
  tag_mask too and reads tag_ids.
  """

  def __init__(self, model, model_fn, devices, batch_size_per_tower, input_names=MODEL_INPUTS,
               output_name="probabilities"):
    """Builds the graph and restores the weights.

    Args:
      model: LoadedModel.
      model_fn: bert_mgpu.classifier.model.create_model_fn(bert_config, num_labels), or another
        model_fn whose `output_name` output is [batch, ...] with a fixed shape after the
        batch (ner_model's pads its outputs back to max_seq_length).
      devices: a checked run_settings.DeviceSettings (towers, precision, XLA, padding).
      batch_size_per_tower: texts per tower per sess.run.
      input_names: the int32 [batch, seq] features fed (model_inputs.Features.arrays keys).
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
      self._inputs = serving_graph.serving_inputs(
          input_names, model_inputs.is_windowed(model.files.settings))
      self._output_name = output_name
      self._output = multigpu.build_inference(
          plan, model_fn, dict(self._inputs), self.global_batch_size,
          precision=devices.precision, use_xla=devices.use_xla)[output_name]
      serving_graph.check_checkpoint_variables(model.checkpoint, model.files.labels_file,
                                               model.files.settings["model"])
      saver = tf.train.Saver(tf.global_variables())
      graph.finalize()
      self._session = tf.Session(graph=graph, config=plan.session_config())
      saver.restore(self._session, model.checkpoint)

  def featurize(self, texts_a, texts_b=None):
    return model_inputs.featurize(self.model.tokenizer, self.max_seq_length, texts_a, texts_b,
                                  model_files.feature_options(self.model.files.settings))

  def predict(self, features):
    """Class probabilities (or the chosen output) of featurized texts.

    Args:
      features: model_inputs.Features of n texts.

    Returns:
      np.float32 [n, num_labels], in input order, columns in label-list order (another
      output: its rows, in input order).
    """
    def run_batch(arrays):
      return self._session.run(self._output, {self._inputs[name]: arrays[name]
                                              for name in self._inputs})
    return model_inputs.predict_in_batches(
        {name: features.arrays[name] for name in self._inputs}, run_batch,
        self.global_batch_size, self.max_seq_length, self.length_multiple,
        len(self.labels) if self._output_name == "probabilities" else None)

  def predicted_labels(self, probabilities):
    """Per row of predict()'s probabilities: the most probable label, or, for a multi-label
    classifier, the list of labels that reach their thresholds."""
    return model_files.predicted_labels(self.model.files, probabilities)

  def close(self):
    self._session.close()
