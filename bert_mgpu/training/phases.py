# coding=utf-8
"""Where a whole job's wall time goes: import, featurize, build, train, eval, predict, close.

The run scripts and the loop wrap each phase in `timed(name)`; command_line.run_main
records the import time when main starts and logs the breakdown when the run ends. A
phase inside another counts for itself only (building the graph of a prediction counts
as build, not predict). What no phase covers (reading, flag checks, writing outputs) is
"other". No TensorFlow import: the data modules may use it too.
"""

import collections
import contextlib
import logging
import os
import time

_IMPORTED_AT = time.time()

# The order of the log; a phase not listed here comes after them.
PHASE_ORDER = ("import", "featurize", "teacher", "build", "restore", "train", "eval", "predict",
               "close")


def process_start_time():
  """The wall-clock time this process started (Linux), else when this module was imported."""
  try:
    with open("/proc/self/stat") as f:
      # The command name (field 2) may hold spaces; the fields after it do not.
      ticks_since_boot = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/stat") as f:
      boot_time = next(int(line.split()[1]) for line in f if line.startswith("btime"))
    return boot_time + ticks_since_boot / float(os.sysconf("SC_CLK_TCK"))
  except (OSError, ValueError, IndexError, StopIteration):
    return _IMPORTED_AT


class PhaseTimer(object):
  """Seconds per phase, each phase counting its own time only (not its nested phases')."""

  def __init__(self, start_time=None):
    self.start_time = process_start_time() if start_time is None else start_time
    self.seconds = collections.OrderedDict()
    self._open = []  # per open phase: the seconds of the phases nested in it so far

  @contextlib.contextmanager
  def timed(self, name):
    start = time.time()
    self._open.append(0.0)
    try:
      yield
    finally:
      nested = self._open.pop()
      elapsed = time.time() - start
      self.add(name, elapsed - nested)
      if self._open:
        self._open[-1] += elapsed

  def add(self, name, seconds):
    self.seconds[name] = self.seconds.get(name, 0.0) + max(0.0, seconds)

  def record_import(self):
    """Counts the time from the process start to now as "import" (call it once, first
    thing in main)."""
    self.add("import", time.time() - self.start_time)

  def summary_lines(self):
    """One line per phase, then "other" and the total: `name  seconds  share`."""
    total = max(time.time() - self.start_time, 1e-9)
    names = [n for n in PHASE_ORDER if n in self.seconds]
    names += [n for n in self.seconds if n not in PHASE_ORDER]
    rows = [(name, self.seconds[name]) for name in names]
    rows.append(("other", max(0.0, total - sum(self.seconds.values()))))
    lines = ["%-10s %8.2f s  %5.1f%%" % (name, seconds, 100.0 * seconds / total)
             for name, seconds in rows]
    return lines + ["%-10s %8.2f s" % ("total", total)]


_TIMER = PhaseTimer()


def timed(name):
  """A context that counts its wall time as phase `name` of this process's job."""
  return _TIMER.timed(name)


def add(name, seconds):
  """Counts `seconds` measured by the caller as phase `name` (outside any timed() phase)."""
  _TIMER.add(name, seconds)


def record_import():
  _TIMER.record_import()


def log_summary(log=None):
  """Logs the job's phase breakdown (one line per phase)."""
  log = log or logging.getLogger("tensorflow").info
  log("Where the job's time went:")
  for line in _TIMER.summary_lines():
    log("  " + line)


def reset(start_time=None):
  """Starts a new job's timing (tests)."""
  global _TIMER
  _TIMER = PhaseTimer(start_time)
