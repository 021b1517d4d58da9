# coding=utf-8
"""The teacher's outputs of a run that distills: computed once, on every tower, in a graph
of their own (the teacher's variables have the student's names), and kept as records.

distill-<key>.tf_record (with its .json, data/cached_records.py) holds each training record,
then each unlabelled one, with two features added: `teacher_logits`, the teacher's "logits"
output for that record, flattened (the classifier's [labels], a tagger's [seq, tags]), and
`label_weight` (1.0 labelled, 0.0 unlabelled). The key covers the source records' own keys
and the teacher checkpoint's identity (teacher.checkpoint_identity), so a rerun with the
same teacher reuses them and another checkpoint recomputes them (the old file is removed);
the precision and XLA the teacher ran under are part of the key too. A resumed student keeps
its teacher (teacher.check_resumed_student).
"""

import hashlib
import itertools
import json
import os
import time

import tensorflow.compat.v1 as tf

from bert_mgpu.data import cached_records
from bert_mgpu.data import tfrecord_io
from bert_mgpu.data.output_files import atomic_write_text, remove_quietly
from bert_mgpu.distillation import losses
from bert_mgpu.distillation import teacher as teacher_lib
from bert_mgpu.errors import write_error
from bert_mgpu.training import phases
from bert_mgpu.training import runner

CACHE_SPLIT = teacher_lib.OUTPUTS_PREFIX.rstrip("-")
# Bump when what the records hold changes.
_FORMAT_VERSION = 1


def _cache_key(source_keys, teacher_identity, devices):
  """The sha256 (hex) of what the stored outputs depend on: the source records' keys, the
  teacher checkpoint's identity, and the precision and XLA the teacher runs under."""
  settings = json.dumps({"format_version": _FORMAT_VERSION, "records": list(source_keys),
                         "teacher": teacher_identity, "precision": devices.precision,
                         "use_xla": bool(devices.use_xla)}, sort_keys=True)
  return hashlib.sha256(settings.encode("utf-8")).hexdigest()


def stored_teacher_outputs(sources, teacher, teacher_model_fn, config, spec, cache_dir):
  """The training records with the teacher's logits, from the cache when it is valid.

  Args:
    sources: list of (key, record path, labelled: bool) in the order the records are
      written (the training split, then the unlabelled one); a key identifies the records'
      content (a feature cache key, or the file's sha256).
    teacher: a distillation.teacher.Teacher.
    teacher_model_fn: the teacher's model_fn; its "logits" output is stored.
    config: RunConfig (the towers the teacher runs on).
    spec: the source records' feature spec.
    cache_dir: where the cache lives.

  Returns:
    (TFRecord path, number of records).
  """
  key = _cache_key([source_key for source_key, _, _ in sources], teacher.identity,
                   config.devices)
  base = os.path.join(cache_dir, "%s-%s" % (CACHE_SPLIT, key[:16]))
  record_path, info_path = base + ".tf_record", base + ".json"
  info = cached_records.read_cache_info(info_path, record_path, key)
  if info is not None:
    tf.logging.info("Reusing the teacher's outputs %s (%d records; teacher %s).",
                    record_path, info["num_examples"], teacher.checkpoint)
    return record_path, info["num_examples"]
  tf.logging.info("Computing the teacher's outputs with %s (%s) on %d tower(s).",
                  teacher.checkpoint, teacher.why, config.num_towers)
  start = time.time()
  logits_only = lambda features, is_training: {  # nothing else is fetched and kept
      "logits": teacher_model_fn(features, is_training)["logits"]}
  logits = []
  with phases.timed("teacher"):
    for _, path, _ in sources:
      make_dataset = lambda path=path: tfrecord_io.make_dataset(
          [path], spec, config.global_eval_batch_size, is_training=False,
          length_multiple=config.length_multiple)
      logits.append(runner.infer(config, logits_only, make_dataset,
                                 config.global_eval_batch_size, teacher.checkpoint)["logits"])
    remove_quietly(info_path)  # a cache is valid only once its .json is written, last
    count = tfrecord_io.write_records_atomically(record_path,
                                                 _with_teacher_logits(sources, logits))
  info = {"key": key, "num_examples": count, "record_bytes": os.path.getsize(record_path),
          "split": CACHE_SPLIT, "teacher_checkpoint": os.path.abspath(teacher.checkpoint),
          "teacher_identity": teacher.identity,
          "sources": [os.path.abspath(path) for _, path, _ in sources],
          "format_version": _FORMAT_VERSION}
  try:
    atomic_write_text(info_path, json.dumps(info, indent=2, sort_keys=True) + "\n")
  except OSError as e:
    raise write_error(info_path, e)
  cached_records.remove_stale_caches(
      cache_dir, CACHE_SPLIT, (os.path.basename(record_path), os.path.basename(info_path)),
      tf.logging.info)
  tf.logging.info("The teacher's outputs: %d records in %.1f s (graphs, restores, inference "
                  "and writing), kept in %s.", count, time.time() - start, record_path)
  return record_path, count


def _with_teacher_logits(sources, logits):
  """Yields each source record with teacher_logits (flattened) and label_weight added.

  Args:
    sources: as in stored_teacher_outputs.
    logits: per source, np.ndarray [records, ...] in record order.

  Raises:
    ValueError: a source holds another number of records than it has rows of logits.
  """
  missing = object()
  for (_, path, labelled), rows in zip(sources, logits):
    for record, row in itertools.zip_longest(tfrecord_io.read_records(path), rows,
                                             fillvalue=missing):
      if record is missing or row is missing:
        raise ValueError("%s: %d teacher outputs for another number of records" %
                         (path, len(rows)))
      example = tf.train.Example.FromString(record)
      feature = example.features.feature
      feature[losses.TEACHER_LOGITS].float_list.value.extend(row.ravel().tolist())
      feature[losses.LABEL_WEIGHT].float_list.value.append(1.0 if labelled else 0.0)
      yield example.SerializeToString(deterministic=True)


def training_feature_spec(spec, logits_shape):
  """The spec of the distillation records: `spec` plus the teacher's logits (read as
  `logits_shape`, e.g. [labels] or [seq, tags]) and the label weight."""
  spec = dict(spec)
  spec[losses.TEACHER_LOGITS] = tf.FixedLenFeature(list(logits_shape), tf.float32)
  spec[losses.LABEL_WEIGHT] = tf.FixedLenFeature([], tf.float32)
  return spec
