# coding=utf-8
"""Tests of create_pretraining_data.py: the TFRecord features, masking, next
sentence labels, whole-word masking, determinism, round-robin output and errors.

The checks rebuild the original token sequence of every instance from the
written features and look it up in the corpus the test wrote, tokenized by the
test itself with a hand-written word -> pieces table.
"""

import os
import random
import subprocess
import sys

import pytest
import tensorflow.compat.v1 as tf

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT_PATH = os.path.join(REPO_DIR, "create_pretraining_data.py")

import create_pretraining_data as cpd  # pylint: disable=g-import-not-at-top
from multigpu import UsageError  # pylint: disable=g-import-not-at-top

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


def run_cpd(tmp_path, corpus_text, name="out", seed=12345, output_names=None, **kwargs):
  """Writes the corpus and runs the pipeline in-process; returns (output paths, stats)."""
  input_path = write_text(tmp_path / (name + ".txt"), corpus_text)
  outputs = [str(tmp_path / n) for n in (output_names or [name + ".tfrecord"])]
  settings = dict(max_seq_length=MAX_SEQ_LENGTH, max_predictions_per_seq=MAX_PREDICTIONS,
                  dupe_factor=4, random_seed=seed)
  settings.update(kwargs)
  stats = cpd.create_pretraining_data(input_path, ",".join(outputs), write_vocab(tmp_path),
                                      **settings)
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
  stats = cpd.create_pretraining_data(
      "%s,%s" % (first, tmp_path / "sec*.txt"), output, write_vocab(tmp_path),
      max_seq_length=MAX_SEQ_LENGTH, max_predictions_per_seq=MAX_PREDICTIONS, dupe_factor=1)
  assert stats.skipped_lines == 1
  assert stats.first_skipped_line == "%s:2" % first
  assert stats.documents == 3
  assert stats.empty_documents == 1
  assert stats.instances == len(read_records(output)) > 0


def test_no_documents_is_an_error(tmp_path):
  input_path = write_text(tmp_path / "blank.txt", "\n\n  \n")
  with pytest.raises(UsageError, match="no document"):
    cpd.create_pretraining_data(input_path, str(tmp_path / "o.tfrecord"),
                                write_vocab(tmp_path))
  assert not os.path.exists(str(tmp_path / "o.tfrecord"))


def run_script(args):
  return subprocess.run([sys.executable, SCRIPT_PATH] + args, cwd=REPO_DIR,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        universal_newlines=True, timeout=120)


def assert_one_line_error(result, *must_contain):
  assert result.returncode == 1, result.stderr
  errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
  assert len(errors) == 1, result.stderr
  for text in must_contain:
    assert text in errors[0]
  assert "Traceback" not in result.stderr


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
  streams = document_streams(documents, chinese_ids)
  labels_seen = set()
  for example in examples:
    _, tokens_a, tokens_b, _, _, label = check_instance(decode(example))
    labels_seen.add(label)
    documents_a = contiguous_in(tokens_a, streams)
    documents_b = contiguous_in(tokens_b, streams)
    assert documents_a and documents_b
    if label == 0:
      assert set(documents_a) & set(documents_b)
  assert labels_seen == set([0, 1])
  # Whole words survive the trip to the worker processes.
  partial, full = split_groups(first[0], chinese_groups)
  assert partial == 0 and full > 10


def test_negative_num_workers_is_an_error(tmp_path):
  text, _ = make_english_corpus(seed=8, num_documents=3)
  with pytest.raises(UsageError, match="num_workers"):
    run_cpd(tmp_path, text, num_workers=-1)


def test_whole_word_tokenizing_keeps_tokens_and_marks_word_characters(tmp_path):
  import tokenization  # pylint: disable=g-import-not-at-top
  tokenizer = tokenization.FullTokenizer(write_vocab(tmp_path), do_lower_case=True)
  line = u"北京 是 天安门，Cats playing! 中国人民 xyz 我爱"
  tokens = cpd.tokenize_line(tokenizer, line, do_whole_word_mask=True)
  assert [str(token) for token in tokens] == tokenizer.tokenize(line)
  continues = [isinstance(token, cpd.WordContinuation) for token in tokens]
  # 北 京 | 是 | 天 安 门 ， cat ##s play ##ing ! | 中 国 人 民 | [UNK] | 我 爱
  assert [str(t) for t in tokens] == [
      "北", "京", "是", "天", "安", "门", "[UNK]", "cat", "##s", "play", "##ing", "[UNK]",
      "中", "国", "人", "民", "[UNK]", "我", "爱"]
  assert continues == [False, True, False, False, True, True, False, False, False, False,
                       False, False, False, True, True, True, False, False, True]
  assert not any(isinstance(token, cpd.WordContinuation)
                 for token in cpd.tokenize_line(tokenizer, line, do_whole_word_mask=False))
