# coding=utf-8
"""Runs run_ner_mgpu.py and Hugging Face's peer (hf_ner.py) alternately on the same NER data.

A B A B ...: A is ours (`run_ner_mgpu.py --n_gpus=2`, two towers on logical CPU devices when
there is no GPU; --train_batch_size is per tower), B is benchmarks/hf_ner.py with the global
batch (2 x per tower), the same conll files, vocab, bert_config.json, epochs, learning rate,
warmup and max_seq_length. Every run gets a fresh output directory. For each run it prints
the whole process's wall time (Python start to exit, imports included, measured here), our
phases (the run's own "where the time went" log) or HF's (its JSON line), training and
prediction sentences/s, and dev and test entity F1; then per pair the ratios. Both test F1s
are computed here from the predict.txt files (token, gold, predicted) with bert_mgpu/ner/scoring.py,
so they use the same decoding; dev F1 is each script's own (ours: eval_results.txt, also
ner_scoring).

The data is generated (scripts/make_ner_data.py --train_sentences N into --work_dir/data,
unless --data_root names an existing one). Needs the TF venv for ours (--tf_python) and a
venv with torch and transformers for HF's (--hf_python; benchmarks/README.md).

  python benchmarks/ner_side_by_side.py --tf_python .venv-tf2/bin/python \\
      --hf_python /tmp/hfvenv/bin/python --work_dir /tmp/nerbench [--pairs 2] \\
      [--train_sentences 4000] [--bert_config_file CFG] [--per_tower_batch_size 16] \\
      [--num_train_epochs 2] [--learning_rate 5e-4] [--max_seq_length 128] [--threads 2]

Prints one JSON line per run (prefix "RUN "), then a summary table.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bert_mgpu.ner import scoring as ner_scoring  # pylint: disable=wrong-import-position

# A line of our run's phase log: "INFO:tensorflow:  train          3.68 s   30.4%".
_PHASE_LINE = re.compile(r"^\S*:\s+([a-z_]+)\s+([0-9.]+) s\s+[0-9.]+%$")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  p.add_argument("--tf_python", default=os.path.join(ROOT, ".venv-tf2", "bin", "python"))
  p.add_argument("--hf_python", required=True, help="python of the torch/transformers venv")
  p.add_argument("--work_dir", required=True)
  p.add_argument("--data_root", default=None, help="an existing make_ner_data.py output")
  p.add_argument("--train_sentences", type=int, default=4000)
  p.add_argument("--bert_config_file", default=None,
                 help="default: the generated data's tiny bert_config.json")
  p.add_argument("--pairs", type=int, default=2)
  p.add_argument("--n_gpus", type=int, default=2)
  p.add_argument("--per_tower_batch_size", type=int, default=16)
  p.add_argument("--predict_batch_size", type=int, default=16, help="per tower (ours)")
  p.add_argument("--num_train_epochs", type=float, default=2.0)
  p.add_argument("--learning_rate", type=float, default=5e-4)
  p.add_argument("--warmup_proportion", type=float, default=0.1)
  p.add_argument("--max_seq_length", type=int, default=128)
  p.add_argument("--threads", type=int, default=2, help="torch threads of the HF run")
  p.add_argument("--hf_extra", default="", help="extra flags for hf_ner.py, space separated")
  return p.parse_args(argv)


def conll_scores(path):
  """Entity scores of a predict.txt (token ... gold TAB predicted) with ner_scoring."""
  gold, predicted, sentence_gold, sentence_predicted = [], [], [], []
  with open(path, encoding="utf-8") as f:
    for line in f.read().split("\n") + [""]:
      if not line.strip():
        if sentence_gold:
          gold.append(sentence_gold)
          predicted.append(sentence_predicted)
        sentence_gold, sentence_predicted = [], []
        continue
      columns = line.split("\t")
      sentence_gold.append(re.split(r"[ \t]+", "\t".join(columns[:-1]).strip())[-1])
      sentence_predicted.append(columns[-1])
  result = ner_scoring.score(gold, predicted)
  return {key: round(result[key], 4) for key in ("precision", "recall", "f1")}


def timed_run(command, log_path):
  """Runs `command`; returns (wall seconds, [(seconds since start, output line)]).

  stdout and stderr are read as one stream, each line stamped as it arrives."""
  env = dict(os.environ, PYTHONUNBUFFERED="1")
  start = time.perf_counter()
  process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             universal_newlines=True, cwd=ROOT, env=env)
  lines = [(time.perf_counter() - start, line.rstrip("\n")) for line in process.stdout]
  process.wait()
  wall = time.perf_counter() - start
  with open(log_path, "w", encoding="utf-8") as f:
    f.write("$ " + " ".join(command) + "\n")
    f.write("".join("[%8.3f] %s\n" % stamped for stamped in lines))
  if process.returncode:
    sys.exit("failed (exit %d), see %s:\n%s" % (process.returncode, log_path, "\n".join(
        line for _, line in lines[-30:])))
  return wall, lines


def count_sentences(path):
  with open(path, encoding="utf-8") as f:
    blocks = f.read().split("\n\n")
  return sum(1 for block in blocks if block.strip())


def run_ours(args, data, config, out, log_path):
  shutil.rmtree(out, ignore_errors=True)
  command = [args.tf_python, "run_ner_mgpu.py", "--data_dir=" + data,
             "--vocab_file=" + os.path.join(args.data_root, "vocab.txt"),
             "--bert_config_file=" + config, "--output_dir=" + out,
             "--do_train", "--do_eval", "--do_predict", "--n_gpus=%d" % args.n_gpus,
             "--train_batch_size=%d" % args.per_tower_batch_size,
             "--eval_batch_size=%d" % args.predict_batch_size,
             "--predict_batch_size=%d" % args.predict_batch_size,
             "--learning_rate=%g" % args.learning_rate,
             "--num_train_epochs=%g" % args.num_train_epochs,
             "--warmup_proportion=%g" % args.warmup_proportion,
             "--max_seq_length=%d" % args.max_seq_length,
             "--save_checkpoints_steps=100000", "--log_steps=100000"]
  wall, lines = timed_run(command, log_path)
  phases, restored_at = {}, None
  for seconds, line in lines:
    match = _PHASE_LINE.match(line.strip())
    if match:
      phases[match.group(1)] = float(match.group(2))
    if "Restoring parameters from" in line:
      restored_at = seconds
    if "Wrote the predictions of" in line and restored_at is not None:
      # The test pass: from the restore of the prediction graph (built before) to the
      # log line after predict.txt and the other outputs are written.
      phases["predict_span"] = round(seconds - restored_at, 3)
  with open(os.path.join(out, "eval_results.txt")) as f:
    dev = {k: float(v) for k, v in (line.strip().split(" = ") for line in f if line.strip())}
  steps = int(dev["global_step"])
  return {"framework": "ours", "wall_seconds": round(wall, 2), "phases": phases,
          "train_steps": steps,
          "train_sentences_per_sec": round(steps * args.per_tower_batch_size * args.n_gpus
                                           / phases["train"], 1) if phases.get("train") else None,
          "predict_sentences_per_sec": round(args.test_sentences / phases["predict_span"], 1)
                                       if phases.get("predict_span") else None,
          "dev_f1": round(dev["f1"], 4),
          "test": conll_scores(os.path.join(out, "predict.txt")),
          "command": " ".join(command[1:])}


def run_hf(args, data, config, out, log_path):
  shutil.rmtree(out, ignore_errors=True)
  command = [args.hf_python, os.path.join("benchmarks", "hf_ner.py"), "--data_dir=" + data,
             "--vocab_file=" + os.path.join(args.data_root, "vocab.txt"),
             "--bert_config_file=" + config, "--output_dir=" + out,
             "--train_batch_size=%d" % (args.per_tower_batch_size * args.n_gpus),
             "--predict_batch_size=%d" % (args.predict_batch_size * args.n_gpus),
             "--learning_rate=%g" % args.learning_rate,
             "--num_train_epochs=%g" % args.num_train_epochs,
             "--warmup_proportion=%g" % args.warmup_proportion,
             "--max_seq_length=%d" % args.max_seq_length,
             "--threads=%d" % args.threads] + args.hf_extra.split()
  wall, lines = timed_run(command, log_path)
  line = json.loads([text for _, text in lines if text.startswith("{")][-1])
  return {"framework": "hf", "wall_seconds": round(wall, 2),
          "phases": {k[:-len("_seconds")]: line[k] for k in line if k.endswith("_seconds")},
          "train_steps": line["train_steps"],
          "train_sentences_per_sec": line["train_sentences_per_sec"],
          "predict_sentences_per_sec": line["predict_sentences_per_sec"],
          "dev_f1": line["dev"]["f1"],
          "test": conll_scores(os.path.join(out, "predict.txt")),
          "versions": {k: line[k] for k in ("torch", "transformers")},
          "truncated_sentences": line["truncated_sentences"],
          "command": " ".join(command[1:])}


def main(argv=None):
  args = parse_args(argv)
  os.makedirs(args.work_dir, exist_ok=True)
  if not args.data_root:
    args.data_root = os.path.join(args.work_dir, "data")
    if not os.path.isfile(os.path.join(args.data_root, "vocab.txt")):
      subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_ner_data.py"),
                      "--output_dir", args.data_root,
                      "--train_sentences", str(args.train_sentences)], check=True)
  data = os.path.join(args.data_root, "conll")
  config = args.bert_config_file or os.path.join(args.data_root, "bert_config.json")
  args.test_sentences = count_sentences(os.path.join(data, "test.txt"))
  print("data %s: train %d, dev %d, test %d sentences; config %s" % (
      data, count_sentences(os.path.join(data, "train.txt")),
      count_sentences(os.path.join(data, "dev.txt")), args.test_sentences, config), flush=True)
  runs = []
  for pair in range(args.pairs):
    for name, run in (("ours", run_ours), ("hf", run_hf)):
      tag = "%s_%d" % (name, pair + 1)
      record = run(args, data, config, os.path.join(args.work_dir, tag),
                   os.path.join(args.work_dir, tag + ".log"))
      record.update({"pair": pair + 1, "loadavg_after": os.getloadavg()[0]})
      runs.append(record)
      print("RUN " + json.dumps(record, ensure_ascii=False), flush=True)

  print("\n| pair | run | wall s | train s | train sent/s | predict sent/s | dev F1 | test F1 |")
  print("|---|---|---|---|---|---|---|---|")
  for r in runs:
    print("| %d | %s | %.1f | %.1f | %s | %s | %.4f | %.4f |" % (
        r["pair"], r["framework"], r["wall_seconds"], r["phases"].get("train", 0.0),
        r["train_sentences_per_sec"], r["predict_sentences_per_sec"], r["dev_f1"],
        r["test"]["f1"]))
  print()
  for pair in range(args.pairs):
    ours, hf = runs[2 * pair], runs[2 * pair + 1]
    print("pair %d: wall HF/ours %.2fx (ours %s); dev F1 ours-HF %+.2f points, test F1 "
          "ours-HF %+.2f points; train sent/s ours/HF %.2fx" % (
              pair + 1, hf["wall_seconds"] / ours["wall_seconds"],
              "faster" if ours["wall_seconds"] <= hf["wall_seconds"] else "slower",
              100 * (ours["dev_f1"] - hf["dev_f1"]),
              100 * (ours["test"]["f1"] - hf["test"]["f1"]),
              ours["train_sentences_per_sec"] / hf["train_sentences_per_sec"]))
  return 0


if __name__ == "__main__":
  sys.exit(main())
