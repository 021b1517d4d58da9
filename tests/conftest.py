"""Puts the repo's modules (modeling, multigpu, ...) and the test helpers of tests/helpers/
(cli, numpy_bert, reference_tokenizer, ...) on the import path, wherever pytest is started
from; keeps the session's temporary files under pytest's own temp directory; and holds the
fixtures that tests in several files use (demo_data)."""

import os
import sys
import tempfile

import pytest

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(TESTS_DIR)
HELPERS_DIR = os.path.join(TESTS_DIR, "helpers")
for path in (REPO_DIR, HELPERS_DIR):
  if path not in sys.path:
    sys.path.insert(0, path)

import classifier_runs  # pylint: disable=g-import-not-at-top,wrong-import-position


@pytest.fixture(scope="session", autouse=True)
def session_temp_dir(tmp_path_factory):
  """The temp dir of the tests and of every script they start (TMPDIR is inherited):
  a non-chief worker's feature cache (run_settings: bert-mgpu-worker<N>-<key>) and
  autograph's generated files then land under pytest's base temp dir, which pytest prunes
  (it keeps the last 3 sessions), instead of piling up in /tmp run after run."""
  path = str(tmp_path_factory.mktemp("tempdir"))
  saved_env, saved_tempdir = os.environ.get("TMPDIR"), tempfile.tempdir
  os.environ["TMPDIR"], tempfile.tempdir = path, path
  yield path
  tempfile.tempdir = saved_tempdir
  if saved_env is None:
    del os.environ["TMPDIR"]
  else:
    os.environ["TMPDIR"] = saved_env


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory):
  """The demo data cut to a few dozen examples, with a tiny config (a DemoData of
  helpers/classifier_runs.py); made once per test module."""
  return classifier_runs.make_demo_data(str(tmp_path_factory.mktemp("demo_data")))
