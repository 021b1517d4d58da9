#!/usr/bin/env bash
# Creates (once) the virtualenv for one TensorFlow flavour and prints its python's path.
#   scripts/setup_env.sh tf2   Python 3.11 (or the newest 3.9+ found) + newest TensorFlow 2.x
#   scripts/setup_env.sh tf1   Python 3.7 + TensorFlow 1.15.5
# Virtualenvs live in $BERT_MGPU_VENV_DIR (default: the repo root, as .venv-tf2 / .venv-tf1).
# All install output goes to stderr so that stdout is only the python path.
set -euo pipefail
flavour=${1:-tf2}
repo=$(cd "$(dirname "$0")/.." && pwd)
venv_dir=${BERT_MGPU_VENV_DIR:-$repo}/.venv-$flavour

find_python() {
  local candidate
  for candidate in "$@"; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys' >/dev/null 2>&1; then
      command -v "$candidate"; return 0
    fi
    if [ -x "$HOME/.pyenv/versions/$candidate/bin/python" ]; then
      echo "$HOME/.pyenv/versions/$candidate/bin/python"; return 0
    fi
  done
  return 1
}

case "$flavour" in
  tf2) requirements=requirements.txt
       base_python=$(find_python python3.11 3.11.7 python3.12 python3.10 python3.9 python3) || {
         echo "error: no Python 3.9+ found for TensorFlow 2.x; install python3.11 (e.g. 'pyenv install 3.11')" >&2; exit 1; } ;;
  tf1) requirements=requirements-tf1.txt
       base_python=$(find_python python3.7 3.7.16) || {
         echo "error: TensorFlow 1.15 needs Python 3.7, which was not found; install it (e.g. 'pyenv install 3.7.16')" >&2; exit 1; } ;;
  *) echo "error: unknown flavour '$flavour': use tf2 or tf1" >&2; exit 2 ;;
esac

stamp="$venv_dir/.installed"
wanted=$(cat "$repo/$requirements" "$repo/requirements-test.txt")
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
  echo "setting up $venv_dir with $base_python and $requirements ..." >&2
  rm -rf "$venv_dir"
  "$base_python" -m venv "$venv_dir" >&2
  "$venv_dir/bin/python" -m pip install -q --upgrade pip >&2
  "$venv_dir/bin/python" -m pip install -q -r "$repo/$requirements" -r "$repo/requirements-test.txt" >&2
  printf '%s' "$wanted" > "$stamp"
fi
echo "$venv_dir/bin/python"
