# coding=utf-8
"""Tests of scripts/make_demo_data.py: the built-in demo data, its vocab and config."""

import collections
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest

import cli

SCRIPT_PATH = cli.script_path(os.path.join("scripts", "make_demo_data.py"))

OUTPUT_FILES = ["train.tsv", "dev.tsv", "test.tsv", "labels.txt", "vocab.txt", "bert_config.json"]
# What the script's docstring promises: examples per split, five balanced classes.
SPLIT_SIZES = {"train.tsv": 400, "dev.tsv": 100, "test.tsv": 100}
NUM_CLASSES = 5


def load_script():
  """Imports scripts/make_demo_data.py (scripts/ is not a package)."""
  spec = importlib.util.spec_from_file_location("make_demo_data", SCRIPT_PATH)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


make_demo_data = load_script()


def write_demo(directory, seed=None):
  """Runs the script in-process into `directory`; returns the directory."""
  argv = ["--output_dir", str(directory)]
  if seed is not None:
    argv += ["--seed", str(seed)]
  assert make_demo_data.main(argv) == 0
  return str(directory)


def read_lines(path):
  """The lines of a UTF-8 file, without their "\\n"; raw bytes are checked elsewhere."""
  with open(path, "rb") as f:
    data = f.read().decode("utf-8")
  assert data.endswith("\n"), path
  assert "\r" not in data, path
  return data[:-1].split("\n")


def read_split(path):
  """Parses a split file into (label, text) pairs, checking the header and columns."""
  lines = read_lines(path)
  assert lines[0] == "label\ttext_a"
  rows = []
  for number, line in enumerate(lines[1:], start=2):
    fields = line.split("\t")
    assert len(fields) == 2, "%s line %d has %d columns: %r" % (path, number, len(fields), line)
    rows.append((fields[0], fields[1]))
  return rows


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
  return write_demo(tmp_path_factory.mktemp("demo"))


def test_same_seed_gives_identical_bytes(tmp_path):
  first = write_demo(tmp_path / "a")
  second = write_demo(tmp_path / "b", seed=12345)  # 12345 is the default seed
  for name in OUTPUT_FILES:
    with open(os.path.join(first, name), "rb") as f:
      first_bytes = f.read()
    with open(os.path.join(second, name), "rb") as f:
      second_bytes = f.read()
    assert first_bytes == second_bytes, name


def test_other_seed_gives_other_data(tmp_path):
  first = write_demo(tmp_path / "a", seed=1)
  second = write_demo(tmp_path / "b", seed=2)
  for name in ["train.tsv", "dev.tsv", "test.tsv"]:
    assert read_split(os.path.join(first, name)) != read_split(os.path.join(second, name)), name


def test_splits_have_documented_counts_and_every_class(demo_dir):
  labels = read_lines(os.path.join(demo_dir, "labels.txt"))
  assert len(labels) == NUM_CLASSES
  assert len(set(labels)) == NUM_CLASSES
  for name, size in SPLIT_SIZES.items():
    rows = read_split(os.path.join(demo_dir, name))
    assert len(rows) == size, name
    counts = collections.Counter(label for label, _ in rows)
    # Every class, balanced, and no label outside labels.txt.
    assert sorted(counts) == sorted(labels), name
    assert set(counts.values()) == {size // NUM_CLASSES}, (name, counts)


def test_texts_are_clean_short_and_not_shared_between_splits(demo_dir):
  seen = {}
  for name in SPLIT_SIZES:
    for label, text in read_split(os.path.join(demo_dir, name)):
      assert "\t" not in text and "\n" not in text and "\r" not in text
      assert text == text.strip() and text
      assert 8 <= len(text) <= 30, text
      assert text not in seen, "%r is in both %s and %s" % (text, seen.get(text), name)
      seen[text] = name


def test_rows_are_shuffled(demo_dir):
  # Classes must be interleaved, not in blocks: count label changes between rows.
  rows = read_split(os.path.join(demo_dir, "train.tsv"))
  changes = sum(1 for (a, _), (b, _) in zip(rows, rows[1:]) if a != b)
  assert changes > len(rows) // 2


def test_every_token_is_in_vocab(demo_dir):
  import tokenization  # the project's tokenizer, Google's FullTokenizer API

  vocab_path = os.path.join(demo_dir, "vocab.txt")
  vocab = read_lines(vocab_path)
  assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  assert len(vocab) == len(set(vocab)), "duplicate vocab lines"
  assert all(token and token == token.strip() for token in vocab)

  tokenizer = tokenization.FullTokenizer(vocab_file=vocab_path, do_lower_case=True)
  vocab_set = set(vocab)
  all_tokens = []
  for name in SPLIT_SIZES:
    for _, text in read_split(os.path.join(demo_dir, name)):
      tokens = tokenizer.tokenize(text)
      assert tokens, text
      assert "[UNK]" not in tokens, (text, tokens)
      missing = [token for token in tokens if token not in vocab_set]
      assert not missing, (text, tokens, missing)
      all_tokens.extend(tokens)

  # The data exercises the tokenizer's mixed-text paths: whole English words,
  # WordPiece continuations (multi-digit numbers), and ASCII and full-width punctuation.
  assert any(token.isascii() and token.isalpha() and len(token) > 1 for token in all_tokens)
  assert any(token.startswith("##") for token in all_tokens)
  assert {"，", "。"} <= set(all_tokens)
  assert any(len(token) == 1 and token.isascii() and not token.isalnum() for token in all_tokens)
  # Nothing in the vocab beyond what the texts need, the special tokens and the
  # single-character ASCII pieces.
  extra = set(vocab) - set(all_tokens) - set(vocab[:5])
  bare = [token[2:] if token.startswith("##") else token for token in extra]
  assert all(len(token) == 1 and token.isascii() and token.isalnum() for token in bare), sorted(extra)


def test_bert_config_is_tiny_and_matches_vocab(demo_dir):
  with open(os.path.join(demo_dir, "bert_config.json"), encoding="utf-8") as f:
    config = json.load(f)
  vocab_lines = read_lines(os.path.join(demo_dir, "vocab.txt"))
  assert config["vocab_size"] == len(vocab_lines)
  expected = {
      "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
      "intermediate_size": 128, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
      "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 128,
      "type_vocab_size": 2, "initializer_range": 0.02,
  }
  for key, value in expected.items():
    assert config[key] == value, key
  assert config["hidden_size"] % config["num_attention_heads"] == 0
  # [CLS] + text + [SEP] of the longest possible text fits the positions.
  assert 30 + 2 <= config["max_position_embeddings"]


def naive_bayes_accuracy(train_rows, eval_rows):
  """Accuracy of a character-unigram multinomial naive Bayes (add-one smoothing)."""
  char_counts = collections.defaultdict(collections.Counter)
  class_counts = collections.Counter()
  for label, text in train_rows:
    class_counts[label] += 1
    char_counts[label].update(text)
  alphabet = set()
  for counts in char_counts.values():
    alphabet.update(counts)
  correct = 0
  for label, text in eval_rows:
    best_label, best_score = None, -float("inf")
    for candidate in sorted(class_counts):
      total = sum(char_counts[candidate].values()) + len(alphabet) + 1
      score = math.log(class_counts[candidate])
      score += sum(math.log((char_counts[candidate][c] + 1.0) / total) for c in text)
      if score > best_score:
        best_label, best_score = candidate, score
    correct += best_label == label
  return correct / float(len(eval_rows))


def test_classes_are_learnable_from_characters(demo_dir):
  # A stand-in for the tiny BERT: if bag-of-characters naive Bayes cannot tell the
  # classes apart, the demo cannot either.
  train_rows = read_split(os.path.join(demo_dir, "train.tsv"))
  for name in ["dev.tsv", "test.tsv"]:
    accuracy = naive_bayes_accuracy(train_rows, read_split(os.path.join(demo_dir, name)))
    assert accuracy >= 0.9, (name, accuracy)


def test_command_line_prints_one_line_per_file(tmp_path):
  result = subprocess.run(
      [sys.executable, SCRIPT_PATH, "--output_dir", str(tmp_path / "out")],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
  assert result.returncode == 0, result.stderr
  lines = result.stdout.strip().split("\n")
  assert len(lines) == len(OUTPUT_FILES)
  for line, name in zip(lines, OUTPUT_FILES):
    assert os.path.join(str(tmp_path / "out"), name) in line
    assert any(ch.isdigit() for ch in line)
  for name in OUTPUT_FILES:
    assert os.path.isfile(os.path.join(str(tmp_path / "out"), name))


def test_help_describes_flags():
  result = subprocess.run([sys.executable, SCRIPT_PATH, "--help"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
  assert result.returncode == 0
  assert "--output_dir" in result.stdout and "--seed" in result.stdout


def test_output_dir_that_is_a_file_is_a_clear_error(tmp_path, capsys):
  not_a_dir = tmp_path / "file.txt"
  not_a_dir.write_text("x")
  assert make_demo_data.main(["--output_dir", str(not_a_dir)]) == 1
  err = capsys.readouterr().err
  assert str(not_a_dir) in err and "not a directory" in err
