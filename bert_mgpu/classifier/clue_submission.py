# coding=utf-8
"""CLUE leaderboard submission files (run_classifier_mgpu.py --clue_submission).

For a CLUE task, output_dir/<task_name>_predict.json holds one line per test example, in
the order of test.json: {"id": <the example's id as test.json holds it, a JSON integer or
string>, "label": <the predicted label, spelt as in train.json>}. Where the CLUE 1.1
leaderboard names the file differently, a copy is written under that name too
(docs/FORMATS.md, "CLUE classification tasks").

No TensorFlow import: the check runs with the other flag checks, before anything is written.
"""

import json
import logging
import os

from bert_mgpu.data.output_files import atomic_write_text
from bert_mgpu.errors import UsageError

# TensorFlow's logger (tf.get_logger() is this logger on TF 1.15 and 2.x).
_LOGGER = logging.getLogger("tensorflow")

# The CLUE tasks of clue_processors.py, and the CLUE 1.1 leaderboard's name of their file where
# it is not <task>_predict.json.
LEADERBOARD_11_NAMES = {
    "tnews": "tnews11", "iflytek": None, "afqmc": None, "cmnli": None, "ocnli": "ocnli_50k",
    "csl": None, "cluewsc2020": "cluewsc11",
}
CLUE_TASKS = tuple(sorted(LEADERBOARD_11_NAMES))


def _task(task_name):
  return (task_name or "").strip().lower()


def define_flags(flags):
  """run_classifier_mgpu.py's --clue_submission (`flags`: tf.flags)."""
  flags.DEFINE_bool("clue_submission", False, "With --do_predict on a CLUE task (" +
                    ", ".join(CLUE_TASKS) + "): also write the leaderboard's "
                    "output_dir/<task_name>_predict.json, {\"id\": ..., \"label\": ...} per "
                    "test example, and its copy under the CLUE 1.1 name where that differs.")


def check_flags(task_name, do_predict):
  """Raises UsageError unless a --clue_submission run can write its files.

  Args:
    task_name: the --task_name.
    do_predict: the --do_predict flag (the submission holds the test predictions).
  """
  if _task(task_name) not in LEADERBOARD_11_NAMES:
    raise UsageError("--clue_submission: --task_name=%s is not a CLUE task; use one of %s, "
                     "or drop --clue_submission" % (task_name or "", ", ".join(CLUE_TASKS)))
  if not do_predict:
    raise UsageError("--clue_submission writes the test predictions: add --do_predict")


def file_names(task_name):
  """The submission file names of a CLUE task: <task>_predict.json, then the 1.1 copy."""
  task = _task(task_name)
  names = [task + "_predict.json"]
  if LEADERBOARD_11_NAMES[task]:
    names.append(LEADERBOARD_11_NAMES[task] + "_predict.json")
  return names


def write_submission(output_dir, task_name, examples, predicted_labels):
  """Writes the submission file(s) of a CLUE task into output_dir, each atomically.

  Args:
    output_dir: the run's output directory.
    task_name: a CLUE task (check_flags).
    examples: the test InputExamples, in the order of test.json.
    predicted_labels: the predicted label string of each example, in the same order.

  Returns:
    The paths written.
  """
  if len(examples) != len(predicted_labels):
    raise AssertionError("%d predictions for %d test examples"
                         % (len(predicted_labels), len(examples)))
  # A test file without ids: the 0-based position, as CLUE's baseline writes every id.
  lines = [json.dumps({"id": index if example.raw_id is None else example.raw_id,
                       "label": label}, ensure_ascii=False) + "\n"
           for index, (example, label) in enumerate(zip(examples, predicted_labels))]
  paths = [os.path.join(output_dir, name) for name in file_names(task_name)]
  for path in paths:
    atomic_write_text(path, "".join(lines))
  _LOGGER.info("CLUE submission: %d predictions written to %s", len(lines), ", ".join(paths))
  return paths
