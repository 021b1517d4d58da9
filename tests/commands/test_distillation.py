# coding=utf-8
"""run_classifier_mgpu.py --teacher_dir end to end, on the demo data with tiny BERTs.

A 2-layer teacher that keeps weight averages (--ema_decay) is trained once; 1-layer students
learn from it:
- the teacher's outputs: the stored logits of every training record (then every unlabelled
  one) are the teacher's own predictions of those texts (predict_text.py on the teacher:
  its averages), and each record keeps its label weight; a rerun, or an identical copy of
  the teacher elsewhere, reuses them; resuming with another teacher checkpoint is refused,
  and a new run with it recomputes them;
- --init_from_teacher_layers=1: the student's first checkpoint, written after a step at
  learning rate 0, holds the teacher's layer 1 as its layer 0 and the teacher's embeddings,
  pooler and head, every weight equal to the teacher's average;
- k towers = one device: 2 towers x 4 and 1 tower x 8 (no dropout) end with the same weights,
  and both differ from the same run without the teacher;
- the student exports, and predict_text.py on the export gives its predict.txt; on TF 2.x
  its model.onnx (the same labels, probabilities within 1e-4) and model.int8.onnx (within
  0.05) serve through ONNX Runtime;
- a --long_text=windows teacher gives one row of logits per document (its windows pooled),
  a --multi_label teacher one logit per label, each row the teacher's own prediction
  (predict_text.py), and their students train.
The loss itself is tested against NumPy in tests/distillation/.
"""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu.training import weight_averages
import cli
from classifier_runs import base_flags, read_lines, run_classifier, write_json, write_text
from distill_records import distill_records

TEACHER_LAYERS = 2
TF1 = tf.__version__.startswith("1.")  # TF 2.x alone exports ONNX


def write_config(directory, demo_data, name, **overrides):
  path = os.path.join(directory, name)
  write_json(path, dict(demo_data.config, **overrides))
  return path


@pytest.fixture(scope="module")
def teacher(demo_data, tmp_path_factory):
  """(root directory, the teacher's output_dir), a 2-layer classifier that keeps weight
  averages (--ema_decay): its outputs and its layers must come from the averages."""
  root = str(tmp_path_factory.mktemp("distillation"))
  output_dir = os.path.join(root, "teacher")
  config = write_config(root, demo_data, "teacher_config.json",
                        num_hidden_layers=TEACHER_LAYERS)
  cli.assert_succeeded(run_classifier(base_flags(
      demo_data, output_dir, bert_config_file=config, do_predict=False, num_train_epochs=3,
      random_seed=1, ema_decay=0.9)))
  return root, output_dir


def student_flags(demo_data, teacher_dir, output_dir, config, **overrides):
  flags = base_flags(demo_data, output_dir, bert_config_file=config, teacher_dir=teacher_dir,
                     random_seed=3)
  flags.update(overrides)
  return flags


def softmax(logits):
  exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
  return exp / exp.sum(axis=-1, keepdims=True)


def predict_text(where_flag, texts, directory, name, multi_label=False):
  """predict_text.py's (labels, probabilities [n, labels]) of `texts` (a multi-label
  model's rows hold its label set, then the probabilities; others the label and its
  probability first)."""
  input_file, output_file = os.path.join(directory, name + ".txt"), os.path.join(
      directory, name + ".tsv")
  write_text(input_file, "".join(text + "\n" for text in texts))
  cli.assert_succeeded(cli.run_script("predict_text.py", cli.flag_list(dict(
      where_flag, input_file=input_file, output_file=output_file))))
  rows = [line.split("\t") for line in read_lines(output_file)]
  assert len(rows) == len(texts)
  first = 1 if multi_label else 2
  return [row[0] for row in rows], np.array([[float(p) for p in row[first:]] for row in rows])


@pytest.fixture(scope="module")
def student(demo_data, teacher):
  """A student distilled with unlabelled text and --init_from_teacher_layers=1, exported:
  (output_dir, export_dir, unlabelled texts, its stderr)."""
  root, teacher_dir = teacher
  output_dir, export_dir = os.path.join(root, "student"), os.path.join(root, "export")
  unlabeled = [text for _, text in demo_data.dev]
  unlabeled_file = os.path.join(root, "unlabeled.txt")
  write_text(unlabeled_file, "".join(text + "\n" for text in unlabeled))
  config = write_config(root, demo_data, "student_config.json", num_hidden_layers=1)
  # warmup_proportion=1: step 1 runs at learning rate 0, so model.ckpt-1 holds the start.
  result = run_classifier(student_flags(
      demo_data, teacher_dir, output_dir, config, unlabeled_file=unlabeled_file,
      init_from_teacher_layers="1", distill_temperature=2.0, distill_alpha=0.7,
      warmup_proportion=1.0, save_checkpoints_steps=1, keep_checkpoint_max=0,
      export_dir=export_dir, export_format="savedmodel" if TF1 else "both", onnx_int8=not TF1))
  cli.assert_succeeded(result)
  return output_dir, export_dir, unlabeled, result.stderr


def test_the_stored_outputs_are_the_teachers_predictions_of_every_record(
    demo_data, teacher, student):
  output_dir, _, unlabeled, stderr = student
  assert "Computing the teacher's outputs" in stderr
  logits, weights = distill_records(output_dir)
  texts = [text for _, text in demo_data.train] + unlabeled
  assert logits.shape == (len(texts), len(demo_data.labels))
  np.testing.assert_array_equal(weights, [1.0] * len(demo_data.train) + [0.0] * len(unlabeled))
  _, probabilities = predict_text({"output_dir": teacher[1]}, texts, teacher[0], "teacher")
  np.testing.assert_allclose(softmax(logits), probabilities, atol=1e-5)
  assert "71 training examples (21 unlabelled)" in stderr


def test_stored_outputs_are_reused_by_identity_and_a_resumed_student_keeps_its_teacher(
    demo_data, teacher, tmp_path):
  root, teacher_dir = teacher
  config = write_config(str(tmp_path), demo_data, "student_config.json", num_hidden_layers=1)
  output_dir = str(tmp_path / "student")
  flags = student_flags(demo_data, teacher_dir, output_dir, config, do_eval=False,
                        do_predict=False, num_train_epochs=0.5)
  first = run_classifier(flags)
  cli.assert_succeeded(first)
  assert "Computing the teacher's outputs" in first.stderr
  stored = distill_records(output_dir)[0]
  # The same teacher again, then an identical copy of it elsewhere: reused.
  identical = str(tmp_path / "teacher_copy")
  shutil.copytree(teacher_dir, identical)
  for teacher_flag in (teacher_dir, identical):
    again = run_classifier(dict(flags, teacher_dir=teacher_flag))
    cli.assert_succeeded(again)
    assert "Reusing the teacher's outputs" in again.stderr
    assert "Computing the teacher's outputs" not in again.stderr
  # Another checkpoint of the teacher (its copy trained on): resuming with it is refused...
  other_teacher = str(tmp_path / "teacher_trained_on")
  shutil.copytree(teacher_dir, other_teacher)
  shutil.rmtree(os.path.join(other_teacher, "best"))
  cli.assert_succeeded(run_classifier(base_flags(
      demo_data, other_teacher, bert_config_file=os.path.join(root, "teacher_config.json"),
      do_eval=False, do_predict=False, num_train_epochs=4, random_seed=1, ema_decay=0.9)))
  refused = run_classifier(dict(flags, teacher_dir=other_teacher))
  cli.assert_one_line_error(refused, "is not the teacher checkpoint this student has "
                            "trained on", "resume with that teacher")
  # ... and a new run in the same output_dir (its checkpoints gone) recomputes them.
  for name in os.listdir(output_dir):
    if name.startswith(("model.ckpt", "checkpoint")):
      os.remove(os.path.join(output_dir, name))
  third = run_classifier(dict(flags, teacher_dir=other_teacher))
  cli.assert_succeeded(third)
  assert "Computing the teacher's outputs" in third.stderr
  recomputed = distill_records(output_dir)[0]  # the stale file is gone: only one is left
  assert np.abs(recomputed - stored).max() > 1e-3


def checkpoint_values(path):
  reader = tf.train.load_checkpoint(path)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if not name.endswith(("adam_m", "adam_v")) and name != "global_step"}


def test_init_from_teacher_layers_copies_exactly_those_layers(teacher, student):
  teacher_best = tf.train.latest_checkpoint(os.path.join(teacher[1], "best"))
  teachers = checkpoint_values(teacher_best)
  start = checkpoint_values(os.path.join(student[0], "model.ckpt-1"))
  assert any(name.startswith("bert/encoder/layer_0/") for name in start)
  assert not any(name.startswith("bert/encoder/layer_1/") for name in start)
  for name, value in start.items():
    source = name.replace("bert/encoder/layer_0/", "bert/encoder/layer_1/")
    average = teachers[weight_averages.average_name(source)]  # the teacher's EMA weights
    assert np.abs(average - teachers[source]).max() > 0, source
    np.testing.assert_array_equal(value, average, err_msg=name)
  assert "student's layers 0, 1, ... from its layers 1" in student[3]


def test_k_towers_give_one_devices_update(demo_data, teacher, tmp_path):
  root, teacher_dir = teacher
  config = write_config(str(tmp_path), demo_data, "student_config.json", num_hidden_layers=1,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  unlabeled_file = str(tmp_path / "unlabeled.txt")
  write_text(unlabeled_file, "".join(text + "\n" for _, text in demo_data.test[:14]))
  finals = {}
  for name, n_gpus, batch, teacher_flags in (
      ("two_towers", 2, 4, {"teacher_dir": teacher_dir, "unlabeled_file": unlabeled_file}),
      ("one_tower", 1, 8, {"teacher_dir": teacher_dir, "unlabeled_file": unlabeled_file}),
      ("no_teacher", 2, 4, {})):
    output_dir = str(tmp_path / name)
    flags = base_flags(demo_data, output_dir, bert_config_file=config, n_gpus=n_gpus,
                       train_batch_size=batch, do_eval=False, do_predict=False,
                       num_train_epochs=1, random_seed=5, distill_alpha=0.6,
                       distill_temperature=3.0, **teacher_flags)
    if not teacher_flags:
      del flags["distill_alpha"], flags["distill_temperature"]
    cli.assert_succeeded(run_classifier(flags))
    finals[name] = checkpoint_values(tf.train.latest_checkpoint(output_dir))
  for name, value in finals["one_tower"].items():
    np.testing.assert_allclose(finals["two_towers"][name], value, rtol=1e-4, atol=1e-6,
                               err_msg=name)
  moved = max(np.abs(finals["two_towers"][name] - finals["no_teacher"][name]).max()
              for name in finals["no_teacher"] if name in finals["two_towers"])
  assert moved > 1e-3


def test_the_student_exports_and_serves_its_predictions(demo_data, student):
  output_dir, export_dir, _, _ = student
  versions = sorted(os.listdir(export_dir))
  assert versions
  texts = [text for _, text in demo_data.test]
  version = os.path.join(export_dir, versions[-1])
  labels, probabilities = predict_text({"export_dir": version}, texts,
                                       os.path.dirname(output_dir), "student_export")
  assert labels == read_lines(os.path.join(output_dir, "predict.txt"))
  if TF1:
    return
  # The ONNX model and its int8 copy, through ONNX Runtime: a classifier like any other.
  for onnx_file, tolerance in (("model.onnx", 1e-4), ("model.int8.onnx", 0.05)):
    onnx_labels, onnx_probabilities = predict_text(
        {"export_dir": version, "backend": "onnxruntime", "onnx_file": onnx_file}, texts,
        os.path.dirname(output_dir), "student_" + onnx_file)
    np.testing.assert_allclose(onnx_probabilities, probabilities, atol=tolerance,
                               err_msg=onnx_file)
    if onnx_file == "model.onnx":
      assert onnx_labels == labels


@pytest.mark.parametrize("kind_flags", [
    {"long_text": "windows", "doc_stride": 8, "max_seq_length": 16},
    {"multi_label": True},
], ids=["long_text_windows", "multi_label"])
def test_long_text_and_multi_label_teachers_teach_their_kind(demo_data, tmp_path, kind_flags):
  teacher_config = write_config(str(tmp_path), demo_data, "teacher.json", num_hidden_layers=2)
  student_config = write_config(str(tmp_path), demo_data, "student.json", num_hidden_layers=1)
  teacher_dir, output_dir = str(tmp_path / "teacher"), str(tmp_path / "student")
  cli.assert_succeeded(run_classifier(base_flags(
      demo_data, teacher_dir, bert_config_file=teacher_config, do_predict=False,
      num_train_epochs=1, **kind_flags)))
  result = run_classifier(base_flags(
      demo_data, output_dir, bert_config_file=student_config, teacher_dir=teacher_dir,
      num_train_epochs=1, distill_temperature=2.0, **kind_flags))
  cli.assert_succeeded(result)
  logits, weights = distill_records(output_dir)
  assert logits.shape == (len(demo_data.train), len(demo_data.labels))  # one row a document
  np.testing.assert_array_equal(weights, np.ones(len(demo_data.train)))
  # Each row is the teacher's own prediction of its document (windows pooled; sigmoids).
  multi_label = bool(kind_flags.get("multi_label"))
  _, probabilities = predict_text({"output_dir": teacher_dir},
                                  [text for _, text in demo_data.train], str(tmp_path),
                                  "teacher", multi_label=multi_label)
  np.testing.assert_allclose(1 / (1 + np.exp(-logits)) if multi_label else softmax(logits),
                             probabilities, atol=1e-5)
  with open(os.path.join(output_dir, "model_settings.json"), encoding="utf-8") as f:
    settings = json.load(f)
  for flag, value in kind_flags.items():
    if flag in ("long_text", "multi_label", "doc_stride"):
      assert settings[flag] == value
  assert len(read_lines(os.path.join(output_dir, "predict.txt"))) == len(demo_data.test)
