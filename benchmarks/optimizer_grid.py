# coding=utf-8
"""Trains from random weights under each optimizer, grouped and not, ours and Hugging Face's,
and tabulates test scores, stuck runs and wall times (issue #41).

Per seed and data set, in this order (so that a grouped run follows its ungrouped twin):
  ours adamw (Google's, no bias correction), plain then --group_by_length;
  ours adamw --adam_bias_correction, plain then grouped;
  ours --optimizer=radam, plain then grouped;
  HF (torch.optim.AdamW, bias-corrected, Google's schedule), plain then grouped
  (transformers' LengthGroupedSampler).
Ours always with --initializer=normal. The recipe is the issue's: max_seq_length 128, global
batch 32 (ours 2 towers x 16), lr 5e-4, 10% warmup, 2 epochs.

--optimizers runs a subset, --learning_rate another peak rate (give it its own --work_dir).
Each finished run is one JSON line in --work_dir/results.jsonl; a run already there is not run again, so an
interrupted grid resumes. --report prints the tables from the results alone.

  python benchmarks/optimizer_grid.py --tf_python .venv-tf2/bin/python \\
      --hf_python /work/bench-venv/bin/python --work_dir /tmp/grid \\
      --set waimai:classifier:/tmp/waimai128 --set shop:classifier:/tmp/shop128 \\
      --set msra:ner:/tmp/msra8k --seeds 1 2 3
  python benchmarks/optimizer_grid.py --work_dir /tmp/grid --report

Data sets: benchmarks/make_review_data.py (classifier) and make_ner_subset.py (NER, its
conll/ folder); docs/experiments/adam_bias_correction.md gives the commands.
"""

import argparse
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ner_side_by_side  # pylint: disable=wrong-import-position

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (name, side, our flags): the order runs take within a seed and set.
OPTIMIZERS = [
    ("adamw", "ours", ["--optimizer=adamw"]),
    ("adamw+bc", "ours", ["--optimizer=adamw", "--adam_bias_correction"]),
    ("radam", "ours", ["--optimizer=radam"]),
    ("hf", "hf", []),
]
RECIPE = {"learning_rate": "5e-4", "num_train_epochs": "2", "warmup_proportion": "0.1",
          "max_seq_length": "128"}


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--work_dir", required=True, help="run directories and results.jsonl")
  p.add_argument("--set", action="append", default=[], dest="sets",
                 help="NAME:classifier|ner:DATA_DIR (repeat)")
  p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
  p.add_argument("--tf_python", default=sys.executable)
  p.add_argument("--hf_python", help="a python with torch and transformers (no HF runs "
                 "without it)")
  p.add_argument("--optimizers", nargs="+", default=[name for name, _, _ in OPTIMIZERS],
                 help="a subset of %s" % ", ".join(name for name, _, _ in OPTIMIZERS))
  p.add_argument("--learning_rate", default=RECIPE["learning_rate"], help="the peak rate")
  p.add_argument("--report", action="store_true", help="print the tables and stop")
  args = p.parse_args(argv)
  RECIPE["learning_rate"] = args.learning_rate
  return args


def our_command(args, kind, data_dir, out, seed, flags, grouped):
  """run_classifier_mgpu.py or run_ner_mgpu.py with the recipe."""
  script, data = (("run_classifier_mgpu.py", ["--task_name=tsv", "--data_dir=" + data_dir])
                  if kind == "classifier" else
                  ("run_ner_mgpu.py", ["--data_dir=" + os.path.join(data_dir, "conll")]))
  return ([args.tf_python, os.path.join(REPO, script)] + data + [
      "--vocab_file=%s/vocab.txt" % data_dir, "--bert_config_file=%s/bert_config.json" % data_dir,
      "--output_dir=" + out, "--do_train", "--do_eval", "--do_predict", "--n_gpus=2",
      "--train_batch_size=16", "--eval_batch_size=32", "--predict_batch_size=32",
      "--save_checkpoints_steps=100000", "--log_steps=50", "--random_seed=%d" % seed,
      "--initializer=normal"] + ["--%s=%s" % item for item in RECIPE.items()] + flags +
          (["--group_by_length"] if grouped else []))


def hf_command(args, kind, data_dir, out, seed, grouped):
  """hf_finetune.py or hf_ner.py with the recipe (torch AdamW, Google's schedule)."""
  script, data = (("hf_finetune.py", data_dir) if kind == "classifier" else
                  ("hf_ner.py", os.path.join(data_dir, "conll")))
  return ([args.hf_python, os.path.join(REPO, "benchmarks", script), "--data_dir=" + data,
           "--vocab_file=%s/vocab.txt" % data_dir,
           "--bert_config_file=%s/bert_config.json" % data_dir, "--output_dir=" + out,
           "--train_batch_size=32", "--predict_batch_size=32", "--threads=2",
           "--seed=%d" % seed, "--lr_schedule=google", "--log_every=50"] +
          ["--%s=%s" % item for item in RECIPE.items()] +
          (["--group_by_length"] if grouped else []))


def test_score(kind, data_dir, out):
  """(score, stuck): test accuracy and whether every prediction is one label (classifier);
  test entity F1 and whether it is 0 (NER)."""
  if kind == "ner":
    f1 = ner_side_by_side.conll_scores(os.path.join(out, "predict.txt"))["f1"]
    return f1, f1 == 0.0
  with open(os.path.join(data_dir, "test.tsv"), encoding="utf-8") as f:
    gold = [line.split("\t")[0] for line in f.read().splitlines()[1:] if line]
  with open(os.path.join(out, "predict.txt"), encoding="utf-8") as f:
    predicted = [line.split("\t")[0] for line in f.read().splitlines() if line]
  if len(predicted) != len(gold):
    raise SystemExit("%s: %d predictions for %d test examples" % (out, len(predicted),
                                                                  len(gold)))
  accuracy = sum(g == p for g, p in zip(gold, predicted)) / float(len(gold))
  return round(accuracy, 4), len(set(predicted)) == 1


def read_results(path):
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


def run_grid(args, results_path):
  done = {(r["set"], r["seed"], r["optimizer"], r["grouped"]) for r in read_results(results_path)}
  for seed in args.seeds:
    for spec in args.sets:
      name, kind, data_dir = spec.split(":", 2)
      for optimizer, side, flags in OPTIMIZERS:
        if optimizer not in args.optimizers or (side == "hf" and not args.hf_python):
          continue
        for grouped in (False, True):
          if (name, seed, optimizer, grouped) in done:
            continue
          out = os.path.join(args.work_dir, "runs", "%s_%s_%s_%d" % (
              name, optimizer, "grouped" if grouped else "plain", seed))
          shutil.rmtree(out, ignore_errors=True)
          os.makedirs(out)
          command = (hf_command(args, kind, data_dir, out, seed, grouped) if side == "hf" else
                     our_command(args, kind, data_dir, out, seed, flags, grouped))
          start = time.time()
          with open(os.path.join(out, "log.txt"), "w") as log:
            subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True,
                           cwd=REPO, timeout=3600)
          wall = time.time() - start
          score, stuck = test_score(kind, data_dir, out)
          record = {"set": name, "kind": kind, "seed": seed, "optimizer": optimizer,
                    "grouped": grouped, "test": score, "stuck": stuck, "wall": round(wall, 1),
                    "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
          with open(results_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
          print(json.dumps(record), flush=True)


def report(results):
  """Markdown tables: per seed, then means, stuck counts and grouped/plain wall ratios."""
  cells = collections.OrderedDict()
  for r in results:
    cells.setdefault((r["set"], r["optimizer"], r["grouped"]), []).append(r)
  print("| set | optimizer | batches | " + " | ".join("seed %d" % s for s in sorted(
      {r["seed"] for r in results})) + " | mean test | stuck | mean wall |")
  seeds = sorted({r["seed"] for r in results})
  print("|" + "---|" * (6 + len(seeds)))
  for (name, optimizer, grouped), runs in sorted(cells.items(), key=lambda kv: (
      kv[0][0], [o[0] for o in OPTIMIZERS].index(kv[0][1]), kv[0][2])):
    by_seed = {r["seed"]: r for r in runs}
    seed_cells = ["%.4f%s, %.0f s" % (by_seed[s]["test"], " (stuck)" if by_seed[s]["stuck"]
                                       else "", by_seed[s]["wall"]) if s in by_seed else "–"
                  for s in seeds]
    print("| %s | %s | %s | %s | **%.4f** (n=%d) | %d | %.0f s |" % (
        name, optimizer, "grouped" if grouped else "plain", " | ".join(seed_cells),
        statistics.mean(r["test"] for r in runs), len(runs), sum(r["stuck"] for r in runs),
        statistics.mean(r["wall"] for r in runs)))
  print()
  print("| set | optimizer | grouped − plain (points, mean over common seeds) | "
        "grouped / plain wall |")
  print("|---|---|---|---|")
  for (name, optimizer, grouped), runs in cells.items():
    if grouped or (name, optimizer, True) not in cells:
      continue
    plain = {r["seed"]: r for r in runs}
    grouped_runs = {r["seed"]: r for r in cells[(name, optimizer, True)]}
    common = sorted(set(plain) & set(grouped_runs))
    if not common:
      continue
    difference = 100 * statistics.mean(grouped_runs[s]["test"] - plain[s]["test"]
                                       for s in common)
    ratio = (statistics.mean(grouped_runs[s]["wall"] for s in common) /
             statistics.mean(plain[s]["wall"] for s in common))
    print("| %s | %s | %+.2f (n=%d) | %.2fx |" % (name, optimizer, difference, len(common),
                                                  ratio))


def main(argv=None):
  args = parse_args(argv)
  os.makedirs(args.work_dir, exist_ok=True)
  results_path = os.path.join(args.work_dir, "results.jsonl")
  if not args.report:
    run_grid(args, results_path)
  report(read_results(results_path))


if __name__ == "__main__":
  main()
