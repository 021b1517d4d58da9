# coding=utf-8
"""Multi-label classification outside the graph: thresholds, scoring and thresholds.json.

Each label has its own sigmoid (the multi-label head of classifier/model.py); a label is
predicted when its probability reaches its threshold. --multi_label_threshold is one
threshold for every label, or `tuned`: per label, the threshold that maximizes that label's
F1 on the dev set. The thresholds a model uses are kept in output_dir/thresholds.json
(docs/FORMATS.md), which prediction, export and predict_text.py read.
"""

import json
import logging
import os

import numpy as np

from bert_mgpu.classifier import metrics as classifier_metrics
from bert_mgpu.data.output_files import atomic_write_text
from bert_mgpu.errors import UsageError

# TensorFlow's logger (tf.get_logger() is this logger on TF 1.15 and 2.x).
_LOGGER = logging.getLogger("tensorflow")

THRESHOLDS_FILE = "thresholds.json"
TUNED = "tuned"
DEFAULT_THRESHOLD = 0.5


def define_flags(flags):
  """run_classifier_mgpu.py's --multi_label flags (`flags`: tf.flags)."""
  flags.DEFINE_bool("multi_label", False, "Each example has zero or more labels (tsv, csv, "
                    "jsonl): one sigmoid per label instead of a softmax over one.")
  flags.DEFINE_string("label_separator", ",", "With --multi_label: the separator between an "
                      "example's labels in the label field (jsonl also takes a JSON list).")
  flags.DEFINE_string("multi_label_threshold", "0.5", "With --multi_label: the probability at "
                      "which a label is predicted, or `tuned`: per label, the threshold with "
                      "the best F1 on dev. Saved to output_dir/thresholds.json, which later "
                      "runs, export and predict_text.py use unless this flag is given.")


def eval_results_key(best_metric, given, is_multi_label):
  """The eval_results.txt key of --best_metric: micro_f1 unless `given` with --multi_label.

  Raises:
    UsageError: micro_f1 without --multi_label.
  """
  if is_multi_label and not given:
    best_metric = "micro_f1"
  elif best_metric == "micro_f1" and not is_multi_label:
    raise UsageError("--best_metric=micro_f1 scores multi-label runs: pass --multi_label, or "
                     "use accuracy or macro_f1.")
  return {"accuracy": "eval_accuracy"}.get(best_metric, best_metric)


def unread_flags(is_multi_label):
  """{flag name: the setting that reads it} of the flags a run without --multi_label
  ignores (command_line.refuse_unread_flags)."""
  if is_multi_label:
    return {}
  return {"label_separator": "--multi_label", "multi_label_threshold": "--multi_label"}


class ThresholdChoice(object):
  """How a multi-label run picks its thresholds.

  `tuned`: chosen on the dev outputs when there are some, else the model's thresholds.json.
  A number: that threshold for every label, except that a run that does not train and is
  not given --multi_label_threshold keeps the model's thresholds.json when it has one.
  """

  def __init__(self, flag_value, flag_given, do_train, output_dir):
    """Args:
      flag_value: --multi_label_threshold (a number, or `tuned`).
      flag_given: whether the command line set it.
      do_train: whether the run trains.
      output_dir: the model directory (thresholds.json).
    """
    self.flag_value = flag_value
    self.setting = parse_threshold(flag_value)
    self.use_saved = self.setting == TUNED or not (do_train or flag_given)
    self.do_train = do_train
    self.output_dir = output_dir

  def check(self, do_eval):
    """Raises UsageError when `tuned` has neither a dev set nor a saved thresholds.json."""
    saved = os.path.join(self.output_dir, THRESHOLDS_FILE)
    if self.setting == TUNED and not do_eval and (self.do_train or not os.path.isfile(saved)):
      raise UsageError("--multi_label_threshold=tuned chooses the thresholds on dev: add "
                       "--do_eval%s." % ("" if self.do_train else
                                         " (%s does not exist yet)" % saved))

  def choose(self, dev_outputs, label_list):
    """(float [labels], where they come from: a description for the file and the log)."""
    if self.setting == TUNED and dev_outputs is not None:
      return (tune_thresholds(dev_outputs["probabilities"], dev_outputs["label_ids"]),
              "tuned on dev (%d examples)" % len(dev_outputs["probabilities"]))
    if self.use_saved:
      saved = read_thresholds(self.output_dir, label_list)
      if saved is not None:
        return saved, THRESHOLDS_FILE
    return (np.full([len(label_list)], self.setting),
            "--multi_label_threshold=%s" % self.flag_value)

  def save(self, dev_outputs, label_list):
    """choose(), written to output_dir/thresholds.json unless read from it, and logged."""
    thresholds, source = self.choose(dev_outputs, label_list)
    if source != THRESHOLDS_FILE:
      write_thresholds(self.output_dir, label_list, thresholds, source)
    _LOGGER.info("Multi-label thresholds (%s): %s", source, ", ".join(
        "%s %.3f" % pair for pair in zip(label_list, thresholds)))
    return thresholds


def check_head(checkpoint, variable_names, multi_label, scope):
  """Refuses a fine-tuned classifier checkpoint whose head is of the other kind (a softmax
  head given to a multi-label run, or the reverse); a pretrained BERT checkpoint has
  neither head.

  Args:
    checkpoint: its path (the message).
    variable_names: the names of its variables.
    multi_label: whether the run is multi-label.
    scope: the multi-label head's variable scope.

  Raises:
    UsageError: the checkpoint's head is the other kind's.
  """
  names = set(variable_names)
  softmax = "output_weights" in names
  sigmoid = scope + "/output_weights" in names
  if multi_label and softmax and not sigmoid:
    raise UsageError("%s holds a single-label (softmax) classifier: it cannot be used with "
                     "--multi_label; drop --multi_label, or start from a pretrained BERT "
                     "checkpoint" % checkpoint)
  if not multi_label and sigmoid and not softmax:
    raise UsageError("%s holds a multi-label classifier: pass --multi_label (and its "
                     "--label_separator), or start from a pretrained BERT checkpoint"
                     % checkpoint)


def parse_threshold(value):
  """--multi_label_threshold as a float in (0, 1), or TUNED. Raises UsageError."""
  text = str(value).strip().lower()
  if text == TUNED:
    return TUNED
  try:
    threshold = float(text)
  except ValueError:
    threshold = None
  if threshold is None or not 0.0 < threshold < 1.0:
    raise UsageError("--multi_label_threshold=%s: give a probability between 0 and 1 "
                     "(e.g. 0.5), or `tuned` to choose each label's threshold on dev" % value)
  return threshold


def tune_thresholds(probabilities, gold):
  """Per label, the threshold that maximizes its F1 on these examples.

  The threshold lies halfway between the lowest probability predicted positive and the
  highest one left out, so it does not sit on a dev example (except when the two are
  adjacent float32 values: then it is the upper one). It is a float32 value, as the
  model's probabilities are, so predicted_sets and the exported model (float32 in the
  graph) split the examples where the tuning did. A label without positive examples keeps
  DEFAULT_THRESHOLD (no threshold gives it an F1 above zero).

  Args:
    probabilities: float [examples, labels].
    gold: 0/1 [examples, labels].

  Returns:
    float32 values [labels] (a float64 array).
  """
  probabilities = np.asarray(probabilities, np.float32)
  gold = np.asarray(gold) > 0
  thresholds = np.full([probabilities.shape[1]], DEFAULT_THRESHOLD)
  for label in range(probabilities.shape[1]):
    positives = gold[:, label].sum()
    if positives == 0:
      continue
    order = np.argsort(-probabilities[:, label], kind="stable")
    ranked = probabilities[order, label]  # [examples], descending
    true_positives = np.cumsum(gold[order, label])  # predicting the top k, k = 1..n
    predicted = np.arange(1, len(ranked) + 1)
    f1 = 2.0 * true_positives / (predicted + positives)
    # Only cuts between distinct probabilities can be made by a threshold.
    cuttable = np.append(ranked[1:] < ranked[:-1], True)
    best = int(np.argmax(np.where(cuttable, f1, -1.0)))
    lowest_in = ranked[best]
    highest_out = ranked[best + 1] if best + 1 < len(ranked) else np.float32(0.0)
    halfway = np.float32((np.float64(lowest_in) + np.float64(highest_out)) / 2.0)
    # Adjacent float32 values have no float32 between them: the upper one then.
    thresholds[label] = halfway if halfway > highest_out else lowest_in
  return thresholds


def predicted_sets(probabilities, thresholds):
  """bool [examples, labels]: each label whose probability reaches its threshold, both
  compared as float32, as in the exported model."""
  return (np.asarray(probabilities, np.float32) >=
          np.asarray(thresholds, np.float32)[None, :])


def label_string(row, label_list, separator):
  """The predicted labels of one example (a bool row) joined by the separator."""
  return separator.join(label for label, chosen in zip(label_list, row) if chosen)


def multi_label_metrics(outputs, label_list, thresholds):
  """Exact-set accuracy, micro- and macro-F1, loss and the per-label report.

  Args:
    outputs: per-example eval outputs: probabilities [n, labels], label_ids [n, labels]
      (multi-hot), per_example_loss [n].
    label_list: the labels.
    thresholds: float [labels].

  Returns:
    (metrics dict, report dict).
  """
  gold = np.asarray(outputs["label_ids"]) > 0
  predicted = predicted_sets(outputs["probabilities"], thresholds)
  true_positives = (gold & predicted).sum(axis=0)  # [labels]
  predicted_counts = predicted.sum(axis=0)
  support = gold.sum(axis=0)
  precision, recall, f1, macro_f1 = classifier_metrics.per_class_scores(
      true_positives, predicted_counts, support)
  counted = predicted_counts.sum() + support.sum()
  micro_f1 = 2.0 * true_positives.sum() / counted if counted else 0.0
  exact_match = float(np.mean(np.all(gold == predicted, axis=1))) if len(gold) else 0.0
  loss = float(np.mean(outputs["per_example_loss"]))
  metrics = {
      "eval_accuracy": exact_match,
      "exact_match": exact_match,
      "micro_f1": float(micro_f1),
      "macro_f1": macro_f1,
      "eval_loss": loss,
      "loss": loss,
  }
  report = {
      "labels": list(label_list),
      "per_label": {label: {"precision": float(precision[i]), "recall": float(recall[i]),
                            "f1": float(f1[i]), "support": int(support[i]),
                            "predicted": int(predicted_counts[i]),
                            "threshold": float(thresholds[i])}
                    for i, label in enumerate(label_list)},
      "num_examples": int(len(gold)),
  }
  return metrics, report


def format_eval_report(metrics, report):
  """eval_report.txt of a multi-label run: the figures per label."""
  labels = report["labels"]
  width = max([classifier_metrics.display_width(label) for label in labels] + [8])
  lines = ["examples: %d   exact match: %.4f   micro-F1: %.4f   macro-F1: %.4f   loss: %.4f"
           % (report["num_examples"], metrics["exact_match"], metrics["micro_f1"],
              metrics["macro_f1"], metrics["eval_loss"]), ""]
  lines.append("%s  %9s  %9s  %9s  %7s  %9s  %9s" % (
      classifier_metrics.pad("label", width), "precision", "recall", "f1", "support",
      "predicted", "threshold"))
  for label in labels:
    row = report["per_label"][label]
    lines.append("%s  %9.4f  %9.4f  %9.4f  %7d  %9d  %9.4f" % (
        classifier_metrics.pad(label, width), row["precision"], row["recall"], row["f1"],
        row["support"], row["predicted"], row["threshold"]))
  return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# thresholds.json
# ---------------------------------------------------------------------------

def write_thresholds(directory, label_list, thresholds, source):
  """Writes directory/thresholds.json: {"labels", "thresholds", "source"}."""
  content = {"labels": list(label_list), "thresholds": [float(t) for t in thresholds],
             "source": source}
  atomic_write_text(os.path.join(directory, THRESHOLDS_FILE),
                    json.dumps(content, ensure_ascii=False, indent=2) + "\n")


def read_thresholds(directory, label_list):
  """The thresholds of directory/thresholds.json, in label_list order, or None when the file
  does not exist.

  Raises:
    UsageError: the file is unreadable or made for other labels.
  """
  path = os.path.join(directory, THRESHOLDS_FILE)
  if not os.path.isfile(path):
    return None
  try:
    with open(path, "r", encoding="utf-8") as f:
      content = json.load(f)
    thresholds = dict(zip(content["labels"], content["thresholds"]))
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise UsageError("%s: cannot read the thresholds (%s); delete it and evaluate again "
                     "with --do_eval" % (path, e))
  missing = [label for label in label_list if label not in thresholds]
  if missing:
    raise UsageError("%s has no threshold for label %r (it was written for other labels); "
                     "delete it and evaluate again with --do_eval" % (path, missing[0]))
  return np.array([float(thresholds[label]) for label in label_list])
