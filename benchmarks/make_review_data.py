# coding=utf-8
"""Turns a `label,review` CSV of real texts into a classifier data set for the benchmarks.

For example SophonPlus/ChineseNlpCorpus's datasets/waimai_10k/waimai_10k.csv (11,987
food-delivery reviews, label 1 positive / 0 negative; long-tailed lengths), or its
online_shopping_10_cats.csv (`cat,label,review`: 62,774 reviews of 10 product categories;
--text_column=2 labels them by category, --min_chars keeps the long ones). Writes into
--output_dir:

  train.tsv, dev.tsv, test.tsv  header `label<TAB>text_a`; the rows shuffled with --seed and
                                split --dev_share / --test_share / the rest. Tabs and
                                newlines inside a text become spaces; empty texts are left
                                out (counted).
  labels.txt                    the labels, sorted.
  vocab.txt                     [PAD] [UNK] [CLS] [SEP] [MASK], then every token Google's
                                basic tokenizer (lower-cased) makes from the texts: each CJK
                                character and punctuation mark, and for other words each of
                                their characters alone and as a `##` piece, so WordPiece
                                spells every word without [UNK].
  bert_config.json              --hidden_size, --num_hidden_layers, heads = hidden / 64,
                                intermediate 4 x hidden, 512 positions, the vocab's size.

Prints one JSON line: example counts and the length distribution (characters) of the
training texts. The model trains from random weights: there is no pretrained checkpoint
for this vocab, so compare frameworks at the same config, not with published figures.

  python benchmarks/make_review_data.py --csv waimai_10k.csv --output_dir /tmp/waimai
"""

import argparse
import collections
import csv
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import tokenization  # pylint: disable=wrong-import-position

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def read_rows(path, label_column=0, text_column=1):
  """(label, text) rows of a CSV with a header row (label,review; or cat,label,review with
  label_column 0 and text_column 2 to label by category). The text is every field from
  text_column on, rejoined with commas (some texts hold unquoted commas); whitespace runs
  become one space. Returns (rows with a text, count of empty texts)."""
  with open(path, encoding="utf-8-sig", newline="") as f:
    reader = csv.reader(f)
    next(reader)
    rows = [(row[label_column].strip(), " ".join(",".join(row[text_column:]).split()))
            for row in reader if row]
  return [row for row in rows if row[1]], sum(1 for row in rows if not row[1])


def keep_rows(rows, min_chars, max_per_label):
  """The rows of at least min_chars characters, at most max_per_label (0: all) of each
  label, in the given order."""
  kept, counts = [], {}
  for label, text in rows:
    if len(text) >= min_chars and (not max_per_label or counts.get(label, 0) < max_per_label):
      kept.append((label, text))
      counts[label] = counts.get(label, 0) + 1
  return kept


def build_vocab(texts):
  """The vocab lines: special tokens, then every token the texts need, sorted."""
  basic = tokenization.BasicTokenizer(do_lower_case=True)
  tokens = set()
  for text in texts:
    for token in basic.tokenize(text):
      tokens.add(token[0])
      tokens.update("##" + char for char in token[1:])
  return SPECIAL_TOKENS + sorted(tokens - set(SPECIAL_TOKENS))


def bert_config(hidden_size, num_hidden_layers, vocab_size):
  """A Google bert_config.json dict: heads of 64, intermediate 4 x hidden, 512 positions."""
  return {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
          "hidden_dropout_prob": 0.1, "hidden_size": hidden_size,
          "initializer_range": 0.02, "intermediate_size": 4 * hidden_size,
          "max_position_embeddings": 512, "num_attention_heads": max(1, hidden_size // 64),
          "num_hidden_layers": num_hidden_layers, "type_vocab_size": 2,
          "vocab_size": vocab_size}


def write_model_files(output_dir, texts, hidden_size, num_hidden_layers):
  """vocab.txt (build_vocab of `texts`) and bert_config.json (bert_config); returns the
  vocab size."""
  vocab = build_vocab(texts)
  with open(os.path.join(output_dir, "vocab.txt"), "w", encoding="utf-8") as f:
    f.write("".join(token + "\n" for token in vocab))
  with open(os.path.join(output_dir, "bert_config.json"), "w", encoding="utf-8") as f:
    json.dump(bert_config(hidden_size, num_hidden_layers, len(vocab)), f, indent=2,
              sort_keys=True)
  return len(vocab)


def write_tsv(path, rows):
  with open(path, "w", encoding="utf-8") as f:
    f.write("label\ttext_a\n")
    f.write("".join("%s\t%s\n" % row for row in rows))


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--csv", required=True)
  parser.add_argument("--output_dir", required=True)
  parser.add_argument("--dev_share", type=float, default=0.1)
  parser.add_argument("--test_share", type=float, default=0.1)
  parser.add_argument("--hidden_size", type=int, default=256)
  parser.add_argument("--num_hidden_layers", type=int, default=4)
  parser.add_argument("--seed", type=int, default=12345)
  parser.add_argument("--label_column", type=int, default=0, help="the label's CSV column")
  parser.add_argument("--text_column", type=int, default=1,
                      help="the text's first CSV column (the text runs to the row's end)")
  parser.add_argument("--min_chars", type=int, default=0, help="leave out shorter texts")
  parser.add_argument("--max_per_label", type=int, default=0,
                      help="keep at most this many texts of each label (0: all)")
  args = parser.parse_args()
  rows, empty = read_rows(args.csv, args.label_column, args.text_column)
  random.Random(args.seed).shuffle(rows)
  read = len(rows)
  rows = keep_rows(rows, args.min_chars, args.max_per_label)
  n_dev, n_test = int(len(rows) * args.dev_share), int(len(rows) * args.test_share)
  splits = {"dev": rows[:n_dev], "test": rows[n_dev:n_dev + n_test],
            "train": rows[n_dev + n_test:]}
  os.makedirs(args.output_dir, exist_ok=True)
  for name, split_rows in splits.items():
    write_tsv(os.path.join(args.output_dir, name + ".tsv"), split_rows)
  with open(os.path.join(args.output_dir, "labels.txt"), "w", encoding="utf-8") as f:
    f.write("".join(label + "\n" for label in sorted(set(label for label, _ in rows))))
  vocab_size = write_model_files(args.output_dir, [text for _, text in rows],
                                 args.hidden_size, args.num_hidden_layers)
  lengths = sorted(len(text) for _, text in splits["train"])
  def quantile(q):
    return lengths[min(len(lengths) - 1, int(q * len(lengths)))]
  print(json.dumps({"train": len(splits["train"]), "dev": n_dev, "test": n_test,
                    "empty_left_out": empty, "vocab_size": vocab_size,
                    "kept_of_read": [len(rows), read],
                    "labels": dict(collections.Counter(label for label, _ in rows)),
                    "train_chars_median": quantile(0.5), "p90": quantile(0.9),
                    "p99": quantile(0.99), "max": lengths[-1],
                    "share_over_126": sum(l > 126 for l in lengths) / float(len(lengths))},
                   ensure_ascii=False))


if __name__ == "__main__":
  main()
