# coding=utf-8
"""The classifier's feature cache: each split's records, kept and reused while their inputs
are unchanged.

Features are cached in output_dir as <split>-<hash>.tf_record, with <split>-<hash>.json
next to it; the hash covers the data files, the vocab, tokenization.py
and the settings, so a cache is reused only while all of them are unchanged.
featurizing_plan makes a run's caches and its FeaturizingPool; cached_split_features gives
each split's record file, featurizing only the splits without a valid cache.
"""

import hashlib
import json
import os

import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import class_labels
from bert_mgpu.classifier import featurizing_pool
from bert_mgpu.classifier import input_examples
from bert_mgpu.data import cached_records
from bert_mgpu.data.output_files import atomic_write_text
from bert_mgpu.errors import UsageError, write_error
import tokenization

# Child of TensorFlow's logger: the messages appear next to tf.logging's and
# follow tf.logging.set_verbosity(). The classifier's data modules share it, under the
# name their log lines have always shown.
_LOGGER = tf.get_logger().getChild("classifier_data")

# Bump whenever the processors or the featurizing change what ends up in a
# TFRecord file: cached features written by older code are then rebuilt.
FEATURE_FORMAT_VERSION = 2  # 2: multi-label records (label_ids multi-hot)


def features_cache_key(split, examples_file_paths, label_list, max_seq_length, vocab_file,
                       do_lower_case, task_name, options=input_examples.FeatureOptions()):
  """The sha256 (hex) of everything the records of a split depend on.

  The bytes of the data files, the vocab and tokenization.py, and the settings:
  split, task name, max_seq_length, label list, do_lower_case and
  FEATURE_FORMAT_VERSION, and the FeatureOptions that are not the default.
  """
  settings = {
      "format_version": FEATURE_FORMAT_VERSION,
      "split": split,
      "task_name": task_name.lower(),
      "max_seq_length": int(max_seq_length),
      "label_list": list(label_list),
      "do_lower_case": bool(do_lower_case),
  }
  settings.update(input_examples.options_settings(options))
  settings = json.dumps(settings, sort_keys=True, ensure_ascii=False)
  digest = hashlib.sha256()
  # Each part is hashed on its own first, so no two inputs run together.
  digest.update(hashlib.sha256(settings.encode("utf-8")).digest())
  for path in list(examples_file_paths) + [vocab_file]:
    if not os.path.isfile(path):
      raise UsageError("%s: file not found; check the path" % path)
    digest.update(cached_records.file_sha256(path))
  digest.update(cached_records.file_sha256(os.path.splitext(tokenization.__file__)[0] + ".py"))
  return digest.hexdigest()


def split_caches(splits, processor, data_dir, input_files=None, **settings):
  """{split: FeatureCache} of each of `splits` (the inputs are hashed once, here).

  Args:
    splits: the split names (e.g. a dict split -> list of InputExample).
    processor: their DataProcessor (its input_files are part of the cache key).
    data_dir: --data_dir.
    input_files: dict split -> its files, for a split the processor does not read (the
      unlabelled examples of distillation), or None.
    **settings: label_list, max_seq_length, vocab_file, do_lower_case, task_name, options.
  """
  input_files = input_files or {}
  return {split: FeatureCache(split, input_files[split] if split in input_files else
                              processor.input_files(data_dir, split), **settings)
          for split in splits}


def largest_split_to_featurize(splits, caches, cache_dir):
  """The most examples of a split that has no valid cache in cache_dir (0 when all have):
  the largest_split of a FeaturizingPool that forks only when featurizing will use it.

  Args:
    splits: dict split -> list of InputExample.
    caches: dict split -> its FeatureCache (split_caches).
    cache_dir: where the caches live.
  """
  return max([len(examples) for split, examples in splits.items()
              if caches[split].info(cache_dir) is None] or [0])


def featurizing_plan(splits, processor, data_dir, cache_dir, task_name, num_workers=None,
                     input_files=None, **settings):
  """(caches, pool): each split's FeatureCache (split_caches) and a FeaturizingPool that
  forks only when a split without a valid cache in cache_dir is large enough to use it.

  Args:
    splits, processor, data_dir: as in split_caches.
    cache_dir: where the caches live (known before the device check, so the pool can fork
      first: run_settings.planned_cache_dir).
    task_name: the task (part of the cache key).
    num_workers: as in FeaturizingPool.
    input_files: as in split_caches.
    **settings: label_list, max_seq_length, vocab_file, do_lower_case, options.
  """
  caches = split_caches(splits, processor, data_dir, input_files, task_name=task_name,
                        **settings)
  largest = largest_split_to_featurize(splits, caches, cache_dir)
  return caches, featurizing_pool.FeaturizingPool(num_workers=num_workers, largest_split=largest,
                                                  **settings)


def cached_split_features(splits, caches, cache_dir, pool):
  """{split: TFRecord path} of each split through FeatureCache.features (featurized only
  when no valid cache exists).

  Args:
    splits: dict split -> list of InputExample.
    caches: dict split -> its FeatureCache (split_caches).
    cache_dir: where the caches live.
    pool: a FeaturizingPool.
  """
  return {split: caches[split].features(examples, cache_dir, pool=pool)[0]
          for split, examples in splits.items()}


class FeatureCache(object):
  """The feature cache of one split: cache_dir/<split>-<key>.tf_record, with
  <split>-<key>.json next to it holding the example count; <key> starts the sha256 of
  features_cache_key, computed once when the FeatureCache is made.

  Both files are written atomically, the .json last, so a crash never leaves a cache that
  looks valid. Older caches of the same split are deleted.
  """

  def __init__(self, split, examples_file_paths, label_list, max_seq_length, vocab_file,
               do_lower_case, task_name, options=input_examples.FeatureOptions()):
    """Args:
      split: cache name prefix ("train", "dev", "test").
      examples_file_paths: the data files the examples come from
        (processor.input_files(data_dir, split)).
      label_list, max_seq_length, vocab_file, do_lower_case, options: as in write_features.
      task_name: the task (part of the key).
    """
    self.split = split
    self.examples_file_paths = examples_file_paths
    self.label_list = label_list
    self.max_seq_length = max_seq_length
    self.vocab_file = vocab_file
    self.do_lower_case = do_lower_case
    self.task_name = task_name
    self.options = options
    self.key = features_cache_key(split, examples_file_paths, label_list, max_seq_length,
                                  vocab_file, do_lower_case, task_name, options)
    self.base_name = "%s-%s" % (split, self.key[:16])

  def paths(self, cache_dir):
    """(record_path, info_path) of the cache in cache_dir."""
    return (os.path.join(cache_dir, self.base_name + ".tf_record"),
            os.path.join(cache_dir, self.base_name + ".json"))

  def info(self, cache_dir):
    """The info dict of a valid cache in cache_dir, else None (the split needs
    featurizing)."""
    record_path, info_path = self.paths(cache_dir)
    return cached_records.read_cache_info(info_path, record_path, self.key)

  def features(self, examples, cache_dir, num_workers=None,
               pool_threshold=featurizing_pool.POOL_THRESHOLD, pool=None):
    """Returns the split's TFRecord file, featurizing only when no valid cache exists.

    Args:
      examples: list of InputExample, or a function of no arguments that returns
        it; the function is called only when the cache has to be built.
      cache_dir: where the cache lives (created if needed).
      num_workers, pool_threshold, pool: as in write_features.

    Returns:
      (tfrecord_path, num_examples).
    """
    record_path, info_path = self.paths(cache_dir)
    info = self.info(cache_dir)
    if info is not None:
      _LOGGER.info("reusing cached %s features %s (%d examples)", self.split, record_path,
                   info["num_examples"])
      return record_path, info["num_examples"]

    if callable(examples):
      examples = examples()
    class_labels.make_dirs(cache_dir)
    try:
      if os.path.lexists(info_path):
        os.remove(info_path)
    except OSError as e:
      raise write_error(info_path, e)
    num_examples = featurizing_pool.write_features(
        examples, self.label_list, self.max_seq_length, self.vocab_file, self.do_lower_case,
        record_path, num_workers=num_workers, pool_threshold=pool_threshold, pool=pool,
        options=self.options)
    info = {
        "key": self.key,
        "num_examples": num_examples,
        "record_bytes": os.path.getsize(record_path),
        "split": self.split,
        "task_name": self.task_name,
        "max_seq_length": self.max_seq_length,
        "do_lower_case": bool(self.do_lower_case),
        "num_labels": len(self.label_list),
        "data_files": [os.path.abspath(path) for path in self.examples_file_paths],
        "vocab_file": os.path.abspath(self.vocab_file),
        "format_version": FEATURE_FORMAT_VERSION,
    }
    try:
      atomic_write_text(info_path, json.dumps(info, indent=2, sort_keys=True) + "\n")
    except OSError as e:
      raise write_error(info_path, e)
    cached_records.remove_stale_caches(
        cache_dir, self.split, (os.path.basename(record_path), os.path.basename(info_path)),
        _LOGGER.info)
    return record_path, num_examples
