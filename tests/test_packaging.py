# coding=utf-8
"""The installable package and the module layout: every top-level module is packaged, an
installed copy imports from anywhere, the data modules do not load the training stack,
and no function grows past what reads in one sitting."""

import ast
import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What a run script imports: every module a user may run or import.
RUN_SCRIPTS = ("run_classifier_mgpu", "run_squad_mgpu", "run_pretraining_mgpu", "run_ner_mgpu",
               "create_pretraining_data", "predict_text", "extract_features", "fill_mask")


def top_level_modules():
  return sorted(os.path.splitext(os.path.basename(p))[0]
                for p in glob.glob(os.path.join(REPO, "*.py")))


def packaged_modules():
  """The py-modules list of pyproject.toml (read by hand: Python 3.7 has no tomllib)."""
  with open(os.path.join(REPO, "pyproject.toml"), encoding="utf-8") as f:
    text = f.read()
  listing = re.search(r"^py-modules\s*=\s*\[(.*?)\]", text, re.S | re.M).group(1)
  listing = re.sub(r"#[^\n]*", "", listing)
  return sorted(re.findall(r'"([^"]+)"', listing))


def test_every_top_level_module_is_packaged():
  missing = sorted(set(top_level_modules()) - set(packaged_modules()))
  assert not missing, "add to py-modules in pyproject.toml: %s" % ", ".join(missing)
  assert not set(packaged_modules()) - set(top_level_modules())


def test_an_installed_copy_imports_every_script_from_another_directory(tmp_path):
  # A copy of what the package is built from, so the build writes nothing into the repo.
  source = tmp_path / "source"
  source.mkdir()
  modules = [name for name in os.listdir(REPO) if name.endswith(".py")]
  for name in ["pyproject.toml", "README.md"] + modules:
    shutil.copy(os.path.join(REPO, name), str(source / name))
  target = tmp_path / "site"
  # Offline: the build backend comes from this environment (requirements-test.txt).
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                  "--no-build-isolation", "--no-index", "--target", str(target), str(source)],
                 check=True, timeout=300, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
  installed = sorted(os.path.splitext(p)[0] for p in os.listdir(str(target))
                     if p.endswith(".py"))
  assert installed == top_level_modules()
  code = ("import sys\n"
          "for name in %r:\n"
          "  module = __import__(name)\n"
          "  assert module.__file__.startswith(%r), module.__file__\n"
          "print('imported')\n" % (RUN_SCRIPTS, str(target)))
  env = dict(os.environ, PYTHONPATH=str(target))
  result = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
  assert result.returncode == 0, result.stderr.decode("utf-8", "replace")[-2000:]
  assert b"imported" in result.stdout


def test_data_modules_import_without_the_training_stack():
  code = ("import sys\n"
          "import classifier_data, squad_data, text_files, tfrecord_io, "
          "create_pretraining_data, errors, output_files, processes, ner_data, ner_scoring, "
          "long_text\n"
          "print(sorted(m for m in ('multigpu', 'cluster', 'runner', 'peers', 'run_settings', "
          "'command_line') if m in sys.modules))\n")
  result = subprocess.run([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=300)
  assert result.returncode == 0, result.stderr.decode("utf-8", "replace")[-2000:]
  assert result.stdout.decode().strip().splitlines()[-1] == "[]"


def test_errors_and_output_files_import_without_tensorflow():
  code = ("import sys\nimport errors, output_files, processes\n"
          "print('tensorflow' in sys.modules)\n")
  result = subprocess.run([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=120)
  assert result.stdout.decode().strip() == "False", result.stderr.decode()[-2000:]


def function_lengths():
  """(lines from `def` to its last line, file, name) of every function in a top-level
  module."""
  rows = []
  for path in glob.glob(os.path.join(REPO, "*.py")):
    with open(path, encoding="utf-8") as f:
      tree = ast.parse(f.read())
    for node in ast.walk(tree):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        # Python 3.7's ast has no end_lineno: the last line that starts a node stands in.
        last = getattr(node, "end_lineno", None) or max(
            getattr(n, "lineno", node.lineno) for n in ast.walk(node))
        rows.append((last - node.lineno + 1, os.path.basename(path), node.name))
  return rows


@pytest.mark.parametrize("limit,which", [(100, "any"), (80, "train")])
def test_functions_read_in_one_sitting(limit, which):
  too_long = ["%s:%s (%d lines)" % (path, name, length)
              for length, path, name in function_lengths()
              if length > limit and path != "modeling.py" and which in ("any", name)]
  assert not too_long, "split these: " + ", ".join(sorted(too_long))
