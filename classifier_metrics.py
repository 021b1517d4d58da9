# coding=utf-8
"""The classifier's scoring: accuracy, macro-F1, the per-class report and its text form."""

import unicodedata

import numpy as np


def confusion_matrix(gold_ids, predicted_ids, num_labels):
  """[num_labels, num_labels] counts; rows are gold labels, columns predictions."""
  matrix = np.zeros([num_labels, num_labels], dtype=np.int64)
  np.add.at(matrix, (gold_ids, predicted_ids), 1)
  return matrix


def classification_metrics(outputs, label_list):
  """Accuracy, macro-F1, loss and the per-class report from per-example eval outputs."""
  gold = outputs["label_ids"]
  predicted = np.argmax(outputs["probabilities"], axis=-1)
  matrix = confusion_matrix(gold, predicted, len(label_list))
  true_positives = np.diag(matrix).astype(np.float64)
  predicted_counts = matrix.sum(axis=0)
  support = matrix.sum(axis=1)
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
  loss = float(np.mean(outputs["per_example_loss"]))
  metrics = {
      "eval_accuracy": float(np.mean(predicted == gold)),
      "macro_f1": float(np.mean(f1[present])) if present.any() else 0.0,
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


def _pad(text, width, right=False):
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
  lines.append("%s  %9s  %9s  %9s  %7s" % (_pad("label", width), "precision", "recall", "f1",
                                           "support"))
  for label in labels:
    row = report["per_class"][label]
    lines.append("%s  %9.4f  %9.4f  %9.4f  %7d" % (
        _pad(label, width), row["precision"], row["recall"], row["f1"], row["support"]))
  lines += ["", "confusion matrix (rows: gold, columns: predicted)"]
  lines.append("%s  %s" % (_pad("", width), "  ".join(_pad(l, width, right=True)
                                                       for l in labels)))
  for label, row in zip(labels, report["confusion_matrix"]):
    lines.append("%s  %s" % (_pad(label, width), "  ".join(
        _pad(str(count), width, right=True) for count in row)))
  return "\n".join(lines) + "\n"
