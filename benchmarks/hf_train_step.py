"""The raw training step of Hugging Face's PyTorch BertForSequenceClassification.

A peer of scripts/benchmark.py (our TensorFlow graph-mode benchmark) for side-by-side
comparisons: the same model config, batch, sequence length, precision and length
distribution, on synthetic token ids, timed step by step. The model is built from a
config with random weights (no download). One process on the CPU;
--train_batch_size is the global batch.

Each step: zero the gradients, forward (in bf16 autocast with --precision=bf16),
backward, clip the global gradient norm to 1.0, AdamW update (lr 5e-5, weight decay
0.01 except LayerNorm and biases, eps 1e-6), fetch the loss. Dropout is on, as in
training. Warmup steps are not timed.

Prints one JSON line (examples_per_sec = batch / median step time, step_time_ms is
the median, step_time_ms_p90 the 90th percentile), then one readable line.

  python benchmarks/hf_train_step.py [--bert_config_file F | --hidden_size 256 ...]
      [--train_batch_size 16] [--max_seq_length 128] [--steps 30] [--warmup_steps 5]
      [--threads N] [--precision fp32|bf16] [--length_distribution fixed|short]
      [--pad_to_longest]
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_common  # pylint: disable=wrong-import-position

# Token ids of the synthetic batches (the demo vocab's layout): [PAD] 0, [CLS] 2, [SEP] 3;
# text tokens are drawn uniformly from FIRST_TEXT_ID .. vocab_size - 1.
PAD_ID, CLS_ID, SEP_ID, FIRST_TEXT_ID = 0, 2, 3, 5

# --length_distribution=short: text tokens (before [CLS]/[SEP]) are log-normal with
# this median and spread, like short Chinese texts (one token per character), then
# clipped to [SHORT_MIN_TOKENS, SHORT_MAX_TOKENS].
SHORT_MEDIAN_TOKENS, SHORT_SIGMA, SHORT_MIN_TOKENS, SHORT_MAX_TOKENS = 20, 0.5, 2, 60


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--bert_config_file", help="a Google bert_config.json; overrides the "
                 "--hidden_size ... --vocab_size flags")
  p.add_argument("--hidden_size", type=int, default=256)
  p.add_argument("--num_hidden_layers", type=int, default=4)
  p.add_argument("--num_attention_heads", type=int, default=4)
  p.add_argument("--intermediate_size", type=int, default=1024)
  p.add_argument("--vocab_size", type=int, default=21128)
  p.add_argument("--task", default="classifier", choices=["classifier"],
                 help="accepted for symmetry with scripts/benchmark.py")
  p.add_argument("--train_batch_size", type=int, default=16, help="the global batch")
  p.add_argument("--max_seq_length", type=int, default=128)
  p.add_argument("--num_labels", type=int, default=2)
  p.add_argument("--steps", type=int, default=30, help="timed steps")
  p.add_argument("--warmup_steps", type=int, default=5, help="untimed steps first")
  p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads; 0: all cores")
  p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
  p.add_argument("--length_distribution", default="fixed", choices=["fixed", "short"])
  p.add_argument("--pad_to_longest", action="store_true",
                 help="pad each batch to its longest example (HF's usual recipe) instead "
                 "of to --max_seq_length (our fixed padding)")
  p.add_argument("--attn_implementation", default="sdpa", choices=["sdpa", "eager"],
                 help="transformers' attention kernel (sdpa is its default)")
  p.add_argument("--seed", type=int, default=12345)
  args = p.parse_args(argv)
  if args.steps < 1 or args.warmup_steps < 0 or args.train_batch_size < 1:
    p.error("--steps and --train_batch_size must be >= 1, --warmup_steps >= 0")
  if args.max_seq_length < 3:
    p.error("--max_seq_length must be >= 3 ([CLS], a token, [SEP])")
  return args


def google_fields(args):
  """The model config as Google bert_config.json fields."""
  if args.bert_config_file:
    return hf_common.read_google_config(args.bert_config_file)
  return {"vocab_size": args.vocab_size, "hidden_size": args.hidden_size,
          "num_hidden_layers": args.num_hidden_layers,
          "num_attention_heads": args.num_attention_heads,
          "intermediate_size": args.intermediate_size, "hidden_act": "gelu",
          "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
          "max_position_embeddings": max(512, args.max_seq_length), "type_vocab_size": 2,
          "initializer_range": 0.02}


def example_lengths(rng, count, distribution, max_seq_length):
  """Lengths with [CLS] and [SEP] of `count` examples, each <= max_seq_length.

  Args:
    rng: a numpy Generator (seeded: the same lengths on every run).
    count: number of examples.
    distribution: "fixed" (every example max_seq_length) or "short" (log-normal text
      lengths, median SHORT_MEDIAN_TOKENS, clipped to SHORT_MAX_TOKENS, plus 2).
    max_seq_length: the cap.
  """
  if distribution == "fixed":
    return np.full(count, max_seq_length, dtype=np.int64)
  text = np.round(rng.lognormal(np.log(SHORT_MEDIAN_TOKENS), SHORT_SIGMA, size=count))
  text = np.clip(text, SHORT_MIN_TOKENS, SHORT_MAX_TOKENS).astype(np.int64)
  return np.minimum(text + 2, max_seq_length)


def make_batch(rng, lengths, width, vocab_size, num_labels):
  """One batch of tensors padded to `width`, in the model's keyword arguments."""
  batch = len(lengths)
  ids = rng.integers(FIRST_TEXT_ID, vocab_size, size=(batch, width))
  positions = np.arange(width)[None, :]
  mask = positions < lengths[:, None]
  ids[:, 0] = CLS_ID
  ids[np.arange(batch), lengths - 1] = SEP_ID
  ids[~mask] = PAD_ID
  return {"input_ids": torch.from_numpy(ids),
          "attention_mask": torch.from_numpy(mask.astype(np.int64)),
          "token_type_ids": torch.zeros(batch, width, dtype=torch.int64),
          "labels": torch.from_numpy(rng.integers(0, num_labels, size=batch))}


def make_batches(args, vocab_size, count):
  """`count` distinct synthetic batches (made before timing; no input cost is measured)."""
  rng = np.random.default_rng(args.seed)
  batches = []
  for _ in range(count):
    lengths = example_lengths(rng, args.train_batch_size, args.length_distribution,
                              args.max_seq_length)
    width = int(lengths.max()) if args.pad_to_longest else args.max_seq_length
    batches.append(make_batch(rng, lengths, width, vocab_size, args.num_labels))
  return batches


def train_step(model, optimizer, batch, precision):
  """One optimizer step; returns the loss as a Python float."""
  optimizer.zero_grad(set_to_none=True)
  with hf_common.autocast_context(precision):
    loss = model(**batch).loss
  loss.backward()
  torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
  optimizer.step()
  return loss.item()


def main(argv=None):
  args = parse_args(argv)
  threads = hf_common.set_threads(args.threads)
  torch.manual_seed(args.seed)
  transformers.logging.set_verbosity_error()
  fields = google_fields(args)
  if args.max_seq_length > fields.get("max_position_embeddings", 512):
    sys.exit("--max_seq_length %d exceeds max_position_embeddings %d of the config"
             % (args.max_seq_length, fields["max_position_embeddings"]))
  config = hf_common.hf_bert_config(fields, args.num_labels, args.attn_implementation)
  model = transformers.BertForSequenceClassification(config)
  model.train()
  optimizer = hf_common.make_optimizer(model, 5e-5)
  batches = make_batches(args, config.vocab_size, args.warmup_steps + args.steps)

  for batch in batches[:args.warmup_steps]:
    train_step(model, optimizer, batch, args.precision)
  times, loss = [], float("nan")
  for batch in batches[args.warmup_steps:]:
    start = time.perf_counter()
    loss = train_step(model, optimizer, batch, args.precision)
    times.append(time.perf_counter() - start)

  median = float(np.median(times))
  timed = batches[args.warmup_steps:]
  result = hf_common.versions()
  result.update({
      "task": "classifier",
      "examples_per_sec": round(args.train_batch_size / median, 2),
      "step_time_ms": round(1000 * median, 2),
      "step_time_ms_p90": round(1000 * float(np.percentile(times, 90)), 2),
      "step_time_ms_mean": round(1000 * float(np.mean(times)), 2),
      "global_batch": args.train_batch_size,
      "max_seq_length": args.max_seq_length,
      "mean_padded_length": round(float(np.mean([b["input_ids"].shape[1] for b in timed])), 1),
      "mean_real_length": round(float(np.mean([b["attention_mask"].sum(1).float().mean()
                                               for b in timed])), 1),
      "precision": args.precision,
      "threads": threads,
      "length_distribution": args.length_distribution,
      "pad_to_longest": args.pad_to_longest,
      "steps": args.steps,
      "warmup_steps": args.warmup_steps,
      "hidden_size": config.hidden_size,
      "num_hidden_layers": config.num_hidden_layers,
      "num_attention_heads": config.num_attention_heads,
      "intermediate_size": config.intermediate_size,
      "vocab_size": config.vocab_size,
      "num_parameters": hf_common.count_parameters(model),
      "attn_implementation": args.attn_implementation,
      "final_loss": round(loss, 4),
  })
  print(json.dumps(result), flush=True)
  print("pytorch %s / transformers %s: %.1f examples/sec, step %.1f ms median (p90 %.1f), "
        "batch %d x seq %d (%s%s), %s, %d threads"
        % (result["torch"], result["transformers"], result["examples_per_sec"],
           result["step_time_ms"], result["step_time_ms_p90"], args.train_batch_size,
           args.max_seq_length, args.length_distribution,
           ", padded to longest" if args.pad_to_longest else "", args.precision, threads))


if __name__ == "__main__":
  main()
