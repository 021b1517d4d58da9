# coding=utf-8
"""The errors a run ends with, and how a refused write is worded.

No TensorFlow import: the data modules raise these without loading the training stack.
command_line.run_main() prints a UsageError as one `error:` line and exits 1, and a
Preempted as one line and exit 128 + the signal.
"""

import signal


class UsageError(Exception):
  """Bad input or flags, or a write the file system refused.

  The message names the flag or the file, line and value where there is one, and says
  what to do about it.
  """


class TrainingDiverged(UsageError):
  """The loss became NaN or infinite."""


class WorkerLost(UsageError):
  """Another worker of a multi-worker run died or cannot be reached."""


class Preempted(Exception):
  """SIGTERM or Ctrl-C stopped the run after a checkpoint was saved.

  Attributes:
    signum: the signal that asked for the stop (the exit code is 128 + signum).
  """

  def __init__(self, signum, message):
    super(Preempted, self).__init__(message)
    self.signum = signum


def signal_name(signum):
  return "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"


def error_reason(error):
  """The reason of a refused write, from an OSError or a TensorFlow OpError.

  TensorFlow words a refused write "<file>; <reason>" (the file often a temp file), and
  TF 2.x puts "Graph execution error:" and the op's stack before that line.
  """
  reason = getattr(error, "strerror", None)
  if reason:
    return reason
  lines = [line.strip() for line in str(getattr(error, "message", None) or error).split("\n")]
  for line in lines:
    if "; " in line:
      return line.rsplit("; ", 1)[1]
  return next((line for line in lines if line and line != "Graph execution error:"),
              type(error).__name__)


def write_error(path, error):
  """The UsageError for a write that the file system refused (disk full, quota, a
  directory in the way, permissions, a read-only file system).

  Args:
    path: the file or directory the user knows (not a temp file).
    error: an OSError or a TensorFlow OpError (duck-typed: its `message`).
  """
  return UsageError("cannot write %s (%s): free some space, fix the permissions, or remove "
                    "what is in the way, then run again." % (path, error_reason(error)))
