# coding=utf-8
"""Worker processes of the data scripts: how many cores, and workers that end with their
parent. No TensorFlow import."""

import os
import signal


def available_cpus():
  """CPU cores this process may run on."""
  if hasattr(os, "sched_getaffinity"):
    return len(os.sched_getaffinity(0))
  return os.cpu_count() or 1


def die_with_parent(parent_pid):
  """Asks Linux to end this worker when its parent dies (e.g. killed by the OOM killer), so
  no orphan keeps the cores busy; ends it now if the parent is already gone. Elsewhere a
  no-op."""
  try:
    import ctypes  # pylint: disable=g-import-not-at-top
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
  except (ImportError, OSError):
    return
  pr_set_pdeathsig = 1
  libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
  if os.getppid() != parent_pid:  # the parent died before the prctl
    os._exit(1)  # pylint: disable=protected-access
