# coding=utf-8
"""run_ner_mgpu.py --teacher_dir end to end (the tag head), on scripts/make_ner_data.py's
sentences with tiny BERTs.

A 2-layer tagger is trained once; 1-layer students learn from it:
- the teacher's outputs: one row of [max_seq_length x tags] logits per training window, then
  per window of the unlabelled sentences (one per line), with their label weights; a rerun
  reuses them (NER's records are keyed by their content, written alike on every run);
- --init_from_teacher_layers=1: the first checkpoint (a step at learning rate 0) holds the
  teacher's layer 1 as layer 0, and its embeddings and tag head, every weight equal;
- k towers = one device: 2 towers x 8 and 1 tower x 16 (no dropout) end with the same
  weights, and both differ from the same run without the teacher;
- a CRF or span head cannot distill, and a CRF teacher cannot teach a tags student: one
  line each, nothing written.
The loss itself is tested against NumPy in tests/distillation/test_ner_distillation_loss.py.
"""

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cli
from distill_records import distill_records

MAX_SEQ_LENGTH, NUM_TAGS = 48, 7  # make_ner_data.py: O and B-/I- of PER, LOC, ORG


def write_json(path, value):
  with open(path, "w", encoding="utf-8") as f:
    json.dump(value, f)
  return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  """{"root", "data", configs by name, "unlabeled", "teacher"}: the data, a trained
  2-layer tags teacher and 30 unlabelled sentences."""
  root = str(tmp_path_factory.mktemp("ner_distillation"))
  data = os.path.join(root, "data")
  subprocess.run([sys.executable, cli.script_path(os.path.join("scripts", "make_ner_data.py")),
                  "--output_dir", data, "--long_every", "10"], check=True,
                 stdout=subprocess.PIPE, timeout=120)
  with open(os.path.join(data, "bert_config.json")) as f:
    config = json.load(f)
  no_dropout = dict(config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  setup = {"root": root, "data": data,
           "teacher_config": write_json(os.path.join(root, "teacher.json"),
                                        dict(config, num_hidden_layers=2)),
           "student_config": write_json(os.path.join(root, "student.json"),
                                        dict(config, num_hidden_layers=1)),
           "student_no_dropout": write_json(os.path.join(root, "student_no_dropout.json"),
                                            dict(no_dropout, num_hidden_layers=1))}
  with open(os.path.join(data, "cluener", "test.json"), encoding="utf-8") as f:
    texts = [json.loads(line)["text"] for line in f if line.strip()][:30]
  setup["unlabeled"] = os.path.join(root, "unlabeled.txt")
  with open(setup["unlabeled"], "w", encoding="utf-8") as f:
    f.write("".join(text + "\n" for text in texts))
  setup["teacher"] = os.path.join(root, "teacher")
  cli.assert_succeeded(run_ner(setup, setup["teacher"], bert_config_file=setup["teacher_config"],
                               do_predict=False))
  return setup


def run_ner(setup, output_dir, **flags):
  values = dict([
      ("data_dir", os.path.join(setup["data"], "conll")),
      ("vocab_file", os.path.join(setup["data"], "vocab.txt")),
      ("bert_config_file", setup["student_config"]), ("output_dir", output_dir),
      ("do_train", True), ("do_eval", True), ("n_gpus", 2),
      ("max_seq_length", MAX_SEQ_LENGTH), ("doc_stride", 16), ("train_batch_size", 8),
      ("learning_rate", 1e-3), ("num_train_epochs", 3), ("save_checkpoints_steps", 1000),
      ("log_steps", 1000)])
  values.update(flags)
  return cli.run_script("run_ner_mgpu.py", cli.flag_list(values))


def checkpoint_values(path):
  reader = tf.train.load_checkpoint(path)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if not name.endswith(("adam_m", "adam_v")) and name != "global_step"}


def test_a_student_learns_from_the_teachers_stored_outputs_and_layers(setup):
  output_dir = os.path.join(setup["root"], "student")
  flags = dict(teacher_dir=setup["teacher"], unlabeled_file=setup["unlabeled"],
               init_from_teacher_layers=1, distill_temperature=2.0, warmup_proportion=1.0,
               save_checkpoints_steps=1, keep_checkpoint_max=0, num_train_epochs=0.2)
  result = run_ner(setup, output_dir, **flags)
  cli.assert_succeeded(result)
  assert "Computing the teacher's outputs" in result.stderr
  logits, weights = distill_records(output_dir)
  labelled, unlabelled = int(weights.sum()), int((weights == 0).sum())
  assert "%d training windows (%d unlabelled)" % (labelled + unlabelled, unlabelled) in \
      result.stderr
  assert unlabelled >= 30 and labelled == 400  # every sentence, long ones in several windows
  np.testing.assert_array_equal(weights[:labelled], 1.0)
  assert logits.shape[1] == MAX_SEQ_LENGTH * NUM_TAGS
  assert np.abs(logits).max() > 1.0  # a trained tagger's scores, not zeros
  # The start: the teacher's layer 1 as layer 0, its embeddings and its tag head.
  teachers = checkpoint_values(tf.train.latest_checkpoint(os.path.join(setup["teacher"],
                                                                       "best")))
  start = checkpoint_values(os.path.join(output_dir, "model.ckpt-1"))
  assert any(name.startswith("cls/ner/") for name in start)
  for name, value in start.items():
    np.testing.assert_array_equal(
        value, teachers[name.replace("bert/encoder/layer_0/", "bert/encoder/layer_1/")],
        err_msg=name)
  again = run_ner(setup, output_dir, **flags)
  cli.assert_succeeded(again)
  assert "Reusing the teacher's outputs" in again.stderr


def test_k_towers_give_one_devices_update(setup):
  finals = {}
  for name, n_gpus, batch, teacher in (("two", 2, 8, True), ("one", 1, 16, True),
                                       ("no_teacher", 2, 8, False)):
    output_dir = os.path.join(setup["root"], "towers_" + name)
    flags = dict(bert_config_file=setup["student_no_dropout"], n_gpus=n_gpus,
                 train_batch_size=batch, do_eval=False, num_train_epochs=0.5, random_seed=4)
    if teacher:
      flags.update(teacher_dir=setup["teacher"], unlabeled_file=setup["unlabeled"],
                   distill_alpha=0.6, distill_temperature=3.0)
    cli.assert_succeeded(run_ner(setup, output_dir, **flags))
    finals[name] = checkpoint_values(tf.train.latest_checkpoint(output_dir))
  for name, value in finals["one"].items():
    np.testing.assert_allclose(finals["two"][name], value, rtol=1e-4, atol=1e-6, err_msg=name)
  assert max(np.abs(finals["two"][name] - finals["no_teacher"][name]).max()
             for name in finals["no_teacher"]) > 1e-3


@pytest.mark.parametrize("case", ["crf_student", "span_student", "crf_teacher"])
def test_heads_that_cannot_distill_are_refused_in_one_line(setup, case):
  output_dir = os.path.join(setup["root"], "refused_" + case)
  flags = {"crf_student": dict(ner_head="crf"),
           "span_student": dict(ner_head="global_pointer")}.get(case, {})
  teacher = setup["teacher"]
  if case == "crf_teacher":
    teacher = os.path.join(setup["root"], "crf_teacher")
    with open(os.path.join(setup["teacher"], "model_settings.json")) as f:
      settings = json.load(f)
    os.makedirs(teacher)
    for name in ("vocab.txt", "bert_config.json", "labels.txt"):
      with open(os.path.join(setup["teacher"], name), "rb") as source, \
          open(os.path.join(teacher, name), "wb") as target:
        target.write(source.read())
    write_json(os.path.join(teacher, "model_settings.json"), dict(settings, use_crf=True))
    for path in glob.glob(os.path.join(setup["teacher"], "model.ckpt-*")) + [
        os.path.join(setup["teacher"], "checkpoint")]:
      with open(path, "rb") as source, open(os.path.join(teacher, os.path.basename(path)),
                                            "wb") as target:
        target.write(source.read())
  result = run_ner(setup, output_dir, teacher_dir=teacher, **flags)
  expected = {"crf_student": ["--teacher_dir with --ner_head=crf", "only --ner_head=tags"],
              "span_student": ["--teacher_dir with --ner_head=global_pointer"],
              "crf_teacher": ["the teacher's use_crf is true, this run's false"]}[case]
  cli.assert_one_line_error(result, *expected)
  assert not os.path.exists(output_dir)
