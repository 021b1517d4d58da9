# coding=utf-8
"""output_files.py: directory replacement interrupted at each point, and what a locked
output_dir sweeps up (no TensorFlow needed)."""

import os

from bert_mgpu.data import output_files
from bert_mgpu import errors


def make_version(path, content):
  os.makedirs(path)
  with open(os.path.join(path, "weights"), "w") as f:
    f.write(content)


def content_of(path):
  with open(os.path.join(path, "weights")) as f:
    return f.read()


def test_a_kill_between_the_two_renames_rolls_forward_to_the_new_version(tmp_path):
  # replace_directory moves the old version aside only once the new one is complete.
  best = str(tmp_path / "best")
  make_version(best + ".old-tmp", "old")
  make_version(best + ".new-tmp", "new")
  output_files.recover_directory(best)
  assert content_of(best) == "new"
  assert sorted(os.listdir(str(tmp_path))) == ["best"]


def test_a_failed_second_rename_puts_the_old_version_back(tmp_path):
  best = str(tmp_path / "best")
  make_version(best + ".old-tmp", "old")
  output_files.recover_directory(best)
  assert content_of(best) == "old"
  assert sorted(os.listdir(str(tmp_path))) == ["best"]


def test_a_half_built_new_version_is_removed(tmp_path):
  best = str(tmp_path / "best")
  make_version(best, "current")
  make_version(best + ".new-tmp", "half")
  output_files.recover_directory(best)
  assert content_of(best) == "current"
  assert sorted(os.listdir(str(tmp_path))) == ["best"]


def test_replace_directory_keeps_the_old_version_when_filling_fails(tmp_path):
  best = str(tmp_path / "best")
  make_version(best, "current")

  def fill(new):
    with open(os.path.join(new, "weights"), "w") as f:
      f.write("partial")
    raise OSError(28, "No space left on device")
  try:
    output_files.replace_directory(best, fill)
  except output_files.UsageError as e:
    assert "No space left on device" in str(e) and best in str(e)
  else:
    raise AssertionError("no error")
  assert content_of(best) == "current"
  assert sorted(os.listdir(str(tmp_path))) == ["best"]


def test_a_claimed_output_dir_is_swept_of_leftovers(tmp_path):
  output_dir = str(tmp_path / "out")
  make_version(os.path.join(output_dir, "best.old-tmp"), "old")
  make_version(os.path.join(output_dir, "best.new-tmp"), "new")
  with open(os.path.join(output_dir, ".tmp-eval_results.txt1234"), "w") as f:
    f.write("half")

  class Config(object):
    is_chief = True

    class devices(object):  # pylint: disable=invalid-name
      checked = True
  Config.output_dir = output_dir
  output_files.claim_output_dir(Config)
  assert sorted(os.listdir(output_dir)) == [output_files.LOCK_FILE_NAME, "best"]
  assert content_of(os.path.join(output_dir, "best")) == "new"


def test_a_refused_write_names_the_cause_not_tensorflows_wrapping():
  class OpError(Exception):  # the shape of TF 2.x's message for a failed SaveV2
    message = ("Graph execution error:\n\nDetected at node save/SaveV2 defined at ...\n"
               "/out/model.ckpt-10_temp/part-00000-of-00001.data-00000-of-00001.tempstate1; "
               "No space left on device\n\t [[{{node save/SaveV2}}]]")
  line = str(errors.write_error("/out/model.ckpt-10", OpError()))
  assert line.startswith("cannot write /out/model.ckpt-10 (No space left on device): "), line
  assert "tempstate" not in line and "Graph execution" not in line
  assert "(No space left on device)" in str(
      errors.write_error("/out/x", OSError(28, "No space left on device")))
