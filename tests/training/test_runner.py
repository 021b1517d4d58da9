# coding=utf-8
"""Tests of runner.py: the loop (resume, best checkpoint, early stopping, divergence,
preemption), inference, the run config, strict flags and the output_dir lock."""

import glob
import logging
import os
import shutil
import signal

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from absl import flags as absl_flags

from bert_mgpu import command_line
from bert_mgpu import command_line_base
from bert_mgpu.data import output_files
from bert_mgpu.data import tfrecord_io
from bert_mgpu import errors
from bert_mgpu.training import adversarial
from bert_mgpu.training import run_settings
from bert_mgpu.training import runner
from tiny_model import (FEATURE_SPEC, NUM_LABELS, classifier_model_fn, cpu_plan,  # pylint: disable=g-multiple-import
                        random_batch, records_file, train_dataset_fn, write_records)


def run_config(output_dir, num_towers, global_batch, num_train_steps, **fields):
  """A RunConfig on `num_towers` logical CPU devices with global batch `global_batch`."""
  fields.setdefault("learning_rate", 1e-3)
  return run_settings.RunConfig(output_dir=str(output_dir), n_gpus=num_towers,
                                train_batch_size=global_batch // num_towers,
                                eval_batch_size=global_batch // num_towers,
                                num_train_steps=num_train_steps, plan=cpu_plan(num_towers),
                                **fields)


def test_inference_keeps_every_example_of_a_partial_last_batch(tmp_path):
  data = random_batch(np.random.RandomState(11), 37)
  record_file = str(tmp_path / "test.tf_record")
  write_records(record_file, data)
  checkpoint = runner.train(run_config(tmp_path / "model", 1, 8, 2, log_steps=1),
                            classifier_model_fn(), train_dataset_fn(record_file, 8))
  outputs = {}
  for towers in (1, 2):
    per_tower_batch = 8
    def dataset_fn():
      return tfrecord_io.make_dataset([record_file], FEATURE_SPEC, per_tower_batch * towers, False)
    outputs[towers] = runner.infer(run_config(tmp_path / "model", towers, 8, 2),
                                   classifier_model_fn(), dataset_fn, per_tower_batch * towers,
                                   checkpoint)
    assert outputs[towers]["probabilities"].shape == (37, NUM_LABELS)
    np.testing.assert_array_equal(outputs[towers]["label_ids"], data["label_ids"])
  np.testing.assert_allclose(outputs[1]["probabilities"], outputs[2]["probabilities"],
                             rtol=1e-5, atol=1e-6)


def checkpoint_values(path):
  reader = tf.train.load_checkpoint(path)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def test_resumed_training_ends_where_an_uninterrupted_run_does(tmp_path):
  data = random_batch(np.random.RandomState(2), 24)
  record_file = str(tmp_path / "train.tf_record")
  write_records(record_file, data)
  kwargs = dict(num_warmup_steps=1, log_steps=1, save_checkpoints_steps=2, random_seed=9)
  straight_dir, resumed_dir = str(tmp_path / "straight"), str(tmp_path / "resumed")
  straight = runner.train(run_config(straight_dir, 2, 8, 4, **kwargs), classifier_model_fn(),
                          train_dataset_fn(record_file, 8))
  # A copy as it was when killed right after saving step 2: step 4 was never written.
  shutil.copytree(straight_dir, resumed_dir)
  for path in glob.glob(os.path.join(resumed_dir, "model.ckpt-4*")):
    os.remove(path)
  tf.train.update_checkpoint_state(resumed_dir, os.path.join(resumed_dir, "model.ckpt-2"))
  resumed = runner.train(run_config(resumed_dir, 2, 8, 4, **kwargs), classifier_model_fn(),
                         train_dataset_fn(record_file, 8))
  assert os.path.basename(resumed) == os.path.basename(straight) == "model.ckpt-4"
  a, b = checkpoint_values(straight), checkpoint_values(resumed)
  assert set(a) == set(b)
  assert "output_weights/adam_m" in a and a["global_step"] == 4
  for name in a:
    np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-7, err_msg=name)


def test_bias_corrected_adamw_resumes_bit_exactly(tmp_path):
  """Killed after step 2 of 5 and resumed: the same bits as a run that never stopped, which
  needs the correction's step t from the restored global_step; and not Google's update."""
  record_file = str(tmp_path / "train.tf_record")
  write_records(record_file, random_batch(np.random.RandomState(2), 24))
  kwargs = dict(num_warmup_steps=1, log_steps=1, save_checkpoints_steps=2, random_seed=9)

  def train(name, **extra):
    return runner.train(run_config(tmp_path / name, 1, 8, 5, **dict(kwargs, **extra)),
                        classifier_model_fn(), train_dataset_fn(record_file, 8))

  straight = train("straight", adam_bias_correction=True)
  resumed_dir = str(tmp_path / "resumed")
  shutil.copytree(str(tmp_path / "straight"), resumed_dir)
  for path in glob.glob(os.path.join(resumed_dir, "model.ckpt-[45]*")):
    os.remove(path)
  tf.train.update_checkpoint_state(resumed_dir, os.path.join(resumed_dir, "model.ckpt-2"))
  resumed = train("resumed", adam_bias_correction=True)
  assert os.path.basename(resumed) == os.path.basename(straight) == "model.ckpt-5"
  a, b = checkpoint_values(straight), checkpoint_values(resumed)
  assert set(a) == set(b) and a["global_step"] == 5
  for name in a:
    np.testing.assert_array_equal(a[name], b[name], err_msg=name)
  google = checkpoint_values(train("google"))
  assert not np.allclose(google["output_weights"], a["output_weights"], rtol=1e-2)


class _Warnings(object):
  """The tensorflow logger's warnings while the context lasts."""

  def __enter__(self):
    self.records = []
    self._handler = logging.Handler(logging.WARNING)
    self._handler.emit = self.records.append
    logging.getLogger("tensorflow").addHandler(self._handler)
    return self

  def __exit__(self, *exc_info):
    logging.getLogger("tensorflow").removeHandler(self._handler)

  def count(self, text):
    return sum(text in record.getMessage() for record in self.records)


def test_training_from_scratch_with_googles_adamw_warns_once(tmp_path):
  record_file = records_file(tmp_path, seed=4, num_examples=16)
  warning = run_settings.FROM_SCRATCH_WARNING
  assert "--initializer=normal --adam_bias_correction" in warning

  def warnings_of(name, **fields):
    with _Warnings() as caught:
      runner.train(run_config(tmp_path / name, 1, 8, 2, **fields), classifier_model_fn(),
                   train_dataset_fn(record_file, 8))
    return caught.count(warning)

  assert warnings_of("scratch") == 1
  assert warnings_of("corrected", adam_bias_correction=True) == 0
  assert warnings_of("radam", optimizer="radam") == 0
  # Fine-tuning from a checkpoint of BERT's body alone, without pooler or head (as Google's
  # encoder-only checkpoints come): no warning.
  body_only = str(tmp_path / "body_only" / "model.ckpt")
  with tf.Graph().as_default():
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(tmp_path / "scratch")))
    body = [tf.Variable(reader.get_tensor(name), name=name)
            for name in reader.get_variable_to_shape_map()
            if name.startswith(("bert/embeddings/", "bert/encoder/")) and "adam_" not in name]
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      tf.train.Saver(body).save(sess, body_only)
  assert warnings_of("fine_tuned", init_checkpoint=body_only) == 0


@pytest.mark.parametrize("fields, fresh, warns", [
    ({}, ["bert/encoder/layer_0/output/dense/kernel", "output_weights"], True),
    ({}, ["bert/embeddings/word_embeddings"], True),
    # A new head, or a pooler an encoder-only checkpoint lacks, is not the body.
    ({}, ["output_weights", "output_bias", "bert/pooler/dense/kernel"], False),
    ({"adam_bias_correction": True}, ["bert/embeddings/word_embeddings"], False),
    ({"optimizer": "radam"}, ["bert/embeddings/word_embeddings"], False),
    ({"optimizer": "lamb"}, ["bert/embeddings/word_embeddings"], False),
])
def test_the_from_scratch_warning_is_about_the_body_and_googles_adamw(fields, fresh, warns):
  config = run_settings.JobSettings("out", **fields)
  assert run_settings.uncorrected_adam_from_scratch(config, fresh) is warns


@pytest.mark.parametrize("model_option, message", [
    ("nan_loss", r"loss is nan and the gradient norm nan at step 1\b"),
    # A finite loss whose gradient is NaN: the update would write NaN into the weights.
    ("nan_gradient", r"gradient norm nan at step 1\b"),
])
def test_non_finite_step_stops_without_a_new_checkpoint(tmp_path, model_option, message):
  record_file = records_file(tmp_path, seed=4, num_examples=16)
  output_dir = str(tmp_path / "model")
  with pytest.raises(errors.TrainingDiverged, match=message):
    runner.train(run_config(output_dir, 2, 8, 3, save_checkpoints_steps=1),
                 classifier_model_fn(**{model_option: True}), train_dataset_fn(record_file, 8))
  assert tf.train.latest_checkpoint(output_dir) is None


def test_keep_checkpoint_max_also_counts_checkpoints_from_before_a_restart(tmp_path):
  record_file = records_file(tmp_path, seed=5, num_examples=16)
  output_dir = str(tmp_path / "model")
  for steps in (3, 6):
    runner.train(run_config(output_dir, 1, 8, steps, save_checkpoints_steps=1,
                            keep_checkpoint_max=2),
                 classifier_model_fn(), train_dataset_fn(record_file, 8))
  kept = sorted(os.path.basename(p) for p in glob.glob(os.path.join(output_dir, "*.index")))
  assert kept == ["model.ckpt-5.index", "model.ckpt-6.index"]


def test_early_stopped_run_does_not_train_again_and_best_dir_can_move(tmp_path):
  record_file = records_file(tmp_path, seed=6, num_examples=16)
  output_dir = str(tmp_path / "model")
  # A metric that never improves after the first evaluation: patience 1 stops at step 2.
  eval_spec = runner.EvalSpec(
      lambda: tfrecord_io.make_dataset([record_file], FEATURE_SPEC, 8, False),
      lambda outputs: {"score": 0.5}, "score", 1)
  for _ in range(2):
    last = runner.train(run_config(output_dir, 1, 8, 10, save_checkpoints_steps=1),
                        classifier_model_fn(), train_dataset_fn(record_file, 8), eval_spec)
    assert os.path.basename(last) == "model.ckpt-2"
  assert os.path.basename(tf.train.latest_checkpoint(output_dir)) == "model.ckpt-2"
  moved = str(tmp_path / "moved")
  shutil.move(output_dir, moved)
  best = tf.train.latest_checkpoint(os.path.join(moved, "best"))
  assert best is not None and os.path.basename(best) == "model.ckpt-1"


def test_expand_input_files_globs_directories_and_names_a_pattern_that_matches_nothing(tmp_path):
  for name in ("b.tfrecord", "a.tfrecord", "notes.txt"):
    (tmp_path / name).write_text(u"x")
  directory = str(tmp_path)
  assert tfrecord_io.expand_input_files(directory + "/*.txt," + directory, ".tfrecord") == [
      os.path.join(directory, n) for n in ("notes.txt", "a.tfrecord", "b.tfrecord")]
  # A directory that does not exist raised NotFoundError from tf.gfile.Glob on TF 1.15.
  for flag in ("", directory + "/missing_dir/*.txt", directory + "/*.csv"):
    with pytest.raises(errors.UsageError, match="--input_file"):
      tfrecord_io.expand_input_files(flag)


# ---------------------------------------------------------------------------
# The run config and the command line
# ---------------------------------------------------------------------------

class FakeFlags(object):
  """Flag values as a run script has them: attributes, and `name in flags`."""

  def __init__(self, **values):
    self.__dict__.update(values)

  def __contains__(self, name):
    return name in self.__dict__


def job_of(flag_values):
  """The JobSettings the command-line module reads from these flags."""
  return command_line.job_settings(flag_values)


def classifier_flags(**overrides):
  values = dict(output_dir="out", init_checkpoint=None, n_gpus=2, towers_per_gpu=2,
                variables_on_gpu=False, train_batch_size=4, accumulation_steps=3,
                eval_batch_size=5, predict_batch_size=6, learning_rate=1e-4,
                optimizer="adamw", save_checkpoints_steps=10, keep_checkpoint_max=5,
                log_steps=1, random_seed=1, do_train=True, num_train_epochs=2.0,
                warmup_proportion=0.1)
  values.update(overrides)
  return FakeFlags(**values)


def test_run_config_does_the_batch_and_step_arithmetic_once():
  config = run_settings.make_run_config(job_of(classifier_flags()), num_train_examples=1000)
  assert config.num_towers == 4
  assert config.micro_batch_size == 16 and config.global_batch_size == 48
  assert config.global_eval_batch_size == 20 and config.global_predict_batch_size == 24
  assert config.num_train_steps == 41  # int(1000 x 2 / 48)
  assert config.num_warmup_steps == 4
  # Pretraining counts steps itself.
  pretraining = run_settings.make_run_config(job_of(classifier_flags(num_train_steps=7,
                                                                 num_warmup_steps=2)))
  assert (pretraining.num_train_steps, pretraining.num_warmup_steps) == (7, 2)
  # Without --do_train there are no steps to count, and no training set is needed.
  assert run_settings.make_run_config(job_of(classifier_flags(do_train=False))).num_train_steps == 0


def test_less_than_one_global_batch_is_a_usage_error():
  with pytest.raises(errors.UsageError, match=r"^47 training questions x 1 epochs is less "
                     r"than one global batch of 48: lower --train_batch_size"):
    run_settings.make_run_config(job_of(classifier_flags(num_train_epochs=1.0)),
                                 num_train_examples=47,
                                 example_noun="training questions")


def test_a_script_without_predict_flags_gets_the_default_batch():
  values = classifier_flags()
  del values.__dict__["predict_batch_size"]
  config = run_settings.make_run_config(job_of(values), num_train_examples=1000)
  assert config.global_predict_batch_size == 8 * config.num_towers


def test_forked_workers_drop_their_copy_of_the_output_dir_lock(tmp_path):
  # A featurizing worker that outlived a killed run used to keep output_dir locked.
  output_dir = str(tmp_path / "locked")
  output_files.lock_output_dir(output_dir)
  try:
    fd = output_files._held_locks[os.path.abspath(output_dir)]  # pylint: disable=protected-access
    pid = os.fork()
    if pid == 0:  # the child: its copy of the lock fd must be closed
      try:
        os.fstat(fd)
        os._exit(1)
      except OSError:
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "the child kept the lock fd"
    # The child closing its copy did not release the parent's lock.
    probe = os.open(os.path.join(output_dir, output_files.LOCK_FILE_NAME), os.O_RDWR)
    try:
      with pytest.raises(OSError):
        output_files.fcntl.flock(probe, output_files.fcntl.LOCK_EX | output_files.fcntl.LOCK_NB)
    finally:
      os.close(probe)
  finally:
    os.close(output_files._held_locks.pop(os.path.abspath(output_dir)))  # pylint: disable=protected-access


def test_run_config_logs_the_device_mapping():
  config = run_config("out", 2, 8, 10)
  lines = config.describe_training()
  assert "2 tower(s) x per-tower batch 4 x 1 accumulation step(s) = global batch 8" in lines
  assert "tower 1 -> /cpu:1" in lines


@pytest.mark.parametrize("fields,passes", [
    ({"attack": adversarial.make_attack("fgm")}, 2), ({"rdrop_alpha": 4.0}, 2),
    ({"attack": adversarial.make_attack("fgm"), "rdrop_alpha": 4.0}, 4),
    ({"attack": adversarial.make_attack("pgd", steps=3), "rdrop_alpha": 4.0}, 8)])
def test_run_config_counts_the_passes_of_adversarial_training_and_r_drop(fields, passes):
  assert run_config("out", 2, 8, 10).extra_passes() is None
  config = run_config("out", 2, 8, 10, **fields)
  described = config.extra_passes()
  assert described.endswith(": %d forward and backward passes per batch" % passes)
  assert ("R-Drop with alpha 4" in described) == ("rdrop_alpha" in fields)
  assert described in config.describe_training()[1]
  # Each adversarial pass is a collective: workers compare the count (peers.py).
  assert config.adversarial_passes == (0 if "attack" not in fields else fields["attack"].passes)


def strict_flag_values():
  flag_values = absl_flags.FlagValues()
  absl_flags.DEFINE_integer("n_gpus", 1, "", flag_values=flag_values)
  absl_flags.DEFINE_bool("do_train", False, "", flag_values=flag_values)
  return flag_values


@pytest.mark.parametrize("argv, message", [
    (["--n_gpu=2"], r"^unknown flag --n_gpu: did you mean --n_gpus\? If the command line "
                    r"carries it on purpose, add --undefok=n_gpu\."),
    (["--do_train", "true"], r"^unexpected argument 'true'"),
    (["--n_gpus=x"], r"n_gpus.*x"),
])
def test_command_line_is_parsed_strictly(argv, message):
  with pytest.raises(errors.UsageError, match=message):
    command_line_base.check_command_line(["script.py"] + argv, strict_flag_values())


def test_undefok_lets_a_command_line_keep_an_unknown_flag():
  flag_values = strict_flag_values()
  command_line_base.check_command_line(
      ["script.py", "--n_gpu=2", "--undefok=n_gpu", "--nodo_train"], flag_values)
  assert flag_values.n_gpus == 1 and not flag_values.do_train


# ---------------------------------------------------------------------------
# fp16: skipped steps are not divergence, and resume counts the batches consumed
# ---------------------------------------------------------------------------

POISON_ID = 39  # an input id whose batch gets a NaN gradient (an fp16 overflow stand-in)


def poisoned_model_fn():
  """The tiny classifier whose gradient is NaN on a batch holding POISON_ID (finite loss)."""
  base = classifier_model_fn()

  def model_fn(features, is_training):
    outputs = base(features, is_training)
    poisoned = tf.reduce_any(tf.equal(features["input_ids"], POISON_ID))
    bias = [v for v in tf.trainable_variables() if v.op.name == "output_bias"][0]
    # Adds 0 to the loss; its gradient is 0/0 when poisoned.
    trap = tf.sqrt(tf.reduce_sum(tf.square(bias - tf.stop_gradient(bias))))
    outputs["loss"] += tf.where_v2(poisoned, trap, tf.zeros_like(trap))
    return outputs
  return model_fn


def poisoned_records(tmp_path):
  batch = random_batch(np.random.RandomState(8), 48)
  batch["input_ids"] = np.where(batch["input_ids"] == POISON_ID, 1, batch["input_ids"])
  batch["input_ids"][5, 1] = POISON_ID
  record_file = str(tmp_path / "train.tf_record")
  write_records(record_file, batch)
  return record_file


def test_fp16_skipped_steps_are_not_divergence_and_resume_counts_batches(tmp_path):
  record_file = poisoned_records(tmp_path)

  def train(output_dir, steps):
    config = run_config(output_dir, 2, 8, steps, precision="fp16", random_seed=2,
                        save_checkpoints_steps=3)
    # fp16 on logical CPU devices, which the device check refuses: this tests the loss
    # scaling's logic, not its speed.
    config.devices.checked = True
    return runner.train(config, poisoned_model_fn(), train_dataset_fn(record_file, 8))

  straight = train(tmp_path / "straight", 9)
  reader = tf.train.load_checkpoint(straight)
  assert reader.get_tensor("global_step") == 9
  # Each batch with the poisoned example was an attempt that skipped its update.
  overflows = int(reader.get_tensor("loss_scaling/steps_attempted")) - 9
  assert overflows >= 1, "the poisoned example never came up"
  assert reader.get_tensor("loss_scaling/scale") == 2.0 ** 15 / 2 ** overflows

  # A copy as it was when stopped at the first checkpoint after a skipped step, then
  # resumed: the data position comes from steps_attempted, not global_step, so the run
  # ends where the straight one did. The poisoned example is in one of the first 6
  # batches, so the checkpoint of step 6 at the latest comes after a skip.
  stop_step = [s for s in (3, 6) if tf.train.load_checkpoint(
      os.path.join(str(tmp_path / "straight"), "model.ckpt-%d" % s)).get_tensor(
          "loss_scaling/steps_attempted") > s][0]
  resumed_dir = str(tmp_path / "resumed")
  shutil.copytree(str(tmp_path / "straight"), resumed_dir)
  for later in range(stop_step + 1, 10):
    for path in glob.glob(os.path.join(resumed_dir, "model.ckpt-%d.*" % later)):
      os.remove(path)
  tf.train.update_checkpoint_state(resumed_dir,
                                   os.path.join(resumed_dir, "model.ckpt-%d" % stop_step))
  resumed = train(resumed_dir, 9)
  a, b = checkpoint_values(straight), checkpoint_values(resumed)
  for name in a:
    np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-7, err_msg=name)


# ---------------------------------------------------------------------------
# A signal at the very end of training still stops the run
# ---------------------------------------------------------------------------

def signalling_eval_spec(record_file, metric_values, signal_at_call):
  """An EvalSpec whose metrics come from `metric_values`; its call number `signal_at_call`
  (1-based) sends this process SIGTERM, as a scheduler would during that evaluation."""
  calls = []

  def metrics_fn(unused_outputs):
    calls.append(1)
    if len(calls) == signal_at_call:
      os.kill(os.getpid(), signal.SIGTERM)
    return {"score": metric_values[len(calls) - 1]}
  return runner.EvalSpec(lambda: tfrecord_io.make_dataset([record_file], FEATURE_SPEC, 8, False),
                         metrics_fn, "score", 1)


@pytest.mark.parametrize("metric_values, signal_at_call, stop_step", [
    ([0.1, 0.2, 0.3], 3, 3),   # during the evaluation of the last step
    ([0.5, 0.4, 0.3], 2, 2),   # during the evaluation that stops early
])
def test_a_signal_when_training_ends_still_stops_the_run(tmp_path, metric_values,
                                                        signal_at_call, stop_step):
  record_file = records_file(tmp_path, seed=6, num_examples=16)
  output_dir = str(tmp_path / "model")
  with pytest.raises(errors.Preempted, match=r"Stopped by SIGTERM after training ended "
                     r"\(step %d\); saved .*model\.ckpt-%d\. Run the same command again to "
                     r"evaluate and predict\." % (stop_step, stop_step)):
    runner.train(run_config(output_dir, 1, 8, 3, save_checkpoints_steps=1), classifier_model_fn(),
                 train_dataset_fn(record_file, 8),
                 signalling_eval_spec(record_file, metric_values, signal_at_call))
  assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handler is gone again
