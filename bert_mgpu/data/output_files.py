# coding=utf-8
"""Files a run writes: whole or not at all, and one run per output_dir.

- atomic_write_text() and replace_directory() leave the old version or the new one, never
  half of either, and turn a refused write (disk full, permissions) into a UsageError.
- lock_output_dir() / claim_output_dir() hold output_dir for one run until the process
  exits; call them after every check, so bad input creates no output_dir.

No TensorFlow import: the data modules write through these without loading the model.
"""

import collections
import contextlib
import errno
import json
import logging
import os
import shutil
import tempfile

from bert_mgpu.errors import UsageError, write_error

# TensorFlow's logger (tf.get_logger() is this logger on TF 1.15 and 2.x).
_LOGGER = logging.getLogger("tensorflow")

try:
  import fcntl  # POSIX only; without it output_dir is not locked (with a warning).
except ImportError:  # pragma: no cover
  fcntl = None


def _current_umask():
  """The process umask (reading it means setting it, so it is set straight back)."""
  mask = os.umask(0o022)
  os.umask(mask)
  return mask


def make_file_readable(path):
  """Gives a temp file (mkstemp makes them 0600) the mode open() would give it."""
  os.chmod(path, 0o666 & ~_current_umask())


def remove_quietly(path):
  """Removes a file or directory tree if it is there; a failure is left unreported (the
  error being handled is the one to show)."""
  try:
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
      os.remove(path)
  except OSError:
    pass


@contextlib.contextmanager
def _removed_on_failure(tmp_path, path):
  """Removes `tmp_path` (a file or directory being built for `path`) when the block fails;
  an OSError becomes the UsageError that names `path`."""
  try:
    yield
  except OSError as e:
    remove_quietly(tmp_path)
    raise write_error(path, e)
  except BaseException:
    remove_quietly(tmp_path)
    raise


@contextlib.contextmanager
def atomic_path(path):
  """Yields a temp file path beside `path` to write; when the block ends without error the
  temp file becomes `path` (with the mode open() would give it), otherwise it is removed.

  A crash or an error leaves the old file (or none) under `path`, never half a file.

  Raises:
    UsageError: the file system refused the write (disk full, a directory in the way...):
      the message names `path` and the reason.
  """
  if os.path.isdir(path):
    raise UsageError("cannot write %s: a directory is in the way. Remove or rename it, then "
                     "run again." % path)
  directory = os.path.dirname(os.path.abspath(path))
  try:
    fd, tmp_path = tempfile.mkstemp(dir=directory, prefix=".tmp-" + os.path.basename(path))
    os.close(fd)
  except OSError as e:
    raise write_error(path, e)
  with _removed_on_failure(tmp_path, path):
    yield tmp_path
    make_file_readable(tmp_path)
    os.replace(tmp_path, path)


@contextlib.contextmanager
def atomic_output(path, binary=False):
  """Opens a temp file beside `path` (UTF-8 text, or bytes); it becomes `path` when the
  block ends without error (see atomic_path)."""
  with atomic_path(path) as tmp_path:
    if binary:
      f = open(tmp_path, "wb")
    else:
      f = open(tmp_path, "w", encoding="utf-8", newline="")
    with f:
      yield f


def atomic_write_text(path, text):
  """Writes `text` (UTF-8) to `path` through a temp file and a rename.

  Raises:
    UsageError: the file system refused the write (disk full, a directory in the way...).
  """
  with atomic_output(path) as f:
    f.write(text)


# Google's name for the metrics of an evaluation (docs/FORMATS.md 7).
EVAL_RESULTS_FILE = "eval_results.txt"

EvalReport = collections.namedtuple("EvalReport", ["text", "content", "sort_keys"])
EvalReport.__doc__ = """A unit's report beside eval_results.txt, per label or entity type.

Fields:
  text: eval_report.txt, for a person.
  content: eval_report.json's value.
  sort_keys: whether eval_report.json sorts its keys.
"""


def write_eval_report(output_dir, report):
  """output_dir/eval_report.txt and eval_report.json of an EvalReport."""
  atomic_write_text(os.path.join(output_dir, "eval_report.txt"), report.text)
  atomic_write_text(os.path.join(output_dir, "eval_report.json"), json.dumps(
      report.content, ensure_ascii=False, indent=2, sort_keys=report.sort_keys) + "\n")


def format_key_values(values):
  """Google's eval_results.txt: `key = value` lines, keys sorted (docs/FORMATS.md 7)."""
  return "".join("%s = %s\n" % (key, values[key]) for key in sorted(values))


# replace_directory() builds the new version beside the old under these suffixes.
_NEW_SUFFIX = ".new-tmp"
_OLD_SUFFIX = ".old-tmp"


def recover_directory(path):
  """Finishes an interrupted replace_directory(path).

  The old version is moved aside only once the new one is complete, so: with `path`
  missing and an old version aside, the new version is complete and takes its place
  (roll forward); with no old version aside, a new version is a half-built one and goes.
  """
  new, old = path + _NEW_SUFFIX, path + _OLD_SUFFIX
  if os.path.isdir(old) and not os.path.isdir(path):
    os.rename(new if os.path.isdir(new) else old, path)
  remove_quietly(new)
  remove_quietly(old)


def recover_directories(directory):
  """recover_directory() for every replacement left half done in `directory`, and removes
  the temp files of atomic writes that a killed process left there. Call it with the
  directory locked (no other run is writing there)."""
  for name in os.listdir(directory):
    for suffix in (_NEW_SUFFIX, _OLD_SUFFIX):
      if name.endswith(suffix):
        recover_directory(os.path.join(directory, name[:-len(suffix)]))
    if name.startswith(".tmp-"):
      remove_quietly(os.path.join(directory, name))


def replace_directory(path, fill):
  """Replaces directory `path` by one that `fill(new_path)` writes, as atomically as POSIX
  allows: the new version is built beside it, then two renames swap them.

  A failure while filling (disk full) leaves the old version untouched and removes the
  partial new one. A kill between the two renames leaves the old version under
  `path + ".old-tmp"`, which recover_directory() moves back.

  Raises:
    UsageError: a write was refused (fill's OSErrors are turned into one; fill may raise
      its own UsageError).
  """
  recover_directory(path)
  new, old = path + _NEW_SUFFIX, path + _OLD_SUFFIX
  with _removed_on_failure(new, path):
    os.makedirs(new)
    fill(new)
    if os.path.isdir(path):
      os.rename(path, old)
    os.rename(new, path)
  remove_quietly(old)


# ---------------------------------------------------------------------------
# The output_dir lock: one run per output_dir
# ---------------------------------------------------------------------------

LOCK_FILE_NAME = ".bert-mgpu.lock"

# output_dir (absolute) -> open lock file descriptor. The kernel releases a lock when its
# process dies, SIGKILL included, so a killed run leaves no stale lock.
_held_locks = {}


def _close_inherited_locks():
  """In a forked child (featurizing workers): the lock belongs to the parent alone, so a
  worker that outlives a killed parent does not keep output_dir locked."""
  for fd in _held_locks.values():
    os.close(fd)
  _held_locks.clear()


if hasattr(os, "register_at_fork"):
  os.register_at_fork(after_in_child=_close_inherited_locks)


def _lock_holder(lock_path):
  try:
    with open(lock_path) as f:
      return f.read().strip() or "unknown"
  except (IOError, OSError):
    return "unknown"


def lock_output_dir(output_dir):
  """Creates output_dir and holds an exclusive lock on it until this process exits.

  Call it after the flags and inputs are checked (bad input creates no output_dir) and
  before anything is written there. The lock file holds the holder's pid.

  Raises:
    UsageError: output_dir cannot be created, or another live process holds its lock.
  """
  try:
    os.makedirs(output_dir, exist_ok=True)
  except OSError as e:
    raise UsageError("--output_dir=%s: cannot create it (%s). Check the path and its "
                     "permissions." % (output_dir, e.strerror or e))
  if fcntl is None:
    _LOGGER.warning("--output_dir=%s is not locked (no fcntl on this system): make sure no "
                    "other run writes there.", output_dir)
    return
  key = os.path.abspath(output_dir)
  if key in _held_locks:
    return
  lock_path = os.path.join(output_dir, LOCK_FILE_NAME)
  try:
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
  except OSError as e:
    raise UsageError("--output_dir=%s: cannot write there (%s). Check its permissions." %
                     (output_dir, e.strerror))
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError as e:
    os.close(fd)
    if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
      raise UsageError("--output_dir=%s is in use by another run (process %s, see %s): wait "
                       "for it to finish or stop it, or use another --output_dir." %
                       (output_dir, _lock_holder(lock_path), lock_path))
    _LOGGER.warning("--output_dir=%s cannot be locked (%s; some network file systems refuse "
                    "locks): make sure no other run writes there.", output_dir, e.strerror)
    return
  try:
    os.ftruncate(fd, 0)
    os.write(fd, ("%d\n" % os.getpid()).encode("ascii"))
  except OSError as e:
    os.close(fd)
    raise write_error(lock_path, e)
  _held_locks[key] = fd


def claim_output_dir(config):
  """lock_output_dir(config.output_dir) on the chief. Any other worker of a multi-worker run
  writes nothing to output_dir (it may not even see it): it takes no lock, and its feature
  caches go to config.cache_dir.

  Args:
    config: a run_settings.RunConfig whose device check has passed.
  """
  if not config.devices.checked:  # every check comes before the first write
    raise AssertionError("claim_output_dir() before the device check: build the config with "
                         "run_settings.make_run_config() first")
  if config.is_chief:
    lock_output_dir(config.output_dir)
    recover_directories(config.output_dir)
  else:
    try:
      os.makedirs(config.cache_dir, exist_ok=True)
    except OSError as e:
      raise write_error(config.cache_dir, e)
    _LOGGER.info("Worker %d writes nothing to --output_dir (the chief does); its caches go "
                 "to %s.", config.cluster.task_index, config.cache_dir)
