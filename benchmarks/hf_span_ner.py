# coding=utf-8
"""A whole span-head NER fine-tuning job in PyTorch (transformers' BertModel + GlobalPointer
or Efficient GlobalPointer), for comparison.

The peer of `run_ner_mgpu.py --data_format=cmeee --ner_head=global_pointer (or
efficient_global_pointer) --adam_bias_correction --do_train --do_eval --do_predict`: the
same CMeEE files in --data_dir (`CMeEE_train.json`, `CMeEE_dev.json` (optional),
`CMeEE_test.json`, else `{train,dev,test}.json`; a test file that keeps its "entities" is
scored), the same vocab.txt and bert_config.json. The body starts from --init_npz (e.g. our
pretrained checkpoint through `checkpoint_npz.py --to_npz`), else from transformers'
initializer; nothing is downloaded.

Recipe, matched to ours (the project's own TF-free modules do the data and the scores):
  * Data and types: bert_mgpu/ner/formats.py reads the files (every character a token,
    spans as given, nested ones included). The entity types are the training file's,
    sorted (entity_types.types_of, as run_ner_mgpu.py with --do_train; data_dir/labels.txt
    is not read), and every dev and test span must have one of them.
  * Tokens: our tokenization.FullTokenizer on the vocab, each character on its own
    (featurizing.align_pieces); a character that gives no piece (a space, a control
    character) takes no part: a span runs from the first piece of its first character
    with pieces to the last piece of its last one (span_windows).
  * Windows: featurizing.featurize_sentences, as ours: [CLS] pieces [SEP] of at most
    --max_seq_length positions; a longer sentence is cut into windows whose starts are
    --doc_stride pieces apart (64). Nothing is truncated: a span goes to every window that
    holds all its pieces (span_windows.window_span_triples; the summary counts the spans
    longer than a window and those without pieces, which no window learns).
  * Model: torch_span_heads.SpanModel (the head checked equal to ours on the same weights by
    global_pointer_vs_torch.py): head size 64, rotary on interleaved pairs, the efficient
    head's biases halved; the head drawn as ours (truncated normal 0.02, zero biases) from
    --seed, unless --init_npz holds it (cls/ner/...). Dropout as the config (training only).
  * Loss: the multi-label categorical cross-entropy per (window, type) row over the pairs
    on the window's pieces with start <= end, averaged over the batch's rows (ours: over
    the global batch's rows).
  * Batches: the training windows reshuffled every epoch (seeded) and cut into batches of
    --train_batch_size across epoch ends, as ours repeats before batching (its shuffle
    buffer holds every window below 100,000); each batch padded to its longest window.
  * Steps: int(training windows x epochs / batch), as ours counts them (windows, not
    sentences). Optimizer: torch AdamW, which has Adam's bias correction (ours with
    --adam_bias_correction), weight decay 0.01 except LayerNorm and biases, eps 1e-6
    (hf_common.make_optimizer); --google_adamw: Google's AdamWeightDecay (ours without the
    flag). Gradient norm clipped to 1.0. Learning rate: Google's schedule (warmup
    int(steps x 0.1), then lr * (1 - step / steps)), or --lr_schedule=hf.
  * Prediction: per window the --max_seq_length best pairs (global_pointer.top_spans, as
    ours), those scored above 0 kept; a span seen by several windows is taken from the one
    where it is farthest from an edge, and mapped back to characters
    (span_windows.spans_from_windows). Scores by span_scoring.score: micro precision,
    recall and F1 over exact (type, start, end), and the nested entities' recall. Ours
    evaluates every --save_checkpoints_steps (1000) and predicts with the best dev
    checkpoint; this job evaluates and predicts once, with the last weights.

Writes --output_dir/predict_entities.jsonl and CMeEE_test.json (our writers) and prints one
JSON line: seconds of featurize, train, eval, predict and total, steps, windows and span
counts per split, dev and test precision/recall/F1 (and nested recall), the dev loss (mean
over (window, type) rows, as ours' eval_results.txt).

  /work/bench-venv/bin/python benchmarks/hf_span_ner.py --data_dir D --vocab_file V \\
      --bert_config_file C --output_dir OUT [--init_npz W.npz] \\
      [--ner_head global_pointer|efficient_global_pointer] [--max_seq_length 128] \\
      [--doc_stride 64] [--train_batch_size 32] [--learning_rate 5e-5] \\
      [--num_train_epochs 3] [--seed 12345] [--threads N] [--log_every 50] [--google_adamw]

--num_train_epochs=0 only evaluates and predicts (e.g. with a fine-tuned checkpoint's .npz,
head included, to check the prediction path against ours).
"""

import argparse
import json
import os
import sys
import time
import types

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
# pylint: disable=wrong-import-position
import hf_common
import torch_span_heads
import weight_names
from bert_mgpu import bert_files
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import entity_types
from bert_mgpu.ner import featurizing
from bert_mgpu.ner import formats
from bert_mgpu.ner import predictions
from bert_mgpu.ner import span_scoring
from bert_mgpu.ner import span_windows
# pylint: enable=wrong-import-position

HEAD_SCOPE = "cls/ner"  # bert_mgpu/ner/model.py's HEAD_SCOPE
DATA_FORMAT = "cmeee"


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  hf_common.add_job_arguments(
      p, "CMeEE_{train,dev,test}.json (dev optional)",
      "start from these weights (Google names: checkpoint_npz.py --to_npz of our "
      "checkpoint); the head too when they hold it (cls/ner/...), else it is drawn from --seed")
  p.add_argument("--ner_head", choices=torch_span_heads.HEADS, default=torch_span_heads.HEADS[0])
  p.add_argument("--doc_stride", type=int, default=64)
  return p.parse_args(argv)


# ---------------------------------------------------------------------------
# Data: our reader, windows and spans
# ---------------------------------------------------------------------------

def read_data(data_dir):
  """{split name: formats.NerFile} (no dev when its file is missing) and the type list."""
  splits = {}
  for name in formats.SPLITS:
    try:
      formats.split_path(data_dir, DATA_FORMAT, name)
    except UsageError:
      if name == "dev":
        continue
      raise
    splits[name] = formats.read_split(data_dir, DATA_FORMAT, name)
  type_list = entity_types.types_of(splits["train"])
  entity_types.require_types(type_list, splits["train"].path)
  for data in splits.values():
    if data.tagged:
      entity_types.check_types(data, type_list)
  return splits, type_list


class Featurized(object):
  """One split as windows.

  Attributes:
    data: the formats.NerFile.
    sentences: per sentence, (SentencePieces, list of NerWindow).
    features: per window, {input_ids, input_mask, segment_ids} (unpadded lists) and
      span_triples (flat (type id, start, end) list; empty for an untagged split).
    counts: dict of figures for the summary.
  """

  def __init__(self, data, tokenizer, type_list, max_seq_length, doc_stride):
    self.data = data
    self.sentences = featurizing.featurize_sentences(
        data.sentences, tokenizer, type_list, max_seq_length, doc_stride, use_tags=False)
    type_ids = {entity_type: index for index, entity_type in enumerate(type_list)}
    self.features, totals = [], [0, 0, 0]
    for sentence, (aligned, windows) in zip(data.sentences, self.sentences):
      triples = [[] for _ in windows]
      if data.tagged:
        triples, counts = span_windows.window_span_triples(aligned, windows, sentence.spans,
                                                           type_ids)
        totals = [total + count for total, count in zip(totals, counts)]
      for window, window_triples in zip(windows, triples):
        length = window.num_pieces + 2
        self.features.append({
            "input_ids": window.input_ids[:length], "input_mask": window.input_mask[:length],
            "segment_ids": window.segment_ids[:length],
            "span_triples": [value for triple in window_triples for value in triple]})
    counts = span_windows.SpanCounts(*totals)
    self.counts = {
        "sentences": len(data.sentences), "windows": len(self.features),
        "split_sentences": sum(len(windows) > 1 for _, windows in self.sentences),
        "entities": counts.spans, "window_spans": sum(
            len(f["span_triples"]) // 3 for f in self.features),
        "max_spans_per_window": max(
            [len(f["span_triples"]) // 3 for f in self.features] + [0]),
        "entities_inside_another": sum(len(span_scoring.inside_another(s.spans))
                                       for s in data.sentences if s.spans),
        "longer_than_window": counts.longer_than_window,
        "without_pieces": counts.without_pieces}


def collate(features):
  """A batch of window features as tensors, padded to the longest window (0) and the most
  spans (-1)."""
  length = max(len(f["input_ids"]) for f in features)
  spans = max([len(f["span_triples"]) for f in features] + [3])
  batch = {name: torch.tensor([f[name] + [0] * (length - len(f[name])) for f in features])
           for name in ("input_ids", "input_mask", "segment_ids")}
  batch["span_triples"] = torch.tensor(
      [f["span_triples"] + [-1] * (spans - len(f["span_triples"])) for f in features])
  return batch


def training_batches(features, batch_size, seed):
  """Endless batches: the windows reshuffled each epoch, cut across epoch ends."""
  generator = torch.Generator().manual_seed(seed)
  pending = []
  while True:
    for index in torch.randperm(len(features), generator=generator).tolist():
      pending.append(features[index])
      if len(pending) == batch_size:
        yield collate(pending)
        pending = []


# ---------------------------------------------------------------------------
# The model's start
# ---------------------------------------------------------------------------

def set_initial_weights(model, init_npz, save_init_npz):
  """Loads --init_npz (the head too when it has it); returns where the head came from."""
  head = "random"
  if init_npz:
    with np.load(init_npz) as stored:
      arrays = {name: stored[name] for name in stored.files}
    head_names = [name for name, _ in model.named_parameters() if name.startswith("head.")]
    if all(weight_names.google_name(n, HEAD_SCOPE)[0] in arrays for n in head_names):
      head = "init_npz"
    hf_common.load_arrays(model, arrays, init_npz, HEAD_SCOPE,
                          only=None if head == "init_npz" else lambda n: n not in head_names)
  if save_init_npz:
    hf_common.save_npz(model, save_init_npz, HEAD_SCOPE)
  return head


# ---------------------------------------------------------------------------
# Prediction
# ---------------------------------------------------------------------------

def window_predictions(model, split, batch_size, max_spans):
  """Per window, (types, starts, ends, scores) of its max_spans best pairs above 0 (ours'
  top_spans, then the > 0 cut), the mean loss over the (window, type) rows when the split
  is tagged (else None) and how many windows had more than max_spans pairs above 0."""
  model.eval()
  outputs, loss_sum, rows, full = [], 0.0, 0, 0
  with torch.inference_mode():
    for begin in range(0, len(split.features), batch_size):
      batch = collate(split.features[begin:begin + batch_size])
      if not split.data.tagged:
        batch.pop("span_triples")
      result = model(**batch)
      scores = result.scores
      if result.loss is not None:
        count = scores.shape[0] * scores.shape[1]
        loss_sum, rows = loss_sum + float(result.loss) * count, rows + count
      candidate = torch_span_heads.candidate_pairs(batch["input_mask"])[:, None]
      flat = scores.masked_fill(~candidate, -float("inf")).reshape(scores.shape[0], -1)
      values, indices = flat.topk(min(max_spans, flat.shape[1]), dim=1)
      full += int((values[:, -1] > 0).sum()) if values.shape[1] == max_spans else 0
      seq = scores.shape[2]
      for row_values, row_indices in zip(values.numpy(), indices.numpy()):
        kept = row_values > 0
        picked = row_indices[kept]
        outputs.append((picked // (seq * seq), picked % (seq * seq) // seq, picked % seq,
                        row_values[kept]))
  return outputs, (loss_sum / rows if rows else None), full


def predict_spans(model, split, type_list, batch_size, max_spans):
  """(per sentence, its predicted (type, start, end) spans; the dev loss; full windows)."""
  outputs, loss, full = window_predictions(model, split, batch_size, max_spans)
  spans, start = [], 0
  for aligned, windows in split.sentences:
    spans.append(span_windows.spans_from_windows(
        aligned, windows, outputs[start:start + len(windows)], type_list))
    start += len(windows)
  return spans, loss, full


def scores_of(split, predicted, loss, full):
  result = span_scoring.score([s.spans for s in split.data.sentences], predicted)
  nested = result["nested"]
  summary = {key: round(result[key], 4) for key in ("precision", "recall", "f1", "macro_f1")}
  summary.update({"nested_recall": round(nested["recall"], 4),
                  "nested_support": nested["support"], "nested_found": nested["found"],
                  "num_gold": result["num_gold"], "num_predicted": result["num_predicted"],
                  "num_correct": result["num_correct"], "windows_full": full})
  if loss is not None:
    summary["loss"] = round(loss, 6)
  return summary


def evaluate(model, split, type_list, args):
  """(predicted spans, scores or None) of a split, and its seconds."""
  start = time.perf_counter()
  predicted, loss, full = predict_spans(model, split, type_list, args.predict_batch_size,
                                        args.max_seq_length)
  scores = scores_of(split, predicted, loss, full) if split.data.tagged else None
  return predicted, scores, time.perf_counter() - start


# ---------------------------------------------------------------------------
# The job
# ---------------------------------------------------------------------------

def featurize_all(args):
  """({split name: Featurized}, the type list, the Google config as a dict)."""
  config = hf_common.read_google_config(args.bert_config_file)
  tokenizer = bert_files.checked_tokenizer(args.vocab_file, args.do_lower_case,
                                           config["vocab_size"], args.bert_config_file)
  featurizing.check_window_settings(args.max_seq_length, args.doc_stride)
  data, type_list = read_data(args.data_dir)
  splits = {name: Featurized(split_data, tokenizer, type_list, args.max_seq_length,
                             args.doc_stride) for name, split_data in data.items()}
  return splits, type_list, config


def train(args, model, train_split):
  """Trains; returns (steps, warmup steps, windows trained on, last loss, seconds)."""
  num_steps = int(len(train_split.features) * args.num_train_epochs / args.train_batch_size)
  if num_steps < 1 and args.num_train_epochs > 0:
    sys.exit("fewer training windows than one batch")
  num_warmup = int(num_steps * args.warmup_proportion)
  optimizer = hf_common.make_optimizer(model, args.learning_rate,
                                       google_adamw=args.google_adamw)
  scheduler = hf_common.make_scheduler(optimizer, args.lr_schedule, num_warmup,
                                       max(num_steps, 1))
  loader = training_batches(train_split.features, args.train_batch_size, args.seed)
  trained, loss, seconds = hf_common.train_steps(model, loader, optimizer, scheduler,
                                                 num_steps, args.log_every)
  return num_steps, num_warmup, trained, loss, seconds


def main(argv=None):
  start_total = time.perf_counter()
  args = parse_args(argv)
  threads = hf_common.start_job(args)

  start = time.perf_counter()
  try:
    splits, type_list, google_config = featurize_all(args)
  except UsageError as e:
    sys.exit(str(e))
  featurize_seconds = time.perf_counter() - start

  config = hf_common.hf_bert_config(google_config, len(type_list), args.attn_implementation)
  model = torch_span_heads.SpanModel(config, len(type_list), args.ner_head)
  head_start = set_initial_weights(model, args.init_npz, args.save_init_npz)
  num_steps, num_warmup, trained, loss, train_seconds = train(args, model, splits["train"])

  dev_scores, eval_seconds = None, 0.0
  if "dev" in splits:
    _, dev_scores, eval_seconds = evaluate(model, splits["dev"], type_list, args)
  test = splits["test"]
  predicted, test_scores, predict_seconds = evaluate(model, test, type_list, args)
  start = time.perf_counter()
  predictions.write_predictions(args.output_dir, types.SimpleNamespace(data=test.data),
                                DATA_FORMAT, None, spans=predicted)
  predict_seconds += time.perf_counter() - start

  result = hf_common.versions()
  result.update({
      "task": "ner_spans", "ner_head": args.ner_head,
      "featurize_seconds": round(featurize_seconds, 3),
      "train_seconds": round(train_seconds, 3),
      "eval_seconds": round(eval_seconds, 3),
      "predict_seconds": round(predict_seconds, 3),
      "total_seconds": round(time.perf_counter() - start_total, 3),
      "train_windows_per_sec": round(trained / train_seconds, 2) if trained else None,
      "train_steps": num_steps, "warmup_steps": num_warmup,
      "final_loss": round(loss, 4) if trained else None,
      "dev": dev_scores, "test": test_scores,
      "data": {name: split.counts for name, split in splits.items()},
      "types": type_list, "head_start": head_start,
      "train_batch_size": args.train_batch_size, "max_seq_length": args.max_seq_length,
      "doc_stride": args.doc_stride, "learning_rate": args.learning_rate,
      "lr_schedule": args.lr_schedule,
      "optimizer": "google_adamw" if args.google_adamw else "torch_adamw",
      "init_npz": args.init_npz, "seed": args.seed,
      "num_train_epochs": args.num_train_epochs, "threads": threads,
      "predict_file": os.path.join(args.output_dir, "predict_entities.jsonl"),
  })
  print(json.dumps(result, ensure_ascii=False), flush=True)


if __name__ == "__main__":
  main()
