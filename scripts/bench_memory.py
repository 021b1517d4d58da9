# coding=utf-8
"""Peak memory of pre-training steps with 1 and 4 towers at the same global batch.

Each tower count runs in a subprocess of its own, so one run's peak cannot hide in another's.
The child builds the real pre-training step (multigpu.plan_devices, multigpu.build_training,
bert_mgpu/pretraining/model.py create_model_fn: masked LM with the output weight tied to the word
embeddings, next sentence), initialises it, and runs a few steps on random features held in
graph constants (no files needed). It reports:

  baseline  RSS once the graph is built and the variables are initialised;
  peak      the process's peak RSS at the end (getrusage ru_maxrss);
  steps     peak - baseline, what the training steps add.

  python scripts/bench_memory.py [--towers 1,4] [--layers 12] [--hidden 768] [--batch 8]
                                 [--steps 3] [--optimizer adamw]

The defaults are BERT-base with the Chinese vocabulary (21128 x 768, 12 layers, 12 heads,
intermediate 3072), seq 128, 20 masked-LM predictions per example, global batch 8.
With no GPU the towers are logical CPU devices of one process with one allocator, so every
figure is the whole process: towers, variables, optimizer slots and averaging together.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
import tensorflow.compat.v1 as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bert_mgpu.pretraining import model as pretraining_model  # pylint: disable=wrong-import-position
import modeling  # pylint: disable=wrong-import-position
import multigpu  # pylint: disable=wrong-import-position

MIB = float(1 << 20)
RESULT_PREFIX = "BENCH_MEMORY_RESULT "


def peak_rss_mib():
  """The process's peak resident set size so far, in MiB (ru_maxrss: KiB on Linux)."""
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return peak / MIB if sys.platform == "darwin" else peak / 1024.0  # macOS reports bytes


def current_rss_mib():
  """The process's resident set size now, in MiB (Linux /proc; None elsewhere)."""
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith("VmRSS:"):
          return int(line.split()[1]) / 1024.0  # the value is in kB
  except IOError:
    pass
  return None


def make_config(args):
  """The BertConfig the flags describe; dropout stays at the released 0.1."""
  return modeling.BertConfig(
      vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
      num_attention_heads=args.heads or max(1, args.hidden // 64),
      intermediate_size=args.intermediate or 4 * args.hidden,
      max_position_embeddings=max(512, args.seq), type_vocab_size=2)


def random_features(args, seed=0):
  """One global batch of pre-training features as NumPy arrays, shaped like the TFRecords."""
  rng = np.random.RandomState(seed)
  batch, seq, preds = args.batch, args.seq, args.predictions
  positions = np.stack([np.sort(rng.choice(np.arange(1, seq - 1), preds, replace=False))
                        for _ in range(batch)])  # [batch, preds], never [CLS]
  return {
      "input_ids": rng.randint(0, args.vocab, [batch, seq]).astype(np.int32),
      "input_mask": np.ones([batch, seq], np.int32),
      "segment_ids": np.array([[0] * (seq // 2) + [1] * (seq - seq // 2)] * batch, np.int32),
      "masked_lm_positions": positions.astype(np.int32),
      "masked_lm_ids": rng.randint(0, args.vocab, [batch, preds]).astype(np.int32),
      "masked_lm_weights": np.ones([batch, preds], np.float32),
      "next_sentence_labels": rng.randint(0, 2, [batch, 1]).astype(np.int32),
  }


def measure(num_towers, args):
  """Runs in the child: builds, initialises and trains; returns the figures as a dict."""
  config = make_config(args)
  plan = multigpu.plan_devices(num_towers, 1)
  start = time.time()
  with tf.Graph().as_default():
    tf.set_random_seed(1)
    features = {name: tf.constant(value) for name, value in random_features(args).items()}
    ops = multigpu.build_training(plan, pretraining_model.create_model_fn(config), features,
                                  1e-4, 1000, 10, optimizer_name=args.optimizer)
    num_params = sum(int(np.prod(v.shape.as_list())) for v in tf.trainable_variables())
    with tf.Session(config=plan.session_config()) as sess:
      sess.run(tf.global_variables_initializer())
      baseline_rss, baseline_peak = current_rss_mib(), peak_rss_mib()
      build_seconds = time.time() - start
      step_seconds = []
      for _ in range(args.steps):
        step_start = time.time()
        # Fetch a real tensor with the update: Grappler prunes what nothing fetches.
        loss = sess.run([ops.train_op, ops.loss])[1]
        step_seconds.append(time.time() - step_start)
      peak, final_rss = peak_rss_mib(), current_rss_mib()
  return {"towers": num_towers, "devices": plan.tower_devices,
          "variable_device": plan.variable_device, "num_params": num_params,
          "baseline_rss": baseline_rss, "baseline_peak": baseline_peak, "peak": peak,
          "final_rss": final_rss, "build_seconds": build_seconds,
          "step_seconds": step_seconds, "last_loss": float(loss),
          "gpus": multigpu.count_visible_gpus()}


def run_child(num_towers, argv):
  """Runs this script for one tower count in a fresh process; returns its figures."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
  command = [sys.executable, os.path.abspath(__file__), "--child_towers=%d" % num_towers]
  proc = subprocess.run(command + argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        env=env)
  output = proc.stdout.decode("utf-8", "replace")
  for line in output.splitlines():
    if line.startswith(RESULT_PREFIX):
      return json.loads(line[len(RESULT_PREFIX):])
  raise RuntimeError("The %d-tower run failed (exit code %d); its output:\n%s" %
                     (num_towers, proc.returncode, output))


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--towers", default="1,4", help="comma-separated tower counts")
  parser.add_argument("--layers", type=int, default=12)
  parser.add_argument("--hidden", type=int, default=768)
  parser.add_argument("--heads", type=int, default=None, help="default: hidden / 64")
  parser.add_argument("--intermediate", type=int, default=None, help="default: 4 x hidden")
  parser.add_argument("--vocab", type=int, default=21128)
  parser.add_argument("--seq", type=int, default=128)
  parser.add_argument("--predictions", type=int, default=20,
                      help="max_predictions_per_seq")
  parser.add_argument("--batch", type=int, default=8, help="GLOBAL batch, split over towers")
  parser.add_argument("--steps", type=int, default=3)
  parser.add_argument("--optimizer", default="adamw", choices=["adamw", "lamb"])
  parser.add_argument("--child_towers", type=int, default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  counts = [int(t) for t in args.towers.split(",")]
  for count in counts:
    if count < 1 or args.batch % count:
      parser.error("--batch=%d must split evenly over %d towers (--towers=%s)." %
                   (args.batch, count, args.towers))
  if args.predictions > args.seq - 2:
    parser.error("--predictions=%d does not fit in --seq=%d." % (args.predictions, args.seq))
  return args, counts


def main():
  argv = sys.argv[1:]
  args, counts = parse_args(argv)
  if args.child_towers is not None:
    tf.logging.set_verbosity(tf.logging.ERROR)
    print(RESULT_PREFIX + json.dumps(measure(args.child_towers, args)))
    return

  config = make_config(args)
  print("TensorFlow %s, Python %s; %s" % (tf.version.VERSION, sys.version.split()[0], " ".join(
      ["bench_memory.py"] + argv)))
  print("BERT: vocab %d, hidden %d, %d layers, %d heads, intermediate %d; seq %d, %d "
        "masked-LM predictions; global batch %d; %d steps; optimizer %s" % (
            config.vocab_size, config.hidden_size, config.num_hidden_layers,
            config.num_attention_heads, config.intermediate_size, args.seq, args.predictions,
            args.batch, args.steps, args.optimizer))
  gradient_mib = config.vocab_size * config.hidden_size * 4 / MIB
  print("One float32 [vocab, hidden] = [%d, %d] gradient: %d bytes = %.1f MiB" % (
      config.vocab_size, config.hidden_size, config.vocab_size * config.hidden_size * 4,
      gradient_mib))
  child_argv = [a for a in argv if not a.startswith("--child_towers")]
  results = []
  for count in counts:
    result = run_child(count, child_argv)
    results.append(result)
    if len(results) == 1:
      print("Parameters: %d (%.1f MiB float32; with the two Adam/LAMB slots %.1f MiB)" % (
          result["num_params"], result["num_params"] * 4 / MIB,
          3 * result["num_params"] * 4 / MIB))
    print("towers %d (%s; variables on %s): baseline RSS %.1f MiB, peak RSS %.1f MiB, "
          "steps add %.1f MiB; build+init %.1f s, steps %s s, last loss %.3f" % (
              count, ", ".join(result["devices"]), result["variable_device"],
              result["baseline_rss"], result["peak"], result["peak"] - result["baseline_rss"],
              result["build_seconds"], ", ".join("%.1f" % s for s in result["step_seconds"]),
              result["last_loss"]))
  first = results[0]
  for result in results[1:]:
    extra = (result["peak"] - result["baseline_rss"]) - (first["peak"] - first["baseline_rss"])
    print("towers %d vs %d: peak ratio %.3f, step-overhead ratio %.3f; step overhead "
          "differs by %+.1f MiB = %+.2f x one [vocab, hidden] gradient" % (
              result["towers"], first["towers"], result["peak"] / first["peak"],
              (result["peak"] - result["baseline_rss"]) / (first["peak"] - first["baseline_rss"]),
              extra, extra / gradient_mib))
  print("Caveat: %s" % (
      "no GPU is visible, so the towers are logical CPU devices of one process sharing one "
      "allocator; each figure is the whole process (all towers, variables, optimizer slots, "
      "averaging, plus TensorFlow itself), not the memory of one device. Peak RSS is "
      "ru_maxrss of the child process; baseline is VmRSS after build and initialisation."
      if first["gpus"] == 0 else
      "GPUs are visible and the towers ran on them: these are HOST (CPU RAM) figures only; "
      "GPU memory is not measured here."))


if __name__ == "__main__":
  main()
