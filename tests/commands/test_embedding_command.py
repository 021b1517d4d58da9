# coding=utf-8
"""End-to-end tests of run_embedding_mgpu.py, run as a subprocess (tests/helpers/cli.py)
on tiny Chinese data with a random 2-layer BERT of hidden size 16.

Expected values come from outside the command's own code path (bert_mgpu/embedding/
task.py): the model built again from embedding/model.create_model_fn in a fresh graph,
fed inputs made by the reference tokenizer (tests/helpers/reference_tokenizer.py),
restored from the checkpoint the run says it used; scipy.stats for Spearman and Pearson;
the data files for counts and order; and, for two workers, one process with the same
global batch.
"""

import collections
import contextlib
import json
import os
import re
import shutil

import numpy as np
import pytest
import scipy.stats
import tensorflow.compat.v1 as tf

from bert_mgpu.embedding import model as embedding_model
import cli
from cli import assert_one_line_error, assert_succeeded, flag_list, free_ports
import modeling
import reference_tokenizer
import tiny_task_files

SCRIPT = "run_embedding_mgpu.py"
MAX_SEQ_LENGTH = 12
# A random BERT small enough to train in milliseconds per step (seq <= 16).
CONFIG = dict(tiny_task_files.TINY_CONFIG, num_hidden_layers=2, max_position_embeddings=16)
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}

CHARS = u"天气很好今日晴朗我喜欢猫狗吃饭睡觉学习工作下雨出门看书唱歌跑步"


def sentences(rng, count):
  return [u"".join(rng.choice(list(CHARS), size=rng.randint(2, 9))) for _ in range(count)]


def write_text(path, text):
  return tiny_task_files.write_text(str(path), text)


def tsv(rows):
  return u"".join(u"\t".join(str(c) for c in row) + u"\n" for row in rows)


def jsonl(objects):
  return u"".join(json.dumps(o, ensure_ascii=False) + u"\n" for o in objects)


def read_key_values(path):
  """eval_results.txt's `key = value` lines as a dict of floats."""
  values = {}
  with open(path, encoding="utf-8") as f:
    for line in f:
      key, value = line.rstrip("\n").split(" = ")
      values[key] = float(value)
  return values


def read_lines(path):
  with open(path, encoding="utf-8", newline="") as f:
    return f.read().split("\n")[:-1]


def run(flags, cwd=cli.REPO_DIR):
  return cli.run_script(SCRIPT, flag_list(flags), cwd=cwd)


# ---------------------------------------------------------------------------
# The data: every split the tests use, one directory per situation
# ---------------------------------------------------------------------------

Data = collections.namedtuple("Data", ["root", "vocab_file", "config_file", "dirs", "splits",
                                       "embed_file", "embed_texts"])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  root = tmp_path_factory.mktemp("embedding_data")
  rng = np.random.RandomState(0)
  pool = sentences(rng, 40)
  pairs = lambda n: [(pool[rng.randint(40)], pool[rng.randint(40)]) for _ in range(n)]
  splits = {
      # Chinese STS-B's layout: integer 0-5 training scores; fractional dev scores with ties.
      "train": [(a, b, rng.randint(0, 6)) for a, b in pairs(16)],
      "dev": [(a, b, s) for (a, b), s in zip(pairs(9), [0, 1.5, 1.5, 3, 5, 2.2, 3, 4.8, 0])],
      "test": [(a, b, rng.randint(0, 6)) for a, b in pairs(7)],
  }
  dirs = {"scored": root / "scored"}
  for split, rows in splits.items():
    write_text(dirs["scored"] / (split + ".tsv"), tsv(rows))
  # Triplets: 16 anchors, their positives from 6 texts (copies in every batch), one hard
  # negative each (some of them copies of another anchor's positive).
  positives = pool[20:26]
  triplets = [{"query": pool[i], "pos": [positives[i % 6]], "neg": [pool[26 + i % 9]]}
              for i in range(16)]
  triplets[3]["neg"] = [positives[0]]
  splits["triplets"] = triplets
  dirs["triplets"] = root / "triplets"
  write_text(dirs["triplets"] / "train.jsonl", jsonl(triplets))
  # The dev set swaps positive and negative: training lowers its top1, so the best dev
  # checkpoint is an early one, not the latest.
  write_text(dirs["triplets"] / "dev.jsonl", jsonl(
      [{"query": t["query"], "pos": t["neg"], "neg": t["pos"]} for t in triplets[:10]]))
  # A triplet dev set whose lines list 1 or 2 negatives (JSON lines may list several).
  dirs["ragged_dev"] = root / "ragged_dev"
  write_text(dirs["ragged_dev"] / "train.jsonl", jsonl(triplets))
  write_text(dirs["ragged_dev"] / "dev.jsonl", jsonl(
      [dict(t, neg=t["neg"] + [pool[i]] * (i % 2)) for i, t in enumerate(triplets[:6])]))
  # Refusals.
  dirs["unscored"] = root / "unscored"
  write_text(dirs["unscored"] / "train.tsv", tsv([(a, b) for a, b, _ in splits["train"]]))
  dirs["graded"] = root / "graded"
  graded = [(a, b, s) for a, b, s in splits["train"][:6]] + [("a", "b", "3.5")]
  write_text(dirs["graded"] / "train.tsv", tsv(graded))
  dirs["sentence_dev"] = root / "sentence_dev"
  write_text(dirs["sentence_dev"] / "train.tsv", tsv(splits["train"]))
  write_text(dirs["sentence_dev"] / "dev.txt", u"".join(s + u"\n" for s in pool[:5]))
  dirs["unscored_dev"] = root / "unscored_dev"
  write_text(dirs["unscored_dev"] / "train.tsv", tsv(splits["train"]))
  write_text(dirs["unscored_dev"] / "dev.tsv", tsv([(a, b) for a, b, _ in splits["dev"]]))
  # --embed_file: blank lines left out of embeddings.txt and embeddings.npy.
  embed_texts = [pool[0], pool[5], u"我喜欢猫", pool[5]]
  embed_file = write_text(root / "embed.txt", u"%s\n\n%s\n%s\n  \n%s\n" % tuple(embed_texts))
  vocab_file, config_file = tiny_task_files.write_model_files(str(root / "model"), [CHARS])
  with open(config_file, encoding="utf-8") as f:
    config = dict(json.load(f), **CONFIG)
  write_text(config_file, json.dumps(config))
  return Data(root, vocab_file, config_file, {k: str(v) for k, v in dirs.items()}, splits,
              embed_file, embed_texts)


def base_flags(data, data_dir, output_dir, **overrides):
  flags = collections.OrderedDict([
      ("data_dir", data_dir), ("vocab_file", data.vocab_file),
      ("bert_config_file", data.config_file), ("output_dir", output_dir),
      ("do_train", True), ("max_seq_length", MAX_SEQ_LENGTH), ("train_batch_size", 4),
      ("eval_batch_size", 4), ("predict_batch_size", 4), ("learning_rate", 5e-3),
      ("num_train_epochs", 2), ("save_checkpoints_steps", 2), ("log_steps", 1),
      ("n_gpus", 2)])
  flags.update(overrides)
  return flags


# ---------------------------------------------------------------------------
# The model run again outside the command
# ---------------------------------------------------------------------------

def reference_inputs(texts, vocab_file):
  """input_ids, input_mask, segment_ids [n, 1, MAX_SEQ_LENGTH] of single texts."""
  vocab = {t: i for i, t in enumerate(read_lines(vocab_file))}
  ids = np.zeros([len(texts), 1, MAX_SEQ_LENGTH], np.int64)
  mask = np.zeros_like(ids)
  for row, text in enumerate(texts):
    tokens = reference_tokenizer.full_tokenize(text, vocab, True)[:MAX_SEQ_LENGTH - 2]
    pieces = [vocab["[CLS]"]] + [vocab[t] for t in tokens] + [vocab["[SEP]"]]
    ids[row, 0, :len(pieces)] = pieces
    mask[row, 0, :len(pieces)] = 1
  return ids, mask, np.zeros_like(ids)


def direct_embeddings(checkpoint, config_file, vocab_file, pooling, texts):
  """float64 [n, hidden]: the unit embeddings of `texts` from create_model_fn's model in
  a fresh graph, restored from `checkpoint`."""
  ids, mask, segments = reference_inputs(texts, vocab_file)
  config = modeling.BertConfig.from_json_file(config_file)
  with tf.Graph().as_default():
    features = {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask),
                "segment_ids": tf.constant(segments),
                "text_ids": tf.zeros([len(texts), 2], tf.int64)}
    model_fn = embedding_model.create_model_fn(config, pooling, texts=2)
    embeddings = model_fn(features, False)["embeddings"]
    saver = tf.train.Saver(tf.global_variables())
    with tf.Session() as sess:
      saver.restore(sess, checkpoint)
      vectors = sess.run(embeddings)[:, 0].astype(np.float64)
  return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def direct_cosines(run, rows):
  """cos(text_a, text_b) of each pair, from the direct model."""
  texts = [r[0] for r in rows] + [r[1] for r in rows]
  vectors = direct_embeddings(run.checkpoint, run.data.config_file, run.data.vocab_file,
                              run.pooling, texts)
  return np.sum(vectors[:len(rows)] * vectors[len(rows):], axis=1)


def used_checkpoint(result, cwd):
  match = re.search(r"Evaluating and predicting with (\S+) \(", result.stderr)
  assert match, "no 'Evaluating and predicting with' line:\n" + result.stderr[-3000:]
  return os.path.join(cwd, match.group(1))


def eval_lines(stderr):
  """(step, metrics) of each 'eval at step N: k = v ...' log line."""
  evals = []
  for step, rest in re.findall(r"eval at step (\d+): (.*)", stderr):
    evals.append((int(step), {k: float(v) for k, v in re.findall(r"(\w+) = (\S+)", rest)}))
  return evals


# ---------------------------------------------------------------------------
# 1. Scored pairs: train (CoSENT) + eval + predict + --embed_file
# ---------------------------------------------------------------------------

FullRun = collections.namedtuple("FullRun", ["data", "output_dir", "result", "checkpoint",
                                             "pooling"])


@pytest.fixture(scope="module")
def full_run(data, tmp_path_factory):
  # Run from the user's directory with a relative --output_dir, as users do.
  root = str(tmp_path_factory.mktemp("full_run"))
  pooling = embedding_model.FIRST_LAST_AVG
  flags = base_flags(data, data.dirs["scored"], "model", do_eval=True, do_predict=True,
                     embed_file=data.embed_file, pooling=pooling, loss="cosent")
  result = run(flags, cwd=root)
  assert_succeeded(result)
  return FullRun(data, os.path.join(root, "model"), result, used_checkpoint(result, root),
                 pooling)


def test_outputs_and_settings_files(full_run):
  out, splits = full_run.output_dir, full_run.data.splits
  evaluated = read_key_values(os.path.join(out, "eval_results.txt"))
  assert sorted(evaluated) == ["global_step", "loss", "pearson", "spearman"]
  assert evaluated["global_step"] == int(full_run.checkpoint.rsplit("-", 1)[1])
  tested = read_key_values(os.path.join(out, "test_results.txt"))
  assert sorted(tested) == ["global_step", "loss", "pearson", "spearman"]
  predicted = read_lines(os.path.join(out, "predict.txt"))
  assert len(predicted) == len(splits["test"])  # one cosine per test pair
  cosines = [float(line) for line in predicted]  # one value a line: no tab
  assert all(-1.0 <= c <= 1.0 for c in cosines)
  with open(os.path.join(out, "model_settings.json"), encoding="utf-8") as f:
    settings = json.load(f)
  assert settings["model"] == "embedding"
  assert settings["pooling"] == full_run.pooling
  assert settings["normalize_embeddings"] is True
  assert settings["max_seq_length"] == MAX_SEQ_LENGTH
  with open(os.path.join(out, "training_flags.json"), encoding="utf-8") as f:
    recorded = json.load(f)["flags"]
  assert recorded["loss"] == "cosent" and recorded["pooling"] == full_run.pooling
  assert recorded["cosent_scale"] == 20.0
  for name in ("vocab.txt", "bert_config.json"):
    assert os.path.isfile(os.path.join(out, name))
  # 16 pairs x 2 epochs / global batch 8 = 4 steps; the best of the dev evaluations.
  assert os.path.dirname(full_run.checkpoint) == os.path.join(out, "best")
  assert [step for step, _ in eval_lines(full_run.result.stderr)] == [2, 4]


def test_embed_file_matches_the_model_run_directly(full_run):
  out, data = full_run.output_dir, full_run.data
  vectors = np.load(os.path.join(out, "embeddings.npy"))
  assert vectors.dtype == np.float32 and vectors.shape == (len(data.embed_texts),
                                                           CONFIG["hidden_size"])
  np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
  assert read_lines(os.path.join(out, "embeddings.txt")) == data.embed_texts
  expected = direct_embeddings(full_run.checkpoint, data.config_file, data.vocab_file,
                               full_run.pooling, data.embed_texts)
  np.testing.assert_allclose(vectors, expected, rtol=0, atol=1e-5)
  # Different texts have different vectors; the same text (lines 2 and 4) the same.
  assert np.max(np.abs(vectors[0] - vectors[1])) > 1e-2
  np.testing.assert_allclose(vectors[1], vectors[3], atol=1e-6)


def test_predictions_are_the_direct_models_cosines(full_run):
  test = full_run.data.splits["test"]
  predicted = np.array([float(line) for line in
                        read_lines(os.path.join(full_run.output_dir, "predict.txt"))])
  expected = direct_cosines(full_run, test)
  np.testing.assert_allclose(predicted, expected, rtol=0, atol=2e-6)
  assert np.ptp(expected) > 1e-3  # not one value for every pair


def test_eval_and_test_scores_match_scipy(full_run):
  out = full_run.output_dir
  # Dev: the direct model's cosines of the dev pairs against their gold scores (ties).
  dev = full_run.data.splits["dev"]
  gold = np.array([r[2] for r in dev], np.float64)
  cosines = direct_cosines(full_run, dev)
  evaluated = read_key_values(os.path.join(out, "eval_results.txt"))
  assert evaluated["spearman"] == pytest.approx(scipy.stats.spearmanr(cosines, gold)[0],
                                                abs=1e-6)
  assert evaluated["pearson"] == pytest.approx(scipy.stats.pearsonr(cosines, gold)[0],
                                               abs=1e-6)
  # Test: the command's own predictions (predict.txt) against the test scores.
  test_gold = np.array([r[2] for r in full_run.data.splits["test"]], np.float64)
  predicted = np.array([float(line) for line in read_lines(os.path.join(out, "predict.txt"))])
  assert len(set(predicted)) == len(predicted)  # no tie made by the 6 decimals
  tested = read_key_values(os.path.join(out, "test_results.txt"))
  assert tested["spearman"] == pytest.approx(scipy.stats.spearmanr(predicted, test_gold)[0],
                                             abs=1e-9)
  assert tested["pearson"] == pytest.approx(scipy.stats.pearsonr(predicted, test_gold)[0],
                                            abs=1e-5)


# ---------------------------------------------------------------------------
# 2. Refusals: one line, nothing written
# ---------------------------------------------------------------------------

REFUSALS = [
    # (data dir, flag overrides, fragments; {dir} is the data dir)
    ("unscored", {"loss": "cosent"},
     ["--loss=cosent trains on pairs with a score", "{dir}/train.tsv holds pairs"]),
    ("graded", {"loss": "softmax"},
     ["{dir}/train.tsv line 7:", "the label 3.5 is not a class id"]),
    ("scored", {"adversarial": "fgm"}, ["--adversarial runs per tower"]),
    ("scored", {"rdrop_alpha": 0.1}, ["--rdrop_alpha runs per tower"]),
    ("scored", {"loss": "cosent", "temperature": 0.1},
     ["--temperature=0.1 is read only with --loss=in_batch"]),
    ("sentence_dev", {"do_eval": True}, ["{dir}/dev.txt holds single sentences"]),
    ("unscored_dev", {"do_eval": True, "best_metric": "spearman"},
     ["--best_metric=spearman needs scores in {dir}/dev.tsv", "--best_metric=top1"]),
]


@pytest.mark.parametrize("directory, overrides, fragments", REFUSALS,
                         ids=["cosent-unscored", "softmax-graded", "fgm", "rdrop",
                              "temperature-cosent", "sentence-dev", "spearman-unscored-dev"])
def test_refusals_are_one_line_and_write_nothing(data, tmp_path, directory, overrides,
                                                 fragments):
  output_dir = str(tmp_path / "out")
  data_dir = data.dirs[directory]
  result = run(base_flags(data, data_dir, output_dir, **overrides))
  assert_one_line_error(result, *[f.format(dir=data_dir) for f in fragments])
  assert not os.path.exists(output_dir)


# ---------------------------------------------------------------------------
# 3. Triplets with in-batch negatives: one process vs two workers, and a top1 dev set
# ---------------------------------------------------------------------------

def write_init_checkpoint(config_file, path, seed):
  """Saves a random BERT (bert/* only, no global_step) to `path`."""
  config = modeling.BertConfig.from_json_file(config_file)
  with tf.Graph().as_default():
    tf.set_random_seed(seed)
    modeling.BertModel(config, False, tf.zeros([1, 4], tf.int32))
    saver = tf.train.Saver(tf.global_variables())
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      saver.save(sess, path, write_meta_graph=False)
  return path


def weights_of(checkpoint):
  reader = tf.train.load_checkpoint(checkpoint)
  return {n: reader.get_tensor(n).astype(np.float64)
          for n in reader.get_variable_to_shape_map()
          if not n.endswith(("adam_m", "adam_v")) and n != "global_step"}


def relative_difference(a, b, initial):
  """||a - b|| / ||a - initial|| over the initial checkpoint's variables (BERT's)."""
  assert set(initial) <= set(a) and set(initial) <= set(b)
  diff = sum(np.sum((a[k] - b[k]) ** 2) for k in initial)
  norm = sum(np.sum((a[k] - initial[k]) ** 2) for k in initial)
  assert norm > 0
  return np.sqrt(diff / norm)


@pytest.fixture(scope="module")
def in_batch_setup(data, tmp_path_factory):
  root = tmp_path_factory.mktemp("in_batch")
  with open(data.config_file, encoding="utf-8") as f:
    config = dict(json.load(f), **NO_DROPOUT)
  config_file = write_text(root / "bert_config.json", json.dumps(config))
  init = write_init_checkpoint(config_file, str(root / "init" / "bert.ckpt"), seed=7)
  return root, config_file, init


def in_batch_flags(data, setup, output_dir, **overrides):
  _, config_file, init = setup
  flags = base_flags(data, data.dirs["triplets"], output_dir, bert_config_file=config_file,
                     init_checkpoint=init, loss="in_batch", temperature=0.1,
                     save_checkpoints_steps=1, keep_checkpoint_max=0)
  flags.update(overrides)
  return flags


@pytest.fixture(scope="module")
def one_process(data, in_batch_setup):
  """The reference: one device with the whole global batch (the two workers' 2 x 4); it
  also evaluates the triplet dev set."""
  output_dir = str(in_batch_setup[0] / "one_process")
  result = run(in_batch_flags(data, in_batch_setup, output_dir, do_eval=True, n_gpus=1,
                              train_batch_size=8))
  assert_succeeded(result)
  return output_dir, result


def test_an_unscored_dev_set_reports_top1_and_best_follows_it(one_process):
  output_dir, result = one_process
  assert "has no scores: dev reports top1" in result.stderr
  evaluated = read_key_values(os.path.join(output_dir, "eval_results.txt"))
  assert sorted(evaluated) == ["global_step", "loss", "top1"]
  evals = eval_lines(result.stderr)
  assert [step for step, _ in evals] == [1, 2, 3, 4]
  for _, metrics in evals:
    assert sorted(metrics) == ["loss", "top1"] and 0 <= metrics["top1"] <= 1
  top1 = [metrics["top1"] for _, metrics in evals]
  best_step = evals[top1.index(max(top1))][0]  # the first of the best: a tie is no better
  # The swapped dev set's top1 does not rise with training: best/ is not the latest.
  assert best_step < evals[-1][0], evals
  best_top1 = max(top1)
  best = tf.train.latest_checkpoint(os.path.join(output_dir, "best"))
  assert best is not None and best.endswith("model.ckpt-%d" % best_step)
  assert evaluated["global_step"] == best_step
  assert evaluated["top1"] == pytest.approx(best_top1, abs=5e-5)
  assert "New best top1" in result.stderr


def test_two_workers_give_the_weights_of_one_process(data, in_batch_setup, one_process,
                                                     tmp_path):
  hosts = ["127.0.0.1:%d" % p for p in free_ports(2)]
  dirs = [str(tmp_path / "chief"), str(tmp_path / "other")]
  with contextlib.ExitStack() as stack:
    workers = []
    for index, output_dir in enumerate(dirs):
      flags = in_batch_flags(data, in_batch_setup, output_dir, n_gpus=1,
                             variable_update="replicated", worker_hosts=",".join(hosts),
                             task_index=index, worker_timeout_secs=10)
      workers.append(stack.enter_context(cli.RunningScript(
          SCRIPT, flag_list(flags), str(tmp_path / ("worker%d.log" % index)))))
    codes = [worker.wait() for worker in workers]
  for worker, code in zip(workers, codes):
    assert code == 0, worker.stderr()[-3000:]
    assert "Traceback" not in worker.stderr()
  assert not os.path.exists(dirs[1])  # the other worker wrote nothing
  reference_path = tf.train.latest_checkpoint(one_process[0])
  chief_path = tf.train.latest_checkpoint(dirs[0])
  assert os.path.basename(chief_path) == os.path.basename(reference_path) == "model.ckpt-4"
  initial = weights_of(in_batch_setup[2])
  reference, chief = weights_of(reference_path), weights_of(chief_path)
  assert len(initial) > 20 and sorted(reference) == sorted(chief)
  # Not trivially equal: training moved the weights.
  moved = max(np.max(np.abs(reference[k] - initial[k])) for k in initial)
  assert moved > 1e-3
  assert relative_difference(reference, chief, initial) <= 1e-5


# ---------------------------------------------------------------------------
# 4. Dev sets that cannot be scored as asked: refused in one line before any work
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("case, fragment", [
    ("ragged-triplet-dev", "hard negative(s), line 1 has"),
    ("top1-on-scored-dev", "--best_metric=top1 is for a dev set without scores")])
def test_dev_sets_that_cannot_be_scored_as_asked_are_refused(data, in_batch_setup, tmp_path,
                                                              case, fragment):
  output_dir = str(tmp_path / "out")
  if case == "ragged-triplet-dev":  # evaluation only, from the init checkpoint
    flags = in_batch_flags(data, in_batch_setup, output_dir, data_dir=data.dirs["ragged_dev"],
                           do_train=None, do_eval=True)
  else:
    flags = base_flags(data, data.dirs["scored"], output_dir, do_eval=True,
                       best_metric="top1", num_train_epochs=1)
  result = run(flags)
  assert_one_line_error(result, fragment)
  assert not os.path.exists(output_dir)


# ---------------------------------------------------------------------------
# 5. Runs on a trained output_dir without training: the model's own settings
# ---------------------------------------------------------------------------

def test_embedding_a_trained_output_dir_uses_its_pooling_and_length(full_run, tmp_path):
  output_dir = str(tmp_path / "copy")
  shutil.copytree(full_run.output_dir, output_dir)
  os.remove(os.path.join(output_dir, "embeddings.npy"))
  data = full_run.data
  flags = collections.OrderedDict([
      ("vocab_file", data.vocab_file), ("bert_config_file", data.config_file),
      ("output_dir", output_dir), ("embed_file", data.embed_file), ("n_gpus", 2)])
  result = run(flags)
  assert_succeeded(result)
  # Neither the pooling nor max_seq_length was given: both come from model_settings.json.
  assert "Using pooling = %s of the model in" % full_run.pooling in result.stderr
  assert "Using max_seq_length = %d of the model in" % MAX_SEQ_LENGTH in result.stderr
  np.testing.assert_allclose(np.load(os.path.join(output_dir, "embeddings.npy")),
                             np.load(os.path.join(full_run.output_dir, "embeddings.npy")),
                             atol=1e-5)
  # Given with another value: refused before anything is written.
  before = sorted(os.listdir(output_dir))
  refused = run(dict(flags, pooling="mean"))
  assert_one_line_error(refused, "--pooling=mean, but the model in", "has pooling = %s"
                        % full_run.pooling)
  assert sorted(os.listdir(output_dir)) == before


def test_a_run_without_a_checkpoint_is_refused_before_writing(data, tmp_path):
  output_dir = str(tmp_path / "new")
  flags = collections.OrderedDict([
      ("vocab_file", data.vocab_file), ("bert_config_file", data.config_file),
      ("output_dir", output_dir), ("embed_file", data.embed_file),
      ("max_seq_length", MAX_SEQ_LENGTH)])
  assert_one_line_error(run(flags), "No checkpoint in --output_dir")
  assert not os.path.exists(output_dir)


@pytest.mark.parametrize("flags, fragment", [
    ({}, "Nothing to do: pass at least one of --do_train, --do_eval, --do_predict, "
         "--export_dir, --embed_file."),
    ({"do_train": True}, "--data_dir is required."),
    ({"embed_file": "x.txt", "vocab_file": None}, "--vocab_file is required."),
    ({"do_train": True, "data_dir": ".", "early_stopping_patience": -1},
     "--early_stopping_patience=-1"),
])
def test_the_shared_action_checks_apply(data, tmp_path, flags, fragment):
  base = collections.OrderedDict([
      ("vocab_file", data.vocab_file), ("bert_config_file", data.config_file),
      ("output_dir", str(tmp_path / "out"))])
  base.update(flags)
  assert_one_line_error(run({k: v for k, v in base.items() if v is not None}), fragment)
  assert not os.path.exists(str(tmp_path / "out"))
