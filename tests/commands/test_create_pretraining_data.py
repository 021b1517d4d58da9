# coding=utf-8
"""Tests of create_pretraining_data.py: the TFRecord features, masking, next
sentence labels, whole-word masking (also with jieba), determinism, round-robin
output, streaming in chunks, progress lines and errors.

The checks rebuild the original token sequence of every instance from the
written features and look it up in the corpus the test wrote, tokenized by the
test itself with a hand-written word -> pieces table.
"""

import contextlib
import glob
import logging
import os
import random
import re
import signal
import subprocess
import sys
import time
import tracemalloc

import pytest
import tensorflow.compat.v1 as tf

# pylint: disable=g-import-not-at-top
import cli
from bert_mgpu.errors import UsageError
from bert_mgpu.pretraining import data_settings
from bert_mgpu.pretraining import parallel
from bert_mgpu.pretraining import pipeline
from bert_mgpu.pretraining import record_writing
from bert_mgpu.pretraining import text_input
from bert_mgpu.pretraining import training_instances
from bert_mgpu import signals
import create_pretraining_data as cpd
import tokenization
# pylint: enable=g-import-not-at-top

SCRIPT_PATH = cli.script_path("create_pretraining_data.py")

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# English words and their word pieces (the test's own tokenizer).
ENGLISH_PIECES = {
    "the": ["the"], "cat": ["cat"], "dog": ["dog"], "sat": ["sat"], "on": ["on"],
    "mat": ["mat"], "ran": ["ran"], "home": ["home"], "big": ["big"], "red": ["red"],
    "playing": ["play", "##ing"], "jumped": ["jump", "##ed"], "walks": ["walk", "##s"],
    "unbelievable": ["un", "##believ", "##able"], "cats": ["cat", "##s"],
}
# Chinese words; every character belongs to one word only, so word boundaries
# can be read back from the characters.
CHINESE_WORDS = ["北京", "上海", "天安门", "首都", "中国", "人民", "是", "我", "爱", "的"]

VOCAB = SPECIAL + sorted(set(piece for pieces in ENGLISH_PIECES.values() for piece in pieces)) + \
    sorted(set("".join(CHINESE_WORDS))) + ["."]
VOCAB_IDS = dict((token, index) for index, token in enumerate(VOCAB))
CLS, SEP, MASK = VOCAB_IDS["[CLS]"], VOCAB_IDS["[SEP]"], VOCAB_IDS["[MASK]"]

MAX_SEQ_LENGTH = 32
MAX_PREDICTIONS = 6


def write_text(path, text):
  with open(str(path), "w", encoding="utf-8", newline="") as f:
    f.write(text)
  return str(path)


def write_vocab(tmp_path):
  return write_text(tmp_path / "vocab.txt", "".join(token + "\n" for token in VOCAB))


def make_english_corpus(seed, num_documents=30):
  """Returns (text, documents): the corpus text and, per document, its sentences as word lists."""
  rng = random.Random(seed)
  words = sorted(ENGLISH_PIECES)
  documents = []
  for _ in range(num_documents):
    documents.append([[rng.choice(words) for _ in range(rng.randint(2, 9))] + ["."]
                      for _ in range(rng.randint(1, 6))])
  text = "\n\n".join("\n".join(" ".join(sentence) for sentence in document)
                     for document in documents) + "\n"
  return text, documents


def make_chinese_corpus(seed, num_documents=30):
  """Like make_english_corpus, with space-separated Chinese words."""
  rng = random.Random(seed)
  documents = []
  for _ in range(num_documents):
    documents.append([[rng.choice(CHINESE_WORDS) for _ in range(rng.randint(2, 9))]
                      for _ in range(rng.randint(1, 6))])
  text = "\n\n".join("\n".join(" ".join(sentence) for sentence in document)
                     for document in documents) + "\n"
  return text, documents


def english_ids(words):
  return [VOCAB_IDS[piece] for word in words for piece in ENGLISH_PIECES.get(word, [word])]


def chinese_ids(words):
  return [VOCAB_IDS[char] for word in words for char in word]


def document_streams(documents, to_ids):
  """Each document's ids as a space-delimited string, for substring look-ups."""
  return [" %s " % " ".join(str(i) for i in to_ids(_flatten(document)))
          for document in documents]


def _flatten(sentences):
  return [word for sentence in sentences for word in sentence]


def contiguous_in(ids, streams):
  """Indexes of the documents that contain `ids` as a contiguous run."""
  needle = " %s " % " ".join(str(i) for i in ids)
  return [index for index, stream in enumerate(streams) if needle in stream]


def read_records(path):
  """Returns the tf.train.Examples of a TFRecord file."""
  return [tf.train.Example.FromString(record) for record in tf.io.tf_record_iterator(path)]


def run_cpd(tmp_path, corpus_text, name="out", seed=12345, output_names=None,
            stop_signals=None,
            progress_interval_seconds=parallel.DEFAULT_PROGRESS_INTERVAL_SECONDS, **settings):
  """Writes the corpus and runs the pipeline in-process; returns (output paths, stats).

  `settings` are DataSettings fields, on top of the test's max_seq_length,
  max_predictions_per_seq and dupe_factor=4.
  """
  input_path = write_text(tmp_path / (name + ".txt"), corpus_text)
  outputs = [str(tmp_path / n) for n in (output_names or [name + ".tfrecord"])]
  base_settings = data_settings.DataSettings(
      input_file=input_path, output_file=",".join(outputs), vocab_file=write_vocab(tmp_path),
      max_seq_length=MAX_SEQ_LENGTH, max_predictions_per_seq=MAX_PREDICTIONS, dupe_factor=4,
      random_seed=seed)
  stats = pipeline.create_pretraining_data(base_settings._replace(**settings),
                                           stop_signals=stop_signals,
                                           progress_interval_seconds=progress_interval_seconds)
  return outputs, stats


def decode(example):
  """The features of an Example as a dict name -> (kind, list of values)."""
  result = {}
  for name, feature in example.features.feature.items():
    kind = feature.WhichOneof("kind")
    result[name] = (kind, list(getattr(feature, kind).value))
  return result


def check_instance(features, max_seq_length=MAX_SEQ_LENGTH, max_predictions=MAX_PREDICTIONS):
  """Checks one instance's structure; returns (original ids, A ids, B ids, positions, label)."""
  assert sorted(features) == sorted([
      "input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
      "masked_lm_weights", "next_sentence_labels"])
  for name in ("input_ids", "input_mask", "segment_ids"):
    assert features[name][0] == "int64_list"
    assert len(features[name][1]) == max_seq_length
  for name in ("masked_lm_positions", "masked_lm_ids"):
    assert features[name][0] == "int64_list"
    assert len(features[name][1]) == max_predictions
  assert features["masked_lm_weights"][0] == "float_list"
  assert len(features["masked_lm_weights"][1]) == max_predictions
  assert features["next_sentence_labels"][0] == "int64_list"
  assert len(features["next_sentence_labels"][1]) == 1

  input_ids = features["input_ids"][1]
  mask = features["input_mask"][1]
  segments = features["segment_ids"][1]
  n = sum(mask)
  assert mask == [1] * n + [0] * (max_seq_length - n)
  assert input_ids[n:] == [0] * (max_seq_length - n)
  assert segments[n:] == [0] * (max_seq_length - n)

  weights = features["masked_lm_weights"][1]
  k = int(sum(weights))
  assert weights == [1.0] * k + [0.0] * (max_predictions - k)
  positions = features["masked_lm_positions"][1]
  labels = features["masked_lm_ids"][1]
  assert positions[k:] == [0] * (max_predictions - k)
  assert labels[k:] == [0] * (max_predictions - k)
  positions, labels = positions[:k], labels[:k]
  assert positions == sorted(set(positions))
  assert all(0 < p < n - 1 for p in positions)
  assert not set(labels) & set([CLS, SEP, VOCAB_IDS["[PAD]"], MASK])

  original = list(input_ids[:n])
  for position, label in zip(positions, labels):
    original[position] = label
  assert original[0] == CLS and original[-1] == SEP
  sep_positions = [i for i, t in enumerate(original) if t == SEP]
  assert len(sep_positions) == 2
  first_sep = sep_positions[0]
  assert segments[:n] == [0] * (first_sep + 1) + [1] * (n - first_sep - 1)
  assert first_sep not in positions
  tokens_a, tokens_b = original[1:first_sep], original[first_sep + 1:n - 1]
  assert tokens_a and tokens_b
  label = features["next_sentence_labels"][1][0]
  assert label in (0, 1)
  return original, tokens_a, tokens_b, positions, labels, label


@pytest.fixture(scope="module")
def english_run(tmp_path_factory):
  tmp_path = tmp_path_factory.mktemp("english")
  text, documents = make_english_corpus(seed=1)
  outputs, stats = run_cpd(tmp_path, text, masked_lm_prob=0.15)
  return outputs[0], stats, documents


def test_features_structure_and_originals(english_run):
  path, stats, documents = english_run
  examples = read_records(path)
  assert len(examples) == stats.instances > 0
  assert stats.documents == len(documents)
  streams = document_streams(documents, english_ids)
  labels_seen = set()
  for example in examples:
    original, tokens_a, tokens_b, positions, _, label = check_instance(decode(example))
    n = len(original)
    assert len(positions) == min(MAX_PREDICTIONS, max(1, int(round(n * 0.15))))
    labels_seen.add(label)
    # The rebuilt originals (masked_lm_ids put back) are runs of the corpus;
    # truncation may cut the end of A or the start of B, so each is checked
    # alone, and an actual next B must come from A's document.
    documents_a = contiguous_in(tokens_a, streams)
    documents_b = contiguous_in(tokens_b, streams)
    assert documents_a and documents_b, original
    if label == 0:
      assert set(documents_a) & set(documents_b), original
  assert labels_seen == set([0, 1])


def test_parses_with_run_pretraining_feature_spec(english_run):
  path = english_run[0]
  spec = {
      "input_ids": tf.FixedLenFeature([MAX_SEQ_LENGTH], tf.int64),
      "input_mask": tf.FixedLenFeature([MAX_SEQ_LENGTH], tf.int64),
      "segment_ids": tf.FixedLenFeature([MAX_SEQ_LENGTH], tf.int64),
      "masked_lm_positions": tf.FixedLenFeature([MAX_PREDICTIONS], tf.int64),
      "masked_lm_ids": tf.FixedLenFeature([MAX_PREDICTIONS], tf.int64),
      "masked_lm_weights": tf.FixedLenFeature([MAX_PREDICTIONS], tf.float32),
      "next_sentence_labels": tf.FixedLenFeature([1], tf.int64),
  }
  record = next(tf.io.tf_record_iterator(path))
  with tf.Graph().as_default():
    parsed = tf.parse_single_example(tf.constant(record), spec)
    with tf.Session() as sess:
      values = sess.run(parsed)
  expected = decode(tf.train.Example.FromString(record))
  for name in spec:
    assert list(values[name]) == expected[name][1]


def test_mask_keep_random_shares(english_run):
  examples = read_records(english_run[0])
  counts = {"mask": 0, "keep": 0, "random": 0}
  for example in examples:
    features = decode(example)
    original, _, _, positions, labels, _ = check_instance(features)
    input_ids = features["input_ids"][1]
    for position, label in zip(positions, labels):
      if input_ids[position] == MASK:
        counts["mask"] += 1
      elif input_ids[position] == label:
        counts["keep"] += 1
      else:
        counts["random"] += 1
  total = sum(counts.values())
  assert total > 400
  assert 0.70 < counts["mask"] / total < 0.90, counts
  assert 0.03 < counts["keep"] / total < 0.20, counts
  assert 0.03 < counts["random"] / total < 0.20, counts


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
  text, _ = make_english_corpus(seed=2, num_documents=10)
  first, _ = run_cpd(tmp_path, text, name="a", seed=7)
  second, _ = run_cpd(tmp_path, text, name="b", seed=7)
  third, _ = run_cpd(tmp_path, text, name="c", seed=8)
  data = []
  for path in (first[0], second[0], third[0]):
    with open(path, "rb") as f:
      data.append(f.read())
  assert data[0] == data[1]
  assert data[0] != data[2]
  assert not [n for n in os.listdir(str(tmp_path)) if n.endswith(".tmp")]


def test_round_robin_over_two_files(tmp_path):
  text, _ = make_english_corpus(seed=3, num_documents=10)
  single, stats = run_cpd(tmp_path, text, name="single")
  pair, pair_stats = run_cpd(tmp_path, text, name="pair",
                             output_names=["pair-0.tfrecord", "pair-1.tfrecord"])
  assert pair_stats.instances == stats.instances
  everything = list(tf.io.tf_record_iterator(single[0]))
  assert list(tf.io.tf_record_iterator(pair[0])) == everything[0::2]
  assert list(tf.io.tf_record_iterator(pair[1])) == everything[1::2]


def english_groups(tokens):
  """Position groups: a token with the ## pieces right after it (within a segment)."""
  groups = []
  for position, token in enumerate(tokens):
    if token in ("[CLS]", "[SEP]"):
      continue
    if token.startswith("##") and groups and groups[-1][-1] == position - 1:
      groups[-1].append(position)
    else:
      groups.append([position])
  return groups


def chinese_groups(tokens):
  """Position groups: characters of one word (a truncated word keeps its remaining part)."""
  first_chars = set(word[0] for word in CHINESE_WORDS)
  groups = []
  for position, token in enumerate(tokens):
    if token in ("[CLS]", "[SEP]"):
      continue
    if token not in first_chars and groups and groups[-1][-1] == position - 1:
      groups[-1].append(position)
    else:
      groups.append([position])
  return groups


def split_groups(path, group_fn):
  """Counts (groups of 2+ tokens that were partly masked, fully masked multi-token groups)."""
  partial = full = 0
  for example in read_records(path):
    original, _, _, positions, _, _ = check_instance(decode(example))
    tokens = [VOCAB[i] for i in original]
    masked = set(positions)
    for group in group_fn(tokens):
      hits = len(masked.intersection(group))
      if len(group) > 1 and hits == len(group):
        full += 1
      elif 0 < hits < len(group):
        partial += 1
  return partial, full


@pytest.mark.parametrize("language", ["english", "chinese"])
def test_whole_word_masking(tmp_path, language):
  if language == "english":
    text, _ = make_english_corpus(seed=4)
    group_fn = english_groups
  else:
    text, _ = make_chinese_corpus(seed=4)
    group_fn = chinese_groups
  whole, _ = run_cpd(tmp_path, text, name="whole", do_whole_word_mask=True, dupe_factor=2)
  pieces, _ = run_cpd(tmp_path, text, name="pieces", do_whole_word_mask=False, dupe_factor=2)
  partial, full = split_groups(whole[0], group_fn)
  assert partial == 0
  assert full > 20
  # Without whole-word masking words are split, so the check above can fail.
  assert split_groups(pieces[0], group_fn)[0] > 0


def test_chinese_whole_word_ids_are_plain_characters(tmp_path):
  text, documents = make_chinese_corpus(seed=5, num_documents=10)
  outputs, _ = run_cpd(tmp_path, text, do_whole_word_mask=True, dupe_factor=2)
  streams = document_streams(documents, chinese_ids)
  for example in read_records(outputs[0]):
    _, tokens_a, tokens_b, _, _, label = check_instance(decode(example))
    assert contiguous_in(tokens_a, streams)
    assert contiguous_in(tokens_b, streams)
    if label == 0:
      assert set(contiguous_in(tokens_a, streams)) & set(contiguous_in(tokens_b, streams))


def test_reading_documents_bad_lines_and_counts(tmp_path):
  # Document 1 has a line that is not UTF-8; documents are also split by the
  # end of a file; a document of punctuation-free control characters has no tokens.
  first = tmp_path / "first.txt"
  with open(str(first), "wb") as f:
    f.write(b"the cat sat .\n\xff\xfe bad line\nthe dog ran .\n\n\n\x01\x02\n\nbig red mat\n")
  write_text(tmp_path / "second.txt", "cats walks\n")
  output = str(tmp_path / "o.tfrecord")
  stats = pipeline.create_pretraining_data(data_settings.DataSettings(
      input_file="%s,%s" % (first, tmp_path / "sec*.txt"), output_file=output,
      vocab_file=write_vocab(tmp_path), max_seq_length=MAX_SEQ_LENGTH,
      max_predictions_per_seq=MAX_PREDICTIONS, dupe_factor=1))
  assert stats.skipped_lines == 1
  assert stats.first_skipped_line == "%s:2" % first
  assert stats.documents == 3
  assert stats.empty_documents == 1
  assert stats.instances == len(read_records(output)) > 0


def test_no_documents_is_an_error(tmp_path):
  input_path = write_text(tmp_path / "blank.txt", "\n\n  \n")
  with pytest.raises(UsageError, match="no document"):
    pipeline.create_pretraining_data(data_settings.DataSettings(
        input_file=input_path, output_file=str(tmp_path / "o.tfrecord"),
        vocab_file=write_vocab(tmp_path)))
  assert not os.path.exists(str(tmp_path / "o.tfrecord"))


def test_data_settings_from_flags_names_every_field_with_the_same_defaults():
  flag_values = tf.flags.FlagValues()
  cpd.define_flags(flag_values)
  flag_values(["create_pretraining_data.py", "--input_file=a.txt", "--output_file=o.tfrecord",
               "--vocab_file=vocab.txt"])
  settings = cpd.data_settings_from_flags(flag_values)
  # The defaults are the flags' (Google's), but for num_workers: 1, Google's single
  # stream, in code; 0, one per CPU core, on the command line.
  assert settings == data_settings.DataSettings(input_file="a.txt", output_file="o.tfrecord",
                                                vocab_file="vocab.txt", num_workers=0)
  flag_values(["create_pretraining_data.py", "--dupe_factor=3", "--masked_lm_prob=0.2",
               "--nodo_lower_case", "--do_whole_word_mask", "--chinese_segmenter=jieba"])
  settings = cpd.data_settings_from_flags(flag_values)
  assert (settings.dupe_factor, settings.masked_lm_prob, settings.do_lower_case,
          settings.do_whole_word_mask, settings.chinese_segmenter) == (3, 0.2, False, True,
                                                                      "jieba")
  per_instance = data_settings.instance_settings(settings._replace(chinese_segmenter=None))
  assert per_instance == data_settings.InstanceSettings(
      max_seq_length=128, short_seq_prob=0.1, masked_lm_prob=0.2, max_predictions_per_seq=20,
      dupe_factor=3, do_whole_word_mask=True, random_seed=12345, chinese_segmenter="")


def run_script(args):
  return cli.run_script("create_pretraining_data.py", args, timeout=120)


assert_one_line_error = cli.assert_one_line_error


def test_script_missing_input_and_vocab(tmp_path):
  vocab = write_vocab(tmp_path)
  missing = str(tmp_path / "nope*.txt")
  result = run_script(["--input_file=" + missing, "--output_file=" + str(tmp_path / "o"),
                       "--vocab_file=" + vocab])
  assert_one_line_error(result, missing)
  corpus = write_text(tmp_path / "c.txt", "the cat\n")
  missing_vocab = str(tmp_path / "missing_vocab.txt")
  result = run_script(["--input_file=" + corpus, "--output_file=" + str(tmp_path / "o"),
                       "--vocab_file=" + missing_vocab])
  assert_one_line_error(result, missing_vocab)


def test_script_writes_round_robin(tmp_path):
  text, _ = make_english_corpus(seed=6, num_documents=8)
  corpus = write_text(tmp_path / "c.txt", text)
  outputs = [str(tmp_path / "x-0.tfrecord"), str(tmp_path / "x-1.tfrecord")]
  result = run_script(["--input_file=" + corpus, "--output_file=" + ",".join(outputs),
                       "--vocab_file=" + write_vocab(tmp_path), "--max_seq_length=24",
                       "--max_predictions_per_seq=4", "--dupe_factor=2"])
  assert result.returncode == 0, result.stderr
  counts = [len(read_records(path)) for path in outputs]
  assert counts[0] - counts[1] in (0, 1) and counts[1] > 0
  for path in outputs:
    for example in read_records(path):
      check_instance(decode(example), max_seq_length=24, max_predictions=4)
  assert "instances: %d" % sum(counts) in result.stderr


def trace_instances(examples, streams):
  """Checks each instance's format and traces its segments back to documents.

  Returns:
    list of (next_sentence_label, documents segment A can come from, those of B); an
    actual next sentence (label 0) shares a document with its segment A.
  """
  traced = []
  for example in examples:
    _, tokens_a, tokens_b, _, _, label = check_instance(decode(example))
    documents_a = contiguous_in(tokens_a, streams)
    documents_b = contiguous_in(tokens_b, streams)
    assert documents_a and documents_b
    if label == 0:
      assert set(documents_a) & set(documents_b)
    traced.append((label, documents_a, documents_b))
  return traced


def test_worker_processes_are_deterministic_and_keep_the_format(tmp_path):
  text, documents = make_chinese_corpus(seed=7, num_documents=20)
  first, stats = run_cpd(tmp_path, text, name="w2a", num_workers=2, do_whole_word_mask=True)
  second, _ = run_cpd(tmp_path, text, name="w2b", num_workers=2, do_whole_word_mask=True)
  three, _ = run_cpd(tmp_path, text, name="w3", num_workers=3, do_whole_word_mask=True)
  data = []
  for path in (first[0], second[0], three[0]):
    with open(path, "rb") as f:
      data.append(f.read())
  assert data[0] == data[1]
  assert data[0] != data[2]
  examples = read_records(first[0])
  assert len(examples) == stats.instances > 0
  assert stats.documents_without_instances == 0
  traced = trace_instances(examples, document_streams(documents, chinese_ids))
  assert set(label for label, _, _ in traced) == set([0, 1])
  # Whole words survive the trip to the worker processes.
  partial, full = split_groups(first[0], chinese_groups)
  assert partial == 0 and full > 10


def test_negative_num_workers_is_an_error(tmp_path):
  text, _ = make_english_corpus(seed=8, num_documents=3)
  with pytest.raises(UsageError, match="num_workers"):
    run_cpd(tmp_path, text, num_workers=-1)


def test_whole_word_tokenizing_keeps_tokens_and_marks_word_characters(tmp_path):
  tokenizer = tokenization.FullTokenizer(write_vocab(tmp_path), do_lower_case=True)
  line = u"北京 是 天安门，Cats playing! 中国人民 xyz 我爱"
  tokens = text_input.tokenize_line(tokenizer, line, do_whole_word_mask=True)
  assert [str(token) for token in tokens] == tokenizer.tokenize(line)
  continues = [isinstance(token, text_input.WordContinuation) for token in tokens]
  # 北 京 | 是 | 天 安 门 ， cat ##s play ##ing ! | 中 国 人 民 | [UNK] | 我 爱
  assert [str(t) for t in tokens] == [
      "北", "京", "是", "天", "安", "门", "[UNK]", "cat", "##s", "play", "##ing", "[UNK]",
      "中", "国", "人", "民", "[UNK]", "我", "爱"]
  assert continues == [False, True, False, False, True, True, False, False, False, False,
                       False, False, False, True, True, True, False, False, True]
  assert not any(isinstance(token, text_input.WordContinuation)
                 for token in text_input.tokenize_line(tokenizer, line,
                                                       do_whole_word_mask=False))


def test_unsegmented_chinese_lines_mask_single_characters(tmp_path):
  # Raw Chinese (no spaces between characters): grouping the whole run up to the next
  # space would make clause-long "words"; Google's script masks characters one by one.
  tokenizer = tokenization.FullTokenizer(write_vocab(tmp_path), do_lower_case=True)
  raw = u"北京是中国人民的天安门，cats playing"
  tokens = text_input.tokenize_line(tokenizer, raw, do_whole_word_mask=True)
  assert [str(token) for token in tokens] == tokenizer.tokenize(raw)
  assert not any(isinstance(token, text_input.WordContinuation) for token in tokens)
  assert not text_input.is_segmented_chinese(raw.replace(" ", "")) and \
      not text_input.is_segmented_chinese(u"中国 cats 北京") and \
      text_input.is_segmented_chinese(u"北京 是")


# ---------------------------------------------------------------------------
# Streaming in chunks
# ---------------------------------------------------------------------------


def make_long_sentence_corpus(seed, num_documents):
  """English documents of 2-4 sentences of 6-9 words: a segment A is long enough
  to name its document, so instances can be traced back to documents."""
  rng = random.Random(seed)
  words = sorted(ENGLISH_PIECES)
  documents = [[[rng.choice(words) for _ in range(rng.randint(6, 9))] + ["."]
                for _ in range(rng.randint(2, 4))] for _ in range(num_documents)]
  text = "\n\n".join("\n".join(" ".join(sentence) for sentence in document)
                     for document in documents) + "\n"
  return text, documents


@pytest.mark.parametrize("num_workers", [1, 2])
def test_chunks_keep_the_format_and_next_sentences_within_a_chunk(tmp_path, num_workers):
  docs_per_chunk = 5
  text, documents = make_long_sentence_corpus(seed=9, num_documents=23)
  outputs, stats = run_cpd(tmp_path, text, name="a", dupe_factor=2, num_workers=num_workers,
                           docs_per_chunk=docs_per_chunk)
  again, _ = run_cpd(tmp_path, text, name="b", dupe_factor=2, num_workers=num_workers,
                     docs_per_chunk=docs_per_chunk)
  with open(outputs[0], "rb") as f, open(again[0], "rb") as g:
    assert f.read() == g.read()
  assert stats.chunks == 5
  assert stats.documents == len(documents)
  assert stats.documents_without_instances == 0
  examples = read_records(outputs[0])
  assert len(examples) == stats.instances > 0
  named = set()
  random_next_checked = 0
  labels_seen = set()
  for label, documents_a, documents_b in trace_instances(
      examples, document_streams(documents, english_ids)):
    labels_seen.add(label)
    if len(documents_a) == 1:
      named.add(documents_a[0])
      if label == 1 and len(documents_b) == 1:
        # A random next sentence comes from the same chunk of the input.
        assert documents_a[0] // docs_per_chunk == documents_b[0] // docs_per_chunk
        random_next_checked += 1
  assert labels_seen == set([0, 1])
  assert named == set(range(len(documents)))  # every document gave an instance
  assert random_next_checked > 10


def reference_records(text, vocab_file, seed, docs_per_chunk, dupe_factor):
  """Google's algorithm, chunk by chunk with one random stream, written out directly:
  documents split by blank lines, each chunk shuffled, dupe_factor passes, the
  chunk's instances shuffled."""
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  documents = []
  for block in text.split("\n\n"):
    sentences = [tokenizer.tokenize(line) for line in block.split("\n") if line.strip()]
    sentences = [sentence for sentence in sentences if sentence]
    if sentences:
      documents.append(sentences)
  vocab_words = list(tokenizer.vocab.keys())
  rng = random.Random(seed)
  size = docs_per_chunk or len(documents)
  records = []
  for start in range(0, len(documents), size):
    chunk = documents[start:start + size]
    rng.shuffle(chunk)
    instances = []
    for _ in range(dupe_factor):
      for index in range(len(chunk)):
        instances.extend(training_instances.create_instances_from_document(
            chunk, index, MAX_SEQ_LENGTH, 0.1, 0.15, MAX_PREDICTIONS, vocab_words, rng))
    rng.shuffle(instances)
    records.extend(record_writing.serialize_instance(instance, tokenizer, MAX_SEQ_LENGTH,
                                                     MAX_PREDICTIONS)
                   for instance in instances)
  return records


@pytest.mark.parametrize("docs_per_chunk", [0, 100, 7])
def test_one_worker_follows_googles_single_stream_per_chunk(tmp_path, docs_per_chunk):
  # 0 and 100 hold the 30 documents in one chunk: exactly Google's algorithm.
  text, _ = make_english_corpus(seed=10, num_documents=30)
  outputs, stats = run_cpd(tmp_path, text, seed=77, dupe_factor=3, num_workers=1,
                           docs_per_chunk=docs_per_chunk)
  expected = reference_records(text, str(tmp_path / "vocab.txt"), 77, docs_per_chunk, 3)
  assert list(tf.io.tf_record_iterator(outputs[0])) == expected
  assert stats.chunks == (5 if docs_per_chunk == 7 else 1)


def test_reader_is_consumed_one_chunk_at_a_time(tmp_path, monkeypatch):
  # Counts the documents read but not yet handed on: reading the whole corpus
  # before working on it would make this the corpus size.
  read = [0]
  handed_on = [0]
  held = []
  real_reader = text_input.read_raw_documents
  real_tokenize_chunk = parallel.tokenize_chunk

  def counting_reader(*args, **kwargs):
    for document in real_reader(*args, **kwargs):
      read[0] += 1
      yield document

  def recording_tokenize_chunk(raw_documents, *args, **kwargs):
    held.append(read[0] - handed_on[0])
    handed_on[0] += len(raw_documents)
    return real_tokenize_chunk(raw_documents, *args, **kwargs)

  monkeypatch.setattr(text_input, "read_raw_documents", counting_reader)
  monkeypatch.setattr(parallel, "tokenize_chunk", recording_tokenize_chunk)
  text, documents = make_english_corpus(seed=11, num_documents=23)
  _, stats = run_cpd(tmp_path, text, dupe_factor=1, docs_per_chunk=5, num_workers=2)
  assert read[0] == handed_on[0] == len(documents) == stats.documents
  assert held == [5, 5, 5, 5, 3]


def traced_peak_bytes(tmp_path, name, num_documents, docs_per_chunk):
  """Peak Python heap (tracemalloc) of one in-process run."""
  text, _ = make_english_corpus(seed=12, num_documents=num_documents)
  tracemalloc.start()
  try:
    run_cpd(tmp_path, text, name=name, dupe_factor=2, num_workers=1,
            docs_per_chunk=docs_per_chunk)
    return tracemalloc.get_traced_memory()[1]
  finally:
    tracemalloc.stop()


def test_peak_memory_follows_the_chunk_not_the_corpus(tmp_path):
  run_cpd(tmp_path, make_english_corpus(seed=12, num_documents=5)[0], name="warm_up")
  small = traced_peak_bytes(tmp_path, "small", 150, docs_per_chunk=20)
  large = traced_peak_bytes(tmp_path, "large", 600, docs_per_chunk=20)
  whole = traced_peak_bytes(tmp_path, "whole", 600, docs_per_chunk=0)
  # Four times the corpus in chunks of the same size: about the same peak.
  assert large < 1.5 * small, (small, large)
  # The measurement sees a corpus held at once (the peak grows with the corpus).
  assert whole > 3 * large, (large, whole)


def test_a_failure_leaves_the_old_output_and_no_temp_file(tmp_path, monkeypatch):
  output = write_text(tmp_path / "o.tfrecord", "old")
  calls = [0]
  real_create_chunk_records = parallel.create_chunk_records

  def failing_second_chunk(*args, **kwargs):
    calls[0] += 1
    if calls[0] == 2:
      raise RuntimeError("disk full")
    return real_create_chunk_records(*args, **kwargs)

  monkeypatch.setattr(parallel, "create_chunk_records", failing_second_chunk)
  text, _ = make_english_corpus(seed=13, num_documents=12)
  with pytest.raises(RuntimeError, match="disk full"):
    run_cpd(tmp_path, text, name="o", output_names=["o.tfrecord"], docs_per_chunk=5)
  assert calls[0] == 2
  with open(output) as f:
    assert f.read() == "old"
  assert not [n for n in os.listdir(str(tmp_path)) if n.endswith(".tmp")]


def test_bad_chunk_size_is_an_error(tmp_path):
  text, _ = make_english_corpus(seed=8, num_documents=3)
  with pytest.raises(UsageError, match="docs_per_chunk"):
    run_cpd(tmp_path, text, docs_per_chunk=-1)


# ---------------------------------------------------------------------------
# Progress
# ---------------------------------------------------------------------------

PROGRESS_RE = re.compile(
    r"Progress: ([\d.]+)% done; read [\d.]+ [KMG]B of [\d.]+ [KMG]B, (\d+) documents; (\d+) "
    r"instances written \([\d.]+/s\); elapsed \d+:\d\d:\d\d, ETA (\d+:\d\d:\d\d|unknown)")


def test_progress_log_eta_and_rate_limit():
  now = [100.0]
  lines = []
  progress = parallel.ProgressLog(2000000, interval_seconds=5.0, clock=lambda: now[0],
                                  log_function=lambda fmt, *args: lines.append(fmt % args))
  now[0] = 104.0
  progress.maybe_log()
  assert not lines  # under the interval
  now[0] = 105.0
  progress.maybe_log()
  assert len(lines) == 1 and lines[0].endswith("ETA unknown")
  progress.bytes_read = 800000
  progress.documents_read = 40
  progress.bytes_done = 500000.0
  progress.instances_written = 30
  now[0] = 109.0
  progress.maybe_log()
  assert len(lines) == 1
  now[0] = 110.0
  progress.maybe_log()
  assert len(lines) == 2
  # 10 s for a quarter of the bytes: 30 s to go; 30 instances in 10 s.
  assert lines[1] == ("Progress: 25.0% done; read 800.0 KB of 2.0 MB, 40 documents; 30 "
                      "instances written (3.0/s); elapsed 0:00:10, ETA 0:00:30")


class ListHandler(logging.Handler):

  def __init__(self):
    logging.Handler.__init__(self)
    self.messages = []

  def emit(self, record):
    self.messages.append(record.getMessage())


def test_progress_lines_appear_with_an_eta(tmp_path):
  handler = ListHandler()
  logger = tf.get_logger()
  verbosity = tf.logging.get_verbosity()
  logger.addHandler(handler)
  tf.logging.set_verbosity(tf.logging.INFO)
  try:
    text, _ = make_english_corpus(seed=14, num_documents=12)
    _, stats = run_cpd(tmp_path, text, dupe_factor=2, docs_per_chunk=5, num_workers=2,
                       progress_interval_seconds=0.0)
  finally:
    logger.removeHandler(handler)
    tf.logging.set_verbosity(verbosity)
  matches = [PROGRESS_RE.search(message) for message in handler.messages]
  matches = [match for match in matches if match]
  assert len(matches) > 10
  # An ETA is given while the work is under way.
  assert [match for match in matches
          if match.group(4) != "unknown" and float(match.group(1)) < 100.0]
  last = matches[-1]
  assert float(last.group(1)) == 100.0
  assert int(last.group(2)) == stats.documents == 12
  assert int(last.group(3)) == stats.instances
  assert last.group(4) == "0:00:00"
  # Shares done never go down.
  shares = [float(match.group(1)) for match in matches]
  assert shares == sorted(shares)


# ---------------------------------------------------------------------------
# --chinese_segmenter=jieba
# ---------------------------------------------------------------------------


def is_basic_cjk(char):
  return u"\u4e00" <= char <= u"\u9fff"


def jieba_word_starts(jieba, line):
  """Per character of the line: whether it starts a masking group, from jieba.lcut.

  The characters of one jieba word are one group where they are Chinese;
  anything else is a group of its own."""
  starts = []
  for word in jieba.lcut(line):
    for index, char in enumerate(word):
      starts.append(index == 0 or not (is_basic_cjk(char) and is_basic_cjk(word[index - 1])))
  return starts


def vocab_for(tmp_path, text, name="jieba_vocab.txt"):
  chars = sorted(set(char for char in text if not char.isspace()))
  return write_text(tmp_path / name, "".join(token + "\n" for token in SPECIAL + chars))


def test_jieba_words_are_the_whole_word_groups(tmp_path):
  jieba = pytest.importorskip("jieba")
  line = u"我爱北京天安门，北京是中国的首都。今天天气很好，我们一起去公园散步吧。"
  tokenizer = tokenization.FullTokenizer(vocab_for(tmp_path, line), do_lower_case=True)
  segment = text_input.load_chinese_segmenter("jieba")
  tokens = text_input.tokenize_line(tokenizer, line, True, segment)
  assert [str(token) for token in tokens] == list(line) == tokenizer.tokenize(line)
  starts = jieba_word_starts(jieba, line)
  assert [not isinstance(token, text_input.WordContinuation) for token in tokens] == starts
  expected_groups = []
  for position, start in enumerate(starts, 1):  # position 0 is [CLS]
    if start:
      expected_groups.append([position])
    else:
      expected_groups[-1].append(position)
  groups = training_instances.whole_word_candidates(["[CLS]"] + tokens + ["[SEP]"], True)
  assert sorted(groups) == expected_groups
  assert max(len(group) for group in groups) >= 3  # e.g. 天安门
  # Without the segmenter, unspaced Chinese is masked character by character (Google's).
  plain = text_input.tokenize_line(tokenizer, line, True)
  assert not any(isinstance(token, text_input.WordContinuation) for token in plain)


def test_jieba_keeps_the_tokens_of_mixed_text(tmp_path):
  pytest.importorskip("jieba")
  # jieba cuts accented Latin letters and kana one character at a time; the
  # tokens must stay those of BERT's tokenizer.
  line = u"iPhone手机很好用 café的咖啡カタカナ 3.5%的T恤"
  vocab = SPECIAL + sorted(set(c for c in line if tokenization.is_cjk_character(c))) + [
      "iphone", "cafe", "caf", "3", "5", ".", "%", "t", "カタカナ"]
  vocab_file = write_text(tmp_path / "mixed_vocab.txt", "".join(t + "\n" for t in vocab))
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  tokens = text_input.tokenize_line(tokenizer, line, True,
                                    text_input.load_chinese_segmenter("jieba"))
  assert [str(token) for token in tokens] == tokenizer.tokenize(line)
  assert "cafe" in tokens and "カタカナ" in tokens
  # 手机 is one jieba word.
  assert isinstance(tokens[tokens.index(u"手") + 1], text_input.WordContinuation)


JIEBA_CORPUS_WORDS = [
    u"我们", u"今天", u"天气", u"公园", u"散步", u"北京", u"上海", u"学生", u"老师", u"学校",
    u"喜欢", u"电脑", u"手机", u"音乐", u"电影", u"朋友", u"时间", u"工作", u"问题", u"发展",
    u"经济", u"社会", u"文化", u"历史", u"的", u"了", u"是", u"在", u"很", u"去"]


def make_raw_chinese_corpus(seed, num_documents):
  """Chinese documents without spaces; returns (text, documents as lists of lines)."""
  rng = random.Random(seed)
  documents = []
  for _ in range(num_documents):
    lines = []
    for _ in range(rng.randint(1, 5)):
      words = [rng.choice(JIEBA_CORPUS_WORDS) for _ in range(rng.randint(4, 10))]
      if rng.random() < 0.5:
        words.insert(rng.randint(1, len(words) - 1), u"，")
      lines.append(u"".join(words))
    documents.append(lines)
  text = u"\n\n".join(u"\n".join(lines) for lines in documents) + u"\n"
  return text, documents


def jieba_split_groups(path, vocab, documents, jieba):
  """Counts (jieba words partly masked, multi-character jieba words fully masked).

  Each segment of an instance is a run of one document's characters; a run
  that occurs where jieba cuts differently is left out."""
  streams = [u"".join(lines) for lines in documents]
  starts = [[s for line in lines for s in jieba_word_starts(jieba, line)] for lines in documents]
  partial = full = checked = 0
  for example in read_records(path):
    features = decode(example)
    original, tokens_a, tokens_b, positions, _, _ = check_instance(features)
    masked = set(positions)
    first_sep = len(tokens_a) + 1
    for offset, ids in ((1, tokens_a), (first_sep + 1, tokens_b)):
      run = u"".join(vocab[i] for i in ids)
      cuts = set()
      for stream, stream_starts in zip(streams, starts):
        found = stream.find(run)
        while found >= 0:
          cuts.add(tuple(stream_starts[found + 1:found + len(run)]))
          found = stream.find(run, found + 1)
      assert cuts, run
      if len(cuts) > 1:
        continue
      checked += 1
      run_starts = (True,) + cuts.pop()
      groups = []
      for index, start in enumerate(run_starts):
        if start:
          groups.append([offset + index])
        else:
          groups[-1].append(offset + index)
      for group in groups:
        hits = len(masked.intersection(group))
        if len(group) > 1 and hits == len(group):
          full += 1
        elif 0 < hits < len(group):
          partial += 1
  assert checked > 50
  return partial, full


def test_jieba_whole_word_masking_in_worker_processes(tmp_path):
  jieba = pytest.importorskip("jieba")
  text, documents = make_raw_chinese_corpus(seed=15, num_documents=30)
  vocab_file = vocab_for(tmp_path, text)
  with open(vocab_file, encoding="utf-8") as f:
    vocab = f.read().split("\n")
  input_path = write_text(tmp_path / "raw.txt", text)
  whole = str(tmp_path / "whole.tfrecord")
  settings = data_settings.DataSettings(
      input_file=input_path, output_file=whole, vocab_file=vocab_file,
      max_seq_length=MAX_SEQ_LENGTH, max_predictions_per_seq=MAX_PREDICTIONS, dupe_factor=3,
      num_workers=2, docs_per_chunk=12)
  pipeline.create_pretraining_data(settings._replace(do_whole_word_mask=True,
                                                     chinese_segmenter="jieba"))
  partial, full = jieba_split_groups(whole, vocab, documents, jieba)
  assert partial == 0
  assert full > 20
  # Words of jieba's size fill the masking budget; a whole unspaced run, too
  # long to mask, would leave much of it unused.
  masked = budget = 0
  for example in read_records(whole):
    features = decode(example)
    masked += int(sum(features["masked_lm_weights"][1]))
    budget += min(MAX_PREDICTIONS, max(1, int(round(sum(features["input_mask"][1]) * 0.15))))
  assert masked > 0.9 * budget
  # Character masking splits jieba's words, so the check above can fail.
  pieces = str(tmp_path / "pieces.tfrecord")
  pipeline.create_pretraining_data(settings._replace(output_file=pieces))
  assert jieba_split_groups(pieces, vocab, documents, jieba)[0] > 0


def test_segmenter_errors(tmp_path, monkeypatch):
  text, _ = make_english_corpus(seed=16, num_documents=3)
  with pytest.raises(UsageError, match="unknown segmenter"):
    run_cpd(tmp_path, text, do_whole_word_mask=True, chinese_segmenter="thulac")
  with pytest.raises(UsageError, match="do_whole_word_mask"):
    run_cpd(tmp_path, text, chinese_segmenter="jieba")
  # An import of jieba fails as if it were not installed.
  monkeypatch.setitem(sys.modules, "jieba", None)
  with pytest.raises(UsageError, match="pip install jieba"):
    run_cpd(tmp_path, text, do_whole_word_mask=True, chinese_segmenter="jieba")


def test_script_without_jieba_is_one_line_error(tmp_path):
  corpus = write_text(tmp_path / "c.txt", u"北京是首都\n")
  argv = [SCRIPT_PATH, "--input_file=" + corpus, "--output_file=" + str(tmp_path / "o"),
          "--vocab_file=" + write_vocab(tmp_path), "--do_whole_word_mask",
          "--chinese_segmenter=jieba"]
  code = ("import runpy, sys; sys.modules['jieba'] = None; sys.argv = %r; "
          "runpy.run_path(%r, run_name='__main__')" % (argv, SCRIPT_PATH))
  result = subprocess.run([sys.executable, "-c", code], cwd=cli.REPO_DIR, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
  assert_one_line_error(result, "--chinese_segmenter=jieba", "pip install jieba")
  assert not os.path.exists(str(tmp_path / "o"))


# ---------------------------------------------------------------------------
# Review fixes: encodings, output paths, chunk size
# ---------------------------------------------------------------------------

def cpd_on_file(tmp_path, input_path, output=None, **kwargs):
  settings = dict(max_seq_length=MAX_SEQ_LENGTH, max_predictions_per_seq=MAX_PREDICTIONS,
                  dupe_factor=1)
  settings.update(kwargs)
  return pipeline.create_pretraining_data(data_settings.DataSettings(
      input_file=input_path, output_file=output or str(tmp_path / "o.tfrecord"),
      vocab_file=write_vocab(tmp_path), **settings))


def test_a_gbk_corpus_is_an_error_not_a_silently_thinned_corpus(tmp_path):
  text, _ = make_chinese_corpus(seed=3, num_documents=40)
  english, _ = make_english_corpus(seed=3, num_documents=40)
  # English lines survive in any encoding; the Chinese ones are not UTF-8 in GBK.
  mixed = "\n\n".join(a + "\n" + b for a, b in zip(text.split("\n\n"), english.split("\n\n")))
  path = tmp_path / "gbk.txt"
  with open(str(path), "wb") as f:
    f.write(mixed.encode("gbk"))
  output = tmp_path / "o.tfrecord"
  with pytest.raises(UsageError, match=r"gbk\.txt: \d+ of its first \d+ lines are not valid "
                                       r"UTF-8.*iconv -f gbk -t utf-8"):
    cpd_on_file(tmp_path, str(path), str(output))
  assert not output.exists()


def test_a_utf16_corpus_is_an_error(tmp_path):
  path = tmp_path / "utf16.txt"
  with open(str(path), "wb") as f:
    f.write(u"the cat sat .\n\nthe dog ran .\n".encode("utf-16"))
  with pytest.raises(UsageError, match=r"utf16\.txt is UTF-16"):
    cpd_on_file(tmp_path, str(path))


def test_bad_output_paths_fail_before_any_work(tmp_path):
  text, _ = make_english_corpus(seed=4, num_documents=5)
  corpus = write_text(tmp_path / "c.txt", text)
  twice = "%s,%s" % (tmp_path / "d.tfrecord", tmp_path / "d.tfrecord")
  with pytest.raises(UsageError, match="names .*d.tfrecord twice"):
    cpd_on_file(tmp_path, corpus, twice)
  assert not (tmp_path / "d.tfrecord").exists()
  (tmp_path / "adir").mkdir()
  with pytest.raises(UsageError, match="is a directory"):
    cpd_on_file(tmp_path, corpus, str(tmp_path / "adir"))


def test_chunks_of_one_document_are_refused(tmp_path):
  text, _ = make_english_corpus(seed=5, num_documents=5)
  with pytest.raises(UsageError, match="docs_per_chunk=1: give 2 or more"):
    cpd_on_file(tmp_path, write_text(tmp_path / "c.txt", text), docs_per_chunk=1)


def test_progress_percentage_is_the_share_done_not_read():
  lines = []
  progress = parallel.ProgressLog(10000, interval_seconds=0.0, clock=lambda: 10.0,
                                  log_function=lambda fmt, *args: lines.append(fmt % args))
  progress.bytes_read, progress.bytes_done = 8000, 2000.0
  progress.maybe_log()
  assert lines[-1].startswith("Progress: 20.0% done; read 8.0 KB of 10.0 KB,"), lines[-1]


def test_a_document_without_blank_lines_for_too_long_is_warned_about(tmp_path, monkeypatch):
  monkeypatch.setattr(text_input, "LONG_DOCUMENT_LINES", 6)
  handler = ListHandler()
  tf.get_logger().addHandler(handler)
  try:
    text, _ = make_english_corpus(seed=15, num_documents=8)
    run_cpd(tmp_path, text.replace("\n\n", "\n"), dupe_factor=1)  # one long document
  finally:
    tf.get_logger().removeHandler(handler)
  assert [m for m in handler.messages if "without a blank line" in m and "line 6" in m]


# ---------------------------------------------------------------------------
# Stopping: Ctrl-C and SIGTERM while the worker processes run
# ---------------------------------------------------------------------------

# Seconds for the script to reach its worker pool, and to end after the signal.
STOP_START_TIMEOUT_SECONDS = 240
STOP_END_TIMEOUT_SECONDS = 60


def process_start_time(pid):
  """Field 22 of /proc/<pid>/stat (start time), or None when the process is gone or a zombie.

  With the pid it names one process even if the pid is reused later.
  """
  try:
    with open("/proc/%d/stat" % pid) as f:
      stat = f.read()
  except OSError:
    return None
  fields = stat[stat.rindex(")") + 2:].split()  # fields 3 (state), 4, ...
  return None if fields[0] in ("Z", "X") else fields[19]


def running_children(pid):
  """dict pid -> start time of the live children of process `pid` (Linux /proc)."""
  pids = set()
  for path in glob.glob("/proc/%d/task/*/children" % pid):
    try:
      with open(path) as f:
        pids.update(int(child) for child in f.read().split())
    except OSError:  # the thread or the process ended
      pass
  children = {}
  for child in pids:
    start = process_start_time(child)
    if start is not None:
      children[child] = start
  return children


def signal_mask(pid, field):
  """The set of signals in `field` ("SigIgn", "SigCgt") of /proc/<pid>/status."""
  with open("/proc/%d/status" % pid) as f:
    for line in f:
      if line.startswith(field + ":"):
        mask = int(line.split()[1], 16)
        return set(signum for signum in range(1, 65) if mask >> (signum - 1) & 1)
  raise AssertionError("no %s in /proc/%d/status" % (field, pid))


@contextlib.contextmanager
def script_in_own_session(args, stderr_path):
  """Starts the script in the background in a session (process group) of its own, as a
  shell starts a job, its stderr going to `stderr_path`; on leaving, kills the whole group
  (the script and any worker left behind) and reaps the script."""
  with open(stderr_path, "w") as stderr:
    process = subprocess.Popen(
        [sys.executable, cli.script_path("create_pretraining_data.py")] + list(args),
        cwd=cli.REPO_DIR, env=cli.script_env(), stdout=subprocess.DEVNULL, stderr=stderr,
        start_new_session=True)
  try:
    yield process
  finally:
    try:
      os.killpg(process.pid, signal.SIGKILL)
    except OSError:  # the group is gone: nothing left running
      pass
    process.wait()


def stop_while_the_workers_run(tmp_path, send_signal):
  """Runs the script with 2 workers on a corpus that keeps them busy for seconds, calls
  `send_signal(process)` while both workers run, and waits for the end.

  Returns:
    dict with returncode, stderr (all of it), stderr_after (written after the signal),
    workers (pid -> start time at the signal), dispositions (pid -> the sets of
    signals the worker ignored and caught, just before the signal), outputs (the
    output paths) and leftover_workers (those still alive a few seconds after the
    end).
  """
  text, _ = make_english_corpus(seed=21, num_documents=8000)
  corpus = write_text(tmp_path / "corpus.txt", text)
  outputs = [str(tmp_path / "stop-0.tfrecord"), str(tmp_path / "stop-1.tfrecord")]
  args = ["--input_file=" + corpus, "--output_file=" + ",".join(outputs),
          "--vocab_file=" + write_vocab(tmp_path), "--max_seq_length=32",
          "--max_predictions_per_seq=6", "--dupe_factor=10", "--num_workers=2",
          "--docs_per_chunk=0"]
  stderr_path = str(tmp_path / "stderr.txt")

  def stderr():
    with open(stderr_path, encoding="utf-8", errors="replace") as f:
      return f.read()

  with script_in_own_session(args, stderr_path) as process:
    deadline = time.time() + STOP_START_TIMEOUT_SECONDS

    def wait_for(condition, what):
      while not condition():
        assert process.poll() is None, "the run ended before %s:\n%s" % (what, stderr()[-3000:])
        assert time.time() < deadline, "%s did not happen in time:\n%s" % (what, stderr()[-3000:])
        time.sleep(0.05)

    wait_for(lambda: "*** Reading" in stderr(), "the run started")
    # The same two workers for half a second: the pool runs (and its workers are past
    # their initializer).
    seen = {"children": {}, "since": time.time()}

    def pool_running():
      children = running_children(process.pid)
      if children != seen["children"]:
        seen["children"], seen["since"] = children, time.time()
      return len(children) == 2 and time.time() - seen["since"] >= 0.5

    wait_for(pool_running, "the 2 worker processes ran")
    workers = seen["children"]
    dispositions = {pid: (signal_mask(pid, "SigIgn"), signal_mask(pid, "SigCgt"))
                    for pid in workers}
    offset = len(stderr())
    send_signal(process)
    returncode = process.wait(timeout=STOP_END_TIMEOUT_SECONDS)
    end = time.time() + 5
    while time.time() < end and any(process_start_time(pid) == start
                                    for pid, start in workers.items()):
      time.sleep(0.05)
    leftover = [pid for pid, start in workers.items() if process_start_time(pid) == start]
    output = stderr()
  return {"returncode": returncode, "stderr": output, "stderr_after": output[offset:],
          "workers": workers, "dispositions": dispositions, "outputs": outputs,
          "leftover_workers": leftover}


def check_stopped_cleanly(tmp_path, run, returncode, message):
  output = run["stderr"]
  assert run["returncode"] == returncode, output[-3000:]
  assert "Traceback" not in output, output[-5000:]
  # After the signal: the one line, and nothing from the workers ("Process
  # ForkPoolWorker-1:" ...).
  lines = [line for line in run["stderr_after"].splitlines()
           if line.strip() and not line.startswith("INFO:tensorflow:")]
  assert lines == [message], run["stderr_after"][-3000:]
  assert not run["leftover_workers"], "workers still alive: %s" % run["leftover_workers"]
  for path in run["outputs"]:
    assert not os.path.exists(path), path
  assert not [name for name in os.listdir(str(tmp_path)) if name.endswith(".tmp")], \
      os.listdir(str(tmp_path))
  # Only the main process decides: the workers ignore Ctrl-C and end at once on SIGTERM
  # (they do not run the main process's handlers).
  for pid, (ignored, caught) in run["dispositions"].items():
    assert signal.SIGINT in ignored, "worker %d did not ignore SIGINT" % pid
    assert signal.SIGTERM not in caught, "worker %d caught SIGTERM" % pid


def test_ctrl_c_stops_the_workers_and_leaves_no_file(tmp_path):
  # A terminal sends Ctrl-C to the whole process group: the script and its workers.
  run = stop_while_the_workers_run(
      tmp_path, lambda process: os.killpg(process.pid, signal.SIGINT))
  check_stopped_cleanly(tmp_path, run, 130, "Interrupted (Ctrl-C).")


def test_sigterm_stops_the_workers_and_leaves_no_file(tmp_path):
  # Slurm and Kubernetes send SIGTERM to the main process.
  run = stop_while_the_workers_run(
      tmp_path, lambda process: os.kill(process.pid, signal.SIGTERM))
  check_stopped_cleanly(tmp_path, run, 143, "Stopped by SIGTERM; no output written.")


@contextlib.contextmanager
def signal_handlers_kept():
  """Puts pytest's SIGINT and SIGTERM handlers back afterwards."""
  previous = dict((signum, signal.getsignal(signum))
                  for signum in signals.StopOnSignals.SIGNALS)
  try:
    yield
  finally:
    for signum, handler in previous.items():
      signal.signal(signum, handler)


def test_stop_on_signals_raises_once_then_ignores():
  with signal_handlers_kept():
    before = signal.getsignal(signal.SIGINT)
    with signals.StopOnSignals() as stop:
      pass
    assert stop.signum is None and signal.getsignal(signal.SIGINT) is before
    with pytest.raises(signals.Terminated):
      with signals.StopOnSignals() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
    assert stop.signum == signal.SIGTERM
    # On its way out the process ignores any further signal.
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    with pytest.raises(KeyboardInterrupt):
      with signals.StopOnSignals() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    with signals.StopOnSignals() as stop:
      stop.stop_raising()
      os.kill(os.getpid(), signal.SIGTERM)
      time.sleep(0.1)
    assert stop.signum == signal.SIGTERM


def test_a_signal_while_the_outputs_are_renamed_lets_the_run_finish(tmp_path, monkeypatch):
  # All output files get their names, or none: a stop there would leave some renamed.
  real_commit = record_writing.RoundRobinRecordWriter.commit

  def commit_under_sigterm(writer):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.1)
    return real_commit(writer)

  monkeypatch.setattr(record_writing.RoundRobinRecordWriter, "commit", commit_under_sigterm)
  text, _ = make_english_corpus(seed=22, num_documents=10)
  with signal_handlers_kept():
    with signals.StopOnSignals() as stop:
      outputs, stats = run_cpd(tmp_path, text, output_names=["s-0.tfrecord", "s-1.tfrecord"],
                               stop_signals=stop)
  assert stop.signum == signal.SIGTERM
  assert sum(len(read_records(path)) for path in outputs) == stats.instances > 0
  assert not [name for name in os.listdir(str(tmp_path)) if name.endswith(".tmp")]
