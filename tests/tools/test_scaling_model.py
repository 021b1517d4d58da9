# coding=utf-8
"""scripts/scaling_model.py: its parameter formula against the variables modeling.BertModel
creates, its FLOP and all-reduce arithmetic, its speedups at the edges, and that it prints the
tables docs/SCALING.md shows."""

import importlib.util
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cli
import modeling

SCRIPT = os.path.join(cli.REPO_DIR, "scripts", "scaling_model.py")
DOC = os.path.join(cli.REPO_DIR, "docs", "SCALING.md")


def load_scaling_model():
  spec = importlib.util.spec_from_file_location("scaling_model", SCRIPT)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


sm = load_scaling_model()
DEFAULTS = sm.parse_args([])


def graph_parameter_counts(shape):
  """(all, without the pooler): the sizes of the variables BertModel creates for `shape`,
  built in a graph of its own (nothing runs, so BERT-base costs about a second)."""
  config = modeling.BertConfig(
      vocab_size=shape.vocab, hidden_size=shape.hidden, num_hidden_layers=shape.layers,
      num_attention_heads=4, intermediate_size=shape.intermediate,
      max_position_embeddings=sm.MAX_POSITIONS, type_vocab_size=sm.TYPE_VOCAB)
  with tf.Graph().as_default():
    modeling.BertModel(config, False, tf.placeholder(tf.int32, [None, 8]))
    sizes = {v.op.name: int(np.prod(v.shape.as_list())) for v in tf.global_variables()}
  return (sum(sizes.values()),
          sum(size for name, size in sizes.items() if not name.startswith("bert/pooler/")))


@pytest.mark.parametrize("shape", [
    sm.BertShape("small", layers=2, hidden=64, intermediate=96, vocab=100),
    sm.MODELS["base-en"], sm.MODELS["base-zh"]], ids=lambda shape: shape.name)
def test_parameter_formula_counts_the_variables_bert_model_creates(shape):
  # intermediate 96 is not 4 x hidden, so a formula that confuses the two fails.
  assert graph_parameter_counts(shape) == (sm.bert_params(shape),
                                           sm.bert_params(shape, pooler=False))


def test_well_known_totals():
  assert sm.bert_params(sm.MODELS["base-en"]) == 109482240
  assert sm.bert_params(sm.MODELS["base-en"], pooler=False) == 108891648
  assert sm.bert_params(sm.MODELS["base-zh"]) == 102267648
  assert sm.bert_params(sm.MODELS["large-en"]) == 335141888


def test_training_flops_match_narayanan_et_al_form():
  # 72 B s l h^2 + 12 B s^2 l h per batch B is their 96 B s l h^2 (1 + s / 6h) with 3 instead
  # of 4 passes (no recomputation) and intermediate 4h; the vocab term is left out.
  for key in ("base-zh", "large-en"):
    shape = sm.MODELS[key]
    for seq in (128, 384):
      layers, hidden = shape.layers, shape.hidden
      want = 72 * seq * layers * hidden ** 2 + 12 * seq ** 2 * layers * hidden
      assert sm.train_flops_per_example(shape, seq) == want
  assert sm.train_flops_per_example(sm.MODELS["base-zh"], 128) == 67041755136


@pytest.mark.parametrize("n,factor", [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75), (16, 1.875)])
def test_ring_allreduce_sends_2_n_minus_1_over_n(n, factor):
  assert sm.ring_allreduce_factor(n) == pytest.approx(factor)


def test_allreduce_time_is_bytes_over_bus_bandwidth_plus_latency():
  machine = sm.MACHINES[1]
  seconds = sm.allreduce_seconds(8, 1e9, machine, DEFAULTS)
  latency = DEFAULTS.packs * 2 * 7 * DEFAULTS.link_latency
  assert seconds == pytest.approx(1.75 * 1e9 / (machine.busbw * 1e9) + latency)
  # Across two machines the network, not NVLink, sets the rate.
  network = sm.allreduce_seconds(16, 1e9, machine, DEFAULTS, 12.5)
  assert network == pytest.approx(1.875 * 1e9 / (12.5e9 * DEFAULTS.network_fraction) +
                                  DEFAULTS.packs * 2 * 15 * DEFAULTS.network_latency)
  assert sm.allreduce_seconds(1, 1e9, machine, DEFAULTS) == 0.0


def all_cases():
  for machine in sm.MACHINES:
    for key in sm.MODELS:
      for seq in (128, 384):
        for precision in ("fp32", "fp16"):
          for accumulation in (1, 4):
            yield sm.Case(sm.MODELS[key], seq, sm.BATCH[seq], precision, machine, accumulation)


def test_one_gpu_holding_the_variables_is_the_baseline():
  for case in all_cases():
    assert sm.speedup("replicated", case, 1, DEFAULTS) == pytest.approx(1.0, abs=1e-12)
    assert sm.speedup("gpu0", case, 1, DEFAULTS) == pytest.approx(1.0, abs=1e-12)
    # host pays the PCIe round trip and the CPU update even on one GPU.
    assert sm.speedup("host", case, 1, DEFAULTS) < 0.95


def test_speedups_stay_below_the_gpu_count_and_move_the_right_way():
  for case in all_cases():
    for mode in sm.MODES:
      for n in (2, 4, 8):
        assert 0 < sm.speedup(mode, case, n, DEFAULTS) < n
    assert 0 < sm.speedup("replicated", case, 16, DEFAULTS, 12.5) < 16
    # Per GPU, replicated only loses as the ring grows (on fast GPUs with a slow link even 2
    # GPUs can be slower than 1, so the speedup itself need not grow).
    efficiency = [sm.speedup("replicated", case, n, DEFAULTS, 12.5) / n for n in (1, 2, 4, 8, 16)]
    assert efficiency == sorted(efficiency, reverse=True)
    # The all-reduce runs once per update, so accumulating micro-batches can only help.
    more = case._replace(accumulation=8)
    assert (sm.speedup("replicated", more, 8, DEFAULTS) >
            sm.speedup("replicated", case, 8, DEFAULTS))
  pcie, nvlink = (sm.worked_case(machine) for machine in sm.MACHINES[:2])
  assert sm.speedup("replicated", nvlink, 8, DEFAULTS) > sm.speedup("replicated", pcie, 8,
                                                                    DEFAULTS)


def test_worked_example_of_the_doc():
  # The figures docs/SCALING.md derives by hand: BERT-base (Chinese), seq 128, fp16, 32 per GPU.
  pcie, nvlink = (sm.worked_case(machine) for machine in sm.MACHINES[:2])
  assert sm.compute_seconds(pcie, DEFAULTS) == pytest.approx(0.05473, abs=1e-5)
  assert sm.compute_seconds(nvlink, DEFAULTS) == pytest.approx(0.04904, abs=1e-5)
  assert sm.sent_gradient_bytes(pcie) == 409070592 - 4 * (21128 - 32 * 128) * 768
  weights = sm.weight_bytes(pcie.shape)
  assert weights == 409070592
  assert sm.allreduce_seconds(8, weights, pcie.machine, DEFAULTS) == pytest.approx(
      0.07215, abs=1e-5)
  assert sm.speedup("replicated", pcie, 8, DEFAULTS) == pytest.approx(3.68, abs=0.005)
  assert sm.speedup("replicated", nvlink, 8, DEFAULTS) == pytest.approx(7.03, abs=0.005)
  assert sm.speedup("host", pcie, 8, DEFAULTS) == pytest.approx(1.30, abs=0.005)
  assert sm.speedup("host", nvlink, 8, DEFAULTS) == pytest.approx(1.20, abs=0.005)


def test_script_prints_the_tables_of_the_doc():
  result = cli.run_script("scripts/scaling_model.py", ["--markdown"], timeout=60)
  cli.assert_succeeded(result)
  lines = result.stdout.splitlines()
  assert sum(line.startswith("### Speedup over one GPU") for line in lines) == 4
  table_lines = [line for line in lines if line.startswith(("### ", "| "))]
  assert len(table_lines) > 150
  with open(DOC, encoding="utf-8") as doc:
    doc_lines = set(doc.read().splitlines())
  # A changed input or formula must be followed by the doc: regenerate its tables.
  missing = [line for line in table_lines if line not in doc_lines]
  assert not missing, "docs/SCALING.md lacks %d line(s), first: %s" % (len(missing),
                                                                         missing[0])


def test_script_prints_text_tables_by_default():
  result = cli.run_script("scripts/scaling_model.py", ["--tensor_fraction=0.15"], timeout=60)
  cli.assert_succeeded(result)
  assert "== Speedup over one GPU: BERT-base, Chinese vocab, seq 128, 32 per GPU" in result.stdout
  assert "| " not in result.stdout
