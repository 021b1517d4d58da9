# coding=utf-8
"""Our `--adversarial=fgm|pgd` training steps against transformers' BERT with FGM and PGD
written here in PyTorch, from the same start.

Two steps, one per virtualenv:

  .venv-tf2/bin/python benchmarks/adversarial_vs_torch.py ours --out /tmp/adv.npz
  /work/bench-venv/bin/python benchmarks/adversarial_vs_torch.py torch --ours /tmp/adv.npz

`ours` builds layerwise_lr_vs_torch.py's tiny BERT classifier (the classifier's model fn,
dropout 0, weights drawn once by NumPy under Google's names) and trains it for STEPS steps on
its fixed batches through multigpu.build_training (`--adam_bias_correction` AdamW, Google's
rate without warmup so that the first update moves the weights, global-norm clip 1.0, weight
decay 0.01 except LayerNorm and biases) with each of METHODS: plain, FGM (epsilon EPSILON)
and PGD (PGD_STEPS steps of ALPHA in the ball of radius EPSILON), on 1 tower and on 2.
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
import adamw_vs_torch  # pylint: disable=wrong-import-position
import layerwise_lr_vs_torch as same_start  # pylint: disable=wrong-import-position

CONFIG, NUM_LABELS = same_start.CONFIG, same_start.NUM_LABELS
STEPS, PEAK_LR, NUM_TRAIN_STEPS = same_start.STEPS, same_start.PEAK_LR, same_start.NUM_TRAIN_STEPS
WARMUP = 0  # Google's rate is 0 at step 0 under any warmup: without, the first update moves
EPSILON, ALPHA, PGD_STEPS = 1.0, 0.3, 3
METHODS = ("plain", "fgm", "pgd")
TOWERS = (1, 2)


def run_name(method, towers):
  return "%s, %d tower%s" % (method, towers, "" if towers == 1 else "s")


def run_ours(out):
  # pylint: disable=import-outside-toplevel
  import tensorflow.compat.v1 as tf
  from bert_mgpu.classifier import model as classifier_model
  from bert_mgpu.training import adversarial
  import modeling
  import multigpu
  tf.disable_eager_execution()
  config = modeling.BertConfig.from_dict(CONFIG)
  data = same_start.batches()
  arrays, initial = {}, None
  for towers in TOWERS:
    for method in METHODS:
      run = run_name(method, towers)
      attack = adversarial.make_attack("none" if method == "plain" else method,
                                       EPSILON, ALPHA, PGD_STEPS)
      plan = multigpu.plan_devices(towers, visible_gpus=0)
      with tf.Graph().as_default():
        placeholders = {k: tf.placeholder(tf.int32, [None] + list(v.shape[1:]), name=k)
                        for k, v in data[0].items()}
        ops = multigpu.build_training(
            plan,
            classifier_model.create_model_fn(config, NUM_LABELS), placeholders, PEAK_LR,
            NUM_TRAIN_STEPS, WARMUP, "adamw", clip_norm=1.0, adam_bias_correction=True,
            attack=attack)
        variables = tf.trainable_variables()
        if initial is None:
          initial = same_start.draw_weights({v.op.name: v.shape.as_list() for v in variables})
        session_config = plan.session_config()
        session_config.intra_op_parallelism_threads = 1
        with tf.Session(config=session_config) as sess:
          sess.run(tf.global_variables_initializer())
          sess.run([var.assign(initial[var.op.name]) for var in variables])
          for step, batch in enumerate(data):
            feed = {placeholders[k]: v for k, v in batch.items()}
            arrays[same_start.run_key(run, step, "lr")] = sess.run(ops.learning_rate)
            _, arrays[same_start.run_key(run, step, "global_norm")], \
                arrays[same_start.run_key(run, step, "loss")] = sess.run(
                    [ops.train_op, ops.global_norm, ops.loss], feed)
            for var, value in zip(variables, sess.run(variables)):
              arrays[same_start.run_key(run, step, var.op.name)] = value
      print("%s: losses %s" % (run, " ".join(
          "%.4f" % arrays[same_start.run_key(run, s, "loss")] for s in range(STEPS))))
  arrays.update({"initial/" + name: value for name, value in initial.items()})
  arrays["tensorflow_version"] = np.array(tf.__version__)
  np.savez(out, **arrays)
  print("wrote %s (TensorFlow %s)" % (out, tf.__version__))


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
  float32's rounding): per step, (its weights under Google's names, the rate factor, the
  norm before clipping, the clean loss)."""
  # pylint: disable=import-outside-toplevel
  import torch
  import transformers
  import hf_common
  model = transformers.BertForSequenceClassification(
      hf_common.hf_bert_config(CONFIG, NUM_LABELS, attn_implementation="eager"))
  model.eval()  # dropout is 0 anyway
  model.to(getattr(torch, dtype))
  hf_common.load_arrays(model, initial, source)
  optimizer = hf_common.make_optimizer(model, PEAK_LR, same_start.WEIGHT_DECAY)
  scheduler = hf_common.make_scheduler(optimizer, "google", WARMUP, NUM_TRAIN_STEPS)
  attack = {"plain": None, "fgm": fgm_step, "pgd": pgd_step}[method]
  steps = []
  for batch in same_start.batches():
    def loss_of(model, batch=batch):
      return model(input_ids=torch.from_numpy(batch["input_ids"]).long(),
                   attention_mask=torch.from_numpy(batch["input_mask"]).long(),
                   token_type_ids=torch.from_numpy(batch["segment_ids"]).long(),
                   labels=torch.from_numpy(batch["label_ids"]).long()).loss
    rate = optimizer.param_groups[0]["lr"] / optimizer.param_groups[0]["initial_lr"]
    optimizer.zero_grad(set_to_none=True)
    loss = loss_of(model)
    loss.backward()
    if attack:
      attack(torch, model, loss_of)
    norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
    optimizer.step()
    scheduler.step()
    steps.append((hf_common.google_arrays(model), rate, norm, float(loss.detach())))
  return steps


def differences(ours, run, step, weights):
  """|ours - torch| per weight name."""
  return {name: np.abs(ours[same_start.run_key(run, step, name)] - weights[name])
          for name in weights}


def largest(arrays):
  return max(float(np.max(value)) for value in arrays.values())


def worst_element(ours, run, initial, weights, lr):
  """Where ours and torch differ most after the first step: the name, the index, both moves,
  and what the moves imply. The first corrected AdamW step moves a weight w by
  -lr (u + decay w), u = g / (|g| + 1e-6) (Adam's epsilon): where |g| is near 1e-6, a
  rounding difference in g moves u by up to d|g| 1e-6 / (|g| + 1e-6)^2; torch's move gives
  |g|, and the two moves the gradient difference they imply."""
  by_name = differences(ours, run, 0, weights)
  name = max(by_name, key=lambda n: float(np.max(by_name[n])))
  where = np.unravel_index(np.argmax(by_name[name]), by_name[name].shape)
  decay = 0.0 if any(p in name for p in ("LayerNorm", "bias")) else same_start.WEIGHT_DECAY
  moves = [float(w[where] - initial[name][where]) for w in
           (ours[same_start.run_key(run, 0, name)], weights[name])]
  units = [-move / lr - decay * float(initial[name][where]) for move in moves]
  gradient = 1e-6 * abs(units[1]) / (1.0 - abs(units[1]))
  return ("%s%s: ours moved %.4e, torch %.4e (lr %.0e): |g| %.1e there, the moves differ "
          "as g by %.1e" % (name, [int(i) for i in where], moves[0], moves[1], lr, gradient,
                            abs(units[0] - units[1]) * (gradient + 1e-6) ** 2 / 1e-6))


def run_torch(ours_path):
  # pylint: disable=import-outside-toplevel
  import torch
  import transformers
  torch.set_num_threads(1)
  ours = np.load(ours_path)
  initial = {k[len("initial/"):]: ours[k] for k in ours.files if k.startswith("initial/")}
  print("TensorFlow %s (ours), torch %s, transformers %s; FGM epsilon %s, PGD %d steps of "
        "%s in radius %s" % (ours["tensorflow_version"], torch.__version__,
                             transformers.__version__, EPSILON, PGD_STEPS, ALPHA, EPSILON))
  theirs = {m: train_torch(m, initial, ours_path + " (initial/)") for m in METHODS}
  exact = {m: train_torch(m, initial, ours_path + " (initial/)", "float64") for m in METHODS}
  changes = {m: np.maximum.accumulate([largest({n: np.abs(w[n] - initial[n]) for n in initial})
                                       for w, _, _, _ in theirs[m]]) for m in METHODS}
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
        relative = [largest(differences(ours, run, step, theirs[m][step][0])) / changes[m][step]
                    for m in METHODS]
        reference = exact[method][step][0]
        relative += [largest(differences(ours, run, step, reference)) / changes[method][step],
                     largest({n: np.abs(weights[n] - reference[n]) for n in initial}) /
                     changes[method][step]]
        far = sum(int(np.sum(d > 1e-4 * changes[method][step]))
                  for d in differences(ours, run, step, weights).values())
        worst[run] = max(worst.get(run, 0.0), relative[METHODS.index(method)])
        print("%4d  %.4f/%.4f    %.6f/%.6f  %.6f/%.6f  %s%d" % (
            step + 1, ours[same_start.run_key(run, step, "lr")] / PEAK_LR, rate,
            ours[same_start.run_key(run, step, "global_norm")], norm,
            ours[same_start.run_key(run, step, "loss")], loss,
            "".join("%-15s" % ("%.2e" % r) for r in relative), far))
      print("largest after step 1 at " + worst_element(
          ours, run, initial, theirs[method][0][0], PEAK_LR * theirs[method][0][1]))
  print("\nlargest against torch's same method: " +
        ", ".join("%s %.2e" % (run, value) for run, value in worst.items()))


def main():
  adamw_vs_torch.two_sides_main(__doc__, "/tmp/adversarial_vs_torch.npz", run_ours, run_torch)


if __name__ == "__main__":
  main()
