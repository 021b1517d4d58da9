# coding=utf-8
"""The classifier's output files after evaluating and predicting (docs/FORMATS.md 7):
eval_report.txt and .json, predict.txt, Google's test_results.tsv, predict_detail.tsv and,
with --clue_submission, the CLUE leaderboard's files (classifier/clue_submission.py).
"""

import os

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import clue_submission
from bert_mgpu.classifier import input_examples
from bert_mgpu.classifier import metrics as classifier_metrics
from bert_mgpu.classifier import multi_label as multi_label_lib
from bert_mgpu.data import output_files
from bert_mgpu.data.output_files import atomic_write_text


def eval_report(metrics, report, multi_label):
  """The output_files.EvalReport of the dev set (runner.write_eval_results writes it).

  Args:
    metrics: the dev metrics (eval_results.txt's).
    report: the per-label report of classifier_metrics.classification_metrics or
      multi_label.multi_label_metrics.
    multi_label: whether the run is multi-label (the report's layout).
  """
  formatter = (multi_label_lib.format_eval_report if multi_label else
               classifier_metrics.format_eval_report)
  return output_files.EvalReport(formatter(metrics, report), dict(report, metrics=metrics),
                                 sort_keys=False)


def write_test_predictions(output_dir, examples, outputs, label_list, thresholds=None,
                           separator=",", clue_task_name=None):
  """The prediction files of the test set (write_predict_outputs), logged, and with
  `clue_task_name` the CLUE submission.

  Args:
    output_dir: where they go.
    examples: the test InputExamples, in order.
    outputs: the model's per-example outputs on them ("probabilities" [examples, labels]).
    label_list, thresholds, separator: as for write_predict_outputs.
    clue_task_name: the CLUE task of --clue_submission, or None.
  """
  probabilities = outputs["probabilities"]
  if len(probabilities) != len(examples):
    raise AssertionError("%d predictions for %d test examples" % (
        len(probabilities), len(examples)))
  write_predict_outputs(output_dir, examples, probabilities, label_list, thresholds,
                        separator)
  tf.logging.info("Wrote %d predictions to %s", len(examples),
                  os.path.join(output_dir, "predict.txt"))
  if clue_task_name:
    clue_submission.write_submission(
        output_dir, clue_task_name, examples,
        [label_list[i] for i in np.argmax(probabilities, -1)])


def write_predict_outputs(output_dir, examples, probabilities, label_list, thresholds=None,
                          separator=","):
  """predict.txt (label names), test_results.tsv (Google's) and predict_detail.tsv.

  Args:
    output_dir: where they go.
    examples: the test InputExamples, in order.
    probabilities: float [examples, labels].
    label_list: the labels.
    thresholds: None for one label per example (the most probable); with --multi_label,
      float [labels]: predict.txt lines then hold every label reaching its threshold,
      joined by `separator` (an empty line for none).
    separator: the multi-label separator.
  """
  if thresholds is None:
    best = np.argmax(probabilities, axis=-1)
    predicted = [label_list[i] for i in best]
    columns = ["predicted_label", "probability"]
    details = [[label_list[i], "%.6f" % row[i]] for i, row in zip(best, probabilities)]
  else:
    chosen = multi_label_lib.predicted_sets(probabilities, thresholds)
    predicted = [multi_label_lib.label_string(row, label_list, separator) for row in chosen]
    columns = ["predicted_labels"]
    details = [[labels] for labels in predicted]
  atomic_write_text(os.path.join(output_dir, "predict.txt"),
                    "".join(labels + "\n" for labels in predicted))
  atomic_write_text(os.path.join(output_dir, "test_results.tsv"), "".join(
      "\t".join(str(p) for p in row) + "\n" for row in probabilities))
  atomic_write_text(os.path.join(output_dir, "predict_detail.tsv"), "".join(
      "\t".join(row) + "\n" for row in input_examples.example_rows(
          examples, columns, details, "gold_label" if thresholds is None else "gold_labels",
          separator)))
