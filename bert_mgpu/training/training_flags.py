# coding=utf-8
"""The flags that decide a run's updates and the order of its data, recorded in output_dir
by its first run and checked by every resume (docs/TRAINING.md "Resume").

A rerun of an output_dir continues its training. Had it taken other values of these flags
(another learning rate, an optimizer correction, another batch or seed), the model would
follow no single command line, and a change of batch or order would also move where the
resume picks up in the data (runner.py skips global_step x accumulation_steps micro-batches
of the new order). So a resume whose flags differ from the record is refused in one line
naming each flag with both values, unless the run allows it (--allow_changed_training_flags),
which logs each change and records the new values.

Training longer stays free (more epochs or steps: the run's end step is recorded apart, and
a change is logged), and so do the cadences (logging, checkpoints, evaluation), which are
not recorded. Which flags are recorded is the commands' choice
(command_line.TRAINING_FLAGS); this module keeps the record:

  RECORD_FILE = {"flags": {name: value}, "num_workers": n, "num_train_steps": n}
"""

import hashlib
import json
import os

import tensorflow.compat.v1 as tf

from bert_mgpu.data import output_files
from bert_mgpu.errors import UsageError

RECORD_FILE = "training_flags.json"
OVERRIDE_FLAG = "--allow_changed_training_flags"


def record_of(config):
  """The record of a run: its RunConfig's training_flags, workers and end step."""
  return {"flags": dict(config.training_flags or {}), "num_workers": config.num_workers,
          "num_train_steps": config.num_train_steps}


def digest(flags):
  """A 60-bit integer that differs when the flags' values do (the workers compare it)."""
  text = json.dumps(flags or {}, sort_keys=True)
  return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:15], 16)


def read_record(output_dir):
  """The record in output_dir, or None when there is none.

  Raises:
    UsageError: the file is not a record (edited by hand, or another tool's).
  """
  path = os.path.join(output_dir, RECORD_FILE)
  if not tf.gfile.Exists(path):
    return None
  try:
    with tf.gfile.GFile(path, "r") as f:
      record = json.loads(f.read())
    if not isinstance(record.get("flags"), dict):
      raise ValueError("no \"flags\" object")
  except (ValueError, AttributeError) as e:
    raise UsageError("%s is not a record of training flags (%s): restore it, or delete it to "
                     "record this run's flags." % (path, e))
  return record


def write_record(output_dir, record):
  output_files.atomic_write_text(os.path.join(output_dir, RECORD_FILE),
                                 json.dumps(record, indent=2, sort_keys=True) + "\n")


def _shown(value):
  """A flag value as a command line gives it."""
  if isinstance(value, bool):
    return "true" if value else "false"
  return "(none)" if value is None else str(value)


def changes(recorded, given):
  """(name, recorded value, given value) of each flag or worker count that differs, in the
  order of the given record's flags (workers last). A flag only one side has (recorded by
  another version of the script) is not compared."""
  found = []
  for name, new in given["flags"].items():
    if name in recorded["flags"] and recorded["flags"][name] != new:
      found.append(("--" + name, recorded["flags"][name], new))
  if recorded.get("num_workers", 1) != given["num_workers"]:
    found.append(("the number of workers", recorded.get("num_workers", 1),
                  given["num_workers"]))
  return found


def describe(found):
  return ", ".join("%s=%s (given %s)" % (name, _shown(old), _shown(new)) if name.startswith("-")
                   else "%s %s (given %s)" % (name, _shown(old), _shown(new))
                   for name, old, new in found)


def check_resume(config, latest):
  """Compares the run's flags with output_dir's record before anything is written.

  Args:
    config: the RunConfig (training_flags, allow_changed_training_flags, num_workers,
      num_train_steps).
    latest: the checkpoint the run resumes, or None for a new run.

  Returns:
    What to log once output_dir is claimed (a list of (level, message)); write the record
    after it (write_record(config.output_dir, record_of(config))).

  Raises:
    UsageError: a resume whose flags differ from the record, without the override.
  """
  given = record_of(config)
  if not latest:
    return []
  recorded = read_record(config.output_dir)
  if recorded is None:
    return [("warning", "%s has no %s (it was trained before runs recorded their flags): this "
                        "resume cannot check that its flags are the ones it was trained "
                        "with. They are recorded now." % (config.output_dir, RECORD_FILE))]
  found = changes(recorded, given)
  if found and not config.allow_changed_training_flags:
    raise UsageError("%s was trained with other flags: %s. Resuming would change how it "
                     "trains: give the flags it recorded (%s), train into a new --output_dir, "
                     "or add %s to accept the change." % (
                         config.output_dir, describe(found),
                         os.path.join(config.output_dir, RECORD_FILE), OVERRIDE_FLAG))
  messages = []
  if found:
    messages.append(("warning", "Resuming %s with changed flags (%s): %s. The new values are "
                                "recorded." % (config.output_dir, OVERRIDE_FLAG,
                                               describe(found))))
  old_end = recorded.get("num_train_steps")
  if old_end is not None and old_end != given["num_train_steps"]:
    messages.append(("info", "Training now ends at step %d (recorded: %d): the learning "
                             "rate's linear decay moves to the new end (and a warm-up given as "
                             "--warmup_proportion with it), which changes the rate of every "
                             "step from here on." % (given["num_train_steps"], old_end)))
  return messages
