# coding=utf-8
"""The other workers of a training run, as the loop meets them.

Peers is the multi-worker protocol behind one object: the settings check, the start from
the chief's variables, the votes (nothing to train, early stopping), the stop request that
rides on every step, and the watchdog that turns a lost peer into one line. For one
process every call is the plain single-process action (a local session, sess.run, the
caller's own vote), so the loop reads the same either way.

The collectives themselves are built by multigpu.py; the server, the peer list and the
watchdog are bert_mgpu/distributed/cluster.py's.
"""

import contextlib
import re
import time

try:
  import resource
except ImportError:  # not on Windows
  resource = None

import tensorflow.compat.v1 as tf

from bert_mgpu.distributed import cluster
from bert_mgpu.errors import UsageError, WorkerLost
from bert_mgpu.training import phases
import multigpu

# The settings every worker must share (different flags or data would make their
# collectives pair up wrongly and wait forever).
_WORKER_SETTINGS = ("num_train_steps", "save_checkpoints_steps", "accumulation_steps",
                    "train_batch_size", "num_towers", "micro_batch_size", "random_seed",
                    "adversarial_passes", "ema_bias_correction", "ema_rule_recorded",
                    "ema_warmup",
                    "training_flags_digest")
# How the check names a setting that is no count (default: its name and both values).
_RULE_FROM_CHECKPOINT = ("the weight averages' rule, which a resumed run takes from "
                         "output_dir's checkpoint (a worker that cannot see it takes "
                         "--ema_bias_correction and --ema_warmup, and one from before bias "
                         "correction needs output_dir on every worker)")
_SETTING_DESCRIPTIONS = {"training_flags_digest": "the training flags (training_flags.json)",
                         "ema_bias_correction": _RULE_FROM_CHECKPOINT,
                         "ema_rule_recorded": _RULE_FROM_CHECKPOINT,
                         "ema_warmup": _RULE_FROM_CHECKPOINT}

# Training sessions that must not be closed (nor garbage-collected, which closes them).
_SESSIONS_LEFT_OPEN = []


# A close slower than this is named in the log (TF's close waits for every pending op and
# input thread; a slow one would otherwise be unexplained time in the phase log).
_SLOW_CLOSE_SECONDS = 2.0


def _disk_reads():
  """(major page faults, blocks read) of this process so far; None where unknown."""
  if resource is None:
    return None
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return usage.ru_majflt, usage.ru_inblock


def _close(sess):
  """Closes `sess`, counting the time as the phase "close". A slow close is logged with the
  disk reads it needed, which tells paging in from waiting on a thread."""
  close_start, reads_before = time.time(), _disk_reads()
  sess.close()
  seconds = time.time() - close_start
  phases.add("close", seconds)
  if seconds <= _SLOW_CLOSE_SECONDS:
    return
  if reads_before is None:
    tf.logging.warning("Closing the training session took %.1f s.", seconds)
    return
  reads_after = _disk_reads()
  tf.logging.warning("Closing the training session took %.1f s (%d major page faults, "
                     "%.1f MB read).", seconds, reads_after[0] - reads_before[0],
                     (reads_after[1] - reads_before[1]) * 512 / 1e6)


class Peers(object):
  """This worker's view of the others (or of none, for one process).

  Build it inside the training graph in two parts: the constructor first (the settings
  check, whose collective keys must not depend on the settings it checks), then
  build_start() once every variable exists. Then open the session with session().
  """

  def __init__(self, config, plan):
    self.config = config
    self.cluster = config.cluster
    self.plan = plan
    self.watchdog = None
    self._settings_check = multigpu.build_worker_check(plan, len(_WORKER_SETTINGS))
    self._start_sync = self._vote = self._votes = None
    self._stop_agreed = False

  @property
  def alone(self):
    return self.cluster is None

  def build_start(self):
    """The start sync (every replica starts from the chief's replica 0) and the vote."""
    self._start_sync = multigpu.build_start_sync(self.plan)
    self._vote, self._votes = multigpu.build_worker_vote(self.plan)

  @contextlib.contextmanager
  def session(self, graph):
    """The training session of `graph`: a local one, or for several workers one on this worker's
    tf.train.Server once every peer is up, watched by a cluster.PeerWatchdog."""
    if self.alone:
      with tf.Session(graph=graph, config=self.plan.session_config()) as sess:
        yield sess
        # Not reached on an error: Session's own exit then closes it, with a time limit.
        _close(sess)  # the exit's close is then a no-op
      return
    try:
      server = cluster.start_server(self.cluster, self.plan.session_config())
      tf.logging.info("Worker %d of %d serving at %s; waiting for the others.",
                      self.cluster.task_index, self.cluster.num_workers,
                      self.cluster.worker_hosts[self.cluster.task_index])
      cluster.wait_for_peers(self.cluster, self.config.worker_startup_timeout_secs)
    except cluster.ClusterError as e:
      raise UsageError(str(e))
    sess = tf.Session(server.target, graph=graph, config=self.plan.session_config())
    with cluster.PeerWatchdog(self.cluster, self.config.worker_timeout_secs) as watchdog:
      self.watchdog = watchdog
      yield sess
    if tf.__version__.startswith("1."):
      # TF 1.15's close waits forever for a peer that has left (docs/FORMATS.md 9): the
      # session stays open until the process exits, which does not wait.
      _SESSIONS_LEFT_OPEN.append(sess)
    else:
      _close(sess)

  def run(self, sess, fetches, feed_dict=None):
    """sess.run of ops that wait on other workers: a lost peer becomes one line."""
    try:
      return sess.run(fetches, feed_dict)
    except tf.errors.OpError as e:
      if self.watchdog is None:
        raise
      raise _worker_lost(e, self.watchdog)

  def agree_on_settings(self, sess):
    """Raises UsageError when the workers do not share the settings that pair up their
    collectives. Alone: nothing to compare."""
    if self.alone:
      return
    values, chief_values, differing = self._settings_check
    mine = [int(getattr(self.config, name) or 0) for name in _WORKER_SETTINGS]
    chief, counts = self.run(sess, [chief_values, differing], {values: mine})
    for name, own, chiefs, count in zip(_WORKER_SETTINGS, mine, chief, counts):
      if count:
        if name in _SETTING_DESCRIPTIONS:
          what = "%s (%s)" % (_SETTING_DESCRIPTIONS[name], "this worker's differ from the "
                              "chief's" if own != chiefs else "%d other worker(s) differ"
                              % count)
        else:
          what = "%s (%s)" % (name, "the chief has %d, this worker %d" % (chiefs, own)
                              if own != chiefs else
                              "the chief has %d, %d other worker(s) differ" % (chiefs, count))
        raise UsageError("the workers disagree on %s: start every worker with the same flags, "
                         "--n_gpus and data." % what)

  def sync_start(self, sess):
    """Every replica of every worker takes the chief's variables (after the chief has
    initialised or restored them). Nothing to do for unreplicated variables."""
    if self._start_sync is not None:
      self.run(sess, self._start_sync)
    if not self.alone:
      tf.logging.info("Worker %d starts from the chief's variables.", self.cluster.task_index)

  def vote(self, sess, mine):
    """True when any worker votes True (alone: `mine`). Every worker must call it at the
    same point: it waits for all of them."""
    if self.alone:
      return bool(mine)
    return bool(self.run(sess, self._votes, {self._vote: float(mine)}))

  def step_feed(self, stop, train_ops, step):
    """The feed of one training step: this worker's stop request rides on the step's
    all-reduce (the watchdog learns the step for its messages)."""
    if self.watchdog is not None:
      self.watchdog.step = step
    return {train_ops.stop_request: float(stop.signum is not None)}

  def record_step(self, result):
    """Notes whether the step just run carried any worker's stop request."""
    self._stop_agreed = self._stop_agreed or result["stop"] > 0

  def stopping(self, stop):
    """Whether training stops now for a signal: alone, at once; with several workers, after
    the step that carried the request to all of them."""
    return self._stop_agreed if not self.alone else stop.signum is not None

  def leave(self):
    """No collective from here on: peers may exit without alarming this worker."""
    if self.watchdog is not None:
      self.watchdog.stop()


def _worker_lost(error, watchdog):
  """The one-line WorkerLost for a collective that failed because a peer went away (TF 2.x
  raises; on TF 1.15 the collective waits and the watchdog ends the process instead)."""
  peer = watchdog.unreachable_peer(within_secs=min(10, watchdog.timeout_secs))
  if peer is None:
    # TF names the peer it lost, e.g. "... remote target /job:worker/replica:0/task:1 ...".
    match = re.search(r"/job:worker/replica:0/task:(\d+)", str(error))
    if match and int(match.group(1)) != watchdog.cluster.task_index:
      peer = int(match.group(1))
  first_line = str(error).strip().split("\n")[0].replace("Graph execution error:", "").strip()
  what = ("%s cannot be reached: it stopped or its machine is down" %
          watchdog.cluster.describe(peer) if peer is not None else
          "the all-reduce between workers failed (%s: %s)" % (type(error).__name__,
                                                               first_line[:200]))
  return WorkerLost("%s (this worker was at step %s). Stop every worker and start them all "
                    "again with the same command; training resumes from the chief's last "
                    "checkpoint." % (what, watchdog.step))
