# coding=utf-8
"""--to=tensorflow (bert_mgpu/transformers_format/to_tensorflow.py): our checkpoint ->
transformers' files -> our checkpoint gives back every weight bit for bit, for every head;
the files transformers writes (no "bert." prefix, gamma/beta, buffers, the tied decoder,
bfloat16, float16, shards, tokenizer.json) are read; the import's refusals.

The transformers directories are written with the real safetensors package (NumPy only);
a bfloat16 file, which that API cannot write, byte by byte from the format's description.
"""

import importlib.util
import json
import os
import shutil
import struct

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from safetensors import numpy as safetensors_numpy

import conversion_models
from bert_mgpu.transformers_format import to_tensorflow
from usage_errors import assert_usage_error

KINDS = conversion_models.KINDS
POOLER = ("bert/pooler/dense/kernel", "bert/pooler/dense/bias")


def read_checkpoint(directory):
  """dict name -> array of directory/bert_model.ckpt, read through its `checkpoint` file."""
  checkpoint = tf.train.latest_checkpoint(directory)
  assert checkpoint == os.path.join(directory, "bert_model.ckpt")
  reader = tf.train.load_checkpoint(checkpoint)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def read_text(path):
  with open(path, encoding="utf-8", newline="") as f:
    return f.read()


@pytest.fixture(scope="module")
def round_trips(tmp_path_factory):
  """kind -> (Model, the directory converted back with keep_head, its summary)."""
  base = str(tmp_path_factory.mktemp("round_trip"))
  return {kind: (model, os.path.join(base, "back", kind),
                 to_tensorflow.convert(hf, os.path.join(base, "back", kind), keep_head=True))
          for kind, (model, hf, _) in conversion_models.export_every_kind(base, seed=3).items()}


# ---------------------------------------------------------------------------
# 1. TF -> transformers' files -> TF, bit for bit
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_gives_back_every_weight(round_trips, kind):
  """Every weight bit for bit, no training state; the pooler, which transformers' token
  classification, QA and masked-LM classes lack, comes back as zeros (NER, SQuAD: our graphs
  build it) or not at all (the masked LM: --init_checkpoint leaves it to initialise)."""
  model, back, summary = round_trips[kind]
  arrays = read_checkpoint(back)
  expected = dict(model.arrays)
  if kind in ("ner", "ner_crf", "squad", "masked_lm"):
    for name in POOLER:
      del expected[name]
  if kind in ("ner", "ner_crf", "squad"):
    hidden = model.config["hidden_size"]
    assert np.array_equal(arrays.pop(POOLER[0]), np.zeros([hidden, hidden], np.float32))
    assert np.array_equal(arrays.pop(POOLER[1]), np.zeros([hidden], np.float32))
  assert sorted(arrays) == sorted(expected)
  for name, array in expected.items():
    assert arrays[name].dtype == array.dtype, name
    assert np.array_equal(arrays[name], array), name
  assert summary["dropped"] == []


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_gives_back_the_model_files(round_trips, kind):
  model, back, summary = round_trips[kind]
  with open(os.path.join(back, "bert_config.json"), encoding="utf-8") as f:
    assert json.load(f) == model.config
  assert read_text(os.path.join(back, "vocab.txt")) == read_text(
      conversion_models.demo_vocab_file())
  expected_files = {"bert_config.json", "vocab.txt", "checkpoint"} | set(model.files)
  assert {name for name in os.listdir(back) if not name.startswith("bert_model.ckpt")} == (
      expected_files)
  for name, text in model.files.items():
    assert read_text(os.path.join(back, name)) == text, name
  kept = {"classifier": "BertForSequenceClassification",
          "multi_label": "BertForSequenceClassification",
          "ner": "BertForTokenClassification", "ner_crf": "BertForTokenClassification",
          "squad": "BertForQuestionAnswering"}
  assert summary["kept_head"] == kept.get(kind)


def test_round_trip_is_relative_to_its_directory(round_trips, tmp_path):
  """The `checkpoint` file names bert_model.ckpt relative to the directory: a moved copy
  still finds its own."""
  model, back, _ = round_trips["classifier"]
  moved = str(tmp_path / "moved")
  shutil.copytree(back, moved)
  assert np.array_equal(read_checkpoint(moved)["output_weights"],
                        model.arrays["output_weights"])


# ---------------------------------------------------------------------------
# 2. The files transformers writes
# ---------------------------------------------------------------------------

CONFIG = conversion_models.bert_config(num_layers=2)
HIDDEN = CONFIG["hidden_size"]


def write_hf(directory, arrays, architecture="BertModel", vocab_tokens=None,
             tokenizer_json=False, **fields):
  return conversion_models.write_transformers_dir(
      str(directory), arrays, conversion_models.transformers_config(CONFIG, architecture,
                                                                    **fields),
      vocab_tokens, tokenizer_json)


def convert_back(tmp_path, input_dir, **kwargs):
  """to_tensorflow.convert into tmp_path/back; returns (checkpoint arrays, summary)."""
  summary = to_tensorflow.convert(str(input_dir), str(tmp_path / "back"), **kwargs)
  return read_checkpoint(str(tmp_path / "back")), summary


def assert_body_equal(arrays, google_weights, tolerance=0.0):
  for name, array in google_weights.items():
    assert arrays[name].dtype == np.float32, name
    np.testing.assert_allclose(arrays[name], array, rtol=0, atol=tolerance, err_msg=name)


def test_bert_model_without_prefix_with_gamma_beta_and_position_ids(tmp_path):
  """BertModel's own names (no "bert."), older LayerNorm gamma/beta names, and the int64
  position_ids buffer (ignored)."""
  body, google = conversion_models.transformers_body(CONFIG, seed=1, prefix="")
  arrays = {name.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
      "LayerNorm.bias", "LayerNorm.beta"): array for name, array in body.items()}
  assert "embeddings.LayerNorm.gamma" in arrays
  arrays["embeddings.position_ids"] = np.arange(64, dtype=np.int64)[None]
  converted, summary = convert_back(tmp_path, write_hf(tmp_path / "hf", arrays))
  assert sorted(converted) == sorted(google)
  assert_body_equal(converted, google)
  assert summary["dropped"] == [] and summary["kept_head"] is None


def masked_lm_arrays(seed=2):
  body, google = conversion_models.transformers_body(CONFIG, seed=seed, pooler=False)
  rng = np.random.RandomState(seed)
  heads = {"cls.predictions.transform.dense.weight": rng.randn(HIDDEN, HIDDEN),
           "cls.predictions.transform.dense.bias": rng.randn(HIDDEN),
           "cls.predictions.transform.LayerNorm.weight": rng.randn(HIDDEN),
           "cls.predictions.transform.LayerNorm.bias": rng.randn(HIDDEN)}
  body.update({name: array.astype(np.float32) for name, array in heads.items()})
  return body, google


@pytest.mark.parametrize("tied", [True, False])
def test_masked_lm_decoder(tmp_path, tied):
  """The decoder weight tied to the word embeddings is dropped silently, an untied one is
  dropped and named; the decoder's bias alone becomes cls/predictions/output_bias."""
  arrays, google = masked_lm_arrays()
  words = arrays["bert.embeddings.word_embeddings.weight"]
  arrays["cls.predictions.decoder.weight"] = words.copy() if tied else words + 1
  bias = np.linspace(-1, 1, CONFIG["vocab_size"]).astype(np.float32)
  arrays["cls.predictions.decoder.bias"] = bias
  converted, summary = convert_back(tmp_path, write_hf(tmp_path / "hf", arrays,
                                                       "BertForMaskedLM"))
  assert np.array_equal(converted["cls/predictions/output_bias"], bias)
  assert np.array_equal(converted["cls/predictions/transform/dense/kernel"],
                        arrays["cls.predictions.transform.dense.weight"].T)
  assert_body_equal(converted, google)
  assert not [name for name in converted if "decoder" in name]
  dropped = [name for name in summary["dropped"] if "cls.predictions.decoder.weight" in name]
  assert len(dropped) == (0 if tied else 1)


def bfloat16_file(path, arrays, int64_arrays=None):
  """Writes `arrays` (float32) as a safetensors file of dtype BF16, their top 16 bits (and
  `int64_arrays` as I64): an 8-byte little-endian header size, the JSON header, the data.
  Returns the float32 values the BF16 bits stand for."""
  header, data, stored = {"__metadata__": {"format": "pt"}}, b"", {}
  for name, array in sorted(arrays.items()) + sorted((int64_arrays or {}).items()):
    if array.dtype == np.int64:
      dtype, values = "I64", array.astype("<i8")
    else:
      dtype = "BF16"
      values = (np.ascontiguousarray(array, np.float32).view(np.uint32) >> 16).astype("<u2")
      stored[name] = (values.astype(np.uint32) << 16).view(np.float32)
    header[name] = {"dtype": dtype, "shape": list(array.shape),
                    "data_offsets": [len(data), len(data) + values.nbytes]}
    data += values.tobytes()
  header_bytes = json.dumps(header).encode("utf-8")
  with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(header_bytes)) + header_bytes + data)
  return stored


def test_bfloat16_weights(tmp_path):
  body, _ = conversion_models.transformers_body(CONFIG, seed=4)
  directory = write_hf(tmp_path / "hf", None)
  stored = bfloat16_file(os.path.join(directory, "model.safetensors"), body)
  assert not np.array_equal(stored["bert.pooler.dense.weight"], body["bert.pooler.dense.weight"])
  converted, _ = convert_back(tmp_path, directory)
  google = conversion_models.google_weights(stored, CONFIG["num_hidden_layers"])
  assert sorted(converted) == sorted(google)
  assert_body_equal(converted, google)


def test_bfloat16_weights_with_position_ids(tmp_path):
  body, _ = conversion_models.transformers_body(CONFIG, seed=4)
  directory = write_hf(tmp_path / "hf", None)
  stored = bfloat16_file(os.path.join(directory, "model.safetensors"), body, {
      "bert.embeddings.position_ids": np.arange(64, dtype=np.int64)[None]})
  converted, _ = convert_back(tmp_path, directory)
  assert_body_equal(converted, conversion_models.google_weights(stored,
                                                                CONFIG["num_hidden_layers"]))


def test_float16_weights(tmp_path):
  body, _ = conversion_models.transformers_body(CONFIG, seed=5)
  half = {name: array.astype(np.float16) for name, array in body.items()}
  converted, _ = convert_back(tmp_path, write_hf(tmp_path / "hf", half))
  widened = {name: array.astype(np.float32) for name, array in half.items()}
  assert_body_equal(converted, conversion_models.google_weights(widened,
                                                                CONFIG["num_hidden_layers"]))


def test_sharded_weights_and_tokenizer_json_vocab(tmp_path):
  body, google = conversion_models.transformers_body(CONFIG, seed=6)
  directory = write_hf(tmp_path / "hf", None, tokenizer_json=True)
  names = sorted(body)
  weight_map = {}
  for number, part in enumerate((names[::2], names[1::2])):
    shard = "model-%05d-of-00002.safetensors" % (number + 1)
    safetensors_numpy.save_file({name: body[name] for name in part},
                                os.path.join(directory, shard), metadata={"format": "pt"})
    weight_map.update({name: shard for name in part})
  conversion_models.write_json(os.path.join(directory, "model.safetensors.index.json"),
                               {"metadata": {"total_size": 0}, "weight_map": weight_map})
  assert not os.path.exists(os.path.join(directory, "vocab.txt"))
  converted, summary = convert_back(tmp_path, directory)
  assert summary["weights"].endswith("model.safetensors.index.json")
  assert_body_equal(converted, google)
  assert read_text(str(tmp_path / "back" / "vocab.txt")) == read_text(
      conversion_models.demo_vocab_file())


def classifier_arrays(seed=7, num_labels=3):
  body, google = conversion_models.transformers_body(CONFIG, seed=seed)
  rng = np.random.RandomState(seed)
  body["classifier.weight"] = rng.randn(num_labels, HIDDEN).astype(np.float32)
  body["classifier.bias"] = rng.randn(num_labels).astype(np.float32)
  return body, google


LABEL_FIELDS = {"id2label": {"0": "负面", "1": "中性", "2": "正面"},
                "label2id": {"负面": 0, "中性": 1, "正面": 2}}


@pytest.mark.parametrize("architecture,head", [
    ("BertForSequenceClassification", "classifier"),
    ("BertForQuestionAnswering", "qa_outputs")])
def test_fine_tuned_head_is_dropped_by_default(tmp_path, architecture, head):
  arrays, google = classifier_arrays(num_labels=2 if head == "qa_outputs" else 3)
  arrays[head + ".weight"] = arrays.pop("classifier.weight")
  arrays[head + ".bias"] = arrays.pop("classifier.bias")
  fields = LABEL_FIELDS if head == "classifier" else {}
  converted, summary = convert_back(tmp_path, write_hf(tmp_path / "hf", arrays, architecture,
                                                       **fields))
  assert sorted(converted) == sorted(google)
  assert sorted(summary["dropped"]) == [head + ".bias", head + ".weight"]
  assert summary["kept_head"] is None
  assert sorted(os.listdir(str(tmp_path / "back"))) == sorted(
      ["bert_config.json", "vocab.txt", "checkpoint", "bert_model.ckpt.index",
       "bert_model.ckpt.data-00000-of-00001"])


@pytest.mark.parametrize("keep_head", [False, True])
def test_multiple_choice_head_is_dropped_and_named(tmp_path, keep_head):
  """BertForMultipleChoice's classifier [1, hidden] has no counterpart here."""
  arrays, google = classifier_arrays(num_labels=1)
  converted, summary = convert_back(tmp_path, write_hf(tmp_path / "hf", arrays,
                                                       "BertForMultipleChoice"),
                                    keep_head=keep_head)
  assert sorted(converted) == sorted(google)
  assert sorted(summary["dropped"]) == ["classifier.bias", "classifier.weight"]
  assert summary["kept_head"] is None


def test_unknown_head_is_dropped_and_named(tmp_path):
  arrays, google = classifier_arrays()
  arrays["lm_head.dense.weight"] = np.ones([HIDDEN, HIDDEN], np.float32)
  converted, summary = convert_back(tmp_path, write_hf(tmp_path / "hf", arrays,
                                                       "BertForSequenceClassification",
                                                       **LABEL_FIELDS))
  assert sorted(converted) == sorted(google)
  assert "lm_head.dense.weight" in summary["dropped"]


def test_kept_classifier_without_our_files(tmp_path):
  """--keep_head on a classifier transformers fine-tuned: labels.txt from id2label,
  model_settings.json of a tsv task with max_seq_length min(128, max_position_embeddings)."""
  arrays, google = classifier_arrays()
  converted, summary = convert_back(
      tmp_path, write_hf(tmp_path / "hf", arrays, "BertForSequenceClassification",
                         problem_type="single_label_classification", **LABEL_FIELDS),
      keep_head=True)
  assert np.array_equal(converted["output_weights"], arrays["classifier.weight"])
  assert np.array_equal(converted["output_bias"], arrays["classifier.bias"])
  assert_body_equal(converted, google)
  assert summary["kept_head"] == "BertForSequenceClassification"
  back = str(tmp_path / "back")
  assert read_text(os.path.join(back, "labels.txt")) == "负面\n中性\n正面\n"
  with open(os.path.join(back, "model_settings.json"), encoding="utf-8") as f:
    settings = json.load(f)
  assert settings["model"] == "classifier" and settings["task_name"] == "tsv"
  assert settings["do_lower_case"] is True
  assert settings["max_seq_length"] == min(128, CONFIG["max_position_embeddings"]) == 64


# ---------------------------------------------------------------------------
# 3. Refusals: one line, nothing written
# ---------------------------------------------------------------------------

def refused(tmp_path, input_dir, *fragments, **kwargs):
  """to_tensorflow.convert refuses with one line holding `fragments`; nothing is written."""
  output_dir = str(tmp_path / "back")
  assert_usage_error(lambda: to_tensorflow.convert(str(input_dir), output_dir, **kwargs),
                     *fragments)
  assert not os.path.exists(output_dir)
  assert not [name for name in os.listdir(str(tmp_path)) if name.endswith((".new-tmp", ".old-tmp"))]


@pytest.mark.parametrize("model_type", ["roberta", "albert"])
def test_model_type_other_than_bert(tmp_path, model_type):
  body, _ = conversion_models.transformers_body(CONFIG)
  refused(tmp_path, write_hf(tmp_path / "hf", body, model_type=model_type),
          "model_type", model_type)


def test_hidden_act_silu(tmp_path):
  body, _ = conversion_models.transformers_body(CONFIG)
  refused(tmp_path, write_hf(tmp_path / "hf", body, hidden_act="silu"), "hidden_act", "silu")


def test_no_config_json(tmp_path):
  body, _ = conversion_models.transformers_body(CONFIG)
  directory = write_hf(tmp_path / "hf", body)
  os.remove(os.path.join(directory, "config.json"))
  refused(tmp_path, directory, "config.json")


def test_no_weight_file(tmp_path):
  refused(tmp_path, write_hf(tmp_path / "hf", None), "has no weights", "model.safetensors")


def test_weight_of_the_wrong_shape(tmp_path):
  body, _ = conversion_models.transformers_body(CONFIG)
  body["bert.encoder.layer.1.intermediate.dense.weight"] = np.zeros([16, 16], np.float32)
  refused(tmp_path, write_hf(tmp_path / "hf", body),
          "bert.encoder.layer.1.intermediate.dense.weight", "[16, 16]")


def test_missing_bert_weight(tmp_path):
  body, _ = conversion_models.transformers_body(CONFIG)
  del body["bert.encoder.layer.1.attention.self.key.bias"]
  refused(tmp_path, write_hf(tmp_path / "hf", body),
          "bert.encoder.layer.1.attention.self.key.bias")


def test_bert_parameter_bert_does_not_have(tmp_path):
  body, _ = conversion_models.transformers_body(CONFIG)
  body["bert.encoder.layer.0.attention.self.rotary.weight"] = np.ones([4], np.float32)
  refused(tmp_path, write_hf(tmp_path / "hf", body),
          "bert.encoder.layer.0.attention.self.rotary.weight", "not part of BERT")


def test_pytorch_file_without_torch(tmp_path):
  if importlib.util.find_spec("torch") is not None:
    pytest.skip("torch is installed: the .bin file would be read")
  directory = write_hf(tmp_path / "hf", None)
  with open(os.path.join(directory, "pytorch_model.bin"), "wb") as f:
    f.write(b"PK\x03\x04 not read without torch")
  refused(tmp_path, directory, "pytorch_model.bin", "torch is not installed")


def test_no_vocab(tmp_path):
  body, _ = conversion_models.transformers_body(CONFIG)
  directory = write_hf(tmp_path / "hf", body)
  os.remove(os.path.join(directory, "vocab.txt"))
  refused(tmp_path, directory, "vocab.txt", "tokenizer.json")


def test_vocab_longer_than_vocab_size(tmp_path):
  body, _ = conversion_models.transformers_body(CONFIG)
  tokens = conversion_models.demo_vocab_tokens() + ["多余"]
  refused(tmp_path, write_hf(tmp_path / "hf", body, vocab_tokens=tokens),
          "vocab_size is %d" % CONFIG["vocab_size"])


def test_output_not_empty_and_an_empty_one_stays_empty(tmp_path):
  body, _ = conversion_models.transformers_body(CONFIG)
  directory = write_hf(tmp_path / "hf", body, model_type="roberta")
  output_dir = tmp_path / "back"
  output_dir.mkdir()
  assert_usage_error(lambda: to_tensorflow.convert(directory, str(output_dir)), "roberta")
  assert os.listdir(str(output_dir)) == []
  (output_dir / "keep.txt").write_text("mine")
  assert_usage_error(lambda: to_tensorflow.convert(directory, str(output_dir)),
                     "is not empty")
  assert os.listdir(str(output_dir)) == ["keep.txt"]


# ---------------------------------------------------------------------------
# 4. A kept head must be the one the config describes; head shapes; older configs
# ---------------------------------------------------------------------------

def test_kept_head_with_another_label_count_than_id2label(tmp_path):
  arrays, _ = classifier_arrays(num_labels=2)
  refused(tmp_path, write_hf(tmp_path / "hf", arrays, "BertForSequenceClassification",
                             **LABEL_FIELDS),
          "id2label names 3 labels", "classifier.bias has 2", keep_head=True)


def test_kept_head_missing_from_the_weights(tmp_path):
  body, _ = conversion_models.transformers_body(CONFIG)
  refused(tmp_path, write_hf(tmp_path / "hf", body, "BertForSequenceClassification",
                             **LABEL_FIELDS),
          "BertForSequenceClassification", "no classifier.bias", keep_head=True)


def test_kept_regression_head_is_refused(tmp_path):
  arrays, _ = classifier_arrays(num_labels=1)
  refused(tmp_path, write_hf(tmp_path / "hf", arrays, "BertForSequenceClassification",
                             problem_type="regression", id2label={"0": "LABEL_0"},
                             label2id={"LABEL_0": 0}),
          "regression", keep_head=True)


def test_masked_lm_bias_of_another_vocab_size(tmp_path):
  body, _ = conversion_models.transformers_body(CONFIG)
  body["cls.predictions.bias"] = np.zeros([CONFIG["vocab_size"] + 3], np.float32)
  refused(tmp_path, write_hf(tmp_path / "hf", body, "BertForMaskedLM"),
          "cls/predictions/output_bias", "[%d]" % (CONFIG["vocab_size"] + 3))


def test_decoder_bias_of_its_own_is_named(tmp_path):
  body, _ = conversion_models.transformers_body(CONFIG)
  body["cls.predictions.bias"] = np.zeros([CONFIG["vocab_size"]], np.float32)
  body["cls.predictions.decoder.bias"] = np.ones([CONFIG["vocab_size"]], np.float32)
  converted, summary = convert_back(tmp_path, write_hf(tmp_path / "hf", body,
                                                       "BertForMaskedLM"))
  assert not converted["cls/predictions/output_bias"].any()
  assert [name for name in summary["dropped"] if name.startswith(
      "cls.predictions.decoder.bias")]


def test_wrapped_names_are_reported_as_read(tmp_path):
  body, _ = conversion_models.transformers_body(CONFIG)
  wrapped = {"model." + name: array for name, array in body.items()}
  directory = write_hf(tmp_path / "hf", wrapped)
  message = assert_usage_error(
      lambda: to_tensorflow.convert(directory, str(tmp_path / "back")), "not part of BERT")
  assert " model.bert." in message and "bert.model." not in message, message


def test_config_older_than_model_type_and_gelu_python(tmp_path):
  body, google = conversion_models.transformers_body(CONFIG)
  directory = write_hf(tmp_path / "hf", body, hidden_act="gelu_python")
  config_path = os.path.join(directory, "config.json")
  with open(config_path, encoding="utf-8") as f:
    config = json.load(f)
  del config["model_type"]
  with open(config_path, "w", encoding="utf-8") as f:
    json.dump(config, f)
  converted, _ = convert_back(tmp_path, directory)
  assert_body_equal(converted, google)
  with open(str(tmp_path / "back" / "bert_config.json"), encoding="utf-8") as f:
    assert json.load(f)["hidden_act"] == "gelu"


def test_cased_tokenizer_is_reported(tmp_path):
  body, _ = conversion_models.transformers_body(CONFIG)
  directory = write_hf(tmp_path / "hf", body)
  with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
    json.dump({"tokenizer_class": "BertTokenizer", "do_lower_case": False}, f)
  _, summary = convert_back(tmp_path, directory)
  assert summary["do_lower_case"] is False


def test_our_checkpoint_given_to_the_wrong_direction(tmp_path):
  model = conversion_models.write_model(str(tmp_path / "ours"), "classifier", seed=2)
  refused(tmp_path, model.directory, "use --to=transformers")


def test_kept_multi_label_classifier_without_our_files_has_complete_settings(tmp_path):
  """The model_settings.json made for a transformers multi-label classifier is what training
  writes (multi_label and its label_separator), so the output_dir exports and serves."""
  arrays, _ = classifier_arrays()
  convert_back(tmp_path, write_hf(tmp_path / "hf", arrays, "BertForSequenceClassification",
                                  problem_type="multi_label_classification", **LABEL_FIELDS),
               keep_head=True)
  with open(str(tmp_path / "back" / "model_settings.json"), encoding="utf-8") as f:
    settings = json.load(f)
  assert settings["multi_label"] is True and settings["label_separator"] == ","


def test_more_layers_than_the_config_says(tmp_path):
  """Weights of 2 layers under a config of 1: refused, not converted with a layer too many."""
  body, _ = conversion_models.transformers_body(CONFIG)
  refused(tmp_path, write_hf(tmp_path / "hf", body, num_hidden_layers=1),
          "bert.encoder.layer.1.", "num_hidden_layers=1")
