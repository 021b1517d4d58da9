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
from bert_mgpu.serving import export_versions
from bert_mgpu.serving import kinds as kinds_of_models
from bert_mgpu.serving import model_files
from bert_mgpu.serving import model_inputs
from bert_mgpu.serving import serving_graph
from bert_mgpu.training import checkpoints
from bert_mgpu.training import weight_averages
import multigpu

LoadedModel = collections.namedtuple(
    "LoadedModel", ["files", "bert_config", "tokenizer", "checkpoint", "description"])
LoadedModel.__doc__ = """A trained model ready to build: its files, config, tokenizer, weights.

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


def load_output_dir(output_dir, kinds=None):
  """The model of a training script's --do_train output_dir: best checkpoint first.

  Args:
    kinds: the kinds of model taken (serving/kinds.py names; None: any).

  Raises:
    UsageError: a model file or the checkpoint is missing, or the model is of another kind.
  """
  if not os.path.isdir(output_dir):
    raise UsageError("--output_dir=%s: no such directory." % output_dir)
  kinds = model_files.any_kind() if kinds is None else kinds
  files = model_files.find_model_files(
      output_dir, "train it with this version of %s --do_train, which saves them there." %
      kinds_of_models.scripts_of(kinds), kinds)
  checkpoint, why = checkpoints.checkpoint_for_inference(
      output_dir, None, best_subdir=checkpoints.BEST_SUBDIR)
  return load_model(files, checkpoint, "%s (%s)" % (checkpoint, why))


def load_export(export_dir, kinds=None):
  """The model of an export: `export_dir` is a version directory or the base of several.

  Args:
    kinds: the kinds of model taken (serving/kinds.py names; None: any).

  Raises:
    UsageError: no SavedModel there, one without our assets.extra files, or one of a kind
      not in `kinds`.
  """
  version_dir = export_versions.newest_version_dir(export_dir)
  if not export_versions.has_saved_model(version_dir):
    raise UsageError("%s holds only %s (--export_format=onnx): run it with predict_text.py "
                     "--backend=onnxruntime, or export with --export_format=both for "
                     "TensorFlow." % (version_dir, export_versions.ONNX_FILE))
  kinds = model_files.any_kind() if kinds is None else kinds
  files = model_files.find_model_files(
      export_versions.assets_dir(version_dir), "export the model with %s "
      "--export_dir." % kinds_of_models.scripts_of(kinds), kinds)
  checkpoint = export_versions.checkpoint_of_export(version_dir)
  if not tf.gfile.Exists(checkpoint + ".index"):
    raise UsageError("%s has no variables/variables.index: the export is incomplete; export "
                     "again." % version_dir)
  return load_model(files, checkpoint, "the export %s" % version_dir)


def load_predictor(model, devices, batch_size_per_tower):
  """The kind's TextPredictor of a LoadedModel, its graph on every tower.

  Args:
    model: LoadedModel.
    devices: a checked run_settings.DeviceSettings (towers, precision, XLA, padding).
    batch_size_per_tower: rows (texts, or a kind's windows) per tower per sess.run.
  """
  kind = model.files.kind
  return kind.text_predictor(
      model, kind.graph().tensorflow_runner(model, devices, batch_size_per_tower))


class Predictor(object):
  """A model graph on every tower of a DevicePlan, in one session, built once: runs
  featurized rows (a kind's TextPredictor featurizes and decodes).

  Rows are sorted by length, batched, and each batch is padded only to its longest row; the
  outputs are named (model_inputs.OutputSpec).
  """

  def __init__(self, model, model_fn, devices, batch_size_per_tower, input_names=MODEL_INPUTS):
    """Builds the graph and restores the weights.

    Args:
      model: LoadedModel.
      model_fn: the kind's model function, returning (at least) the kind's outputs()
        (those predict() returns).
      devices: a checked run_settings.DeviceSettings (towers, precision, XLA, padding).
      batch_size_per_tower: rows per tower per sess.run.
      input_names: the int32 [batch, seq] features fed (model_inputs.Features.arrays keys).

    Raises:
      UsageError: the weights do not belong to this model (another task's checkpoint).
    """
    self.model = model
    self.max_seq_length = model.files.settings["max_seq_length"]
    plan = devices.plan.for_inference()
    self.global_batch_size = batch_size_per_tower * plan.num_towers
    # Fed batches are cut to their longest row rounded up to this (None: max_seq_length).
    self.length_multiple = devices.length_multiple
    self._output_specs = model.files.kind.outputs(model.files)
    graph = tf.Graph()
    with graph.as_default():
      self._inputs = serving_graph.serving_inputs(
          input_names, model.files.kind.input_rank(model.files.settings))
      outputs = multigpu.build_inference(
          plan, model_fn, dict(self._inputs), self.global_batch_size,
          precision=devices.precision, use_xla=devices.use_xla)
      self._outputs = {name: outputs[name] for name in self._output_specs}
      serving_graph.check_checkpoint_variables(model.checkpoint, model.files.labels_file,
                                               model.files.kind)
      saver = weight_averages.restore_saver(model.checkpoint, tf.global_variables())
      graph.finalize()
      self._session = tf.Session(graph=graph, config=plan.session_config())
      saver.restore(self._session, model.checkpoint)

  def predict(self, features):
    """The outputs of featurized rows.

    Args:
      features: model_inputs.Features of n rows.

    Returns:
      dict name -> np.ndarray [n, ...], in input order (model_inputs.predict_in_batches).
    """
    return model_inputs.predict_in_batches(
        {name: features.arrays[name] for name in self._inputs}, self.run_batch,
        self.global_batch_size, self.max_seq_length, self.length_multiple,
        self._output_specs)

  def run_batch(self, arrays):
    """The outputs of one batch as fed, uncut: dict name -> array (arrays: the fed inputs,
    [batch, seq] each)."""
    return self._session.run(self._outputs, {self._inputs[name]: arrays[name]
                                             for name in self._inputs})

  def close(self):
    self._session.close()
