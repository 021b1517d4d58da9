# coding=utf-8
"""Several machines: who the workers are, TF's server, and noticing a worker that is gone.

A multi-worker run is between-graph replication on TensorFlow's own distributed runtime:
every worker process builds the same graph for its own devices, starts a tf.train.Server,
and the replicas of all workers sum their gradients with TF's collective all-reduce
(multigpu.py). Worker 0 is the chief: it alone writes to output_dir.

TensorFlow does not notice a dead peer on its own everywhere: on TF 1.15 an all-reduce
whose peer died waits forever. A watchdog thread probes every peer's server port and ends
the process with a one-line error naming the peer once it has been unreachable for
--worker_timeout_secs. A probe is a TCP connect, which a busy peer (the chief evaluating
or saving) still answers, so long pauses do not trip it.
"""

import json
import os
import socket
import sys
import threading
import time

import tensorflow.compat.v1 as tf


class ClusterError(ValueError):
  """A bad --worker_hosts/--task_index/TF_CONFIG; the runner shows it as a usage error."""


class Cluster(object):
  """The workers of a run.

  Attributes:
    worker_hosts: list of "host:port", worker 0 (the chief) first.
    task_index: this process's index in worker_hosts.
  """

  def __init__(self, worker_hosts, task_index):
    self.worker_hosts = list(worker_hosts)
    self.task_index = task_index

  @property
  def num_workers(self):
    return len(self.worker_hosts)

  @property
  def is_chief(self):
    return self.task_index == 0

  def peers(self):
    """(index, "host:port") of every other worker."""
    return [(i, h) for i, h in enumerate(self.worker_hosts) if i != self.task_index]

  def describe(self, index):
    return "worker %d (%s)" % (index, self.worker_hosts[index])


def _parse_host(host, source):
  host = host.strip()
  name, _, port = host.rpartition(":")
  if not name or not port.isdigit() or not 0 < int(port) < 65536:
    raise ClusterError("%s: %r is not host:port (e.g. 10.0.0.1:2222)." % (source, host))
  return host


def cluster_from_flags(worker_hosts, task_index, environ=None):
  """The Cluster of --worker_hosts/--task_index, else of the TF_CONFIG variable, else None.

  TF_CONFIG is the JSON that TensorFlow's own tools and cluster managers set:
  {"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": i}}. A
  "chief" job, if present, is worker 0 and the "worker" job follows it. Parameter servers
  ("ps") are not used by bert-mgpu.

  Raises:
    ClusterError: malformed hosts, an index out of range, a repeated host, or a bad TF_CONFIG.
  """
  environ = os.environ if environ is None else environ
  if worker_hosts:
    hosts = [_parse_host(h, "--worker_hosts") for h in worker_hosts.split(",") if h.strip()]
    source = "--task_index"
  elif environ.get("TF_CONFIG"):
    hosts, task_index = _hosts_from_tf_config(environ["TF_CONFIG"])
    source = "TF_CONFIG task index"
  else:
    if task_index:
      raise ClusterError("--task_index=%d without --worker_hosts: list every worker's "
                         "host:port in --worker_hosts (the same list on every worker)." %
                         task_index)
    return None
  if len(set(hosts)) != len(hosts):
    raise ClusterError("--worker_hosts lists a host:port twice (%s): every worker needs a "
                       "port of its own." % ",".join(hosts))
  if not 0 <= task_index < len(hosts):
    raise ClusterError("%s=%d: with %d worker(s) it is 0 to %d (0 is the chief)." % (
        source, task_index, len(hosts), len(hosts) - 1))
  if len(hosts) == 1:
    return None
  return Cluster(hosts, task_index)


def _hosts_from_tf_config(text):
  """(worker hosts, task index) of a TF_CONFIG value."""
  try:
    config = json.loads(text)
    jobs, task = config["cluster"], config["task"]
    kind, index = task["type"], int(task["index"])
  except (ValueError, KeyError, TypeError) as e:
    raise ClusterError("TF_CONFIG is not {\"cluster\": {\"worker\": [...]}, \"task\": "
                       "{\"type\": \"worker\", \"index\": i}} (%s: %s)." % (type(e).__name__, e))
  unknown = sorted(set(jobs) - {"chief", "worker"})
  if unknown:
    raise ClusterError("TF_CONFIG has job(s) %s: bert-mgpu uses only \"worker\" (and "
                       "\"chief\"); gradients are all-reduced, without parameter servers." %
                       ", ".join(unknown))
  chief = list(jobs.get("chief", []))
  hosts = [_parse_host(h, "TF_CONFIG") for h in chief + list(jobs.get("worker", []))]
  if kind == "chief":
    return hosts, index
  if kind == "worker":
    return hosts, index + len(chief)
  raise ClusterError("TF_CONFIG task type %r: this process must be a \"worker\" (or the "
                     "\"chief\")." % kind)


def start_server(cluster, session_config):
  """Starts this worker's tf.train.Server. Raises ClusterError when its port is taken."""
  try:
    return tf.train.Server(tf.train.ClusterSpec({"worker": cluster.worker_hosts}),
                           job_name="worker", task_index=cluster.task_index,
                           config=session_config, start=True)
  except (tf.errors.OpError, ValueError) as e:
    raise ClusterError("could not start %s: %s. Is another process using the port? Give a "
                       "free port in --worker_hosts." % (
                           cluster.describe(cluster.task_index),
                           " ".join(str(e).split())[:200]))


UP, REFUSED, SILENT = "up", "refused", "silent"


def probe(host, timeout=2.0):
  """UP when a TCP connection to "host:port" opens; REFUSED when nothing listens there (the
  process is gone); SILENT when there is no answer (the machine or the network is down)."""
  name, _, port = host.rpartition(":")
  try:
    with socket.create_connection((name.strip("[]"), int(port)), timeout=timeout):
      return UP
  except ConnectionRefusedError:
    return REFUSED
  except (OSError, ValueError):
    return SILENT


def reachable(host, timeout=2.0):
  """True when a TCP connection to "host:port" opens."""
  return probe(host, timeout) == UP


def wait_for_peers(cluster, timeout_secs, poll_secs=0.5, log_every_secs=10.0):
  """Waits until every other worker's server is up, logging who is awaited.

  Raises:
    ClusterError: a worker did not come up within timeout_secs.
  """
  deadline = time.time() + timeout_secs
  next_log = time.time()
  while True:
    missing = [(i, h) for i, h in cluster.peers() if not reachable(h)]
    if not missing:
      return
    now = time.time()
    if now >= deadline:
      raise ClusterError(
          "%s did not come up within %d s (--worker_startup_timeout_secs). Start it with the "
          "same flags and --task_index=%d, or check the host and port." % (
              ", ".join(cluster.describe(i) for i, _ in missing), timeout_secs, missing[0][0]))
    if now >= next_log:
      tf.logging.info("Waiting for %s to start (up to %d s more).", ", ".join(
          cluster.describe(i) for i, _ in missing), deadline - now)
      next_log = now + log_every_secs
    time.sleep(poll_secs)


class PeerWatchdog(object):
  """Ends this process with a one-line error when a peer stays unreachable too long, or
  comes back after its process was gone (a restarted worker cannot rejoin a running
  all-reduce: every worker must restart together).

  The main thread may be blocked inside an all-reduce that never returns (TF 1.15 has no
  collective timeout), so the watchdog cannot raise there: it writes the error and exits
  the process (os._exit) with `exit_code`. Start it when training starts and stop() it as
  soon as the last collective has run: a peer that finished and left is no error.
  """

  def __init__(self, cluster, timeout_secs, exit_code=1, poll_secs=1.0):
    self.cluster = cluster
    self.timeout_secs = timeout_secs
    self.exit_code = exit_code
    self.poll_secs = poll_secs
    self.step = None  # the step the loop is running, for the message
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._watch, name="peer-watchdog")
    self._thread.daemon = True

  def unreachable_peer(self, within_secs=0.0):
    """The index of a peer that cannot be reached, probing for up to `within_secs` (a
    process that just died may still hold its port for a moment), or None."""
    deadline = time.time() + within_secs
    while True:
      for index, host in self.cluster.peers():
        if not reachable(host):
          return index
      if time.time() >= deadline:
        return None
      time.sleep(0.2)

  def _watch(self):
    down_since, gone = {}, set()
    while not self._stop.wait(self.poll_secs):
      now = time.time()
      for index, host in self.cluster.peers():
        state = probe(host, timeout=min(2.0, self.timeout_secs))
        if state == UP:
          if index in gone:
            self._fail("%s was restarted while this run was going" %
                       self.cluster.describe(index))
          down_since.pop(index, None)
          continue
        if state == REFUSED:
          gone.add(index)
        down_since.setdefault(index, now)
        if now - down_since[index] >= self.timeout_secs:
          self._fail("%s cannot be reached for %d s (--worker_timeout_secs): it stopped or "
                     "its machine is down" % (self.cluster.describe(index), self.timeout_secs))

  def _fail(self, what):
    if self._stop.is_set():
      return
    sys.stderr.write("error: %s%s. Stop every worker and start them all again with the same "
                     "command; training resumes from the chief's last checkpoint.\n" % (
                         what, "" if self.step is None else
                         " (this worker was at step %d)" % self.step))
    sys.stderr.flush()
    os._exit(self.exit_code)  # pylint: disable=protected-access

  def stop(self):
    """Stops watching (idempotent)."""
    self._stop.set()
    if self._thread.is_alive():
      self._thread.join()

  def __enter__(self):
    self._thread.start()
    return self

  def __exit__(self, *unused_exc):
    self.stop()
