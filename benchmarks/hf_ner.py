# coding=utf-8
"""A whole NER fine-tuning job with Hugging Face's BertForTokenClassification, for comparison.

The peer of `run_ner_mgpu.py --data_format=conll --do_train --do_eval --do_predict`: the
same conll files in --data_dir (`train.txt`, `dev.txt`, `test.txt`: one token per line,
columns split at runs of spaces or tabs, the first the token and the last the tag, a blank
line between sentences; the test file may have no tag column), the same vocab.txt and
bert_config.json. The model starts from random weights built from the config (nothing is
downloaded).

Recipe, matched to ours:
  * Labels: data_dir/labels.txt if it exists, else O followed by the training file's
    other tags sorted (as run_ner_mgpu.py).
  * Tokens: BertTokenizerFast on the local vocab.txt, the sentence given as its list of
    tokens (is_split_into_words). A token's tag goes to its FIRST word piece; the other
    pieces, [CLS] and [SEP] get -100 (ignored by the loss). Truncation to
    --max_seq_length (run_ner_mgpu.py splits longer sentences into windows instead; a
    token cut off here is predicted O, and the summary counts the truncated sentences).
  * Batches: shuffled (seeded), or with --group_by_length transformers' LengthGroupedSampler
    (as hf_finetune.py), padded to their longest sentence
    (DataCollatorForTokenClassification). The loss is BertForTokenClassification's: the
    mean cross-entropy over the labelled tokens of the batch (ours: the same token mean
    over the global batch).
  * Steps: int(sentences x epochs / batch), as Google's scripts count them, over
    reshuffled epochs (the last, incomplete batch of an epoch is dropped).
  * Optimizer: torch AdamW (weight decay 0.01 except LayerNorm and biases, eps 1e-6;
    hf_common.make_optimizer), or with --google_adamw Google's AdamWeightDecay (ours: no
    bias correction), gradient norm clipped to 1.0. Learning rate: Google's
    BERT schedule by default (--lr_schedule=google): `lr * step / warmup` during the
    int(steps x --warmup_proportion) warmup steps, then `lr * (1 - step / steps)`, the
    linear decay counted from step 0 (optimization.learning_rate_schedule). With
    --lr_schedule=hf, transformers.get_linear_schedule_with_warmup (decay from the end of
    the warmup), hf_finetune.py's default.
  * Decoding and scores: each token takes the argmax at its first piece; a token with no
    piece (or cut off) is O. Entities and micro F1 by the project's bert_mgpu/ner/scoring.py (its
    conlleval/seqeval rule, so an I- after O starts an entity, as ours), scheme detected
    from the label list.

Writes --output_dir/predict.txt (each test-file line + TAB + predicted tag; blank lines
kept) and prints one JSON line: seconds of featurize, train, eval, predict and total
(wall clock after the imports, model building included), training sentences/s, dev and
(when the test file has tags) test precision/recall/F1.

  python benchmarks/hf_ner.py --data_dir D/conll --vocab_file D/vocab.txt \\
      --bert_config_file D/bert_config.json --output_dir OUT \\
      [--max_seq_length 128] [--train_batch_size 32] [--learning_rate 5e-5] \\
      [--num_train_epochs 3] [--warmup_proportion 0.1] [--threads N] [--seed 12345] \\
      [--google_adamw] [--init_npz W.npz] [--save_init_npz W.npz] [--log_every 50]
"""

import argparse
import json
import os
import re
import sys
import time

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import hf_common  # pylint: disable=wrong-import-position
import hf_finetune  # pylint: disable=wrong-import-position
from bert_mgpu.ner import scoring as ner_scoring  # pylint: disable=wrong-import-position

# bert_mgpu/ner/model.py's HEAD_SCOPE: where our checkpoints keep the tagging head's weights.
HEAD_SCOPE = "cls/ner"
IGNORED = -100  # the label id torch's cross-entropy (and so BertForTokenClassification) skips
_COLUMNS = re.compile(r"[ \t]+")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  hf_common.add_job_arguments(
      p, "train.txt, test.txt, optional dev.txt",
      "start from these weights (Google names, as checkpoint_npz.py --to_npz or "
      "--initial_weights --ner writes) instead of transformers' initializer")
  p.add_argument("--group_by_length", action="store_true",
                 help="batches of similar length by transformers' LengthGroupedSampler")
  return p.parse_args(argv)


def read_conll(path):
  """A conll file as (sentences, lines, tagged).

  sentences: list of (tokens, tags or None); lines: the file's lines without line ends
  (for predict.txt); tagged: whether the token lines have a tag column.
  """
  with open(path, encoding="utf-8-sig") as f:
    lines = f.read().split("\n")
  if lines and lines[-1] == "":
    lines.pop()  # the text ended with a line end
  lines = [line.rstrip("\r") for line in lines]
  sentences, tokens, tags, tagged = [], [], [], None
  for number, line in enumerate(lines, 1):
    if not line.strip():
      if tokens:
        sentences.append((tokens, tags if tagged else None))
      tokens, tags = [], []
      continue
    columns = _COLUMNS.split(line.strip())
    has_tag = len(columns) > 1
    if tagged is None:
      tagged = has_tag
    elif has_tag != tagged:
      sys.exit("%s, line %d: some token lines have a tag column and others do not"
               % (path, number))
    tokens.append(columns[0])
    tags.append(columns[-1])
  if tokens:
    sentences.append((tokens, tags if tagged else None))
  if not sentences:
    sys.exit("%s: no sentence" % path)
  return sentences, lines, bool(tagged)


def label_list_of(data_dir, train_sentences):
  path = os.path.join(data_dir, "labels.txt")
  if os.path.isfile(path):
    with open(path, encoding="utf-8") as f:
      return [line.strip() for line in f if line.strip()]
  tags = set(tag for _, sentence_tags in train_sentences for tag in sentence_tags)
  return [ner_scoring.OUTSIDE] + sorted(tags - {ner_scoring.OUTSIDE})


def featurize(tokenizer, sentences, label_ids, max_seq_length):
  """Feature dicts (no padding) and, per sentence, the position of each token's first piece
  (-1: the token gave no piece or was cut off). Also returns how many sentences were cut."""
  encoded = tokenizer([tokens for tokens, _ in sentences], is_split_into_words=True,
                      truncation=True, max_length=max_seq_length)
  features, first_pieces, truncated = [], [], 0
  for index, (tokens, tags) in enumerate(sentences):
    word_ids = encoded.word_ids(index)
    first = [-1] * len(tokens)
    previous = None
    for position, word in enumerate(word_ids):
      if word is not None and word != previous:
        first[word] = position
      previous = word
    seen = [w for w in word_ids if w is not None]
    if len(word_ids) >= max_seq_length and (not seen or seen[-1] < len(tokens) - 1):
      truncated += 1  # (a cut-off sentence whose remaining tokens all gave no piece counts too)
    feature = {key: encoded[key][index]
               for key in ("input_ids", "token_type_ids", "attention_mask")}
    if tags is not None and label_ids is not None:
      labels = [IGNORED] * len(word_ids)
      for token_index, position in enumerate(first):
        if position >= 0:
          if tags[token_index] not in label_ids:
            sys.exit("tag %r is not in the label list %s" % (tags[token_index],
                                                             sorted(label_ids)))
          labels[position] = label_ids[tags[token_index]]
      feature["labels"] = labels
    features.append(feature)
    first_pieces.append(first)
  return features, first_pieces, truncated


def predict_tags(model, features, first_pieces, collator, batch_size, label_list):
  """The predicted tag of every token of every sentence, in order."""
  model.eval()
  inputs = [{k: v for k, v in f.items() if k != "labels"} for f in features]
  loader = torch.utils.data.DataLoader(inputs, batch_size=batch_size, shuffle=False,
                                       collate_fn=collator)
  result, index = [], 0
  with torch.inference_mode():
    for batch in loader:
      piece_ids = model(**batch).logits.argmax(-1).tolist()
      for row in piece_ids:
        result.append([label_list[row[p]] if p >= 0 else ner_scoring.OUTSIDE
                       for p in first_pieces[index]])
        index += 1
  return result


def rounded_scores(result):
  return {key: round(result[key], 4) for key in ("precision", "recall", "f1")}


def write_predictions(path, test_lines, predicted):
  """predict.txt: each line of the test file + TAB + its token's predicted tag; blank lines
  (between sentences) kept."""
  out, sentence, token = [], 0, 0
  for line in test_lines:
    if not line.strip():
      if token:
        sentence, token = sentence + 1, 0
      out.append(line)
      continue
    out.append(line + "\t" + predicted[sentence][token])
    token += 1
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join(line + "\n" for line in out))


def main(argv=None):
  start_total = time.perf_counter()
  args = parse_args(argv)
  threads = hf_common.start_job(args)

  start = time.perf_counter()
  train, _, train_tagged = read_conll(os.path.join(args.data_dir, "train.txt"))
  if not train_tagged:
    sys.exit("train.txt has no tag column")
  dev_path = os.path.join(args.data_dir, "dev.txt")
  dev = read_conll(dev_path)[0] if os.path.isfile(dev_path) else None
  test, test_lines, test_tagged = read_conll(os.path.join(args.data_dir, "test.txt"))
  labels = label_list_of(args.data_dir, train)
  label_ids = {label: i for i, label in enumerate(labels)}
  scheme = ner_scoring.detect_scheme(labels)
  tokenizer = hf_finetune.load_tokenizer(args.vocab_file, args.do_lower_case)
  train_features, _, train_cut = featurize(tokenizer, train, label_ids, args.max_seq_length)
  dev_features, dev_first, dev_cut = (featurize(tokenizer, dev, None, args.max_seq_length)
                                      if dev else (None, None, 0))
  test_features, test_first, test_cut = featurize(tokenizer, test, None, args.max_seq_length)
  featurize_seconds = time.perf_counter() - start

  config = hf_common.hf_bert_config(hf_common.read_google_config(args.bert_config_file),
                                    len(labels), args.attn_implementation)
  model = transformers.BertForTokenClassification(config)
  hf_common.set_initial_weights(model, args.init_npz, args.save_init_npz, HEAD_SCOPE)
  collator = transformers.DataCollatorForTokenClassification(tokenizer,
                                                             label_pad_token_id=IGNORED)
  loader = hf_finetune.train_loader(args, train_features, collator, drop_last=True)
  num_steps = int(len(train_features) * args.num_train_epochs / args.train_batch_size)
  if num_steps < 1 or len(loader) < 1:
    sys.exit("fewer training sentences than one batch")
  num_warmup = int(num_steps * args.warmup_proportion)
  optimizer = hf_common.make_optimizer(model, args.learning_rate,
                                       google_adamw=args.google_adamw)
  scheduler = hf_common.make_scheduler(optimizer, args.lr_schedule, num_warmup, num_steps)

  trained, loss, train_seconds = hf_common.train_steps(
      model, loader, optimizer, scheduler, num_steps, args.log_every)

  start = time.perf_counter()
  dev_scores = None
  if dev:
    predicted = predict_tags(model, dev_features, dev_first, collator,
                             args.predict_batch_size, labels)
    dev_scores = rounded_scores(ner_scoring.score([t for _, t in dev], predicted, scheme))
  eval_seconds = time.perf_counter() - start

  start = time.perf_counter()
  predicted = predict_tags(model, test_features, test_first, collator,
                           args.predict_batch_size, labels)
  predict_path = os.path.join(args.output_dir, "predict.txt")
  write_predictions(predict_path, test_lines, predicted)
  predict_seconds = time.perf_counter() - start
  test_scores = (rounded_scores(ner_scoring.score([t for _, t in test], predicted, scheme))
                 if test_tagged else None)

  result = hf_common.versions()
  result.update({
      "task": "ner",
      "featurize_seconds": round(featurize_seconds, 3),
      "train_seconds": round(train_seconds, 3),
      "eval_seconds": round(eval_seconds, 3),
      "predict_seconds": round(predict_seconds, 3),
      "total_seconds": round(time.perf_counter() - start_total, 3),
      "train_sentences_per_sec": round(trained / train_seconds, 2),
      "predict_sentences_per_sec": round(len(test) / predict_seconds, 2),
      "train_steps": num_steps,
      "warmup_steps": num_warmup,
      "train_sentences": len(train),
      "final_loss": round(loss, 4),
      "dev": dev_scores,
      "test": test_scores,
      "dev_sentences": len(dev) if dev else 0,
      "test_sentences": len(test),
      "truncated_sentences": train_cut + dev_cut + test_cut,
      "scheme": scheme,
      "labels": labels,
      "train_batch_size": args.train_batch_size,
      "max_seq_length": args.max_seq_length,
      "learning_rate": args.learning_rate,
      "lr_schedule": args.lr_schedule,
      "optimizer": "google_adamw" if args.google_adamw else "torch_adamw",
      "init_npz": args.init_npz,
      "seed": args.seed,
      "num_train_epochs": args.num_train_epochs,
      "threads": threads,
      "predict_file": predict_path,
  })
  print(json.dumps(result, ensure_ascii=False), flush=True)


if __name__ == "__main__":
  main()
