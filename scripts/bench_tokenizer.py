# coding=utf-8
"""Benchmarks tokenization.FullTokenizer against the plain reference tokenizer.

Generates (fixed seed) short Chinese texts mixed with English words, digits and
punctuation, and a Chinese-style vocab, then prints lines/s of
tests/helpers/reference_tokenizer.py and of tokenization.FullTokenizer on the same
input, checks that both give the same tokens, and prints the speed ratio.

  python scripts/bench_tokenizer.py [--num_lines 20000] [--repeats 3]

Needs no TensorFlow and runs in well under a minute.
"""

import argparse
import itertools
import os
import random
import sys
import tempfile
import time

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (REPO_DIR, os.path.join(REPO_DIR, "tests", "helpers")):
  if _path not in sys.path:
    sys.path.insert(0, _path)

import reference_tokenizer  # pylint: disable=g-import-not-at-top
import tokenization  # pylint: disable=g-import-not-at-top

ENGLISH_WORDS = [
    "bert", "model", "nlp", "data", "apple", "iphone", "google", "python",
    "deep", "learning", "transformer", "token", "gpu", "cuda", "wifi", "app",
    "ok", "vip", "ceo", "the", "and", "of", "to", "in", "is", "for", "on",
]
CJK_PUNCTUATION = list(u"，。！？；：、“”（）《》")
ASCII_PUNCTUATION = list(u",.!?:;()-/%@#")


def make_vocab_tokens(rng):
  """Returns the benchmark vocab: specials, CJK, ASCII (+##), punctuation, words."""
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  tokens.extend(chr(cp) for cp in range(0x4E00, 0xA000))
  alphanumerics = [chr(c) for c in range(ord("a"), ord("z") + 1)]
  alphanumerics += [chr(c) for c in range(ord("0"), ord("9") + 1)]
  tokens.extend(alphanumerics)
  tokens.extend("##" + c for c in alphanumerics)
  tokens.extend(CJK_PUNCTUATION + ASCII_PUNCTUATION)
  tokens.extend(ENGLISH_WORDS)
  # Some multi-character pieces so WordPiece has longer matches to find.
  for word in ENGLISH_WORDS:
    if len(word) > 3:
      tokens.append("##" + word[2:])
  tokens.extend(str(n) for n in range(100))
  tokens.extend("##" + str(n) for n in range(100))
  del rng
  return tokens


def make_texts(rng, num_lines):
  """Returns `num_lines` short texts: mostly Chinese, some English and digits."""
  # Real Chinese text uses a few thousand characters with a skewed frequency.
  common_chars = [chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(3500)]
  cum_weights = list(itertools.accumulate(
      1.0 / (rank + 1) for rank in range(len(common_chars))))
  texts = []
  for _ in range(num_lines):
    parts = []
    length = rng.randint(8, 40)
    while len(parts) < length:
      roll = rng.random()
      if roll < 0.80:
        parts.append(rng.choices(common_chars, cum_weights=cum_weights)[0])
      elif roll < 0.86:
        parts.append(rng.choice(CJK_PUNCTUATION))
      elif roll < 0.92:
        word = rng.choice(ENGLISH_WORDS)
        if rng.random() < 0.3:
          word = word.capitalize()
        parts.append(" " + word + " ")
      elif roll < 0.97:
        parts.append(str(rng.randint(0, 100000)))
      else:
        parts.append(rng.choice(ASCII_PUNCTUATION))
    texts.append("".join(parts))
  return texts


def time_lines_per_second(tokenize, texts, repeats):
  """Returns (best lines/s over `repeats` passes, outputs of the last pass).

  Uses CPU time of this process, so other jobs on a shared machine disturb the
  figures less than they would wall-clock time.
  """
  best = 0.0
  outputs = None
  for _ in range(repeats):
    start = time.process_time()
    outputs = [tokenize(text) for text in texts]
    elapsed = time.process_time() - start
    best = max(best, len(texts) / elapsed)
  return best, outputs


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--num_lines", type=int, default=20000)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--seed", type=int, default=12345)
  args = parser.parse_args()

  rng = random.Random(args.seed)
  vocab_tokens = make_vocab_tokens(rng)
  texts = make_texts(rng, args.num_lines)
  num_chars = sum(len(text) for text in texts)
  print("Python %s; %d lines, %.1f chars/line; vocab of %d tokens" %
        (sys.version.split()[0], len(texts), num_chars / len(texts), len(vocab_tokens)))

  with tempfile.TemporaryDirectory() as temp_dir:
    vocab_file = os.path.join(temp_dir, "vocab.txt")
    with open(vocab_file, "w", encoding="utf-8") as f:
      f.write("\n".join(vocab_tokens) + "\n")

    start = time.time()
    fast = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    fast.tokenize(u"预热\t")  # Builds the one-time table of deleted characters.
    print("FullTokenizer construction + first call: %.3f s" % (time.time() - start))

    reference = reference_tokenizer.ReferenceFullTokenizer(fast.vocab, do_lower_case=True)
    reference_rate, reference_outputs = time_lines_per_second(
        reference.tokenize, texts, args.repeats)

    cold = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    cold_rate, cold_outputs = time_lines_per_second(cold.tokenize, texts, 1)
    warm_rate, warm_outputs = time_lines_per_second(fast.tokenize, texts, args.repeats)

  if cold_outputs != reference_outputs or warm_outputs != reference_outputs:
    print("MISMATCH between tokenization.FullTokenizer and the reference")
    return 1
  num_tokens = sum(len(tokens) for tokens in reference_outputs)
  print("outputs identical (%d tokens)" % num_tokens)
  print("reference tokenizer:              %9.0f lines/s" % reference_rate)
  print("FullTokenizer, first pass (cold): %9.0f lines/s  (%.1fx)" %
        (cold_rate, cold_rate / reference_rate))
  print("FullTokenizer, best pass (warm):  %9.0f lines/s  (%.1fx)" %
        (warm_rate, warm_rate / reference_rate))
  return 0


if __name__ == "__main__":
  sys.exit(main())
