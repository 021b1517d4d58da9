# coding=utf-8
"""Parts of the ONNX Runtime predictor that need no model: the CPUs it takes, the CRF
decoding of a batch, the batching it shares with the TensorFlow predictor."""

import collections
import os
import subprocess
import sys

import numpy as np
import pytest

from cli import REPO_DIR, assert_one_line_error
from bert_mgpu import command_line_base
from bert_mgpu.ner import crf_numpy
from bert_mgpu.ner import serving as ner_serving
from bert_mgpu.serving import model_inputs
from bert_mgpu.serving import onnx_predictor


def write(directory, name, text):
  path = os.path.join(str(directory), name)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.write(text)


@pytest.mark.parametrize("files, expected", [
    ({"cpu.max": "200000 100000\n"}, 2),
    ({"cpu.max": "150000 100000\n"}, 2),  # 1.5 CPUs: 2 threads
    ({"cpu.max": "50000 100000\n"}, 1),
    ({"cpu.max": "max 100000\n"}, None),
    ({"cpu/cpu.cfs_quota_us": "400000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 4),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({}, None),
])
def test_the_cgroup_cpu_quota_is_read_from_v2_and_v1(tmp_path, files, expected):
  for name, text in files.items():
    write(tmp_path, name, text)
  assert onnx_predictor.cgroup_cpu_limit(str(tmp_path)) == expected


def test_usable_cpus_are_the_affinity_mask():
  assert 1 <= onnx_predictor.usable_cpus() <= len(os.sched_getaffinity(0))


def test_crf_tag_ids_decode_each_rows_first_pieces_only():
  rng = np.random.RandomState(0)
  logits = rng.randn(2, 6, 3).astype(np.float32)
  probabilities = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
  transitions = rng.randn(3, 3).astype(np.float32) * 3
  tag_mask = np.array([[0, 1, 1, 0, 1, 0], [0, 1, 0, 0, 0, 0]])
  tags = ner_serving.crf_tag_ids(probabilities, tag_mask, transitions)
  assert tags.dtype == np.int32 and tags.shape == (2, 6)
  np.testing.assert_array_equal(tags[tag_mask == 0], 0)
  np.testing.assert_array_equal(
      tags[0, [1, 2, 4]], crf_numpy.viterbi_decode(logits[0, [1, 2, 4]], transitions))
  assert tags[1, 1] == logits[1, 1].argmax()


SUM_SPEC = {"sum": model_inputs.OutputSpec((1,))}


def test_predict_in_batches_cuts_each_batch_to_its_longest_text_and_keeps_the_order():
  lengths = [3, 7, 2, 5, 4]
  mask = np.array([[1] * n + [0] * (8 - n) for n in lengths], np.int32)
  arrays = {"input_ids": mask * np.arange(1, 6)[:, None], "input_mask": mask}
  fed = []

  def run_batch(batch):
    fed.append(batch["input_ids"].shape)
    return {"sum": batch["input_ids"].sum(axis=1, keepdims=True).astype(np.float32)}

  result = model_inputs.predict_in_batches(arrays, run_batch, 2, 8, 1, SUM_SPEC)
  assert fed == [(2, 7), (2, 4), (1, 2)]  # longest first, each cut to its own longest
  np.testing.assert_array_equal(result["sum"][:, 0],
                                [n * (i + 1) for i, n in enumerate(lengths)])
  fed.clear()
  model_inputs.predict_in_batches(arrays, run_batch, 2, 8, None, SUM_SPEC)
  assert fed == [(2, 8), (2, 8), (1, 8)]


def test_named_outputs_of_batches_of_different_lengths_are_joined_padded_in_order():
  # Texts of 3, 7, 2, 5 and 4 tokens in batches of 2: fed 7, 4 and 2 long (length_multiple
  # 1), so the joined sequence axis is 7 long, each row padded past its batch's length.
  lengths = [3, 7, 2, 5, 4]
  mask = np.array([[1] * n + [0] * (8 - n) for n in lengths], np.int32)
  ids = mask * (np.arange(1, 6)[:, None] * 10 + np.arange(8)[None, :])
  arrays = {"input_ids": ids, "input_mask": mask}
  specs = collections.OrderedDict([
      ("per_token", model_inputs.OutputSpec((model_inputs.SEQUENCE,), np.int32, -1)),
      ("per_token_pair", model_inputs.OutputSpec((model_inputs.SEQUENCE, 2), np.float32, 9.5)),
      ("per_text", model_inputs.OutputSpec((), np.float32))])

  def run_batch(batch):
    fed = batch["input_ids"]  # [batch, fed length]
    return {"per_token": fed.astype(np.int32),
            "per_token_pair": np.stack([fed, -fed], axis=-1).astype(np.float32),
            "per_text": fed.sum(axis=1).astype(np.float32)}

  result = model_inputs.predict_in_batches(arrays, run_batch, 2, 8, 1, specs)
  assert sorted(result) == sorted(specs)
  assert result["per_token"].shape == (5, 7) and result["per_token"].dtype == np.int32
  assert result["per_token_pair"].shape == (5, 7, 2)
  assert result["per_text"].shape == (5,)
  fed_length = {1: 7, 3: 7, 4: 4, 0: 4, 2: 2}  # row -> its batch's length (longest first)
  for row in range(5):
    n = fed_length[row]
    np.testing.assert_array_equal(result["per_token"][row, :n], ids[row, :n])
    np.testing.assert_array_equal(result["per_token"][row, n:], -1)
    np.testing.assert_array_equal(result["per_token_pair"][row, :n, 1], -ids[row, :n])
    np.testing.assert_array_equal(result["per_token_pair"][row, n:], 9.5)
  np.testing.assert_array_equal(result["per_text"], ids.sum(axis=1))


def test_no_rows_give_empty_named_outputs_of_each_shape():
  specs = collections.OrderedDict([
      ("tags", model_inputs.OutputSpec((model_inputs.SEQUENCE,), np.int32)),
      ("probabilities", model_inputs.OutputSpec((3,))),
      ("spans", model_inputs.OutputSpec((8, 4)))])
  arrays = {"input_ids": np.zeros([0, 8], np.int32), "input_mask": np.zeros([0, 8], np.int32)}

  def run_batch(batch):
    raise AssertionError("no batch to run, got %s" % batch)

  result = model_inputs.predict_in_batches(arrays, run_batch, 2, 8, 1, specs)
  assert {name: (value.shape, value.dtype) for name, value in result.items()} == {
      "tags": ((0, 0), np.int32), "probabilities": ((0, 3), np.float32),
      "spans": ((0, 8, 4), np.float32)}


def test_an_output_of_another_dtype_than_declared_is_an_error():
  mask = np.ones([2, 4], np.int32)
  with pytest.raises(ValueError, match=r"'tag_ids' output is float32; its OutputSpec says int32"):
    model_inputs.predict_in_batches(
        {"input_ids": mask, "input_mask": mask},
        lambda batch: {"tag_ids": np.full([2, 4], 2.7, np.float32)}, 2, 4, 1,
        {"tag_ids": model_inputs.OutputSpec((model_inputs.SEQUENCE,), np.int32)})


def test_an_output_of_another_shape_than_declared_is_an_error():
  mask = np.ones([2, 4], np.int32)
  with pytest.raises(ValueError, match=r"'probabilities' output is \[2, 5\].*says \[2, 3\]"):
    model_inputs.predict_in_batches(
        {"input_ids": mask, "input_mask": mask},
        lambda batch: {"probabilities": np.zeros([2, 5], np.float32)}, 2, 4, 1,
        {"probabilities": model_inputs.OutputSpec((3,))})


def test_the_precision_flag_takes_the_precisions_of_mixed_precision():
  from bert_mgpu.training import mixed_precision  # pylint: disable=import-outside-toplevel
  assert tuple(mixed_precision.PRECISIONS) == command_line_base.PRECISIONS


def test_the_tensorflow_backend_without_tensorflow_is_one_line(tmp_path):
  texts = tmp_path / "texts.txt"
  texts.write_text("一段文字\n", encoding="utf-8")
  output = tmp_path / "out.tsv"
  program = ("import runpy, sys\nsys.modules['tensorflow'] = None\n"
             "sys.argv = ['predict_text.py'] + sys.argv[1:]\n"
             "runpy.run_path('predict_text.py', run_name='__main__')\n")
  result = subprocess.run(
      [sys.executable, "-c", program, "--export_dir=" + str(tmp_path),
       "--input_file=" + str(texts), "--output_file=" + str(output)],
      cwd=REPO_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8",
      timeout=120)
  assert_one_line_error(result, "needs TensorFlow", "--backend=onnxruntime")
  assert not output.exists()
