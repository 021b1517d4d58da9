# coding=utf-8
"""Embedding models in and out through sentence-transformers' directory format
(convert_checkpoint.py --to=sentence_transformers, and --to=tensorflow on such a directory).

The expected layout is written here from sentence-transformers' documentation of a saved
model (modules.json listing Transformer at path "", then 1_Pooling, optionally a Dense and
Normalize; the classic Pooling config's pooling_mode_* fields; torch's Linear weight [out,
in] as linear.weight), not from bert_mgpu/transformers_format. sentence-transformers itself
is not installed for the tests; benchmarks/sentence_transformers_parity.py loads the files
with it and compares its encode with ours.
"""

import json
import os
import shutil

import numpy as np
import pytest
from safetensors import numpy as safetensors_numpy
import tensorflow.compat.v1 as tf

import cli
import conversion_models
import modeling
import numpy_bert
from bert_mgpu.training import checkpoints
from bert_mgpu.transformers_format import sentence_transformers_format as st_format

SCRIPT = "convert_checkpoint.py"
MAX_SEQ_LENGTH = 24
SOFTMAX = {"embedding_softmax/output_weights": (3, 48), "embedding_softmax/output_bias": (3,)}
CLASSIC = "sentence_transformers.models."
POOLING_MODES = ("pooling_mode_cls_token", "pooling_mode_mean_tokens", "pooling_mode_max_tokens",
                 "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens",
                 "pooling_mode_lasttoken")


def convert(**flags):
  return cli.run_script(SCRIPT, cli.flag_list(flags))


def read_json(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def write_embedding_model(directory, pooling, normalize, softmax=False, seed=0):
  """A tiny run_embedding_mgpu.py output_dir: checkpoint (with global_step and an Adam slot,
  and with softmax the training-only classifier), bert_config.json, vocab.txt,
  model_settings.json. Returns the model's arrays by Google's names (no training state)."""
  config = conversion_models.bert_config(num_layers=1)
  arrays = numpy_bert.random_weights(modeling.BertConfig.from_dict(config), seed)
  saved = dict(arrays)
  rng = np.random.RandomState(seed + 5)
  if softmax:
    saved.update({name: rng.randn(*shape).astype(np.float32) for name, shape in SOFTMAX.items()})
  saved["global_step"] = np.array(9, np.int64)
  saved["bert/pooler/dense/kernel/adam_m"] = rng.randn(16, 16).astype(np.float32)
  os.makedirs(directory)
  checkpoints.write_arrays(saved, os.path.join(directory, "model.ckpt-9"))
  conversion_models.write_text(os.path.join(directory, "checkpoint"),
                               'model_checkpoint_path: "model.ckpt-9"\n')
  conversion_models.write_json(os.path.join(directory, "bert_config.json"), config)
  conversion_models.write_vocab(os.path.join(directory, "vocab.txt"),
                                conversion_models.demo_vocab_tokens())
  conversion_models.write_json(os.path.join(directory, "model_settings.json"), {
      "model": "embedding", "do_lower_case": True, "max_seq_length": MAX_SEQ_LENGTH,
      "pooling": pooling, "normalize_embeddings": normalize})
  return arrays


def expected_modules(pooling, normalize):
  """modules.json of the classic layout, as sentence-transformers documents it."""
  kinds = ["Transformer", "Pooling"] + (["Dense"] if pooling == "pooler" else []) + (
      ["Normalize"] if normalize else [])
  return [{"idx": i, "name": str(i), "path": "" if kind == "Transformer" else
           "%d_%s" % (i, kind), "type": CLASSIC + kind} for i, kind in enumerate(kinds)]


def checkpoint_arrays(checkpoint):
  reader = tf.train.load_checkpoint(checkpoint)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


CASES = [("mean", True), ("mean", False), ("cls", True), ("pooler", True), ("pooler", False)]


@pytest.mark.parametrize("pooling,normalize", CASES)
def test_the_files_written_follow_the_documented_layout(tmp_path, pooling, normalize):
  arrays = write_embedding_model(str(tmp_path / "ours"), pooling, normalize)
  out = str(tmp_path / "st")
  st_format.to_sentence_transformers(str(tmp_path / "ours"), out)
  assert read_json(os.path.join(out, "modules.json")) == expected_modules(pooling, normalize)
  pooling_config = read_json(os.path.join(out, "1_Pooling", "config.json"))
  assert pooling_config["word_embedding_dimension"] == 16
  chosen = "pooling_mode_mean_tokens" if pooling == "mean" else "pooling_mode_cls_token"
  assert {mode: pooling_config[mode] for mode in POOLING_MODES} == {
      mode: mode == chosen for mode in POOLING_MODES}
  assert read_json(os.path.join(out, "sentence_bert_config.json"))["max_seq_length"] == (
      MAX_SEQ_LENGTH)
  assert read_json(os.path.join(out, "config.json"))["architectures"] == ["BertModel"]
  body = safetensors_numpy.load_file(os.path.join(out, "model.safetensors"))
  np.testing.assert_array_equal(body["embeddings.word_embeddings.weight"],
                                arrays["bert/embeddings/word_embeddings"])
  assert os.path.isfile(os.path.join(out, "vocab.txt"))
  dense_dir = os.path.join(out, "2_Dense")
  assert os.path.isdir(dense_dir) == (pooling == "pooler")
  if pooling == "pooler":
    assert read_json(os.path.join(dense_dir, "config.json")) == {
        "in_features": 16, "out_features": 16, "bias": True,
        "activation_function": "torch.nn.modules.activation.Tanh"}
    dense = safetensors_numpy.load_file(os.path.join(dense_dir, "model.safetensors"))
    np.testing.assert_array_equal(dense["linear.weight"], arrays["bert/pooler/dense/kernel"].T)
    np.testing.assert_array_equal(dense["linear.bias"], arrays["bert/pooler/dense/bias"])


@pytest.mark.parametrize("pooling,normalize", CASES)
def test_out_and_in_again_keeps_weights_pooling_and_normalisation(tmp_path, pooling,
                                                                  normalize):
  arrays = write_embedding_model(str(tmp_path / "ours"), pooling, normalize, seed=3)
  st_format.to_sentence_transformers(str(tmp_path / "ours"), str(tmp_path / "st"))
  back = str(tmp_path / "back")
  st_format.from_sentence_transformers(str(tmp_path / "st"), back)
  assert read_json(os.path.join(back, "embedding_settings.json")) == {
      "pooling": pooling, "normalize_embeddings": normalize, "do_lower_case": True,
      "max_seq_length": MAX_SEQ_LENGTH}
  restored = checkpoint_arrays(os.path.join(back, "bert_model.ckpt"))
  assert sorted(restored) == sorted(arrays)
  for name, array in arrays.items():
    np.testing.assert_array_equal(restored[name], array, err_msg=name)


def test_the_model_under_0_transformer_converts_as_at_the_root(tmp_path):
  write_embedding_model(str(tmp_path / "ours"), "pooler", True, seed=4)
  root = str(tmp_path / "root")
  st_format.to_sentence_transformers(str(tmp_path / "ours"), root)
  nested = str(tmp_path / "nested")
  os.makedirs(os.path.join(nested, "0_Transformer"))
  for name in os.listdir(root):
    target = nested if name in ("modules.json", "1_Pooling", "2_Dense", "3_Normalize",
                                "config_sentence_transformers.json") else os.path.join(
                                    nested, "0_Transformer")
    shutil.move(os.path.join(root, name), target)
  modules = read_json(os.path.join(nested, "modules.json"))
  modules[0]["path"] = "0_Transformer"
  conversion_models.write_json(os.path.join(nested, "modules.json"), modules)
  st_format.from_sentence_transformers(nested, str(tmp_path / "a"))
  write_embedding_model(str(tmp_path / "ours2"), "pooler", True, seed=4)
  st_format.to_sentence_transformers(str(tmp_path / "ours2"), str(tmp_path / "root2"))
  st_format.from_sentence_transformers(str(tmp_path / "root2"), str(tmp_path / "b"))
  a = checkpoint_arrays(str(tmp_path / "a" / "bert_model.ckpt"))
  b = checkpoint_arrays(str(tmp_path / "b" / "bert_model.ckpt"))
  assert sorted(a) == sorted(b)
  for name in a:
    np.testing.assert_array_equal(a[name], b[name], err_msg=name)
  assert read_json(str(tmp_path / "a" / "embedding_settings.json")) == read_json(
      str(tmp_path / "b" / "embedding_settings.json"))


def write_st6_dir(directory, pooling_mode, dense=None, max_length=20):
  """A directory as sentence-transformers 6 saves it: module types under
  sentence_transformers.base / sentence_transformer, {"pooling_mode"}, no max_seq_length in
  sentence_bert_config.json (the tokenizer's model_max_length holds it)."""
  config = conversion_models.bert_config(num_layers=1)
  arrays, weights = conversion_models.transformers_body(config, seed=6, prefix="")
  conversion_models.write_transformers_dir(
      directory, arrays, conversion_models.transformers_config(config, "BertModel"))
  tokenizer = read_json(os.path.join(directory, "tokenizer_config.json"))
  tokenizer["model_max_length"] = max_length
  conversion_models.write_json(os.path.join(directory, "tokenizer_config.json"), tokenizer)
  modules = [("sentence_transformers.base.modules.transformer.Transformer", ""),
             ("sentence_transformers.sentence_transformer.modules.pooling.Pooling",
              "1_Pooling")]
  os.makedirs(os.path.join(directory, "1_Pooling"))
  conversion_models.write_json(os.path.join(directory, "1_Pooling", "config.json"),
                               {"embedding_dimension": 16, "pooling_mode": pooling_mode,
                                "include_prompt": True})
  if dense is not None:
    dense_config, dense_arrays = dense
    modules.append(("sentence_transformers.base.modules.dense.Dense", "2_Dense"))
    os.makedirs(os.path.join(directory, "2_Dense"))
    conversion_models.write_json(os.path.join(directory, "2_Dense", "config.json"), dense_config)
    safetensors_numpy.save_file(dense_arrays, os.path.join(directory, "2_Dense",
                                                           "model.safetensors"))
  modules.append(("sentence_transformers.base.modules.normalize.Normalize", "3_Normalize"))
  conversion_models.write_json(os.path.join(directory, "modules.json"), [
      {"idx": i, "name": str(i), "path": path, "type": kind}
      for i, (kind, path) in enumerate(modules)])
  conversion_models.write_json(os.path.join(directory, "sentence_bert_config.json"),
                               {"transformer_task": "feature-extraction"})
  return weights


def tanh_dense(seed=0, activation="torch.nn.modules.activation.Tanh", size=16):
  rng = np.random.RandomState(seed)
  return ({"in_features": 16, "out_features": size, "bias": True,
           "activation_function": activation},
          {"linear.weight": rng.randn(size, 16).astype(np.float32),
           "linear.bias": rng.randn(size).astype(np.float32)})


def test_a_sentence_transformers_6_directory_with_cls_and_dense_becomes_pooler(tmp_path):
  dense = tanh_dense(seed=8)
  weights = write_st6_dir(str(tmp_path / "st6"), "cls", dense)
  st_format.from_sentence_transformers(str(tmp_path / "st6"), str(tmp_path / "out"))
  assert read_json(str(tmp_path / "out" / "embedding_settings.json")) == {
      "pooling": "pooler", "normalize_embeddings": True, "do_lower_case": True,
      "max_seq_length": 20}
  restored = checkpoint_arrays(str(tmp_path / "out" / "bert_model.ckpt"))
  # The Dense replaces BERT's own pooler, transposed to Google's [in, out].
  np.testing.assert_array_equal(restored["bert/pooler/dense/kernel"],
                                dense[1]["linear.weight"].T)
  np.testing.assert_array_equal(restored["bert/pooler/dense/bias"], dense[1]["linear.bias"])
  assert not np.array_equal(restored["bert/pooler/dense/bias"],
                            weights["bert/pooler/dense/bias"])
  np.testing.assert_array_equal(restored["bert/embeddings/word_embeddings"],
                                weights["bert/embeddings/word_embeddings"])


def test_softmax_s_classifier_is_left_out_and_the_log_says_so(tmp_path):
  write_embedding_model(str(tmp_path / "ours"), "mean", True, softmax=True)
  result = convert(to="sentence_transformers", input=str(tmp_path / "ours"),
                   output=str(tmp_path / "st"))
  cli.assert_succeeded(result)
  assert "Not converted (heads used only in training): embedding_softmax/output_bias, " \
         "embedding_softmax/output_weights." in result.stderr
  body = safetensors_numpy.load_file(str(tmp_path / "st" / "model.safetensors"))
  assert not [name for name in body if "softmax" in name]


def out_refusals(tmp_path):
  first_last = str(tmp_path / "first_last")
  write_embedding_model(first_last, "first_last_avg", True)
  classifier = conversion_models.write_model(str(tmp_path / "classifier"), "classifier",
                                             num_layers=1).directory
  return {"first_last_avg": (first_last, ("first_last_avg", "is not converted")),
          "classifier": (classifier, ("'classifier'", "--to=transformers"))}


def test_models_sentence_transformers_cannot_express_are_refused_in_one_line(tmp_path):
  for name, (directory, fragments) in out_refusals(tmp_path).items():
    output = str(tmp_path / ("out_" + name))
    result = convert(to="sentence_transformers", input=directory, output=output)
    cli.assert_one_line_error(result, *fragments)
    assert not os.path.exists(output)


def _st_dir_with(tmp_path, name, change):
  directory = str(tmp_path / name)
  write_embedding_model(directory + "_ours", "pooler", True, seed=2)
  st_format.to_sentence_transformers(directory + "_ours", directory)
  change(directory)
  return directory


def _edit_json(path, edit):
  value = read_json(path)
  edit(value)
  conversion_models.write_json(path, value)


IN_REFUSALS = {
    "relu_dense": (lambda d: _edit_json(os.path.join(d, "2_Dense", "config.json"), lambda c: c.update(
        activation_function="torch.nn.modules.activation.ReLU")), ("2_Dense", "ReLU")),
    "max_pooling": (lambda d: _edit_json(os.path.join(d, "1_Pooling", "config.json"), lambda c: c.update(
        pooling_mode_cls_token=False, pooling_mode_max_tokens=True)), ("'max_tokens'",)),
    "unknown_module": (lambda d: _edit_json(os.path.join(d, "modules.json"), lambda m: m.insert(
        2, {"idx": 2, "name": "x", "path": "x", "type": "sentence_transformers.models.LayerNorm"})),
                       ("sentence_transformers.models.LayerNorm",)),
}


@pytest.mark.parametrize("case", sorted(IN_REFUSALS))
def test_modules_we_cannot_carry_are_refused_naming_them(tmp_path, case):
  change, fragments = IN_REFUSALS[case]
  directory = _st_dir_with(tmp_path, case, change)
  output = str(tmp_path / "out")
  result = convert(to="tensorflow", input=directory, output=output)
  cli.assert_one_line_error(result, "not converted", *fragments)
  assert not os.path.exists(output)


def test_keep_head_on_a_sentence_transformers_directory_is_one_line(tmp_path):
  directory = _st_dir_with(tmp_path, "st", lambda d: None)
  result = convert(to="tensorflow", input=directory, output=str(tmp_path / "out"),
                   keep_head=True)
  cli.assert_one_line_error(result, "--keep_head", "modules.json")


def test_run_embedding_takes_the_start_settings_and_refuses_another_pooling(tmp_path):
  directory = _st_dir_with(tmp_path, "st", lambda d: None)
  start = str(tmp_path / "start")
  st_format.from_sentence_transformers(directory, start)
  conversion_models.write_text(str(tmp_path / "texts.txt"), "今天天气很好\n我们去公园\n")
  flags = {"init_checkpoint": os.path.join(start, "bert_model.ckpt"),
           "vocab_file": os.path.join(start, "vocab.txt"),
           "bert_config_file": os.path.join(start, "bert_config.json"),
           "embed_file": str(tmp_path / "texts.txt")}
  refused = cli.run_script("run_embedding_mgpu.py", cli.flag_list(dict(
      flags, output_dir=str(tmp_path / "refused"), pooling="mean")))
  cli.assert_one_line_error(refused, "--pooling=mean", "pooler", "embedding_settings.json")
  taken = cli.run_script("run_embedding_mgpu.py", cli.flag_list(dict(
      flags, output_dir=str(tmp_path / "taken"))))
  cli.assert_succeeded(taken)
  assert "Using pooling = pooler of the model at --init_checkpoint" in taken.stderr
  assert ("Using max_seq_length = %d of the model at --init_checkpoint" % MAX_SEQ_LENGTH
          in taken.stderr)
  assert np.load(str(tmp_path / "taken" / "embeddings.npy")).shape == (2, 16)


def test_a_list_pooling_mode_lower_casing_and_a_long_max_seq_length_are_read(tmp_path):
  directory = str(tmp_path / "st6")
  write_st6_dir(directory, ["mean"], max_length=1000)
  tokenizer = read_json(os.path.join(directory, "tokenizer_config.json"))
  tokenizer["do_lower_case"] = False
  conversion_models.write_json(os.path.join(directory, "tokenizer_config.json"), tokenizer)
  conversion_models.write_json(os.path.join(directory, "sentence_bert_config.json"),
                               {"max_seq_length": 1000, "do_lower_case": True})
  st_format.from_sentence_transformers(directory, str(tmp_path / "out"))
  # Lower-cased before the tokenizer; no longer than the 64 position embeddings.
  assert read_json(str(tmp_path / "out" / "embedding_settings.json")) == {
      "pooling": "mean", "normalize_embeddings": True, "do_lower_case": True,
      "max_seq_length": 64}


def test_two_pooling_modes_at_once_are_refused_in_one_line(tmp_path):
  directory = str(tmp_path / "st6")
  write_st6_dir(directory, ["cls", "mean"])
  result = convert(to="tensorflow", input=directory, output=str(tmp_path / "out"))
  cli.assert_one_line_error(result, "cls+mean", "not converted")
