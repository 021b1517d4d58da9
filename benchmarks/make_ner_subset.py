# coding=utf-8
"""Samples a real conll NER file into the layout ner_side_by_side.py --data_root reads.

For example SophonPlus/ChineseNlpCorpus's datasets/dh_msra (dh_msra.txt: the MSRA NER
corpus, one character and its tag per line, a blank line between sentences). Writes into
--output_dir:

  conll/train.txt, conll/dev.txt, conll/test.txt   sentences drawn without replacement
      (shuffled with --seed), as many as --train_sentences / --dev_sentences /
      --test_sentences; sentences longer than --max_chars characters are skipped (counted).
  vocab.txt           [PAD] [UNK] [CLS] [SEP] [MASK] and every token the sampled characters
                      need (benchmarks/make_review_data.build_vocab).
  bert_config.json    --hidden_size, --num_hidden_layers (heads = hidden / 64).

With --multi_label, also a multi-label classification set of the same sentences (a sentence
labelled with the entity types it mentions, so real human annotations: "a sentence names a
person and a place"):

  multi_label/train.tsv, dev.tsv, test.tsv   header `label<TAB>text_a`: the types joined by
                      `,` in sorted order (an empty field when the sentence has no entity),
                      the sentence's characters joined.
  multi_label/labels.txt   the entity types, sorted.

With --rest_file, also the rest of the corpus, for in-domain MLM pretraining and unlabelled
text (distillation's --unlabeled_file):

  --rest_file         every other distinct sentence of at most --max_chars characters that
                      shares no run of 20 characters with a dev or test sentence
                      (make_pretraining_corpus.leave_out_held_out), shuffled, one a line.
  --corpus_file       the same texts, 16 to a document: create_pretraining_data.py's input.
  The vocab then covers these texts too.

Prints one JSON line: counts, tags and the skipped sentences.

  python benchmarks/make_ner_subset.py --conll dh_msra.txt --output_dir /tmp/msra
"""

import argparse
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_pretraining_corpus  # pylint: disable=wrong-import-position
import make_review_data  # pylint: disable=wrong-import-position


def read_sentences(path):
  """Lists of (token, tag) lines; a blank line ends a sentence."""
  sentences, current = [], []
  with open(path, encoding="utf-8") as f:
    for line in f:
      fields = line.split()
      if not fields:
        if current:
          sentences.append(current)
        current = []
      elif len(fields) >= 2:
        current.append((fields[0], fields[-1]))
  if current:
    sentences.append(current)
  return sentences


def write_conll(path, sentences):
  with open(path, "w", encoding="utf-8") as f:
    for sentence in sentences:
      f.write("".join("%s %s\n" % pair for pair in sentence) + "\n")


def sentence_text(sentence):
  """A sentence's characters joined."""
  return "".join(token for token, _ in sentence)


def entity_types(sentence):
  """The sorted entity types a sentence's tags mention (B-PER, I-LOC, S-ORG, ... -> type)."""
  return sorted(set(tag.split("-", 1)[1] for _, tag in sentence if "-" in tag))


def write_multi_label(directory, splits):
  """The entity-type multi-label set of the sampled sentences (see the module doc)."""
  os.makedirs(directory, exist_ok=True)
  counts, all_types = {}, set()
  for name, split in splits.items():
    types = [entity_types(s) for s in split]
    with open(os.path.join(directory, name + ".tsv"), "w", encoding="utf-8") as f:
      f.write("label\ttext_a\n" + "".join(
          "%s\t%s\n" % (",".join(t), sentence_text(s))
          for s, t in zip(split, types)))
    all_types.update(*types)
    counts[name] = {"no_entity": sum(1 for t in types if not t),
                    "several_types": sum(1 for t in types if len(t) > 1)}
  with open(os.path.join(directory, "labels.txt"), "w", encoding="utf-8") as f:
    f.write("".join(t + "\n" for t in sorted(all_types)))
  return counts


def write_rest(rest_file, corpus_file, rest, held_out, seed):
  """The rest's texts (see the module doc) to rest_file, and as documents to corpus_file;
  returns the texts and how many were left out as sharing a run with held_out."""
  texts = sorted(set(sentence_text(s) for s in rest))
  random.Random(seed).shuffle(texts)
  texts, left_out = make_pretraining_corpus.leave_out_held_out(texts, held_out, 20)
  with open(rest_file, "w", encoding="utf-8") as f:
    f.write("".join(text + "\n" for text in texts))
  if corpus_file:
    make_pretraining_corpus.write_corpus(corpus_file, texts, 16)
  return texts, left_out


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--conll", required=True)
  parser.add_argument("--output_dir", required=True)
  parser.add_argument("--train_sentences", type=int, default=4000)
  parser.add_argument("--dev_sentences", type=int, default=500)
  parser.add_argument("--test_sentences", type=int, default=500)
  parser.add_argument("--max_chars", type=int, default=126)
  parser.add_argument("--hidden_size", type=int, default=128)
  parser.add_argument("--num_hidden_layers", type=int, default=2)
  parser.add_argument("--seed", type=int, default=12345)
  parser.add_argument("--multi_label", action="store_true",
                      help="also write multi_label/: each sentence's entity types as its labels")
  parser.add_argument("--rest_file", help="also write the other sentences' texts here")
  parser.add_argument("--corpus_file", help="with --rest_file: those texts as documents")
  args = parser.parse_args()
  sentences = read_sentences(args.conll)
  kept = [s for s in sentences if len(s) <= args.max_chars]
  random.Random(args.seed).shuffle(kept)
  counts = (args.train_sentences, args.dev_sentences, args.test_sentences)
  splits, start = {}, 0
  for name, count in zip(("train", "dev", "test"), counts):
    splits[name] = kept[start:start + count]
    start += count
  os.makedirs(os.path.join(args.output_dir, "conll"), exist_ok=True)
  for name, split in splits.items():
    write_conll(os.path.join(args.output_dir, "conll", name + ".txt"), split)
  texts = [sentence_text(s) for split in splits.values() for s in split]
  rest = None
  if args.rest_file:
    held_out = [sentence_text(s) for s in splits["dev"] + splits["test"]]
    rest_texts, left_out = write_rest(args.rest_file, args.corpus_file, kept[sum(counts):],
                                      held_out, args.seed)
    rest = {"texts": len(rest_texts), "left_out_as_held_out": left_out}
    texts += rest_texts
  vocab_size = make_review_data.write_model_files(args.output_dir, texts, args.hidden_size,
                                                 args.num_hidden_layers)
  tags = sorted(set(tag for split in splits.values() for s in split for _, tag in s))
  multi_label = (write_multi_label(os.path.join(args.output_dir, "multi_label"), splits)
                 if args.multi_label else None)
  print(json.dumps({"sentences": len(sentences), "skipped_longer": len(sentences) - len(kept),
                    "train": len(splits["train"]), "dev": len(splits["dev"]),
                    "test": len(splits["test"]), "tags": tags, "vocab_size": vocab_size,
                    "multi_label": multi_label, "rest": rest},
                   ensure_ascii=False))


if __name__ == "__main__":
  main()
