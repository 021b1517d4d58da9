# coding=utf-8
"""A full disk loses nothing (issue 16), on real full file systems.

Each test mounts a small tmpfs (root only; skipped with the reason where mounting is
refused) and runs run_classifier_mgpu.py there, on the tiny data and model of
tests/helpers/classifier_runs.py (the demo_data fixture). A filler file eats the space so
that the disk fills during one chosen write:

  1. the copy of the first best checkpoint into best/ (half way through its data file);
  2. the save of the second checkpoint: half way through its data file, or on the
     `checkpoint` file once its data and index files are written;
  3. the eval writer's TensorBoard events file; eval_results.txt of an evaluation.

The sizes come from a reference run of the same command on the normal disk: tmpfs counts
whole 4 KiB pages per file (directories take none), so the pages of everything written
before the chosen write are known exactly, and the filler leaves that plus SLACK_PAGES
(fewer than a checkpoint's data file), plus exactly the pages of the files that must
still fit, or nothing at all.

Every case expects: exit 1 with one `error: cannot write <path> (No space left on
device)...` line and no traceback; no temp file or partial file left in output_dir
(no best/ holding part of a checkpoint, no *.tmp, .new-tmp or _temp leftovers, every
checkpoint and events file complete); the `checkpoint` file naming a checkpoint that
loads; and the same command finishing once the filler is deleted.
"""

import collections
import errno
import glob
import os
import re
import shutil
import subprocess

import pytest
import tensorflow.compat.v1 as tf

from classifier_runs import base_flags, checkpoint_step, run_classifier
from classifier_tf_files import event_tags_and_steps
from cli import assert_one_line_error, assert_succeeded, file_sizes

PAGE = 4096  # tmpfs allocates whole pages
DISK_SIZE = "8m"  # the mount; the filler decides what is free
# Pages left free beyond what precedes the write meant to fail: room for small writes
# (events, the `checkpoint` file) and the save's temp index, and fewer than the
# checkpoint's data file needs (checked), so that write stops half way.
SLACK_PAGES = 16
NO_SPACE = os.strerror(errno.ENOSPC)  # "No space left on device"

# One tower, 50 examples / 4 = 12 steps; checkpoints at 5, 10 and 12, each evaluated.
NUM_STEPS = 12
CHECKPOINT_STEPS = [5, 10, 12]

# Written after training, by the final evaluation.
EVAL_OUTPUTS = ("eval_results.txt", "eval_report.txt", "eval_report.json")
# The names the runner and TensorFlow write through: none may stay after a run.
TEMP_NAME = re.compile(r"tmp|_temp")


def flags_for(demo_data, output_dir, **overrides):
  flags = base_flags(demo_data, output_dir, n_gpus=1, num_train_epochs=1,
                     do_predict=None, save_checkpoints_steps=5)
  flags.update(overrides)
  return flags


# ---------------------------------------------------------------------------
# The small disk
# ---------------------------------------------------------------------------

class SmallDisk(object):
  """A mounted tmpfs, and a filler file on it that decides how much is free."""

  def __init__(self, path):
    self.path = path
    self.filler = os.path.join(path, "filler")

  def free_pages(self):
    stat = os.statvfs(self.path)
    return stat.f_bavail * stat.f_frsize // PAGE

  def leave_free(self, pages):
    """Grows the filler until exactly `pages` pages are free."""
    to_fill = self.free_pages() - pages
    assert to_fill >= 0, (self.free_pages(), pages)
    with open(self.filler, "ab") as f:
      f.write(b"\0" * (to_fill * PAGE))
    assert self.free_pages() == pages

  def fill(self):
    """Fills every free page."""
    self.leave_free(0)

  def free_space(self):
    os.remove(self.filler)


def _mount(path):
  """Mounts a tmpfs of DISK_SIZE on `path`. Skips the test where mounting is refused."""
  if not hasattr(os, "geteuid") or os.geteuid() != 0:
    pytest.skip("mounting a tmpfs needs root, and the tests run as uid %s" %
                getattr(os, "geteuid", lambda: "?")())
  if shutil.which("mount") is None or shutil.which("umount") is None:
    pytest.skip("no mount/umount command to mount a tmpfs with")
  result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0755" % DISK_SIZE,
                           "tmpfs", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)
  if result.returncode != 0:
    if any(refusal in result.stdout.lower() for refusal in (
        "permission denied", "operation not permitted", "must be superuser", "only root")):
      pytest.skip("mounting a tmpfs is refused here: %s" % result.stdout.strip().split("\n")[0])
    pytest.fail("mount -t tmpfs failed: %s" % result.stdout)


def _unmount(path):
  if subprocess.run(["umount", path]).returncode != 0:
    subprocess.run(["umount", "-l", path])


@pytest.fixture(scope="module")
def mounting(tmp_path_factory):
  """Skips every test here, before the reference run, where a tmpfs cannot be mounted."""
  path = str(tmp_path_factory.mktemp("mount_check"))
  _mount(path)
  _unmount(path)


pytestmark = pytest.mark.usefixtures("mounting")


@pytest.fixture
def small_disk(tmp_path):
  """A tmpfs of DISK_SIZE mounted under tmp_path; always unmounted after the test."""
  path = str(tmp_path / "disk")
  os.mkdir(path)
  _mount(path)
  try:
    yield SmallDisk(path)
  finally:
    _unmount(path)


# ---------------------------------------------------------------------------
# The reference run, and the pages of what it wrote
# ---------------------------------------------------------------------------

def pages(files, keep):
  """The tmpfs pages of the files whose relative path `keep` accepts."""
  return sum(-(-size // PAGE) for rel, size in files.items() if keep(rel))


def is_checkpoint_of(rel, steps):
  match = re.match(r"model\.ckpt-(\d+)\.", rel)
  return bool(match) and int(match.group(1)) in steps


Reference = collections.namedtuple("Reference", ["output_dir", "files"])


@pytest.fixture(scope="module")
def reference(demo_data, tmp_path_factory):
  """The files of the same run on the normal disk."""
  output_dir = str(tmp_path_factory.mktemp("reference") / "model")
  result = run_classifier(flags_for(demo_data, output_dir))
  assert_succeeded(result)
  files = file_sizes(output_dir)
  data_file = "model.ckpt-%d.data-00000-of-00001" % CHECKPOINT_STEPS[0]
  # The slack must stop the checkpoint's data file half way.
  assert SLACK_PAGES + 4 < pages(files, lambda rel: rel == data_file), files
  return Reference(output_dir, files)


# ---------------------------------------------------------------------------
# What a failed run must leave
# ---------------------------------------------------------------------------

def assert_checkpoint_complete(prefix):
  """Every tensor of checkpoint `prefix` reads."""
  reader = tf.train.load_checkpoint(prefix)
  names = reader.get_variable_to_shape_map()
  assert "global_step" in names and "output_weights" in names, sorted(names)
  for name in names:
    reader.get_tensor(name)
  return int(reader.get_tensor("global_step"))


def assert_nothing_partial(output_dir, reference):
  """No temp file, and every file a later run or a user reads is whole."""
  files = file_sizes(output_dir)
  directories = [os.path.relpath(root, output_dir) for root, _, _ in os.walk(output_dir)]
  leftovers = [rel for rel in list(files) + directories if TEMP_NAME.search(rel)]
  assert not leftovers, "temp files left in %s: %s" % (output_dir, sorted(leftovers))
  # Checkpoints: each one's files complete, and each loads.
  for directory in (output_dir, os.path.join(output_dir, "best")):
    for data_file in glob.glob(os.path.join(directory, "model.ckpt-*.data-*")):
      prefix = data_file.split(".data-")[0]
      assert os.path.isfile(prefix + ".index"), "a data file without its index: " + data_file
      rel = os.path.relpath(data_file, output_dir)
      assert os.path.getsize(data_file) == reference.files[os.path.basename(rel)], rel
      assert assert_checkpoint_complete(prefix) == checkpoint_step(prefix)
    for index_file in glob.glob(os.path.join(directory, "model.ckpt-*.index")):
      assert glob.glob(index_file[:-len(".index")] + ".data-*"), "an index alone: " + index_file
  # The files written before training are byte for byte the reference's sizes.
  for rel, size in files.items():
    if (rel in ("labels.txt", "vocab.txt", "bert_config.json", "model_settings.json") or
        rel.endswith(".tf_record") or re.match(r"(train|dev|test)-\w+\.json$", rel)):
      assert size == reference.files[rel], (rel, size, reference.files[rel])
  # TensorBoard files read to their end (no half-written event).
  for events_file in glob.glob(os.path.join(output_dir, "**", "events.out.tfevents.*"),
                               recursive=True):
    for _ in tf.train.summary_iterator(events_file):
      pass


def assert_no_space_error(result, path_pattern):
  """One `error:` line, exit 1, no traceback: `cannot write <path> (No space left on
  device)`, the path a regular expression (a file the user knows, not a temp file)."""
  line = assert_one_line_error(result, "cannot write ", NO_SPACE)
  assert re.match(r"error: cannot write %s \(%s\): " % (path_pattern, re.escape(NO_SPACE)),
                  line), line
  return line


def assert_best_complete(output_dir):
  """best/ names a checkpoint it holds, whole. Returns its step."""
  best_dir = os.path.join(output_dir, "best")
  best = tf.train.latest_checkpoint(best_dir)
  assert best is not None and os.path.dirname(best) == best_dir, os.listdir(best_dir)
  assert os.path.isfile(os.path.join(best_dir, "best_metric.json"))
  return assert_checkpoint_complete(best)


def latest_step(output_dir):
  latest = tf.train.latest_checkpoint(output_dir)
  assert latest is not None, os.listdir(output_dir)
  step = assert_checkpoint_complete(latest)
  assert step == checkpoint_step(latest)
  return step


def assert_resumes_and_finishes(flags, output_dir, from_step):
  """The same command, once there is room again, resumes and finishes."""
  result = run_classifier(flags)
  assert_succeeded(result)
  if from_step:
    assert "Resuming from %s (step %d of %d)" % (
        os.path.join(output_dir, "model.ckpt-%d" % from_step), from_step,
        NUM_STEPS) in result.stderr, result.stderr[-3000:]
  assert latest_step(output_dir) == NUM_STEPS
  assert_best_complete(output_dir)
  assert os.path.isfile(os.path.join(output_dir, "eval_results.txt"))
  return result


# ---------------------------------------------------------------------------
# 1. The disk fills while the first best checkpoint is copied into best/
# ---------------------------------------------------------------------------

def test_disk_full_during_the_best_copy(demo_data, reference, small_disk):
  output_dir = os.path.join(small_disk.path, "model")
  flags = flags_for(demo_data, output_dir)
  first = CHECKPOINT_STEPS[0]
  # Everything the run writes before the copy of its first checkpoint into best/.
  before = pages(reference.files, lambda rel: not (
      rel.startswith("best" + os.sep) or is_checkpoint_of(rel, CHECKPOINT_STEPS[1:]) or
      rel in EVAL_OUTPUTS))
  small_disk.leave_free(before + SLACK_PAGES)

  result = run_classifier(flags)
  assert_no_space_error(result, re.escape(os.path.join(output_dir, "best")))
  assert "Saved %s" % os.path.join(output_dir, "model.ckpt-%d" % first) in result.stderr
  assert not os.path.exists(os.path.join(output_dir, "best"))  # not half a checkpoint
  assert_nothing_partial(output_dir, reference)
  # The checkpoint whose evaluation best/ never recorded is gone too, so the rerun trains
  # that stretch again and evaluates it instead of resuming past it.
  assert tf.train.latest_checkpoint(output_dir) is None
  assert not glob.glob(os.path.join(output_dir, "model.ckpt-*"))

  small_disk.free_space()
  rerun = assert_resumes_and_finishes(flags, output_dir, from_step=None)
  assert "eval at step %d:" % first in rerun.stderr
  assert_nothing_partial(output_dir, reference)


# ---------------------------------------------------------------------------
# 2. The disk fills while a checkpoint is saved
# ---------------------------------------------------------------------------

@pytest.fixture(params=["data_file", "checkpoint_file"])
def save_runs_out(request):
  """Where the save runs out of room: half way through the checkpoint's data file, or
  after its data and index files, on the `checkpoint` file that would name it."""
  return request.param


def test_disk_full_during_a_checkpoint_save(demo_data, reference, small_disk, save_runs_out):
  output_dir = os.path.join(small_disk.path, "model")
  flags = flags_for(demo_data, output_dir)
  first, second = CHECKPOINT_STEPS[:2]
  # Everything the run writes before it saves its second checkpoint (best/ included).
  before = pages(reference.files, lambda rel: not (
      is_checkpoint_of(rel, CHECKPOINT_STEPS[1:]) or rel in EVAL_OUTPUTS))
  if save_runs_out == "data_file":
    small_disk.leave_free(before + SLACK_PAGES)
  else:  # the data and index files fit, the `checkpoint` file's new version does not
    small_disk.leave_free(before + pages(reference.files,
                                         lambda rel: is_checkpoint_of(rel, [second])))

  result = run_classifier(flags)
  prefix = os.path.join(output_dir, "model.ckpt-%d" % second)
  assert_no_space_error(result, re.escape(prefix))
  assert not glob.glob(prefix + "*")
  assert_nothing_partial(output_dir, reference)
  assert latest_step(output_dir) == first  # the `checkpoint` file names the previous one
  assert assert_best_complete(output_dir) == first

  small_disk.free_space()
  assert_resumes_and_finishes(flags, output_dir, from_step=first)
  assert_nothing_partial(output_dir, reference)


# ---------------------------------------------------------------------------
# 3. The disk fills on a TensorBoard events file, and on eval_results.txt
# ---------------------------------------------------------------------------

def test_disk_full_on_a_tensorboard_events_file(demo_data, reference, small_disk):
  output_dir = os.path.join(small_disk.path, "model")
  flags = flags_for(demo_data, output_dir)
  # What precedes training (the lock, labels, model files and feature caches), and one
  # page: the training events file takes it, and the eval events file finds none.
  before = pages(reference.files, lambda rel: os.sep not in rel and not (
      rel.startswith("model.ckpt-") or rel.startswith("events.") or
      rel == "checkpoint" or rel in EVAL_OUTPUTS))
  small_disk.leave_free(before + 1)

  result = run_classifier(flags)
  events_file = os.path.join(output_dir, "eval", "events.out.tfevents.")
  assert_no_space_error(result, re.escape(events_file) + r"\d+\.\S+")
  assert not glob.glob(os.path.join(output_dir, "model.ckpt-*"))
  assert_nothing_partial(output_dir, reference)

  small_disk.free_space()
  assert_resumes_and_finishes(flags, output_dir, from_step=None)
  assert_nothing_partial(output_dir, reference)
  assert event_tags_and_steps(output_dir)["loss"] == list(range(1, NUM_STEPS + 1))
  assert event_tags_and_steps(os.path.join(output_dir, "eval"))["eval_accuracy"] == \
      CHECKPOINT_STEPS


def key_values(text):
  """eval_results.txt's `key = value` lines as a dict."""
  return dict(line.split(" = ", 1) for line in text.splitlines())


def test_disk_full_on_eval_results(demo_data, reference, small_disk):
  # The reference run's output_dir, evaluated again on a full disk.
  output_dir = os.path.join(small_disk.path, "model")
  shutil.copytree(reference.output_dir, output_dir)
  flags = flags_for(demo_data, output_dir, do_train=None)
  eval_results = os.path.join(output_dir, "eval_results.txt")
  with open(eval_results, encoding="utf-8") as f:
    previous = f.read()
  small_disk.fill()

  result = run_classifier(flags)
  assert_no_space_error(result, re.escape(eval_results))
  with open(eval_results, encoding="utf-8") as f:
    assert f.read() == previous  # the previous results, whole
  assert_nothing_partial(output_dir, reference)

  small_disk.free_space()
  assert_succeeded(run_classifier(flags))
  with open(eval_results, encoding="utf-8") as f:
    results = key_values(f.read())
  assert sorted(results) == sorted(key_values(previous))
  assert results["global_step"] == key_values(previous)["global_step"]  # best/'s
  assert_nothing_partial(output_dir, reference)
