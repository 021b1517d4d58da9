# coding=utf-8
"""scripts/benchmark.py prints its JSON lines and the sweep table (on logical CPU devices)."""

import json

import pytest

import cli

TINY_CONFIG = {"vocab_size": 64, "hidden_size": 16, "num_hidden_layers": 1,
               "num_attention_heads": 2, "intermediate_size": 32, "max_position_embeddings": 32,
               "type_vocab_size": 2}
REQUIRED_KEYS = {"examples_per_sec", "step_time_ms", "n_towers", "global_batch", "precision"}


def run_benchmark(tmp_path, *args):
  config_file = tmp_path / "bert_config.json"
  config_file.write_text(json.dumps(TINY_CONFIG))
  result = cli.run_script("scripts/benchmark.py", [
      "--bert_config_file=%s" % config_file, "--max_seq_length=16", "--train_batch_size=4",
      "--steps=3", "--warmup_steps=1"] + list(args))
  cli.assert_succeeded(result)
  lines = result.stdout.splitlines()
  return [json.loads(line) for line in lines if line.startswith("{")], lines


@pytest.mark.parametrize("variable_update", ["host", "replicated"])
def test_sweep_prints_a_json_line_per_gpu_count_and_the_table(tmp_path, variable_update):
  results, lines = run_benchmark(tmp_path, "--sweep_gpus=1,2,4", "--length_distribution=short",
                                 "--variable_update=%s" % variable_update)
  assert [r["n_towers"] for r in results] == [1, 2, 4]
  assert [r["global_batch"] for r in results] == [4, 8, 16]  # per-tower batch fixed
  for result in results:
    assert REQUIRED_KEYS <= set(result) and result["examples_per_sec"] > 0
    assert result["variable_update"] == variable_update
  table = [line for line in lines if line.startswith("| ")]
  assert table[0].startswith(
      "| GPUs | towers | variable_update | global batch | examples/s | speedup |")
  rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table[1:]]
  assert [int(row[0]) for row in rows] == [1, 2, 4]
  assert all(row[2] == variable_update for row in rows)
  assert float(rows[0][5]) == 1.0 and float(rows[0][6]) == 1.0  # speedup, efficiency of 1
  assert abs(float(rows[1][5]) - results[1]["examples_per_sec"] /
             results[0]["examples_per_sec"]) < 0.01


def test_every_task_runs(tmp_path):
  for task in ("pretraining", "squad"):
    results, _ = run_benchmark(tmp_path, "--task=%s" % task, "--pad_to_max_seq_length")
    assert results[0]["task"] == task and results[0]["examples_per_sec"] > 0


def test_compare_techniques_alternates_the_steps_it_is_given(tmp_path):
  results, lines = run_benchmark(tmp_path, "--compare_techniques", "--rounds=2", "--steps=1",
                                 "--techniques=both,fgm")
  assert [r["technique"] for r in results] == ["plain", "both", "fgm"]
  assert results[1]["options"] == {"ema_decay": 0.999, "layerwise_lr_decay": 0.8}
  assert results[2]["options"]["attack"]["method"] == "fgm"
  assert results[0]["ratio_to_plain"] == 1.0
  for result in results:
    assert len(result["round_medians_ms"]) == 2 and result["step_time_ms"] > 0
  assert any("2 rounds x 1 steps, alternating" in line for line in lines)
