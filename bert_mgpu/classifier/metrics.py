# coding=utf-8
"""The classifier's scoring: accuracy, macro-F1, the per-class report and its text form."""

import unicodedata

import numpy as np


def confusion_matrix(gold_ids, predicted_ids, num_labels):
  """[num_labels, num_labels] counts; rows are gold labels, columns predictions."""
  matrix = np.zeros([num_labels, num_labels], dtype=np.int64)
  np.add.at(matrix, (gold_ids, predicted_ids), 1)
  return matrix


def per_class_scores(true_positives, predicted_counts, support):
  """Precision, recall and F1 per class (0 where undefined), and their macro-F1.

  Args:
    true_positives, predicted_counts, support: int [classes].

  Returns:
    (precision, recall, f1: float64 [classes], macro_f1: float).
  """
  true_positives = np.asarray(true_positives, np.float64)
  precision = np.divide(true_positives, predicted_counts,
                        out=np.zeros_like(true_positives), where=predicted_counts > 0)
  recall = np.divide(true_positives, support, out=np.zeros_like(true_positives),
                     where=support > 0)
  denominator = precision + recall
  f1 = np.divide(2 * precision * recall, denominator, out=np.zeros_like(true_positives),
                 where=denominator > 0)
  # Macro-F1 over the classes present in gold or predictions, as scikit-learn's
  # labels=present classes would; absent classes would only add zeros.
  present = (support + predicted_counts) > 0
  macro_f1 = float(np.mean(f1[present])) if present.any() else 0.0
  return precision, recall, f1, macro_f1


def classification_metrics(outputs, label_list):
  """Accuracy, macro-F1, loss and the per-class report from per-example eval outputs."""
  gold = outputs["label_ids"]
  predicted = np.argmax(outputs["probabilities"], axis=-1)
  matrix = confusion_matrix(gold, predicted, len(label_list))
  support = matrix.sum(axis=1)
  precision, recall, f1, macro_f1 = per_class_scores(np.diag(matrix), matrix.sum(axis=0),
                                                     support)
  loss = float(np.mean(outputs["per_example_loss"]))
  metrics = {
      "eval_accuracy": float(np.mean(predicted == gold)),
      "macro_f1": macro_f1,
      "eval_loss": loss,
      "loss": loss,
  }
  report = {
      "labels": list(label_list),
      "per_class": {label: {"precision": float(precision[i]), "recall": float(recall[i]),
                            "f1": float(f1[i]), "support": int(support[i])}
                    for i, label in enumerate(label_list)},
      "confusion_matrix": matrix.tolist(),
      "num_examples": int(len(gold)),
  }
  return metrics, report


def display_width(text):
  """Columns `text` takes in a terminal: wide (CJK) characters take two, marks none."""
  width = 0
  for char in text:
    if unicodedata.combining(char):
      continue
    width += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
  return width


def pad(text, width, right=False):
  """`text` padded with spaces to `width` display columns (Chinese labels line up)."""
  padding = " " * max(0, width - display_width(text))
  return padding + text if right else text + padding


def format_eval_report(metrics, report):
  """A plain-text report for a person: per-class figures and the confusion matrix."""
  labels = report["labels"]
  width = max([display_width(label) for label in labels] + [8])
  lines = ["examples: %d   accuracy: %.4f   macro-F1: %.4f   loss: %.4f" % (
      report["num_examples"], metrics["eval_accuracy"], metrics["macro_f1"],
      metrics["eval_loss"]), ""]
  lines.append("%s  %9s  %9s  %9s  %7s" % (pad("label", width), "precision", "recall", "f1",
                                           "support"))
  for label in labels:
    row = report["per_class"][label]
    lines.append("%s  %9.4f  %9.4f  %9.4f  %7d" % (
        pad(label, width), row["precision"], row["recall"], row["f1"], row["support"]))
  lines += ["", "confusion matrix (rows: gold, columns: predicted)"]
  lines.append("%s  %s" % (pad("", width), "  ".join(pad(l, width, right=True)
                                                       for l in labels)))
  for label, row in zip(labels, report["confusion_matrix"]):
    lines.append("%s  %s" % (pad(label, width), "  ".join(
        pad(str(count), width, right=True) for count in row)))
  return "\n".join(lines) + "\n"
