# coding=utf-8
"""The same-start harness of the comparisons against PyTorch (layerwise_lr_vs_torch.py,
adversarial_vs_torch.py, global_pointer_vs_torch.py; adamw_vs_torch.py shares the command
line).

Each comparison trains our model through multigpu.build_training and a PyTorch reference
from the same weights on the same batches, in two steps, one per virtualenv: `ours` (the TF
venv) writes every run's learning rate, gradient norm, loss and weights after each step to a
.npz, with the start weights under "initial/"; `torch` (the bench venv) reads that file,
trains the reference from those weights and prints how far apart the two are.

What they share lives here: the tiny BERT and its recipe, the classifier's batches, the start
weights drawn by NumPy under Google's names, the training loop of each side, and the
measures of difference. Numpy only at import: each side imports its framework inside the
functions it calls, so that this module loads in either virtualenv.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONFIG = {"vocab_size": 60, "hidden_size": 32, "num_hidden_layers": 3,
          "num_attention_heads": 4, "intermediate_size": 64, "hidden_act": "gelu",
          "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
          "max_position_embeddings": 16, "type_vocab_size": 2, "initializer_range": 0.02}
NUM_LABELS, SEQ, BATCH = 3, 16, 8
STEPS, PEAK_LR, NUM_TRAIN_STEPS, WEIGHT_DECAY = 4, 1e-3, 10, 0.01
CLIP_NORM = 1.0


# ---------------------------------------------------------------------------
# The start: batches and weights (NumPy only)
# ---------------------------------------------------------------------------

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


def run_name(what, towers):
  """A run's label: "fgm, 1 tower", "global_pointer, 2 towers"."""
  return "%s, %d tower%s" % (what, towers, "" if towers == 1 else "s")


def run_key(run, step, name):
  """Where ours' file keeps `name` (a weight, "lr", "loss", ...) after `step` of `run`."""
  return "%s/%d/%s" % (run, step, name)


# ---------------------------------------------------------------------------
# Ours (the TF venv)
# ---------------------------------------------------------------------------

def train_ours(tf, run, towers, model_fn, data, warmup, arrays, initial=None,
               any_length=False, **options):
  """Trains `model_fn` through multigpu.build_training on `towers` logical CPU devices, one
  step per batch of `data`, from `initial`, and records each step into `arrays`.

  The recipe is every comparison's: `--adam_bias_correction` AdamW at PEAK_LR (weight decay
  as optimization.py's), Google's rate over NUM_TRAIN_STEPS with `warmup` steps, global-norm
  clip CLIP_NORM. After each step `arrays` gets, under run_key(run, step, ...): "lr" (the
  rate the step used), "global_norm" (before clipping), "loss", each weight under its name,
  and, where the run keeps weight averages (options' ema_decay), each average under
  "average/" + its name.

  Args:
    tf: tensorflow.compat.v1, in graph mode.
    run: the run's label, the first part of its keys.
    towers: how many towers.
    model_fn: the model fn build_training takes.
    data: the batches, dicts of NumPy arrays named as the model fn's features.
    warmup: Google's warmup steps.
    arrays: the dict to record into.
    initial: the start weights by name; None: draw_weights' for this graph's variables.
    any_length: every placeholder dimension left open (batches of differing lengths), not
      only the batch's; the dtypes are the batches'.
    **options: more keyword arguments of build_training (layerwise_lr_decay, ema_decay,
      ema_rule, attack).

  Returns:
    The start weights, to pass as `initial` to the next run that should start alike.
  """
  # pylint: disable=import-outside-toplevel
  from bert_mgpu.training import weight_averages
  import multigpu
  plan = multigpu.plan_devices(towers, visible_gpus=0)
  with tf.Graph().as_default():
    placeholders = {}
    for name, value in data[0].items():
      shape = [None] * value.ndim if any_length else [None] + list(value.shape[1:])
      placeholders[name] = tf.placeholder(value.dtype, shape, name=name)
    ops = multigpu.build_training(
        plan, model_fn, placeholders, PEAK_LR, NUM_TRAIN_STEPS, warmup, "adamw",
        clip_norm=CLIP_NORM, adam_bias_correction=True, **options)
    start_averages = weight_averages.build_start()  # None without --ema_decay
    variables = tf.trainable_variables()
    averages = weight_averages.used_variables(variables) if start_averages is not None else []
    if initial is None:
      initial = draw_weights({v.op.name: v.shape.as_list() for v in variables})
    session_config = plan.session_config()
    # One thread per op on either side: torch runs with one too.
    session_config.intra_op_parallelism_threads = 1
    with tf.Session(config=session_config) as sess:
      sess.run(tf.global_variables_initializer())
      sess.run([var.assign(initial[var.op.name]) for var in variables])
      if start_averages is not None:
        sess.run(start_averages)
      for step, batch in enumerate(data):
        arrays[run_key(run, step, "lr")] = sess.run(ops.learning_rate)
        _, arrays[run_key(run, step, "global_norm")], arrays[run_key(run, step, "loss")] = \
            sess.run([ops.train_op, ops.global_norm, ops.loss],
                     {placeholders[k]: v for k, v in batch.items()})
        for var, value in zip(variables, sess.run(variables)):
          arrays[run_key(run, step, var.op.name)] = value
        if averages:
          for var, value in zip(variables, sess.run(averages)):
            arrays[run_key(run, step, "average/" + var.op.name)] = value
  return initial


def add_start(arrays, initial, prefix="initial/"):
  """Records the start weights into `arrays` under `prefix` + their names."""
  arrays.update({prefix + name: value for name, value in initial.items()})


def save_ours(tf, out, arrays):
  """Writes `arrays` and TensorFlow's version to the .npz `out`."""
  arrays["tensorflow_version"] = np.array(tf.__version__)
  np.savez(out, **arrays)
  print("wrote %s (TensorFlow %s)" % (out, tf.__version__))


# ---------------------------------------------------------------------------
# torch (the bench venv)
# ---------------------------------------------------------------------------

def open_ours(ours_path):
  """Ours' file, with torch held to one thread (as ours' ops are)."""
  import torch  # pylint: disable=import-outside-toplevel
  torch.set_num_threads(1)
  return np.load(ours_path)


def start_of(ours, prefix="initial/"):
  """The start weights ours' file keeps under `prefix`, by name."""
  return {k[len(prefix):]: ours[k] for k in ours.files if k.startswith(prefix)}


def torch_classifier(initial, source, dtype="float32"):
  """transformers' BertForSequenceClassification at CONFIG (eager attention, eval mode;
  dropout is 0 anyway) in `dtype`, with the weights `initial` (`source` names them in
  errors)."""
  # pylint: disable=import-outside-toplevel
  import torch
  import transformers
  import hf_common
  model = transformers.BertForSequenceClassification(
      hf_common.hf_bert_config(CONFIG, NUM_LABELS, attn_implementation="eager"))
  model.eval()
  model.to(getattr(torch, dtype))
  hf_common.load_arrays(model, initial, source)
  return model


def classifier_loss(torch, model, batch):
  """The classifier's mean cross-entropy on one of batches()."""
  return model(input_ids=torch.from_numpy(batch["input_ids"]).long(),
               attention_mask=torch.from_numpy(batch["input_mask"]).long(),
               token_type_ids=torch.from_numpy(batch["segment_ids"]).long(),
               labels=torch.from_numpy(batch["label_ids"]).long()).loss


def train_torch(model, data, loss_of, warmup, optimizer=None, head_scope="", attack=None,
                after_step=None):
  """Trains the torch model one step per batch of `data` by ours' recipe: AdamW (eps 1e-6),
  Google's rate, torch.nn.utils.clip_grad_norm_(CLIP_NORM).

  Args:
    model: the torch model, with the start weights.
    data: the batches, as ours got them.
    loss_of: loss_of(torch, model, batch), the loss to minimize.
    warmup: Google's warmup steps.
    optimizer: a torch optimizer over the model's parameters whose groups' rates are the
      peak ones; None: hf_common.make_optimizer's (PEAK_LR, WEIGHT_DECAY except LayerNorm
      and biases).
    head_scope: the head's scope in Google's names (weight_names.google_name's).
    attack: attack(torch, model, step_loss), called after the clean backward pass, where
      step_loss(model) is this step's loss: adds the adversarial gradient.
    after_step: after_step(t, model), called after update t = 1, 2, ...

  Returns:
    Per step: (the weights after it under Google's names and layouts, the rate factor it
    used, the gradient norm before clipping, the clean loss before it).
  """
  # pylint: disable=import-outside-toplevel
  import torch
  import hf_common
  if optimizer is None:
    optimizer = hf_common.make_optimizer(model, PEAK_LR, WEIGHT_DECAY)
  scheduler = hf_common.make_scheduler(optimizer, "google", warmup, NUM_TRAIN_STEPS)
  steps = []
  for t, batch in enumerate(data, 1):
    def step_loss(model, batch=batch):
      return loss_of(torch, model, batch)
    rate = optimizer.param_groups[0]["lr"] / optimizer.param_groups[0]["initial_lr"]
    optimizer.zero_grad(set_to_none=True)
    loss = step_loss(model)
    loss.backward()
    if attack:
      attack(torch, model, step_loss)
    norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM))
    optimizer.step()
    scheduler.step()
    steps.append((hf_common.google_arrays(model, head_scope), rate, norm, float(loss.detach())))
    if after_step:
      after_step(t, model)
  return steps


# ---------------------------------------------------------------------------
# The measures (NumPy only)
# ---------------------------------------------------------------------------

def ours_after(ours, run, step, names):
  """Ours' weights `names` after `step` of `run`."""
  return {name: ours[run_key(run, step, name)] for name in names}


def differences(ours, run, step, weights):
  """|ours - weights| per name of `weights`, ours after `step` of `run`."""
  return {name: np.abs(ours[run_key(run, step, name)] - weights[name]) for name in weights}


def largest_distance(weights, others):
  """max |weights - others| over every name of `weights`."""
  return max(float(np.max(np.abs(weights[name] - others[name]))) for name in weights)


def largest_difference(ours, run, step, weights):
  """max |ours - weights| over every name of `weights`, ours after `step` of `run`."""
  return max(float(np.max(value)) for value in differences(ours, run, step, weights).values())


def changes_so_far(steps, initial):
  """Per step of train_torch's `steps`: the largest change of its weights from `initial`
  up to that step (what the differences are measured against)."""
  return np.maximum.accumulate([largest_distance(weights, initial)
                                for weights, _, _, _ in steps])


def worst_element(ours, run, initial, weights, lr):
  """Where ours and torch differ most after the first step: the name, the index, both moves,
  and what the moves imply. The first corrected AdamW step moves a weight w by
  -lr (u + decay w), u = g / (|g| + 1e-6) (Adam's epsilon): where |g| is near 1e-6, a
  rounding difference in g moves u by up to d|g| 1e-6 / (|g| + 1e-6)^2; torch's move gives
  |g|, and the two moves the gradient difference they imply."""
  by_name = differences(ours, run, 0, weights)
  name = max(by_name, key=lambda n: float(np.max(by_name[n])))
  where = np.unravel_index(np.argmax(by_name[name]), by_name[name].shape)
  decay = 0.0 if any(p in name for p in ("LayerNorm", "bias")) else WEIGHT_DECAY
  moves = [float(w[where] - initial[name][where]) for w in
           (ours[run_key(run, 0, name)], weights[name])]
  units = [-move / lr - decay * float(initial[name][where]) for move in moves]
  gradient = 1e-6 * abs(units[1]) / (1.0 - abs(units[1]))
  return ("%s%s: ours moved %.4e, torch %.4e (lr %.0e): |g| %.1e there, the moves differ "
          "as g by %.1e" % (name, [int(i) for i in where], moves[0], moves[1], lr, gradient,
                            abs(units[0] - units[1]) * (gradient + 1e-6) ** 2 / 1e-6))


# ---------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------

def two_sides_main(doc, default_npz, ours, torch, argv=None, summary=False):
  """The command line of a comparison in two steps: `ours [--out F.npz]` calls ours(F.npz),
  `torch [--ours F.npz]` calls torch(F.npz); with `summary`, `torch --summary F.json` too,
  which calls torch(F.npz, F.json) (None without the flag)."""
  p = argparse.ArgumentParser(description=doc.split("\n")[0])
  p.add_argument("side", choices=("ours", "torch"))
  p.add_argument("--out", default=default_npz, help="ours: where to write")
  p.add_argument("--ours", default=default_npz, help="torch: ours' file")
  if summary:
    p.add_argument("--summary", help="torch: also write the figures as JSON here")
  args = p.parse_args(argv)
  if args.side == "ours":
    ours(args.out)
  elif summary:
    torch(args.ours, args.summary)
  else:
    torch(args.ours)
