# coding=utf-8
"""Our `--layerwise_lr_decay` training steps and `--ema_decay` weight averages against
transformers' BERT, torch.optim.AdamW and an average kept in PyTorch, from the same start.

Two steps, one per virtualenv:

  .venv-tf2/bin/python benchmarks/layerwise_lr_vs_torch.py ours --out /tmp/llrd.npz
  /work/bench-venv/bin/python benchmarks/layerwise_lr_vs_torch.py torch --ours /tmp/llrd.npz

`ours` builds same_start.py's tiny BERT classifier (the classifier's model fn, dropout 0) with
weights drawn once by NumPy under Google's names, and trains it for STEPS steps on its fixed
batches through multigpu.build_training: `--adam_bias_correction` AdamW, Google's
warmup-then-decay rate, global-norm clip 1.0, weight decay 0.01 except LayerNorm and biases,
layer-wise decay DECAY; on 1 tower, on 2 towers, and on 1 tower without the decay (1.0), for
contrast; every run keeps weight averages with decay EMA_DECAY (weight_averages.py:
bias-corrected, with the decay warmed up as the run scripts do by default, --ema_warmup).
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
import same_start  # pylint: disable=wrong-import-position

CONFIG, NUM_LABELS = same_start.CONFIG, same_start.NUM_LABELS
STEPS, PEAK_LR, WEIGHT_DECAY = same_start.STEPS, same_start.PEAK_LR, same_start.WEIGHT_DECAY
WARMUP = 2
DECAY = 0.8
EMA_DECAY = 0.7  # far from 1: four steps move the averages well away from the start
# (label, towers, layer-wise decay): torch always trains with DECAY.
RUNS = (("1 tower", 1, DECAY), ("2 towers", 2, DECAY), ("1 tower, no decay", 1, 1.0))
run_key = same_start.run_key  # where ours' file keeps a run's step


def run_ours(out):
  # pylint: disable=import-outside-toplevel
  import tensorflow.compat.v1 as tf
  from bert_mgpu.classifier import model as classifier_model
  from bert_mgpu.training import weight_averages
  import modeling
  tf.disable_eager_execution()
  config = modeling.BertConfig.from_dict(CONFIG)
  data = same_start.batches()
  arrays, initial = {}, None
  for run, towers, decay in RUNS:
    initial = same_start.train_ours(
        tf, run, towers, classifier_model.create_model_fn(config, NUM_LABELS), data, WARMUP,
        arrays, initial, layerwise_lr_decay=decay, ema_decay=EMA_DECAY,
        ema_rule=weight_averages.Rule(bias_correction=True, recorded=True, warmup=True))
  same_start.add_start(arrays, initial)
  same_start.save_ours(tf, out, arrays)


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


class TorchAverages(object):
  """bert4keras's bias-corrected weight averages kept beside a torch model, with TF's
  warmed-up decay: after update t, zero_started <- D_t zero_started + (1 - D_t) param with
  D_t = min(EMA_DECAY, (1 + t) / (10 + t)), divided by 1 - D_1 ... D_t.

  Called after each update (train_torch's after_step); `steps` holds, per step, the
  averages under Google's names and layouts."""

  def __init__(self, torch, model):
    self.torch = torch
    self.zero_started = {name: torch.zeros_like(param)
                         for name, param in model.named_parameters()}
    self.decay_product = 1.0  # D_1 ... D_t
    self.steps = []

  def __call__(self, step, model):
    import hf_common  # pylint: disable=import-outside-toplevel
    step_decay = min(EMA_DECAY, (1.0 + step) / (10.0 + step))
    self.decay_product *= step_decay
    with self.torch.no_grad():
      for name, param in model.named_parameters():
        self.zero_started[name].mul_(step_decay).add_(param, alpha=1 - step_decay)
      corrected = [(name, value / (1 - self.decay_product))
                   for name, value in self.zero_started.items()]
    self.steps.append(hf_common.named_google_arrays(corrected))


def run_torch(ours_path):
  # pylint: disable=import-outside-toplevel
  import torch
  import transformers
  import hf_common
  ours = same_start.open_ours(ours_path)
  initial = same_start.start_of(ours)
  print("TensorFlow %s (ours), torch %s, transformers %s; layer-wise decay %s, %d layers" % (
      ours["tensorflow_version"], torch.__version__, transformers.__version__, DECAY,
      CONFIG["num_hidden_layers"]))
  model = same_start.torch_classifier(initial, ours_path + " (initial/)")
  optimizer = grouped_adamw(model, torch, hf_common.NO_DECAY_PATTERNS)
  # The groups' rates are still the peak ones: train_torch starts the schedule.
  print("%d parameter groups, factors %s" % (len(optimizer.param_groups), ", ".join(
      sorted(set("%.4g" % (g["lr"] / PEAK_LR) for g in optimizer.param_groups)))))
  averages = TorchAverages(torch, model)
  # Per step: torch's weights under Google's names and layouts, rate, norm, loss.
  theirs = same_start.train_torch(model, same_start.batches(), same_start.classifier_loss,
                                  WARMUP, optimizer, after_step=averages)
  compare(ours, initial, theirs)
  compare_averages(ours, initial, averages.steps)


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
    for step, (weights, rate, norm, _) in enumerate(theirs):
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
          step + 1, ours[run_key(run, step, "lr")] / PEAK_LR, rate,
          ours[run_key(run, step, "global_norm")], norm, " ".join("%-10s" % c for c in cells)))
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
  same_start.two_sides_main(__doc__, "/tmp/layerwise_lr_vs_torch.npz", run_ours, run_torch)


if __name__ == "__main__":
  main()
