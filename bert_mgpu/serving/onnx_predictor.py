# coding=utf-8
"""The predictor on ONNX Runtime (predict_text.py --backend=onnxruntime): an export's
model.onnx (or model.int8.onnx) run on the CPU, with no TensorFlow.

The same texts in and the same answers out as the TensorFlow predictor (predictor.py):
featurizing, length-sorted batches cut to their longest text, labels and multi-label
thresholds, NER windows and entities are the same code. What the graph of the ONNX export
leaves out runs here in NumPy: a CRF's Viterbi decoding over crf_transitions.json
(docs/SERVING.md). A serving machine needs NumPy, onnxruntime and absl-py only.
"""

import collections
import json
import os

import numpy as np

from bert_mgpu import command_line_base
from bert_mgpu.data.batch_shapes import MODEL_INPUTS
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import crf_numpy
from bert_mgpu.ner import text_predictor
from bert_mgpu.serving import export_versions
from bert_mgpu.serving import model_files
from bert_mgpu.serving import model_inputs

OnnxModel = collections.namedtuple(
    "OnnxModel", ["files", "tokenizer", "onnx_path", "crf_transitions", "description"])
OnnxModel.__doc__ = """An export's ONNX model and its files, checked, before its session.

Fields:
  files: model_files.ModelFiles (from the version's assets.extra/).
  tokenizer: tokenization.FullTokenizer with the trained do_lower_case.
  onnx_path: the .onnx file to run.
  crf_transitions: float32 [tags, tags] of an NER model with a CRF, else None.
  description: what runs, for the log.
"""


def cgroup_cpu_limit(cgroup_root="/sys/fs/cgroup"):
  """The CPUs a container's CPU quota allows (rounded up), or None without a quota.

  Reads cgroup v2's cpu.max ("200000 100000": 2 CPUs; "max 100000": none) or v1's
  cpu/cpu.cfs_quota_us and cpu.cfs_period_us (quota -1: none).
  """
  def read(name):
    try:
      with open(os.path.join(cgroup_root, name)) as f:
        return f.read().split()
    except (OSError, ValueError):
      return None
  fields = read("cpu.max")
  if fields and len(fields) == 2 and fields[0] != "max":
    quota, period = fields
  else:
    quota, period = (read("cpu/cpu.cfs_quota_us") or [None])[0], (
        read("cpu/cpu.cfs_period_us") or [None])[0]
  try:
    quota, period = int(quota), int(period)
  except (TypeError, ValueError):
    return None
  if quota <= 0 or period <= 0:
    return None
  return max(1, -(-quota // period))


def usable_cpus():
  """The CPUs this process may use: its affinity mask (taskset, container CPU sets), capped
  by a container's CPU quota (Kubernetes' CPU limit)."""
  if hasattr(os, "sched_getaffinity"):
    cpus = len(os.sched_getaffinity(0))
  else:
    cpus = os.cpu_count() or 1
  limit = cgroup_cpu_limit()
  return min(cpus, limit) if limit else cpus


def import_onnxruntime():
  """onnxruntime, or one line saying how to install it. Raises UsageError."""
  try:
    import onnxruntime  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise UsageError("--backend=onnxruntime needs the onnxruntime package, which does not "
                     "import here (%s): pip install onnxruntime (the repo's [onnx-serving] "
                     "extra: pip install \".[onnx-serving]\")." % " ".join(str(e).split()))
  return onnxruntime


def _vocab_size(config_file):
  """vocab_size of a bert_config.json, read without modeling.py (which imports TensorFlow)."""
  try:
    with open(config_file, "r", encoding="utf-8") as f:
      return int(json.load(f)["vocab_size"])
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise UsageError("%s: cannot read vocab_size from it (%s); export the model again." %
                     (config_file, e))


def onnx_file_path(version_dir, onnx_file=None):
  """Where --onnx_file points: a bare file name is in the version directory (default
  model.onnx); a value with a directory in it is a path, relative to the working directory."""
  name = onnx_file or export_versions.ONNX_FILE
  if os.path.dirname(name):
    return os.path.abspath(name)
  return os.path.join(version_dir, name)


def load_model(export_dir, onnx_file=None):
  """The OnnxModel of an export: `export_dir` is a version directory or the base of several.

  Args:
    export_dir: --export_dir.
    onnx_file: the ONNX file to run (onnx_file_path): a name in the version directory
      (default model.onnx, e.g. model.int8.onnx) or a path.

  Raises:
    UsageError: no export there, no such ONNX file in it, or its model files are missing.
  """
  version_dir = export_versions.newest_version_dir(export_dir)
  assets = export_versions.assets_dir(version_dir)
  files = model_files.find_model_files(
      assets, "export the model with run_classifier_mgpu.py or run_ner_mgpu.py --export_dir.",
      model_files.ANY_KIND)
  onnx_path = onnx_file_path(version_dir, onnx_file)
  if not os.path.isfile(onnx_path):
    int8 = os.path.basename(onnx_path) == export_versions.ONNX_INT8_FILE
    raise UsageError("%s: no such ONNX model; export one with %s --export_dir=... "
                     "--export_format=onnx (or both)%s." % (
                         onnx_path, model_files.kind_script(files.settings["model"]),
                         " --onnx_int8" if int8 else ""))
  tokenizer = command_line_base.checked_tokenizer(
      files.vocab_file, files.settings["do_lower_case"], _vocab_size(files.bert_config_file),
      files.bert_config_file,
      literal_special_tokens=bool(files.settings.get("literal_special_tokens", False)))
  transitions = None
  if files.settings["model"] == model_files.NER_KIND and files.settings["use_crf"]:
    path = os.path.join(assets, crf_numpy.CRF_TRANSITIONS_FILE)
    if not os.path.isfile(path):
      raise UsageError("%s has no %s, which decodes the CRF outside the graph: export the "
                       "model again with run_ner_mgpu.py --export_format=onnx (or both)." %
                       (assets, crf_numpy.CRF_TRANSITIONS_FILE))
    transitions = crf_numpy.read_transitions(path, files.labels)
  return OnnxModel(files, tokenizer, onnx_path, transitions, "the ONNX model %s" % onnx_path)


def _expected_interface(files):
  """The inputs and the outputs the predictor needs of a model of these files: each a dict
  name -> (ONNX type, shape), None in a shape for a dimension of any size."""
  rank = 3 if model_inputs.is_windowed(files.settings) else 2
  inputs = {name: ("tensor(int32)", [None] * rank) for name in MODEL_INPUTS}
  num_labels = len(files.labels)
  if files.settings["model"] != model_files.NER_KIND:
    return inputs, {"probabilities": ("tensor(float)", [None, num_labels])}
  outputs = {"probabilities": ("tensor(float)", [None, None, num_labels])}
  if not files.settings["use_crf"]:
    outputs["tag_ids"] = ("tensor(int32)", [None, None])
  return inputs, outputs


def _fits(value, wanted):
  """Whether an ONNX input or output (NodeArg) has the wanted type and shape; a dimension the
  model leaves dynamic (a name, not a number) fits any."""
  kind, shape = wanted
  return value.type == kind and len(value.shape) == len(shape) and all(
      size is None or not isinstance(dimension, int) or dimension == size
      for dimension, size in zip(value.shape, shape))


def _describe(name, kind, shape):
  """e.g. "probabilities float [?, 15]"."""
  sizes = ", ".join(str(d) if isinstance(d, int) else "?" for d in shape)
  return "%s %s [%s]" % (name, kind[len("tensor("):-1], sizes)


def _check_interface(session, model):
  """Raises UsageError unless the session takes the export's inputs and gives the outputs
  the predictor reads, with this model's label count (a model.onnx of another export)."""
  inputs, outputs = _expected_interface(model.files)
  found_inputs = {i.name: i for i in session.get_inputs()}
  found_outputs = {o.name: o for o in session.get_outputs()}
  if (set(found_inputs) == set(inputs) and
      all(_fits(found_inputs[name], wanted) for name, wanted in inputs.items()) and
      all(name in found_outputs and _fits(found_outputs[name], wanted)
          for name, wanted in outputs.items())):
    return
  raise UsageError(
      "%s is not a model of this export: it takes %s and gives %s; %s with %d labels needs "
      "%s and %s. Give the model.onnx (or model.int8.onnx) of the same export." % (
          model.onnx_path,
          ", ".join(_describe(v.name, v.type, v.shape) for v in found_inputs.values()),
          ", ".join(_describe(v.name, v.type, v.shape) for v in found_outputs.values()),
          model_files.kind_name(model.files.settings["model"]), len(model.files.labels),
          ", ".join(_describe(n, *w) for n, w in sorted(inputs.items())),
          ", ".join(_describe(n, *w) for n, w in outputs.items())))


def open_session(model, threads=None):
  """An ONNX Runtime session of the model on the CPU, its interface checked.

  Args:
    model: OnnxModel.
    threads: intra-op threads; None: usable_cpus().

  Raises:
    UsageError: onnxruntime is missing, the file is not an ONNX model it can run, or the
      model's inputs or outputs are not this export's (_check_interface).
  """
  onnxruntime = import_onnxruntime()
  options = onnxruntime.SessionOptions()
  options.intra_op_num_threads = threads or usable_cpus()
  options.inter_op_num_threads = 1
  options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
  try:
    session = onnxruntime.InferenceSession(model.onnx_path, options,
                                           providers=["CPUExecutionProvider"])
  except Exception as e:  # pylint: disable=broad-except
    raise UsageError("%s: ONNX Runtime cannot load it (%s: %s); give a model.onnx written "
                     "by --export_format=onnx." % (model.onnx_path, type(e).__name__,
                                                   " ".join(str(e).split())[:300]))
  _check_interface(session, model)
  return session


class _OnnxRun(object):
  """An ONNX Runtime session and how its batches are cut; what both predictors share."""

  def __init__(self, model, session, batch_size, length_multiple=1):
    """Args:
      model: OnnxModel; session: open_session(model).
      batch_size: texts (NER: windows) per session.run.
      length_multiple: batches are cut to their longest text rounded up to this (None:
        every batch is max_seq_length long).
    """
    self.model = model
    self.max_seq_length = model.files.settings["max_seq_length"]
    self._session = session
    self._batch_size = batch_size
    self._length_multiple = length_multiple

  def _predict_in_batches(self, arrays, run_batch, num_outputs=None):
    return model_inputs.predict_in_batches(arrays, run_batch, self._batch_size,
                                           self.max_seq_length, self._length_multiple,
                                           num_outputs)

  def close(self):
    self._session = None


class OnnxPredictor(_OnnxRun):
  """A classifier on ONNX Runtime: featurize(), predict(), predicted_labels(), close(), as
  predictor.Predictor."""

  def __init__(self, model, session, batch_size, length_multiple=1):
    super(OnnxPredictor, self).__init__(model, session, batch_size, length_multiple)
    self.labels = model.files.labels

  def featurize(self, texts_a, texts_b=None):
    return model_inputs.featurize(self.model.tokenizer, self.max_seq_length, texts_a, texts_b,
                                  model_files.feature_options(self.model.files.settings))

  def predict(self, features):
    """Class probabilities of featurized texts: np.float32 [n, num_labels], in input order."""
    def run_batch(arrays):
      return self._session.run(["probabilities"], arrays)[0]
    return self._predict_in_batches({name: features.arrays[name] for name in MODEL_INPUTS},
                                    run_batch, len(self.labels))

  def predicted_labels(self, probabilities):
    return model_files.predicted_labels(self.model.files, probabilities)


class OnnxTagger(_OnnxRun):
  """An NER model's windows on ONNX Runtime: tag ids, decoded in NumPy with a CRF."""

  def _run_batch(self, arrays):
    """int32 [batch, max_seq_length] tag ids of one batch of windows (cut to its longest)."""
    feed = {name: arrays[name] for name in MODEL_INPUTS}
    if self.model.crf_transitions is None:
      tag_ids = self._session.run(["tag_ids"], feed)[0]
    else:
      tag_ids = crf_tag_ids(self._session.run(["probabilities"], feed)[0],
                            arrays["tag_mask"], self.model.crf_transitions)
    padded = np.zeros([len(tag_ids), self.max_seq_length], np.int32)
    padded[:, :tag_ids.shape[1]] = tag_ids
    return padded

  def predict(self, features):
    """Tag ids of featurized windows: np.int32 [windows, max_seq_length]."""
    return self._predict_in_batches(features.arrays, self._run_batch)


def crf_tag_ids(probabilities, tag_mask, transitions):
  """The CRF's tags of a batch, as the TensorFlow graph decodes them: Viterbi over each
  window's first pieces (tag_mask), 0 elsewhere.

  Args:
    probabilities: float [batch, seq, tags] of the ONNX model (their logarithms give the
      Viterbi path of the logits: a constant per position changes no path).
    tag_mask: int [batch, seq], 1 on the first piece of each token.
    transitions: float [tags, tags] (crf_numpy).

  Returns:
    int32 [batch, seq].
  """
  tags = np.zeros(tag_mask.shape, np.int32)
  with np.errstate(divide="ignore"):  # a probability of 0 is a score of -inf
    scores = np.log(probabilities)
  for row in range(len(tags)):
    positions = np.flatnonzero(tag_mask[row])
    tags[row, positions] = crf_numpy.viterbi_decode(scores[row, positions], transitions)
  return tags


def make_predictor(model, session, batch_size, length_multiple=1):
  """The predictor of an OnnxModel and its session: an OnnxPredictor (classifier) or a
  text_predictor.NerPredictor around an OnnxTagger.

  Args:
    model: OnnxModel; session: open_session(model).
    batch_size: texts (NER: windows) per session.run.
    length_multiple: see OnnxPredictor.
  """
  if model_files.is_ner(model):
    return text_predictor.NerPredictor(
        model, OnnxTagger(model, session, batch_size, length_multiple))
  return OnnxPredictor(model, session, batch_size, length_multiple)


def load_predictor(export_dir, onnx_file=None, batch_size=32, threads=None,
                   length_multiple=1):
  """make_predictor() of an export's ONNX model (load_model, open_session).

  Raises:
    UsageError: see load_model and open_session.
  """
  model = load_model(export_dir, onnx_file)
  return make_predictor(model, open_session(model, threads), batch_size, length_multiple)
