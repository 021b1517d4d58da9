# coding=utf-8
"""The predictor on ONNX Runtime (predict_text.py --backend=onnxruntime): an export's
model.onnx (or model.int8.onnx) run on the CPU, with no TensorFlow.

The same texts in and the same answers out as the TensorFlow predictor (predictor.py): the
kind's featurizing and decoding (serving/kinds.py) and the length-sorted batches cut to
their longest row are the same code. What the graph of the ONNX export leaves out runs in
NumPy in the kind's runner (e.g. a CRF's Viterbi decoding, ner/serving.py; docs/SERVING.md).
A serving machine needs NumPy, onnxruntime and absl-py only.
"""

import collections
import json
import os


from bert_mgpu import bert_files
from bert_mgpu.data.batch_shapes import MODEL_INPUTS
from bert_mgpu.errors import UsageError
from bert_mgpu.serving import export_versions
from bert_mgpu.serving import kinds
from bert_mgpu.serving import model_files
from bert_mgpu.serving import model_inputs

OnnxModel = collections.namedtuple(
    "OnnxModel", ["files", "tokenizer", "onnx_path", "assets", "description"])
OnnxModel.__doc__ = """An export's ONNX model and its files, checked, before its session.

Fields:
  files: model_files.ModelFiles (from the version's assets.extra/).
  tokenizer: tokenization.FullTokenizer with the trained do_lower_case.
  onnx_path: the .onnx file to run.
  assets: dict of what the kind reads for ONNX Runtime (ServableKind.read_onnx_assets, e.g.
    a CRF's transitions).
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
      assets, "export the model with %s --export_dir." % kinds.scripts_of(model_files.any_kind()))
  onnx_path = onnx_file_path(version_dir, onnx_file)
  if not os.path.isfile(onnx_path):
    int8 = os.path.basename(onnx_path) == export_versions.ONNX_INT8_FILE
    raise UsageError("%s: no such ONNX model; export one with %s --export_dir=... "
                     "--export_format=onnx (or both)%s." % (
                         onnx_path, files.kind.script,
                         " --onnx_int8" if int8 else ""))
  tokenizer = bert_files.checked_tokenizer(
      files.vocab_file, files.settings["do_lower_case"], _vocab_size(files.bert_config_file),
      files.bert_config_file,
      literal_special_tokens=bool(files.settings.get("literal_special_tokens", False)))
  return OnnxModel(files, tokenizer, onnx_path, files.kind.read_onnx_assets(assets, files),
                   "the ONNX model %s" % onnx_path)


def _expected_interface(files):
  """The inputs and the outputs the predictor needs of a model of these files: each a dict
  name -> (ONNX type, shape), None in a shape for a dimension of any size."""
  rank = files.kind.input_rank(files.settings)
  inputs = {name: ("tensor(int32)", [None] * rank) for name in MODEL_INPUTS}
  return inputs, files.kind.onnx_outputs(files)


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
          model.files.kind.description, len(model.files.labels),
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


class OnnxRun(object):
  """An ONNX Runtime session run on featurized rows in length-sorted batches: a kind's
  runner (ServableKind.onnx_runner), returning the model's outputs by name; a kind whose
  outputs are computed from the model's (a CRF decoded in NumPy) overrides run_batch."""

  def __init__(self, model, session, batch_size, length_multiple):
    """Args:
      model: OnnxModel; session: open_session(model).
      batch_size: rows (texts, or a kind's windows) per session.run.
      length_multiple: batches are cut to their longest row rounded up to this (None:
        every batch is max_seq_length long).

    predict() returns the kind's outputs() (by default, the ONNX model's of those names).
    """
    self.model = model
    self.max_seq_length = model.files.settings["max_seq_length"]
    self._session = session
    self._batch_size = batch_size
    self._length_multiple = length_multiple
    self._output_specs = model.files.kind.outputs(model.files)

  def run_batch(self, arrays):
    """The outputs of one batch: dict name -> array (arrays: the Features' arrays, cut)."""
    names = list(self._output_specs)
    values = self._session.run(names, {name: arrays[name] for name in MODEL_INPUTS})
    return dict(zip(names, values))

  def predict(self, features):
    """The outputs of featurized rows (model_inputs.Features): dict name -> [n, ...], in
    input order (model_inputs.predict_in_batches)."""
    return model_inputs.predict_in_batches(
        features.arrays, self.run_batch, self._batch_size, self.max_seq_length,
        self._length_multiple, self._output_specs)

  def close(self):
    self._session = None


def make_predictor(model, session, batch_size, length_multiple=1):
  """The kind's TextPredictor of an OnnxModel and its session.

  Args:
    model: OnnxModel; session: open_session(model).
    batch_size: rows (texts, or a kind's windows) per session.run.
    length_multiple: see OnnxRun.
  """
  kind = model.files.kind
  return kind.text_predictor(model,
                             kind.onnx_runner(model, session, batch_size, length_multiple))


def load_predictor(export_dir, onnx_file=None, batch_size=32, threads=None,
                   length_multiple=1):
  """make_predictor() of an export's ONNX model (load_model, open_session).

  Raises:
    UsageError: see load_model and open_session.
  """
  model = load_model(export_dir, onnx_file)
  return make_predictor(model, open_session(model, threads), batch_size, length_multiple)
