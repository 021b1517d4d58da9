# coding=utf-8
"""The tools that start ours and Hugging Face's classifier from the same weights
(benchmarks/weight_names.py, benchmarks/checkpoint_npz.py), without torch."""

import sys

import numpy as np
import pytest

import cli

sys.path.insert(0, cli.script_path("benchmarks"))

import checkpoint_npz  # pylint: disable=wrong-import-position
import weight_names  # pylint: disable=wrong-import-position

HIDDEN, INTERMEDIATE, LAYERS, VOCAB, LABELS = 16, 32, 2, 30, 3


def hf_parameters():
  """transformers' BertForSequenceClassification parameter names and shapes for the
  tiny config below (transformers' naming, written out)."""
  params = {"bert.embeddings.word_embeddings.weight": (VOCAB, HIDDEN),
            "bert.embeddings.position_embeddings.weight": (64, HIDDEN),
            "bert.embeddings.token_type_embeddings.weight": (2, HIDDEN),
            "bert.embeddings.LayerNorm.weight": (HIDDEN,),
            "bert.embeddings.LayerNorm.bias": (HIDDEN,),
            "bert.pooler.dense.weight": (HIDDEN, HIDDEN), "bert.pooler.dense.bias": (HIDDEN,),
            "classifier.weight": (LABELS, HIDDEN), "classifier.bias": (LABELS,)}
  for i in range(LAYERS):
    layer = "bert.encoder.layer.%d." % i
    for dense, (out, inp) in (("attention.self.query", (HIDDEN, HIDDEN)),
                              ("attention.self.key", (HIDDEN, HIDDEN)),
                              ("attention.self.value", (HIDDEN, HIDDEN)),
                              ("attention.output.dense", (HIDDEN, HIDDEN)),
                              ("intermediate.dense", (INTERMEDIATE, HIDDEN)),
                              ("output.dense", (HIDDEN, INTERMEDIATE))):
      params[layer + dense + ".weight"] = (out, inp)
      params[layer + dense + ".bias"] = (out,)
    for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
      params[layer + norm + ".weight"] = (HIDDEN,)
      params[layer + norm + ".bias"] = (HIDDEN,)
  return params


@pytest.fixture(scope="module")
def bert_config_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("config") / "bert_config.json"
  path.write_text(
      '{"vocab_size": %d, "hidden_size": %d, "num_hidden_layers": %d, '
      '"num_attention_heads": 2, "intermediate_size": %d, "max_position_embeddings": 64, '
      '"type_vocab_size": 2, "hidden_act": "gelu", "hidden_dropout_prob": 0.1, '
      '"attention_probs_dropout_prob": 0.1, "initializer_range": 0.02}'
      % (VOCAB, HIDDEN, LAYERS, INTERMEDIATE), "utf-8")
  return str(path)


@pytest.mark.parametrize("multi_label", [True, False])
def test_every_hf_parameter_names_one_of_our_variables_in_its_shape(
    tmp_path, bert_config_file, multi_label):
  npz = str(tmp_path / "ours.npz")
  checkpoint_npz.initial_weights_to_npz(bert_config_file, LABELS, 1, npz, multi_label)
  ours = np.load(npz)
  mapped = {}
  for hf_name, shape in hf_parameters().items():
    name, transpose = weight_names.google_name(hf_name, "multi_label" if multi_label else "")
    mapped[name] = tuple(reversed(shape)) if transpose else shape
  assert mapped == {name: ours[name].shape for name in ours.files}


@pytest.mark.parametrize("hf_name", [
    "lm_head.weight", "bert.embeddings.LayerNorm.scale",
    "bert.encoder.layer.0.attention.self.distance_embedding.weight"])
def test_a_parameter_this_mapping_does_not_know_is_refused(hf_name):
  with pytest.raises(ValueError, match=hf_name.replace(".", r"\.")):
    weight_names.google_name(hf_name)


def test_initial_weights_follow_the_seed_and_googles_initializer(tmp_path, bert_config_file):
  paths = [str(tmp_path / name) for name in ("a.npz", "b.npz", "c.npz")]
  for path, seed in zip(paths, (7, 7, 8)):
    checkpoint_npz.initial_weights_to_npz(bert_config_file, LABELS, seed, path, True)
  a, b, c = (np.load(path) for path in paths)
  kernel = "bert/encoder/layer_1/attention/self/query/kernel"
  np.testing.assert_array_equal(a[kernel], b[kernel])
  assert not np.array_equal(a[kernel], c[kernel])
  assert np.abs(a[kernel]).max() <= 2 * 0.02  # truncated at two standard deviations
  np.testing.assert_array_equal(a["bert/embeddings/LayerNorm/gamma"], np.ones(HIDDEN))
  np.testing.assert_array_equal(a["multi_label/output_bias"], np.zeros(LABELS))


def test_npz_to_checkpoint_and_back_keeps_the_weights_and_drops_optimizer_state(tmp_path):
  rng = np.random.RandomState(0)
  weights = {"bert/pooler/dense/kernel": rng.randn(4, 4).astype(np.float32),
             "multi_label/output_weights": rng.randn(3, 4).astype(np.float32)}
  optimizer_state = {"bert/pooler/dense/kernel/adam_m": np.ones((4, 4), np.float32),
                     "bert/pooler/dense/kernel/adam_v": np.ones((4, 4), np.float32),
                     "global_step": np.array(5, np.int64),
                     "loss_scaling/scale": np.array(2.0, np.float32)}
  np.savez(str(tmp_path / "in.npz"), **dict(weights, **optimizer_state))
  prefix = checkpoint_npz.npz_to_checkpoint(str(tmp_path / "in.npz"),
                                            str(tmp_path / "ckpt" / "model.ckpt"))
  names = checkpoint_npz.checkpoint_to_npz(prefix, str(tmp_path / "out.npz"))
  assert names == sorted(weights)
  out = np.load(str(tmp_path / "out.npz"))
  for name, value in weights.items():
    np.testing.assert_array_equal(out[name], value)


def test_an_npz_path_without_its_suffix_is_refused(tmp_path):
  with pytest.raises(SystemExit, match="ending in .npz"):
    checkpoint_npz.initial_weights_to_npz("unused", LABELS, 1, str(tmp_path / "w"), True)
