# coding=utf-8
"""Preemption: SIGTERM and Ctrl-C stop training at the next step boundary, after a save.

StopSignals catches the signals while training runs (the scheme of bert_mgpu/signals.py);
preempted() is the error the run then ends with (exit 128 + the signal, through
command_line.run_main).
"""

import signal

import tensorflow.compat.v1 as tf

from bert_mgpu.errors import Preempted, signal_name
from bert_mgpu import signals


class StopSignals(signals.SignalCatcher):
  """Catches SIGTERM and the first SIGINT while training; the loop polls `signum`.

  A second Ctrl-C interrupts at once (KeyboardInterrupt), for a user who will not wait; a
  later SIGTERM is kept in `signum` and logged like the first.
  Only the main thread can install handlers; elsewhere this does nothing.
  """

  def on_first_signal(self, signum):
    tf.logging.warning("Received %s: stopping after the current step (and evaluation, if one "
                       "is running) and saving a checkpoint%s.", signal_name(signum),
                       " (Ctrl-C again to stop at once)" if signum == signal.SIGINT else "")

  def on_later_signal(self, signum):
    if signum == signal.SIGINT:
      raise KeyboardInterrupt
    self.signum = signum
    self.on_first_signal(signum)


def preempted(config, signum, step, last_path, finished):
  """The Preempted error of a run stopped by a signal (to this worker or, with several
  workers, another).

  Args:
    config: RunConfig.
    signum: the signal this process got, or None (another worker's).
    step: the step training stopped at.
    last_path: the checkpoint saved last.
    finished: training had ended anyway (the last step, or early stopping).
  """
  where = ("saved %s" % last_path if config.is_chief else
           "the chief saved the checkpoint")
  if signum is None:
    signum = signal.SIGTERM
    cause = "another worker's signal"
  else:
    cause = signal_name(signum)
  if step < config.num_train_steps and not finished:
    return Preempted(signum, "Stopped by %s at step %d of %d; %s. Run the same command again "
                     "to resume from it." % (cause, step, config.num_train_steps, where))
  # Also when training had just ended: the signal asked the whole run to stop, so the
  # evaluation and prediction after training are left to the rerun.
  return Preempted(signum, "Stopped by %s after training ended (step %d); %s. Run the same "
                   "command again to evaluate and predict." % (cause, step, where))
