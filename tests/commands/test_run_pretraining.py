# coding=utf-8
"""Tests of run_pretraining_mgpu.py: end to end on a tiny BERT, and the heads
(bert_mgpu/pretraining/model.py) against NumPy.

The corpus is made of runs of consecutive words from a fixed cycle, so a masked word is
determined by its neighbours and a tiny BERT learns it in a few hundred steps. With no GPU,
--n_gpus=2 runs two towers on logical CPU devices.
"""

import copy
import json
import os
import random
import re

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cli
import modeling
import multigpu
import numpy_bert
from bert_mgpu.pretraining import data_settings
from bert_mgpu.pretraining import model as pretraining_model
from bert_mgpu.pretraining import pipeline
from bert_mgpu.pretraining import records as pretraining_data
import optimization

NUM_WORDS = 24
MAX_SEQ_LENGTH = 32
MAX_PREDICTIONS = 5
TINY_CONFIG = {
    "attention_probs_dropout_prob": 0.0,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.0,
    "hidden_size": 32,
    "initializer_range": 0.02,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
    "num_attention_heads": 2,
    "num_hidden_layers": 1,
    "type_vocab_size": 2,
}
EVAL_KEYS = {"global_step", "loss", "masked_lm_accuracy", "masked_lm_loss",
             "next_sentence_accuracy", "next_sentence_loss"}
TRAIN_STEPS = 600
RESUME_STEPS = 640


def write_corpus(path, rng):
  """Documents of sentences; each sentence is a run of consecutive words of a cycle."""
  lines = []
  for _ in range(40):
    for _ in range(8):
      start, length = rng.randrange(NUM_WORDS), rng.randrange(4, 9)
      lines.append(" ".join("w%d" % ((start + k) % NUM_WORDS) for k in range(length)))
    lines.append("")
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")


def run_script(args):
  """Runs the script to the end; returns (exit code, stdout and stderr)."""
  result = cli.run_script("run_pretraining_mgpu.py", args)
  return result.returncode, result.stdout + result.stderr


def read_eval_results(output_dir):
  results = {}
  with open(os.path.join(output_dir, "eval_results.txt"), encoding="utf-8") as f:
    lines = f.read().splitlines()
  assert [l.split(" = ")[0] for l in lines] == sorted(l.split(" = ")[0] for l in lines)
  for line in lines:
    key, value = line.split(" = ")
    results[key] = float(value)
  return results


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
  """Corpus, vocab, config, TFRecords and a fresh (untrained) checkpoint."""
  root = str(tmp_path_factory.mktemp("pretrain"))
  rng = random.Random(7)
  corpus = os.path.join(root, "corpus.txt")
  write_corpus(corpus, rng)
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + ["w%d" % i for i in range(NUM_WORDS)]
  vocab_file = os.path.join(root, "vocab.txt")
  with open(vocab_file, "w", encoding="utf-8") as f:
    f.write("\n".join(vocab) + "\n")
  config = dict(TINY_CONFIG, vocab_size=len(vocab))
  config_file = os.path.join(root, "bert_config.json")
  with open(config_file, "w", encoding="utf-8") as f:
    json.dump(config, f)
  data_dir = os.path.join(root, "data")
  os.makedirs(data_dir)
  pipeline.create_pretraining_data(data_settings.DataSettings(
      input_file=corpus, output_file=os.path.join(data_dir, "train.tfrecord"),
      vocab_file=vocab_file, max_seq_length=MAX_SEQ_LENGTH,
      max_predictions_per_seq=MAX_PREDICTIONS, dupe_factor=5, num_workers=1))
  # An untrained checkpoint: the baseline to evaluate and the start of training.
  bert_config = modeling.BertConfig.from_dict(config)
  init_checkpoint = os.path.join(root, "init", "model.ckpt")
  with tf.Graph().as_default():
    tf.set_random_seed(1)
    spec = pretraining_data.input_feature_spec(MAX_SEQ_LENGTH, MAX_PREDICTIONS)
    features = {name: tf.zeros([2] + s.shape, tf.float32 if s.dtype == tf.float32
                               else tf.int32) for name, s in spec.items()}
    pretraining_model.create_model_fn(bert_config)(features, False)
    saver = tf.train.Saver()
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      saver.save(sess, init_checkpoint)
  return {"root": root, "data_dir": data_dir, "config_file": config_file,
          "vocab_size": len(vocab), "init_checkpoint": init_checkpoint,
          "bert_config": bert_config}


def common_args(ws, output_dir):
  return ["--bert_config_file=" + ws["config_file"], "--input_file=" + ws["data_dir"],
          "--output_dir=" + output_dir, "--max_seq_length=%d" % MAX_SEQ_LENGTH,
          "--max_predictions_per_seq=%d" % MAX_PREDICTIONS, "--eval_batch_size=32",
          "--max_eval_steps=4"]


@pytest.fixture(scope="module")
def trained(workspace):
  """Evaluates the untrained checkpoint, then trains from it on two towers."""
  baseline_dir = os.path.join(workspace["root"], "baseline")
  code, log = run_script(common_args(workspace, baseline_dir) + [
      "--do_eval", "--init_checkpoint=" + workspace["init_checkpoint"]])
  assert code == 0, log
  baseline = read_eval_results(baseline_dir)

  output_dir = os.path.join(workspace["root"], "trained")
  code, log = run_script(common_args(workspace, output_dir) + [
      "--do_train", "--do_eval", "--init_checkpoint=" + workspace["init_checkpoint"],
      "--n_gpus=2", "--train_batch_size=16", "--learning_rate=2e-3",
      "--num_train_steps=%d" % TRAIN_STEPS, "--num_warmup_steps=20",
      "--save_checkpoints_steps=300", "--log_steps=100"])
  assert code == 0, log
  return {"baseline": baseline, "output_dir": output_dir, "log": log,
          "results": read_eval_results(output_dir)}


def test_training_improves_masked_lm(trained):
  baseline, results = trained["baseline"], trained["results"]
  assert set(baseline) == EVAL_KEYS
  assert set(results) == EVAL_KEYS
  assert baseline["global_step"] == 0
  assert results["global_step"] == TRAIN_STEPS
  assert results["masked_lm_accuracy"] >= baseline["masked_lm_accuracy"] + 0.4, (
      baseline, results)
  assert results["masked_lm_loss"] < baseline["masked_lm_loss"] - 0.5
  assert abs(results["loss"] - results["masked_lm_loss"] - results["next_sentence_loss"]) < 1e-4
  assert "Initialised from --init_checkpoint" in trained["log"]
  assert "eval at step 300" in trained["log"]


def test_checkpoint_variable_names(trained, workspace):
  checkpoint = tf.train.latest_checkpoint(trained["output_dir"])
  shapes = dict(tf.train.list_variables(checkpoint))
  hidden, vocab = TINY_CONFIG["hidden_size"], workspace["vocab_size"]
  assert shapes["cls/predictions/output_bias"] == [vocab]
  assert shapes["cls/predictions/transform/dense/kernel"] == [hidden, hidden]
  assert shapes["cls/predictions/transform/dense/bias"] == [hidden]
  assert shapes["cls/predictions/transform/LayerNorm/gamma"] == [hidden]
  assert shapes["cls/seq_relationship/output_weights"] == [2, hidden]
  assert shapes["cls/seq_relationship/output_bias"] == [2]
  assert shapes["bert/embeddings/word_embeddings"] == [vocab, hidden]
  # The MLM output weight is tied to the word embeddings: no separate [vocab, hidden] matrix.
  model_vars = [n for n in shapes if "adam" not in n.lower() and "lamb" not in n.lower()]
  assert [n for n in model_vars if shapes[n] == [vocab, hidden]] == [
      "bert/embeddings/word_embeddings"]
  assert not [n for n in shapes if n.startswith("tower_")]


def test_resume_continues_to_new_step(trained, workspace):
  output_dir = trained["output_dir"]
  code, log = run_script(common_args(workspace, output_dir) + [
      "--do_train", "--do_eval", "--n_gpus=2", "--train_batch_size=16",
      "--learning_rate=2e-3", "--num_train_steps=%d" % RESUME_STEPS, "--num_warmup_steps=20",
      "--save_checkpoints_steps=1000", "--log_steps=20"])
  assert code == 0, log
  assert "Resuming from" in log
  assert re.search(r"step %d/%d" % (RESUME_STEPS, RESUME_STEPS), log)
  assert not re.search(r"step 20/%d" % RESUME_STEPS, log)
  assert os.path.basename(tf.train.latest_checkpoint(output_dir)) == (
      "model.ckpt-%d" % RESUME_STEPS)
  assert read_eval_results(output_dir)["global_step"] == RESUME_STEPS


def assert_one_error_line(log):
  """A usage error is one `error:` line, with no traceback."""
  assert "Traceback" not in log, log
  assert len([line for line in log.splitlines() if line.startswith("error:")]) == 1, log


def test_missing_input_is_one_line_error(workspace):
  missing = os.path.join(workspace["root"], "nothing", "*.tfrecord")
  args = common_args(workspace, os.path.join(workspace["root"], "x"))
  args[1] = "--input_file=" + missing
  code, log = run_script(args + ["--do_train"])
  assert code == 1, log
  assert "error: --input_file: %s matches no file" % missing in log
  assert_one_error_line(log)


def test_sequence_longer_than_positions_is_reported(workspace):
  # Google's default --max_seq_length=128 exceeds the tiny config's 64 positions.
  code, log = run_script(["--do_train", "--bert_config_file=" + workspace["config_file"],
                          "--input_file=" + workspace["data_dir"],
                          "--output_dir=" + os.path.join(workspace["root"], "x")])
  assert code == 1, log
  assert "error: --max_seq_length=128 is longer than max_position_embeddings=64" in log
  assert_one_error_line(log)


def test_wrong_record_length_is_reported(workspace):
  code, log = run_script(common_args(workspace, os.path.join(workspace["root"], "y"))[:-4] + [
      "--max_seq_length=48", "--max_predictions_per_seq=%d" % MAX_PREDICTIONS, "--do_train"])
  assert code == 1, log
  assert "feature input_ids has %d values, expected 48" % MAX_SEQ_LENGTH in log
  assert "--max_seq_length=%d" % MAX_SEQ_LENGTH in log
  assert_one_error_line(log)


@pytest.mark.parametrize("precision", ["fp16"] + (["bf16"] if tf.__version__.startswith("1.")
                                                  else []))
def test_a_refused_precision_creates_no_output_dir(workspace, precision):
  output_dir = os.path.join(workspace["root"], "refused_" + precision)
  code, log = run_script(common_args(workspace, output_dir) + [
      "--do_train", "--num_train_steps=2", "--precision=" + precision])
  assert code == 1, log
  assert "error: --precision=%s needs" % precision in log
  assert_one_error_line(log)
  assert not os.path.exists(output_dir)


def numpy_heads(weights, config, features):
  """The masked-LM and next-sentence losses in float64, from docs/FORMATS.md section 3."""
  out = numpy_bert.bert_forward(weights, config, features["input_ids"],
                                features["input_mask"], features["segment_ids"])
  w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
  numerator, denominator = 0.0, 0.0
  for b in range(features["input_ids"].shape[0]):
    for j, position in enumerate(features["masked_lm_positions"][b]):
      h = out["sequence_output"][b, position]
      h = numpy_bert.gelu_exact(h @ w["cls/predictions/transform/dense/kernel"] +
                                w["cls/predictions/transform/dense/bias"])
      h = numpy_bert.layer_norm(h, w["cls/predictions/transform/LayerNorm/gamma"],
                                w["cls/predictions/transform/LayerNorm/beta"])
      logits = w["bert/embeddings/word_embeddings"] @ h + w["cls/predictions/output_bias"]
      log_z = np.log(np.sum(np.exp(logits - logits.max()))) + logits.max()
      nll = log_z - logits[features["masked_lm_ids"][b, j]]
      numerator += features["masked_lm_weights"][b, j] * nll
      denominator += features["masked_lm_weights"][b, j]
  mlm_loss = numerator / (denominator + 1e-5)
  logits = (out["pooled_output"] @ w["cls/seq_relationship/output_weights"].T +
            w["cls/seq_relationship/output_bias"])
  log_probs = logits - np.log(np.sum(np.exp(logits), axis=-1, keepdims=True))
  labels = features["next_sentence_labels"][:, 0]
  nsp_loss = -np.mean(log_probs[np.arange(len(labels)), labels])
  return mlm_loss, nsp_loss


def test_loss_matches_numpy(workspace):
  config = copy.deepcopy(workspace["bert_config"])
  config.initializer_range = 0.5  # large weights, so the heads are far from uniform
  rng = np.random.RandomState(3)
  batch, seq, preds = 3, 8, 4
  features = {
      "input_ids": rng.randint(0, config.vocab_size, [batch, seq]),
      "input_mask": np.array([[1] * seq, [1] * 6 + [0] * 2, [1] * 5 + [0] * 3]),
      "segment_ids": np.array([[0] * 4 + [1] * 4] * batch),
      "masked_lm_positions": np.array([[1, 2, 5, 0], [3, 1, 0, 0], [4, 0, 0, 0]]),
      "masked_lm_ids": rng.randint(0, config.vocab_size, [batch, preds]),
      "masked_lm_weights": np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]], np.float32),
      "next_sentence_labels": np.array([[0], [1], [1]]),
  }
  with tf.Graph().as_default():
    tf.set_random_seed(5)
    tensors = {k: tf.constant(v.astype(np.float32 if v.dtype == np.float32 else np.int32))
               for k, v in features.items()}
    outputs = pretraining_model.create_model_fn(config)(tensors, False)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      loss, values = sess.run(outputs["loss"], {}), sess.run(
          {v.op.name: v for v in tf.global_variables()})
  mlm_loss, nsp_loss = numpy_heads(values, config, features)
  assert mlm_loss > 1.0
  np.testing.assert_allclose(loss, mlm_loss + nsp_loss, rtol=1e-4)
  metrics = pretraining_data.pretraining_metrics({
      "masked_lm_weights": features["masked_lm_weights"],
      "masked_lm_log_probs": np.zeros([batch, preds]),
      "masked_lm_predictions": features["masked_lm_ids"] * np.array([1, 0, 1, 1]),
      "masked_lm_ids": features["masked_lm_ids"],
      "next_sentence_log_probs": np.log([0.5, 0.25, 1.0]),
      "next_sentence_predictions": np.array([0, 0, 1]),
      "next_sentence_labels": np.array([0, 1, 1])})
  # Weighted: the real slots are 3 + 2 + 1; column 1 is wrong in rows 0 and 1 (both real).
  wrong = sum(features["masked_lm_ids"][b, 1] != 0 for b in (0, 1))
  assert metrics["masked_lm_accuracy"] == pytest.approx((6 - wrong) / 6.0)
  assert metrics["next_sentence_accuracy"] == pytest.approx(2 / 3.0)
  assert metrics["next_sentence_loss"] == pytest.approx(-np.mean(np.log([0.5, 0.25, 1.0])))


# ---------------------------------------------------------------------------
# Memory: the tied word-embedding gradient must not grow with the tower count
# ---------------------------------------------------------------------------

GRAD_VOCAB = 97  # more rows than the batch has tokens, so [vocab, hidden] is told apart
GRAD_GLOBAL_BATCH = 8
GRAD_SEQ = 12
GRAD_PREDICTIONS = 6
WORD_EMBEDDINGS = "bert/embeddings/word_embeddings"


def gradient_features():
  """A fixed global batch; every example has the same number of real masked slots, so the
  mean of the tower losses equals the loss of the whole batch."""
  rng = np.random.RandomState(11)
  batch, seq, preds = GRAD_GLOBAL_BATCH, GRAD_SEQ, GRAD_PREDICTIONS
  positions = np.stack([rng.choice(np.arange(1, seq), preds, replace=False)
                        for _ in range(batch)])
  return {
      # Ids from the lower half only: the upper rows get gradient from the tied output
      # projection alone.
      "input_ids": rng.randint(0, GRAD_VOCAB // 2, [batch, seq]).astype(np.int32),
      "input_mask": np.ones([batch, seq], np.int32),
      "segment_ids": np.array([[0] * (seq // 2) + [1] * (seq - seq // 2)] * batch, np.int32),
      "masked_lm_positions": positions.astype(np.int32),
      "masked_lm_ids": rng.randint(0, GRAD_VOCAB, [batch, preds]).astype(np.int32),
      "masked_lm_weights": np.ones([batch, preds], np.float32),
      "next_sentence_labels": rng.randint(0, 2, [batch, 1]).astype(np.int32),
  }


def word_embedding_gradient(num_towers, initial_values=None):
  """Builds the real training step on `num_towers` logical CPU devices and returns what
  build_training hands the optimizer for the word embeddings.

  Args:
    num_towers: towers (one logical CPU device each).
    initial_values: dict variable name -> np.ndarray loaded after initialisation (so
      different tower counts start from the same weights), or None.

  Returns:
    dict with "grad" (the Tensor or IndexedSlices in the graph), "value" (its fetched
    value: np.ndarray or IndexedSlicesValue), "dense" (np.ndarray [vocab, hidden]) and
    "variables" (name -> np.ndarray, the weights the gradient was taken at).
  """
  config = modeling.BertConfig.from_dict(dict(TINY_CONFIG, vocab_size=GRAD_VOCAB))
  assert config.hidden_dropout_prob == 0.0 and config.attention_probs_dropout_prob == 0.0
  received = []
  real_apply = optimization.apply_gradients

  def recording_apply(grads_and_vars, *args, **kwargs):
    grads_and_vars = list(grads_and_vars)
    received.append(grads_and_vars)
    return real_apply(grads_and_vars, *args, **kwargs)

  plan = multigpu.plan_devices(num_towers, 1, visible_gpus=0)
  with tf.Graph().as_default():
    tf.set_random_seed(2)
    features = {k: tf.constant(v) for k, v in gradient_features().items()}
    # Records the pairs build_training hands the optimizer; the update itself is unchanged.
    with pytest.MonkeyPatch.context() as patch:
      patch.setattr(optimization, "apply_gradients", recording_apply)
      ops = multigpu.build_training(plan, pretraining_model.create_model_fn(config),
                                    features, 1e-3, 10, 0, optimizer_name="adamw")
    assert ops.accumulate_op is None and len(received) == 1
    grads = {var.op.name: grad for grad, var in received[0]}
    grad = grads[WORD_EMBEDDINGS]
    model_vars = {v.op.name: v for v in tf.trainable_variables()}
    with tf.Session(config=plan.session_config()) as sess:
      sess.run(tf.global_variables_initializer())
      if initial_values is not None:
        for name, var in model_vars.items():
          var.load(initial_values[name], sess)
      value, variables = sess.run([grad, model_vars])
  if hasattr(value, "indices"):  # a fetched IndexedSlices
    dense = np.zeros([GRAD_VOCAB, TINY_CONFIG["hidden_size"]], np.float64)
    np.add.at(dense, value.indices, value.values)
  else:
    dense = value
  return {"grad": grad, "value": value, "dense": dense, "variables": variables}


def gradient_rows(grad, value):
  """Rows of [hidden] floats that the gradient holds: static (graph) and fetched."""
  if isinstance(grad, tf.IndexedSlices):
    return grad.values.shape.as_list()[0], value.values.shape[0]
  return grad.shape.as_list()[0], value.shape[0]


def test_tied_embedding_gradient_does_not_grow_with_towers():
  vocab, hidden = GRAD_VOCAB, TINY_CONFIG["hidden_size"]
  one = word_embedding_gradient(1)
  # The tie is in place: rows of ids absent from the input still get gradient (from the
  # output projection), so the gradient covers the whole table.
  assert np.abs(one["dense"][vocab // 2:]).max() > 0.0
  _, one_rows = gradient_rows(one["grad"], one["value"])
  assert one_rows <= vocab

  for num_towers in (2, 4):
    many = word_embedding_gradient(num_towers, one["variables"])
    grad, value = many["grad"], many["value"]
    static_rows, rows = gradient_rows(grad, value)
    if isinstance(grad, tf.IndexedSlices):
      # Row count fixed by the global batch, not multiplied by the towers.
      assert static_rows is None or static_rows <= one_rows, (num_towers, static_rows)
      assert rows <= one_rows, (num_towers, rows, one_rows)
      assert value.values.shape[1:] == (hidden,)
    else:
      assert grad.shape.as_list() == [vocab, hidden], (num_towers, grad.shape)
      assert value.shape == (vocab, hidden)
      assert value.nbytes == vocab * hidden * 4
    # The same global batch and weights: the tower average is the one-tower gradient. The
    # masked-LM loss divides by sum(weights) + 1e-5 per tower, which alone moves the result by
    # 1e-5 * (1/12 - 1/48), about 6e-7 relative, with 4 towers; float32 rounding is below that.
    scale = np.abs(one["dense"]).max()
    np.testing.assert_allclose(many["dense"], one["dense"], rtol=0, atol=2e-6 * scale,
                               err_msg="%d towers" % num_towers)
