#!/usr/bin/env bash
# README command 2: the whole test suite, under each TensorFlow flavour asked for.
#   bash scripts/test.sh          both: TF 2.x (Python 3.11) and TF 1.15 (Python 3.7)
#   bash scripts/test.sh tf2      one flavour; extra arguments go to pytest
#   bash scripts/test.sh tf2 tests/tools -k vocab   a path among them runs only that path
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
flavours=(tf2 tf1)
if [ $# -gt 0 ] && { [ "$1" = tf1 ] || [ "$1" = tf2 ]; }; then flavours=("$1"); shift; fi
if [ $# -gt 0 ] && [ "$1" = all ]; then shift; fi
# The test files run in parallel, one pytest worker a core (pytest-xdist, at most 4): all of a
# file's tests go to one worker, so a module's fixtures are built once. BERT_MGPU_TEST_WORKERS
# sets the count; 1 runs every test in one process, as pytest alone does.
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
workers=${BERT_MGPU_TEST_WORKERS:-$(( cores < 4 ? cores : 4 ))}
if ! [[ "$workers" =~ ^[1-9][0-9]*$ ]]; then
  echo "error: BERT_MGPU_TEST_WORKERS=$workers is not a count of workers; give 1 or more" >&2
  exit 1
fi
parallel=()
if [ "$workers" -gt 1 ]; then parallel=(-n "$workers" --dist loadfile); fi
# Every interpreter first, so that a missing Python 3.7 stops the run now, not after the TF 2.x suite.
for flavour in "${flavours[@]}"; do
  if ! missing=$(bash scripts/setup_env.sh --check "$flavour" 2>&1 >/dev/null); then
    hint=""
    if [ "${#flavours[@]}" -gt 1 ]; then hint="; or run only the TF 2.x tests: bash scripts/test.sh tf2"; fi
    echo "${missing}${hint}" >&2
    exit 1
  fi
done
status=0
for flavour in "${flavours[@]}"; do
  python=$(bash scripts/setup_env.sh --tests "$flavour")
  echo "=== tests under $flavour: $("$python" -c 'import sys, tensorflow as t; print("Python", sys.version.split()[0], "TensorFlow", t.__version__)' 2>/dev/null)"
  start=$(date +%s)
  # --durations: the slowest tests, to keep the CI under its time aim. With no test path in the
  # arguments pytest runs pyproject.toml's testpaths, the whole suite.
  TF_CPP_MIN_LOG_LEVEL=2 "$python" -m pytest -q -p no:cacheprovider --durations=25 \
    ${parallel[@]+"${parallel[@]}"} "$@" \
    || status=1
  echo "=== $flavour suite took $(( $(date +%s) - start )) s"
done
exit $status
