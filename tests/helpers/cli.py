# coding=utf-8
"""The harness of the command-line tests: runs a repo script as a subprocess of the
interpreter running pytest (so the same TensorFlow), bounded in time, and checks the
outcome. Every test that starts a script uses it."""

import collections
import hashlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

# This file is tests/helpers/cli.py.
REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A script that does not finish in this time has hung.
RUN_TIMEOUT_SECONDS = 300


def script_path(name):
  return os.path.join(REPO_DIR, name)


def script_env():
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def flag_list(flags):
  """Renders a dict flag name -> value as --name=value (True: --name; None: left out)."""
  args = []
  for name, value in flags.items():
    if value is True:
      args.append("--" + name)
    elif value is not None:
      args.append("--%s=%s" % (name, value))
  return args


# Runs a script with the modules named in argv[1] (comma-separated) made unimportable (None
# in sys.modules: `import` raises ImportError, as when a package is not installed); argv[2:]
# are the script's flags.
_BLOCKING_WRAPPER = """\
import runpy
import sys
for name in filter(None, sys.argv[1].split(",")):
  sys.modules[name] = None
sys.path.insert(0, %(repo)r)
sys.argv = [%(script)r] + sys.argv[2:]
runpy.run_path(%(script)r, run_name="__main__")
"""


def write_blocking_wrapper(path, name):
  """Writes at `path` a script that runs repo script `name` with the modules its first
  argument names (comma-separated) unimportable; returns `path` (run_script takes it)."""
  with open(path, "w", encoding="utf-8") as f:
    f.write(_BLOCKING_WRAPPER % {"repo": REPO_DIR, "script": script_path(name)})
  return path


def run_script(name, args, cwd=REPO_DIR, timeout=RUN_TIMEOUT_SECONDS):
  """Runs repo script `name` with `args` to the end; returns the CompletedProcess (text
  stdout and stderr)."""
  return subprocess.run(
      [sys.executable, script_path(name)] + list(args), cwd=cwd, env=script_env(),
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8", errors="replace",
      timeout=timeout)


Case = collections.namedtuple("Case", ["script", "flags", "fragments", "file_size_limit"])
Case.__doc__ = """A script run of the command-line tests.

Fields:
  script: the repo script's name; flags: a dict for flag_list.
  fragments: what its one error line must hold (empty for a run meant to succeed).
  file_size_limit: bytes a write may reach (RLIMIT_FSIZE, as a full disk), or None.
"""


def run_case(case):
  """Runs a Case's script to the end; returns the CompletedProcess (text stdout/stderr)."""
  if case.file_size_limit is None:
    return run_script(case.script, flag_list(case.flags))

  def limit_file_size():
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (case.file_size_limit, hard))
  # Python ignores SIGXFSZ, so a write past the limit fails with EFBIG ("File too large").
  return subprocess.run(
      [sys.executable, script_path(case.script)] + flag_list(case.flags),
      cwd=REPO_DIR, env=script_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      encoding="utf-8", errors="replace", timeout=RUN_TIMEOUT_SECONDS,
      preexec_fn=limit_file_size)


class RunningScript(object):
  """A repo script started in the background, its stderr going to a file.

  Use as a context manager: on exit the process is killed if it still runs, and reaped.
  """

  def __init__(self, name, args, stderr_path, cwd=REPO_DIR):
    self.stderr_path = stderr_path
    self._stderr = open(stderr_path, "w")
    self.process = subprocess.Popen(
        [sys.executable, script_path(name)] + list(args), cwd=cwd, env=script_env(),
        stdout=subprocess.DEVNULL, stderr=self._stderr)
    self.deadline = time.time() + RUN_TIMEOUT_SECONDS

  def stderr(self):
    with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
      return f.read()

  def wait_for(self, condition, what):
    """Polls `condition()` until it is true; fails if the script ends or time runs out."""
    while not condition():
      assert self.process.poll() is None, "the run ended before %s:\n%s" % (
          what, self.stderr()[-3000:])
      assert time.time() < self.deadline, "%s did not happen in time" % what
      time.sleep(0.02)

  def outcome(self, returncode):
    """A CompletedProcess of the ended script (its exit code and stderr), for the asserts
    below."""
    return subprocess.CompletedProcess(self.process.args, returncode, "", self.stderr())

  def signal(self, signum):
    os.kill(self.process.pid, signum)

  def wait(self):
    """Waits for the script to end (bounded); returns its exit code."""
    return self.process.wait(timeout=max(1.0, self.deadline - time.time()))

  def __enter__(self):
    return self

  def __exit__(self, *unused_exc):
    if self.process.poll() is None:
      self.process.send_signal(signal.SIGKILL)
    self.process.wait()
    self._stderr.close()


def assert_succeeded(result):
  assert result.returncode == 0, "run failed:\n%s" % result.stderr[-5000:]
  assert "Traceback" not in result.stderr, result.stderr[-5000:]


def assert_one_line_error(result, *must_contain, last=False):
  """A usage error: exit 1, one `error: ` line holding every fragment, no traceback; with
  `last`, that line is also the last one written to stderr.

  Returns:
    The error line.
  """
  output = result.stderr + (result.stdout or "")
  assert result.returncode == 1, output[-5000:]
  assert "Traceback" not in output, output[-5000:]
  errors = [line for line in output.splitlines() if line.startswith("error: ")]
  assert len(errors) == 1, output[-5000:]
  for fragment in must_contain:
    assert fragment in errors[0], (fragment, errors[0])
  if last:
    assert result.stderr.rstrip("\n").splitlines()[-1] == errors[0], result.stderr[-3000:]
  return errors[0]


def http_json(url, body=None, timeout=60):
  """GET (body None) or POST `body` (bytes) to a test's server on 127.0.0.1; returns
  (status, decoded JSON reply), for error statuses too."""
  req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
  try:
    with urllib.request.urlopen(req, timeout=timeout) as response:
      return response.status, json.loads(response.read().decode("utf-8"))
  except urllib.error.HTTPError as e:
    return e.code, json.loads(e.read().decode("utf-8"))


def file_sizes(directory, measure=os.path.getsize):
  """Relative path -> measure(path) (by default its size) of every file under `directory`
  (what a run wrote, or left)."""
  files = {}
  for parent, _, names in os.walk(directory):
    for name in names:
      path = os.path.join(parent, name)
      files[os.path.relpath(path, directory)] = measure(path)
  return files


def file_sha256(path):
  """The sha256 (hex) of a file's bytes: file_sizes(directory, file_sha256) tells that
  nothing under a directory was rewritten, even at the same size."""
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


def free_ports(count):
  """Ports on 127.0.0.1 that nothing listens on right now."""
  sockets = []
  for _ in range(count):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    sockets.append(s)
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


def read_json(path):
  """The JSON value of a UTF-8 file."""
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def read_jsonl(path):
  """The JSON values of a UTF-8 file's lines."""
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f]
