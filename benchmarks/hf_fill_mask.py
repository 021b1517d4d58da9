# coding=utf-8
"""fill_mask.py's peer: Hugging Face's BERT masked LM on the same checkpoint and inputs,
and the comparison of the two outputs.

The weights: with --hf_model_dir, the directory `convert_checkpoint.py --to=transformers`
wrote from our checkpoint (any transformers version); else our TensorFlow checkpoint through
transformers' own converter, `load_tf_weights_in_bert` (transformers 4.x; 5.x removed it).
The examples come from fill_mask.py, which imports TensorFlow, so run this under an
interpreter that has torch, transformers and tensorflow (benchmarks/README.md, "fill_mask.py
against transformers' masked LM").

Only the model differs from fill_mask.py: the examples are fill_mask.read_examples' (the
same tokenizer with literal [MASK], ids, segment ids, mask positions, one example per
candidate), and the JSON lines are written by fill_mask.fill_records / candidate_records.
Each batch is padded to its longest example; the masked-LM logits at the mask positions
go through a float32 log-softmax over the whole vocab, as ours.

With --compare_with (fill_mask.py's output for the same input), prints one JSON line:
  fill mode: masks, top1_agreement (the share of masks whose best fill is the same token),
    max_top1_probability_diff, max_probability_diff (over the fills both top-k lists hold);
  --candidates: lines, best_agreement (the same best candidate), max_score_diff, and with
    --answers_file (one right candidate per line) ours_accuracy and hf_accuracy.

  python benchmarks/hf_fill_mask.py --init_checkpoint=CKPT --bert_config_file=CFG \\
      --vocab_file=VOCAB --input_file=IN --output_file=OUT [--candidates] [--top_k=5] \\
      [--compare_with=OURS] [--answers_file=ANSWERS] [--threads=N] [--hf_model_dir=DIR]
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers.models.bert import modeling_bert

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from bert_mgpu.pretraining import data_settings  # pylint: disable=wrong-import-position
import fill_mask  # pylint: disable=wrong-import-position
import hf_common  # pylint: disable=wrong-import-position
import tokenization  # pylint: disable=wrong-import-position


def load_converted_model(hf_model_dir):
  """The masked LM of a convert_checkpoint.py --to=transformers directory (BertForMaskedLM
  or BertForPreTraining, as the checkpoint's heads make it)."""
  architecture = transformers.AutoConfig.from_pretrained(hf_model_dir).architectures[0]
  model = getattr(transformers, architecture).from_pretrained(hf_model_dir,
                                                              attn_implementation="eager")
  model.eval()
  return model


def load_model(init_checkpoint, bert_config_file):
  """BertForPreTraining with the weights of our checkpoint (transformers' converter).

  BertForMaskedLM has no pooler, and the converter fails on the checkpoint's bert/pooler
  variables; BertForPreTraining holds the same encoder and masked-LM head (cls/predictions)
  plus the pooler and the next-sentence head, which the masked-LM logits do not use (a
  checkpoint without cls/seq_relationship leaves it random).
  """
  if not hasattr(modeling_bert, "load_tf_weights_in_bert"):
    sys.exit("transformers %s has no load_tf_weights_in_bert: use transformers<5." %
             transformers.__version__)
  config = hf_common.hf_bert_config(hf_common.read_google_config(bert_config_file),
                                    num_labels=2, attn_implementation="eager")
  model = transformers.BertForPreTraining(config)
  modeling_bert.load_tf_weights_in_bert(model, config, init_checkpoint)
  model.eval()
  return model


def run_examples(model, examples, batch_size, top_k, max_seq_length):
  """fill_mask.run_examples' results (top_probabilities, top_ids, label_log_probs per
  example, its own masks only) from the PyTorch model."""
  results = []
  with torch.no_grad():
    for start in range(0, len(examples), batch_size):
      chunk = examples[start:start + batch_size]
      batch = {name: torch.from_numpy(value.astype(np.int64)) for name, value in
               fill_mask.pad_examples(chunk, 1, max_seq_length).items()}
      outputs = model(input_ids=batch["input_ids"], attention_mask=batch["input_mask"],
                      token_type_ids=batch["segment_ids"])
      # [batch, seq, vocab]: BertForPreTraining's prediction_logits, BertForMaskedLM's logits
      logits = (outputs.prediction_logits if "prediction_logits" in outputs else
                outputs.logits)
      rows = torch.arange(len(chunk)).unsqueeze(1)
      log_probs = torch.log_softmax(  # [batch, masks, vocab]
          logits[rows, batch["mask_positions"]].float(), dim=-1)
      top_log_probs, top_ids = torch.topk(log_probs, top_k, dim=-1)
      label_log_probs = torch.gather(log_probs, -1, batch["label_ids"].unsqueeze(-1))[..., 0]
      for row, example in enumerate(chunk):
        count = len(example.mask_positions)
        results.append({"top_probabilities": top_log_probs[row, :count].exp().numpy(),
                        "top_ids": top_ids[row, :count].numpy(),
                        "label_log_probs": label_log_probs[row, :count].numpy()})
  return results


def compare_fills(ours, theirs):
  """Agreement of two fill-mode outputs (lists of records, line by line)."""
  assert len(ours) == len(theirs), "%d lines against %d" % (len(ours), len(theirs))
  masks = agree = 0
  top1_diff = any_diff = 0.0
  for our_line, their_line in zip(ours, theirs):
    assert len(our_line["masks"]) == len(their_line["masks"]), our_line["text"]
    for our_mask, their_mask in zip(our_line["masks"], their_line["masks"]):
      masks += 1
      our_fills, their_fills = our_mask["fills"], their_mask["fills"]
      agree += our_fills[0]["token"] == their_fills[0]["token"]
      top1_diff = max(top1_diff, abs(our_fills[0]["probability"] -
                                     their_fills[0]["probability"]))
      their_probability = {fill["token"]: fill["probability"] for fill in their_fills}
      for fill in our_fills:
        if fill["token"] in their_probability:
          any_diff = max(any_diff, abs(fill["probability"] - their_probability[fill["token"]]))
  return {"masks": masks, "top1_agreement": agree / max(masks, 1),
          "max_top1_probability_diff": top1_diff, "max_probability_diff": any_diff}


def compare_candidates(ours, theirs, answers=None):
  """Agreement of two --candidates outputs, and each one's accuracy against `answers`."""
  assert len(ours) == len(theirs), "%d lines against %d" % (len(ours), len(theirs))
  lines = len(ours)
  same_best = sum(a["candidates"][0]["candidate"] == b["candidates"][0]["candidate"]
                  for a, b in zip(ours, theirs))
  score_diff = 0.0
  for our_line, their_line in zip(ours, theirs):
    their_score = {c["candidate"]: c["score"] for c in their_line["candidates"]}
    for candidate in our_line["candidates"]:
      score_diff = max(score_diff, abs(candidate["score"] - their_score[candidate["candidate"]]))
  figures = {"lines": lines, "best_agreement": same_best / max(lines, 1),
             "max_score_diff": score_diff}
  if answers is not None:
    for name, records in (("ours", ours), ("hf", theirs)):
      right = sum(r["candidates"][0]["candidate"] == answer for r, answer in zip(records, answers))
      figures[name + "_accuracy"] = right / max(lines, 1)
  return figures


def read_json_lines(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


def parse_args():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--init_checkpoint", help="A checkpoint prefix (without --hf_model_dir).")
  parser.add_argument("--hf_model_dir", help="convert_checkpoint.py --to=transformers's output "
                      "for the checkpoint, instead of --init_checkpoint.")
  parser.add_argument("--bert_config_file", required=True)
  parser.add_argument("--vocab_file", required=True)
  parser.add_argument("--do_lower_case", type=int, default=1)
  parser.add_argument("--input_file", required=True)
  parser.add_argument("--output_file", required=True)
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--top_k", type=int, default=5)
  parser.add_argument("--candidates", action="store_true")
  parser.add_argument("--blank_marker", default=data_settings.DEFAULT_BLANK_MARKER)
  parser.add_argument("--compare_with", help="fill_mask.py's output for --input_file.")
  parser.add_argument("--answers_file", help="With --candidates: the right candidate of each "
                      "line, one per line.")
  parser.add_argument("--threads", type=int, default=0, help="0: every core.")
  return parser.parse_args()


def main():
  args = parse_args()
  hf_common.set_threads(args.threads)
  tokenizer = tokenization.FullTokenizer(args.vocab_file, do_lower_case=bool(args.do_lower_case),
                                         literal_special_tokens=True)
  lines, examples = fill_mask.read_examples(args.input_file, tokenizer, args.max_seq_length,
                                            args.candidates, args.blank_marker)
  model = (load_converted_model(args.hf_model_dir) if args.hf_model_dir else
           load_model(args.init_checkpoint, args.bert_config_file))
  results = run_examples(model, examples, args.batch_size, args.top_k, args.max_seq_length)
  records = (fill_mask.candidate_records(lines, examples, results) if args.candidates else
             fill_mask.fill_records(lines, examples, results, tokenizer))
  with open(args.output_file, "w", encoding="utf-8") as f:
    for record in records:
      f.write(json.dumps(record, ensure_ascii=False) + "\n")
  if args.compare_with:
    ours = read_json_lines(args.compare_with)
    if args.candidates:
      answers = None
      if args.answers_file:
        with open(args.answers_file, encoding="utf-8") as f:
          answers = [line.rstrip("\n") for line in f]
      figures = compare_candidates(ours, records, answers)
    else:
      figures = compare_fills(ours, records)
    figures.update(torch=torch.__version__, transformers=transformers.__version__)
    print(json.dumps(figures))


if __name__ == "__main__":
  main()
