# coding=utf-8
"""The layout and the installable package: the top level holds the design card's modules and
the commands, everything else is the bert_mgpu package; an installed copy holds nothing else
and imports from anywhere; light parts import without TensorFlow; files and functions stay
short enough to read in one sitting; tests share code through tests/helpers/ only."""

import ast
import importlib
import inspect
import os
import pkgutil
import re
import shutil
import subprocess
import sys

import pytest

from cli import REPO_DIR

# Google's design card (modeling, optimization, tokenization; run_classifier, run_squad,
# run_pretraining, create_pretraining_data) with multigpu, and our other commands.
DESIGN_CARD = ("modeling", "optimization", "tokenization", "multigpu")
COMMANDS = ("run_classifier_mgpu", "run_squad_mgpu", "run_pretraining_mgpu", "run_ner_mgpu",
            "run_embedding_mgpu",
            "create_pretraining_data", "predict_text", "extract_features", "fill_mask",
            "convert_checkpoint")
PACKAGE = "bert_mgpu"

# The size limits of issue #30, in lines.
FILE_LIMIT = 700
FILE_LIMITS = {"multigpu.py": 900, "tokenization.py": 900, "optimization.py": 900}
FUNCTION_LIMIT = 100
TRAIN_LIMIT = 80
# Google's modeling.py keeps its own shape, long functions included.
EXEMPT = ("modeling.py",)


def top_level_modules(directory):
  return sorted(os.path.splitext(name)[0] for name in os.listdir(directory)
                if name.endswith(".py"))


def packaged_modules():
  """The py-modules list of pyproject.toml (read by hand: Python 3.7 has no tomllib)."""
  with open(os.path.join(REPO_DIR, "pyproject.toml"), encoding="utf-8") as f:
    text = f.read()
  listing = re.search(r"^py-modules\s*=\s*\[(.*?)\]", text, re.S | re.M).group(1)
  listing = re.sub(r"#[^\n]*", "", listing)
  return sorted(re.findall(r'"([^"]+)"', listing))


def source_files():
  """Repo-relative paths of every .py file outside tests/ that git tracks or would track."""
  paths = []
  for root, dirs, files in os.walk(REPO_DIR):
    dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("tests", "build",
                                                                         "__pycache__")]
    paths.extend(os.path.relpath(os.path.join(root, name), REPO_DIR)
                 for name in files if name.endswith(".py"))
  return sorted(paths)


# The other files the top level holds: the project's own, nothing else.
PROJECT_FILES = ("README.md", "pyproject.toml", "requirements.txt", "requirements-tf1.txt",
                 "requirements-test.txt", "constraints-tf2.txt", "constraints-tf1.txt")


def test_the_top_level_holds_the_design_card_and_the_commands():
  assert top_level_modules(REPO_DIR) == sorted(DESIGN_CARD + COMMANDS)
  assert packaged_modules() == sorted(DESIGN_CARD + COMMANDS)
  others = sorted(name for name in os.listdir(REPO_DIR)
                  if os.path.isfile(os.path.join(REPO_DIR, name)) and not name.startswith(".")
                  and not name.endswith(".py"))
  assert set(others) <= set(PROJECT_FILES), "not a top-level file: %s" % (
      sorted(set(others) - set(PROJECT_FILES)))


def test_every_folder_of_the_package_is_a_package():
  for root, dirs, files in os.walk(os.path.join(REPO_DIR, PACKAGE)):
    dirs[:] = [d for d in dirs if d != "__pycache__"]
    if any(name.endswith(".py") for name in files):
      assert "__init__.py" in files, "%s has no __init__.py" % root


def copy_package_source(destination):
  """Copies what the package is built from, skipping build/ and caches (an ignored
  build/lib may hold old flat modules that an install would pick up)."""
  os.makedirs(destination)
  for name in ["pyproject.toml", "README.md"] + [m + ".py" for m in top_level_modules(REPO_DIR)]:
    shutil.copy(os.path.join(REPO_DIR, name), os.path.join(destination, name))
  shutil.copytree(os.path.join(REPO_DIR, PACKAGE), os.path.join(destination, PACKAGE),
                  ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def test_an_installed_copy_holds_only_the_package_and_imports_from_anywhere(tmp_path):
  source, target = str(tmp_path / "source"), str(tmp_path / "site")
  copy_package_source(source)
  # Offline: the build backend comes from this environment (requirements-test.txt).
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                  "--no-build-isolation", "--no-index", "--target", target, source],
                 check=True, timeout=300, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
  installed = sorted(name for name in os.listdir(target)
                     if not name.endswith(".dist-info") and name != "__pycache__")
  assert installed == sorted([PACKAGE] + [m + ".py" for m in DESIGN_CARD + COMMANDS])
  installed_package = sorted(
      os.path.relpath(os.path.join(root, name), target)
      for root, _, files in os.walk(os.path.join(target, PACKAGE))
      for name in files if name.endswith(".py"))
  assert installed_package == sorted(p for p in source_files() if p.startswith(PACKAGE + os.sep))
  # Every command, from a directory that holds no source: each module it loads from the
  # repo's names must come from the installed copy.
  code = ("import sys\n"
          "for name in %r:\n"
          "  __import__(name)\n"
          "ours = [m for name, m in list(sys.modules.items())\n"
          "        if name.split('.')[0] in %r and getattr(m, '__file__', None)]\n"
          "outside = [m.__file__ for m in ours if not m.__file__.startswith(%r)]\n"
          "assert not outside, outside\n"
          "print('imported', len(ours))\n" % (
              COMMANDS, (PACKAGE,) + DESIGN_CARD + COMMANDS, target))
  env = dict(os.environ, PYTHONPATH=target)
  result = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
  assert result.returncode == 0, result.stderr.decode("utf-8", "replace")[-2000:]
  assert result.stdout.split()[0] == b"imported"


def imported_after(statement):
  """The top-level names of sys.modules after `statement`, in a fresh interpreter."""
  code = "import sys\n%s\nprint(' '.join(sorted(set(m.split('.')[0] for m in sys.modules))))\n"
  result = subprocess.run([sys.executable, "-c", code % statement], cwd=REPO_DIR,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
  assert result.returncode == 0, result.stderr.decode("utf-8", "replace")[-2000:]
  return set(result.stdout.decode().split())


def test_the_package_imports_without_tensorflow_or_numpy():
  loaded = imported_after("import bert_mgpu, bert_mgpu.errors, bert_mgpu.progress, "
                          "bert_mgpu.data.output_files, bert_mgpu.data.processes")
  assert "bert_mgpu" in loaded
  assert not loaded & {"tensorflow", "numpy"}


def test_data_modules_import_without_the_training_stack():
  code = ("import sys\n"
          "from bert_mgpu.classifier import long_text\n"
          "from bert_mgpu.ner import scoring\n"
          "from bert_mgpu.squad import data\n"
          "from bert_mgpu.embedding import data, metrics\n"
          "from bert_mgpu.data import text_files, tfrecord_io\n"
          "import create_pretraining_data\n"
          "import bert_mgpu.classifier, bert_mgpu.ner\n"
          "for package in (bert_mgpu.classifier, bert_mgpu.ner):\n"
          "  for name in __import__('pkgutil').iter_modules(package.__path__):\n"
          "    if name.name not in ('model', 'global_pointer', 'serving_graph', 'crf', 'task', "
          "'heads'):\n"
          "      __import__(package.__name__ + '.' + name.name)\n"
          "print(sorted(m for m in ('multigpu', 'bert_mgpu.distributed.cluster', "
          "'bert_mgpu.training.runner', 'bert_mgpu.distributed.peers', "
          "'bert_mgpu.training.run_settings', 'bert_mgpu.command_line') if m in sys.modules))\n")
  result = subprocess.run([sys.executable, "-c", code], cwd=REPO_DIR, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=300)
  assert result.returncode == 0, result.stderr.decode("utf-8", "replace")[-2000:]
  assert result.stdout.decode().strip().splitlines()[-1] == "[]"


def function_lengths(path):
  """(lines from `def` to its last line, name) of every function in a file."""
  with open(os.path.join(REPO_DIR, path), encoding="utf-8") as f:
    tree = ast.parse(f.read())
  rows = []
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      # Python 3.7's ast has no end_lineno: the last line that starts a node stands in.
      last = getattr(node, "end_lineno", None) or max(
          getattr(n, "lineno", node.lineno) for n in ast.walk(node))
      rows.append((last - node.lineno + 1, node.name))
  return rows


def test_files_read_in_one_sitting():
  too_long = []
  for path in source_files():
    if path in EXEMPT:
      continue
    with open(os.path.join(REPO_DIR, path), encoding="utf-8") as f:
      lines = sum(1 for _ in f)
    if lines > FILE_LIMITS.get(path, FILE_LIMIT):
      too_long.append("%s (%d lines)" % (path, lines))
  assert not too_long, "split these: " + ", ".join(too_long)


@pytest.mark.parametrize("limit,which", [(FUNCTION_LIMIT, None), (TRAIN_LIMIT, "train")])
def test_functions_read_in_one_sitting(limit, which):
  too_long = ["%s:%s (%d lines)" % (path, name, length)
              for path in source_files() if path not in EXEMPT
              for length, name in function_lengths(path)
              if length > limit and which in (None, name)]
  assert not too_long, "split these: " + ", ".join(sorted(too_long))


def test_the_limits_see_the_package_and_the_scripts():
  """The walk above reaches every area, so that a long file anywhere fails it."""
  paths = source_files()
  for expected in ("modeling.py", "run_classifier_mgpu.py", "bert_mgpu/training/runner.py",
                   "scripts/benchmark.py", "benchmarks/hf_finetune.py"):
    assert expected.replace("/", os.sep) in paths


# Committed test data (models, inputs, golden outputs): only in these folders, and small.
TEST_DATA_DIRS = (os.path.join("tests", "serving", "golden"),)
TEST_DATA_LIMIT = 1000 * 1000  # bytes, all folders together


def test_test_data_stays_in_its_folders_and_small():
  """tests/ holds Python files; anything else lives in TEST_DATA_DIRS, within the limit, so
  that no stray output of a test run and no large model gets committed by mistake."""
  stray, total = [], 0
  for root, dirs, files in os.walk(os.path.join(REPO_DIR, "tests")):
    dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
    for name in files:
      path = os.path.relpath(os.path.join(root, name), REPO_DIR)
      if any(path.startswith(folder + os.sep) for folder in TEST_DATA_DIRS):
        total += os.path.getsize(os.path.join(REPO_DIR, path))
      elif not name.endswith(".py"):
        stray.append(path)
  assert not stray, "test data outside %s: %s" % (", ".join(TEST_DATA_DIRS), ", ".join(stray))
  assert 0 < total <= TEST_DATA_LIMIT, "%d bytes of test data (at most %d)" % (
      total, TEST_DATA_LIMIT)


def test_no_test_file_imports_another():
  """Shared code lives in tests/helpers/ and shared fixtures in tests/conftest.py. A test
  file is importable only once pytest has put its own folder on sys.path, so an import of
  one by another would depend on which files were collected first."""
  tests_dir = os.path.join(REPO_DIR, "tests")
  importing = []
  for root, dirs, files in os.walk(tests_dir):
    dirs[:] = [d for d in dirs if d != "__pycache__"]
    for name in files:
      if not name.endswith(".py"):
        continue
      path = os.path.join(root, name)
      with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
      for node in ast.walk(tree):
        if isinstance(node, ast.Import):
          modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
          modules = [node.module or ""]
        else:
          continue
        importing.extend("%s:%d imports %s" % (os.path.relpath(path, REPO_DIR), node.lineno, m)
                         for m in modules if m.split(".")[0].startswith("test_"))
  assert not importing, "move what they import to tests/helpers/: " + ", ".join(importing)


# ---------------------------------------------------------------------------
# One unit per task: tools never import a run script, flags stay at the edge
# ---------------------------------------------------------------------------

RUN_SCRIPTS = tuple(name for name in COMMANDS if name.startswith("run_"))
# Where flag values may be read: the commands and the one command-line module.
FLAG_READERS = tuple(name + ".py" for name in COMMANDS) + (
    os.path.join(PACKAGE, "command_line.py"), os.path.join(PACKAGE, "command_line_base.py"))


def imported_modules(tree):
  """The top-level names of the modules a parsed file imports."""
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names.update(alias.name.split(".")[0] for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      names.add(node.module.split(".")[0])
  return names


def parse(path):
  with open(os.path.join(REPO_DIR, path), encoding="utf-8") as f:
    return ast.parse(f.read(), path)


def run_script_imports(path):
  """The run scripts a file imports other than itself."""
  own = os.path.splitext(os.path.basename(path))[0]
  return sorted(imported_modules(parse(path)) & (set(RUN_SCRIPTS) - {own}))


def flag_reads(path):
  """Lines where a file names FLAGS (tf.flags.FLAGS included)."""
  lines = []
  for node in ast.walk(parse(path)):
    if isinstance(node, ast.Name) and node.id == "FLAGS":
      lines.append(node.lineno)
    elif isinstance(node, ast.Attribute) and node.attr == "FLAGS":  # tf.flags.FLAGS
      lines.append(node.lineno)
  return sorted(set(lines))


def flags_passed_into_calls(path):
  """Lines where FLAGS itself is an argument of a call (reading one value with getattr is
  not passing the flags on)."""
  lines = []
  for node in ast.walk(parse(path)):
    if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and
                                           node.func.id in ("getattr", "hasattr")):
      arguments = list(node.args) + [keyword.value for keyword in node.keywords]
      if any(isinstance(a, ast.Name) and a.id == "FLAGS" for a in arguments):
        lines.append(node.lineno)
  return lines


def test_no_module_imports_another_run_script():
  offenders = ["%s imports %s" % (path, ", ".join(run_script_imports(path)))
               for path in source_files() if run_script_imports(path)]
  assert not offenders, "take it from the task unit in bert_mgpu/: " + "; ".join(offenders)


def test_flags_are_read_only_in_the_commands_and_the_command_line_module():
  offenders = ["%s line %s" % (path, flag_reads(path)[0]) for path in source_files()
               if path not in FLAG_READERS and flag_reads(path)]
  assert not offenders, "read the flags in the command: " + ", ".join(offenders)
  passed = ["%s line %s" % (path, flags_passed_into_calls(path)[0]) for path in source_files()
            if flags_passed_into_calls(path)]
  assert not passed, "pass values or a settings object, not the flags: " + ", ".join(passed)


def test_the_scans_see_what_they_look_for(tmp_path, monkeypatch):
  """Each scan finds its offence in a file written to break it."""
  (tmp_path / "bert_mgpu").mkdir()
  (tmp_path / "bert_mgpu" / "tool.py").write_text(
      u"import run_squad_mgpu\nfrom absl import flags\nFLAGS = flags.FLAGS\n"
      u"def f():\n  return helper(FLAGS)\n", encoding="utf-8")
  (tmp_path / "run_squad_mgpu.py").write_text(u"import run_squad_mgpu\n", encoding="utf-8")
  monkeypatch.setattr(__import__(__name__), "REPO_DIR", str(tmp_path))
  tool = os.path.join("bert_mgpu", "tool.py")
  assert run_script_imports(tool) == ["run_squad_mgpu"]
  assert run_script_imports("run_squad_mgpu.py") == []  # a script may import itself
  assert flag_reads(tool) == [3, 5]
  assert flags_passed_into_calls(tool) == [5]


# ---------------------------------------------------------------------------
# Training imports no serving module at load time: serving sits above training
# ---------------------------------------------------------------------------

TRAINING_DIR = os.path.join(PACKAGE, "training")
SERVING = PACKAGE + ".serving"


def module_level_imports(tree, module):
  """(line, dotted name) of each module a parsed file imports when it is loaded: imports in
  a function body run only when it is called and are left out.

  Args:
    tree: the parsed file.
    module: its dotted name, against which relative imports are resolved.
  """
  found, pending = [], list(ast.iter_child_nodes(tree))
  while pending:
    node = pending.pop()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
      continue
    pending.extend(ast.iter_child_nodes(node))
    if isinstance(node, ast.Import):
      found.extend((node.lineno, alias.name) for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:  # from . import x, from ..serving import y
        parent = module.split(".")[:-node.level]
        base = ".".join(parent + ([base] if base else []))
      # `from bert_mgpu import serving` imports the package: each name may be a module.
      found.extend((node.lineno, base + "." + alias.name) for alias in node.names)
  return sorted(found)


def serving_imports(path):
  """'path line n imports name' for each bert_mgpu.serving module a file imports at load."""
  module = os.path.splitext(path)[0].replace(os.sep, ".")
  return ["%s line %d imports %s" % (path, line, name)
          for line, name in module_level_imports(parse(path), module)
          if name == SERVING or name.startswith(SERVING + ".")]


def training_files():
  return [path for path in source_files() if path.startswith(TRAINING_DIR + os.sep)]


def test_training_imports_no_serving_module_at_load_time():
  paths = training_files()
  assert os.path.join(TRAINING_DIR, "job.py") in paths  # the scan sees the package
  offenders = [line for path in paths for line in serving_imports(path)]
  assert not offenders, ("import it inside the function that uses it (training runs need "
                         "no serving module): " + "; ".join(offenders))


def test_the_serving_import_scan_sees_each_form(tmp_path, monkeypatch):
  (tmp_path / "bert_mgpu" / "training").mkdir(parents=True)
  (tmp_path / "bert_mgpu" / "training" / "tool.py").write_text(
      u"import bert_mgpu.serving.export\nfrom bert_mgpu.serving import predictor\n"
      u"from bert_mgpu import data, serving\nfrom ..serving.kinds import get\n"
      u"from bert_mgpu import servings\nimport bert_mgpu.training.job\n"
      u"try:\n  import bert_mgpu.serving as s\nexcept ImportError:\n  pass\n"
      u"def f():\n  from bert_mgpu.serving import export\n", encoding="utf-8")
  monkeypatch.setattr(__import__(__name__), "REPO_DIR", str(tmp_path))
  tool = os.path.join("bert_mgpu", "training", "tool.py")
  assert training_files() == [tool]
  assert [line.split(" line ")[1] for line in serving_imports(tool)] == [
      "1 imports bert_mgpu.serving.export", "2 imports bert_mgpu.serving.predictor",
      "3 imports bert_mgpu.serving", "4 imports bert_mgpu.serving.kinds.get",
      "8 imports bert_mgpu.serving"]


# ---------------------------------------------------------------------------
# Task units of one shape: every job.Task is built as Unit(job_settings, settings)
# ---------------------------------------------------------------------------

TASK_CONSTRUCTOR = ["self", "job_settings", "settings"]
# The units there are today: the scan must find at least these.
TASK_UNITS = ("ClassifierTask", "NerTask", "PretrainingTask", "SquadTask")


def package_task_classes():
  """Every job.Task subclass defined in the package, its modules all imported first (a new
  unit is found wherever it lives)."""
  package = importlib.import_module(PACKAGE)
  for info in pkgutil.walk_packages(package.__path__, PACKAGE + "."):
    importlib.import_module(info.name)
  from bert_mgpu.training import job  # pylint: disable=import-outside-toplevel
  found, pending = [], list(job.Task.__subclasses__())
  while pending:
    cls = pending.pop()
    pending.extend(cls.__subclasses__())
    if cls.__module__.startswith(PACKAGE + "."):
      found.append(cls)
  return found


def constructor_offenders(classes):
  """'module.Class(parameters)' of the classes whose __init__ is not TASK_CONSTRUCTOR's."""
  offenders = []
  for cls in classes:
    parameters = list(inspect.signature(cls.__init__).parameters)
    if parameters != TASK_CONSTRUCTOR:
      offenders.append("%s.%s(%s)" % (cls.__module__, cls.__name__, ", ".join(parameters)))
  return sorted(offenders)


def test_every_task_unit_is_constructed_from_job_settings_and_settings():
  classes = package_task_classes()
  assert set(TASK_UNITS) <= set(cls.__name__ for cls in classes)
  offenders = constructor_offenders(classes)
  assert not offenders, ("construct every task as (job_settings, settings), the unit's files "
                         "and options in its settings: " + ", ".join(offenders))


def test_the_constructor_scan_sees_another_signature():
  from bert_mgpu.training import job  # pylint: disable=import-outside-toplevel

  class WithItsConfig(job.Task):
    def __init__(self, job_settings, settings, bert_config):
      super(WithItsConfig, self).__init__(job_settings, settings)
      self.bert_config = bert_config

  class Inherited(job.Task):
    pass

  assert constructor_offenders([WithItsConfig, Inherited]) == [
      __name__ + ".WithItsConfig(self, job_settings, settings, bert_config)"]
