# coding=utf-8
"""End-to-end tests of the run_squad_mgpu.py command line.

Every run is a subprocess (the interpreter running pytest, so the same TensorFlow) on
reading-comprehension sets that scripts/make_squad_data.py writes: Chinese SQuAD v1.1
(CMRC 2018 style) and English SQuAD v2.0, each with its own vocab and a tiny BERT
(2 layers, hidden 64). With no GPU, --n_gpus=2 runs two towers on logical CPU devices.

Expected values come from independent references: the data files for ids, gold answers
and contexts; plain re-implementations of SQuAD's official scoring (English) and of CMRC
2018's (Chinese) for eval_results.txt; a softmax of the n-best logits for the
probabilities; and the same model at step 0 (a checkpoint written here) for the untrained
F1 that training must beat.

Each data set is trained once (module-scoped fixtures); its untrained baseline runs at
the same time, two subprocesses at a time.
"""

import collections
import concurrent.futures
import json
import math
import os
import re
import shutil
import string
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu.squad import model as squad_model
from bert_mgpu.training import checkpoints
import cli
from cli import assert_succeeded
import modeling
import reference_tokenizer

MAKE_DATA = cli.script_path(os.path.join("scripts", "make_squad_data.py"))

MAX_SEQ_LENGTH = 64
DOC_STRIDE = 24
MAX_QUERY_LENGTH = 16
N_GPUS = 2
TRAIN_BATCH_SIZE = 8  # per tower
PREDICT_BATCH_SIZE = 8  # per tower
N_BEST_SIZE = 5
LEARNING_RATE = 1e-3
TRAIN_QUESTIONS = 2000
NUM_TRAIN_EPOCHS = 4
TRAIN_STEPS = TRAIN_QUESTIONS * NUM_TRAIN_EPOCHS // (TRAIN_BATCH_SIZE * N_GPUS)  # 500
# 101 questions: with long contexts they make 133 (zh) and 117 (en) windows, so the
# last predict batch of 2 x 8 holds 5 windows: one tower gets 5 and padding, the other
# only padding.
DEV_QUESTIONS = 101

# Trained F1 must beat the untrained F1 by this much, and reach MIN_TRAINED_F1.
# Measured here: untrained F1 1.2 (TF 2.21) and 6.0 (TF 1.15) for zh; 29.7 and 20.6 for
# en v2, where predicting "" for an unanswerable question scores (HasAns_f1 0.0 and 4.3).
# Trained: 99.0 / 100 (zh) and 100 / 100 (en). Over --random_seed 1-3 on both TFs the
# trained F1 was 92.5-99.0 (zh) and 99.0-100 (en).
F1_MARGIN = 50.0
MIN_TRAINED_F1 = 80.0


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

def run_squad(args):
  """Runs run_squad_mgpu.py to the end; returns the CompletedProcess (text output)."""
  return cli.run_script("run_squad_mgpu.py", args)


def read_json(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def write_json(path, value):
  with open(path, "w", encoding="utf-8") as f:
    json.dump(value, f, ensure_ascii=False, indent=1)


def read_eval_results(output_dir):
  """eval_results.txt as a dict key -> float; checks the keys are sorted, one per line."""
  with open(os.path.join(output_dir, "eval_results.txt"), encoding="utf-8") as f:
    lines = f.read().splitlines()
  keys = [line.split(" = ")[0] for line in lines]
  assert keys == sorted(keys) and len(set(keys)) == len(keys), lines
  return dict((line.split(" = ")[0], float(line.split(" = ")[1])) for line in lines)


def dev_questions(dataset_file):
  """OrderedDict id -> dict(context, question, golds, is_impossible) of a SQuAD file."""
  questions = collections.OrderedDict()
  for article in read_json(dataset_file)["data"]:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        questions[qa["id"]] = {
            "context": paragraph["context"], "question": qa["question"],
            "golds": [a["text"] for a in qa["answers"]],
            "starts": [a["answer_start"] for a in qa["answers"]],
            "is_impossible": bool(qa.get("is_impossible", False))}
  return questions


def windows_in_log(stderr):
  """(questions, windows) from the "Predicting N questions in W windows" log line."""
  match = re.search(r"Predicting (\d+) questions in (\d+) windows", stderr)
  assert match, stderr[-3000:]
  return int(match.group(1)), int(match.group(2))


# ---------------------------------------------------------------------------
# Reference scorers, written from the official scripts' rules
# ---------------------------------------------------------------------------

def squad_normalize(text):
  """SQuAD: lower case; drop ASCII punctuation, then the articles a/an/the; one space."""
  text = "".join(c for c in text.lower() if c not in string.punctuation)
  text = re.sub(r"\b(a|an|the)\b", " ", text)
  return " ".join(text.split())


def squad_exact_f1(prediction, gold):
  """SQuAD v2.0 exact match and bag-of-words F1 (an empty side scores 1 only if both are)."""
  predicted, expected = squad_normalize(prediction).split(), squad_normalize(gold).split()
  exact = float(predicted == expected)
  if not predicted or not expected:
    return exact, float(predicted == expected)
  overlap = sum((collections.Counter(predicted) & collections.Counter(expected)).values())
  if overlap == 0:
    return exact, 0.0
  precision, recall = overlap / len(predicted), overlap / len(expected)
  return exact, 2 * precision * recall / (precision + recall)


# The characters CMRC 2018's evaluation script removes before comparing.
CMRC_PUNCTUATION = set(u"-:_*^/\\~`+=，。：？！“”；’《》·、「」（）－～『』") | {u"……"}


def cmrc_is_chinese(char):
  return u"\u4e00" <= char <= u"\u9fa5"


def cmrc_segments(text):
  """CMRC 2018's segments: listed punctuation removed (it does not split), then each
  Chinese character alone; other runs split on whitespace, ASCII punctuation on its own
  (what nltk.word_tokenize does to the runs in these data)."""
  segments, run = [], []

  def flush():
    if run:
      word = "".join(run)
      segments.extend(re.findall(r"[^\s%s]+|[%s]" % (re.escape(string.punctuation),
                                                     re.escape(string.punctuation)), word))
      del run[:]

  for char in text.lower().strip():
    if char in CMRC_PUNCTUATION:
      continue
    if cmrc_is_chinese(char):
      flush()
      segments.append(char)
    else:
      run.append(char)
  flush()
  return segments


def longest_common_substring(first, second):
  """Length of the longest run that two sequences share (CMRC's "LCS")."""
  best = 0
  table = [[0] * (len(second) + 1) for _ in range(len(first) + 1)]
  for i in range(1, len(first) + 1):
    for j in range(1, len(second) + 1):
      if first[i - 1] == second[j - 1]:
        table[i][j] = table[i - 1][j - 1] + 1
        best = max(best, table[i][j])
  return best


def cmrc_exact_f1(prediction, gold):
  """CMRC 2018: exact match of the texts without punctuation; F1 of the segments' LCS."""
  def strip_punctuation(text):
    return "".join(c for c in text.lower().strip() if c not in CMRC_PUNCTUATION)
  exact = float(strip_punctuation(prediction) == strip_punctuation(gold))
  predicted, expected = cmrc_segments(prediction), cmrc_segments(gold)
  common = longest_common_substring(predicted, expected)
  if common == 0:
    return exact, 0.0
  precision, recall = common / len(predicted), common / len(expected)
  return exact, 2 * precision * recall / (precision + recall)


def best_over_golds(scorer, prediction, golds):
  pairs = [scorer(prediction, gold) for gold in golds]
  return max(p[0] for p in pairs), max(p[1] for p in pairs)


def reference_scores(questions, predictions, scorer, null_odds=None, nbest=None):
  """The figures eval_results.txt must hold, computed from the files alone (in %).

  For v2 (null_odds given), unanswerable questions have the gold answer "", and the best
  threshold is found by trying every null_odds value: a question is answered with its
  best non-empty n-best text when null_odds <= threshold and with "" otherwise (what
  --null_score_diff_threshold does); the lowest threshold with the best score wins. When
  answering nothing is best, any threshold below every null_odds is right: the expected
  threshold is then -inf, and the caller checks "below the lowest null_odds".
  """
  golds = dict((qid, [""] if q["is_impossible"] else q["golds"])
               for qid, q in questions.items())
  scores = dict((qid, best_over_golds(scorer, predictions[qid], golds[qid])) for qid in golds)
  total = len(scores)
  figures = {"exact_match": 100.0 * sum(s[0] for s in scores.values()) / total,
             "f1": 100.0 * sum(s[1] for s in scores.values()) / total, "total": total}
  if null_odds is None:
    return figures
  for name, impossible in (("HasAns", False), ("NoAns", True)):
    ids = [qid for qid in golds if questions[qid]["is_impossible"] == impossible]
    figures[name + "_total"] = len(ids)
    if ids:
      figures[name + "_exact"] = 100.0 * sum(scores[q][0] for q in ids) / len(ids)
      figures[name + "_f1"] = 100.0 * sum(scores[q][1] for q in ids) / len(ids)
  answered_score = {}
  for qid in golds:
    text = next((entry["text"] for entry in nbest[qid] if entry["text"]), "")
    answered_score[qid] = best_over_golds(scorer, text, golds[qid])
  for index, name in ((0, "exact"), (1, "f1")):
    def score_at(threshold):
      return sum(answered_score[q][index] if null_odds[q] <= threshold
                 else float(questions[q]["is_impossible"]) for q in golds)
    candidates = [-math.inf] + sorted(set(null_odds.values()))
    best = max(score_at(t) for t in candidates)
    figures["best_" + name] = 100.0 * best / total
    figures["best_%s_thresh" % name] = next(t for t in candidates if score_at(t) == best)
  return figures


# ---------------------------------------------------------------------------
# Data, checkpoints and runs
# ---------------------------------------------------------------------------

class SquadData(object):
  """Files of one generated data set."""

  def __init__(self, directory, language, version):
    self.directory = directory
    self.language = language
    self.version = version
    suffix = "" if version == "1.1" else "-v2.0"
    if language == "zh":
      self.train_file = os.path.join(directory, "cmrc2018_train%s.json" % suffix)
      self.dev_file = os.path.join(directory, "cmrc2018_dev%s.json" % suffix)
    else:
      self.train_file = os.path.join(directory, "train-v%s.json" % version)
      self.dev_file = os.path.join(directory, "dev-v%s.json" % version)
    self.vocab_file = os.path.join(directory, "vocab.txt")
    self.config_file = os.path.join(directory, "bert_config.json")


def make_data(directory, language, version, seed=12345):
  result = subprocess.run(
      [sys.executable, MAKE_DATA, "--output_dir", directory, "--language", language,
       "--version", version, "--train_questions", str(TRAIN_QUESTIONS),
       "--dev_questions", str(DEV_QUESTIONS), "--seed", str(seed)],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8", timeout=120)
  assert result.returncode == 0, result.stderr
  return SquadData(directory, language, version)


def write_fresh_checkpoint(config_file, path, seed):
  """Saves a freshly initialised SQuAD model (BERT + cls/squad head), without global_step."""
  config = modeling.BertConfig.from_json_file(config_file)
  with tf.Graph().as_default():
    tf.set_random_seed(seed)
    features = dict((name, tf.zeros([1, MAX_SEQ_LENGTH], tf.int32))
                    for name in ("input_ids", "input_mask", "segment_ids"))
    features["unique_ids"] = tf.zeros([1], tf.int32)
    squad_model.create_model_fn(config)(features, False)
    saver = tf.train.Saver()
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      saver.save(sess, path)
  return path


def model_flags(data, output_dir):
  return ["--vocab_file=" + data.vocab_file, "--bert_config_file=" + data.config_file,
          "--output_dir=" + output_dir, "--max_seq_length=%d" % MAX_SEQ_LENGTH,
          "--doc_stride=%d" % DOC_STRIDE, "--max_query_length=%d" % MAX_QUERY_LENGTH,
          "--n_gpus=%d" % N_GPUS, "--predict_batch_size=%d" % PREDICT_BATCH_SIZE,
          "--n_best_size=%d" % N_BEST_SIZE]


def train_and_predict_flags(data, output_dir, init_checkpoint):
  flags = model_flags(data, output_dir) + [
      "--do_train", "--do_predict", "--train_file=" + data.train_file,
      "--predict_file=" + data.dev_file, "--init_checkpoint=" + init_checkpoint,
      "--train_batch_size=%d" % TRAIN_BATCH_SIZE, "--learning_rate=%g" % LEARNING_RATE,
      "--num_train_epochs=%d" % NUM_TRAIN_EPOCHS, "--save_checkpoints_steps=100000",
      "--log_steps=100"]
  if data.version == "2.0":
    flags.append("--version_2_with_negative")
  return flags


def predict_flags(data, output_dir, checkpoint, predict_file=None, version_2=None):
  flags = model_flags(data, output_dir) + [
      "--do_predict", "--predict_file=" + (predict_file or data.dev_file),
      "--init_checkpoint=" + checkpoint]
  if version_2 is None:
    version_2 = data.version == "2.0"
  if version_2:
    flags.append("--version_2_with_negative")
  return flags


class Run(object):
  """One finished run: its output files, parsed."""

  def __init__(self, name, output_dir, result, data, predict_file, version_2):
    assert_succeeded(result)
    self.name = name
    self.output_dir = output_dir
    self.stderr = result.stderr
    self.data = data
    self.version_2 = version_2
    self.questions = dev_questions(predict_file)
    self.results = read_eval_results(output_dir)
    self.predictions = read_json(os.path.join(output_dir, "predictions.json"))
    self.nbest = read_json(os.path.join(output_dir, "nbest_predictions.json"))
    null_odds_file = os.path.join(output_dir, "null_odds.json")
    self.null_odds = read_json(null_odds_file) if version_2 else None
    if not version_2:
      assert not os.path.exists(null_odds_file)


def train_with_baseline(root, data):
  """Trains from a fresh checkpoint and predicts with that checkpoint, concurrently."""
  init = write_fresh_checkpoint(data.config_file, os.path.join(root, "init", "model.ckpt"), 7)
  trained_dir, untrained_dir = os.path.join(root, "trained"), os.path.join(root, "untrained")
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    trained = pool.submit(run_squad, train_and_predict_flags(data, trained_dir, init))
    untrained = pool.submit(run_squad, predict_flags(data, untrained_dir, init))
    trained, untrained = trained.result(), untrained.result()
  version_2 = data.version == "2.0"
  return {"trained": Run("trained", trained_dir, trained, data, data.dev_file, version_2),
          "untrained": Run("untrained", untrained_dir, untrained, data, data.dev_file,
                           version_2)}


@pytest.fixture(scope="module")
def zh_runs(tmp_path_factory):
  """Chinese SQuAD v1.1 (CMRC 2018 style): trained and untrained runs."""
  root = str(tmp_path_factory.mktemp("squad_zh"))
  data = make_data(os.path.join(root, "data"), "zh", "1.1")
  return train_with_baseline(root, data)


@pytest.fixture(scope="module")
def en_runs(tmp_path_factory):
  """English SQuAD v2.0: trained and untrained runs, and the trained model predicting the
  answerable questions as a v1.1 file (without --version_2_with_negative)."""
  root = str(tmp_path_factory.mktemp("squad_en"))
  data = make_data(os.path.join(root, "data"), "en", "2.0")
  runs = train_with_baseline(root, data)
  dataset = read_json(data.dev_file)
  for article in dataset["data"]:
    for paragraph in article["paragraphs"]:
      paragraph["qas"] = [dict((k, v) for k, v in qa.items() if k != "is_impossible")
                          for qa in paragraph["qas"] if not qa["is_impossible"]]
  dataset["version"] = "v1.1"
  v1_file = os.path.join(root, "dev-answerable-v1.1.json")
  write_json(v1_file, dataset)
  v1_dir = os.path.join(root, "trained_v1")
  checkpoint = tf.train.latest_checkpoint(runs["trained"].output_dir)
  result = run_squad(predict_flags(data, v1_dir, checkpoint, v1_file, version_2=False))
  runs["trained_v1"] = Run("trained_v1", v1_dir, result, data, v1_file, False)
  return runs


def get_run(request, run_id):
  """The Run of an id in RUN_IDS, e.g. "zh_untrained" -> zh_runs["untrained"]."""
  language, name = run_id.split("_", 1)
  return request.getfixturevalue(language + "_runs")[name]


RUN_IDS = ["zh_trained", "zh_untrained", "en_trained", "en_untrained", "en_trained_v1"]


# ---------------------------------------------------------------------------
# Training works
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("language", ["zh", "en"])
def test_training_raises_f1_well_above_the_untrained_model(request, language):
  runs = request.getfixturevalue(language + "_runs")
  trained, untrained = runs["trained"].results, runs["untrained"].results
  print("%s: untrained %s; trained %s" % (language, untrained, trained))
  assert untrained["global_step"] == 0
  assert trained["global_step"] == TRAIN_STEPS
  assert trained["f1"] > untrained["f1"] + F1_MARGIN, (untrained, trained)
  assert trained["f1"] > MIN_TRAINED_F1, trained
  assert trained["exact_match"] > untrained["exact_match"] + F1_MARGIN, (untrained, trained)
  if language == "en":
    assert trained["HasAns_f1"] > untrained["HasAns_f1"] + F1_MARGIN
    assert trained["HasAns_f1"] > MIN_TRAINED_F1
    assert runs["trained_v1"].results["f1"] > MIN_TRAINED_F1
  log = runs["trained"].stderr
  assert "Initialised from --init_checkpoint" in log
  assert re.search(r"step %d/%d" % (TRAIN_STEPS, TRAIN_STEPS), log), log[-3000:]


# ---------------------------------------------------------------------------
# Output files
# ---------------------------------------------------------------------------

def cmrc_subtle_predictions(run):
  """Predictions where CMRC 2018's rules are easy to get wrong: a listed punctuation
  character inside a Latin word (CMRC deletes it: "Wi-Fi" is one segment, "wifi"), or
  ASCII punctuation CMRC does not list (it stays, as a segment of its own)."""
  subtle = []
  for qid, text in run.predictions.items():
    if re.search(r"[A-Za-z0-9][%s][A-Za-z0-9]" % re.escape("".join(
        c for c in CMRC_PUNCTUATION if len(c) == 1)), text) or any(
            c in string.punctuation and c not in CMRC_PUNCTUATION for c in text):
      subtle.append((qid, text, run.questions[qid]["golds"]))
  return subtle


@pytest.mark.parametrize("run_id", RUN_IDS)
def test_eval_results_match_reference_scorer(request, run_id):
  run = get_run(request, run_id)
  scorer = cmrc_exact_f1 if run.data.language == "zh" else squad_exact_f1
  expected = reference_scores(run.questions, run.predictions, scorer, run.null_odds,
                              run.nbest)
  results = run.results
  hint = ""
  if run.data.language == "zh":
    hint = ("run_squad_mgpu.py's Chinese scoring differs from CMRC 2018's official rules; "
            "predictions where they are subtle: %s" % cmrc_subtle_predictions(run))
  for key, value in expected.items():
    assert key in results, (key, sorted(results))
    if key.endswith("_thresh") and value == -math.inf:
      assert results[key] < min(run.null_odds.values()), (key, results[key])
      continue
    assert results[key] == pytest.approx(value, abs=1e-9), (key, results[key], value, hint)
  extra = set(results) - set(expected) - {"global_step"}
  assert not extra, extra


@pytest.mark.parametrize("run_id", RUN_IDS)
def test_every_question_gets_a_prediction_and_an_nbest_list(request, run_id):
  run = get_run(request, run_id)
  ids = list(run.questions)
  assert sorted(run.predictions) == sorted(ids)
  assert sorted(run.nbest) == sorted(ids)
  num_questions, num_windows = windows_in_log(run.stderr)
  assert num_questions == len(ids)
  assert num_windows > num_questions  # some contexts span several windows
  global_batch = PREDICT_BATCH_SIZE * N_GPUS
  if run_id != "en_trained_v1":
    assert 0 < num_windows % global_batch < PREDICT_BATCH_SIZE, (
        "%d windows no longer leave a last batch that fills less than one tower: change "
        "DEV_QUESTIONS" % num_windows)
  no_span = []
  for qid in ids:
    context = run.questions[qid]["context"]
    entries = run.nbest[qid]
    if [e["text"] for e in entries] == [""] and not run.version_2:
      # No valid span among the top n_best_size starts and ends (an untrained model):
      # Google's script answers "empty" then; this one answers "".
      no_span.append(qid)
    # Google's rule: n_best_size entries, plus the empty answer for v2 if it did not make it.
    limit = N_BEST_SIZE + (1 if run.version_2 else 0)
    assert 1 <= len(entries) <= limit, (qid, entries)
    if len(entries) == N_BEST_SIZE + 1:
      assert entries[-1]["text"] == "" and all(e["text"] for e in entries[:-1])
    texts = [e["text"] for e in entries]
    assert len(set(texts)) == len(texts), (qid, texts)
    for entry in entries:
      assert set(entry) == {"text", "probability", "start_logit", "end_logit"}, entry
      assert entry["text"] in context, (qid, entry["text"], context)
      if not run.version_2 and qid not in no_span:
        assert entry["text"], (qid, entries)
    scores = [e["start_logit"] + e["end_logit"] for e in entries]
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    probabilities = [e / sum(exps) for e in exps]
    assert [e["probability"] for e in entries] == pytest.approx(probabilities, abs=1e-6)
    assert sum(e["probability"] for e in entries) == pytest.approx(1.0, abs=1e-6)
    ranked = scores[:-1] if len(entries) == N_BEST_SIZE + 1 else scores
    assert ranked == sorted(ranked, reverse=True), (qid, entries)
    prediction = run.predictions[qid]
    assert prediction in context
    if not run.version_2:
      assert prediction == entries[0]["text"]
  if "untrained" not in run_id:
    assert not no_span, no_span


def test_v2_writes_null_odds_for_every_question(en_runs):
  for name in ("trained", "untrained"):
    run = en_runs[name]
    assert sorted(run.null_odds) == sorted(run.questions)
    for key in ("HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact", "NoAns_f1",
                "NoAns_total", "best_exact", "best_exact_thresh", "best_f1",
                "best_f1_thresh"):
      assert key in run.results, (name, key, sorted(run.results))
    impossible = [q for q in run.questions if run.questions[q]["is_impossible"]]
    assert run.results["NoAns_total"] == len(impossible) > 0
    assert run.results["HasAns_total"] == len(run.questions) - len(impossible)
    for qid, odds in run.null_odds.items():
      entries = run.nbest[qid]
      null = [e for e in entries if e["text"] == ""]
      spans = [e for e in entries if e["text"]]
      assert len(null) == 1, (qid, entries)
      if not spans:
        # No valid span among the top n_best_size starts and ends: the null answer wins.
        assert odds > 0.0 and run.predictions[qid] == "", (qid, odds)
        continue
      # null_odds = null score - best non-null score; the default threshold is 0.
      expected = (null[0]["start_logit"] + null[0]["end_logit"] -
                  spans[0]["start_logit"] - spans[0]["end_logit"])
      assert odds == pytest.approx(expected, abs=1e-4), (qid, odds, entries)
      assert run.predictions[qid] == ("" if odds > 0.0 else spans[0]["text"]), qid
  trained = en_runs["trained"]
  impossible = [q for q in trained.questions if trained.questions[q]["is_impossible"]]
  empty = [q for q in impossible if trained.predictions[q] == ""]
  assert len(empty) >= 0.8 * len(impossible), (len(empty), len(impossible))
  assert trained.results["NoAns_f1"] >= 80.0


def test_answers_keep_their_original_spelling(zh_runs, en_runs):
  """Offsets survive lower-casing, accent stripping and WordPiece: answers at the very
  start and end of Chinese contexts, and accented or spelled-out English places, come
  back exactly as the context writes them."""
  zh = zh_runs["trained"]
  at_edges = [q for q, v in zh.questions.items()
              if v["starts"][0] == 0 or
              v["starts"][0] + len(v["golds"][0]) == len(v["context"])]
  assert len(at_edges) >= 10, len(at_edges)
  exact = [q for q in at_edges if zh.predictions[q] in zh.questions[q]["golds"]]
  assert len(exact) >= 0.8 * len(at_edges), [
      (zh.questions[q]["context"], zh.predictions[q]) for q in at_edges if q not in exact]

  en = en_runs["trained"]
  def is_special(gold):
    """Accented, with an apostrophe, or spelled in WordPiece pieces (not in the vocab)."""
    return (any(ord(c) > 127 or c == "'" for c in gold) or
            gold in ("Medellín", "Gruyères", "Kaliningrad"))
  special = [q for q, v in en.questions.items() if v["golds"] and is_special(v["golds"][0])]
  assert len(special) >= 5, len(special)
  exact = [q for q in special if en.predictions[q] in en.questions[q]["golds"]]
  assert len(exact) >= 0.8 * len(special), [
      (en.questions[q]["golds"][0], en.predictions[q]) for q in special if q not in exact]


def test_checkpoint_has_googles_squad_head(en_runs):
  checkpoint = tf.train.latest_checkpoint(en_runs["trained"].output_dir)
  assert checkpoint.endswith("model.ckpt-%d" % TRAIN_STEPS)
  shapes = dict(tf.train.list_variables(checkpoint))
  hidden = read_json(en_runs["trained"].data.config_file)["hidden_size"]
  assert shapes["cls/squad/output_weights"] == [2, hidden]
  assert shapes["cls/squad/output_bias"] == [2]
  assert shapes["bert/encoder/layer_1/output/dense/kernel"] == [2 * hidden, hidden]
  assert "global_step" in shapes
  assert not [name for name in shapes if name.startswith("tower")]
  assert not [name for name in shapes if name.startswith("output_")]  # no classifier head


# ---------------------------------------------------------------------------
# The data generator
# ---------------------------------------------------------------------------

def test_generated_data_are_deterministic_and_tokenize_without_unk(tmp_path):
  for language, version in (("zh", "1.1"), ("en", "2.0")):
    first = make_data(str(tmp_path / ("a_" + language)), language, version)
    second = make_data(str(tmp_path / ("b_" + language)), language, version)
    for name in ("train_file", "dev_file", "vocab_file", "config_file"):
      with open(getattr(first, name), "rb") as f, open(getattr(second, name), "rb") as g:
        assert f.read() == g.read(), (language, name)
    with open(first.vocab_file, encoding="utf-8") as f:
      vocab = f.read().splitlines()
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(set(vocab)) == len(vocab)
    assert read_json(first.config_file)["vocab_size"] == len(vocab)
    tokenizer = reference_tokenizer.ReferenceFullTokenizer(set(vocab), do_lower_case=True)
    for path in (first.train_file, first.dev_file):
      questions = dev_questions(path)
      for qid, q in questions.items():
        assert "[UNK]" not in tokenizer.tokenize(q["context"]), q["context"]
        assert "[UNK]" not in tokenizer.tokenize(q["question"]), q["question"]
        assert q["is_impossible"] == (not q["golds"]), qid
        for gold, start in zip(q["golds"], q["starts"]):
          assert q["context"][start:start + len(gold)] == gold, (qid, gold, start)
      if version == "2.0":
        assert 0.2 < sum(q["is_impossible"] for q in questions.values()) / len(
            questions) < 0.5
      # Some contexts need at least three windows at the tests' settings.
      contexts = set(q["context"] for q in questions.values())
      longest = max(len(tokenizer.tokenize(c)) for c in contexts)
      assert longest > 2 * (MAX_SEQ_LENGTH - MAX_QUERY_LENGTH - 3), longest


# ---------------------------------------------------------------------------
# Bad input: one line on stderr, exit 1
# ---------------------------------------------------------------------------

BadInputCase = collections.namedtuple("BadInputCase", ["args", "expected_substrings"])


@pytest.fixture(scope="module")
def bad_input_runs(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("squad_bad_input"))
  data = make_data(os.path.join(root, "data"), "en", "2.0")
  broken = os.path.join(root, "broken.json")
  with open(broken, "w", encoding="utf-8") as f:
    f.write('{"version": "v1.1",\n "data": [\n  {"title": "x", "paragraphs": [}\n ]\n}\n')
  cases = collections.OrderedDict()

  def add(name, args, expected):
    output_dir = os.path.join(root, name)
    cases[name] = BadInputCase(model_flags(data, output_dir) + args, expected)

  add("missing_train_file", ["--do_train"], ["--train_file is required"])
  add("predict_file_not_json", ["--do_predict", "--predict_file=" + broken],
      [broken, "not valid JSON", "line 3"])
  add("max_seq_length_too_short", [
      "--do_predict", "--predict_file=" + data.dev_file, "--max_seq_length=19",
      "--max_query_length=16"], ["--max_seq_length=19", "--max_query_length=16"])
  add("unanswerable_without_v2", ["--do_train", "--train_file=" + data.train_file],
      [data.train_file, "--version_2_with_negative"])
  # A checkpoint without the span head (a pretrained BERT's): refused before output_dir.
  no_head = checkpoints.write_arrays({"bert/embeddings/word_embeddings": np.zeros(
      [2, 2], np.float32)}, os.path.join(root, "no_head", "bert_model.ckpt"))
  add("predict_without_the_span_head", [
      "--do_predict", "--predict_file=" + data.dev_file, "--version_2_with_negative",
      "--init_checkpoint=" + no_head],
      [no_head + " has no cls/squad/output_weights: it is not a model fine-tuned for reading "
       "comprehension"])
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    futures = collections.OrderedDict(
        (name, pool.submit(run_squad, case.args)) for name, case in cases.items())
    return dict((name, (cases[name], future.result())) for name, future in futures.items())


@pytest.mark.parametrize("case_id", ["missing_train_file", "predict_file_not_json",
                                     "max_seq_length_too_short", "unanswerable_without_v2",
                                     "predict_without_the_span_head"])
def test_bad_input_gets_a_one_line_error(bad_input_runs, case_id):
  case, result = bad_input_runs[case_id]
  cli.assert_one_line_error(result, *case.expected_substrings, last=True)
  output_dir = [a for a in case.args if a.startswith("--output_dir=")][0].split("=", 1)[1]
  assert not os.path.exists(output_dir)


def test_a_later_run_leaves_no_stale_score_or_null_odds(en_runs, tmp_path):
  # The untrained v2 run wrote eval_results.txt and null_odds.json; predicting a v1 file
  # without answers into the same directory must not leave them looking current.
  run = en_runs["untrained"]
  output_dir = str(tmp_path / "out")
  shutil.copytree(run.output_dir, output_dir)
  assert os.path.exists(os.path.join(output_dir, "eval_results.txt"))
  assert os.path.exists(os.path.join(output_dir, "null_odds.json"))
  dataset = read_json(run.data.dev_file)
  for article in dataset["data"]:
    for paragraph in article["paragraphs"]:
      paragraph["qas"] = [{"id": qa["id"], "question": qa["question"]}
                          for qa in paragraph["qas"]]
  unanswered = str(tmp_path / "dev-no-answers.json")
  write_json(unanswered, dataset)
  checkpoint = os.path.join(os.path.dirname(run.output_dir), "init", "model.ckpt")
  result = run_squad(predict_flags(run.data, output_dir, checkpoint, unanswered,
                                   version_2=False))
  assert_succeeded(result)
  assert not os.path.exists(os.path.join(output_dir, "eval_results.txt"))
  assert not os.path.exists(os.path.join(output_dir, "null_odds.json"))
  predictions = read_json(os.path.join(output_dir, "predictions.json"))
  assert sorted(predictions) == sorted(run.questions)
  # Written with the umask's permissions, readable by others as TF's own files are.
  mode = os.stat(os.path.join(output_dir, "predictions.json")).st_mode & 0o777
  assert mode == 0o666 & ~current_umask(), oct(mode)


def current_umask():
  mask = os.umask(0o022)
  os.umask(mask)
  return mask
