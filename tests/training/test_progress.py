# coding=utf-8
"""bert_mgpu/progress.py, the one progress reporter: durations, rate and ETA over a timing
window, and at most one line per interval."""

from bert_mgpu import progress


class FakeClock(object):
  def __init__(self, now=100.0):
    self.now = now

  def __call__(self):
    return self.now


def test_durations_are_hours_minutes_seconds():
  assert progress.format_duration(0) == "0:00:00"
  assert progress.format_duration(59.6) == "0:01:00"
  assert progress.format_duration(3725) == "1:02:05"
  assert progress.format_duration(90000) == "25:00:00"  # past a day, hours keep counting
  assert progress.format_duration(-3) == "0:00:00"


def test_rate_and_eta_cover_the_window_since_the_last_restart():
  clock = FakeClock()
  timing = progress.Progress(1000, clock=clock)
  assert timing.eta_seconds(0) is None  # nothing done yet
  clock.now = 110.0
  assert timing.rate(100) == 10.0
  assert timing.eta_seconds(100) == 90.0
  timing.restart(done=100)  # e.g. after saving: the pause does not count
  clock.now = 160.0
  assert timing.elapsed() == 50.0
  assert timing.rate(600) == 10.0
  assert timing.eta_seconds(600) == 40.0
  assert timing.eta_seconds(1200) == 0.0  # past the total: nothing left


def test_a_line_is_due_once_per_interval():
  clock = FakeClock()
  timing = progress.Progress(10, interval_seconds=5.0, clock=clock)
  clock.now = 104.0
  assert not timing.due()
  clock.now = 105.0
  assert timing.due()
  assert not timing.due()  # counted: the next one is 5 s later
  assert timing.due(now=110.0)
