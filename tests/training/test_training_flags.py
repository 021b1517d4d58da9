# coding=utf-8
"""The record of a run's training flags (bert_mgpu/training/training_flags.py) and the
resume check, flag by flag: each recorded flag refused by name with both values, the
override, longer training and the cadences accepted, an output_dir from before the record,
and the flags a command records (command_line.training_flags). The runs end to end are in
tests/commands/test_training_flags_resume.py."""

import json
import os
import types

from absl import flags as absl_flags
import pytest

from bert_mgpu import command_line
from bert_mgpu.training import run_settings
from bert_mgpu.training import training_flags
from usage_errors import assert_usage_error

# One value per recorded flag, and another for each (the types of the real flags).
FIRST = {"optimizer": "adamw", "adam_bias_correction": False, "learning_rate": 5e-5,
         "warmup_proportion": 0.1, "num_warmup_steps": 10, "precision": "fp32",
         "ema_decay": 0.0, "ema_bias_correction": True, "ema_warmup": False,
         "layerwise_lr_decay": 1.0,
         "adversarial": "none", "adversarial_epsilon": 1.0, "adversarial_alpha": 0.3,
         "adversarial_steps": 3, "rdrop_alpha": 0.0, "teacher_dir": None,
         "unlabeled_file": None, "distill_temperature": 1.0, "distill_alpha": 0.5,
         "train_batch_size": 32, "n_gpus": 2,
         "towers_per_gpu": 1, "accumulation_steps": 1, "group_by_length": False,
         "group_by_length_within_label": False, "random_seed": 12345, "max_seq_length": 128,
         "task_name": "tsv", "do_lower_case": True, "literal_special_tokens": False,
         "multi_label": False, "label_separator": "|", "long_text": "truncate",
         "head_tokens": 0, "doc_stride": 128, "max_windows": 8, "window_pooling": "mean",
         "data_format": "conll", "ner_head": "tags", "use_crf": False,
         "max_query_length": 64, "version_2_with_negative": False,
         "max_predictions_per_seq": 20, "loss": "cosent", "cosent_scale": 20.0,
         "temperature": 0.05, "positive_threshold": None, "hard_negatives": 1,
         "pooling": "mean"}
OTHER = {"optimizer": "lamb", "adam_bias_correction": True, "learning_rate": 3e-5,
         "warmup_proportion": 0.0, "num_warmup_steps": 20, "precision": "bf16",
         "ema_decay": 0.999, "ema_bias_correction": False, "ema_warmup": True,
         "layerwise_lr_decay": 0.8,
         "adversarial": "fgm", "adversarial_epsilon": 0.5, "adversarial_alpha": 0.1,
         "adversarial_steps": 2, "rdrop_alpha": 4.0, "teacher_dir": "(set)",
         "unlabeled_file": "(set)", "distill_temperature": 2.0, "distill_alpha": 0.9,
         "train_batch_size": 16, "n_gpus": 4,
         "towers_per_gpu": 2, "accumulation_steps": 2, "group_by_length": True,
         "group_by_length_within_label": True, "random_seed": 1, "max_seq_length": 64,
         "task_name": "csv", "do_lower_case": False, "literal_special_tokens": True,
         "multi_label": True, "label_separator": ",", "long_text": "windows",
         "head_tokens": 64, "doc_stride": 64, "max_windows": 4, "window_pooling": "max",
         "data_format": "cluener", "ner_head": "crf", "use_crf": True,
         "max_query_length": 32, "version_2_with_negative": True,
         "max_predictions_per_seq": 10, "loss": "in_batch", "cosent_scale": 30.0,
         "temperature": 0.1, "positive_threshold": 4.0, "hard_negatives": 2,
         "pooling": "cls"}


def test_every_recorded_flag_has_test_values():
  """The table above covers command_line.TRAINING_FLAGS: a flag added there is tested."""
  assert sorted(FIRST) == sorted(OTHER) == sorted(command_line.TRAINING_FLAGS)
  assert all(FIRST[name] != OTHER[name] for name in FIRST)


def config(output_dir, flags, num_train_steps=100, allow=False, workers=1):
  """The RunConfig of a run on the chief of `workers` workers."""
  cluster = None if workers == 1 else types.SimpleNamespace(num_workers=workers, is_chief=True,
                                                            task_index=0)
  return run_settings.RunConfig(str(output_dir), n_gpus=1, cluster=cluster,
                                num_train_steps=num_train_steps, training_flags=flags,
                                allow_changed_training_flags=allow)


@pytest.fixture
def recorded(tmp_path):
  """An output_dir whose first run recorded FIRST, 100 steps, one worker."""
  training_flags.write_record(str(tmp_path), training_flags.record_of(
      config(tmp_path, dict(FIRST))))
  return tmp_path


LATEST = "model.ckpt-50"  # the resumed checkpoint: only its presence matters here


@pytest.mark.parametrize("name", sorted(FIRST))
def test_each_changed_flag_is_refused_by_name_with_both_values(recorded, name):
  given = dict(FIRST, **{name: OTHER[name]})
  shown = {True: "true", False: "false", None: "(none)"}
  old, new = (shown.get(v, v) if isinstance(v, (bool, type(None))) else v
              for v in (FIRST[name], OTHER[name]))
  message = assert_usage_error(
      lambda: training_flags.check_resume(config(recorded, given), LATEST),
      "%s was trained with other flags: --%s=%s (given %s)." % (recorded, name, old, new),
      "give the flags it recorded (%s)" % os.path.join(str(recorded), "training_flags.json"),
      "train into a new --output_dir", "--allow_changed_training_flags")
  assert message.count("(given ") == 1


def test_several_changes_are_named_together(recorded):
  given = dict(FIRST, learning_rate=3e-5, adam_bias_correction=True)
  assert_usage_error(
      lambda: training_flags.check_resume(config(recorded, given), LATEST),
      "--adam_bias_correction=false (given true), --learning_rate=5e-05 (given 3e-05)")


def test_another_number_of_workers_is_refused(recorded):
  assert_usage_error(
      lambda: training_flags.check_resume(config(recorded, dict(FIRST), workers=2), LATEST),
      "the number of workers 1 (given 2)")


def test_the_override_accepts_logs_each_change_and_the_new_values_are_recorded(recorded):
  given = dict(FIRST, learning_rate=3e-5)
  run = config(recorded, given, allow=True)
  messages = training_flags.check_resume(run, LATEST)
  assert messages == [("warning", "Resuming %s with changed flags "
                                  "(--allow_changed_training_flags): --learning_rate=5e-05 "
                                  "(given 3e-05). The new values are recorded." % recorded)]
  training_flags.write_record(str(recorded), training_flags.record_of(run))
  assert training_flags.read_record(str(recorded))["flags"]["learning_rate"] == 3e-5
  assert training_flags.check_resume(config(recorded, given), LATEST) == []


def test_training_longer_is_free_and_logged(recorded):
  messages = training_flags.check_resume(config(recorded, dict(FIRST), num_train_steps=300),
                                         LATEST)
  assert messages == [("info", "Training now ends at step 300 (recorded: 100): the learning "
                               "rate's linear decay moves to the new end (and a warm-up given "
                               "as --warmup_proportion with it), which changes the rate of "
                               "every step from here on.")]


def test_cadences_and_paths_of_the_data_are_not_recorded():
  for name in ("num_train_epochs", "num_train_steps", "log_steps", "save_checkpoints_steps",
               "keep_checkpoint_max", "early_stopping_patience", "data_dir", "init_checkpoint",
               "initializer", "init_from_teacher_layers", "variable_update", "use_xla",
               "output_dir"):
    assert name not in command_line.TRAINING_FLAGS, name


def test_a_new_run_checks_nothing_and_records(tmp_path):
  training_flags.write_record(str(tmp_path), {"flags": dict(OTHER), "num_workers": 3,
                                              "num_train_steps": 7})
  assert training_flags.check_resume(config(tmp_path, dict(FIRST)), None) == []


def test_an_output_dir_from_before_the_record_resumes_with_a_warning(tmp_path):
  messages = training_flags.check_resume(config(tmp_path, dict(FIRST)), LATEST)
  assert len(messages) == 1 and messages[0][0] == "warning"
  assert ("has no training_flags.json (it was trained before runs recorded their flags): "
          "this resume cannot check") in messages[0][1]


def test_a_damaged_record_is_one_line(tmp_path):
  with open(str(tmp_path / "training_flags.json"), "w") as f:
    f.write("{not json")
  assert_usage_error(lambda: training_flags.check_resume(config(tmp_path, dict(FIRST)),
                                                         LATEST),
                     "training_flags.json is not a record of training flags",
                     "delete it to record this run's flags")


def test_a_flag_the_record_lacks_is_not_compared(recorded):
  """A script that gained a flag after the record: the record says nothing about it."""
  path = str(recorded / "training_flags.json")
  with open(path) as f:
    record = json.load(f)
  del record["flags"]["rdrop_alpha"]
  with open(path, "w") as f:
    json.dump(record, f)
  assert training_flags.check_resume(config(recorded, dict(FIRST, rdrop_alpha=4.0)),
                                     LATEST) == []


def test_the_digest_the_workers_compare_follows_every_value():
  assert training_flags.digest(dict(FIRST)) == training_flags.digest(dict(FIRST))
  for name in FIRST:
    assert (training_flags.digest(dict(FIRST, **{name: OTHER[name]})) !=
            training_flags.digest(dict(FIRST))), name
  assert config("out", dict(FIRST)).training_flags_digest < 2 ** 62


def test_a_command_records_the_flags_it_defines():
  flag_values = absl_flags.FlagValues()
  absl_flags.DEFINE_float("learning_rate", 5e-5, "", flag_values=flag_values)
  absl_flags.DEFINE_bool("group_by_length", False, "", flag_values=flag_values)
  absl_flags.DEFINE_integer("log_steps", 100, "", flag_values=flag_values)
  flag_values(["script.py", "--learning_rate=2e-5", "--log_steps=5"])
  assert command_line.training_flags(flag_values) == {"learning_rate": 2e-5,
                                                      "group_by_length": False}


def test_a_setting_of_a_technique_that_is_off_is_not_recorded():
  """Changing --adversarial_epsilon while --adversarial=none, or --ema_bias_correction
  without --ema_decay, changes nothing: not recorded. A path that switches distillation on
  is recorded as set or not."""
  flag_values = absl_flags.FlagValues()
  absl_flags.DEFINE_string("adversarial", "none", "", flag_values=flag_values)
  absl_flags.DEFINE_float("adversarial_epsilon", 1.0, "", flag_values=flag_values)
  absl_flags.DEFINE_float("ema_decay", 0.0, "", flag_values=flag_values)
  absl_flags.DEFINE_bool("ema_bias_correction", True, "", flag_values=flag_values)
  absl_flags.DEFINE_string("teacher_dir", None, "", flag_values=flag_values)
  absl_flags.DEFINE_string("unlabeled_file", None, "", flag_values=flag_values)
  absl_flags.DEFINE_float("distill_alpha", 0.5, "", flag_values=flag_values)
  absl_flags.DEFINE_bool("multi_label", False, "", flag_values=flag_values)
  absl_flags.DEFINE_string("label_separator", ",", "", flag_values=flag_values)
  flag_values(["script.py", "--adversarial_epsilon=0.5", "--noema_bias_correction",
               "--unlabeled_file=u.txt", "--distill_alpha=0.9", "--label_separator=|"])
  assert command_line.training_flags(flag_values) == {
      "ema_decay": 0.0, "adversarial": "none", "teacher_dir": None, "multi_label": False}
  flag_values(["script.py", "--adversarial=fgm", "--adversarial_epsilon=0.5",
               "--ema_decay=0.999", "--ema_bias_correction", "--teacher_dir=/somewhere/teacher",
               "--unlabeled_file=u.txt", "--distill_alpha=0.9"])
  assert command_line.training_flags(flag_values) == {
      "ema_decay": 0.999, "ema_bias_correction": True, "adversarial": "fgm",
      "adversarial_epsilon": 0.5, "teacher_dir": "(set)", "unlabeled_file": "(set)",
      "distill_alpha": 0.9, "multi_label": False}


def test_an_embedding_loss_setting_is_recorded_only_under_its_loss():
  """--cosent_scale is read only by --loss=cosent, --temperature, --positive_threshold and
  --hard_negatives only by in_batch: under another loss they are not recorded, so changing
  them on resume needs no override."""
  flag_values = absl_flags.FlagValues()
  absl_flags.DEFINE_string("loss", "cosent", "", flag_values=flag_values)
  absl_flags.DEFINE_float("cosent_scale", 20.0, "", flag_values=flag_values)
  absl_flags.DEFINE_float("temperature", 0.05, "", flag_values=flag_values)
  absl_flags.DEFINE_float("positive_threshold", None, "", flag_values=flag_values)
  absl_flags.DEFINE_integer("hard_negatives", 1, "", flag_values=flag_values)
  flag_values(["script.py", "--temperature=0.1"])
  assert command_line.training_flags(flag_values) == {"loss": "cosent", "cosent_scale": 20.0}
  flag_values(["script.py", "--loss=in_batch", "--cosent_scale=30"])
  assert command_line.training_flags(flag_values) == {
      "loss": "in_batch", "temperature": 0.1, "positive_threshold": None, "hard_negatives": 1}
  flag_values(["script.py", "--loss=softmax"])
  assert command_line.training_flags(flag_values) == {"loss": "softmax"}
