# coding=utf-8
"""The modules a machine without TensorFlow runs (the ONNX Runtime predictor tokenizes and
featurizes texts exactly as training does) import without TensorFlow: each is imported in a
fresh interpreter where any TensorFlow import raises ImportError."""

import subprocess
import sys

import pytest

from cli import REPO_DIR

# The modules that must import without TensorFlow; add a module here to hold it to that.
TF_FREE_MODULES = [
    "bert_mgpu.classifier.featurizing",
    "bert_mgpu.classifier.long_text",
    "bert_mgpu.classifier.class_labels",
    "bert_mgpu.classifier.file_readers",
    "bert_mgpu.classifier.input_examples",
    "bert_mgpu.data.batch_shapes",
    # predict_text.py --backend=onnxruntime: the command and everything it runs
    "predict_text",
    "tokenization",
    "bert_mgpu.command_line_base",
    "bert_mgpu.bert_files",
    "bert_mgpu.serving.model_files",
    "bert_mgpu.serving.model_inputs",
    "bert_mgpu.serving.export_versions",
    "bert_mgpu.serving.batching",
    "bert_mgpu.serving.http_server",
    "bert_mgpu.serving.onnx_predictor",
    "bert_mgpu.serving.kinds",
    "bert_mgpu.task_units",
    # each task unit's servable kind
    "bert_mgpu.classifier.serving",
    "bert_mgpu.ner.serving",
    "bert_mgpu.squad.serving",
    # reading comprehension's windows and n-best answers, for serving it on ONNX Runtime
    "bert_mgpu.squad.data",
    "bert_mgpu.ner.crf_numpy",
]

IMPORT_TIMEOUT_SECONDS = 120

# A None entry in sys.modules makes `import tensorflow` (and its submodules) raise
# ImportError, as on a machine without it.
_IMPORT_WITHOUT_TENSORFLOW = ("import importlib, sys\n"
                              "sys.modules['tensorflow'] = None\n"
                              "importlib.import_module(sys.argv[1])\n")


@pytest.mark.parametrize("module", TF_FREE_MODULES)
def test_module_imports_without_tensorflow(module):
  result = subprocess.run([sys.executable, "-c", _IMPORT_WITHOUT_TENSORFLOW, module],
                          cwd=REPO_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          encoding="utf-8", errors="replace", timeout=IMPORT_TIMEOUT_SECONDS)
  assert result.returncode == 0, result.stderr[-2000:]
