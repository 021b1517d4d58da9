# coding=utf-8
"""serving/model_files.py: one load of a model's files reads its model_settings.json once,
and which file a message names when several are missing or unreadable stays as it was."""

import builtins
import json
import os

import pytest

from bert_mgpu.errors import UsageError
from bert_mgpu.serving import model_files
import tiny_task_files

SETTINGS = {
    "classifier": {"model": "classifier", "task_name": "sentiment", "do_lower_case": True,
                   "max_seq_length": 32},
    # Reading comprehension: a kind without labels.
    "squad": {"model": "squad", "do_lower_case": True, "max_seq_length": 32, "doc_stride": 8,
              "max_query_length": 8, "max_answer_length": 10, "n_best_size": 5,
              "version_2_with_negative": False, "null_score_diff_threshold": 0.0},
}


def write_model(directory, kind):
  """A complete model directory of `kind` (no weights: model_files reads none)."""
  tiny_task_files.write_model_files(directory, [u"好坏"])
  tiny_task_files.write_text(os.path.join(directory, model_files.SETTINGS_FILE),
                             json.dumps(SETTINGS[kind]))
  if kind == "classifier":
    tiny_task_files.write_text(os.path.join(directory, model_files.LABELS_FILE), u"neg\npos\n")
  return directory


@pytest.fixture
def settings_reads(monkeypatch):
  """The list of each open() of a model_settings.json for reading from here on (whatever
  reads it)."""
  opened, real_open = [], builtins.open

  def counting_open(file, mode="r", *args, **kwargs):
    if "r" in mode and isinstance(file, (str, bytes, os.PathLike)) and (
        os.path.basename(os.fsdecode(file)) == model_files.SETTINGS_FILE):
      opened.append(os.fsdecode(file))
    return real_open(file, mode, *args, **kwargs)

  monkeypatch.setattr(builtins, "open", counting_open)
  return opened


@pytest.mark.parametrize("kind", sorted(SETTINGS))
def test_one_load_reads_the_settings_once(kind, tmp_path, settings_reads):
  directory = write_model(str(tmp_path), kind)
  files = model_files.find_model_files(directory, "write it again.")
  assert files.settings == SETTINGS[kind]
  assert files.labels == (["neg", "pos"] if kind == "classifier" else [])
  path = os.path.join(directory, model_files.SETTINGS_FILE)
  assert settings_reads == [path], "read %d times" % len(settings_reads)


def test_no_settings_and_no_labels_names_the_settings(tmp_path):
  directory = write_model(str(tmp_path), "classifier")
  os.remove(os.path.join(directory, model_files.SETTINGS_FILE))
  os.remove(os.path.join(directory, model_files.LABELS_FILE))
  with pytest.raises(UsageError, match="has no model_settings.json: it is not a complete"):
    model_files.find_model_files(directory, "write it again.")
  assert not model_files.has_model_files(directory)


def test_unreadable_settings_and_no_labels_names_the_labels(tmp_path):
  # The kind is unknown, so the labels it may need are asked for first.
  directory = write_model(str(tmp_path), "classifier")
  tiny_task_files.write_text(os.path.join(directory, model_files.SETTINGS_FILE), u"{not json")
  os.remove(os.path.join(directory, model_files.LABELS_FILE))
  with pytest.raises(UsageError, match="has no labels.txt: it is not a complete"):
    model_files.find_model_files(directory, "write it again.")


def test_unreadable_settings_are_named_with_why(tmp_path):
  directory = write_model(str(tmp_path), "classifier")
  tiny_task_files.write_text(os.path.join(directory, model_files.SETTINGS_FILE), u"{not json")
  with pytest.raises(UsageError, match="model_settings.json: cannot read it as JSON"):
    model_files.find_model_files(directory, "write it again.")


def test_a_kind_without_labels_needs_no_labels_file(tmp_path):
  directory = write_model(str(tmp_path), "squad")
  assert model_files.has_model_files(directory)
  os.remove(os.path.join(directory, model_files.CONFIG_FILE))
  assert not model_files.has_model_files(directory)
  with pytest.raises(UsageError, match="has no bert_config.json: it is not a complete"):
    model_files.find_model_files(directory, "write it again.")
