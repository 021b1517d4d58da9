# coding=utf-8
"""Record files kept in a cache directory while their inputs are unchanged: the
classifier's feature cache (classifier/feature_cache.py) and the teachers' outputs of
distillation (distillation/teacher_outputs.py).

A cache is <name>-<key16>.tf_record with <name>-<key16>.json beside it; the .json is written
last and names the full key, the record count and the record file's size, so a cache cut
short by a crash, or made for other inputs, is never taken for a valid one. No TensorFlow
import.
"""

import hashlib
import json
import os
import re

CACHE_NAME = re.compile(r"^(?P<split>.+)-(?P<key>[0-9a-f]{16})\.(tf_record|json)$")


def file_sha256(path):
  """The sha256 (bytes) of a file's content."""
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.digest()


def read_cache_info(info_path, record_path, key):
  """A cache's .json, when the cache is complete and made for `key`.

  Args:
    info_path, record_path: the cache's two files.
    key: the full key (hex) its inputs give now.

  Returns:
    The info dict, or None (missing, unreadable, another key, another record file size).
  """
  if not (os.path.isfile(info_path) and os.path.isfile(record_path)):
    return None
  try:
    with open(info_path, "r", encoding="utf-8") as f:
      info = json.load(f)
  except (OSError, ValueError):
    return None
  if (not isinstance(info, dict) or info.get("key") != key
      or info.get("record_bytes") != os.path.getsize(record_path)
      or not isinstance(info.get("num_examples"), int)):
    return None
  return info


def remove_stale_caches(directory, split, keep_names, log):
  """Deletes the cache files of `split` in `directory` but keep_names: made for other
  inputs, they are never reused.

  Args:
    directory: the cache directory.
    split: the caches' name before the key ("train", "distill", ...).
    keep_names: the file names to keep (the valid cache's two files).
    log: function(message), told of each file removed.
  """
  for name in os.listdir(directory):
    match = CACHE_NAME.match(name)
    if match and match.group("split") == split and name not in keep_names:
      log("removing stale cached records %s" % os.path.join(directory, name))
      os.remove(os.path.join(directory, name))
