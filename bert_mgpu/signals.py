# coding=utf-8
"""SIGTERM and Ctrl-C: how a command catches them, and how its worker processes leave them to
it. One scheme for training (stop after the current step: training/preemption.py), the data
scripts (stop at once: `StopOnSignals`) and the HTTP server (drain, then stop).

`SignalCatcher` installs the handlers while a command runs, keeps the signal that came and
puts the previous handlers back at the end; a subclass says what the first signal and a
later one do. A worker process forked by the command calls `leave_stopping_to_parent`.

No TensorFlow import.
"""

import os
import signal


class SignalCatcher(object):
  """While installed (a context manager), SIGINT and SIGTERM are caught in this process.

  The first signal is kept in `signum`, then passed to `on_first_signal`; any later one is
  passed to `on_later_signal`. Subclasses override those two (here they do nothing). Only
  the main thread can install handlers; elsewhere this does nothing. On leaving, the
  previous handlers come back (or what `handler_on_exit` chooses instead).

  A worker process forked while the handlers are installed, before it has called
  `leave_stopping_to_parent`, behaves as it will after: it ignores SIGINT and ends at
  once on SIGTERM, instead of running the handlers meant for its parent.

  Attributes:
    signum: the first signal received, or None.
  """

  SIGNALS = (signal.SIGINT, signal.SIGTERM)

  def __init__(self):
    self.signum = None
    self._pid = None
    self._previous = {}

  def __enter__(self):
    self._pid = os.getpid()
    try:
      for signum in self.SIGNALS:
        self._previous[signum] = signal.signal(signum, self._handle)
    except ValueError:  # not the main thread
      pass
    return self

  def __exit__(self, *unused_exc):
    for signum, handler in self._previous.items():
      signal.signal(signum, self.handler_on_exit(handler))
    self._previous = {}
    return False

  def handler_on_exit(self, previous):
    """The handler to put back on leaving, given the one found on entering."""
    if previous is None:  # a handler not set from Python, which cannot be set back
      return signal.SIG_DFL
    return previous

  def on_first_signal(self, signum):
    """Called in the main thread for the first signal, with `signum` already set."""

  def on_later_signal(self, signum):
    """Called in the main thread for each signal after the first."""

  def _handle(self, signum, unused_frame):
    if os.getpid() != self._pid:
      # A worker between its fork and leave_stopping_to_parent: it behaves as it will after.
      if signum == signal.SIGTERM:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
      return
    if self.signum is None:
      self.signum = signum
      self.on_first_signal(signum)
    else:
      self.on_later_signal(signum)


class Terminated(BaseException):
  """SIGTERM asked the run to stop; raised in the main process by `StopOnSignals`.

  A BaseException, like KeyboardInterrupt, so that no `except Exception` on the
  way out takes it for an error of its own. The command's main() turns it into one
  line and exit 143.
  """


class StopOnSignals(SignalCatcher):
  """While installed, Ctrl-C and SIGTERM stop the main process cleanly, at once.

  The first SIGINT raises KeyboardInterrupt and the first SIGTERM raises Terminated in
  the main thread, so that the `try` blocks on the way out clean up
  (create_pretraining_data.py ends its worker pool and deletes its temporary files).
  Later signals are ignored: that clean-up is not cut short. After `stop_raising()` (the
  output files are being renamed, or another failure is being cleaned up) a signal is
  only recorded too. The pool workers ignore SIGINT themselves
  (`leave_stopping_to_parent`).

  On leaving, the previous handlers come back, unless a signal came: the process is
  then on its way out and ignores any further one (SIG_IGN, which, unlike a Python
  handler, also holds while the interpreter shuts down).
  """

  def __init__(self):
    super(StopOnSignals, self).__init__()
    self._raising = True

  def stop_raising(self):
    """From now on a signal is only recorded: what runs must run to its end."""
    self._raising = False

  def handler_on_exit(self, previous):
    if self.signum is not None:
      return signal.SIG_IGN
    return super(StopOnSignals, self).handler_on_exit(previous)

  def on_first_signal(self, signum):
    if not self._raising:
      return
    if signum == signal.SIGINT:
      raise KeyboardInterrupt()
    raise Terminated()


def leave_stopping_to_parent():
  """In a worker process: only the parent decides when to stop.

  The worker ignores Ctrl-C (which the terminal sends to the whole process group, and
  which would only print the worker's traceback) and ends at once on SIGTERM (sent by
  its parent, e.g. through pool.terminate()), instead of running the handlers it
  inherited with the fork.
  """
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.signal(signal.SIGTERM, signal.SIG_DFL)
