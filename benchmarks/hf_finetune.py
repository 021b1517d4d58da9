"""A whole fine-tuning job with Hugging Face's usual PyTorch recipe, for timing.

The peer of `run_classifier_mgpu.py --task_name=tsv --do_train --do_eval --do_predict`:
the same TSV files (header row naming the columns `label`, `text_a`, optionally
`text_b`; the test file may lack `label`), the same vocab.txt and bert_config.json.
The model starts from random weights (built from the config; nothing is downloaded), or
from --init_npz (see checkpoint_npz.py).

Recipe: BertTokenizerFast on the local vocab.txt (lower-cased, one token per Chinese
character, as Google's tokenizer), truncation to --max_seq_length, no padding at
featurize time; shuffled training batches (seeded) padded to their longest example
(DataCollatorWithPadding); AdamW (weight decay 0.01 except LayerNorm and biases, eps
1e-6; --google_adamw: Google's AdamWeightDecay) with a linear warmup
(--warmup_proportion) and linear decay (get_linear_schedule_with_warmup; --lr_schedule=google:
Google's, as ours); gradient norm clipped to 1.0. Then dev accuracy
(if dev.tsv exists) and test predictions, batches padded to their longest, written
to --output_dir/predict.txt (one label per line, in input order).

Labels: data_dir/labels.txt if it exists, else the sorted labels of train.tsv (as ours).

--multi_label: the peer of `run_classifier_mgpu.py --multi_label` at its default threshold:
the label field holds zero or more labels split at --label_separator (an empty field is no
label; labels.txt, else the sorted single labels of train.tsv), the head is
BertForSequenceClassification(problem_type="multi_label_classification") (one sigmoid per
label, binary cross-entropy), a label is predicted when its probability is at least 0.5,
predict.txt has each example's labels joined by the separator (an empty line for none), and
the dev figures are micro-F1, macro-F1 and exact match (score_multi_label.scores, the
scorer ours uses).

Prints one JSON line: seconds of featurize, train, eval, predict and total (wall
clock, including model building), training examples/sec and the dev accuracy (with
--multi_label: exact-set match, beside dev_micro_f1, dev_macro_f1, dev_exact_match).

  python benchmarks/hf_finetune.py --data_dir D --vocab_file D/vocab.txt \
      --bert_config_file D/bert_config.json --output_dir OUT \
      [--max_seq_length 128] [--train_batch_size 32] [--learning_rate 5e-5] \
      [--num_train_epochs 3] [--threads N] [--seed 12345] [--multi_label] \
      [--google_adamw] [--lr_schedule google] [--init_npz W.npz] [--save_init_npz W.npz] \
      [--log_every 100] [--group_by_length]
"""

import argparse
import inspect
import json
import math
import os
import sys
import time

import torch
import transformers
from transformers import trainer_pt_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_common  # pylint: disable=wrong-import-position
import score_multi_label  # pylint: disable=wrong-import-position


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--data_dir", required=True, help="train.tsv, test.tsv, optional dev.tsv")
  p.add_argument("--vocab_file", required=True)
  p.add_argument("--bert_config_file", required=True, help="a Google bert_config.json")
  p.add_argument("--output_dir", required=True, help="predict.txt is written here")
  p.add_argument("--do_lower_case", default=True, action=argparse.BooleanOptionalAction)
  p.add_argument("--max_seq_length", type=int, default=128)
  p.add_argument("--train_batch_size", type=int, default=32)
  p.add_argument("--predict_batch_size", type=int, default=8)
  p.add_argument("--learning_rate", type=float, default=5e-5)
  p.add_argument("--num_train_epochs", type=float, default=3.0)
  p.add_argument("--warmup_proportion", type=float, default=0.1)
  p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads; 0: all cores")
  p.add_argument("--seed", type=int, default=12345)
  p.add_argument("--multi_label", action="store_true",
                 help="zero or more labels per example, one sigmoid each, threshold 0.5")
  p.add_argument("--label_separator", default=",", help="between labels, with --multi_label")
  p.add_argument("--google_adamw", action="store_true",
                 help="Google's AdamWeightDecay (no bias correction, as ours) instead of AdamW")
  p.add_argument("--lr_schedule", choices=hf_common.LR_SCHEDULES, default="hf",
                 help="hf: transformers' get_linear_schedule_with_warmup, with "
                 "ceil(batches per epoch x epochs) steps; google: Google's (as ours), decay "
                 "counted from step 0, int(examples x epochs / batch) steps")
  p.add_argument("--init_npz", help="start from these weights (Google names, as "
                 "checkpoint_npz.py --to_npz writes) instead of transformers' initializer")
  p.add_argument("--save_init_npz", help="write the initial weights here (Google names) "
                 "before training, for checkpoint_npz.py --from_npz")
  p.add_argument("--group_by_length", action="store_true",
                 help="batches of similar length by transformers' LengthGroupedSampler")
  p.add_argument("--log_every", type=int, default=0,
                 help="log the mean training loss of every this many steps (0: never)")
  return p.parse_args(argv)


def read_tsv(path, need_label):
  """Reads a TSV file with a header row into a list of (label, text_a, text_b) tuples.

  Args:
    path: the file (UTF-8, optional byte order mark). Fields are split at every tab;
      quotes are ordinary text. Blank lines are skipped.
    need_label: whether the header must have a `label` column (train and dev).
  """
  with open(path, encoding="utf-8-sig") as f:
    rows = [line.rstrip("\r\n").split("\t") for line in f if line.strip()]
  header = [name.strip().lower() for name in rows[0]] if rows else []
  if "text_a" not in header or (need_label and "label" not in header):
    sys.exit("%s: the header row must name the columns label and text_a" % path)
  col = {name: header.index(name) for name in ("label", "text_a", "text_b") if name in header}
  examples = []
  for fields in rows[1:]:
    get = lambda name, f=fields: f[col[name]] if name in col and col[name] < len(f) else None
    examples.append((get("label"), get("text_a") or "", get("text_b")))
  return examples


def read_vocab(path):
  """vocab.txt as {token: id}, line by line (Google's load_vocab)."""
  with open(path, encoding="utf-8") as f:
    return {line.strip(): index for index, line in enumerate(f)}


def load_tokenizer(vocab_file, do_lower_case):
  """BertTokenizerFast built from a local vocab.txt, checked to hold the whole vocab.

  transformers 5 takes the vocab as `vocab=` (and silently ignores `vocab_file=`,
  leaving only the 5 special tokens); transformers 4 takes `vocab_file=`.
  """
  vocab = read_vocab(vocab_file)
  cls = transformers.BertTokenizerFast
  if "vocab" in inspect.signature(cls.__init__).parameters:
    tokenizer = cls(vocab=vocab, do_lower_case=do_lower_case)
  else:
    tokenizer = cls(vocab_file=vocab_file, do_lower_case=do_lower_case)
  if len(tokenizer.get_vocab()) != len(vocab):
    sys.exit("the tokenizer holds %d tokens, %s has %d" % (
        len(tokenizer.get_vocab()), vocab_file, len(vocab)))
  return tokenizer


def label_target(label, label_ids, separator):
  """The training target of one label field: its class id, or with a separator (multi-label)
  the multi-hot float list of its labels. An unknown label ends the program."""
  if separator is not None:
    return score_multi_label.multi_hot([score_multi_label.split_labels(label, separator)],
                                       list(label_ids), "a label field")[0].tolist()
  if label not in label_ids:
    sys.exit("label %r is not in the label list %s" % (label, sorted(label_ids)))
  return label_ids[label]


def featurize(tokenizer, examples, label_ids, max_seq_length, separator=None):
  """Tokenizes (truncating to max_seq_length, no padding) into a list of feature dicts.
  `separator` (multi-label) splits label fields into several labels."""
  texts_a = [e[1] for e in examples]
  texts_b = [e[2] for e in examples] if any(e[2] is not None for e in examples) else None
  encoded = tokenizer(texts_a, texts_b, truncation=True, max_length=max_seq_length)
  features = []
  for i, example in enumerate(examples):
    feature = {key: encoded[key][i] for key in ("input_ids", "token_type_ids", "attention_mask")}
    if label_ids is not None:
      feature["labels"] = label_target(example[0], label_ids, separator)
    features.append(feature)
  return features


def predict(model, features, collator, batch_size, multi_label=False):
  """Predicted label ids of `features`, in order; batches padded to their longest. With
  multi_label, per example the list of label ids whose probability is at least 0.5."""
  model.eval()
  loader = torch.utils.data.DataLoader(features, batch_size=batch_size, shuffle=False,
                                       collate_fn=collator)
  predicted = []
  with torch.inference_mode():
    for batch in loader:
      batch.pop("labels", None)
      logits = model(**batch).logits
      if multi_label:
        chosen = (torch.sigmoid(logits) >= 0.5).tolist()
        predicted.extend([i for i, on in enumerate(row) if on] for row in chosen)
      else:
        predicted.extend(logits.argmax(-1).tolist())
  return predicted


def label_list(args, train):
  """data_dir/labels.txt if it exists, else the training labels sorted."""
  labels_path = os.path.join(args.data_dir, "labels.txt")
  if os.path.isfile(labels_path):
    with open(labels_path, encoding="utf-8") as f:
      return [line.strip() for line in f if line.strip()]
  if args.multi_label:
    return sorted(set().union(*(score_multi_label.split_labels(e[0], args.label_separator)
                                for e in train)))
  return sorted(set(e[0] for e in train))


def train_loader(args, train_features, collator, drop_last=False):
  """Shuffled training batches (seeded), or with --group_by_length transformers' own
  grouping (Trainer's group_by_length): mega-batches of 50 batches of the shuffled order,
  each sorted by length, longest first; a new draw each epoch. hf_ner.py's too."""
  generator = torch.Generator().manual_seed(args.seed)
  if not args.group_by_length:
    return torch.utils.data.DataLoader(
        train_features, batch_size=args.train_batch_size, shuffle=True, collate_fn=collator,
        generator=generator, drop_last=drop_last)
  sampler = trainer_pt_utils.LengthGroupedSampler(
      args.train_batch_size, lengths=[len(f["input_ids"]) for f in train_features],
      generator=generator)
  return torch.utils.data.DataLoader(train_features, batch_size=args.train_batch_size,
                                     sampler=sampler, collate_fn=collator, drop_last=drop_last)


def main(argv=None):
  start_total = time.perf_counter()
  args = parse_args(argv)
  threads = hf_common.start_job(args)

  train = read_tsv(os.path.join(args.data_dir, "train.tsv"), need_label=True)
  dev_path = os.path.join(args.data_dir, "dev.tsv")
  dev = read_tsv(dev_path, need_label=True) if os.path.isfile(dev_path) else None
  test = read_tsv(os.path.join(args.data_dir, "test.tsv"), need_label=False)
  labels = label_list(args, train)
  label_ids = {label: i for i, label in enumerate(labels)}
  separator = args.label_separator if args.multi_label else None

  start = time.perf_counter()
  tokenizer = load_tokenizer(args.vocab_file, args.do_lower_case)
  train_features = featurize(tokenizer, train, label_ids, args.max_seq_length, separator)
  dev_features = (featurize(tokenizer, dev, label_ids, args.max_seq_length, separator)
                  if dev else None)
  test_features = featurize(tokenizer, test, None, args.max_seq_length)
  featurize_seconds = time.perf_counter() - start

  config = hf_common.hf_bert_config(hf_common.read_google_config(args.bert_config_file),
                                    len(labels))
  if args.multi_label:
    config.problem_type = "multi_label_classification"
  model = transformers.BertForSequenceClassification(config)
  hf_common.set_initial_weights(model, args.init_npz, args.save_init_npz,
                                "multi_label" if args.multi_label else "")
  collator = transformers.DataCollatorWithPadding(tokenizer)
  loader = train_loader(args, train_features, collator)
  if args.lr_schedule == "google":
    num_steps = max(1, int(len(train_features) * args.num_train_epochs / args.train_batch_size))
  else:
    num_steps = max(1, math.ceil(len(loader) * args.num_train_epochs))
  optimizer = hf_common.make_optimizer(model, args.learning_rate, google_adamw=args.google_adamw)
  scheduler = hf_common.make_scheduler(optimizer, args.lr_schedule,
                                       int(num_steps * args.warmup_proportion), num_steps)

  trained_examples, loss, train_seconds = hf_common.train_steps(
      model, loader, optimizer, scheduler, num_steps, args.log_every)

  start = time.perf_counter()
  dev_accuracy, dev_scores = None, {}
  if dev_features:
    predicted = predict(model, dev_features, collator, args.predict_batch_size, args.multi_label)
    if args.multi_label:
      gold = [set(label for label, on in zip(labels, f["labels"]) if on) for f in dev_features]
      dev_scores = score_multi_label.scores(
          gold, [set(labels[i] for i in ids) for ids in predicted], labels)
      dev_accuracy = dev_scores["exact_match"]
    else:
      dev_accuracy = sum(p == f["labels"] for p, f in zip(predicted, dev_features)) / len(predicted)
  eval_seconds = time.perf_counter() - start

  start = time.perf_counter()
  predicted = predict(model, test_features, collator, args.predict_batch_size, args.multi_label)
  predict_path = os.path.join(args.output_dir, "predict.txt")
  with open(predict_path, "w", encoding="utf-8") as f:
    if args.multi_label:
      f.write("".join(separator.join(labels[i] for i in ids) + "\n" for ids in predicted))
    else:
      f.write("".join(labels[i] + "\n" for i in predicted))
  predict_seconds = time.perf_counter() - start

  result = hf_common.versions()
  result.update({
      "task": "tsv multi-label" if args.multi_label else "tsv",
      "featurize_seconds": round(featurize_seconds, 3),
      "train_seconds": round(train_seconds, 3),
      "eval_seconds": round(eval_seconds, 3),
      "predict_seconds": round(predict_seconds, 3),
      "total_seconds": round(time.perf_counter() - start_total, 3),
      "train_examples_per_sec": round(trained_examples / train_seconds, 2),
      "train_steps": num_steps,
      "train_examples": len(train),
      "final_loss": round(loss, 4),
      "dev_accuracy": None if dev_accuracy is None else round(dev_accuracy, 4),
      "dev_examples": len(dev) if dev else 0,
      **{"dev_" + key: value for key, value in dev_scores.items()},
      "test_examples": len(test),
      "train_batch_size": args.train_batch_size,
      "max_seq_length": args.max_seq_length,
      "learning_rate": args.learning_rate,
      "lr_schedule": args.lr_schedule,
      "optimizer": "google_adamw" if args.google_adamw else "torch_adamw",
      "init_npz": args.init_npz,
      "group_by_length": args.group_by_length,
      "num_train_epochs": args.num_train_epochs,
      "threads": threads,
      "predict_file": predict_path,
  })
  print(json.dumps(result, ensure_ascii=False), flush=True)


if __name__ == "__main__":
  main()
