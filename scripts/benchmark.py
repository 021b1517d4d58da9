# coding=utf-8
"""Training throughput of the real BERT step (towers, head, optimizer) on synthetic data.

  python scripts/benchmark.py [--task=classifier|pretraining|squad] [--n_gpus=1]
      [--train_batch_size=16] [--max_seq_length=128] [--precision=fp32|bf16|fp16]
      [--use_xla] [--length_distribution=fixed|short] [--pad_to_max_seq_length]
      [--sweep_gpus=1,2,4,8] [--ema_decay=D] [--layerwise_lr_decay=d]
  python scripts/benchmark.py --compare_techniques [--techniques=ema,layerwise,both,fgm,pgd,
      rdrop,fgm_rdrop]
      [--rounds=5] [--steps=4] ...

The step is built with multigpu.build_training from the run scripts' own heads, on batches
made in memory (no disk). It prints one JSON line per measurement (examples_per_sec is
global, step_time_ms the median), then a readable line. --sweep_gpus measures each GPU count
with the per-tower batch fixed (weak scaling, as NVIDIA's tables) and prints the table users
compare with published results: examples/s, speedup over the first count and scaling
efficiency.

With no GPU visible the towers are logical CPU devices sharing the same cores: a sweep then
measures what splitting costs, not a speed-up. docs/PERFORMANCE.md records the figures.
"""

import argparse
import collections
import json
import os
import re
import sys
import time

import numpy as np
import tensorflow.compat.v1 as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bert_mgpu.classifier import model as classifier_model  # pylint: disable=wrong-import-position
from bert_mgpu.data import tfrecord_io  # pylint: disable=wrong-import-position
from bert_mgpu.pretraining import model as pretraining_model  # pylint: disable=wrong-import-position
from bert_mgpu.squad import model as squad_model  # pylint: disable=wrong-import-position
from bert_mgpu.training import adversarial  # pylint: disable=wrong-import-position
from bert_mgpu.training import run_settings  # pylint: disable=wrong-import-position
from bert_mgpu.training import weight_averages  # pylint: disable=wrong-import-position
import modeling  # pylint: disable=wrong-import-position
import multigpu  # pylint: disable=wrong-import-position

# Distinct synthetic batches, cycled: enough that the input is not one cached tensor.
NUM_SYNTHETIC_BATCHES = 8
MAX_PREDICTIONS_PER_SEQ = 20


def default_config():
  """hidden 256, 4 layers, 4 heads, intermediate 1024, the Chinese vocab (the issue's)."""
  return modeling.BertConfig(vocab_size=21128, hidden_size=256, num_hidden_layers=4,
                             num_attention_heads=4, intermediate_size=1024,
                             max_position_embeddings=512)


def text_lengths(rng, count, max_seq_length, distribution):
  """Token counts with [CLS] and [SEP]: all max_seq_length, or drawn like short texts.

  "short": log-normal character counts (median 20, sigma 0.5) clipped to 2..60, plus the
  two special tokens: Chinese titles and queries, one token per character
  (benchmarks/hf_train_step.py draws the same).
  """
  if distribution == "fixed":
    return np.full([count], max_seq_length, np.int64)
  chars = np.clip(np.round(rng.lognormal(np.log(20.0), 0.5, size=count)), 2, 60)
  return np.minimum(chars.astype(np.int64) + 2, max_seq_length)


def synthetic_examples(task, config, count, max_seq_length, distribution, seed=12345):
  """`count` random examples of `task`, padded to max_seq_length, as dict of arrays."""
  rng = np.random.RandomState(seed)
  lengths = text_lengths(rng, count, max_seq_length, distribution)
  positions = np.arange(max_seq_length)[None, :]
  input_mask = (positions < lengths[:, None]).astype(np.int32)  # [count, seq]
  examples = {
      "input_ids": rng.randint(1, config.vocab_size, [count, max_seq_length]) * input_mask,
      "input_mask": input_mask,
      "segment_ids": np.zeros([count, max_seq_length], np.int32),
  }
  if task == "classifier":
    examples["label_ids"] = rng.randint(0, 2, [count])
  elif task == "squad":
    examples["unique_ids"] = np.arange(count)
    examples["start_positions"] = rng.randint(0, lengths)
    examples["end_positions"] = np.minimum(examples["start_positions"] + 3, lengths - 1)
  else:
    num_predictions = min(MAX_PREDICTIONS_PER_SEQ, max_seq_length)
    examples["masked_lm_positions"] = np.stack(
        [np.sort(rng.choice(np.arange(1, max(n - 1, 2)), num_predictions)) for n in lengths])
    examples["masked_lm_ids"] = rng.randint(1, config.vocab_size, [count, num_predictions])
    examples["masked_lm_weights"] = np.ones([count, num_predictions], np.float32)
    examples["next_sentence_labels"] = rng.randint(0, 2, [count, 1])
  return {name: value.astype(np.float32 if value.dtype == np.float32 else np.int32)
          for name, value in examples.items()}


# Where a step's time goes: op categories, by op type and name scope (docs/PERFORMANCE.md).
# The first category that matches counts an op. Matmuls are found by op type, whatever
# rewrite made them: MatMul, BatchMatMulV2, Grappler's _FusedMatMul, oneDNN's _MklMatMul,
# _MklFusedMatMul and _MklNativeFusedMatMul (TF 2.x fuses MatMul+BiasAdd into it), Einsum.
PROFILE_CATEGORIES = (
    ("input pipeline", lambda name, op: op in ("IteratorGetNext", "IteratorV2") or
     name.startswith("IteratorGetNext")),
    ("optimizer update", lambda name, op: "apply_gradients" in name or "AdamWeightDecay" in name
     or "LAMB" in name or "RAdam" in name),
    ("gradient averaging", lambda name, op: name.startswith("average_towers")),
    ("matmuls", lambda name, op: "MatMul" in op or op == "Einsum"),
    ("attention softmax and mask", lambda name, op: "Softmax" in op or
     "/attention/self/" in name and "dropout" not in name and
     op in ("Mul", "AddV2", "Add", "Sub", "Cast", "Transpose", "Reshape")),
    ("layer norm", lambda name, op: "LayerNorm" in name or "LayerNorm" in op),
    ("dropout", lambda name, op: "dropout" in name),
    ("bias adds", lambda name, op: op in ("BiasAdd", "BiasAddGrad", "BiasAddV1")),
    ("gelu", lambda name, op: "/intermediate/" in name),
    ("casts", lambda name, op: op == "Cast"),
    ("other elementwise", lambda name, op: True),
)
# Op types made by Grappler's remapper or oneDNN's rewrites (the fusions a dump shows).
FUSED_OP_PATTERN = re.compile(r"^_|Fused")


def _node_op_type(node):
  label = node.timeline_label  # "name = OpType(inputs)"
  return label.split(" = ", 1)[1].split("(")[0] if " = " in label else ""


def profile_step(sess, fetches, steps=3, top_ops=12):
  """Runs `steps` traced steps.

  Returns:
    {"categories": {category: share of the summed op time}, "ops": the `top_ops` op types
    with the most time, {op: [share, calls per step]}, "fused_ops": {op: count} of the
    rewritten op types in the graph that ran (after Grappler), "summed_op_ms": summed op
    time per step}.
  """
  totals = dict((category, 0.0) for category, _ in PROFILE_CATEGORIES)
  by_op, calls, fused = {}, {}, {}
  for step in range(steps):
    metadata = tf.RunMetadata()
    sess.run(fetches, options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE,
                                            output_partition_graphs=step == 0),
             run_metadata=metadata)
    for graph in metadata.partition_graphs:
      for node in graph.node:
        if FUSED_OP_PATTERN.search(node.op):
          fused[node.op] = fused.get(node.op, 0) + 1
    for device in metadata.step_stats.dev_stats:
      if device.device.startswith("/host:"):
        continue  # TF 1.15's host tracer: the same kernels again, without op types
      for node in device.node_stats:
        name = node.node_name.split(":")[0]
        op = _node_op_type(node)
        by_op[op] = by_op.get(op, 0.0) + node.all_end_rel_micros
        calls[op] = calls.get(op, 0) + 1
        for category, matches in PROFILE_CATEGORIES:
          if matches(name, op):
            totals[category] += node.all_end_rel_micros
            break
  total = sum(totals.values()) or 1.0
  top = sorted(by_op, key=by_op.get, reverse=True)[:top_ops]
  return {
      "categories": dict((category, round(value / total, 3))
                         for category, value in totals.items()),
      "ops": dict((op, [round(by_op[op] / total, 3), calls[op] // steps]) for op in top),
      "fused_ops": fused,
      "summed_op_ms": round(total / 1000.0 / steps, 1),
  }


def model_fn_for(task, config, rdrop_alpha=0.0):
  if task == "classifier":
    return classifier_model.create_model_fn(config, num_labels=2, rdrop_alpha=rdrop_alpha)
  if task == "squad":
    return squad_model.create_model_fn(config)  # no max_seq_length: outputs are not kept
  return pretraining_model.create_model_fn(config)


def build_step(args, config, plan, rdrop_alpha=0.0, **training_options):
  """The training step of `plan` on synthetic batches, in a graph and session of its own.

  Args:
    rdrop_alpha: the classifier head's R-Drop (--rdrop_alpha).
    training_options: more arguments of multigpu.build_training (ema_decay, ...).

  Returns:
    (session, function() -> the step's loss): close the session when done.
  """
  micro_batch = args.train_batch_size * plan.num_towers
  examples = synthetic_examples(args.task, config, micro_batch * NUM_SYNTHETIC_BATCHES,
                                args.max_seq_length, args.length_distribution)
  graph = tf.Graph()
  with graph.as_default():
    tf.set_random_seed(1)
    dataset = tf.data.Dataset.from_tensor_slices(examples).repeat().batch(micro_batch)
    if not args.pad_to_max_seq_length:
      multiple = run_settings.XLA_LENGTH_MULTIPLE if args.use_xla else 1
      dataset = dataset.map(lambda batch: tfrecord_io.trim_to_longest(batch, multiple))
    features = tf.data.make_one_shot_iterator(
        tfrecord_io.without_autotune(dataset.prefetch(2))).get_next()
    ops = multigpu.build_training(
        plan, model_fn_for(args.task, config, rdrop_alpha), features, init_lr=1e-4,
        num_train_steps=10 ** 6,
        num_warmup_steps=10, accumulation_steps=args.accumulation_steps,
        precision=args.precision, use_xla=args.use_xla, **training_options)
    start_averages = weight_averages.build_start()
    start_sync = multigpu.build_start_sync(plan)
    # Fetch real tensors: Grappler prunes work that nothing fetched depends on.
    fetches = [ops.train_op, ops.loss, ops.global_norm]
  sess = tf.Session(graph=graph, config=plan.session_config())
  with graph.as_default():
    sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
    for op in (start_averages, start_sync):
      if op is not None:
        sess.run(op)

  def step():
    for _ in range(args.accumulation_steps - 1):
      sess.run([ops.accumulate_op, ops.loss])
    if ops.accumulate_op is not None:
      sess.run([ops.accumulate_op, ops.loss])
    return sess.run(fetches)[1]

  step.fetches = fetches
  return sess, step


def measure(args, config, n_gpus):
  """Builds the training step for n_gpus and times it. Returns the result dict."""
  plan = multigpu.plan_devices(n_gpus, args.towers_per_gpu, args.variables_on_gpu,
                               variable_update=args.variable_update)
  micro_batch = args.train_batch_size * plan.num_towers
  sess, step = build_step(args, config, plan, ema_decay=args.ema_decay,
                          layerwise_lr_decay=args.layerwise_lr_decay)
  with sess:
    for _ in range(args.warmup_steps):
      step()
    times = []
    for _ in range(args.steps):
      start = time.perf_counter()
      loss = step()
      times.append(time.perf_counter() - start)
    profile = profile_step(sess, step.fetches) if args.profile else None
  median = float(np.median(times))
  global_batch = micro_batch * args.accumulation_steps
  return {
      "framework": "tensorflow", "tensorflow": tf.__version__, "task": args.task,
      "examples_per_sec": round(global_batch / median, 2),
      "step_time_ms": round(1000 * median, 2),
      "step_time_ms_p90": round(1000 * float(np.percentile(times, 90)), 2),
      "n_gpus": n_gpus, "n_towers": plan.num_towers, "variable_update": plan.variable_update,
      "gpus_visible": multigpu.count_visible_gpus(),
      "per_tower_batch": args.train_batch_size, "accumulation_steps": args.accumulation_steps,
      "global_batch": global_batch, "max_seq_length": args.max_seq_length,
      "length_distribution": args.length_distribution,
      "pad_to_max_seq_length": args.pad_to_max_seq_length,
      "precision": args.precision, "use_xla": args.use_xla,
      "hidden_size": config.hidden_size, "num_hidden_layers": config.num_hidden_layers,
      "steps": args.steps, "final_loss": round(float(loss), 4),
      "ema_decay": args.ema_decay, "layerwise_lr_decay": args.layerwise_lr_decay,
      **({"profile": profile} if profile else {})
  }


# name -> multigpu.build_training's options (--adversarial's as the flags' defaults give).
TECHNIQUES = collections.OrderedDict([
    ("plain", {}), ("ema", {"ema_decay": 0.999}), ("layerwise", {"layerwise_lr_decay": 0.8}),
    ("both", {"ema_decay": 0.999, "layerwise_lr_decay": 0.8}),
    ("fgm", {"attack": adversarial.make_attack("fgm")}),
    ("pgd", {"attack": adversarial.make_attack("pgd")}), ("rdrop", {"rdrop_alpha": 4.0}),
    ("fgm_rdrop", {"attack": adversarial.make_attack("fgm"), "rdrop_alpha": 4.0})])


def compare_techniques(args, config):
  """Times each of TECHNIQUES' steps in rounds that alternate between them (so a drift of
  the machine's speed reaches all alike); prints each one's median step and its ratio to
  plain's."""
  plan = multigpu.plan_devices(args.n_gpus, args.towers_per_gpu, args.variables_on_gpu,
                               variable_update=args.variable_update)
  names = ["plain"] + [name for name in args.techniques.split(",") if name != "plain"]
  unknown = [name for name in names if name not in TECHNIQUES]
  if unknown:
    raise SystemExit("--techniques: %s unknown; use some of %s." % (
        ",".join(unknown), ",".join(TECHNIQUES)))
  if args.task != "classifier" and any("rdrop_alpha" in TECHNIQUES[n] for n in names):
    raise SystemExit("--techniques: R-Drop is timed on --task=classifier only.")
  steps = collections.OrderedDict()
  for name in names:
    steps[name] = build_step(args, config, plan, **TECHNIQUES[name])
  times = {name: [] for name in steps}
  try:
    for _, step in steps.values():
      for _ in range(args.warmup_steps):
        step()
    for _ in range(args.rounds):
      for name, (_, step) in steps.items():
        for _ in range(args.steps):
          start = time.perf_counter()
          step()
          times[name].append(time.perf_counter() - start)
  finally:
    for sess, _ in steps.values():
      sess.close()
  plain = float(np.median(times["plain"]))
  print("%s, %d tower(s) x %d x seq %d, hidden %d x %d layers, %s; %d rounds x %d steps, "
        "alternating:" % (args.task, plan.num_towers, args.train_batch_size,
                          args.max_seq_length, config.hidden_size, config.num_hidden_layers,
                          args.precision, args.rounds, args.steps))
  for name in names:
    median = float(np.median(times[name]))
    options = {key: value._asdict() if key == "attack" else value
               for key, value in TECHNIQUES[name].items()}
    print(json.dumps({"technique": name, "options": options, "step_time_ms":
                      round(1000 * median, 1), "ratio_to_plain": round(median / plain, 4),
                      "round_medians_ms": [round(1000 * float(np.median(
                          times[name][r * args.steps:(r + 1) * args.steps])), 1)
                                           for r in range(args.rounds)]}))


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--bert_config_file", help="bert_config.json; default: hidden 256, "
                      "4 layers, 4 heads, intermediate 1024, vocab 21128")
  parser.add_argument("--task", default="classifier",
                      choices=["classifier", "pretraining", "squad"])
  parser.add_argument("--n_gpus", type=int, default=1)
  parser.add_argument("--towers_per_gpu", type=int, default=1)
  parser.add_argument("--variables_on_gpu", action="store_true",
                      help="the old name of --variable_update=gpu0")
  parser.add_argument("--variable_update", choices=list(multigpu.VARIABLE_UPDATES),
                      help="host (default), gpu0 or replicated (docs/SCALING.md)")
  parser.add_argument("--train_batch_size", type=int, default=16, help="per tower")
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--steps", type=int, default=30, help="timed steps")
  parser.add_argument("--warmup_steps", type=int, default=5, help="untimed steps first")
  parser.add_argument("--accumulation_steps", type=int, default=1)
  parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
  parser.add_argument("--use_xla", action="store_true")
  parser.add_argument("--length_distribution", default="fixed", choices=["fixed", "short"])
  parser.add_argument("--pad_to_max_seq_length", action="store_true",
                      help="pad every batch to --max_seq_length, not to its longest example")
  parser.add_argument("--sweep_gpus", help="comma-separated GPU counts, e.g. 1,2,4,8")
  parser.add_argument("--ema_decay", type=float, default=0.0,
                      help="keep weight averages (the run scripts' --ema_decay)")
  parser.add_argument("--layerwise_lr_decay", type=float, default=1.0)
  parser.add_argument("--compare_techniques", action="store_true",
                      help="time plain and each of --techniques on --n_gpus, alternating "
                      "(A B C D A B C D ...) --rounds times, --steps steps each")
  parser.add_argument("--techniques", default="ema,layerwise,both",
                      help="with --compare_techniques, which to time against plain: some of "
                      "ema (--ema_decay=0.999), layerwise (--layerwise_lr_decay=0.8), both, "
                      "fgm (--adversarial=fgm), pgd (--adversarial=pgd, 3 steps), rdrop "
                      "(--rdrop_alpha=4, the classifier's), fgm_rdrop")
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--profile", action="store_true",
                      help="trace 3 more steps and add the share of op time per category")
  return parser.parse_args(argv)


def main(argv=None):
  args = parse_args(argv)
  tf.logging.set_verbosity(tf.logging.ERROR)
  config = (modeling.BertConfig.from_json_file(args.bert_config_file) if args.bert_config_file
            else default_config())
  if args.compare_techniques:
    compare_techniques(args, config)
    return
  counts = [int(n) for n in args.sweep_gpus.split(",")] if args.sweep_gpus else [args.n_gpus]
  results = []
  for n_gpus in counts:
    result = measure(args, config, n_gpus)
    results.append(result)
    print(json.dumps(result, sort_keys=True))
    print("%s, %d tower(s) x %d: %.1f examples/s, median step %.1f ms (%s, %s, %s)" % (
        args.task, result["n_towers"], args.train_batch_size, result["examples_per_sec"],
        result["step_time_ms"], args.precision, args.length_distribution,
        result["variable_update"]))
    sys.stdout.flush()
  if len(results) > 1:
    base = results[0]
    print("\n| GPUs | towers | variable_update | global batch | examples/s | speedup | "
          "scaling efficiency |")
    print("|---|---|---|---|---|---|---|")
    for result in results:
      speedup = result["examples_per_sec"] / base["examples_per_sec"]
      efficiency = speedup * base["n_gpus"] / result["n_gpus"]
      print("| %d | %d | %s | %d | %.1f | %.2f | %.2f |" % (
          result["n_gpus"], result["n_towers"], result["variable_update"],
          result["global_batch"], result["examples_per_sec"], speedup, efficiency))
    if not base["gpus_visible"]:
      print("(no GPU visible: the towers are logical CPU devices sharing the same cores, so "
            "this measures the cost of splitting, not a speed-up)")


if __name__ == "__main__":
  main()
