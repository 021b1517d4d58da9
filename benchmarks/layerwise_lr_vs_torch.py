# coding=utf-8
"""Our `--layerwise_lr_decay` training steps and `--ema_decay` weight averages against
transformers' BERT, torch.optim.AdamW and an average kept in PyTorch, from the same start.

Two steps, one per virtualenv:

  .venv-tf2/bin/python benchmarks/layerwise_lr_vs_torch.py ours --out /tmp/llrd.npz
  /work/bench-venv/bin/python benchmarks/layerwise_lr_vs_torch.py torch --ours /tmp/llrd.npz

`ours` builds a tiny BERT classifier (the classifier's model fn, dropout 0) with weights drawn
once by NumPy under Google's names, and trains it for STEPS steps on fixed batches through
multigpu.build_training: `--adam_bias_correction` AdamW, Google's warmup-then-decay rate,
global-norm clip 1.0, weight decay 0.01 except LayerNorm and biases, layer-wise decay
DECAY; on 1 tower, on 2 towers, and on 1 tower without the decay (1.0), for contrast; every
run keeps weight averages with decay EMA_DECAY (weight_averages.py: bias-corrected, with the
decay warmed up as the run scripts do by default, --ema_warmup).
`torch` loads the same weights into transformers' BertForSequenceClassification (eager
attention, eval mode, dropout 0), trains it on the same batches with the mean cross-entropy,
torch.nn.utils.clip_grad_norm_(1.0) and torch.optim.AdamW (eps 1e-6), one parameter group per
learning-rate factor and weight-decay choice, each group's rate Google's schedule times a
factor computed here from the HF names (embeddings d^(L+1), encoder.layer.i d^(L-i), pooler
and classifier 1), and prints, per step and run, the largest |ours - torch| relative to the
largest weight change so far: overall, and per group (the embeddings, each layer, the
head with the pooler, and the attention key biases apart: see group_of), each relative to
that group's own change. After each step t torch's side keeps its own bias-corrected
average of every parameter as bert4keras defines it, with TF's warmed-up decay
D_t = min(EMA_DECAY, (1 + t) / (10 + t)): a sum started at zero,
zero_started.mul_(D_t).add_(param, alpha=1 - D_t), divided by 1 - D_1 D_2 ... D_t (our side
moves its averages by (1 - D_t) / (1 - D_1 ... D_t) instead, which is the same quantity);
the largest |ours - torch| of the averages is printed relative to the largest move of
torch's averages.

Google's rate is 0 at step 0 under any warmup (`step / warmup`), so the first of the STEPS
updates moves only Adam's moments (in both); the next three move the weights.
"""

import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import adamw_vs_torch  # pylint: disable=wrong-import-position

CONFIG = {"vocab_size": 60, "hidden_size": 32, "num_hidden_layers": 3,
          "num_attention_heads": 4, "intermediate_size": 64, "hidden_act": "gelu",
          "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
          "max_position_embeddings": 16, "type_vocab_size": 2, "initializer_range": 0.02}
NUM_LABELS, SEQ, BATCH = 3, 16, 8
STEPS, PEAK_LR, WARMUP, NUM_TRAIN_STEPS, WEIGHT_DECAY = 4, 1e-3, 2, 10, 0.01
DECAY = 0.8
EMA_DECAY = 0.7  # far from 1: four steps move the averages well away from the start
# (label, towers, layer-wise decay): torch always trains with DECAY.
RUNS = (("1 tower", 1, DECAY), ("2 towers", 2, DECAY), ("1 tower, no decay", 1, 1.0))


def batches(seed=1):
  """STEPS batches of BATCH rows: ids, a mask of random length, a second segment, labels."""
  rng = np.random.RandomState(seed)
  result = []
  for _ in range(STEPS):
    lengths = rng.randint(4, SEQ + 1, size=BATCH)
    positions = np.arange(SEQ)[None, :]
    input_mask = (positions < lengths[:, None]).astype(np.int32)
    second = rng.randint(2, SEQ, size=BATCH)  # where segment 1 starts
    result.append({
        "input_ids": rng.randint(1, CONFIG["vocab_size"], size=[BATCH, SEQ]).astype(
            np.int32) * input_mask,
        "input_mask": input_mask,
        "segment_ids": ((positions >= second[:, None]) * input_mask).astype(np.int32),
        "label_ids": rng.randint(0, NUM_LABELS, size=BATCH).astype(np.int32)})
  return result


def draw_weights(shapes, seed=0):
  """Weights for Google's names: LayerNorm gammas near 1, everything else (biases too, so
  that the weight-decay exclusions matter) N(0, 0.1): large enough that the global-norm
  clip at 1.0 acts on the steps that move the weights."""
  rng = np.random.RandomState(seed)
  weights = {}
  for name in sorted(shapes):
    value = rng.randn(*shapes[name]) * 0.1
    if name.endswith("LayerNorm/gamma"):
      value += 1.0
    weights[name] = value.astype(np.float32)
  return weights


def run_key(run, step, name):
  return "%s/%d/%s" % (run, step, name)


def run_ours(out):
  # pylint: disable=import-outside-toplevel
  import tensorflow.compat.v1 as tf
  from bert_mgpu.classifier import model as classifier_model
  from bert_mgpu.training import weight_averages
  import modeling
  import multigpu
  tf.disable_eager_execution()
  config = modeling.BertConfig.from_dict(CONFIG)
  data = batches()
  arrays, initial = {}, None
  for run, towers, decay in RUNS:
    plan = multigpu.plan_devices(towers, visible_gpus=0)
    with tf.Graph().as_default():
      placeholders = {k: tf.placeholder(tf.int32, [None] + list(v.shape[1:]), name=k)
                      for k, v in data[0].items()}
      ops = multigpu.build_training(
          plan, classifier_model.create_model_fn(config, NUM_LABELS), placeholders, PEAK_LR,
          NUM_TRAIN_STEPS, WARMUP, "adamw", clip_norm=1.0, adam_bias_correction=True,
          layerwise_lr_decay=decay, ema_decay=EMA_DECAY,
          ema_rule=weight_averages.Rule(bias_correction=True, recorded=True, warmup=True))
      start_averages = weight_averages.build_start()
      variables = tf.trainable_variables()
      averages = weight_averages.used_variables(variables)
      if initial is None:
        initial = draw_weights({v.op.name: v.shape.as_list() for v in variables})
      session_config = plan.session_config()
      session_config.intra_op_parallelism_threads = 1
      with tf.Session(config=session_config) as sess:
        sess.run(tf.global_variables_initializer())
        sess.run([var.assign(initial[var.op.name]) for var in variables])
        sess.run(start_averages)
        for step, batch in enumerate(data):
          arrays["%s/%d/lr" % (run, step)] = sess.run(ops.learning_rate)
          _, arrays["%s/%d/global_norm" % (run, step)] = sess.run(
              [ops.train_op, ops.global_norm],
              {placeholders[k]: v for k, v in batch.items()})
          for var, value in zip(variables, sess.run(variables)):
            arrays[run_key(run, step, var.op.name)] = value
          for var, value in zip(variables, sess.run(averages)):
            arrays[run_key(run, step, "average/" + var.op.name)] = value
  arrays.update({"initial/" + name: value for name, value in initial.items()})
  arrays["tensorflow_version"] = np.array(tf.__version__)
  np.savez(out, **arrays)
  print("wrote %s (TensorFlow %s)" % (out, tf.__version__))


def hf_factor(hf_name, num_layers, decay):
  """The learning-rate factor of a BertForSequenceClassification parameter, from its HF
  name (independently of bert_mgpu/training/layerwise_lr.py)."""
  layer = re.match(r"bert\.encoder\.layer\.(\d+)\.", hf_name)
  if layer:
    return decay ** (num_layers - int(layer.group(1)))
  if hf_name.startswith("bert.embeddings."):
    return decay ** (num_layers + 1)
  return 1.0


def group_of(google_name):
  """"embeddings", "layer_i", "head" (the pooler and the classifier) or "key_biases".

  The attention key biases (every layer's) are a group of their own: their true gradient
  is 0 (the softmax ignores what they add, the same for every key of a query), so each
  framework moves them by its own rounding noise, which Adam normalizes."""
  if google_name.endswith("/attention/self/key/bias"):
    return "key_biases"
  layer = re.match(r"bert/encoder/(layer_\d+)/", google_name)
  if layer:
    return layer.group(1)
  return "embeddings" if google_name.startswith("bert/embeddings/") else "head"


def grouped_adamw(model, torch, no_decay_patterns):
  """torch.optim.AdamW with one group per (learning-rate factor, weight decay or not), each
  group's lr PEAK_LR times its factor."""
  groups = {}
  for hf_name, param in model.named_parameters():
    decays = not any(p in hf_name for p in no_decay_patterns)
    key = (hf_factor(hf_name, CONFIG["num_hidden_layers"], DECAY), decays)
    groups.setdefault(key, []).append(param)
  return torch.optim.AdamW(
      [{"params": params, "lr": PEAK_LR * factor,
        "weight_decay": WEIGHT_DECAY if decays else 0.0}
       for (factor, decays), params in sorted(groups.items())], eps=1e-6, foreach=False)


def run_torch(ours_path):
  # pylint: disable=import-outside-toplevel
  import torch
  import transformers
  import hf_common
  torch.set_num_threads(1)
  ours = np.load(ours_path)
  initial = {k[len("initial/"):]: ours[k] for k in ours.files if k.startswith("initial/")}
  print("TensorFlow %s (ours), torch %s, transformers %s; layer-wise decay %s, %d layers" % (
      ours["tensorflow_version"], torch.__version__, transformers.__version__, DECAY,
      CONFIG["num_hidden_layers"]))
  model = transformers.BertForSequenceClassification(
      hf_common.hf_bert_config(CONFIG, NUM_LABELS, attn_implementation="eager"))
  model.eval()  # dropout is 0 anyway
  hf_common.load_arrays(model, initial, ours_path + " (initial/)")
  optimizer = grouped_adamw(model, torch, hf_common.NO_DECAY_PATTERNS)
  scheduler = hf_common.make_scheduler(optimizer, "google", WARMUP, NUM_TRAIN_STEPS)
  print("%d parameter groups, factors %s" % (len(optimizer.param_groups), ", ".join(
      sorted(set("%.4g" % (g["initial_lr"] / PEAK_LR)
                 for g in optimizer.param_groups)))))
  theirs = []  # per step: (torch's weights under Google's names and layouts, rate, norm)
  zero_started = {name: torch.zeros_like(param) for name, param in model.named_parameters()}
  averages = []  # per step: torch's averages under Google's names and layouts
  decay_product = 1.0  # D_1 ... D_t
  for step, batch in enumerate(batches(), 1):
    rate = optimizer.param_groups[0]["lr"] / optimizer.param_groups[0]["initial_lr"]
    optimizer.zero_grad(set_to_none=True)
    output = model(input_ids=torch.from_numpy(batch["input_ids"]).long(),
                   attention_mask=torch.from_numpy(batch["input_mask"]).long(),
                   token_type_ids=torch.from_numpy(batch["segment_ids"]).long(),
                   labels=torch.from_numpy(batch["label_ids"]).long())
    output.loss.backward()
    norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
    optimizer.step()
    scheduler.step()
    theirs.append((hf_common.google_arrays(model), rate, norm))
    step_decay = min(EMA_DECAY, (1.0 + step) / (10.0 + step))
    decay_product *= step_decay
    with torch.no_grad():
      for name, param in model.named_parameters():
        zero_started[name].mul_(step_decay).add_(param, alpha=1 - step_decay)
      corrected = [(name, value / (1 - decay_product)) for name, value in zero_started.items()]
    averages.append(hf_common.named_google_arrays(corrected))
  compare(ours, initial, theirs)
  compare_averages(ours, initial, averages)


def compare_averages(ours, initial, averages):
  """Prints, per run and step, the largest |ours - torch| of the weight averages relative
  to the largest move of torch's averages from the start."""
  print("\nweight averages (--ema_decay=%s): max |ours - torch| / max |torch's average's "
        "move|, per step" % EMA_DECAY)
  for run, _, decay in RUNS:
    cells = []
    for step, theirs in enumerate(averages):
      difference = max(float(np.max(np.abs(ours[run_key(run, step, "average/" + name)] -
                                            theirs[name]))) for name in initial
                       if group_of(name) != "key_biases")
      moved = max(float(np.max(np.abs(theirs[name] - initial[name]))) for name in initial)
      cells.append("%.2e (abs %.1e)" % (difference / moved, difference) if moved else
                   "abs %.0e" % difference)
    print("%-20s (layer-wise %s): %s" % (run, decay, "  ".join(cells)))


def compare(ours, initial, theirs):
  """Prints the comparison of each of RUNS with torch's steps `theirs`."""
  groups = sorted(set(group_of(name) for name in initial),
                  key=lambda g: (g != "embeddings", g == "head", g == "key_biases", g))
  print("per step: max |ours - torch| / max |torch's weight change so far|, overall and "
        "per group (each against its own change)")
  for run, _, decay in RUNS:
    print("\n%s: ours with --layerwise_lr_decay=%s, torch with %s" % (run, decay, DECAY))
    print("step  rate ours/torch  norm ours/torch  overall   " +
          " ".join("%-10s" % g for g in groups))
    change = {g: 0.0 for g in groups + ["overall"]}
    worst = dict(change)
    for step, (weights, rate, norm) in enumerate(theirs):
      difference = {g: 0.0 for g in groups + ["overall"]}
      for name, start in initial.items():
        diff = float(np.max(np.abs(ours[run_key(run, step, name)] - weights[name])))
        moved = float(np.max(np.abs(weights[name] - start)))
        for g in (group_of(name), "overall"):
          difference[g] = max(difference[g], diff)
          change[g] = max(change[g], moved)
      cells = []
      for g in ["overall"] + groups:
        if change[g]:
          worst[g] = max(worst[g], difference[g] / change[g])
          cells.append("%.2e" % (difference[g] / change[g]))
        else:  # nothing has moved yet: the absolute difference
          cells.append("abs %.0e" % difference[g])
      print("%4d  %.4f/%.4f    %.4f/%.4f    %s" % (
          step + 1, ours["%s/%d/lr" % (run, step)] / PEAK_LR, rate,
          ours["%s/%d/global_norm" % (run, step)], norm, " ".join("%-10s" % c for c in cells)))
    print("largest: " + ", ".join("%s %.2e" % (g, worst[g]) for g in ["overall"] + groups))
  final = theirs[-1][0]
  moved = {n: np.abs(final[n] - initial[n]) for n in initial}
  print("\nafter step %d: torch's weights up to %.3f, its largest change %.2e; per group: %s"
        % (len(theirs), max(float(np.max(np.abs(v))) for v in final.values()),
           max(float(np.max(m)) for m in moved.values()),
           ", ".join("%s %.2e" % (g, max(float(np.max(moved[n])) for n in initial
                                         if group_of(n) == g)) for g in groups)))
  for run, _, _ in RUNS:
    differences = {n: np.abs(ours[run_key(run, len(theirs) - 1, n)] - final[n])
                   for n in initial}
    name = max(differences, key=lambda n: float(np.max(differences[n])))
    where = np.unravel_index(np.argmax(differences[name]), differences[name].shape)
    print("%s: max |ours - torch| %.2e, at %s%s (%.4f; float32 spacing there %.1e)" % (
        run, differences[name][where], name, [int(i) for i in where], final[name][where],
        np.spacing(np.float32(abs(final[name][where])))))


def main():
  adamw_vs_torch.two_sides_main(__doc__, "/tmp/layerwise_lr_vs_torch.npz", run_ours, run_torch)


if __name__ == "__main__":
  main()
