# coding=utf-8
"""Tests of long_text.py (head-and-tail truncation, a document's windows), of
window_pooling.py (the pooling of the windows' vectors) and of tfrecord_io's windowed records.

Expected windows are written out by hand or follow from the rule stated in the docstring
(token k of a text is named "t<k>", so every window says where it starts); expected
pooling and batches are computed in NumPy from the inputs.
"""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import featurizing
from bert_mgpu.classifier import input_examples
from bert_mgpu.classifier import long_text
from bert_mgpu.classifier import window_pooling
from bert_mgpu.data import tfrecord_io
import multigpu
import tokenization

SPECIAL_IDS = {"[PAD]": 0, "[CLS]": 2, "[SEP]": 3}


def text(length, prefix="t"):
  return ["%s%d" % (prefix, k) for k in range(length)]


def to_ids(tokens):
  """Ids that tell the tokens apart: t<k> -> 100 + k, b<k> -> 500 + k."""
  offsets = {"t": 100, "b": 500}
  return [SPECIAL_IDS[t] if t in SPECIAL_IDS else offsets[t[0]] + int(t[1:]) for t in tokens]


def windows(tokens_a, tokens_b=None, max_seq_length=8, doc_stride=4, max_windows=None,
            **kwargs):
  return long_text.document_windows(tokens_a, tokens_b, max_seq_length, doc_stride,
                                    max_windows, to_ids, **kwargs)


def a_positions(window_tokens):
  """The positions in text_a of a window's text_a tokens."""
  return [int(t[1:]) for t in window_tokens if t.startswith("t")]


# ---------------------------------------------------------------------------
# head_tail
# ---------------------------------------------------------------------------

def test_head_tail_keeps_the_first_and_the_last_tokens():
  tokens = text(20)
  # room 8, default head: a quarter of the room = 2 tokens, then the last 6.
  assert long_text.head_tail(tokens, 8) == ["t0", "t1", "t14", "t15", "t16", "t17", "t18",
                                            "t19"]
  assert long_text.head_tail(tokens, 8, head_tokens=3) == ["t0", "t1", "t2", "t15", "t16",
                                                           "t17", "t18", "t19"]
  assert long_text.head_tail(tokens, 8, head_tokens=0) == text(20)[12:]
  assert long_text.head_tail(tokens, 8, head_tokens=8) == text(8)
  assert long_text.head_tail(tokens, 7) == ["t0", "t14", "t15", "t16", "t17", "t18", "t19"]


def test_head_tail_leaves_a_text_that_fits():
  tokens = text(8)
  kept = long_text.head_tail(tokens, 8, head_tokens=1)
  assert kept == text(8) and kept is not tokens
  assert long_text.head_tail([], 4) == []


@pytest.mark.parametrize("room,head", [(8, 9), (8, -1), (-1, None)])
def test_head_tail_refuses_impossible_sizes(room, head):
  with pytest.raises(ValueError):
    long_text.head_tail(text(20), room, head)


# ---------------------------------------------------------------------------
# document_windows
# ---------------------------------------------------------------------------

def test_single_text_windows_by_hand():
  # max_seq_length 8: 6 tokens of text_a per window; starts 0, 4, 8, 12, 16 (ends at 20).
  doc = windows(text(20))
  assert [a_positions(w) for w in doc.tokens] == [
      [0, 1, 2, 3, 4, 5], [4, 5, 6, 7, 8, 9], [8, 9, 10, 11, 12, 13],
      [12, 13, 14, 15, 16, 17], [16, 17, 18, 19]]
  assert doc.tokens[0] == ["[CLS]", "t0", "t1", "t2", "t3", "t4", "t5", "[SEP]"]
  assert doc.input_ids[4] == [2, 116, 117, 118, 119, 3, 0, 0]
  assert doc.input_mask[4] == [1, 1, 1, 1, 1, 1, 0, 0]
  assert doc.segment_ids == [[0] * 8] * 5
  assert doc.windows_cut == 0 and doc.text_b_cut == 0


@pytest.mark.parametrize("max_seq_length", [3, 5, 8, 11])
@pytest.mark.parametrize("doc_stride", [1, 3, 6, 20])
def test_windows_cover_the_text_with_the_stride(max_seq_length, doc_stride):
  room = max_seq_length - 2
  for length in range(0, 30):
    doc = windows(text(length), max_seq_length=max_seq_length, doc_stride=doc_stride)
    parts = [a_positions(w) for w in doc.tokens]
    starts = [part[0] if part else 0 for part in parts]
    assert starts[0] == 0
    # Starts doc_stride apart (one window apart if that is shorter: nothing skipped).
    assert all(b - a == min(doc_stride, room) for a, b in zip(starts, starts[1:]))
    for part in parts:  # consecutive tokens, a full window but for the last one
      assert part == list(range(part[0], part[0] + len(part))) if part else length == 0
    assert all(len(part) == room for part in parts[:-1])
    assert parts[-1][-1] + 1 == length if length else parts == [[]]
    # No window starts beyond what is needed: the one before the last stops short of the end.
    assert len(parts) == 1 or parts[-2][-1] + 1 < length
    assert sorted(set(p for part in parts for p in part)) == list(range(length))
    for ids, mask, tokens in zip(doc.input_ids, doc.input_mask, doc.tokens):
      assert len(ids) == len(mask) == max_seq_length
      assert sum(mask) == len(tokens) and tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
      assert ids[:len(tokens)] == to_ids(tokens) and not any(ids[len(tokens):])


def test_max_windows_keeps_the_first_windows_and_counts_the_rest():
  every = windows(text(20))
  cut = windows(text(20), max_windows=3)
  assert cut.tokens == every.tokens[:3] and cut.input_ids == every.input_ids[:3]
  assert cut.windows_cut == 2
  assert windows(text(20), max_windows=5).windows_cut == 0
  assert windows(text(20), max_windows=9).tokens == every.tokens


def test_pairs_hold_text_b_whole_in_every_window():
  # max_seq_length 12, text_b 3 tokens: 12 - 3 - 3 = 6 tokens of text_a per window.
  doc = windows(text(20), text(3, "b"), max_seq_length=12)
  assert [a_positions(w) for w in doc.tokens] == [
      [0, 1, 2, 3, 4, 5], [4, 5, 6, 7, 8, 9], [8, 9, 10, 11, 12, 13],
      [12, 13, 14, 15, 16, 17], [16, 17, 18, 19]]
  for tokens, segments, mask in zip(doc.tokens, doc.segment_ids, doc.input_mask):
    n = len(tokens) - 6  # text_a tokens in this window
    assert tokens[n + 1:] == ["[SEP]", "b0", "b1", "b2", "[SEP]"]
    assert segments == [0] * (n + 2) + [1] * 4 + [0] * (12 - n - 6)
    assert mask == [1] * (n + 6) + [0] * (12 - n - 6)
  assert doc.text_b_cut == 0


def test_a_long_text_b_is_cut_to_leave_text_a_half_the_room():
  # max_seq_length 12: room 9; text_a keeps at least 9 // 2 = 4 per window, text_b 5.
  doc = windows(text(10), text(8, "b"), max_seq_length=12, doc_stride=2)
  assert doc.text_b_cut == 3
  assert [a_positions(w) for w in doc.tokens] == [[0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 6, 7],
                                                   [6, 7, 8, 9]]
  assert all(w[-6:] == ["b0", "b1", "b2", "b3", "b4", "[SEP]"] for w in doc.tokens)
  doc = windows(text(10), text(8, "b"), max_seq_length=12, min_a_tokens=2)
  assert doc.text_b_cut == 1 and doc.tokens[0] == ["[CLS]", "t0", "t1", "[SEP]"] + text(7, "b") \
      + ["[SEP]"]
  # A pair that fits keeps text_b whole, however long.
  doc = windows(text(2), text(7, "b"), max_seq_length=12)
  assert doc.text_b_cut == 0 and len(doc.tokens) == 1 and len(doc.tokens[0]) == 12
  # Between the two: text_b gives up only what text_a lacks (text_a 3 tokens: b keeps 6).
  doc = windows(text(3), text(8, "b"), max_seq_length=12)
  assert doc.text_b_cut == 2 and a_positions(doc.tokens[0]) == [0, 1, 2]


@pytest.mark.parametrize("kwargs", [dict(doc_stride=0), dict(max_windows=0),
                                    dict(max_seq_length=2), dict(min_a_tokens=9)])
def test_document_windows_refuses_impossible_sizes(kwargs):
  args = dict(tokens_a=text(20), tokens_b=text(3, "b"), max_seq_length=12)
  if kwargs.get("max_seq_length") == 2:
    args["tokens_b"] = None
  args.update(kwargs)
  with pytest.raises(ValueError):
    windows(**args)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat",
           "a", "dog", "ran", "un", "##aff", "##able", "中", "国"]
  path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
  path.write_text("".join(token + "\n" for token in vocab), encoding="utf-8")
  return tokenization.FullTokenizer(str(path), do_lower_case=True)


@pytest.mark.parametrize("text_a,text_b", [
    ("the cat sat on the mat", None),
    ("the cat sat on the mat", "a dog ran"),
    ("unaffable 中国 dog", ""),  # an empty text_b: a single text, as in Google's code
    ("", "a dog"),
])
def test_a_text_that_fits_gives_one_window_equal_to_truncation(tokenizer, text_a, text_b):
  example = input_examples.InputExample("id-0", text_a, text_b, "x")
  features = featurizing.convert_single_example(example, {"x": 0}, 12, tokenizer)
  tokens_b = tokenizer.tokenize(text_b) if text_b else None
  doc = long_text.document_windows(tokenizer.tokenize(text_a), tokens_b, 12, 2, 8,
                                   tokenizer.convert_tokens_to_ids)
  assert len(doc.tokens) == 1 and doc.windows_cut == 0 and doc.text_b_cut == 0
  assert doc.input_ids[0] == list(features.input_ids)
  assert doc.input_mask[0] == list(features.input_mask)
  assert doc.segment_ids[0] == list(features.segment_ids)


def test_the_first_window_of_a_long_single_text_is_its_truncation(tokenizer):
  example = input_examples.InputExample("id-0", "the cat sat on the mat " * 4, None, "x")
  features = featurizing.convert_single_example(example, {"x": 0}, 10, tokenizer)
  doc = long_text.document_windows(tokenizer.tokenize(example.text_a), None, 10, 3, 8,
                                   tokenizer.convert_tokens_to_ids)
  assert len(doc.tokens) > 1
  assert doc.input_ids[0] == list(features.input_ids)
  assert doc.segment_ids[0] == list(features.segment_ids)


# ---------------------------------------------------------------------------
# pool_windows
# ---------------------------------------------------------------------------

WINDOW_MASK = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], np.int32)


def pooled_vectors():
  """[4 documents, 4 windows, 5 hidden]; the padded windows hold the largest values, so a
  max or mean that let them in would show it."""
  values = np.random.RandomState(0).randn(4, 4, 5).astype(np.float32)
  values[WINDOW_MASK == 0] = 50.0
  return values


def numpy_pool(values, mask, mode):
  rows = []
  for vectors, real in zip(values, mask.astype(bool)):
    if not real.any():
      rows.append(np.zeros(values.shape[-1], np.float32))
    else:
      rows.append(vectors[real].max(axis=0) if mode == "max" else vectors[real].mean(axis=0))
  return np.stack(rows)


@pytest.mark.parametrize("mode", ["max", "mean"])
@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_pool_windows_ignores_padded_windows(mode, dtype):
  values = pooled_vectors()
  with tf.Graph().as_default(), tf.Session() as sess:
    inputs = tf.cast(tf.constant(values), dtype)
    pooled = window_pooling.pool_windows(inputs, tf.constant(WINDOW_MASK), mode)
    assert pooled.dtype == dtype and pooled.shape.as_list() == [4, 5]
    rounded, result = sess.run([tf.cast(inputs, tf.float32), tf.cast(pooled, tf.float32)])
  expected = numpy_pool(rounded, WINDOW_MASK, mode)
  if dtype == tf.float32 or mode == "max":
    np.testing.assert_allclose(result, expected, rtol=1e-6, atol=1e-6)
  else:  # the mean of bf16 inputs, rounded once to bf16 (8 bits of mantissa)
    np.testing.assert_allclose(result, expected, rtol=2 ** -7, atol=1e-6)


def test_pool_windows_takes_a_bool_mask_and_refuses_unknown_modes():
  values = pooled_vectors()
  with tf.Graph().as_default(), tf.Session() as sess:
    pooled = window_pooling.pool_windows(tf.constant(values), tf.constant(WINDOW_MASK > 0), "mean")
    np.testing.assert_allclose(sess.run(pooled), numpy_pool(values, WINDOW_MASK, "mean"),
                               rtol=1e-6)
    with pytest.raises(ValueError):
      window_pooling.pool_windows(tf.constant(values), tf.constant(WINDOW_MASK), "sum")


# ---------------------------------------------------------------------------
# Windowed records (tfrecord_io)
# ---------------------------------------------------------------------------

SEQ = 8
FEATURE_SPEC = {
    "input_ids": tf.FixedLenFeature([SEQ], tf.int64),
    "input_mask": tf.FixedLenFeature([SEQ], tf.int64),
    "segment_ids": tf.FixedLenFeature([SEQ], tf.int64),
    "label_ids": tf.FixedLenFeature([], tf.int64),
}
# text_a lengths: windows of 6 tokens with stride 4 give 1, 1, 5, 2, 3, 1 windows; the
# first batch (3 and 1 tokens) has one window of at most 5 positions.
TEXT_LENGTHS = [3, 1, 20, 8, 12, 2]


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
  """The windows of TEXT_LENGTHS, written as windowed records with label_ids = index."""
  docs = [windows(text(n)) for n in TEXT_LENGTHS]
  records = []
  for index, doc in enumerate(docs):
    feature_map = tfrecord_io.windowed_features(
        {name: getattr(doc, name) for name in tfrecord_io.MODEL_INPUTS})
    feature_map["label_ids"] = tfrecord_io.int64_feature([index])
    records.append(tf.train.Example(features=tf.train.Features(feature=feature_map))
                   .SerializeToString())
  path = str(tmp_path_factory.mktemp("windowed") / "docs.tf_record")
  tfrecord_io.write_records_atomically(path, records)
  return path, docs


def expected_batch(docs, length_multiple):
  """The documents as one batch: padded to the most windows with all-zero windows, the seq
  axis cut to the longest real window rounded up to length_multiple (at most SEQ)."""
  num_windows = max(len(doc.input_ids) for doc in docs)
  longest = max(sum(mask) for doc in docs for mask in doc.input_mask)
  length = SEQ if length_multiple is None else min(
      SEQ, -(-longest // length_multiple) * length_multiple)
  batch = {}
  for name in tfrecord_io.MODEL_INPUTS:
    values = np.zeros([len(docs), num_windows, SEQ], np.int32)
    for row, doc in enumerate(docs):
      values[row, :len(doc.input_ids)] = getattr(doc, name)
    batch[name] = values[:, :, :length]
  batch["num_windows"] = np.array([len(doc.input_ids) for doc in docs])
  return batch


def read_all(dataset):
  batch = tf.data.make_one_shot_iterator(dataset).get_next()
  out = []
  with tf.Session() as sess:
    while True:
      try:
        out.append(sess.run(batch))
      except tf.errors.OutOfRangeError:
        return out


@pytest.mark.parametrize("length_multiple", [1, 4, None])
def test_windowed_records_round_trip_padded_and_trimmed(documents, length_multiple):
  path, docs = documents
  with tf.Graph().as_default():
    spec = tfrecord_io.windowed_feature_spec(FEATURE_SPEC)
    dataset = tfrecord_io.make_dataset([path], spec, 2, is_training=False,
                                       length_multiple=length_multiple)
    assert tf.data.get_output_shapes(dataset)["input_ids"].ndims == 3
    batches = read_all(dataset)
  assert len(batches) == 3
  for start, batch in zip(range(0, 6, 2), batches):
    expected = expected_batch(docs[start:start + 2], length_multiple)
    for name, value in expected.items():
      assert batch[name].shape == value.shape, name
      np.testing.assert_array_equal(batch[name], value, err_msg=name)
    np.testing.assert_array_equal(batch["label_ids"], [start, start + 1])
  if length_multiple == 1:  # by hand: [CLS] t0 t1 t2 [SEP]; 5 windows of the 20 tokens
    assert batches[0]["input_ids"].shape == (2, 1, 5)
    assert batches[1]["input_ids"].shape == (2, 5, SEQ)


def test_windowed_training_batches_grouped_by_length(documents):
  path, docs = documents
  with tf.Graph().as_default():
    dataset = tfrecord_io.make_dataset(
        [path], tfrecord_io.windowed_feature_spec(FEATURE_SPEC), 2, is_training=True, seed=3,
        shuffle_buffer=6, group_by_length=True, group_batches=3)
    batches = read_all(dataset.take(3))  # one epoch: one chunk of 3 batches
  labels = sorted(int(label) for batch in batches for label in batch["label_ids"])
  assert labels == list(range(6))
  for batch in batches:
    expected = expected_batch([docs[label] for label in batch["label_ids"]], 1)
    for name, value in expected.items():
      np.testing.assert_array_equal(batch[name], value, err_msg=name)
  # Sorted by tokens over all windows: the three one-window texts come together in pairs.
  window_counts = sorted(tuple(sorted(batch["num_windows"])) for batch in batches)
  assert window_counts == [(1, 1), (1, 2), (3, 5)]


def test_trim_to_longest_cuts_windows_and_positions():
  # Padded to 4 windows of 10 positions; at most 2 real windows, the longest 6 tokens.
  mask = np.zeros([2, 4, 10], np.int32)
  mask[0, 0, :6] = mask[0, 1, :3] = mask[1, 0, :5] = 1
  with tf.Graph().as_default(), tf.Session() as sess:
    features = {"input_mask": tf.constant(mask), "input_ids": tf.constant(mask * 9),
                "segment_ids": tf.constant(mask), "num_windows": tf.constant([2, 1])}
    exact, rounded, capped = sess.run([
        tfrecord_io.trim_to_longest(features),
        tfrecord_io.trim_to_longest(features, length_multiple=4),
        tfrecord_io.trim_to_longest(features, length_multiple=16)])
  np.testing.assert_array_equal(exact["input_ids"], mask[:, :2, :6] * 9)
  np.testing.assert_array_equal(exact["segment_ids"], mask[:, :2, :6])
  np.testing.assert_array_equal(exact["num_windows"], [2, 1])
  np.testing.assert_array_equal(rounded["input_mask"], mask[:, :2, :8])
  np.testing.assert_array_equal(capped["input_mask"], mask[:, :2, :10])


def test_towers_get_whole_documents():
  values = np.arange(4 * 3 * 2).reshape([4, 3, 2])
  with tf.Graph().as_default(), tf.Session() as sess:
    towers = sess.run(multigpu.split_for_towers({"input_ids": tf.constant(values)}, 2))
  np.testing.assert_array_equal(towers[0]["input_ids"], values[:2])
  np.testing.assert_array_equal(towers[1]["input_ids"], values[2:])
