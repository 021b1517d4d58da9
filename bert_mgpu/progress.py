# coding=utf-8
"""Progress of long work: its rate, its ETA, and when the next progress line is due.

One reporter for the training loop (steps), featurizing (examples) and pretraining data
creation (input bytes); each writes its own line from what this measures. Standard library
only: the data processes import it without TensorFlow.
"""

import time


def format_duration(seconds):
  """Seconds as H:MM:SS (hours keep counting past 24), e.g. 3725 -> "1:02:05"."""
  seconds = int(round(max(0.0, seconds)))
  return "%d:%02d:%02d" % (seconds // 3600, seconds // 60 % 60, seconds % 60)


class Progress(object):
  """How fast work of a known total goes, and how long the rest will take.

  Work is counted in any unit (steps, examples, bytes). A timing window starts at creation
  and at every restart(); rate and ETA cover the window only, so that pauses the caller
  excludes (saving, evaluating) do not count as slowness.
  """

  def __init__(self, total, interval_seconds=0.0, clock=time.time):
    """Creates the reporter.

    Args:
      total: the amount of work, in the caller's unit.
      interval_seconds: the least time between two lines that `due()` allows.
      clock: function returning seconds (tests pass a fake one).
    """
    self.total = total
    self.interval_seconds = interval_seconds
    self._clock = clock
    self._last_line = clock()
    self.restart()

  def restart(self, done=0):
    """Starts a new timing window at `done` units of work."""
    self.start = self._clock()
    self.start_done = done

  def elapsed(self, now=None):
    """Seconds since the window started."""
    return (self._clock() if now is None else now) - self.start

  def rate(self, done, now=None):
    """Units per second within the window."""
    return (done - self.start_done) / max(self.elapsed(now), 1e-9)

  def eta_seconds(self, done, now=None):
    """Seconds left at the window's rate, or None while nothing is done in the window."""
    if done <= self.start_done:
      return None
    return max(0.0, self.total - done) / self.rate(done, now)

  def due(self, now=None):
    """Whether interval_seconds have passed since the last line; if so, a line is counted."""
    now = self._clock() if now is None else now
    if now - self._last_line < self.interval_seconds:
      return False
    self._last_line = now
    return True
