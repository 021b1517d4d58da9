# coding=utf-8
"""A sentence-transformers bi-encoder fine-tuned with an explicit recipe, then scored on test pairs.

The peer of `run_embedding_mgpu.py --do_train --do_predict` (`embedding_side_by_side.py` runs
both): the same start (--model_dir in transformers' format, as `convert_checkpoint.py
--to=transformers` writes from our checkpoint), the same TSV files, the same recipe, and the
same test figures (Spearman and Pearson of the cosine against the gold score).

Model: SentenceTransformer([Transformer(--model_dir), Pooling(mean|cls)]), truncation to
--max_seq_length. Training is a plain torch loop (no SentenceTransformerTrainer): AdamW
(weight decay 0.01 except biases and LayerNorm weights, eps 1e-6 as Google's
AdamWeightDecay), a linear warmup (--warmup_ratio) then a linear decay to 0 (--lr_schedule:
hf, counted from the warmup's end as transformers and sentence-transformers do; google,
counted from step 0 as this project's optimization.py), the gradients' global norm clipped
to --max_grad_norm, shuffled batches (seeded; --no_duplicates: sentence-transformers'
NoDuplicatesBatchSampler). The losses are sentence-transformers' own classes:

  cosent    CoSENTLoss(scale=--cosent_scale)          scored pairs (STS-B 0-5, 0/1 labels)
  in_batch  MultipleNegativesRankingLoss(scale=1/--temperature)
            pairs; with a score column only pairs scoring >= --positive_threshold train
            (default lowest + 0.8 * (highest - lowest), as run_embedding_mgpu.py's default)
  softmax   SoftmaxLoss over (u, v, |u-v|), integer labels (its classifier is trained too)
  unsup     unsupervised SimCSE: each distinct training sentence (both columns of a TSV, or
            a .txt with one sentence per line) twice, two dropout masks,
            MultipleNegativesRankingLoss(scale=1/--temperature)

Before training, the share of [UNK] among the test texts' word pieces is checked: over 5%
stops the job (--allow_unk to go on), since a tokenizer built without its vocabulary maps
every Chinese character to [UNK] (seen with transformers 5).

Output: one JSON line on stdout: loss, seed, unk_rate, spearman, pearson (cosine against
gold on --test), train_seconds, torch, st_version, test_seconds, dev_spearman (after each
epoch, with --dev), train_records, steps and the recipe's fields. Progress goes to stderr.
--eval_only scores the untrained model on --test (the floor; its loss is "none").

  /work/bench-venv/bin/python benchmarks/st_embedding.py --model_dir HF_DIR \\
      --loss cosent --train D/train.tsv --test D/test.tsv [--dev D/dev.tsv] \\
      [--epochs 3] [--batch_size 32] [--lr 1e-4] [--max_seq_length 64] [--seed 1] \\
      [--warmup_ratio 0.1] [--lr_schedule google] [--threads 2]
"""

import argparse
import functools
import json
import math
import os
import random
import sys
import time
import types

# Past this share of [UNK] test pieces the tokenizer does not match its vocab.
_MAX_UNK_RATE = 0.05


def log(*parts):
  """Progress to stderr, so that stdout holds only the JSON line."""
  print(*parts, file=sys.stderr, flush=True)


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--model_dir", required=True, help="transformers-format BERT directory "
                 "(config.json, weights, vocab.txt/tokenizer)")
  p.add_argument("--loss", choices=["cosent", "in_batch", "softmax", "unsup"], default="cosent")
  p.add_argument("--pooling", choices=["mean", "cls"], default="mean")
  p.add_argument("--train", help="train TSV (unsup: TSV or .txt)")
  p.add_argument("--dev", help="dev TSV with scores: scored after each epoch (stderr, and "
                 "dev_spearman in the JSON)")
  p.add_argument("--test", required=True, help="test TSV with scores")
  p.add_argument("--epochs", type=float, default=1.0)
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--eval_batch_size", type=int, default=128)
  p.add_argument("--lr", type=float, default=2e-5)
  p.add_argument("--max_seq_length", type=int, default=64)
  p.add_argument("--seed", type=int, default=12345)
  p.add_argument("--warmup_ratio", type=float, default=0.1)
  p.add_argument("--lr_schedule", choices=["hf", "google"], default="hf",
                 help="after warmup, linear decay to 0 from the warmup's end (hf: "
                 "transformers/ST) or counted from step 0 (google: this project's "
                 "optimization.py)")
  p.add_argument("--weight_decay", type=float, default=0.01)
  p.add_argument("--adam_eps", type=float, default=1e-6,
                 help="1e-6 as Google BERT's AdamWeightDecay (torch default 1e-8)")
  p.add_argument("--max_grad_norm", type=float, default=1.0, help="global-norm clip; 0 disables")
  p.add_argument("--temperature", type=float, default=0.05,
                 help="in_batch/unsup: MNRL scale = 1/temperature")
  p.add_argument("--cosent_scale", type=float, default=20.0)
  p.add_argument("--positive_threshold", type=float, default=None,
                 help="in_batch on scored pairs: keep score >= this (default lowest + "
                 "0.8*(highest-lowest))")
  p.add_argument("--no_duplicates", action="store_true",
                 help="in_batch/unsup: batches never hold the same text twice (ST's "
                 "NO_DUPLICATES sampler)")
  p.add_argument("--max_train", type=int, default=0,
                 help="use only the first N training records (smoke tests)")
  p.add_argument("--threads", type=int, default=2)
  p.add_argument("--save_dir", default=None, help="save the trained SentenceTransformer here")
  p.add_argument("--allow_unk", action="store_true",
                 help="go on when over 5%% of test pieces are [UNK]")
  p.add_argument("--eval_only", action="store_true", help="score the untrained model on --test")
  return p.parse_args(argv)


def import_libraries():
  """torch, numpy and sentence-transformers' classes, imported only once the flags are read
  (so --help is quick). Knows both module layouts of sentence-transformers."""
  # pylint: disable=import-outside-toplevel
  import numpy as np
  import sentence_transformers
  import torch
  try:  # sentence-transformers >= 5.4
    from sentence_transformers.sentence_transformer import losses
    from sentence_transformers.sentence_transformer import modules
  except ImportError:  # older releases
    from sentence_transformers import losses
    from sentence_transformers import models as modules
  return types.SimpleNamespace(
      np=np, torch=torch, version=sentence_transformers.__version__,
      SentenceTransformer=sentence_transformers.SentenceTransformer,
      Transformer=modules.Transformer, Pooling=modules.Pooling, CoSENTLoss=losses.CoSENTLoss,
      MultipleNegativesRankingLoss=losses.MultipleNegativesRankingLoss,
      SoftmaxLoss=losses.SoftmaxLoss)


def read_pairs(path):
  """Reads text_a<TAB>text_b[<TAB>score] lines; a first line naming the columns is skipped.

  Args:
    path: a TSV file (UTF-8). Blank lines are skipped; a bad line ends the program.

  Returns:
    A list of (text_a, text_b, score) tuples, score a float or None without that column.
  """
  rows = []
  with open(path, encoding="utf-8") as f:
    for number, line in enumerate(f, 1):
      line = line.rstrip("\r\n")
      if not line.strip():
        continue
      cols = line.split("\t")
      if number == 1 and cols[-1].strip().lower() in ("score", "label"):
        continue
      if len(cols) not in (2, 3):
        raise SystemExit(f"error: {path}:{number}: {len(cols)} columns, want 2 or 3")
      text_a, text_b = cols[0].strip(), cols[1].strip()
      if not text_a or not text_b:
        raise SystemExit(f"error: {path}:{number}: empty text")
      score = None
      if len(cols) == 3:
        try:
          score = float(cols[2])
        except ValueError:
          raise SystemExit(f"error: {path}:{number}: score {cols[2]!r} is not a number")
      rows.append((text_a, text_b, score))
  if not rows:
    raise SystemExit(f"error: {path}: no records")
  return rows


def read_sentences(path):
  """The distinct sentences of a .txt (one per line) or of both columns of a TSV, in the
  order first seen."""
  if path.endswith(".txt"):
    with open(path, encoding="utf-8") as f:
      sentences = [line.strip() for line in f if line.strip()]
  else:
    sentences = [text for text_a, text_b, _ in read_pairs(path) for text in (text_a, text_b)]
  return list(dict.fromkeys(sentences))


def make_batches(n_items, texts_of, batch_size, rng, no_duplicates):
  """Shuffled batches of record indices for one epoch.

  Args:
    n_items: how many records.
    texts_of: index -> the set of that record's texts.
    batch_size: records per batch (the last batch may hold fewer).
    rng: a random.Random, drawn from once per call.
    no_duplicates: a record whose text is already in the batch waits for a later batch
      (as sentence-transformers' NoDuplicatesBatchSampler).

  Returns:
    A list of lists of indices.
  """
  order = list(range(n_items))
  rng.shuffle(order)
  if not no_duplicates:
    return [order[k:k + batch_size] for k in range(0, n_items, batch_size)]
  batches, remaining = [], order
  while remaining:
    batch, seen, rest = [], set(), []
    for i in remaining:
      texts = texts_of(i)
      if len(batch) < batch_size and not seen & texts:
        batch.append(i)
        seen |= texts
      else:
        rest.append(i)
    batches.append(batch)
    remaining = rest
  return batches


def evaluate(model, pairs, batch_size):
  """(Spearman, Pearson) of the cosine of each pair's unit embeddings against its score."""
  # pylint: disable=import-outside-toplevel
  import numpy as np
  from scipy.stats import pearsonr, spearmanr
  gold = np.array([p[2] for p in pairs], dtype=np.float64)
  embed = functools.partial(model.encode, batch_size=batch_size, normalize_embeddings=True,
                            convert_to_numpy=True, show_progress_bar=False)
  embeddings_a = embed([p[0] for p in pairs])
  embeddings_b = embed([p[1] for p in pairs])
  cosines = (embeddings_a * embeddings_b).sum(axis=1).astype(np.float64)
  return float(spearmanr(cosines, gold)[0]), float(pearsonr(cosines, gold)[0])


def load_model(lib, args):
  """The SentenceTransformer of --model_dir with --pooling; returns (model, transformer)."""
  start = time.time()
  body = lib.Transformer(args.model_dir, max_seq_length=args.max_seq_length)
  pooling = lib.Pooling(body.get_embedding_dimension(), pooling_mode=args.pooling)
  model = lib.SentenceTransformer(modules=[body, pooling], device="cpu")
  log(f"loaded {args.model_dir} in {time.time() - start:.1f}s: dim "
      f"{body.get_embedding_dimension()}, pooling {args.pooling}, max_seq_length "
      f"{args.max_seq_length}, tokenizer {type(body.tokenizer).__name__} "
      f"lower={getattr(body.tokenizer, 'do_lower_case', '?')}")
  return model, body


def unk_rate(tokenizer, test):
  """The share of [UNK] among the word pieces of the first 500 test pairs' texts (logged
  with the pieces of one text)."""
  sample = [text for pair in test[:500] for text in pair[:2]]
  ids = [i for piece_ids in tokenizer(sample, add_special_tokens=False)["input_ids"]
         for i in piece_ids]
  rate = sum(i == tokenizer.unk_token_id for i in ids) / max(1, len(ids))
  log(f"test [UNK] rate {rate:.4f} over {len(ids)} pieces; e.g. "
      f"{tokenizer.convert_ids_to_tokens(tokenizer(sample[0])['input_ids'])[:12]}")
  return rate


def training_records(args, result):
  """The training records (text_a, text_b, score) for --loss, checked against it.

  unsup: (sentence, sentence, 0.0) per distinct sentence. in_batch on scored pairs: only
  those scoring at least the threshold, which goes into `result`. --max_train cuts before
  filtering. A mismatch of loss and data ends the program.
  """
  if args.loss == "unsup":
    sentences = read_sentences(args.train)
    if args.max_train:
      sentences = sentences[:args.max_train]
    records = [(s, s, 0.0) for s in sentences]
    log(f"unsup: {len(records)} distinct sentences")
    return records
  records = read_pairs(args.train)
  if args.max_train:
    records = records[:args.max_train]
  scored = all(r[2] is not None for r in records)
  if args.loss in ("cosent", "softmax") and not scored:
    raise SystemExit(f"error: --loss={args.loss} needs a score column in {args.train}")
  if args.loss == "in_batch" and scored:
    lowest = min(r[2] for r in records)
    highest = max(r[2] for r in records)
    threshold = args.positive_threshold
    if threshold is None:
      threshold = lowest + 0.8 * (highest - lowest)
    before = len(records)
    records = [r for r in records if r[2] >= threshold]
    log(f"in_batch: kept {len(records)} of {before} pairs with score >= {threshold:g}")
    result["positive_threshold"] = threshold
  elif args.positive_threshold is not None:
    raise SystemExit("error: --positive_threshold needs --loss=in_batch on scored pairs")
  if args.loss == "softmax":
    if any(r[2] != int(r[2]) or r[2] < 0 for r in records):
      raise SystemExit("error: --loss=softmax needs integer class labels >= 0")
  return records


def make_loss(lib, args, model, body, records):
  """sentence-transformers' loss module for --loss (softmax: with its classifier)."""
  if args.loss == "cosent":
    return lib.CoSENTLoss(model, scale=args.cosent_scale)
  if args.loss in ("in_batch", "unsup"):
    return lib.MultipleNegativesRankingLoss(model, scale=1.0 / args.temperature)
  num_labels = int(max(r[2] for r in records)) + 1
  loss_fn = lib.SoftmaxLoss(model, sentence_embedding_dimension=body.get_embedding_dimension(),
                            num_labels=num_labels)
  log(f"softmax: {num_labels} classes")
  return loss_fn


def make_optimizer(torch, loss_fn, args):
  """AdamW over the loss module's parameters (the model's, and a softmax head's), without
  weight decay on biases and LayerNorm weights."""
  decay, no_decay, seen = [], [], set()
  for name, param in loss_fn.named_parameters():
    if not param.requires_grad or id(param) in seen:
      continue
    seen.add(id(param))
    exempt = "bias" in name or "LayerNorm" in name or "layer_norm" in name
    (no_decay if exempt else decay).append(param)
  return torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                            {"params": no_decay, "weight_decay": 0.0}],
                           lr=args.lr, eps=args.adam_eps)


def epoch_batches(args, records):
  """Each epoch's batches for --epochs (a fractional last epoch is cut short).

  Without --no_duplicates the count per epoch is fixed by the data; with it, it can vary a
  little from epoch to epoch.
  """
  rng = random.Random(args.seed)
  no_duplicates = args.no_duplicates and args.loss in ("in_batch", "unsup")
  full_epochs = math.ceil(args.epochs)
  texts_of = lambda i: {records[i][0], records[i][1]}
  batches = [make_batches(len(records), texts_of, args.batch_size, rng, no_duplicates)
             for _ in range(full_epochs)]
  if args.epochs != full_epochs:
    last = batches[-1]
    fraction = args.epochs - (full_epochs - 1)
    batches[-1] = last[:max(1, int(round(len(last) * fraction)))]
  return batches


def lr_multiplier(step, warmup, total_steps, schedule):
  """The factor of --lr for update number `step` (0-based)."""
  if step < warmup:
    return float(step) / float(max(1, warmup))
  if schedule == "google":  # optimization.py: the decay is counted from step 0
    return max(0.0, 1.0 - float(step) / float(total_steps))
  # transformers' get_linear_schedule_with_warmup (sentence-transformers' trainer)
  return max(0.0, float(total_steps - step) / float(max(1, total_steps - warmup)))


def train(lib, args, model, body, records, dev):
  """Trains `model` on `records` with the recipe of the flags.

  Args:
    lib: import_libraries()'s namespace.
    args: the flags.
    model: the SentenceTransformer.
    body: its Transformer module.
    records: training_records()'s list.
    dev: read_pairs() of --dev, or None.

  Returns:
    (train_seconds, steps, dev_scores): seconds in the epochs (dev scoring left out), the
    updates made, and the dev Spearman after each epoch (with a scored --dev).
  """
  torch = lib.torch
  loss_fn = make_loss(lib, args, model, body, records)
  optimizer = make_optimizer(torch, loss_fn, args)
  batches_of_epochs = epoch_batches(args, records)
  total_steps = sum(len(batches) for batches in batches_of_epochs)
  warmup = int(total_steps * args.warmup_ratio)
  scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, functools.partial(
      lr_multiplier, warmup=warmup, total_steps=total_steps, schedule=args.lr_schedule))
  log(f"train: {len(records)} records, {total_steps} steps of batch {args.batch_size}, "
      f"warmup {warmup}, lr {args.lr}, loss {args.loss}")
  params = [p for group in optimizer.param_groups for p in group["params"]]
  train_seconds, steps, dev_scores = 0.0, 0, []
  for epoch, batches in enumerate(batches_of_epochs, 1):
    model.train()
    loss_fn.train()
    epoch_start = time.time()
    loss_sum = 0.0
    for number, batch in enumerate(batches, 1):
      features_a = model.preprocess([records[i][0] for i in batch])
      features_b = model.preprocess([records[i][1] for i in batch])
      if args.loss == "softmax":
        labels = torch.tensor([int(records[i][2]) for i in batch], dtype=torch.long)
      else:
        labels = torch.tensor([float(records[i][2]) for i in batch], dtype=torch.float32)
      loss = loss_fn([features_a, features_b], labels)
      optimizer.zero_grad(set_to_none=True)
      loss.backward()
      if args.max_grad_norm > 0:
        torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
      optimizer.step()
      scheduler.step()
      steps += 1
      loss_sum += loss.item()
      if number % 50 == 0 or number == len(batches):
        log(f"epoch {epoch} step {number}/{len(batches)} loss {loss_sum / number:.4f} "
            f"lr {scheduler.get_last_lr()[0]:.2e} {time.time() - epoch_start:.0f}s")
    train_seconds += time.time() - epoch_start
    if dev is not None and all(p[2] is not None for p in dev):
      model.eval()
      dev_spearman, dev_pearson = evaluate(model, dev, args.eval_batch_size)
      dev_scores.append(round(dev_spearman, 6))
      log(f"epoch {epoch} dev spearman {dev_spearman:.4f} pearson {dev_pearson:.4f}")
  return train_seconds, steps, dev_scores


def main(argv=None):
  args = parse_args(argv)
  lib = import_libraries()
  lib.torch.set_num_threads(args.threads)
  random.seed(args.seed)
  lib.np.random.seed(args.seed)
  lib.torch.manual_seed(args.seed)

  test = read_pairs(args.test)
  if any(p[2] is None for p in test):
    raise SystemExit("error: --test needs a score column")
  dev = read_pairs(args.dev) if args.dev else None
  model, body = load_model(lib, args)
  rate = unk_rate(body.tokenizer, test)
  if rate > _MAX_UNK_RATE and not args.allow_unk:
    raise SystemExit(f"error: {rate:.1%} of test pieces are [UNK]: the tokenizer in "
                     f"{args.model_dir} does not match its vocab (--allow_unk to go on)")

  result = {"loss": "none" if args.eval_only else args.loss, "seed": args.seed,
            "unk_rate": round(rate, 5)}
  train_seconds, steps, n_train, dev_scores = 0.0, 0, 0, []
  if not args.eval_only:
    if not args.train:
      raise SystemExit("error: --train is required unless --eval_only")
    records = training_records(args, result)
    n_train = len(records)
    if n_train == 0:
      raise SystemExit("error: no training records left")
    train_seconds, steps, dev_scores = train(lib, args, model, body, records, dev)
    if args.save_dir:
      model.save(args.save_dir)
      log(f"saved to {args.save_dir}")

  model.eval()
  test_start = time.time()
  spearman, pearson = evaluate(model, test, args.eval_batch_size)
  result.update({
      "spearman": round(spearman, 6),
      "pearson": round(pearson, 6),
      "train_seconds": round(train_seconds, 2),
      "torch": lib.torch.__version__,
      "st_version": lib.version,
      "test_seconds": round(time.time() - test_start, 2),
      "dev_spearman": dev_scores,
      "train_records": n_train,
      "steps": steps,
      "epochs": args.epochs,
      "batch_size": args.batch_size,
      "lr": args.lr,
      "lr_schedule": args.lr_schedule,
      "warmup_ratio": args.warmup_ratio,
      "pooling": args.pooling,
      "max_seq_length": args.max_seq_length,
      "test_file": os.path.abspath(args.test),
      "model_dir": os.path.abspath(args.model_dir),
      "threads": args.threads,
  })
  print(json.dumps(result, ensure_ascii=False), flush=True)


if __name__ == "__main__":
  main()
