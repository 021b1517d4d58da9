# coding=utf-8
"""The factors of --layerwise_lr_decay (bert_mgpu/training/layerwise_lr.py), from Google's
variable names; the optimizers' use of them is tested against NumPy in
tests/model/test_optimization.py, on towers in tests/distributed/."""

import pytest

from bert_mgpu.errors import UsageError
from bert_mgpu.training import layerwise_lr

# A 3-layer BERT classifier's trainable variables (Google's names), the NER CRF's and a
# replica copy.
NAMES = [
    "bert/embeddings/word_embeddings", "bert/embeddings/LayerNorm/gamma",
    "bert/encoder/layer_0/attention/self/query/kernel",
    "bert/encoder/layer_1/output/dense/bias", "bert/encoder/layer_2/output/LayerNorm/beta",
    "bert/pooler/dense/kernel", "output_weights", "output_bias", "crf/transitions",
    "replica_1/bert/encoder/layer_0/attention/self/query/kernel",
    "replica_1/bert/embeddings/word_embeddings",
]


def test_factors_follow_the_depth():
  d = 0.8
  scales = layerwise_lr.learning_rate_scales(NAMES, d)
  assert scales == {
      "bert/embeddings/word_embeddings": d ** 4, "bert/embeddings/LayerNorm/gamma": d ** 4,
      "bert/encoder/layer_0/attention/self/query/kernel": d ** 3,
      "bert/encoder/layer_1/output/dense/bias": d ** 2,
      "bert/encoder/layer_2/output/LayerNorm/beta": d,
      "bert/pooler/dense/kernel": 1.0, "output_weights": 1.0, "output_bias": 1.0,
      "crf/transitions": 1.0,
      "replica_1/bert/encoder/layer_0/attention/self/query/kernel": d ** 3,
      "replica_1/bert/embeddings/word_embeddings": d ** 4,
  }


def test_twelve_layers_give_the_bottom_layer_d_to_the_twelfth():
  names = ["bert/encoder/layer_%d/output/dense/kernel" % i for i in range(12)] + [
      "bert/embeddings/word_embeddings", "cls/squad/output_weights"]
  scales = layerwise_lr.learning_rate_scales(names, 0.9)
  assert scales["bert/encoder/layer_0/output/dense/kernel"] == pytest.approx(0.9 ** 12)
  assert scales["bert/encoder/layer_11/output/dense/kernel"] == pytest.approx(0.9)
  assert scales["bert/embeddings/word_embeddings"] == pytest.approx(0.9 ** 13)
  assert scales["cls/squad/output_weights"] == 1.0


def test_the_log_line_names_the_smallest_and_the_largest():
  line = layerwise_lr.describe(layerwise_lr.learning_rate_scales(NAMES[:9], 0.5))
  assert line.startswith("Layer-wise learning rates: the schedule's times 0.0625 for 2 "
                         "variable(s) (bert/embeddings) ... 1 for 4 variable(s) ("), line
  assert "bert/pooler" in line and "output_weights" in line and "5 factors" in line


@pytest.mark.parametrize("decay", [0.0, -0.5, 1.5])
def test_a_factor_outside_zero_one_is_refused(decay):
  with pytest.raises(UsageError, match="--layerwise_lr_decay=%s: give a factor in" % decay):
    layerwise_lr.learning_rate_scales(NAMES, decay)


def test_a_model_without_layer_names_is_refused():
  with pytest.raises(UsageError, match="no trained variable is in an encoder layer"):
    layerwise_lr.learning_rate_scales(["dense/kernel", "output_bias"], 0.9)
