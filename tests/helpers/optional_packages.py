# coding=utf-8
"""Skips for the tests of optional extras: ONNX (TF 2.x only) and faiss (Python 3.10+)."""

import pytest
import tensorflow.compat.v1 as tf

try:
  import onnxruntime  # pylint: disable=g-import-not-at-top
except ImportError:
  onnxruntime = None
try:
  import faiss  # pylint: disable=g-import-not-at-top
except ImportError:
  faiss = None

TF1 = tf.__version__.startswith("1.")
HAS_ONNX = not TF1 and onnxruntime is not None
needs_onnx = pytest.mark.skipif(not HAS_ONNX, reason="the ONNX export and onnxruntime are "
                                "TF 2.x only (not in TF 1.15's venv)")
needs_faiss = pytest.mark.skipif(faiss is None, reason="faiss-cpu is not installed here")
