# coding=utf-8
"""The model files of a tiny task for the command-line tests: a vocab.txt of the special
tokens and every character of the task's texts, and a BERT config with hidden size 16;
and the writers of its data files."""

import json
import os

SPECIAL_TOKENS = [u"[PAD]", u"[UNK]", u"[CLS]", u"[SEP]", u"[MASK]"]
TINY_CONFIG = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
               "intermediate_size": 32, "max_position_embeddings": 64, "type_vocab_size": 2,
               "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
               "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02}


def write_text(path, text):
  directory = os.path.dirname(path)
  if not os.path.isdir(directory):
    os.makedirs(directory)
  with open(path, "w", encoding="utf-8", newline="") as f:
    f.write(text)
  return path


def write_model_files(directory, texts, drop_tokens=()):
  """vocab.txt (the special tokens and every character of `texts`) and a tiny config."""
  chars = sorted(set(u"".join(texts)) - set(u" \n"))
  tokens = [t for t in SPECIAL_TOKENS + chars if t not in drop_tokens]
  vocab_file = write_text(os.path.join(directory, "vocab.txt"),
                          u"".join(t + u"\n" for t in tokens))
  config = dict(TINY_CONFIG, vocab_size=len(tokens))
  config_file = write_text(os.path.join(directory, "bert_config.json"), json.dumps(config))
  return vocab_file, config_file


def tsv(rows, header=u"label\ttext_a"):
  return header + u"\n" + u"".join(u"%s\t%s\n" % row for row in rows)
