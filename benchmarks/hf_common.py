"""Pieces shared by hf_train_step.py, hf_finetune.py and hf_ner.py (PyTorch peers of ours).

Not part of the project: imports torch and transformers, which only the benchmark
virtualenv has (see benchmarks/README.md). Models are built from a config with random
weights, or given weights from a .npz (load_npz); nothing is downloaded.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

import torch
import transformers

import weight_names

# Google's bert_config.json fields that map one to one onto transformers.BertConfig.
GOOGLE_CONFIG_FIELDS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "intermediate_size", "hidden_act", "hidden_dropout_prob",
    "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
    "initializer_range")

# As in our optimization.py: no weight decay on LayerNorm parameters and biases.
NO_DECAY_PATTERNS = ("LayerNorm", "layer_norm", "bias")


def hf_bert_config(google_fields, num_labels, attn_implementation=None):
  """Builds a transformers.BertConfig from the fields of a Google bert_config.json.

  Args:
    google_fields: dict with (a subset of) GOOGLE_CONFIG_FIELDS; other keys are ignored.
      "gelu" means the exact erf GELU in both Google's BERT and transformers.
    num_labels: classes of the classification head.
    attn_implementation: "eager" or "sdpa" (transformers' default), or None.

  Returns:
    A BertConfig with layer_norm_eps=1e-12, as Google's BERT uses.
  """
  kwargs = {k: google_fields[k] for k in GOOGLE_CONFIG_FIELDS if k in google_fields}
  config = transformers.BertConfig(num_labels=num_labels, layer_norm_eps=1e-12, **kwargs)
  if attn_implementation:
    config._attn_implementation = attn_implementation  # pylint: disable=protected-access
  return config


def add_job_arguments(p, data_help, init_help):
  """The arguments of a whole fine-tuning job that hf_ner.py and hf_span_ner.py share
  (run_ner_mgpu.py's names and defaults where it has them): the files, the recipe, the
  start, threads and logging. `data_help` and `init_help` describe --data_dir and
  --init_npz."""
  p.add_argument("--data_dir", required=True, help=data_help)
  p.add_argument("--vocab_file", required=True)
  p.add_argument("--bert_config_file", required=True, help="a Google bert_config.json")
  p.add_argument("--output_dir", required=True, help="the predictions are written here")
  p.add_argument("--do_lower_case", default=True, action=argparse.BooleanOptionalAction)
  p.add_argument("--max_seq_length", type=int, default=128)
  p.add_argument("--train_batch_size", type=int, default=32, help="the global batch")
  p.add_argument("--predict_batch_size", type=int, default=8, help="dev and test")
  p.add_argument("--learning_rate", type=float, default=5e-5)
  p.add_argument("--num_train_epochs", type=float, default=3.0)
  p.add_argument("--warmup_proportion", type=float, default=0.1)
  p.add_argument("--lr_schedule", choices=LR_SCHEDULES, default="google")
  p.add_argument("--attn_implementation", choices=("eager", "sdpa"), default=None,
                 help="transformers' attention (default: transformers' own, sdpa)")
  p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads; 0: all cores")
  p.add_argument("--seed", type=int, default=12345)
  p.add_argument("--google_adamw", action="store_true",
                 help="Google's AdamWeightDecay (no bias correction, ours without "
                      "--adam_bias_correction) instead of torch's AdamW")
  p.add_argument("--init_npz", help=init_help)
  p.add_argument("--save_init_npz", help="write the initial weights here (Google names) "
                 "before training, for checkpoint_npz.py --from_npz")
  p.add_argument("--log_every", type=int, default=0,
                 help="log the mean training loss of every this many steps (0: never)")


def start_job(args):
  """What the peers' jobs do first: torch's threads (returned) and seed, transformers'
  warnings off, the output directory made."""
  threads = set_threads(args.threads)
  torch.manual_seed(args.seed)
  transformers.logging.set_verbosity_error()
  os.makedirs(args.output_dir, exist_ok=True)
  return threads


def read_google_config(path):
  """Reads a Google bert_config.json into a dict."""
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def set_threads(threads):
  """Sets torch's intra-op threads (0 or None: every core); returns the number used."""
  threads = threads or os.cpu_count() or 1
  torch.set_num_threads(threads)
  return threads


class GoogleAdamWeightDecay(torch.optim.Optimizer):
  """Google BERT's AdamWeightDecay in torch, to tell the optimizer's effect from the rest of a
  recipe: Adam moments WITHOUT bias correction, decoupled weight decay.

    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  p -= lr (m / (sqrt(v) + eps) + wd p)
  """

  def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-6):
    super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": 0.0})

  @torch.no_grad()
  def step(self, closure=None):  # pylint: disable=arguments-differ
    del closure
    for group in self.param_groups:
      beta_1, beta_2 = group["betas"]
      for param in group["params"]:
        if param.grad is None:
          continue
        state = self.state[param]
        if not state:
          state["m"], state["v"] = torch.zeros_like(param), torch.zeros_like(param)
        m, v = state["m"], state["v"]
        m.mul_(beta_1).add_(param.grad, alpha=1 - beta_1)
        v.mul_(beta_2).addcmul_(param.grad, param.grad, value=1 - beta_2)
        update = m / (v.sqrt() + group["eps"])
        if group["weight_decay"]:
          update.add_(param, alpha=group["weight_decay"])
        param.add_(update, alpha=-group["lr"])


def make_optimizer(model, learning_rate, weight_decay=0.01, google_adamw=False):
  """torch AdamW with eps 1e-6 and weight decay off for LayerNorm parameters and biases;
  with google_adamw, GoogleAdamWeightDecay (ours) with the same groups.

  Note: torch's AdamW applies Adam's bias correction, Google's AdamWeightDecay
  (ours) does not; the cost per step is the same.
  """
  decay, no_decay = [], []
  for name, param in model.named_parameters():
    if not param.requires_grad:
      continue
    if any(p in name for p in NO_DECAY_PATTERNS):
      no_decay.append(param)
    else:
      decay.append(param)
  groups = [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]
  if google_adamw:
    return GoogleAdamWeightDecay(groups, lr=learning_rate, eps=1e-6)
  return torch.optim.AdamW(groups, lr=learning_rate, eps=1e-6)


def google_arrays(model, head_scope=""):
  """A copy of the model's weights as a dict of NumPy arrays under Google's names and
  layouts (weight_names)."""
  return named_google_arrays(model.named_parameters(), head_scope)


def named_google_arrays(named_tensors, head_scope=""):
  """google_arrays of (HF name, tensor) pairs, e.g. averages kept beside a model."""
  arrays = {}
  for hf_name, param in named_tensors:
    name, transpose = weight_names.google_name(hf_name, head_scope)
    value = param.detach().cpu().numpy()
    arrays[name] = np.array(value.T if transpose else value)  # not a view of the parameter
  return arrays


def save_npz(model, path, head_scope=""):
  """Writes the model's weights to a .npz under Google's names and layouts (weight_names)."""
  if not path.endswith(".npz"):
    raise ValueError("%s: give a path ending in .npz (np.savez would append it)" % path)
  np.savez(path, **google_arrays(model, head_scope))


def load_arrays(model, arrays, source, head_scope="", only=None):
  """Sets every weight of the model (with `only`, a predicate of the HF name: those it
  accepts) from `arrays` (a mapping of Google names to NumPy arrays in Google's layouts).
  Raises ValueError naming a weight `arrays` lacks or has in another shape; `source` names
  where they came from in the message."""
  with torch.no_grad():
    for hf_name, param in model.named_parameters():
      if only is not None and not only(hf_name):
        continue
      name, transpose = weight_names.google_name(hf_name, head_scope)
      if name not in arrays:
        raise ValueError("%s has no %s (for %s)" % (source, name, hf_name))
      value = arrays[name].T if transpose else arrays[name]
      if tuple(value.shape) != tuple(param.shape):
        raise ValueError("%s: %s is %s, the model's %s is %s" % (
            source, name, value.shape, hf_name, tuple(param.shape)))
      param.copy_(torch.from_numpy(np.ascontiguousarray(value)))


def load_npz(model, path, head_scope=""):
  """Sets every weight of the model from a .npz of Google names (save_npz's or
  checkpoint_npz.py's); see load_arrays."""
  with np.load(path) as arrays:
    load_arrays(model, {name: arrays[name] for name in arrays.files}, path, head_scope)


def set_initial_weights(model, init_npz, save_init_npz, head_scope=""):
  """--init_npz and --save_init_npz of the peers: load the start from a .npz (else keep
  transformers' draws), then write the start to a .npz, each when given."""
  if init_npz:
    load_npz(model, init_npz, head_scope)
  if save_init_npz:
    save_npz(model, save_init_npz, head_scope)


LR_SCHEDULES = ("google", "hf")


def make_scheduler(optimizer, lr_schedule, num_warmup_steps, num_steps):
  """The learning-rate scheduler of `lr_schedule`, stepped once per update.

  "google": Google's BERT rate (our optimization.learning_rate_schedule): `step / warmup`
  of the peak during warmup, then `1 - step / num_steps`. The decay counts from step 0,
  so warmup ends at 1 - warmup share of the peak (0.9 for 10%).
  "hf": transformers.get_linear_schedule_with_warmup, which decays from the peak at the
  end of warmup: num_steps / (num_steps - warmup) times Google's rate after warmup (1.11x
  for 10% warmup).
  """
  if lr_schedule == "hf":
    return transformers.get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_steps)
  if lr_schedule != "google":
    raise ValueError("lr_schedule %r: use one of %s" % (lr_schedule, ", ".join(LR_SCHEDULES)))
  def factor(step):
    if num_warmup_steps and step < num_warmup_steps:
      return step / float(num_warmup_steps)
    return max(0.0, 1.0 - step / float(num_steps))
  return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def autocast_context(precision):
  """torch.autocast on CPU in bfloat16 for "bf16"; a no-op context for "fp32"."""
  if precision == "bf16":
    return torch.autocast("cpu", dtype=torch.bfloat16)
  return torch.autocast("cpu", enabled=False)


def versions():
  """The framework fields every JSON line starts with."""
  return {"framework": "pytorch", "torch": torch.__version__,
          "transformers": transformers.__version__}


def count_parameters(model):
  return sum(p.numel() for p in model.parameters())


def train_steps(model, loader, optimizer, scheduler, num_steps, log_every=0):
  """Trains for num_steps updates over `loader` (repeated as needed), clipping the global
  gradient norm at 1.0 as Google's optimizer does; with log_every, prints the mean loss of
  every log_every steps to stderr.

  Returns:
    (rows trained on, the last batch's loss, seconds).
  """
  start = time.perf_counter()
  model.train()
  step, trained, loss, window = 0, 0, float("nan"), []
  while step < num_steps:
    for batch in loader:
      optimizer.zero_grad(set_to_none=True)
      output = model(**batch)
      output.loss.backward()
      torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
      optimizer.step()
      scheduler.step()
      loss = output.loss.item()
      trained += batch["input_ids"].shape[0]
      step += 1
      if log_every:
        window.append(loss)
      if log_every and step % log_every == 0:
        print("step %d/%d  mean loss %.4f" % (step, num_steps, sum(window) / len(window)),
              file=sys.stderr, flush=True)
        window = []
      if step == num_steps:
        break
  return trained, loss, time.perf_counter() - start

