# coding=utf-8
"""cluster.py: the worker list from flags or TF_CONFIG, and the watchdog that ends a worker
whose peer died, was restarted or cannot be reached (only 127.0.0.1, bounded processes)."""

import json
import socket
import subprocess
import sys
import textwrap
import time

import pytest

import cli
from bert_mgpu.distributed import cluster


def test_workers_from_flags():
  workers = cluster.cluster_from_flags("127.0.0.1:2222, 127.0.0.1:2223", 1, environ={})
  assert workers.worker_hosts == ["127.0.0.1:2222", "127.0.0.1:2223"]
  assert workers.task_index == 1 and not workers.is_chief and workers.num_workers == 2
  assert workers.peers() == [(0, "127.0.0.1:2222")]
  # One worker, or none at all, is a plain run.
  assert cluster.cluster_from_flags("127.0.0.1:2222", 0, environ={}) is None
  assert cluster.cluster_from_flags(None, 0, environ={}) is None


def test_workers_from_tf_config_with_a_chief_job():
  config = {"cluster": {"chief": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222", "10.0.0.3:2222"]},
            "task": {"type": "worker", "index": 1}}
  workers = cluster.cluster_from_flags(None, 0, environ={"TF_CONFIG": json.dumps(config)})
  assert workers.worker_hosts == ["10.0.0.1:2222", "10.0.0.2:2222", "10.0.0.3:2222"]
  assert workers.task_index == 2
  config["task"] = {"type": "chief", "index": 0}
  assert cluster.cluster_from_flags(None, 0, environ={"TF_CONFIG": json.dumps(config)}).is_chief
  # The flags win over TF_CONFIG.
  assert cluster.cluster_from_flags("a:1,b:2", 1, {"TF_CONFIG": json.dumps(config)}).task_index == 1


@pytest.mark.parametrize("hosts,index,environ,message", [
    ("127.0.0.1:2222,127.0.0.1:2222", 0, {}, "twice"),
    ("127.0.0.1", 0, {}, "host:port"),
    ("127.0.0.1:99999", 0, {}, "host:port"),
    ("a:1,b:2", 2, {}, "0 to 1"),
    (None, 3, {}, "without --worker_hosts"),
    (None, 0, {"TF_CONFIG": "{not json"}, "TF_CONFIG"),
    (None, 0, {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"], "ps": ["b:2"]},
                                        "task": {"type": "worker", "index": 0}})}, "ps"),
    (None, 0, {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:2"]},
                                        "task": {"type": "evaluator", "index": 0}})},
     "evaluator"),
])
def test_bad_worker_settings_are_one_clear_error(hosts, index, environ, message):
  with pytest.raises(cluster.ClusterError) as error:
    cluster.cluster_from_flags(hosts, index, environ=environ)
  assert message in str(error.value) and "\n" not in str(error.value)


def listening_socket(port=0):
  server = socket.socket()
  server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
  server.bind(("127.0.0.1", port))
  server.listen(16)
  return server


# A worker process (index 0) watching one peer at the given port with a 2 s timeout; it
# prints "watching", then sleeps; the watchdog is expected to end it.
WATCHER = textwrap.dedent("""
    import sys, time
    from bert_mgpu.distributed import cluster
    workers = cluster.Cluster(["127.0.0.1:1", "127.0.0.1:%s" % sys.argv[1]], 0)
    with cluster.PeerWatchdog(workers, timeout_secs=2, poll_secs=0.2) as watchdog:
      watchdog.step = 7
      print("watching", flush=True)
      time.sleep(float(sys.argv[2]))
      if sys.argv[3] == "stop":
        watchdog.stop()
        time.sleep(4)
    print("survived", flush=True)
""")


def start_watcher(port, sleep_secs, stop="keep"):
  return subprocess.Popen([sys.executable, "-c", WATCHER, str(port), str(sleep_secs), stop],
                          cwd=cli.REPO_DIR, env=cli.script_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE,
                          encoding="utf-8")


def finish(process, timeout=30):
  try:
    out, err = process.communicate(timeout=timeout)
  finally:
    process.kill()
  return process.returncode, out, err


def test_watchdog_names_a_dead_peer_within_its_timeout():
  peer = listening_socket()
  port = peer.getsockname()[1]
  watcher = start_watcher(port, 60)
  assert watcher.stdout.readline().strip() == "watching"
  peer.close()
  closed = time.time()
  code, _, err = finish(watcher)
  assert code == 1 and time.time() - closed < 2 + 10
  errors = [line for line in err.splitlines() if line.startswith("error: ")]
  assert len(errors) == 1 and "Traceback" not in err
  assert "worker 1 (127.0.0.1:%d) cannot be reached for 2 s" % port in errors[0]
  assert "at step 7" in errors[0]


def test_watchdog_ends_a_worker_whose_peer_was_restarted():
  peer = listening_socket()
  port = peer.getsockname()[1]
  watcher = start_watcher(port, 60)
  assert watcher.stdout.readline().strip() == "watching"
  peer.close()
  time.sleep(0.8)  # refused at least once
  peer = listening_socket(port)  # a new process on the same port, within the timeout
  try:
    code, _, err = finish(watcher)
  finally:
    peer.close()
  assert code == 1 and "worker 1 (127.0.0.1:%d) was restarted" % port in err


def test_a_stopped_watchdog_lets_peers_leave():
  peer = listening_socket()
  port = peer.getsockname()[1]
  watcher = start_watcher(port, 0.5, stop="stop")
  assert watcher.stdout.readline().strip() == "watching"
  time.sleep(0.6)
  peer.close()  # after stop(): no error, even well past the timeout
  code, out, err = finish(watcher)
  assert code == 0 and "survived" in out and "error: " not in err


def test_waiting_for_a_peer_that_never_comes_is_bounded():
  port = listening_socket().getsockname()[1]  # closed at once by garbage collection
  workers = cluster.Cluster(["127.0.0.1:1", "127.0.0.1:%d" % port], 0)
  start = time.time()
  with pytest.raises(cluster.ClusterError) as error:
    cluster.wait_for_peers(workers, timeout_secs=1, poll_secs=0.1)
  assert time.time() - start < 5
  assert "worker 1 (127.0.0.1:%d) did not come up within 1 s" % port in str(error.value)
