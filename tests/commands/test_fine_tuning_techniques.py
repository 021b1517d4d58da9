# coding=utf-8
"""The classifier's and NER's fine-tuning techniques end to end: --layerwise_lr_decay,
--ema_decay and --adversarial.

--layerwise_lr_decay: two runs of run_classifier_mgpu.py on two towers from the same seed (same initial weights,
batches and dropout), one with --layerwise_lr_decay=0.5 and one without, on a 2-layer BERT,
each of 2 steps with all of them warmup: the first step's learning rate is 0, so both
checkpoints of step 1 hold the initial weights and the moments of the same first gradient,
and the second step's move of each variable must be the undecayed run's times its factor
(head and pooler 1, layer 1 d, layer 0 d^2, embeddings d^3), to float precision.

--ema_decay: one run that trains, evaluates, predicts and exports; its predictions, the
export's, and those of its conversion to transformers' format and back all come from the
averages, and differ from what the raw weights predict.

--adversarial: a classifier run with FGM on two towers and an NER run with PGD, which
log the technique and its step time and train; the update itself is tested against a
reference in tests/training/test_adversarial.py.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu.training import checkpoints
from bert_mgpu.training import weight_averages
from bert_mgpu.transformers_format import to_tensorflow
from bert_mgpu.transformers_format import to_transformers
import cli
from classifier_runs import base_flags, read_lines, run_classifier, write_json, write_text

DECAY = 0.5
NUM_LAYERS = 2


def expected_factor(name):
  if name.startswith("bert/embeddings/"):
    return DECAY ** (NUM_LAYERS + 1)
  for layer in range(NUM_LAYERS):
    if name.startswith("bert/encoder/layer_%d/" % layer):
      return DECAY ** (NUM_LAYERS - layer)
  return 1.0


def checkpoint_values(path):
  reader = tf.train.load_checkpoint(path)
  return {name: reader.get_tensor(name).astype(np.float64)
          for name in reader.get_variable_to_shape_map()
          if not name.endswith(("adam_m", "adam_v")) and name != "global_step"}


@pytest.fixture(scope="module")
def runs(demo_data, tmp_path_factory):
  """{decay: (checkpoint values at step 1, at step 2, stderr)} for DECAY and 1.0, and
  "dirs": {decay: output_dir}."""
  root = str(tmp_path_factory.mktemp("layerwise"))
  config_file = os.path.join(root, "bert_config.json")
  write_json(config_file, dict(demo_data.config, num_hidden_layers=NUM_LAYERS))
  results = {"dirs": {}}
  for decay in (DECAY, 1.0):
    output_dir = os.path.join(root, "decay_%g" % decay)
    results["dirs"][decay] = output_dir
    # 50 examples x 0.32 epochs / (2 towers x 4) = 2 steps, both warmup.
    flags = base_flags(demo_data, output_dir, bert_config_file=config_file, do_eval=False,
                       do_predict=False, num_train_epochs=0.32, warmup_proportion=1.0,
                       save_checkpoints_steps=1, keep_checkpoint_max=0, random_seed=7,
                       layerwise_lr_decay=decay)
    result = run_classifier(flags)
    cli.assert_succeeded(result)
    results[decay] = (checkpoint_values(os.path.join(output_dir, "model.ckpt-1")),
                      checkpoint_values(os.path.join(output_dir, "model.ckpt-2")),
                      result.stderr)
  return results


def test_each_layer_moves_by_its_factor_of_the_undecayed_step(runs):
  start, end, _ = runs[DECAY]
  plain_start, plain_end = runs[1.0][:2]
  assert sorted(start) == sorted(plain_start)
  factors = set()
  for name in start:
    # The first step's rate is 0: both runs still hold the same initial weights.
    np.testing.assert_array_equal(start[name], plain_start[name], err_msg=name)
    plain_move = plain_end[name] - plain_start[name]
    assert np.abs(plain_move).max() > 0, name
    # Moves are differences of float32 weights: exact to a few units in their last place.
    resolution = 4 * float(np.spacing(np.float32(np.abs(start[name]).max())))
    np.testing.assert_allclose(end[name] - start[name], expected_factor(name) * plain_move,
                               rtol=1e-4, atol=resolution, err_msg=name)
    # The factor changes the move by far more than that resolution, so a factor of 1 in
    # place of it would fail.
    assert np.abs(plain_move).max() * (1 - expected_factor(name)) > 10 * resolution or \
        expected_factor(name) == 1.0, name
    factors.add(expected_factor(name))
  assert factors == {1.0, DECAY, DECAY ** 2, DECAY ** 3}


def test_the_log_names_the_smallest_and_largest_factor(runs):
  stderr = runs[DECAY][2]
  assert "layer-wise learning-rate decay 0.5" in stderr
  assert ("Layer-wise learning rates: the schedule's times 0.125 for 5 variable(s) "
          "(bert/embeddings) ... 1 for 4 variable(s) (bert/pooler, output_bias, "
          "output_weights); 4 factors in all.") in stderr, stderr[-3000:]
  assert "Layer-wise learning rates" not in runs[1.0][2]


# ---------------------------------------------------------------------------
# --ema_decay
# ---------------------------------------------------------------------------

EMA_DECAY = 0.5  # far from 1: 12 steps leave the averages far from the weights


@pytest.fixture(scope="module")
def ema_run(demo_data, tmp_path_factory):
  """A 2-tower run with --ema_decay that trains (12 steps), evaluates, predicts and exports:
  (output_dir, the export's base directory, the test texts, test_results.tsv's rows)."""
  root = str(tmp_path_factory.mktemp("ema"))
  output_dir, export_base = os.path.join(root, "model"), os.path.join(root, "exports")
  result = run_classifier(base_flags(demo_data, output_dir, ema_decay=EMA_DECAY,
                                     export_dir=export_base, random_seed=7))
  cli.assert_succeeded(result)
  assert ("weight averages with decay 0.5, bias-corrected with warmup: update t moves them "
          "by (1 - D_t) / (1 - D_1 ... D_t), D_t = min(D, (1 + t) / (10 + t))") in result.stderr
  assert tf.train.load_checkpoint(tf.train.latest_checkpoint(output_dir)).get_tensor(
      weight_averages.RECORDED_WARMUP) == 1.0  # the default
  texts = [text for _, text in demo_data.test]
  probabilities = np.array([[float(p) for p in line.split("\t")] for line in
                            read_lines(os.path.join(output_dir, "test_results.tsv"))])
  assert probabilities.shape == (len(texts), len(demo_data.labels))
  return output_dir, export_base, texts, probabilities


def predicted(texts, tmp_path, name, **where):
  """predict_text.py's probabilities of `texts` from `where` (output_dir or export_dir)."""
  input_file, output_file = str(tmp_path / "texts.txt"), str(tmp_path / name)
  write_text(input_file, "".join(text + "\n" for text in texts))
  result = cli.run_script("predict_text.py", cli.flag_list(dict(
      where, input_file=input_file, output_file=output_file)))
  cli.assert_succeeded(result)
  rows = [line.split("\t") for line in read_lines(output_file)]
  assert len(rows) == len(texts)
  return np.array([[float(p) for p in row[2:]] for row in rows])


def raw_copy(output_dir, directory):
  """output_dir's model files and its best checkpoint without the averages: the raw
  weights, as a model of their own."""
  os.mkdir(directory)
  for name in ("vocab.txt", "bert_config.json", "labels.txt", "model_settings.json"):
    shutil.copy(os.path.join(output_dir, name), directory)
  best = tf.train.latest_checkpoint(os.path.join(output_dir, "best"))
  reader = tf.train.load_checkpoint(best)
  path = checkpoints.write_arrays(
      {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
       if not weight_averages.is_average(name)},
      os.path.join(directory, os.path.basename(best)))
  tf.train.update_checkpoint_state(directory, path)


def test_checkpoints_and_best_keep_the_weights_and_their_averages(ema_run):
  output_dir = ema_run[0]
  best = tf.train.load_checkpoint(tf.train.latest_checkpoint(os.path.join(output_dir, "best")))
  saved = best.get_variable_to_shape_map()
  trained = [name for name in saved if name.startswith(("bert/encoder", "output_"))
             and not name.endswith(("adam_m", "adam_v", weight_averages.SUFFIX))]
  assert "output_weights" in trained
  for name in trained:
    assert weight_averages.average_name(name) in saved, name
  gap = np.abs(best.get_tensor("output_weights") -
               best.get_tensor("output_weights/ExponentialMovingAverage")).max()
  assert gap > 1e-3
  # The rule, recorded beside them.
  assert best.get_tensor(weight_averages.RECORDED_DECAY) == np.float32(EMA_DECAY)
  assert best.get_tensor(weight_averages.RECORDED_CORRECTION) == 1.0


def test_predictions_export_and_conversion_all_use_the_averages(ema_run, tmp_path):
  output_dir, export_base, texts, probabilities = ema_run
  from_output_dir = predicted(texts, tmp_path, "output_dir.tsv", output_dir=output_dir)
  np.testing.assert_allclose(from_output_dir, probabilities, rtol=0, atol=1e-5)
  from_export = predicted(texts, tmp_path, "export.tsv", export_dir=export_base)
  np.testing.assert_allclose(from_export, probabilities, rtol=0, atol=1e-5)
  hf, back = str(tmp_path / "hf"), str(tmp_path / "back")
  summary = to_transformers.convert(output_dir, hf)
  assert summary["training_only"] == []  # and no average was refused as a stray variable
  to_tensorflow.convert(hf, back, keep_head=True)
  converted = predicted(texts, tmp_path, "converted.tsv", output_dir=back)
  np.testing.assert_allclose(converted, probabilities, rtol=0, atol=1e-5)
  # The raw weights predict otherwise: the averages are what all of the above used.
  raw_dir = str(tmp_path / "raw")
  raw_copy(output_dir, raw_dir)
  raw = predicted(texts, tmp_path, "raw.tsv", output_dir=raw_dir)
  assert np.abs(raw - probabilities).max() > 1e-3


def test_a_later_run_starts_from_the_averages(ema_run, demo_data, tmp_path):
  """--init_checkpoint on a checkpoint with averages: a run with a learning rate of ~0
  keeps the averages (not the weights) in its first checkpoint."""
  output_dir = ema_run[0]
  best = tf.train.latest_checkpoint(os.path.join(output_dir, "best"))
  later = str(tmp_path / "later")
  result = run_classifier(base_flags(demo_data, later, init_checkpoint=best, do_eval=False,
                                     do_predict=False, n_gpus=1, num_train_epochs=0.2,
                                     learning_rate=1e-12))
  cli.assert_succeeded(result)
  started = tf.train.load_checkpoint(tf.train.latest_checkpoint(later))
  average = tf.train.load_checkpoint(best).get_tensor("output_weights/ExponentialMovingAverage")
  np.testing.assert_allclose(started.get_tensor("output_weights"), average, atol=1e-6)


def test_an_output_dir_from_before_warmup_resumes_without_it(ema_run, demo_data, tmp_path):
  """An output_dir written before --ema_warmup existed (its checkpoint records D and the
  correction, not warmup; its training_flags.json has no ema_warmup): resumed without the
  flag, its averages continue without warmup, one line says so, and the record says false;
  with --ema_warmup given, refused."""
  output_dir = str(tmp_path / "before_warmup")
  shutil.copytree(ema_run[0], output_dir)
  latest = tf.train.latest_checkpoint(output_dir)
  reader = tf.train.load_checkpoint(latest)
  old = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
         if name != weight_averages.RECORDED_WARMUP}
  for path in glob.glob(latest + ".*"):
    os.remove(path)
  checkpoints.write_arrays(old, latest)
  record_file = os.path.join(output_dir, "training_flags.json")
  with open(record_file, encoding="utf-8") as f:
    record = json.load(f)
  del record["flags"]["ema_warmup"]
  with open(record_file, "w", encoding="utf-8") as f:
    json.dump(record, f)
  before = directory_state(output_dir)
  refused = run_classifier(base_flags(demo_data, output_dir, ema_decay=EMA_DECAY,
                                      ema_warmup=True, num_train_epochs=3))
  cli.assert_one_line_error(refused, "--ema_warmup=true: ",
                            "kept its weight averages with --ema_warmup=false")
  assert directory_state(output_dir) == before
  result = run_classifier(base_flags(demo_data, output_dir, ema_decay=EMA_DECAY,
                                     random_seed=7, do_eval=False, do_predict=False,
                                     num_train_epochs=3))
  cli.assert_succeeded(result)
  assert "kept its weight averages without --ema_warmup: this run continues them so" in (
      result.stderr)
  assert ("weight averages with decay 0.5, bias-corrected: each update moves them by "
          "(1 - D) / (1 - D^t)") in result.stderr
  with open(record_file, encoding="utf-8") as f:
    assert json.load(f)["flags"]["ema_warmup"] is False  # the rule in effect
  continued = tf.train.latest_checkpoint(output_dir)
  assert continued != latest
  names = [name for name, _ in tf.train.list_variables(continued)]
  assert weight_averages.RECORDED_CORRECTION in names
  assert weight_averages.RECORDED_WARMUP not in names


def test_an_output_dir_from_before_the_record_resumes_by_its_rule(ema_run, demo_data,
                                                                   tmp_path):
  """An output_dir whose averages have no record (written before the correction): a longer
  run resumes it, says in one warning that its averages keep the old rule, and records
  none."""
  output_dir = str(tmp_path / "legacy")
  shutil.copytree(ema_run[0], output_dir)
  latest = tf.train.latest_checkpoint(output_dir)
  reader = tf.train.load_checkpoint(latest)
  old = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
         if not weight_averages.is_record(name)}
  for path in glob.glob(latest + ".*"):
    os.remove(path)
  checkpoints.write_arrays(old, latest)
  os.remove(os.path.join(output_dir, "training_flags.json"))  # written since, too
  result = run_classifier(base_flags(demo_data, output_dir, ema_decay=EMA_DECAY,
                                     random_seed=7, do_eval=False, do_predict=False,
                                     num_train_epochs=3))
  cli.assert_succeeded(result)
  assert ("was written before weight averages were bias-corrected: this run continues its "
          "averages by that rule") in result.stderr
  assert "weight averages with decay 0.5, not bias-corrected" in result.stderr
  assert "has no training_flags.json" in result.stderr
  with open(os.path.join(output_dir, "training_flags.json"), encoding="utf-8") as f:
    assert json.load(f)["flags"]["ema_bias_correction"] is False  # the rule in effect
  continued = tf.train.latest_checkpoint(output_dir)
  assert continued != latest
  assert not [name for name, _ in tf.train.list_variables(continued)
              if weight_averages.is_record(name)]


def directory_state(directory):
  return sorted((path, os.path.getmtime(path)) for path in
                glob.glob(os.path.join(directory, "**"), recursive=True))


def test_resuming_with_another_choice_is_one_line_and_writes_nothing(ema_run, runs, demo_data):
  for output_dir, extra, message in (
      (ema_run[0], {}, ["was trained with --ema_decay and holds weight averages that this run "
                        "would drop"]),
      (runs["dirs"][1.0], {"ema_decay": 0.9},
       ["--ema_decay=0.9: ", "was trained without it and has no weight averages to continue"]),
      (ema_run[0], {"ema_decay": 0.9},
       ["--ema_decay=0.9: ", "kept its weight averages with --ema_decay=0.5, and their bias "
        "correction holds for that D only"]),
      (ema_run[0], {"ema_decay": EMA_DECAY, "ema_bias_correction": False},
       ["--ema_bias_correction=false: ",
        "kept its weight averages with --ema_bias_correction=true"]),
      (ema_run[0], {"ema_decay": EMA_DECAY, "ema_warmup": False},
       ["--ema_warmup=false: ", "kept its weight averages with --ema_warmup=true"])):
    before = directory_state(output_dir)
    result = run_classifier(base_flags(demo_data, output_dir, **extra))
    cli.assert_one_line_error(result, *message)
    assert directory_state(output_dir) == before


@pytest.mark.parametrize("script", ["run_classifier_mgpu.py", "run_ner_mgpu.py"])
@pytest.mark.parametrize("flag,value,message", [
    ("layerwise_lr_decay", "0", "give a factor in (0, 1]"),
    ("layerwise_lr_decay", "1.5", "give a factor in (0, 1]"),
    ("ema_decay", "1", "give a factor in [0, 1)"),
    ("ema_decay", "-0.5", "give a factor in [0, 1)")])
def test_a_factor_out_of_range_is_one_line(script, flag, value, message, tmp_path):
  task = ["--task_name=tsv"] if script == "run_classifier_mgpu.py" else []
  result = cli.run_script(script, ["--%s=%s" % (flag, value), "--do_train",
                                   "--data_dir=" + str(tmp_path),
                                   "--output_dir=" + str(tmp_path / "out")] + task)
  cli.assert_one_line_error(result, "--%s=%s: %s" % (flag, float(value), message))
  assert not os.path.exists(str(tmp_path / "out"))


@pytest.mark.parametrize("script", ["run_classifier_mgpu.py", "run_ner_mgpu.py"])
@pytest.mark.parametrize("flags,message", [
    (["--adversarial=fgm", "--adversarial_epsilon=0"],
     "--adversarial_epsilon=0.0: give a positive size"),
    (["--adversarial=pgd", "--adversarial_alpha=2"],
     "--adversarial_alpha=2.0: PGD's step must be positive and at most "
     "--adversarial_epsilon=1.0"),
    (["--adversarial=pgd", "--adversarial_steps=0"],
     "--adversarial_steps=0: PGD takes at least 1 step"),
    (["--rdrop_alpha=-1"], "--rdrop_alpha=-1.0: give a weight of 0 or more")])
def test_an_adversarial_or_r_drop_setting_out_of_range_is_one_line(script, flags, message,
                                                                   tmp_path):
  task = ["--task_name=tsv"] if script == "run_classifier_mgpu.py" else []
  result = cli.run_script(script, flags + ["--do_train", "--data_dir=" + str(tmp_path),
                                           "--output_dir=" + str(tmp_path / "out")] + task)
  cli.assert_one_line_error(result, message)
  assert not os.path.exists(str(tmp_path / "out"))


@pytest.mark.parametrize("flag", ["--layerwise_lr_decay=0.8", "--ema_decay=0.9",
                                  "--adversarial=fgm", "--rdrop_alpha=4"])
def test_scripts_other_than_the_classifier_and_ner_do_not_take_them(flag):
  result = cli.run_script("run_pretraining_mgpu.py", [flag])
  assert result.returncode != 0
  assert flag[2:].split("=")[0] in result.stderr


# ---------------------------------------------------------------------------
# --adversarial
# ---------------------------------------------------------------------------

STEP_TIME = r", \d+\.\d{3} s per step"


def logged_losses(stderr):
  return [float(loss) for loss in re.findall(r"step \d+/\d+  loss ([0-9.naif]+)", stderr)]


def trained_with(result, techniques):
  """The logged losses of a successful run that named `techniques` (its passes per batch)
  at the start and their step time once, at the end of the second log window; all finite."""
  cli.assert_succeeded(result)
  assert techniques in result.stderr
  assert len(re.findall(re.escape(techniques) + STEP_TIME, result.stderr)) == 1, \
      result.stderr[-3000:]
  losses = logged_losses(result.stderr)
  assert losses and np.all(np.isfinite(losses)), result.stderr[-3000:]
  return losses


def test_a_classifier_run_with_fgm_on_two_towers(demo_data, tmp_path):
  output_dir = str(tmp_path / "fgm")
  result = run_classifier(base_flags(demo_data, output_dir, adversarial="fgm",
                                     do_predict=False, random_seed=7))
  losses = trained_with(result, "adversarial training FGM on the token embeddings (epsilon 1): "
                                "2 forward and backward passes per batch")
  # It trains: 50 examples x 2 epochs / (2 towers x 4) = 12 steps, a checkpoint of the
  # last, and an evaluation.
  assert len(losses) == 12, losses
  assert tf.train.latest_checkpoint(output_dir).endswith("model.ckpt-12")
  assert os.path.exists(os.path.join(output_dir, "eval_results.txt"))
  plain = run_classifier(base_flags(demo_data, str(tmp_path / "plain"), do_eval=False,
                                    do_predict=False, random_seed=7))
  cli.assert_succeeded(plain)
  assert "adversarial" not in plain.stderr
  # The same first loss (same start and batch: the logged loss is the clean one), then
  # another course.
  plain_losses = logged_losses(plain.stderr)
  assert losses[0] == pytest.approx(plain_losses[0], rel=1e-5)
  assert losses[1:] != pytest.approx(plain_losses[1:], rel=1e-5)


def test_an_ner_run_with_pgd_and_r_drop(tmp_path):
  data_dir = str(tmp_path / "ner_data")
  subprocess.run([sys.executable, cli.script_path(os.path.join("scripts", "make_ner_data.py")),
                  "--output_dir", data_dir, "--train_sentences", "64"], check=True,
                 stdout=subprocess.PIPE, timeout=120)

  def run_ner(name, **techniques):
    return cli.run_script("run_ner_mgpu.py", cli.flag_list(dict(
        data_dir=os.path.join(data_dir, "conll"), vocab_file=os.path.join(data_dir, "vocab.txt"),
        bert_config_file=os.path.join(data_dir, "bert_config.json"),
        output_dir=str(tmp_path / name), do_train=True, do_eval=False, do_predict=False,
        n_gpus=2, max_seq_length=32, train_batch_size=8, learning_rate=1e-3,
        num_train_epochs=1, log_steps=1, random_seed=7, **techniques)))

  losses = trained_with(
      run_ner("pgd", adversarial="pgd", adversarial_steps=2, rdrop_alpha=1),
      "adversarial training PGD on the token embeddings (2 steps of 0.3 in a ball of radius "
      "1), R-Drop with alpha 1: 6 forward and backward passes per batch")
  assert tf.train.latest_checkpoint(str(tmp_path / "pgd")) is not None
  # R-Drop reaches the tagger: the first loss (the same start and batch, the adversarial
  # part not in it) is not plain's.
  plain = run_ner("plain")
  cli.assert_succeeded(plain)
  assert losses[0] != pytest.approx(logged_losses(plain.stderr)[0], rel=1e-4)


def test_r_drop_with_the_crf_is_one_line(tmp_path):
  result = cli.run_script("run_ner_mgpu.py", [
      "--use_crf", "--rdrop_alpha=4", "--do_train", "--data_dir=" + str(tmp_path),
      "--output_dir=" + str(tmp_path / "out")])
  cli.assert_one_line_error(result, "--rdrop_alpha=4.0 with --use_crf: R-Drop compares "
                                    "per-token tag distributions")
  assert not os.path.exists(str(tmp_path / "out"))


def test_a_classifier_run_with_r_drop_trains_on_two_passes(demo_data, tmp_path):
  """Two steps from the same seed with and without --rdrop_alpha: the demo model's dropout
  makes the two passes differ, so the first loss (the same batch and start) is not
  plain's."""
  losses = {}
  for alpha in (0, 4):
    result = run_classifier(base_flags(demo_data, str(tmp_path / str(alpha)), do_eval=False,
                                       do_predict=False, num_train_epochs=0.32,
                                       random_seed=7, rdrop_alpha=alpha))
    cli.assert_succeeded(result)
    losses[alpha] = logged_losses(result.stderr)
    assert (("R-Drop with alpha 4: 2 forward and backward passes per batch" in result.stderr)
            == (alpha == 4))
  assert len(losses[4]) == 2 and np.all(np.isfinite(losses[4]))
  assert losses[4][0] != pytest.approx(losses[0][0], rel=1e-4)
