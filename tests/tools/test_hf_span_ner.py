# coding=utf-8
"""benchmarks/hf_span_ner.py (the PyTorch span-head NER job) on a made-up CMeEE set whose
entities nest, with a tiny BERT: it runs, writes its predictions and counts the same
windows and spans as our featurizing does here.

The job needs torch and transformers: it runs in this interpreter when it has them, else in
the interpreter BERT_MGPU_BENCH_PYTHON names (e.g. /work/bench-venv/bin/python, see
benchmarks/README.md); with neither, the test is skipped."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import cli
import tiny_task_files
from bert_mgpu.ner import featurizing
from bert_mgpu.ner import formats
from bert_mgpu.ner import span_windows
import tokenization

SCRIPT = os.path.join(cli.script_path("benchmarks"), "hf_span_ner.py")
CITIES = [u"北京", u"上海", u"广州", u"深圳"]
SUFFIXES = [u"大学", u"医院"]
MAX_SEQ_LENGTH, DOC_STRIDE, BATCH, EPOCHS = 16, 6, 8, 2  # some sentences need 2+ windows


def sentence(rng):
  """A CMeEE record: fillers around 1-3 cities, most inside an organisation (nested)."""
  text, entities = u"他在", []
  for _ in range(1 + rng.randint(3)):
    city, start = CITIES[rng.randint(len(CITIES))], len(text)
    word = city + (SUFFIXES[rng.randint(len(SUFFIXES))] if rng.rand() < 0.7 else u"")
    if word != city:
      entities.append({"start_idx": start, "end_idx": start + len(word) - 1, "type": "ORG"})
    entities.append({"start_idx": start, "end_idx": start + len(city) - 1, "type": "LOC"})
    text += word + u"工作 ，"  # the space gives no piece
  return {"text": text, "entities": entities}


def python_with_torch():
  if all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers")):
    return sys.executable
  python = os.environ.get("BERT_MGPU_BENCH_PYTHON")
  if not python:
    pytest.skip("no torch and transformers here, and BERT_MGPU_BENCH_PYTHON is not set")
  return python


def our_counts(data_dir, vocab_file):
  """Per split, (windows, spans the windows hold) by our featurizing."""
  tokenizer = tokenization.FullTokenizer(vocab_file, True)
  counts = {}
  for name in formats.SPLITS:
    data = formats.read_split(data_dir, "cmeee", name)
    types = sorted(set(span[0] for s in data.sentences for span in s.spans))
    featurized = featurizing.featurize_sentences(data.sentences, tokenizer, types,
                                                 MAX_SEQ_LENGTH, DOC_STRIDE, use_tags=False)
    windows = spans = 0
    for sentence_data, (aligned, sentence_windows) in zip(data.sentences, featurized):
      triples, _ = span_windows.window_span_triples(
          aligned, sentence_windows, sentence_data.spans, {t: i for i, t in enumerate(types)})
      windows += len(sentence_windows)
      spans += sum(map(len, triples))
    counts[name] = (windows, spans)
  return counts


def test_job_trains_predicts_and_windows_as_ours(tmp_path):
  python = python_with_torch()
  rng = np.random.RandomState(0)
  records = {name: [sentence(rng) for _ in range(n)]
             for name, n in (("train", 48), ("dev", 12), ("test", 12))}
  data_dir = tmp_path / "cmeee"
  data_dir.mkdir()
  for name, values in records.items():
    (data_dir / ("CMeEE_%s.json" % name)).write_text(json.dumps(values, ensure_ascii=False),
                                                     "utf-8")
  vocab_file, config_file = tiny_task_files.write_model_files(
      str(tmp_path / "model"), [r["text"] for values in records.values() for r in values])
  output_dir = tmp_path / "out"
  result = subprocess.run(
      [python, SCRIPT, "--data_dir", str(data_dir), "--vocab_file", vocab_file,
       "--bert_config_file", config_file, "--output_dir", str(output_dir),
       "--max_seq_length", str(MAX_SEQ_LENGTH), "--doc_stride", str(DOC_STRIDE),
       "--train_batch_size", str(BATCH), "--num_train_epochs", str(EPOCHS),
       "--learning_rate", "1e-3", "--threads", "1", "--seed", "3",
       "--ner_head", "efficient_global_pointer"],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8", check=False,
      timeout=cli.RUN_TIMEOUT_SECONDS)
  assert result.returncode == 0, result.stderr
  summary = json.loads(result.stdout.strip().splitlines()[-1])
  ours = our_counts(str(data_dir), vocab_file)
  for name, (windows, spans) in ours.items():
    assert (summary["data"][name]["windows"], summary["data"][name]["window_spans"]) == \
        (windows, spans)
  assert summary["data"]["train"]["windows"] > 48  # some sentences were split
  assert summary["data"]["train"]["entities_inside_another"] > 0
  assert summary["train_steps"] == int(ours["train"][0] * EPOCHS / BATCH)
  assert summary["types"] == ["LOC", "ORG"]
  for split in ("dev", "test"):
    assert set(summary[split]) >= {"precision", "recall", "f1", "nested_recall", "loss"}
    assert summary[split]["num_gold"] == sum(len(r["entities"]) for r in records[split])
  with open(str(output_dir / "predict_entities.jsonl"), encoding="utf-8") as f:
    assert len(f.read().splitlines()) == len(records["test"])
  assert (output_dir / "CMeEE_test.json").is_file()
