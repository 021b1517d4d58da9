# coding=utf-8
"""run_classifier_mgpu.py --long_text end to end (issue #19): the scripts on generated
texts of words w0, w1, ... (one WordPiece each) and a BERT with hidden size 16.

Expected values come from elsewhere than the code under test: a 1-tower run for the
2-tower update, --long_text=truncate for texts that fit in one window, hand-written token
lists for head_tail, long_text.document_windows (tests/classifier/test_long_text.py) for
the export's inputs, and for the cue set the fact that truncation sees the same tokens in
every text.
"""

import collections
import concurrent.futures
import json
import os
import random
import re

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import feature_cache
from bert_mgpu.classifier import featurizing
from bert_mgpu.classifier import input_examples
import cli
from bert_mgpu.classifier import long_text
from bert_mgpu.classifier import serving as classifier_serving
import tokenization
import trained_classifier
from trained_classifier import read_lines, read_probabilities, write_text

MAX_SEQ_LENGTH = 16  # windows of 14 tokens
DOC_STRIDE = 6
MAX_WINDOWS = 4
ROOM = MAX_SEQ_LENGTH - 2

WORDS = ["w%d" % i for i in range(30)]
B_WORDS = ["b%d" % i for i in range(10)]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + B_WORDS + ["x", "p", "q"]
CONFIG = {"vocab_size": len(VOCAB), "hidden_size": 16, "num_hidden_layers": 1,
          "num_attention_heads": 2, "intermediate_size": 32, "hidden_act": "gelu",
          "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
          "max_position_embeddings": 64, "type_vocab_size": 2, "initializer_range": 0.02}
LABELS = ["l0", "l1", "l2"]

# The test texts of the mixed set, in words: short ones fit in one window; the long ones
# give 2, 3, 4 windows and, past MAX_WINDOWS, are cut (36 and 70 words: 5 and 11 windows).
SHORT_LENGTHS = [2, 3, 4, 5, 7, 8, 10, 11, 13, 14]
LONG_LENGTHS = [17, 22, 30, 36, 70]


# ---------------------------------------------------------------------------
# Generated data
# ---------------------------------------------------------------------------

def write_json(path, value):
  write_text(path, json.dumps(value, indent=2) + "\n")


def write_tsv(path, rows, with_label=True):
  header = "label\ttext_a\n" if with_label else "text_a\n"
  write_text(path, header + "".join(("%s\t%s\n" % row) if with_label else row[1] + "\n"
                                    for row in rows))


def random_text(rng, length):
  return " ".join(rng.choice(WORDS) for _ in range(length))


def mixed_label(text):
  """A label the words decide, so that the runs have something to fit."""
  return LABELS[sum(int(word[1:]) for word in text.split()) % len(LABELS)]


# The cue set: texts of filler "x" in which a run of CUE_REPEAT cue words ("p" or "q", the
# label) sits past the first window. Truncation sees "x" * ROOM in every text.
CUE_REPEAT = 3
NUM_CUE_TRAIN = 128
NUM_CUE_DEV = 40


def cue_rows(rng, count):
  labels = ["p", "q"] * (count // 2)
  rng.shuffle(labels)
  rows = []
  for label in labels:
    length = rng.randint(2 * ROOM, 3 * ROOM)
    start = rng.randint(ROOM, length - CUE_REPEAT)
    words = ["x"] * length
    words[start:start + CUE_REPEAT] = [label] * CUE_REPEAT
    rows.append((label, " ".join(words)))
  return rows


Data = collections.namedtuple("Data", ["root", "vocab_file", "config_file",
                                       "no_dropout_config_file", "init_checkpoint", "mixed",
                                       "test_texts", "cue", "multi"])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("long_text_data"))
  vocab_file = os.path.join(root, "vocab.txt")
  write_text(vocab_file, "".join(token + "\n" for token in VOCAB))
  config_file = os.path.join(root, "bert_config.json")
  write_json(config_file, CONFIG)
  no_dropout = dict(CONFIG, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  no_dropout_config_file = os.path.join(root, "no_dropout_config.json")
  write_json(no_dropout_config_file, no_dropout)
  # Large random weights: different texts get clearly different probabilities.
  init_checkpoint = trained_classifier.write_init_checkpoint(
      no_dropout, len(LABELS), os.path.join(root, "init", "bert_model.ckpt"))

  rng = random.Random(0)
  mixed = os.path.join(root, "mixed")
  os.mkdir(mixed)
  write_text(os.path.join(mixed, "labels.txt"), "".join(l + "\n" for l in LABELS))
  train = [random_text(rng, rng.randint(3, 40)) for _ in range(32)]
  write_tsv(os.path.join(mixed, "train.tsv"), [(mixed_label(t), t) for t in train])
  lengths = SHORT_LENGTHS + LONG_LENGTHS
  rng.shuffle(lengths)  # batches mix window counts
  test_texts = [random_text(rng, n) for n in lengths]
  write_tsv(os.path.join(mixed, "test.tsv"), [(None, t) for t in test_texts], False)

  rng = random.Random(1)
  cue = os.path.join(root, "cue")
  os.mkdir(cue)
  write_tsv(os.path.join(cue, "train.tsv"), cue_rows(rng, NUM_CUE_TRAIN))
  write_tsv(os.path.join(cue, "dev.tsv"), cue_rows(rng, NUM_CUE_DEV))

  rng = random.Random(2)
  multi = os.path.join(root, "multi")
  os.mkdir(multi)
  for split, count in (("train", 24), ("dev", 8), ("test", 6)):
    rows = []
    for _ in range(count):
      labels = [label for label in ("m0", "m1", "m2") if rng.random() < 0.5]
      rows.append((",".join(labels), random_text(rng, rng.randint(3, 40))))
    write_tsv(os.path.join(multi, split + ".tsv"), rows)
  return Data(root, vocab_file, config_file, no_dropout_config_file, init_checkpoint, mixed,
              test_texts, cue, multi)


def is_short(text):
  return len(text.split()) <= ROOM


def run_flags(data, data_dir, output_dir, **overrides):
  flags = collections.OrderedDict([
      ("task_name", "tsv"), ("data_dir", data_dir), ("vocab_file", data.vocab_file),
      ("bert_config_file", data.config_file), ("output_dir", output_dir),
      ("max_seq_length", MAX_SEQ_LENGTH), ("long_text", "windows"),
      ("doc_stride", DOC_STRIDE), ("max_windows", MAX_WINDOWS), ("n_gpus", 1),
      ("save_checkpoints_steps", 1000), ("log_steps", 1000)])
  flags.update(overrides)
  if flags["long_text"] != "windows":  # the windows flags are refused in other modes
    for name in ("doc_stride", "max_windows"):
      if name not in overrides:
        del flags[name]
  return flags


def run(flags):
  return cli.run_script("run_classifier_mgpu.py", cli.flag_list(flags))


def run_all(flag_sets):
  """Runs the scripts two at a time; returns their CompletedProcesses in order."""
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    return list(pool.map(run, flag_sets))


def eval_results(output_dir):
  return dict((key.strip(), float(value)) for key, value in (
      line.split("=") for line in read_lines(os.path.join(output_dir, "eval_results.txt"))))


def tsv_rows(path):
  """The (label, text) rows of a file written by write_tsv."""
  return [tuple(line.split("\t")) for line in read_lines(path)[1:]]


def cache_keys(output_dir, split):
  return sorted(re.match(r"%s-([0-9a-f]+)\.tf_record$" % split, name).group(1)
                for name in os.listdir(output_dir)
                if re.match(r"%s-[0-9a-f]+\.tf_record$" % split, name))


# ---------------------------------------------------------------------------
# A windows model trained on 2 towers and on 1 device; the 2-tower one predicts and exports
# ---------------------------------------------------------------------------

WindowsRuns = collections.namedtuple("WindowsRuns", ["two_towers", "one_device", "export_dir",
                                                     "probabilities"])


@pytest.fixture(scope="module")
def windows_runs(data):
  two, one = (os.path.join(data.root, name) for name in ("towers_2", "towers_1"))
  export_dir = os.path.join(data.root, "exports")
  common = dict(bert_config_file=data.no_dropout_config_file,
                init_checkpoint=data.init_checkpoint, do_train=True, learning_rate=2e-3,
                num_train_epochs=1.25, random_seed=4321)  # 32 x 1.25 / 8 = 5 steps
  results = run_all([
      run_flags(data, data.mixed, two, n_gpus=2, train_batch_size=4, do_predict=True,
                predict_batch_size=3, export_dir=export_dir, **common),
      run_flags(data, data.mixed, one, n_gpus=1, train_batch_size=8, **common)])
  for result in results:
    cli.assert_succeeded(result)
    assert "32 training examples x 1.25 epochs = 5 steps" in result.stderr
  return WindowsRuns(two, one, export_dir,
                     read_probabilities(os.path.join(two, "test_results.tsv")))


def test_two_towers_give_the_update_of_one_device(data, windows_runs):
  names = sorted(name for name, _ in tf.train.list_variables(data.init_checkpoint))
  assert "output_weights" in names and len(names) > 10
  initial = tf.train.load_checkpoint(data.init_checkpoint)
  updates = []
  for output_dir in (windows_runs.one_device, windows_runs.two_towers):
    latest = tf.train.latest_checkpoint(output_dir)
    assert latest.endswith("model.ckpt-5")
    final = tf.train.load_checkpoint(latest)
    updates.append(np.concatenate([
        (final.get_tensor(n).astype(np.float64) - initial.get_tensor(n)).ravel()
        for n in names]))
  norm = np.linalg.norm(updates[0])
  assert norm > 1e-2  # the weights moved, so the comparison can fail
  assert np.linalg.norm(updates[1] - updates[0]) / norm <= 1e-3


def test_model_settings_and_the_feature_cache_key_hold_the_long_text_settings(
    data, windows_runs):
  with open(os.path.join(windows_runs.two_towers, "model_settings.json")) as f:
    settings = json.load(f)
  assert settings["long_text"] == "windows" and settings["window_pooling"] == "max"
  assert settings["doc_stride"] == DOC_STRIDE and settings["max_windows"] == MAX_WINDOWS
  assert classifier_serving.feature_options(settings) == input_examples.FeatureOptions(
      long_text="windows", doc_stride=DOC_STRIDE, max_windows=MAX_WINDOWS)
  head_tail = input_examples.FeatureOptions(long_text="head_tail", head_tokens=5)
  settings = classifier_serving.classifier_settings("tsv", True, MAX_SEQ_LENGTH, head_tail)
  assert settings["long_text"] == "head_tail" and settings["head_tokens"] == 5
  assert classifier_serving.feature_options(json.loads(json.dumps(settings))) == head_tail

  def key(**options):
    return feature_cache.features_cache_key(
        "test", [os.path.join(data.mixed, "test.tsv")], LABELS, MAX_SEQ_LENGTH,
        data.vocab_file, True, "tsv", input_examples.FeatureOptions(**options))
  keys = [key(), key(long_text="head_tail"), key(long_text="head_tail", head_tokens=3),
          key(long_text="windows"), key(long_text="windows", doc_stride=32),
          key(long_text="windows", max_windows=4)]
  assert len(set(keys)) == len(keys)
  # Settings a mode does not use leave its key (and older caches) as they were.
  assert key(doc_stride=5, max_windows=2, head_tokens=3) == keys[0] == \
      feature_cache.features_cache_key(
          "test", [os.path.join(data.mixed, "test.tsv")], LABELS, MAX_SEQ_LENGTH,
          data.vocab_file, True, "tsv")
  assert key(long_text="windows", head_tokens=3) == keys[3]
  # The run's cache file is named by its key.
  assert cache_keys(windows_runs.two_towers, "test") == [
      key(long_text="windows", doc_stride=DOC_STRIDE, max_windows=MAX_WINDOWS)[:16]]


# ---------------------------------------------------------------------------
# A text that fits in one window: the same probabilities in every mode
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mode_probabilities(data, windows_runs):
  """test_results.tsv of the 2-tower model's checkpoint, predicted in every mode."""
  checkpoint = tf.train.latest_checkpoint(windows_runs.two_towers)
  modes = collections.OrderedDict([
      ("truncate", dict(long_text="truncate")), ("head_tail", dict(long_text="head_tail")),
      ("windows_mean", dict(long_text="windows", window_pooling="mean"))])
  flag_sets = [run_flags(data, data.mixed, os.path.join(data.root, "predict_" + mode),
                         init_checkpoint=checkpoint, do_predict=True, predict_batch_size=4,
                         **flags) for mode, flags in modes.items()]
  for result in run_all(flag_sets):
    cli.assert_succeeded(result)
  probabilities = {"windows_max": windows_runs.probabilities}
  for mode, flags in zip(modes, flag_sets):
    probabilities[mode] = read_probabilities(os.path.join(flags["output_dir"],
                                                          "test_results.tsv"))
    probabilities[mode + "_keys"] = cache_keys(flags["output_dir"], "test")
  return probabilities


def test_a_text_that_fits_in_one_window_gets_the_same_probabilities_in_every_mode(
    data, windows_runs, mode_probabilities):
  short = np.array([is_short(text) for text in data.test_texts])
  reference = mode_probabilities["windows_max"]
  assert reference.shape == (len(data.test_texts), len(LABELS))
  trained_classifier.assert_rows_distinguishable(reference[short], 1e-4)
  for mode in ("truncate", "head_tail", "windows_mean"):
    np.testing.assert_allclose(mode_probabilities[mode][short], reference[short], atol=1e-5,
                               err_msg=mode)
  # The runs did read the long texts in their own mode.
  for mode in ("truncate", "head_tail", "windows_mean"):
    gaps = np.abs(mode_probabilities[mode][~short] - reference[~short]).max(axis=1)
    assert (gaps > 1e-3).sum() >= 3, (mode, gaps)
  # Every mode's records are cached under its own key; mean and max share theirs.
  keys = [mode_probabilities[m + "_keys"] for m in ("truncate", "head_tail", "windows_mean")]
  assert len(set(k[0] for k in keys)) == 3 and all(len(k) == 1 for k in keys)
  assert keys[2] == cache_keys(windows_runs.two_towers, "test")


# ---------------------------------------------------------------------------
# Export and predict_text.py in windows mode give --do_predict's probabilities
# ---------------------------------------------------------------------------

SIGNATURE_INPUTS = ("input_ids", "input_mask", "segment_ids")


def document_windows(data, texts):
  """The model inputs of each text as long_text.document_windows cuts it."""
  tokenizer = tokenization.FullTokenizer(data.vocab_file, do_lower_case=True)
  return [long_text.document_windows(tokenizer.tokenize(text), None, MAX_SEQ_LENGTH,
                                     DOC_STRIDE, MAX_WINDOWS, tokenizer.convert_tokens_to_ids)
          for text in texts]


def window_batch(documents, num_windows, length):
  """[documents, num_windows, length] arrays, padded with all-zero windows."""
  arrays = {}
  for name in SIGNATURE_INPUTS:
    values = np.zeros([len(documents), num_windows, MAX_SEQ_LENGTH], np.int32)
    for row, document in enumerate(documents):
      values[row, :len(document.input_ids)] = getattr(document, name)
    arrays[name] = values[:, :, :length]
  return arrays


def run_export(version_dir, batches):
  with tf.Graph().as_default() as graph, tf.Session(graph=graph) as sess:
    meta_graph = tf.saved_model.loader.load(sess, [tf.saved_model.tag_constants.SERVING],
                                            version_dir)
    signature = meta_graph.signature_def["serving_default"]
    for name in SIGNATURE_INPUTS:
      assert [d.size for d in signature.inputs[name].tensor_shape.dim] == [-1, -1, -1]
    inputs = {name: graph.get_tensor_by_name(signature.inputs[name].name)
              for name in SIGNATURE_INPUTS}
    probabilities = graph.get_tensor_by_name(signature.outputs["probabilities"].name)
    return [sess.run(probabilities, {inputs[name]: batch[name] for name in SIGNATURE_INPUTS})
            for batch in batches]


def test_the_export_takes_batches_of_windows_and_gives_do_predict(data, windows_runs):
  documents = document_windows(data, data.test_texts)
  counts = [len(document.input_ids) for document in documents]
  assert min(counts) == 1 and set(range(1, MAX_WINDOWS + 1)) <= set(counts)
  assert sum(document.windows_cut > 0 for document in documents) == 2
  # One batch padded to MAX_WINDOWS windows of MAX_SEQ_LENGTH; then batches of 3 cut to
  # their most windows and their longest window.
  whole = [window_batch(documents, MAX_WINDOWS, MAX_SEQ_LENGTH)]
  cut = []
  for start in range(0, len(documents), 3):
    part = documents[start:start + 3]
    cut.append(window_batch(part, max(len(d.input_ids) for d in part),
                            max(sum(mask) for d in part for mask in d.input_mask)))
  assert len(set(batch["input_ids"].shape[1:] for batch in cut)) > 2
  version_dir = os.path.join(windows_runs.export_dir, "1")
  whole_result, cut_result = (np.concatenate(r) for r in (run_export(version_dir, whole),
                                                           run_export(version_dir, cut)))
  trained_classifier.assert_rows_distinguishable(windows_runs.probabilities, 1e-4)
  np.testing.assert_allclose(whole_result, windows_runs.probabilities, atol=1e-5)
  np.testing.assert_allclose(cut_result, windows_runs.probabilities, atol=1e-5)


def test_predict_text_from_the_output_dir_and_the_export_gives_do_predict(
    data, windows_runs, tmp_path):
  input_file = str(tmp_path / "texts.txt")
  write_text(input_file, "".join(text + "\n" for text in data.test_texts))
  sources = [["--output_dir=" + windows_runs.two_towers, "--n_gpus=2",
              "--predict_batch_size=3"],
             ["--export_dir=" + windows_runs.export_dir, "--predict_batch_size=5"]]
  outputs = [str(tmp_path / ("out%d.tsv" % i)) for i in range(len(sources))]
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    results = list(pool.map(
        lambda args: cli.run_script("predict_text.py", args),
        [source + ["--input_file=" + input_file, "--output_file=" + output]
         for source, output in zip(sources, outputs)]))
  for result, output in zip(results, outputs):
    cli.assert_succeeded(result)
    rows = [line.split("\t") for line in read_lines(output)]
    probabilities = np.array([[float(p) for p in row[2:]] for row in rows])
    np.testing.assert_allclose(probabilities, windows_runs.probabilities, atol=1e-5)
    assert [row[0] for row in rows] == [LABELS[i] for i in probabilities.argmax(axis=1)]


# ---------------------------------------------------------------------------
# A label cue past the first window: learnt by windows, not by truncation
# ---------------------------------------------------------------------------

def test_a_cue_past_the_first_window_is_learnt_by_windows_and_not_by_truncation(data):
  for split in ("train", "dev"):
    for label, text in tsv_rows(os.path.join(data.cue, split + ".tsv")):
      words = text.split()
      assert words.index(label) >= ROOM and set(words) == {"x", label}
  common = dict(do_train=True, do_eval=True, train_batch_size=16, learning_rate=3e-3,
                num_train_epochs=30, random_seed=7)
  windows, truncate = (os.path.join(data.root, "cue_" + mode)
                       for mode in ("windows", "truncate"))
  results = run_all([run_flags(data, data.cue, windows, doc_stride=7, max_windows=8, **common),
                     run_flags(data, data.cue, truncate, long_text="truncate", **common)])
  for result in results:
    cli.assert_succeeded(result)
  assert "128 training examples x 30 epochs = 240 steps" in results[0].stderr
  # Truncation reads "x" * 14 in every text: one prediction for the balanced dev set.
  assert eval_results(truncate)["eval_accuracy"] == 0.5
  assert eval_results(windows)["eval_accuracy"] >= 0.95


# ---------------------------------------------------------------------------
# head_tail keeps the right tokens
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tokenizer(data):
  return tokenization.FullTokenizer(data.vocab_file, do_lower_case=True)


def featurize(tokenizer, text_a, text_b, max_seq_length, **options):
  example = input_examples.InputExample("id-0", text_a, text_b, "l0")
  features, truncated = featurizing.convert_example_counting_truncation(
      example, {"l0": 0}, max_seq_length, tokenizer, input_examples.FeatureOptions(**options))
  length = sum(features.input_mask)
  tokens = [VOCAB[i] for i in features.input_ids[:length]]
  assert not any(features.input_ids[length:]) and len(features.input_ids) == max_seq_length
  return tokens, list(features.segment_ids[:length]), truncated


def words(prefix, indices):
  return ["%s%d" % (prefix, i) for i in indices]


@pytest.mark.parametrize("head_tokens,kept", [
    (3, [0, 1, 2, 15, 16, 17, 18, 19]),
    (None, [0, 1, 14, 15, 16, 17, 18, 19]),  # a quarter of the room of 8
    (0, list(range(12, 20))),
    (8, list(range(8))),
])
def test_head_tail_keeps_the_head_and_the_tail_of_a_single_text(tokenizer, head_tokens, kept):
  text = " ".join(words("w", range(20)))
  tokens, segments, truncated = featurize(tokenizer, text, None, 10, long_text="head_tail",
                                          head_tokens=head_tokens)
  assert tokens == ["[CLS]"] + words("w", kept) + ["[SEP]"]
  assert segments == [0] * 10 and truncated
  # A text that fits is left whole; truncation keeps the start.
  assert featurize(tokenizer, "w3 w4 w5", None, 10, long_text="head_tail",
                   head_tokens=head_tokens) == (["[CLS]", "w3", "w4", "w5", "[SEP]"],
                                                [0] * 5, False)
  assert featurize(tokenizer, text, None, 10)[0] == ["[CLS]"] + words("w", range(8)) + [
      "[SEP]"]


@pytest.mark.parametrize("head_tokens,kept_a,kept_b", [
    # room 9: Google's truncation leaves text_a 5 tokens and text_b 4.
    (2, [0, 1, 17, 18, 19], [0, 1, 4, 5]),
    (4, [0, 1, 2, 3, 19], [0, 1, 2, 3]),  # text_b's head is all it keeps
    # Default: a quarter of each text's own room (5 // 4, 4 // 4).
    (None, [0, 16, 17, 18, 19], [0, 3, 4, 5]),
])
def test_head_tail_keeps_the_head_and_the_tail_of_each_text_of_a_pair(
    tokenizer, head_tokens, kept_a, kept_b):
  tokens, segments, truncated = featurize(
      tokenizer, " ".join(words("w", range(20))), " ".join(words("b", range(6))), 12,
      long_text="head_tail", head_tokens=head_tokens)
  assert tokens == ["[CLS]"] + words("w", kept_a) + ["[SEP]"] + words("b", kept_b) + [
      "[SEP]"]
  assert segments == [0] * 7 + [1] * 5 and truncated


# ---------------------------------------------------------------------------
# Bad flags, and multi-label with windows
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("flags,fragment", [
    (dict(long_text="windows", max_windows=0), "--max_windows=0"),
    (dict(long_text="windows", doc_stride=0), "--doc_stride=0"),
    (dict(long_text="head_tail", head_tokens=MAX_SEQ_LENGTH - 1),
     "--head_tokens=%d" % (MAX_SEQ_LENGTH - 1)),
    (dict(long_text="head_tail", head_tokens=-1), "--head_tokens=-1"),
    # A flag of another mode would be ignored: refused instead.
    (dict(long_text="truncate", doc_stride=32), "--doc_stride=32 is read only with "
     "--long_text=windows"),
    (dict(long_text="windows", head_tokens=3), "--head_tokens=3 is read only with "
     "--long_text=head_tail"),
    (dict(long_text="head_tail", window_pooling="mean"), "--window_pooling=mean is read only "
     "with --long_text=windows"),
    (dict(long_text="truncate", label_separator="|"), "--label_separator=| is read only with "
     "--multi_label"),
    (dict(long_text="truncate", multi_label_threshold="tuned"), "--multi_label_threshold=tuned "
     "is read only with --multi_label"),
])
def test_bad_long_text_flags_are_one_line_errors_and_write_nothing(data, tmp_path, flags,
                                                                   fragment):
  output_dir = str(tmp_path / "model")
  result = run(run_flags(data, data.mixed, output_dir, do_train=True, **flags))
  cli.assert_one_line_error(result, fragment)
  assert not os.path.exists(output_dir)


def test_multi_label_with_windows_trains_predicts_and_exports(data):
  output_dir = os.path.join(data.root, "multi_label")
  export_dir = os.path.join(data.root, "multi_label_exports")
  result = run(run_flags(data, data.multi, output_dir, do_train=True, do_eval=True,
                         do_predict=True, multi_label=True, train_batch_size=8,
                         learning_rate=1e-3, num_train_epochs=1, export_dir=export_dir))
  cli.assert_succeeded(result)
  with open(os.path.join(output_dir, "model_settings.json")) as f:
    settings = json.load(f)
  assert settings["multi_label"] and settings["long_text"] == "windows"
  assert "micro_f1" in eval_results(output_dir)
  probabilities = read_probabilities(os.path.join(output_dir, "test_results.tsv"))
  assert probabilities.shape == (6, 3) and np.all((probabilities > 0) & (probabilities < 1))
  assert not np.allclose(probabilities.sum(axis=1), 1.0)  # sigmoids, not a softmax
  predicted = read_lines(os.path.join(output_dir, "predict.txt"))
  assert len(predicted) == 6
  assert all(set(filter(None, line.split(","))) <= {"m0", "m1", "m2"} for line in predicted)
  texts = [text for _, text in tsv_rows(os.path.join(data.multi, "test.tsv"))]
  documents = document_windows(data, texts)
  assert max(len(d.input_ids) for d in documents) > 1
  exported = run_export(os.path.join(export_dir, "1"),
                        [window_batch(documents, MAX_WINDOWS, MAX_SEQ_LENGTH)])[0]
  np.testing.assert_allclose(exported, probabilities, atol=1e-5)
