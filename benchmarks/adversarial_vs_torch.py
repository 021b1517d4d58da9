# coding=utf-8
"""Our `--adversarial=fgm|pgd` training steps against transformers' BERT with FGM and PGD
written here in PyTorch, from the same start.

Two steps, one per virtualenv:

  .venv-tf2/bin/python benchmarks/adversarial_vs_torch.py ours --out /tmp/adv.npz
  /work/bench-venv/bin/python benchmarks/adversarial_vs_torch.py torch --ours /tmp/adv.npz

`ours` builds same_start.py's tiny BERT classifier (that of layerwise_lr_vs_torch.py: the
classifier's model fn, dropout 0, weights drawn once by NumPy under Google's names) and trains
it for STEPS steps on its fixed batches through multigpu.build_training
(`--adam_bias_correction` AdamW, Google's rate without warmup so that the first update moves
the weights, global-norm clip 1.0, weight decay 0.01 except LayerNorm and biases) with each
of METHODS: plain, FGM (epsilon EPSILON) and PGD (PGD_STEPS steps of ALPHA in the ball of
radius EPSILON), on 1 tower and on 2.
`torch` loads the same weights into transformers' BertForSequenceClassification (eager
attention, eval mode, dropout 0) and trains it on the same batches with the mean
cross-entropy, torch.nn.utils.clip_grad_norm_(1.0) and torch.optim.AdamW (eps 1e-6), the
attacks written here as bert4keras and UER-py do them: the perturbation is added to
model.bert.embeddings.word_embeddings.weight.data, the adversarial loss is backpropagated
into the accumulated gradient, and the table's data is restored before the optimizer step
(see fgm_step and pgd_step for the arithmetic, that of bert_mgpu/training/adversarial.py).
It prints, per run and step, the largest |ours - torch| relative to the largest change of
torch's weights so far, against torch's run of each method: the diagonal is the agreement,
the rest shows how far apart the methods are (so that the agreement means something).
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import same_start  # pylint: disable=wrong-import-position

CONFIG, NUM_LABELS = same_start.CONFIG, same_start.NUM_LABELS
STEPS, PEAK_LR = same_start.STEPS, same_start.PEAK_LR
WARMUP = 0  # Google's rate is 0 at step 0 under any warmup: without, the first update moves
EPSILON, ALPHA, PGD_STEPS = 1.0, 0.3, 3
METHODS = ("plain", "fgm", "pgd")
TOWERS = (1, 2)
run_name = same_start.run_name  # "fgm, 2 towers"


def run_ours(out):
  # pylint: disable=import-outside-toplevel
  import tensorflow.compat.v1 as tf
  from bert_mgpu.classifier import model as classifier_model
  from bert_mgpu.training import adversarial
  import modeling
  tf.disable_eager_execution()
  config = modeling.BertConfig.from_dict(CONFIG)
  data = same_start.batches()
  arrays, initial = {}, None
  for towers in TOWERS:
    for method in METHODS:
      run = run_name(method, towers)
      attack = adversarial.make_attack("none" if method == "plain" else method,
                                       EPSILON, ALPHA, PGD_STEPS)
      initial = same_start.train_ours(
          tf, run, towers, classifier_model.create_model_fn(config, NUM_LABELS), data, WARMUP,
          arrays, initial, attack=attack)
      print("%s: losses %s" % (run, " ".join(
          "%.4f" % arrays[same_start.run_key(run, s, "loss")] for s in range(STEPS))))
  same_start.add_start(arrays, initial)
  same_start.save_ours(tf, out, arrays)


def unit(torch, gradient, size):
  """size * gradient / ||gradient|| over the whole tensor; 0 for a zero or non-finite norm."""
  norm = torch.linalg.vector_norm(gradient)
  if not (torch.isfinite(norm) and norm > 0):
    return torch.zeros_like(gradient)
  return gradient * (size / norm)


def fgm_step(torch, model, loss_of):
  """After the clean backward pass: r = EPSILON g / ||g||, g the table's gradient; the
  table's data moves by r, the adversarial loss's gradient is added to every .grad, the
  data is restored."""
  table = model.bert.embeddings.word_embeddings.weight
  backup = table.data.clone()
  table.data.add_(unit(torch, table.grad, EPSILON))
  loss_of(model).backward()
  table.data.copy_(backup)


def pgd_step(torch, model, loss_of):
  """After the clean backward pass: PGD_STEPS steps r_t = P(r_(t-1) + ALPHA g_(t-1) /
  ||g_(t-1)||), g_0 the clean table gradient, g_t the table's gradient with the data at
  table + r_t, P the projection onto ||r|| <= EPSILON (the whole table); the clean gradients
  are put back before the last pass, whose gradient adds to them (UER-py's order); then the
  data is restored."""
  table = model.bert.embeddings.word_embeddings.weight
  backup = table.data.clone()
  clean = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
  perturbation = torch.zeros_like(backup)
  for t in range(1, PGD_STEPS + 1):
    perturbation = perturbation + unit(torch, table.grad, ALPHA)
    norm = torch.linalg.vector_norm(perturbation)
    if norm > EPSILON:
      perturbation = perturbation * (EPSILON / norm)
    table.data.copy_(backup + perturbation)
    if t < PGD_STEPS:
      model.zero_grad(set_to_none=False)
    else:
      for name, p in model.named_parameters():
        if name in clean:
          p.grad.copy_(clean[name])
    loss_of(model).backward()
  table.data.copy_(backup)


def train_torch(method, initial, source, dtype="float32"):
  """torch's STEPS steps with `method` in `dtype` (float64: the reference that tells
  float32's rounding): same_start.train_torch's per step (its weights under Google's names,
  the rate factor, the norm before clipping, the clean loss)."""
  model = same_start.torch_classifier(initial, source, dtype)
  attack = {"plain": None, "fgm": fgm_step, "pgd": pgd_step}[method]
  return same_start.train_torch(model, same_start.batches(), same_start.classifier_loss,
                                WARMUP, attack=attack)


def run_torch(ours_path):
  # pylint: disable=import-outside-toplevel
  import torch
  import transformers
  ours = same_start.open_ours(ours_path)
  initial = same_start.start_of(ours)
  print("TensorFlow %s (ours), torch %s, transformers %s; FGM epsilon %s, PGD %d steps of "
        "%s in radius %s" % (ours["tensorflow_version"], torch.__version__,
                             transformers.__version__, EPSILON, PGD_STEPS, ALPHA, EPSILON))
  theirs = {m: train_torch(m, initial, ours_path + " (initial/)") for m in METHODS}
  exact = {m: train_torch(m, initial, ours_path + " (initial/)", "float64") for m in METHODS}
  changes = {m: same_start.changes_so_far(theirs[m], initial) for m in METHODS}
  size = sum(value.size for value in initial.values())
  print("per step: max |ours - torch's run of each method| / max |that run's weight change so "
        "far|; `far` counts the %d weights further from torch's same method than 1e-4 of "
        "the change; the last two columns are ours' and torch's float32 runs against torch's "
        "float64 run of the same method" % size)
  worst = {}
  for towers in TOWERS:
    for method in METHODS:
      run = run_name(method, towers)
      print("\n%s\nstep  rate ours/torch  norm ours/torch    loss ours/torch    %s far" % (
          run, "".join("vs torch %-6s" % m for m in METHODS) + "ours-fp64      torch-fp64     "))
      for step in range(STEPS):
        weights, rate, norm, loss = theirs[method][step]
        relative = [same_start.largest_difference(ours, run, step, theirs[m][step][0]) /
                    changes[m][step] for m in METHODS]
        reference = exact[method][step][0]
        relative += [same_start.largest_difference(ours, run, step, reference) /
                     changes[method][step],
                     same_start.largest_distance(weights, reference) / changes[method][step]]
        far = sum(int(np.sum(d > 1e-4 * changes[method][step]))
                  for d in same_start.differences(ours, run, step, weights).values())
        worst[run] = max(worst.get(run, 0.0), relative[METHODS.index(method)])
        print("%4d  %.4f/%.4f    %.6f/%.6f  %.6f/%.6f  %s%d" % (
            step + 1, ours[same_start.run_key(run, step, "lr")] / PEAK_LR, rate,
            ours[same_start.run_key(run, step, "global_norm")], norm,
            ours[same_start.run_key(run, step, "loss")], loss,
            "".join("%-15s" % ("%.2e" % r) for r in relative), far))
      print("largest after step 1 at " + same_start.worst_element(
          ours, run, initial, theirs[method][0][0], PEAK_LR * theirs[method][0][1]))
  print("\nlargest against torch's same method: " +
        ", ".join("%s %.2e" % (run, value) for run, value in worst.items()))


def main():
  same_start.two_sides_main(__doc__, "/tmp/adversarial_vs_torch.npz", run_ours, run_torch)


if __name__ == "__main__":
  main()
