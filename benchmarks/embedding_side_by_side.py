# coding=utf-8
"""Runs run_embedding_mgpu.py and its sentence-transformers peer (st_embedding.py) alternately.

A B A B ...: per seed, --rounds pairs of runs, A ours (`run_embedding_mgpu.py` under
--tf_python) and B the peer (`benchmarks/st_embedding.py` under --bench_python), from the
same start (--ours_init, a TF checkpoint, and --hf_dir, the same weights written by
`convert_checkpoint.py --to=transformers`) on the same files with the same recipe:

  ours                            peer
  --train_batch_size=B            --batch_size B
  --learning_rate=LR              --lr LR
  --num_train_epochs=E            --epochs E
  --warmup_proportion=W           --warmup_ratio W
  --max_seq_length=L              --max_seq_length L
  --random_seed=S                 --seed S
  --adam_bias_correction          (torch's AdamW corrects the bias)
  Google's schedule               --lr_schedule google
  --loss=cosent|in_batch|softmax  --loss cosent|in_batch|softmax   (train.tsv)
  --loss=in_batch                 --loss unsup                     (--loss unsup: train.txt)

Ours runs `--do_train --do_eval --do_predict --n_gpus=1 --save_checkpoints_steps=100000`, so
its only checkpoint, and the one test_results.txt scores, is the last step's; the peer scores
its last weights.

Prints lscpu's "Model name" line first, then one JSON line per run: tool, seed, loss, round,
wall_seconds (the whole process, start to exit: imports, featurizing, training, ours' dev
evaluation and test scoring all included), test_spearman and test_pearson (ours:
output_dir/test_results.txt; the peer: its JSON line), steps, cpu and the command. Then a
JSON summary line and a table: per tool the mean and spread (sample standard deviation,
min, max) of test Spearman over the seeds (a seed's rounds averaged first), the mean wall
time, and the ratio ours/peer of the mean wall times. Each run's output goes to a log under
--output_root; ours' output_dir is --output_root/ours_<loss>_seed<S>_r<round> (replaced).
Standard library only (no torch or TensorFlow import here).

  python benchmarks/embedding_side_by_side.py --ours_init PRE/model/model.ckpt-3000 \\
      --bert_config_file PRE/bert_config.json --vocab_file PRE/vocab.txt --hf_dir PRE/hf \\
      --data_dir DATA/stsb --loss cosent --seeds 1,2,3 --output_root /tmp/embedding_runs \\
      [--rounds 1] [--epochs 3] [--batch_size 32] [--lr 1e-4] [--max_seq_length 64] \\
      [--threads 2] [--ours_flags="--pooling=cls"] [--peer_flags="--pooling cls"] [--dry_run]

(--ours_flags and --peer_flags take their value after "=", since it starts with "--".)
"""

import argparse
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OURS_SCRIPT = os.path.join(ROOT, "run_embedding_mgpu.py")
PEER_SCRIPT = os.path.join(ROOT, "benchmarks", "st_embedding.py")
LOSSES = ("cosent", "in_batch", "softmax", "unsup")
# Larger than any run's step count: ours then saves, evaluates and predicts only at the end.
_SAVE_CHECKPOINTS_STEPS = 100000


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  p.add_argument("--tf_python", default=os.path.join(ROOT, ".venv-tf2", "bin", "python"),
                 help="python of the TensorFlow venv, for ours")
  p.add_argument("--bench_python", default="/work/bench-venv/bin/python",
                 help="python of the torch + sentence-transformers venv, for the peer")
  p.add_argument("--ours_init", required=True, help="TF checkpoint prefix ours starts from")
  p.add_argument("--bert_config_file", required=True)
  p.add_argument("--vocab_file", required=True)
  p.add_argument("--hf_dir", required=True, help="the same weights in transformers' format "
                 "(convert_checkpoint.py --to=transformers), the peer's start")
  p.add_argument("--data_dir", required=True,
                 help="train.tsv (unsup: train.txt, one sentence a line), dev.tsv, test.tsv")
  p.add_argument("--loss", choices=LOSSES, default="cosent",
                 help="unsup: ours --loss=in_batch on train.txt, the peer --loss unsup")
  p.add_argument("--seeds", default="1", help="comma-separated, e.g. 1,2,3")
  p.add_argument("--rounds", type=int, default=1, help="A B pairs per seed")
  p.add_argument("--epochs", type=float, default=3.0)
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--lr", type=float, default=1e-4)
  p.add_argument("--warmup_proportion", type=float, default=0.1)
  p.add_argument("--max_seq_length", type=int, default=64)
  p.add_argument("--threads", type=int, default=2, help="torch threads of the peer")
  p.add_argument("--output_root", required=True, help="ours' output_dirs and both logs")
  p.add_argument("--ours_flags", default="", help="more flags for ours, split with shlex; "
                 "give them after '=': --ours_flags='--pooling=cls'")
  p.add_argument("--peer_flags", default="", help="more flags for the peer, split with "
                 "shlex; give them after '=': --peer_flags='--pooling cls'")
  p.add_argument("--nice", type=int, default=5,
                 help="run both under `nice -n` this (0: not at all), as ours.sh and peer.sh")
  p.add_argument("--timeout", type=float, default=3600.0,
                 help="seconds a run may take before it is killed")
  p.add_argument("--dry_run", action="store_true", help="print the commands, run nothing")
  args = p.parse_args(argv)
  try:
    args.seed_list = [int(seed) for seed in args.seeds.split(",") if seed.strip()]
  except ValueError:
    p.error("--seeds takes integers separated by commas, not %r" % args.seeds)
  if not args.seed_list or args.rounds < 1:
    p.error("give at least one seed and one round")
  return args


def cpu_model_name():
  """lscpu's "Model name:" line (else /proc/cpuinfo's "model name"), for naming the figures."""
  try:
    output = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    for line in output.splitlines():
      if line.startswith("Model name:"):
        return "Model name: " + line.split(":", 1)[1].strip()
  except OSError:
    pass
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("model name"):
          return "Model name: " + line.split(":", 1)[1].strip()
  except OSError:
    pass
  return "Model name: unknown"


def train_file(args):
  """The training file both sides read, checked against --loss.

  Ours reads SimCSE sentences only from a .txt (a TSV would be supervised pairs), and
  run_embedding_mgpu.py refuses two train files, so exactly one is wanted.
  """
  found = [os.path.join(args.data_dir, name) for name in ("train.tsv", "train.txt")
           if os.path.isfile(os.path.join(args.data_dir, name))]
  if len(found) != 1:
    sys.exit("%s: want exactly one of train.tsv, train.txt; found %d" % (
        args.data_dir, len(found)))
  want = ".txt" if args.loss == "unsup" else ".tsv"
  if not found[0].endswith(want):
    sys.exit("--loss=%s needs train%s in %s" % (args.loss, want, args.data_dir))
  for name in ("dev.tsv", "test.tsv"):
    if not os.path.isfile(os.path.join(args.data_dir, name)):
      sys.exit("%s: no %s" % (args.data_dir, name))
  return found[0]


def niced(args, command):
  return (["nice", "-n", str(args.nice)] if args.nice else []) + command


def ours_command(args, seed, output_dir):
  """run_embedding_mgpu.py's command line for one run."""
  return niced(args, [
      args.tf_python, OURS_SCRIPT, "--data_dir=" + args.data_dir,
      "--loss=" + ("in_batch" if args.loss == "unsup" else args.loss),
      "--vocab_file=" + args.vocab_file, "--bert_config_file=" + args.bert_config_file,
      "--init_checkpoint=" + args.ours_init, "--output_dir=" + output_dir,
      "--do_train", "--do_eval", "--do_predict", "--n_gpus=1",
      "--train_batch_size=%d" % args.batch_size, "--max_seq_length=%d" % args.max_seq_length,
      "--learning_rate=%g" % args.lr, "--num_train_epochs=%g" % args.epochs,
      "--warmup_proportion=%g" % args.warmup_proportion, "--adam_bias_correction",
      "--save_checkpoints_steps=%d" % _SAVE_CHECKPOINTS_STEPS, "--log_steps=100",
      "--random_seed=%d" % seed] + shlex.split(args.ours_flags))


def peer_command(args, seed, train_path):
  """st_embedding.py's command line for one run."""
  return niced(args, [
      args.bench_python, PEER_SCRIPT, "--model_dir", args.hf_dir, "--loss", args.loss,
      "--train", train_path, "--test", os.path.join(args.data_dir, "test.tsv"),
      "--epochs", "%g" % args.epochs, "--batch_size", str(args.batch_size),
      "--lr", "%g" % args.lr, "--max_seq_length", str(args.max_seq_length),
      "--seed", str(seed), "--warmup_ratio", "%g" % args.warmup_proportion,
      "--lr_schedule", "google", "--threads", str(args.threads)] + shlex.split(args.peer_flags))


def _kill_group(process):
  """SIGKILL to the process group `process` leads (started with start_new_session)."""
  try:
    os.killpg(process.pid, signal.SIGKILL)
  except ProcessLookupError:  # already gone
    pass


def run_process(command, log_path, timeout, capture_stdout, env=None):
  """Runs `command` from the repo's root, its output into log_path.

  Args:
    command: the argument list.
    log_path: gets stderr, and stdout too unless capture_stdout.
    timeout: seconds; then the process and its children are killed.
    capture_stdout: return stdout instead of logging it.
    env: the environment, default ours.

  Returns:
    (wall seconds from start to exit, stdout or "", error or None).
  """
  with open(log_path, "w", encoding="utf-8") as log:
    log.write("$ " + shlex.join(command) + "\n")
    log.flush()
    start = time.perf_counter()
    # A session of its own, so that a timeout kills the whole process group.
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE if capture_stdout else log,
                               stderr=log, text=True, start_new_session=True)
    try:
      stdout, _ = process.communicate(timeout=timeout)
      error = "exit %d" % process.returncode if process.returncode else None
    except subprocess.TimeoutExpired:
      _kill_group(process)
      stdout, _ = process.communicate()
      error = "timeout after %g s, killed" % timeout
    finally:
      if process.poll() is None:  # interrupted: leave nothing running
        _kill_group(process)
        process.wait()
    wall = time.perf_counter() - start
  return wall, stdout or "", error


def read_key_values(path):
  """`key = value` lines (eval_results.txt, test_results.txt) as a dict, numbers as floats."""
  values = {}
  with open(path, encoding="utf-8") as f:
    for line in f:
      if "=" in line:
        key, value = (part.strip() for part in line.split("=", 1))
        try:
          values[key] = float(value)
        except ValueError:
          values[key] = value
  return values


def run_ours(args, seed, round_number):
  """One run of ours; returns its record (scores None on failure)."""
  name = "ours_%s_seed%d_r%d" % (args.loss, seed, round_number)
  output_dir = os.path.join(args.output_root, name)
  shutil.rmtree(output_dir, ignore_errors=True)
  command = ours_command(args, seed, output_dir)
  log_path = os.path.join(args.output_root, name + ".log")
  wall, _, error = run_process(command, log_path, args.timeout, capture_stdout=False)
  record = {"tool": "ours", "wall_seconds": round(wall, 1), "test_spearman": None,
            "test_pearson": None, "steps": None, "dev": None}
  test_path = os.path.join(output_dir, "test_results.txt")
  if not error and not os.path.isfile(test_path):
    error = "no " + test_path
  if not error:
    test = read_key_values(test_path)
    record.update(test_spearman=test.get("spearman"), test_pearson=test.get("pearson"),
                  steps=int(test["global_step"]) if "global_step" in test else None)
    dev_path = os.path.join(output_dir, "eval_results.txt")
    if os.path.isfile(dev_path):
      record["dev"] = read_key_values(dev_path)
  record.update(error=error, log=log_path, command=shlex.join(command))
  return record


def run_peer(args, seed, round_number, train_path):
  """One run of the peer; returns its record (scores None on failure)."""
  name = "peer_%s_seed%d_r%d" % (args.loss, seed, round_number)
  command = peer_command(args, seed, train_path)
  log_path = os.path.join(args.output_root, name + ".log")
  # Everything is local: the hub is never asked (as peer.sh).
  env = dict(os.environ, HF_HUB_OFFLINE="1")
  wall, stdout, error = run_process(command, log_path, args.timeout, capture_stdout=True,
                                    env=env)
  record = {"tool": "peer", "wall_seconds": round(wall, 1), "test_spearman": None,
            "test_pearson": None, "steps": None, "peer": None}
  lines = [line for line in stdout.splitlines() if line.startswith("{")]
  if not error and not lines:
    error = "no JSON line on stdout"
  if not error:
    line = json.loads(lines[-1])
    record.update(test_spearman=line["spearman"], test_pearson=line["pearson"],
                  steps=line["steps"], peer=line)
  record.update(error=error, log=log_path, command="HF_HUB_OFFLINE=1 " + shlex.join(command))
  return record


def summarize(runs, cpu):
  """Per tool: test Spearman over the seeds (a seed's rounds averaged first), mean wall time;
  and ours/peer of the mean wall times."""
  summary = {"summary": True, "cpu": cpu, "tools": {}}
  for tool in ("ours", "peer"):
    done = [r for r in runs if r["tool"] == tool and r["error"] is None]
    by_seed = {}
    for r in done:
      if r["test_spearman"] is not None:
        by_seed.setdefault(r["seed"], []).append(r["test_spearman"])
    per_seed = [statistics.mean(values) for _, values in sorted(by_seed.items())]
    summary["tools"][tool] = {
        "runs": len(done),
        "failed": sum(1 for r in runs if r["tool"] == tool and r["error"] is not None),
        "seeds": len(per_seed),
        "spearman_mean": round(statistics.mean(per_seed), 4) if per_seed else None,
        "spearman_stdev": round(statistics.stdev(per_seed), 4) if len(per_seed) > 1 else None,
        "spearman_min": round(min(per_seed), 4) if per_seed else None,
        "spearman_max": round(max(per_seed), 4) if per_seed else None,
        "wall_seconds_mean": (round(statistics.mean(r["wall_seconds"] for r in done), 1)
                              if done else None),
    }
  ours, peer = summary["tools"]["ours"], summary["tools"]["peer"]
  summary["wall_ratio_ours_over_peer"] = (
      round(ours["wall_seconds_mean"] / peer["wall_seconds_mean"], 3)
      if ours["wall_seconds_mean"] is not None and peer["wall_seconds_mean"] else None)
  return summary


def print_table(summary):
  """The summary as a few readable lines."""
  print("\n| tool | runs (failed) | seeds | test Spearman mean | stdev | min - max | wall s mean |")
  print("|---|---|---|---|---|---|---|")
  for tool, s in summary["tools"].items():
    print("| %s | %d (%d) | %d | %s | %s | %s - %s | %s |" % (
        tool, s["runs"], s["failed"], s["seeds"], s["spearman_mean"], s["spearman_stdev"],
        s["spearman_min"], s["spearman_max"], s["wall_seconds_mean"]))
  print("\nwall time ours/peer: %s (%s)" % (summary["wall_ratio_ours_over_peer"],
                                            summary["cpu"]), flush=True)


def report(result, seed, loss, round_number, cpu):
  """A run's JSON line, printed; returns its record."""
  record = {"tool": result["tool"], "seed": seed, "loss": loss, "round": round_number}
  record.update(result)
  record["cpu"] = cpu
  print(json.dumps(record, ensure_ascii=False), flush=True)
  return record


def main(argv=None):
  args = parse_args(argv)
  # The runs start in the repo's root, so paths given relative to here are made absolute.
  for name in ("ours_init", "bert_config_file", "vocab_file", "hf_dir", "data_dir",
               "output_root"):
    setattr(args, name, os.path.abspath(getattr(args, name)))
  for name in ("tf_python", "bench_python"):
    if os.sep in getattr(args, name):
      setattr(args, name, os.path.abspath(getattr(args, name)))
  train_path = train_file(args)
  cpu = cpu_model_name()
  print(cpu, flush=True)
  if args.dry_run:
    for seed in args.seed_list:
      for round_number in range(1, args.rounds + 1):
        output_dir = os.path.join(args.output_root,
                                  "ours_%s_seed%d_r%d" % (args.loss, seed, round_number))
        print(shlex.join(ours_command(args, seed, output_dir)))
        print("HF_HUB_OFFLINE=1 " + shlex.join(peer_command(args, seed, train_path)))
    return 0
  os.makedirs(args.output_root, exist_ok=True)
  runs = []
  for seed in args.seed_list:
    for round_number in range(1, args.rounds + 1):
      runs.append(report(run_ours(args, seed, round_number), seed, args.loss, round_number,
                         cpu))
      runs.append(report(run_peer(args, seed, round_number, train_path), seed, args.loss,
                         round_number, cpu))
  summary = summarize(runs, cpu)
  print(json.dumps(summary, ensure_ascii=False), flush=True)
  print_table(summary)
  return 1 if any(r["error"] for r in runs) else 0


if __name__ == "__main__":
  sys.exit(main())
