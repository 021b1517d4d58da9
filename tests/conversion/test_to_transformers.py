# coding=utf-8
"""--to=transformers (bert_mgpu/transformers_format/to_transformers.py): the files
transformers reads, field by field; the exported weights run through tests/helpers/
numpy_bert.py against our TensorFlow heads on the original checkpoint; the export's refusals.

transformers itself is not installed here: the expected names and fields are written out from
its documented naming, and the weight files are read with the real safetensors package.
"""

import glob
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from safetensors import numpy as safetensors_numpy
from safetensors import safe_open

import conversion_models
import modeling
import numpy_bert
import tokenization
from bert_mgpu.classifier import model as classifier_model
from bert_mgpu.ner import model as ner_model
from bert_mgpu.pretraining import model as pretraining_model
from bert_mgpu.squad import model as squad_model
from bert_mgpu.training import checkpoints
from bert_mgpu.training import weight_averages
from bert_mgpu.transformers_format import heads
from bert_mgpu.transformers_format import to_transformers
from usage_errors import assert_usage_error

KINDS = conversion_models.KINDS

ARCHITECTURES = {
    "classifier": "BertForSequenceClassification",
    "multi_label": "BertForSequenceClassification",
    "ner": "BertForTokenClassification", "ner_crf": "BertForTokenClassification",
    "squad": "BertForQuestionAnswering", "masked_lm": "BertForMaskedLM",
    "pretraining": "BertForPreTraining", "encoder": "BertModel"}

# The parameters of a 1-layer BertModel as transformers names them (no "bert." prefix).
BODY_KEYS = [
    "embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
    "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.weight",
    "embeddings.LayerNorm.bias",
    "encoder.layer.0.attention.self.query.weight", "encoder.layer.0.attention.self.query.bias",
    "encoder.layer.0.attention.self.key.weight", "encoder.layer.0.attention.self.key.bias",
    "encoder.layer.0.attention.self.value.weight", "encoder.layer.0.attention.self.value.bias",
    "encoder.layer.0.attention.output.dense.weight",
    "encoder.layer.0.attention.output.dense.bias",
    "encoder.layer.0.attention.output.LayerNorm.weight",
    "encoder.layer.0.attention.output.LayerNorm.bias",
    "encoder.layer.0.intermediate.dense.weight", "encoder.layer.0.intermediate.dense.bias",
    "encoder.layer.0.output.dense.weight", "encoder.layer.0.output.dense.bias",
    "encoder.layer.0.output.LayerNorm.weight", "encoder.layer.0.output.LayerNorm.bias"]
POOLER_KEYS = ["pooler.dense.weight", "pooler.dense.bias"]
MASKED_LM_KEYS = ["cls.predictions.bias", "cls.predictions.transform.dense.weight",
                  "cls.predictions.transform.dense.bias",
                  "cls.predictions.transform.LayerNorm.weight",
                  "cls.predictions.transform.LayerNorm.bias"]
NEXT_SENTENCE_KEYS = ["cls.seq_relationship.weight", "cls.seq_relationship.bias"]
CLASSIFIER_KEYS = ["classifier.weight", "classifier.bias"]
QA_KEYS = ["qa_outputs.weight", "qa_outputs.bias"]


def _bert(keys):
  return ["bert." + key for key in keys]


# Each transformers class's state dict for a 1-layer model (token classification, QA and the
# masked LM have no pooler).
EXPECTED_KEYS = {
    "classifier": _bert(BODY_KEYS + POOLER_KEYS) + CLASSIFIER_KEYS,
    "multi_label": _bert(BODY_KEYS + POOLER_KEYS) + CLASSIFIER_KEYS,
    "ner": _bert(BODY_KEYS) + CLASSIFIER_KEYS,
    "ner_crf": _bert(BODY_KEYS) + CLASSIFIER_KEYS,
    "squad": _bert(BODY_KEYS) + QA_KEYS,
    "masked_lm": _bert(BODY_KEYS) + MASKED_LM_KEYS,
    "pretraining": _bert(BODY_KEYS + POOLER_KEYS) + MASKED_LM_KEYS + NEXT_SENTENCE_KEYS,
    "encoder": BODY_KEYS + POOLER_KEYS}

SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                  "cls_token": "[CLS]", "mask_token": "[MASK]"}

# Outputs are compared with this absolute tolerance.
ABSOLUTE_TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
  """kind -> (Model, its export's directory, the summary): 1-layer models of every head."""
  return conversion_models.export_every_kind(str(tmp_path_factory.mktemp("to_transformers")),
                                             num_layers=1)


def read_json(directory, name):
  with open(os.path.join(directory, name), encoding="utf-8") as f:
    return json.load(f)


# ---------------------------------------------------------------------------
# 1. config.json, model.safetensors and the tokenizer files, field by field
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_config_json_is_transformers_bert_config(exported, kind):
  model, output_dir, summary = exported[kind]
  config = read_json(output_dir, "config.json")
  assert config["architectures"] == [ARCHITECTURES[kind]]
  assert summary["architecture"] == ARCHITECTURES[kind]
  assert config["model_type"] == "bert"
  for field, value in model.config.items():
    assert config[field] == value, field
  assert config["layer_norm_eps"] == 1e-12
  assert config["pad_token_id"] == conversion_models.demo_vocab_tokens().index("[PAD]")
  if model.labels:
    assert config["id2label"] == {str(i): label for i, label in enumerate(model.labels)}
    assert list(config["id2label"]) == [str(i) for i in range(len(model.labels))]
    assert config["label2id"] == {label: i for i, label in enumerate(model.labels)}
  else:
    assert "id2label" not in config and "label2id" not in config
  problem_types = {"classifier": "single_label_classification",
                   "multi_label": "multi_label_classification"}
  assert config.get("problem_type") == problem_types.get(kind)


@pytest.mark.parametrize("kind", KINDS)
def test_safetensors_keys_are_the_transformers_class_state_dict(exported, kind):
  model, output_dir, _ = exported[kind]
  path = os.path.join(output_dir, "model.safetensors")
  arrays = safetensors_numpy.load_file(path)
  assert sorted(arrays) == sorted(EXPECTED_KEYS[kind])
  assert all(array.dtype == np.float32 for array in arrays.values())
  with safe_open(path, framework="np") as f:
    assert f.metadata() == {"format": "pt"}
  prefix = "" if kind == "encoder" else "bert."
  hidden = model.config["hidden_size"]
  # torch's Linear weight is [out, in]: the intermediate dense layer is [32, 16].
  assert arrays[prefix + "encoder.layer.0.intermediate.dense.weight"].shape == (32, hidden)
  for name in ("classifier.weight", "qa_outputs.weight"):
    if name in arrays:
      assert arrays[name].shape == (len(model.labels or [0, 1]), hidden)


@pytest.mark.parametrize("kind", ["classifier", "squad"])
def test_tokenizer_files(exported, kind):
  _, output_dir, _ = exported[kind]
  tokenizer_config = read_json(output_dir, "tokenizer_config.json")
  assert tokenizer_config["tokenizer_class"] == "BertTokenizer"
  assert tokenizer_config["do_lower_case"] is True
  assert tokenizer_config["tokenize_chinese_chars"] is True
  for name, token in SPECIAL_TOKENS.items():
    assert tokenizer_config[name] == token
  assert read_json(output_dir, "special_tokens_map.json") == SPECIAL_TOKENS
  with open(os.path.join(output_dir, "vocab.txt"), "rb") as f:
    exported_vocab = f.read()
  expected = "".join(t + "\n" for t in conversion_models.demo_vocab_tokens()).encode("utf-8")
  assert exported_vocab == expected


def test_do_lower_case_comes_from_model_settings(tmp_path):
  model = conversion_models.write_model(str(tmp_path / "ours"), "classifier", num_layers=1)
  settings_path = os.path.join(model.directory, "model_settings.json")
  settings = read_json(model.directory, "model_settings.json")
  settings["do_lower_case"] = False
  conversion_models.write_json(settings_path, settings)
  conversion_models.export(model, str(tmp_path / "hf"), str(tmp_path / "files"))
  assert read_json(str(tmp_path / "hf"), "tokenizer_config.json")["do_lower_case"] is False
  conversion_models.export(model, str(tmp_path / "hf2"), str(tmp_path / "files"),
                           do_lower_case=True)
  assert read_json(str(tmp_path / "hf2"), "tokenizer_config.json")["do_lower_case"] is True


def test_pad_token_id_is_the_vocab_id_of_pad(tmp_path):
  model = conversion_models.write_model(str(tmp_path / "ours"), "squad", num_layers=1)
  tokens = conversion_models.demo_vocab_tokens()
  moved = tokens[1:4] + ["[PAD]"] + tokens[4:]  # [PAD] becomes id 3
  vocab_file = conversion_models.write_vocab(str(tmp_path / "vocab.txt"), moved)
  config_file = str(tmp_path / "bert_config.json")
  conversion_models.write_json(config_file, model.config)
  to_transformers.convert(model.directory, str(tmp_path / "hf"), config_file, vocab_file)
  assert read_json(str(tmp_path / "hf"), "config.json")["pad_token_id"] == 3
  with open(str(tmp_path / "hf" / "vocab.txt"), encoding="utf-8") as f:
    assert f.read() == "".join(token + "\n" for token in moved)


@pytest.mark.parametrize("kind", KINDS)
def test_beside_files(exported, kind):
  """What transformers has no place for: the CRF's transitions, the thresholds and our
  settings, written beside the model; nothing else."""
  model, output_dir, summary = exported[kind]
  expected = set(model.files) - {"labels.txt"}
  if kind == "ner_crf":
    expected.add("crf_transitions.json")
  assert set(summary["beside"]) == expected
  assert summary["training_only"] == []
  for name in ("model_settings.json", "thresholds.json", "crf_transitions.json"):
    assert os.path.isfile(os.path.join(output_dir, name)) == (name in expected), name
    if name in model.files:
      with open(os.path.join(output_dir, name), encoding="utf-8") as f:
        assert f.read() == model.files[name]
  if kind == "ner_crf":
    crf = read_json(output_dir, "crf_transitions.json")
    assert crf["labels"] == conversion_models.TAGS
    assert np.array_equal(np.asarray(crf["transitions"], np.float32),
                          model.arrays["cls/ner/crf/transitions"])


@pytest.mark.parametrize("kind", KINDS)
def test_no_training_state_is_exported(exported, kind):
  model, output_dir, summary = exported[kind]
  arrays = safetensors_numpy.load_file(os.path.join(output_dir, "model.safetensors"))
  assert not [name for name in arrays if "adam" in name or "global_step" in name]
  assert summary["weights"] == len(EXPECTED_KEYS[kind])
  assert sorted(os.listdir(output_dir)) == sorted(
      ["config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json",
       "special_tokens_map.json"] + summary["beside"])


# ---------------------------------------------------------------------------
# 2. The exported weights through numpy_bert give our TensorFlow model's outputs
# ---------------------------------------------------------------------------

TEXTS = [("北京马拉松吸引了跑者", None), ("某银行发行了债券", "公司发布新款手机"),
         ("电影上映。", None)]
SEQ = 20
MASKED_POSITIONS = [[1, 3], [2, 5], [1, 2]]


def real_inputs():
  """[CLS] a [SEP] (b [SEP]) over the demo vocab, padded to SEQ: ids, mask, segments."""
  vocab_file = conversion_models.demo_vocab_file()
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  ids = np.zeros([len(TEXTS), SEQ], np.int32)
  mask, segments = np.zeros_like(ids), np.zeros_like(ids)
  for row, (text_a, text_b) in enumerate(TEXTS):
    tokens = ["[CLS]"] + tokenizer.tokenize(text_a) + ["[SEP]"]
    types = [0] * len(tokens)
    if text_b:
      tokens += tokenizer.tokenize(text_b) + ["[SEP]"]
      types += [1] * (len(tokens) - len(types))
    ids[row, :len(tokens)] = tokenizer.convert_tokens_to_ids(tokens)
    mask[row, :len(tokens)] = 1
    segments[row, :len(tokens)] = types
  assert 0 < mask.sum(axis=1).min() < SEQ  # padding in every row
  assert (ids[mask == 1] != tokenization.load_vocab(vocab_file)["[UNK]"]).all()
  return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


def _tensorflow_outputs(kind, config, features):
  """Our head's outputs (tensors) on features (constants)."""
  num_labels = {"classifier": 3, "multi_label": 3, "ner": 5, "ner_crf": 5}.get(kind)
  if kind in ("classifier", "multi_label"):
    outputs = classifier_model.create_model_fn(config, num_labels, kind == "multi_label")(
        features, False)
    return {"probabilities": outputs["probabilities"]}
  if kind in ("ner", "ner_crf"):
    features["tag_mask"] = features["input_mask"]
    outputs = ner_model.create_model_fn(config, num_labels, kind == "ner_crf")(features, False)
    return {"probabilities": outputs["probabilities"]}
  if kind == "squad":
    features["unique_ids"] = tf.range(len(TEXTS))
    outputs = squad_model.create_model_fn(config)(features, False)
    return {name: outputs[name] for name in ("start_logits", "end_logits")}
  model = modeling.BertModel(config, False, features["input_ids"], features["input_mask"],
                             features["segment_ids"])
  outputs = {"sequence": model.get_sequence_output(), "pooled": model.get_pooled_output()}
  if kind in ("masked_lm", "pretraining"):
    outputs["masked_lm_log_probs"] = pretraining_model.masked_lm_log_probs(
        config, model.get_sequence_output(), model.get_embedding_table(),
        tf.constant(MASKED_POSITIONS))
  if kind == "pretraining":
    outputs["next_sentence_log_prob_0"] = pretraining_model.next_sentence_head(
        config, model.get_pooled_output(), tf.zeros([len(TEXTS)], tf.int32))[1]
  return outputs


def tensorflow_outputs(model, inputs):
  """Our TensorFlow model of `model.kind` on its original checkpoint: dict of arrays."""
  config = modeling.BertConfig.from_dict(model.config)
  with tf.Graph().as_default():
    features = {name: tf.constant(value) for name, value in inputs.items()}
    outputs = _tensorflow_outputs(model.kind, config, features)
    with tf.Session() as sess:
      tf.train.Saver(tf.global_variables()).restore(sess, model.checkpoint)
      return sess.run(outputs)


def log_softmax(logits):
  shifted = logits - logits.max(axis=-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _masked_lm_log_probs(arrays, config, sequence):
  """transformers' BertLMPredictionHead: dense, GELU, LayerNorm, tied decoder + bias."""
  hidden = sequence[np.arange(len(TEXTS))[:, None], np.asarray(MASKED_POSITIONS)]
  hidden = hidden.reshape([-1, config.hidden_size])
  hidden = numpy_bert.gelu_exact(
      hidden.dot(arrays["cls.predictions.transform.dense.weight"].T) +
      arrays["cls.predictions.transform.dense.bias"])
  hidden = numpy_bert.layer_norm(hidden, arrays["cls.predictions.transform.LayerNorm.weight"],
                                 arrays["cls.predictions.transform.LayerNorm.bias"])
  logits = (hidden.dot(arrays["bert.embeddings.word_embeddings.weight"].T) +
            arrays["cls.predictions.bias"])
  return log_softmax(logits)


def numpy_outputs(kind, output_dir, inputs):
  """The exported directory's outputs as transformers computes them, in NumPy."""
  arrays = {name: array.astype(np.float64) for name, array in safetensors_numpy.load_file(
      os.path.join(output_dir, "model.safetensors")).items()}
  config = modeling.BertConfig.from_dict(read_json(output_dir, "config.json"))
  prefix = "" if kind == "encoder" else "bert."
  weights = conversion_models.google_weights(arrays, config.num_hidden_layers, prefix)
  if "bert/pooler/dense/kernel" not in weights:  # transformers' class has no pooler
    weights["bert/pooler/dense/kernel"] = np.zeros([config.hidden_size] * 2)
    weights["bert/pooler/dense/bias"] = np.zeros([config.hidden_size])
  bert = numpy_bert.bert_forward(weights, config, inputs["input_ids"], inputs["input_mask"],
                                 inputs["segment_ids"])
  sequence, pooled = bert["sequence_output"], bert["pooled_output"]
  if kind in ("classifier", "multi_label"):
    logits = pooled.dot(arrays["classifier.weight"].T) + arrays["classifier.bias"]
    return {"probabilities": (1 / (1 + np.exp(-logits)) if kind == "multi_label" else
                              numpy_bert.softmax(logits))}
  if kind in ("ner", "ner_crf"):
    logits = sequence.dot(arrays["classifier.weight"].T) + arrays["classifier.bias"]
    return {"probabilities": numpy_bert.softmax(logits)}
  if kind == "squad":
    logits = sequence.dot(arrays["qa_outputs.weight"].T) + arrays["qa_outputs.bias"]
    return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}
  outputs = {"sequence": sequence, "pooled": pooled}
  if kind in ("masked_lm", "pretraining"):
    outputs["masked_lm_log_probs"] = _masked_lm_log_probs(arrays, config, sequence)
  if kind == "pretraining":
    logits = pooled.dot(arrays["cls.seq_relationship.weight"].T) + arrays[
        "cls.seq_relationship.bias"]
    outputs["next_sentence_log_prob_0"] = log_softmax(logits)[:, 0]
  return outputs


@pytest.mark.parametrize("kind", KINDS)
def test_exported_weights_give_our_outputs(exported, kind):
  """|ours - numpy's| <= 1e-5 (absolute) on every output; padding positions of the span
  logits, which ours sets to -10000, and the pooler of the classes without one are left
  out."""
  model, output_dir, _ = exported[kind]
  inputs = real_inputs()
  ours = tensorflow_outputs(model, inputs)
  theirs = numpy_outputs(kind, output_dir, inputs)
  if kind in ("masked_lm",):
    del ours["pooled"], theirs["pooled"]
  assert sorted(ours) == sorted(theirs)
  real = inputs["input_mask"] == 1
  for name, value in ours.items():
    if name.endswith("_logits"):
      value, theirs[name] = value[real], theirs[name][real]
    np.testing.assert_allclose(value, theirs[name], rtol=0, atol=ABSOLUTE_TOLERANCE,
                               err_msg=name)


# ---------------------------------------------------------------------------
# 3. Refusals: one line, nothing written
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
  return conversion_models.write_model(str(tmp_path_factory.mktemp("refusals")), "classifier",
                                       num_layers=1)


def assert_refused(output_dir, convert, *fragments):
  """convert() raises a one-line UsageError holding `fragments`; output_dir stays absent."""
  assert_usage_error(convert, *fragments)
  assert not os.path.exists(output_dir)
  parent = os.path.dirname(output_dir)
  assert not [name for name in os.listdir(parent) if name.endswith((".new-tmp", ".old-tmp"))]


def test_no_checkpoint_in_the_directory(tmp_path):
  empty = tmp_path / "empty"
  empty.mkdir()
  output_dir = str(tmp_path / "hf")
  assert_refused(output_dir, lambda: to_transformers.convert(str(empty), output_dir),
                 "no checkpoint", str(empty))


def test_input_that_does_not_exist(tmp_path):
  output_dir = str(tmp_path / "hf")
  missing = str(tmp_path / "no_such_model")
  assert_refused(output_dir, lambda: to_transformers.convert(missing, output_dir),
                 "--input=%s: no such directory or checkpoint" % missing)


def test_pretraining_output_dir_needs_vocab_file(tmp_path):
  model = conversion_models.write_model(str(tmp_path / "ours"), "pretraining", num_layers=1)
  config_file, _ = conversion_models.model_files_flags(model, str(tmp_path / "files"))
  output_dir = str(tmp_path / "hf")
  assert_refused(output_dir, lambda: to_transformers.convert(
      model.directory, output_dir, bert_config_file=config_file), "vocab.txt", "--vocab_file")


@pytest.mark.parametrize("field", ["num_hidden_layers", "hidden_size"])
def test_bert_config_of_another_model(classifier, tmp_path, field):
  config = dict(classifier.config)
  config[field] = {"num_hidden_layers": 2, "hidden_size": 32}[field]
  config_file = str(tmp_path / "bert_config.json")
  conversion_models.write_json(config_file, config)
  output_dir = str(tmp_path / "hf")
  assert_refused(output_dir, lambda: to_transformers.convert(
      classifier.directory, output_dir, bert_config_file=config_file),
                 "give the bert_config.json it was trained with")


def test_vocab_longer_than_vocab_size(classifier, tmp_path):
  vocab_file = conversion_models.write_vocab(
      str(tmp_path / "vocab.txt"), conversion_models.demo_vocab_tokens() + ["多余"])
  output_dir = str(tmp_path / "hf")
  assert_refused(output_dir, lambda: to_transformers.convert(
      classifier.directory, output_dir, vocab_file=vocab_file),
                 "vocab_size is %d" % classifier.config["vocab_size"])


def test_labels_of_another_model(tmp_path):
  model = conversion_models.write_model(str(tmp_path / "ours"), "classifier", num_layers=1)
  conversion_models.write_text(os.path.join(model.directory, "labels.txt"), "a\nb\n")
  output_dir = str(tmp_path / "hf")
  assert_refused(output_dir, lambda: to_transformers.convert(model.directory, output_dir),
                 "labels.txt", "lists 2 labels")


def test_a_checkpoint_file_given_for_its_prefix(classifier, tmp_path):
  output_dir = str(tmp_path / "hf")
  summary = to_transformers.convert(classifier.checkpoint + ".index", output_dir)
  assert summary["checkpoint"] == classifier.checkpoint
  assert summary["architecture"] == "BertForSequenceClassification"


def test_transformers_directory_given_to_the_wrong_direction(exported, tmp_path):
  _, hf_dir, _ = exported["classifier"]
  output_dir = str(tmp_path / "again")
  assert_refused(output_dir, lambda: to_transformers.convert(hf_dir, output_dir),
                 "transformers' format already", "--to=tensorflow")


def with_extra_variables(model, directory, extra):
  """A copy of `model`'s output_dir whose checkpoint also holds the arrays `extra`."""
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(model.directory))
  saved = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
  saved.update(extra)
  shutil.copytree(model.directory, directory)
  for path in glob.glob(os.path.join(directory, "model.ckpt-*")):
    os.remove(path)
  checkpoints.write_arrays(saved, os.path.join(directory, "model.ckpt-%d" %
                                               conversion_models.STEP))
  return directory


def test_a_head_no_transformers_class_receives_is_refused(classifier, tmp_path):
  """A head conversion does not know (a new task's, defined here) would be dropped while the
  body converts: refused in one line naming its variables."""
  source = with_extra_variables(classifier, str(tmp_path / "new_head"), {
      "cls/new_head/dense/kernel": np.ones([4, 3], np.float32),
      "cls/new_head/dense/bias": np.zeros([3], np.float32)})
  output_dir = str(tmp_path / "hf")
  assert_refused(output_dir, lambda: to_transformers.convert(source, output_dir),
                 "has variables that BertForSequenceClassification does not receive "
                 "(cls/new_head/dense/bias, cls/new_head/dense/kernel)",
                 "the model would lose them", "Serve it from its output_dir or an export")


def test_training_state_and_training_only_heads_are_left_out(classifier, tmp_path,
                                                             monkeypatch):
  """Optimizer slots, accumulators, loss scaling, the averages' record and a head its unit
  declares as used only in training convert to nothing, and nothing is refused."""
  monkeypatch.setattr(heads, "TRAINING_ONLY_PREFIXES", ("cls/new_head/",))
  source = with_extra_variables(classifier, str(tmp_path / "training_only"), {
      "cls/new_head/dense/kernel": np.ones([4, 3], np.float32),
      "output_bias/accumulated_grad": np.zeros([len(conversion_models.LABELS)], np.float32),
      "loss_scaling/scale": np.array(2.0, np.float32),
      "beta1_power": np.array(0.9, np.float32), "beta2_power": np.array(0.99, np.float32),
      weight_averages.RECORDED_DECAY: np.array(0.999, np.float32),
      weight_averages.RECORDED_CORRECTION: np.array(1.0, np.float32)})
  summary = to_transformers.convert(source, str(tmp_path / "hf"))
  assert summary["training_only"] == ["cls/new_head/dense/kernel"]
  arrays = safetensors_numpy.load_file(str(tmp_path / "hf" / "model.safetensors"))
  assert len(arrays) == summary["weights"] == len(EXPECTED_KEYS["classifier"])
