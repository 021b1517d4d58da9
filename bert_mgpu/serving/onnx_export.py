# coding=utf-8
"""The ONNX export (--export_format=onnx|both, --onnx_int8): model.onnx, and model.int8.onnx
with its weights quantized to int8, in the export's version directory (docs/SERVING.md).

tf2onnx converts the frozen serving graph, with only numeric outputs (the labels,
multi-label thresholds and CRF decoding are NumPy's in the predictor), inputs and outputs
renamed to plain names (input_ids, input_mask, segment_ids; probabilities, tag_ids), every
dimension dynamic. model.onnx is standard ONNX (opset 17), so any ONNX runtime takes it;
ONNX Runtime applies its graph optimizations when it loads the model. --onnx_int8 adds ONNX
Runtime's dynamic quantization: int8 weights, activations quantized per batch.

TF 2.x only: the releases of tf2onnx and onnxruntime for Python 3.7 need NumPy 1.21 or
newer, and TF 1.15 runs on NumPy below 1.19.
"""

import collections
import contextlib
import copy
import gc
import importlib
import logging
import os

import tensorflow.compat.v1 as tf

from bert_mgpu.errors import UsageError
from bert_mgpu.serving.export_versions import ONNX_FILE, ONNX_INT8_FILE

EXPORT_FORMATS = ("savedmodel", "onnx", "both")
OPSET = 17

ExportFormat = collections.namedtuple("ExportFormat", ["name", "onnx_int8"],
                                      defaults=("savedmodel", False))
ExportFormat.__doc__ = """What an export writes.

Fields:
  name: --export_format: "savedmodel", "onnx" or "both" (EXPORT_FORMATS).
  onnx_int8: --onnx_int8, also model.int8.onnx.
"""

# What the [onnx] extra installs (pyproject.toml).
_PACKAGES = ("tf2onnx", "onnx", "onnxruntime")


def writes_savedmodel(export_format):
  return export_format in ("savedmodel", "both")


def writes_onnx(export_format):
  return export_format in ("onnx", "both")


def check_export_format(export_format, onnx_int8):
  """Refuses, before any work, an ONNX export this installation cannot write.

  Raises:
    UsageError: one line: an unknown format, --onnx_int8 without ONNX, TF 1.15, or tf2onnx,
      onnx or onnxruntime missing.
  """
  if export_format not in EXPORT_FORMATS:
    raise UsageError("--export_format=%s: use one of %s." % (export_format,
                                                             ", ".join(EXPORT_FORMATS)))
  if onnx_int8 and not writes_onnx(export_format):
    raise UsageError("--onnx_int8 quantizes the ONNX export: add --export_format=onnx (or "
                     "both).")
  if not writes_onnx(export_format):
    return
  if tf.__version__.startswith("1."):
    raise UsageError("--export_format=%s needs TensorFlow 2.x: tf2onnx and onnxruntime for "
                     "Python 3.7 need NumPy 1.21 or newer, which TF %s cannot use. Export "
                     "the trained --output_dir again under TF 2.x (--export_dir=... "
                     "--export_format=%s)." % (export_format, tf.__version__, export_format))
  missing = []
  for name in _PACKAGES:
    try:
      importlib.import_module(name)  # imported now, so that a broken install stops the run
    except ImportError:              # before training, not at the export after it
      missing.append(name)
    except Exception as e:  # pylint: disable=broad-except
      raise UsageError("--export_format=%s: %s is installed but does not import (%s: %s); "
                       "reinstall it (pip install \".[onnx]\" in the repo)." % (
                           export_format, name, type(e).__name__, " ".join(str(e).split())))
  if missing:
    raise UsageError("--export_format=%s needs %s, which %s not installed: pip install "
                     "tf2onnx onnx onnxruntime (the [onnx] extra: pip install \".[onnx]\" in "
                     "the repo)." % (export_format, ", ".join(missing),
                                     "is" if len(missing) == 1 else "are"))


def _plain_names(model, renames):
  """Renames graph inputs and outputs everywhere in `model` ({"input_ids:0": "input_ids"})."""
  for value in list(model.graph.input) + list(model.graph.output):
    value.name = renames.get(value.name, value.name)
  for node in model.graph.node:
    node.input[:] = [renames.get(name, name) for name in node.input]
    node.output[:] = [renames.get(name, name) for name in node.output]


class _CopyCollectingFirst(object):
  """The `copy` module, but deepcopy() runs a full garbage collection first."""

  def __getattr__(self, name):
    return getattr(copy, name)

  @staticmethod
  def deepcopy(value, memo=None):
    gc.collect()
    return copy.deepcopy(value, memo)


@contextlib.contextmanager
def collecting_before_each_graph_copy(optimizer_module):
  """Bounds tf2onnx's memory: its optimize_graph deep-copies the whole graph, weights
  included, before each of its optimizers, and the copies sit in reference cycles until a full
  garbage collection. A BERT-base export grew past 24 GB and was killed; with a collection
  before each copy it peaks at about 7 GB.

  Args:
    optimizer_module: tf2onnx.optimizer (whose `copy` is replaced while the context lasts).
  """
  if not hasattr(optimizer_module, "copy"):  # another tf2onnx: nothing to bound
    yield
    return
  original = optimizer_module.copy
  optimizer_module.copy = _CopyCollectingFirst()
  try:
    yield
  finally:
    optimizer_module.copy = original


def write_onnx(sess, inputs, outputs, directory, int8=False):
  """Writes directory/model.onnx (and model.int8.onnx) of the graph in `sess`.

  Args:
    sess: a session of the serving graph with its weights restored.
    inputs: dict name -> placeholder (input_ids, input_mask, segment_ids).
    outputs: dict name -> numeric tensor; each is an output of the ONNX model by its name.
    directory: the export's version directory (being assembled).
    int8: also write the dynamically quantized model.
  """
  # Imported here: only an ONNX export needs them (check_export_format said they import).
  import onnx  # pylint: disable=import-outside-toplevel
  import tf2onnx  # pylint: disable=import-outside-toplevel
  import tf2onnx.optimizer  # pylint: disable=import-outside-toplevel
  from onnxruntime import quantization  # pylint: disable=import-outside-toplevel
  if not outputs:
    raise ValueError("an ONNX model needs at least one output")
  step = "freezing the graph"
  try:
    frozen = tf.graph_util.convert_variables_to_constants(
        sess, sess.graph.as_graph_def(), [tensor.op.name for tensor in outputs.values()])
    step = "tf2onnx's conversion"
    logging.getLogger("tf2onnx").setLevel(logging.WARNING)
    with collecting_before_each_graph_copy(tf2onnx.optimizer):
      model, _ = tf2onnx.convert.from_graph_def(
          frozen, input_names=[tensor.name for tensor in inputs.values()],
          output_names=[tensor.name for tensor in outputs.values()], opset=OPSET)
    _plain_names(model, {tensor.name: name for name, tensor in
                         list(inputs.items()) + list(outputs.items())})
    step = "writing " + ONNX_FILE
    path = os.path.join(directory, ONNX_FILE)
    onnx.save(model, path)
    if int8:
      step = "the int8 quantization"
      quantization.quantize_dynamic(path, os.path.join(directory, ONNX_INT8_FILE),
                                    weight_type=quantization.QuantType.QInt8)
  except Exception as e:  # pylint: disable=broad-except
    raise UsageError("the ONNX export failed at %s (%s: %s); nothing was exported." % (
        step, type(e).__name__, " ".join(str(e).split())[:300]))
