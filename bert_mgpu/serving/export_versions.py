# coding=utf-8
"""Which version of an export to load: the versioned directories under --export_dir, what
makes one complete, and the names of the files in it (docs/SERVING.md).

No TensorFlow import: predict_text.py --backend=onnxruntime finds its model.onnx here.
"""

import logging
import os

from bert_mgpu.errors import UsageError
from bert_mgpu.serving import kinds

# Files the model graph does not read go here; TF Serving and Triton ignore the directory.
EXPORT_ASSETS_DIR = "assets.extra"
SAVED_MODEL_FILE = "saved_model.pb"
ONNX_FILE = "model.onnx"
ONNX_INT8_FILE = "model.int8.onnx"

# TensorFlow's logger (tf.get_logger() is this logger on TF 1.15 and 2.x).
_LOGGER = logging.getLogger("tensorflow")


def version_numbers(export_base):
  """The numbers of the numbered directories under `export_base`, ascending (complete or not)."""
  if not os.path.isdir(export_base):
    return []
  return sorted(int(name) for name in os.listdir(export_base)
                if name.isdigit() and os.path.isdir(os.path.join(export_base, name)))


def _is_complete_version(version_dir):
  """A version directory holds a SavedModel, an ONNX model (--export_format=onnx), or both."""
  return any(os.path.isfile(os.path.join(version_dir, name))
             for name in (SAVED_MODEL_FILE, ONNX_FILE))


def has_saved_model(version_dir):
  return os.path.isfile(os.path.join(version_dir, SAVED_MODEL_FILE))


def newest_version_dir(export_dir):
  """`export_dir` itself when it is a version directory, else its highest complete one.

  A numbered directory without saved_model.pb or model.onnx (left by a crash) is skipped
  with a warning.

  Raises:
    UsageError: neither.
  """
  if _is_complete_version(export_dir):
    return export_dir
  for version in reversed(version_numbers(export_dir)):
    version_dir = os.path.join(export_dir, str(version))
    if _is_complete_version(version_dir):
      return version_dir
    _LOGGER.warning("Skipping %s: it holds no %s or %s (left by a crashed export?).",
                    version_dir, SAVED_MODEL_FILE, ONNX_FILE)
  raise UsageError("--export_dir=%s holds no export (no %s or %s, in it or in a numbered "
                   "version directory): export one with %s --export_dir=%s "
                   "--output_dir=<trained model>." % (
                       export_dir, SAVED_MODEL_FILE, ONNX_FILE,
                       kinds.scripts_of(kinds.names()), export_dir))


def checkpoint_of_export(version_dir):
  """The weights of a SavedModel version directory (its variables/ is a checkpoint)."""
  return os.path.join(version_dir, "variables", "variables")


def assets_dir(version_dir):
  """Where a version keeps the model files (vocab, config, labels, settings)."""
  return os.path.join(version_dir, EXPORT_ASSETS_DIR)
