# coding=utf-8
"""scripts/test.sh and scripts/setup_env.sh on a machine that lacks an interpreter: one line
at once, before any test or install (issue #47)."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from cli import REPO_DIR

BASH = shutil.which("bash")


def python_for_tf2():
  """The real executable of a Python 3.11-3.13 on this machine (not a pyenv shim), or None."""
  for name in ("python3.11", "python3.12", "python3.13"):
    if shutil.which(name) is None:
      continue
    result = subprocess.run(
        [name, "-c", "import sys; print(sys.executable)"], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, universal_newlines=True, timeout=60)
    if result.returncode == 0 and result.stdout.strip():
      return result.stdout.strip()
  return None


def bin_dir_with_only_python_3_11(tmp_path, tools=("bash", "dirname")):
  """tmp_path/bin holding a Python 3.11-3.13 as python3.11 and the given tools: a PATH with
  no Python 3.7. Skips the test when this machine has no such Python."""
  python = python_for_tf2()
  if python is None:
    pytest.skip("no Python 3.11-3.13 here to stand for the TF 2.x interpreter")
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  os.symlink(python, str(bin_dir / "python3.11"))
  for tool in tools:
    os.symlink(shutil.which(tool), str(bin_dir / tool))
  return bin_dir


def run_without_python_3_7(tmp_path, *args):
  """Runs a script with a PATH and HOME in which the only Python is a 3.11-3.13 one, so no
  Python 3.7 (neither on PATH nor under ~/.pyenv) can be found."""
  bin_dir = bin_dir_with_only_python_3_11(tmp_path)
  home = tmp_path / "home"
  home.mkdir()
  env = {"PATH": str(bin_dir), "HOME": str(home),
         "BERT_MGPU_VENV_DIR": str(tmp_path / "venvs")}
  return subprocess.run([BASH] + list(args), cwd=REPO_DIR, env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, universal_newlines=True, timeout=30)


def test_test_sh_without_python_3_7_stops_with_one_line_before_any_test(tmp_path):
  result = run_without_python_3_7(tmp_path, "scripts/test.sh")
  assert result.returncode == 1
  assert result.stdout == ""  # no suite started ("=== tests under ..." is never printed)
  lines = result.stderr.splitlines()
  assert len(lines) == 1, result.stderr
  assert lines[0].startswith("error: TensorFlow 1.15 needs Python 3.7"), lines[0]
  assert "pyenv install 3.7.16" in lines[0] and "bash scripts/test.sh tf2" in lines[0]
  assert not (tmp_path / "venvs").exists()  # nothing was installed


def test_setup_env_check_finds_the_interpreter_without_installing(tmp_path):
  found = run_without_python_3_7(tmp_path, "scripts/setup_env.sh", "tf2", "--check")
  assert found.returncode == 0, found.stderr
  assert os.path.realpath(found.stdout.strip()) == os.path.realpath(python_for_tf2())
  missing = subprocess.run(
      [BASH, "scripts/setup_env.sh", "--check", "tf1"], cwd=REPO_DIR,
      env={"PATH": str(tmp_path / "bin"), "HOME": str(tmp_path / "home")},
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
  assert missing.returncode == 1 and missing.stdout == ""
  assert missing.stderr.count("\n") == 1 and "needs Python 3.7" in missing.stderr
  assert not (tmp_path / "venvs").exists()


def test_setup_env_refuses_a_python_of_the_wrong_version(tmp_path):
  """A `python3` older than the tested versions allow is not taken for TF 2.x (it was, with no
  check)."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  fake = bin_dir / "python3"
  fake.write_text(u"#!/bin/sh\necho 'Python 3.6.15'\nexit 1\n")  # fails the version check
  fake.chmod(0o755)
  os.symlink(shutil.which("dirname"), str(bin_dir / "dirname"))
  result = subprocess.run(
      [BASH, "scripts/setup_env.sh", "--check", "tf2"], cwd=REPO_DIR,
      env={"PATH": str(bin_dir), "HOME": str(tmp_path)}, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
  assert result.returncode == 1 and result.stdout == ""
  assert "TensorFlow 2.x needs Python 3.11 to 3.13" in result.stderr


@pytest.mark.parametrize("flavour, tensorflow", [("tf2", "2."), ("tf1", "1.15.")])
def test_the_constraints_pin_every_package_exactly(flavour, tensorflow):
  """constraints-<flavour>.txt is a `pip freeze` of CI's environment: name==version lines."""
  with open(os.path.join(REPO_DIR, "constraints-%s.txt" % flavour), encoding="utf-8") as f:
    pins = [line for line in f.read().splitlines() if line and not line.startswith("#")]
  assert pins and all(re.match(r"^[A-Za-z0-9_.\-]+==[^=\s]+$", line) for line in pins), pins
  names = {line.split("==")[0].lower(): line.split("==")[1] for line in pins}
  assert names["tensorflow"].startswith(tensorflow) and "numpy" in names
  with open(os.path.join(REPO_DIR, "scripts", "setup_env.sh"), encoding="utf-8") as f:
    assert '-c "$repo/constraints-$flavour.txt"' in f.read()


@pytest.mark.parametrize("workers", ["0", "two", "-1"])
def test_test_sh_refuses_a_worker_count_that_is_not_one_or_more(tmp_path, workers):
  """BERT_MGPU_TEST_WORKERS (pytest-xdist's worker count): one line naming the value, before
  any interpreter is looked for (PATH here holds no Python, which would be the next error)."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  for tool in ("bash", "dirname"):
    os.symlink(shutil.which(tool), str(bin_dir / tool))
  env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "BERT_MGPU_TEST_WORKERS": workers,
         "BERT_MGPU_VENV_DIR": str(tmp_path / "venvs")}
  result = subprocess.run([BASH, "scripts/test.sh", "tf2"], cwd=REPO_DIR, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=30)
  assert result.returncode == 1 and result.stdout == ""
  assert result.stderr == ("error: BERT_MGPU_TEST_WORKERS=%s is not a count of workers; give 1 "
                           "or more\n" % workers)
  assert not (tmp_path / "venvs").exists()


def collecting_test_venv(tmp_path):
  """A virtualenv dir that setup_env.sh takes as installed (its stamps hold what the
  requirements ask for), whose python is this one with `--collect-only` added to pytest
  calls: test.sh's pytest then lists what it would run instead of running it."""
  def text(name):
    with open(os.path.join(REPO_DIR, name), encoding="utf-8") as f:
      return f.read().rstrip("\n")  # as the shell's $(cat ...) gives it
  venv = tmp_path / "venvs" / ".venv-tf2"
  (venv / "bin").mkdir(parents=True, exist_ok=True)
  wanted = "%s %s" % (text("requirements.txt"), text("constraints-tf2.txt"))
  (venv / ".installed").write_text(wanted)
  (venv / ".installed-tests").write_text("%s %s" % (wanted, text("requirements-test.txt")))
  python = venv / "bin" / "python"
  python.write_text(u'#!/bin/sh\nif [ "$1" = -m ]; then exec "%s" "$@" --collect-only; fi\n'
                    u'exec "%s" "$@"\n' % (sys.executable, sys.executable))
  python.chmod(0o755)


def ids_test_sh_would_run(tmp_path, *args):
  """The test ids `scripts/test.sh tf2 ARGS` would run (one worker, so the ids are printed)."""
  if python_for_tf2() is None:
    pytest.skip("no Python 3.11-3.13 here for setup_env.sh --check tf2 to find")
  collecting_test_venv(tmp_path)
  # BERT_MGPU_NEWEST=0: the stamps written above are those of the pinned versions.
  # PIP_NO_INDEX: should setup_env.sh not take the stand-in, its install fails at once
  # instead of fetching packages.
  env = dict(os.environ, BERT_MGPU_TEST_WORKERS="1", BERT_MGPU_NEWEST="0", PIP_NO_INDEX="1",
             BERT_MGPU_VENV_DIR=str(tmp_path / "venvs"))
  result = subprocess.run([BASH, "scripts/test.sh", "tf2"] + list(args), cwd=REPO_DIR, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=300)
  assert "setting up" not in result.stderr, (
      "setup_env.sh did not take the stand-in virtualenv (have its stamps changed?): "
      + result.stderr[-2000:])
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
  return [line for line in result.stdout.splitlines() if "::" in line]


def test_test_sh_runs_only_the_test_paths_given(tmp_path):
  """`scripts/test.sh tf2 <path>` runs that path alone (it appended `tests`, so ran all)."""
  this_file = "tests/packaging/test_setup_scripts.py"
  ids = ids_test_sh_would_run(tmp_path, this_file)
  assert ids and all(i.startswith(this_file + "::") for i in ids), ids
  one = this_file + "::test_setup_env_refuses_a_python_of_the_wrong_version"
  assert ids_test_sh_would_run(tmp_path, one, "-x") == [one]


def test_test_sh_without_a_test_path_runs_the_whole_suite(tmp_path):
  ids = ids_test_sh_would_run(tmp_path)
  folders = {i.split("/")[1] for i in ids}
  assert {"packaging", "tools", "commands"} <= folders, folders
  assert len(ids) > 1000
