# coding=utf-8
"""Runs BERT on every GPU of a machine: the device plan, the tower builder and the
train/eval/predict loop that all run_*_mgpu.py scripts share.

This is the one module that knows about towers and devices.
"""

import os
import tempfile


class UsageError(Exception):
  """Bad input or flags: main() prints the message on one line and exits 1.

  The message names the file, line and value where there is one, and says what
  to do about it.
  """


def atomic_write_text(path, text):
  """Writes `text` (UTF-8) to `path` through a temp file and a rename.

  A crash leaves either the old file or the new one, never half a file.
  """
  directory = os.path.dirname(os.path.abspath(path))
  fd, tmp_path = tempfile.mkstemp(dir=directory, prefix=".tmp-" + os.path.basename(path))
  try:
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
      f.write(text)
    os.replace(tmp_path, path)
  except BaseException:
    if os.path.exists(tmp_path):
      os.remove(tmp_path)
    raise
