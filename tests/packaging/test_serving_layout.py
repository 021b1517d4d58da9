# coding=utf-8
"""Serving knows no task: bert_mgpu/serving/ and predict_text.py import no task unit, branch
on no kind name and name no kind's own flag (serving/kinds.py is their way to a kind), and
each task unit that serves brings its kind in a serving.py that imports without
TensorFlow."""

import ast
import os
import subprocess
import sys

import pytest

from cli import REPO_DIR

PACKAGE_DIR = os.path.join(REPO_DIR, "bert_mgpu")
IMPORT_TIMEOUT_SECONDS = 120


def task_units():
  """The package folders holding a task.py: the task units."""
  return sorted(name for name in os.listdir(PACKAGE_DIR)
                if os.path.isfile(os.path.join(PACKAGE_DIR, name, "task.py")))


def serving_sources():
  """Paths of bert_mgpu/serving/*.py and predict_text.py."""
  folder = os.path.join(PACKAGE_DIR, "serving")
  return sorted(os.path.join(folder, name) for name in os.listdir(folder)
                if name.endswith(".py")) + [os.path.join(REPO_DIR, "predict_text.py")]


def parse(path):
  with open(path, encoding="utf-8") as f:
    return ast.parse(f.read(), path)


def imported_modules(tree):
  """Every module an import statement names (`from a import b` gives a and a.b)."""
  names = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names.extend(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module:
      names.append(node.module)
      names.extend("%s.%s" % (node.module, alias.name) for alias in node.names)
  return names


def string_value(node):
  """The text of a string literal node (ast.Str on Python 3.7, ast.Constant later), else
  None."""
  if type(node).__name__ == "Str":
    return node.s
  value = getattr(node, "value", None) if type(node).__name__ == "Constant" else None
  return value if isinstance(value, str) else None


def docstring_nodes(tree):
  """The string constants that are docstrings (of the module, classes and functions)."""
  nodes = set()
  for node in ast.walk(tree):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      if (node.body and isinstance(node.body[0], ast.Expr) and
          string_value(node.body[0].value) is not None):
        nodes.add(id(node.body[0].value))
  return nodes


def kind_names():
  sys.path.insert(0, REPO_DIR)
  from bert_mgpu import task_units as units  # pylint: disable=import-outside-toplevel
  return sorted(units.SERVABLE_KIND_MODULES)


def kind_mentions(tree, names):
  """(line, what) of each place code names a kind: a string constant equal to a kind name,
  or an identifier with a kind's or a task unit's name as one of its words."""
  words = set(names) | set(task_units())
  docstrings = docstring_nodes(tree)
  found = []
  for node in ast.walk(tree):
    if id(node) not in docstrings and string_value(node) in names:
      found.append((node.lineno, repr(string_value(node))))
    identifier = (node.id if isinstance(node, ast.Name) else
                  node.attr if isinstance(node, ast.Attribute) else
                  node.name if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else None)
    if identifier and words & set(identifier.lower().split("_")):
      found.append((node.lineno, identifier))
  return found


@pytest.mark.parametrize("path", serving_sources(), ids=os.path.basename)
def test_serving_imports_no_task_unit(path):
  units = ["bert_mgpu." + unit for unit in task_units()]
  wrong = [name for name in imported_modules(parse(path))
           if any(name == unit or name.startswith(unit + ".") for unit in units)]
  assert not wrong, "%s imports %s: reach a kind through bert_mgpu/serving/kinds.py" % (
      os.path.relpath(path, REPO_DIR), wrong)


@pytest.mark.parametrize("path", serving_sources(), ids=os.path.basename)
def test_serving_branches_on_no_kind_name(path):
  mentions = kind_mentions(parse(path), kind_names())
  assert not mentions, "%s names a kind in its code (line, name): %s; ask the kind instead " \
      "(serving/kinds.ServableKind)" % (os.path.relpath(path, REPO_DIR), mentions)


def test_the_kind_check_finds_a_kind_name_in_code_but_not_in_docstrings():
  tree = ast.parse('"""A classifier or an ner model."""\n'
                   'def f(settings):\n'
                   '  """ner"""\n'
                   '  return settings["model"] == "ner" or is_classifier(settings)\n')
  assert kind_mentions(tree, ["classifier", "ner"]) == [(4, "'ner'"), (4, "is_classifier")]


def kind_flag_names():
  if REPO_DIR not in sys.path:
    sys.path.insert(0, REPO_DIR)
  from bert_mgpu.serving import kinds  # pylint: disable=import-outside-toplevel
  return sorted(kinds.all_flags())


def flag_mentions(tree, flag_names):
  """(line, text) of each place code names a flag of `flag_names`: a string constant
  outside docstrings ("name", or "--name..." within it), an identifier, an attribute
  (FLAGS.name, limits.name) or a keyword argument (name=...)."""
  docstrings = docstring_nodes(tree)
  found = []
  for node in ast.walk(tree):
    text = string_value(node)
    if text is not None and id(node) not in docstrings:
      if any(text == name or "--" + name in text for name in flag_names):
        found.append((node.lineno, text))
    identifier = (node.id if isinstance(node, ast.Name) else
                  node.attr if isinstance(node, ast.Attribute) else
                  node.arg if isinstance(node, ast.keyword) else None)
    if identifier in flag_names:
      found.append((getattr(node, "lineno", None) or getattr(node.value, "lineno"),
                    identifier))
  return found


@pytest.mark.parametrize("path", serving_sources(), ids=os.path.basename)
def test_serving_names_no_kinds_flag(path):
  mentions = flag_mentions(parse(path), kind_flag_names())
  assert not mentions, "%s names a kind's own flag (line, text): %s; declare it in the " \
      "kind (ServableKind.flags)" % (os.path.relpath(path, REPO_DIR), mentions)


def test_the_flag_check_finds_a_kinds_flag_in_code_but_not_in_docstrings():
  assert "max_context_chars" in kind_flag_names()  # the reading-comprehension kind's
  tree = ast.parse('"""--max_context_chars: the longest context."""\n'
                   'LIMIT = "max_context_chars"\n'
                   'def f(limits):\n'
                   '  raise ValueError("raise --max_context_chars=%d" % 3)\n'
                   'x = dict(max_context_chars=FLAGS.max_context_chars)\n')
  assert sorted(flag_mentions(tree, kind_flag_names())) == [
      (2, "max_context_chars"), (4, "raise --max_context_chars=%d"),
      (5, "max_context_chars"), (5, "max_context_chars")]


@pytest.mark.parametrize("kind", kind_names())
def test_each_kind_comes_from_its_units_serving_py_without_tensorflow(kind):
  """The registry's module of each kind is <unit>/serving.py, and importing it with
  TensorFlow unavailable registers the kind."""
  sys.path.insert(0, REPO_DIR)
  from bert_mgpu import task_units as units  # pylint: disable=import-outside-toplevel
  module = units.SERVABLE_KIND_MODULES[kind]
  package, unit, name = module.split(".")
  assert (package, name) == ("bert_mgpu", "serving") and unit in task_units(), module
  check = ("import sys\n"
           "sys.modules['tensorflow'] = None\n"
           "from bert_mgpu.serving import kinds\n"
           "kind = kinds.get(sys.argv[1])\n"
           "assert kind is not None and kind.name == sys.argv[1], kind\n"
           "assert type(kind).__module__ == sys.argv[2], type(kind).__module__\n")
  result = subprocess.run([sys.executable, "-c", check, kind, module], cwd=REPO_DIR,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8",
                          errors="replace", timeout=IMPORT_TIMEOUT_SECONDS)
  assert result.returncode == 0, result.stderr[-2000:]
