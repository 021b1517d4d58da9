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

--filler_csv buries each text in others, for a long-document set whose label cue may sit
anywhere: each document is one labelled text (the cue) put at a random place among texts
of --filler_csv (a `label,review` CSV whose labels are ignored, e.g. waimai_10k.csv's
food-delivery reviews), drawn until the document has a random length in
--document_chars MIN MAX. The fillers are split like the rows, so dev and test
documents hold no training filler. The JSON line then also gives, per split, the shares of
documents whose cue starts, and lies wholly, within the first --first_tokens tokens
(what truncation reads: max_seq_length - 2), and <split>_cue_tokens.tsv gives each
document's cue place (`start<TAB>end`, tokens, end exclusive, in the TSV's order), to
score by it. --max_chars leaves out longer texts (cues).

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


def sample_rows(rows, rng, min_chars, max_per_label):
  """keep_rows of the rows in a random order, shuffled again: a label that reaches
  max_per_label early in the first order would otherwise crowd the front of the list,
  which split_rows makes dev and test."""
  rows = list(rows)
  rng.shuffle(rows)
  rows = keep_rows(rows, min_chars, max_per_label)
  rng.shuffle(rows)
  return rows


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


def bury_in_filler(rows, fillers, rng, min_chars, max_chars):
  """Each (label, cue) row as (label, document): the cue at a random place among fillers
  (texts drawn in turn from a shuffled copy of `fillers`, reshuffled when used up, so a
  small filler list repeats) until the document has at least a length drawn from
  [min_chars, max_chars] (the last filler may take it past max_chars; a cue that long on
  its own gets no filler); texts joined by spaces.

  Returns:
    (rows, cue_offsets): the documents and the character where each cue starts.

  Raises:
    ValueError: no fillers.
  """
  if not fillers:
    raise ValueError("no filler texts to bury %d texts in: give a larger --filler_csv" %
                     len(rows))
  pool, documents, offsets = [], [], []
  for label, cue in rows:
    target = rng.randint(min_chars, max_chars)
    chosen, length = [], len(cue)
    while length < target:
      if not pool:
        pool = list(fillers)
        rng.shuffle(pool)
      chosen.append(pool.pop())
      length += len(chosen[-1]) + 1
    slot = rng.randint(0, len(chosen))
    before = chosen[:slot]
    offsets.append(sum(len(text) + 1 for text in before))
    documents.append((label, " ".join(before + [cue] + chosen[slot:])))
  return documents, offsets


def split_rows(rows, dev_share, test_share):
  """dev, test and train: the first dev_share, the next test_share, the rest."""
  n_dev, n_test = int(len(rows) * dev_share), int(len(rows) * test_share)
  return {"dev": rows[:n_dev], "test": rows[n_dev:n_dev + n_test],
          "train": rows[n_dev + n_test:]}


def bury_splits(splits, fillers, rng, document_chars, dev_share, test_share):
  """Replaces each split's rows (in place) by bury_in_filler documents, each split with its
  own share of `fillers` (cut as split_rows cuts the rows), so no filler text is in two
  splits.

  Returns:
    dict split -> per document, (the token where its cue starts, the token after its cue:
    end exclusive).
    Tokens are counted as the characters that are not spaces: one token each in the vocab
    build_vocab makes.
  """
  fillers = list(fillers)
  rng.shuffle(fillers)
  filler_splits = split_rows(fillers, dev_share, test_share)
  cue_places = {}
  for name in splits:
    cues = [cue for _, cue in splits[name]]
    splits[name], offsets = bury_in_filler(splits[name], filler_splits[name], rng,
                                           *document_chars)
    starts = [len(document[:offset].replace(" ", ""))
              for (_, document), offset in zip(splits[name], offsets)]
    cue_places[name] = [(start, start + len(cue.replace(" ", "")))
                        for start, cue in zip(starts, cues)]
  return cue_places


def shares_within(cue_places, first_tokens):
  """[share of documents whose cue starts within the first `first_tokens` tokens, share
  whose cue lies wholly within them] of one split's bury_splits places."""
  count = float(max(1, len(cue_places)))
  return [round(sum(start < first_tokens for start, _ in cue_places) / count, 4),
          round(sum(end <= first_tokens for _, end in cue_places) / count, 4)]


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
  parser.add_argument("--max_chars", type=int, default=0, help="leave out longer texts (0: none)")
  parser.add_argument("--filler_csv", help="bury each text among these texts (see above)")
  parser.add_argument("--document_chars", type=int, nargs=2, default=(150, 570),
                      metavar=("MIN", "MAX"), help="with --filler_csv: document lengths")
  parser.add_argument("--first_tokens", type=int, default=126,
                      help="with --filler_csv: report the cues within this many tokens")
  args = parser.parse_args()
  rows, empty = read_rows(args.csv, args.label_column, args.text_column)
  read = len(rows)
  if args.max_chars:
    rows = [row for row in rows if len(row[1]) <= args.max_chars]
  rows = sample_rows(rows, random.Random(args.seed), args.min_chars, args.max_per_label)
  splits = split_rows(rows, args.dev_share, args.test_share)
  n_dev, n_test = len(splits["dev"]), len(splits["test"])
  cue_in_first = None
  if args.filler_csv:
    if os.path.abspath(args.filler_csv) == os.path.abspath(args.csv):
      sys.exit("--filler_csv=%s is the --csv file: fillers would carry labels and cues" %
               args.filler_csv)
    fillers = [text for _, text in read_rows(args.filler_csv)[0]]
    cue_places = bury_splits(splits, fillers, random.Random(args.seed + 1),
                             args.document_chars, args.dev_share, args.test_share)
    cue_in_first = {name: shares_within(places, args.first_tokens)
                    for name, places in cue_places.items()}
    rows = [row for name in ("dev", "test", "train") for row in splits[name]]
  os.makedirs(args.output_dir, exist_ok=True)
  if args.filler_csv:
    for name, places in cue_places.items():
      with open(os.path.join(args.output_dir, name + "_cue_tokens.tsv"), "w") as f:
        f.write("start\tend\n" + "".join("%d\t%d\n" % place for place in places))
  for name, rows_of_split in splits.items():
    write_tsv(os.path.join(args.output_dir, name + ".tsv"), rows_of_split)
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
                    "share_over_126": sum(l > 126 for l in lengths) / float(len(lengths)),
                    "cue_starts_in_first_tokens, cue_wholly_in_them": cue_in_first},
                   ensure_ascii=False))


if __name__ == "__main__":
  main()
