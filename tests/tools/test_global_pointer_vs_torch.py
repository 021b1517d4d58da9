# coding=utf-8
"""benchmarks/global_pointer_vs_torch.py: its made-up windows, our side (the span heads'
records and loss weights, 1 tower against 2), and, where torch and transformers can be
reached, the PyTorch reference against ours from the same start.

The torch side runs in this interpreter when it has torch and transformers, else in the
interpreter BERT_MGPU_BENCH_PYTHON names (e.g. /work/bench-venv/bin/python, see
benchmarks/README.md); with neither, that test is skipped."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import cli

sys.path.insert(0, cli.script_path("benchmarks"))

import global_pointer_vs_torch as bench  # pylint: disable=wrong-import-position

SCRIPT = os.path.join(cli.script_path("benchmarks"), "global_pointer_vs_torch.py")


def test_made_up_windows_nest_spans_vary_lengths_and_keep_spans_on_pieces():
  windows, spans = bench.windows()
  assert len(windows) == len(spans) == bench.STEPS * bench.BATCH
  lengths = [sum(w.input_mask) for w in windows]
  assert len(set(lengths)) > 5
  batch_longest = [max(lengths[i:i + bench.BATCH]) for i in range(0, len(lengths), bench.BATCH)]
  assert min(batch_longest) < bench.SEQ == max(batch_longest)  # some batches get cut
  assert bench.nested_count(spans) >= 5
  assert any(not row for row in spans)
  assert any(len({(s, e) for _, s, e in row}) < len(row) for row in spans)  # two types, one span
  for window, row in zip(windows, spans):
    length = sum(window.input_mask)
    assert window.input_ids[0] == bench.CLS_ID and window.input_ids[length - 1] == bench.SEP_ID
    assert len(row) <= bench.MAX_SPANS
    assert all(1 <= s <= e <= length - 2 and 0 <= t < bench.NUM_TYPES for t, s, e in row)


def test_nested_count_counts_spans_inside_another():
  assert bench.nested_count([[(0, 1, 4), (1, 2, 3), (2, 1, 4)], [(0, 5, 5)]]) == 1


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("global_pointer_vs_torch") / "ours.npz")
  bench.run_ours(path)
  return path


def run_key(head, towers, step, name):
  return bench.run_key(bench.run_name(head, towers), step, name)


@pytest.mark.parametrize("head", bench.HEADS)
def test_our_side_trains_each_head_alike_on_1_and_2_towers(ours, head):
  arrays = np.load(ours)
  initial = {k.split("/", 2)[2]: arrays[k] for k in arrays.files
             if k.startswith("initial/%s/" % head)}
  head_names = {n: initial[n].shape for n in initial if n.startswith("cls/ner/")}
  expected = {name for name, _ in bench.HEAD_NAMES.values()
              if head == bench.HEADS[1] or "type" not in name}
  assert set(head_names) == expected
  width = 2 * bench.HEAD_SIZE * (1 if head == bench.HEADS[1] else bench.NUM_TYPES)
  assert head_names["cls/ner/span_weights"] == (bench.CONFIG["hidden_size"], width)
  for step in range(bench.STEPS):
    one, two = (float(arrays[run_key(head, t, step, "loss")]) for t in bench.TOWERS)
    assert one == pytest.approx(two, rel=1e-5)
    assert 1.0 < one < 10.0
  last = bench.STEPS - 1
  change = max(float(np.max(np.abs(arrays[run_key(head, 1, last, n)] - initial[n])))
               for n in initial)
  difference = max(float(np.max(np.abs(arrays[run_key(head, 1, last, n)] -
                                        arrays[run_key(head, 2, last, n)]))) for n in initial)
  assert change > 1e-3 and difference < 1e-2 * change
  # The records as the input pipeline gives them: padded triples, each batch cut to its
  # longest window.
  for step in range(bench.STEPS):
    triples = arrays["batch/%d/span_triples" % step]
    assert triples.shape == (bench.BATCH, 3 * bench.MAX_SPANS) and (triples == -1).any()
    mask = arrays["batch/%d/input_mask" % step]
    assert mask.shape[1] == mask.sum(axis=1).max()


def torch_summary(ours, tmp_path):
  """run_torch's figures: in this interpreter, or in BERT_MGPU_BENCH_PYTHON's."""
  if all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers")):
    return bench.run_torch(ours)
  python = os.environ.get("BERT_MGPU_BENCH_PYTHON")
  if not python:
    pytest.skip("no torch and transformers here, and BERT_MGPU_BENCH_PYTHON is not set")
  summary = str(tmp_path / "summary.json")
  subprocess.run([python, SCRIPT, "torch", "--ours", ours, "--summary", summary], check=True,
                 stdout=subprocess.PIPE)
  with open(summary, encoding="utf-8") as f:
    return json.load(f)


def test_pytorch_reference_agrees_with_ours_from_the_same_start(ours, tmp_path):
  summary = torch_summary(ours, tmp_path)
  for head in bench.HEADS:
    figures = summary[head]
    start = figures["initial_loss"]
    assert start["ours_1"] == pytest.approx(start["torch_fp64"], rel=1e-6)
    assert start["torch"] == pytest.approx(start["torch_fp64"], rel=1e-6)
    assert figures["losses"]["ours_1"] == pytest.approx(figures["losses"]["torch"], rel=1e-5)
    differences = figures["relative_difference"]
    assert differences["ours_1"] < 5e-3 and differences["ours_2"] < 5e-3
    # The contrasts (rotary pairs (i, i + 32) instead of (2i, 2i + 1), the [SEP] pair a
    # candidate, the efficient head's biases swapped) change the loss and move the weights
    # elsewhere, so the agreement above is not one that any head would give.
    assert set(figures["contrasts"]) == set(bench.CONTRASTS[head])
    for contrast in figures["contrasts"].values():
      assert abs(contrast["initial_loss"] - start["torch"]) > 1e-3
      assert contrast["relative_difference"] > 0.5
