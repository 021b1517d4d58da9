"""Puts the repo's modules (modeling, multigpu, ...) and the test helpers (numpy_bert,
reference_tokenizer) on the import path, wherever pytest is started from."""

import os
import sys

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(TESTS_DIR)
for path in (REPO_DIR, TESTS_DIR):
  if path not in sys.path:
    sys.path.insert(0, path)
