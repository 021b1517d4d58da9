# coding=utf-8
"""The classifier's distillation (--teacher_dir, docs/DISTILLATION.md): the unlabelled
examples (--unlabeled_file), the teacher's logits on every training record, and the
training records that carry them.

The teacher's logits are computed once, on every tower, in a graph of their own (its
variables have the student's names), over the student's own records, so a --long_text
teacher gives one row per document after its window pooling, as the student's loss needs.
They are kept beside the feature cache as distill-<key>.tf_record: each training record (then
each unlabelled one) with `teacher_logits` [labels] and `label_weight` (1 labelled, 0 not)
added. The key covers the records' own cache keys and the teacher checkpoint's identity
(distillation/teacher.checkpoint_identity), so a rerun with the same teacher reuses them and
another checkpoint recomputes them.
"""

import hashlib
import json
import os

import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import feature_cache
from bert_mgpu.classifier import input_examples
from bert_mgpu.data import text_files
from bert_mgpu.data import tfrecord_io
from bert_mgpu.data.output_files import atomic_write_text
from bert_mgpu.distillation import losses
from bert_mgpu.distillation import teacher as teacher_lib
from bert_mgpu.errors import UsageError, write_error
from bert_mgpu.training import phases
from bert_mgpu.training import runner

UNLABELED_SPLIT = "unlabeled"
_CACHE_SPLIT = "distill"
# Bump when what the distillation records hold changes.
_FORMAT_VERSION = 1


def read_unlabeled_examples(path, pairs):
  """The examples of --unlabeled_file: one per line, its text (text_a TAB text_b for a pair
  task), no label; blank lines are skipped.

  Args:
    path: the file.
    pairs: whether the task's examples are text pairs (any training example has a text_b).

  Raises:
    UsageError: no such file, not UTF-8 (text_files.text_lines), or a line with another
      number of columns.
  """
  columns = 2 if pairs else 1
  examples = []
  for number, line in text_files.text_lines(path):
    if not line.strip():
      continue
    fields = line.split("\t")
    if len(fields) != columns:
      raise UsageError("%s:%d: %d tab-separated fields, expected %d (%s): %r" % (
          path, number, len(fields), columns,
          "text_a TAB text_b, as the task's pairs" if pairs else "the text alone, no tab",
          line[:60]))
    examples.append(input_examples.InputExample(
        guid="%s-%d" % (UNLABELED_SPLIT, number), text_a=fields[0],
        text_b=fields[1] if pairs else None, source_file=path, source_line=number))
  if not examples:
    raise UsageError("--unlabeled_file=%s: no text in it; give one example per line, or "
                     "leave the flag out." % path)
  return examples


def training_feature_spec(spec, num_labels):
  """The spec of the distillation records: `spec` plus the teacher's logits and the label
  weight."""
  spec = dict(spec)
  spec[losses.TEACHER_LOGITS] = tf.FixedLenFeature([num_labels], tf.float32)
  spec[losses.LABEL_WEIGHT] = tf.FixedLenFeature([], tf.float32)
  return spec


def _cache_key(record_keys, teacher_identity):
  settings = json.dumps({"format_version": _FORMAT_VERSION, "records": list(record_keys),
                         "teacher": teacher_identity}, sort_keys=True)
  return hashlib.sha256(settings.encode("utf-8")).hexdigest()


def teacher_records(sources, teacher, teacher_model_fn, config, spec, cache_dir):
  """The training records with the teacher's logits, from the cache when it is valid.

  Args:
    sources: list of (FeatureCache key, record path, labelled: bool), in the order the
      records are written (the training split, then the unlabelled one).
    teacher: a distillation.teacher.Teacher.
    teacher_model_fn: the teacher's model_fn (classifier/model.py), with a "logits" output.
    config: RunConfig (the towers the teacher runs on).
    spec: the records' feature spec.
    cache_dir: the feature cache's directory.

  Returns:
    (TFRecord path, number of records).
  """
  key = _cache_key([source_key for source_key, _, _ in sources],
                   teacher_lib.checkpoint_identity(teacher.checkpoint))
  base = os.path.join(cache_dir, "%s-%s" % (_CACHE_SPLIT, key[:16]))
  record_path, info_path = base + ".tf_record", base + ".json"
  info = feature_cache.read_cache_info(info_path, record_path, key)
  if info is not None:
    tf.logging.info("Reusing the teacher's outputs %s (%d records; teacher %s).",
                    record_path, info["num_examples"], teacher.checkpoint)
    return record_path, info["num_examples"]
  tf.logging.info("Computing the teacher's outputs with %s (%s) on %d tower(s).",
                  teacher.checkpoint, teacher.why, config.num_towers)
  logits = []
  with phases.timed("teacher"):
    for _, path, _ in sources:
      make_dataset = lambda path=path: tfrecord_io.make_dataset(
          [path], spec, config.global_eval_batch_size, is_training=False,
          length_multiple=config.length_multiple)
      logits.append(runner.infer(config, teacher_model_fn, make_dataset,
                                 config.global_eval_batch_size, teacher.checkpoint)["logits"])
  if os.path.lexists(info_path):
    os.remove(info_path)
  count = tfrecord_io.write_records_atomically(record_path, _with_teacher_logits(sources,
                                                                                 logits))
  info = {"key": key, "num_examples": count, "record_bytes": os.path.getsize(record_path),
          "split": _CACHE_SPLIT, "teacher_checkpoint": os.path.abspath(teacher.checkpoint),
          "sources": [os.path.abspath(path) for _, path, _ in sources],
          "format_version": _FORMAT_VERSION}
  try:
    atomic_write_text(info_path, json.dumps(info, indent=2, sort_keys=True) + "\n")
  except OSError as e:
    raise write_error(info_path, e)
  feature_cache.remove_stale_caches(cache_dir, _CACHE_SPLIT,
                                    (os.path.basename(record_path), os.path.basename(info_path)))
  return record_path, count


def _with_teacher_logits(sources, logits):
  """Yields each source record with teacher_logits and label_weight added."""
  for (_, path, labelled), rows in zip(sources, logits):
    count = 0
    for record, row in zip(tfrecord_io.read_records(path), rows):
      example = tf.train.Example.FromString(record)
      feature = example.features.feature
      feature[losses.TEACHER_LOGITS].float_list.value.extend(row.tolist())
      feature[losses.LABEL_WEIGHT].float_list.value.append(1.0 if labelled else 0.0)
      count += 1
      yield example.SerializeToString(deterministic=True)
    if count != len(rows):
      raise ValueError("%s: %d records but %d teacher outputs" % (path, count, len(rows)))
