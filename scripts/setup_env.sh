#!/usr/bin/env bash
# Creates (once) the virtualenv for one TensorFlow flavour and prints its python's path.
#   scripts/setup_env.sh tf2           Python 3.11 (else 3.12, 3.13) + TF 2.x
#   scripts/setup_env.sh tf1           Python 3.7 + TensorFlow 1.15.5
#   scripts/setup_env.sh --tests tf2   the same plus the test and ONNX packages
#                                      (requirements-test.txt), added to the same virtualenv
#   scripts/setup_env.sh --check tf1   only finds the base Python (one error line if there is
#                                      none) and prints it; installs nothing
# Versions: the exact ones CI ran (constraints-tf2.txt, constraints-tf1.txt); with
# BERT_MGPU_NEWEST=1, the newest releases the requirements allow.
# Virtualenvs live in $BERT_MGPU_VENV_DIR (default: the repo root, as .venv-tf2 / .venv-tf1).
# All install output goes to stderr so that stdout is only the python path.
set -euo pipefail
check_only=false
with_tests=false
flavour=tf2
for arg in "$@"; do
  case "$arg" in
    --check) check_only=true ;;
    --tests) with_tests=true ;;
    *) flavour=$arg ;;
  esac
done
repo=$(cd "$(dirname "$0")/.." && pwd)
venv_dir=${BERT_MGPU_VENV_DIR:-$repo}/.venv-$flavour

# find_python MIN MAX CANDIDATE...: the first candidate (a command, or a pyenv version under
# ~/.pyenv/versions) that runs and whose version is MIN to MAX (major.minor, inclusive).
find_python() {
  local low=$1 high=$2 candidate path
  shift 2
  for candidate in "$@"; do
    path=$(command -v "$candidate" 2>/dev/null) || path="$HOME/.pyenv/versions/$candidate/bin/python"
    if [ -x "$path" ] && "$path" -c "import sys; v = sys.version_info[:2]
sys.exit(0 if $low <= v <= $high else 1)" >/dev/null 2>&1; then
      echo "$path"; return 0
    fi
  done
  return 1
}

case "$flavour" in
  tf2) requirements=requirements.txt
       # The tested versions (numpy 2.4, keras 3.15, onnxruntime 1.32) need Python 3.11+.
       lowest="(3, 11)"; lowest_name=3.11
       if [ "${BERT_MGPU_NEWEST:-0}" = 1 ]; then lowest="(3, 9)"; lowest_name=3.9; fi
       base_python=$(find_python "$lowest" "(3, 13)" python3.11 3.11.7 python3.12 python3.13 python3.10 python3.9 python3) || {
         echo "error: TensorFlow 2.x needs Python $lowest_name to 3.13 (constraints-tf2.txt's versions; BERT_MGPU_NEWEST=1 takes 3.9+), and none was found; install python3.11 (e.g. 'pyenv install 3.11')" >&2; exit 1; } ;;
  tf1) requirements=requirements-tf1.txt
       base_python=$(find_python "(3, 7)" "(3, 7)" python3.7 3.7.16) || {
         echo "error: TensorFlow 1.15 needs Python 3.7, which was not found; install it (e.g. 'pyenv install 3.7.16')" >&2; exit 1; } ;;
  *) echo "error: unknown flavour '$flavour': use tf2 or tf1" >&2; exit 2 ;;
esac
if $check_only; then echo "$base_python"; exit 0; fi

pip_install() {
  "$venv_dir/bin/python" -m pip install -q ${constraints[@]+"${constraints[@]}"} "$@" >&2
}
constraints=(-c "$repo/constraints-$flavour.txt")
if [ "${BERT_MGPU_NEWEST:-0}" = 1 ]; then constraints=(); fi
# The runtime first; the tests' packages are added on top, so the demo's environment holds
# no test or ONNX package and the tests' never makes the demo rebuild it.
stamp="$venv_dir/.installed"
wanted="$(cat "$repo/$requirements") ${constraints[*]:+$(cat "$repo/constraints-$flavour.txt")}"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
  echo "setting up $venv_dir with $base_python and $requirements ..." >&2
  rm -rf "$venv_dir"
  "$base_python" -m venv "$venv_dir" >&2
  "$venv_dir/bin/python" -m pip install -q --upgrade pip >&2
  pip_install -r "$repo/$requirements"
  printf '%s' "$wanted" > "$stamp"
fi
tests_stamp="$venv_dir/.installed-tests"
wanted_tests="$wanted $(cat "$repo/requirements-test.txt")"
if $with_tests && { [ ! -f "$tests_stamp" ] || [ "$(cat "$tests_stamp")" != "$wanted_tests" ]; }; then
  echo "adding the test packages (requirements-test.txt) to $venv_dir ..." >&2
  pip_install -r "$repo/$requirements" -r "$repo/requirements-test.txt"
  printf '%s' "$wanted_tests" > "$tests_stamp"
fi
echo "$venv_dir/bin/python"
