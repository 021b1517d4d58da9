# coding=utf-8
"""Entity scores over spans that may nest: micro precision, recall and F1 over exact
(type, start, end) triples (CMeEE's official metric), per type, and over the entities that
lie inside another.

An entity lies inside another when the same sentence has an entity of another extent
that covers it (start' <= start, end <= end'). The nested scores: recall over the gold
entities that lie inside another gold entity, precision over the predicted entities that
lie inside another predicted one.

Pure Python (no TensorFlow, no NumPy), like ner/scoring.py, whose dict and report this
follows.
"""

import collections

from bert_mgpu.ner import scoring as ner_scoring


def inside_another(spans):
  """The spans of one sentence that lie inside another (see the module docstring).

  Args:
    spans: iterable of (type, start, end), end exclusive.

  Returns:
    set of those spans.
  """
  spans = set(spans)
  extents = set((start, end) for _, start, end in spans)
  return set(span for span in spans
             if any(other != span[1:] and other[0] <= span[1] and span[2] <= other[1]
                    for other in extents))


def _ratios(correct_of_predicted, predicted, correct_of_gold, gold):
  precision = ner_scoring.ratio(correct_of_predicted, predicted)
  recall = ner_scoring.ratio(correct_of_gold, gold)
  return precision, recall, ner_scoring.ratio(2 * precision * recall, precision + recall)


def score(gold_spans, predicted_spans):
  """Span-level scores of a split.

  Args:
    gold_spans: list (per sentence) of lists of (type, start, end).
    predicted_spans: the same for the predictions, as many sentences.

  Returns:
    dict as ner_scoring.score's ("precision", "recall", "f1", "macro_f1", "num_gold",
    "num_predicted", "num_correct", "per_type"; no token accuracy), plus "nested":
    {"precision", "recall", "f1", "support" (gold entities inside another), "found" (of
    them, predicted), "predicted" (predicted entities inside another), "correct" (of
    them, gold)}.

  Raises:
    ValueError: lists of different lengths.
  """
  if len(gold_spans) != len(predicted_spans):
    raise ValueError("%d gold sentences but %d predicted"
                     % (len(gold_spans), len(predicted_spans)))
  counts = {name: collections.Counter() for name in ("gold", "predicted", "correct")}
  nested = collections.Counter()
  for gold, predicted in zip(gold_spans, predicted_spans):
    gold, predicted = set(gold), set(predicted)
    counts["gold"].update(span[0] for span in gold)
    counts["predicted"].update(span[0] for span in predicted)
    counts["correct"].update(span[0] for span in gold & predicted)
    gold_inside, predicted_inside = inside_another(gold), inside_another(predicted)
    nested.update(support=len(gold_inside), found=len(gold_inside & predicted),
                  predicted=len(predicted_inside), correct=len(predicted_inside & gold))
  per_type = {}
  for entity_type in sorted(set(counts["gold"]) | set(counts["predicted"])):
    gold, predicted, correct = (counts[name][entity_type]
                                for name in ("gold", "predicted", "correct"))
    precision, recall, f1 = _ratios(correct, predicted, correct, gold)
    per_type[entity_type] = {"precision": precision, "recall": recall, "f1": f1,
                             "support": gold, "predicted": predicted, "correct": correct}
  num_gold, num_predicted, num_correct = (sum(counts[name].values())
                                          for name in ("gold", "predicted", "correct"))
  precision, recall, f1 = _ratios(num_correct, num_predicted, num_correct, num_gold)
  nested_precision, nested_recall, nested_f1 = _ratios(
      nested["correct"], nested["predicted"], nested["found"], nested["support"])
  return {"precision": precision, "recall": recall, "f1": f1,
          "macro_f1": ner_scoring.ratio(sum(row["f1"] for row in per_type.values()),
                                         len(per_type)),
          "num_gold": num_gold, "num_predicted": num_predicted, "num_correct": num_correct,
          "per_type": per_type,
          "nested": {"precision": nested_precision, "recall": nested_recall,
                     "f1": nested_f1, "support": nested["support"], "found": nested["found"],
                     "predicted": nested["predicted"], "correct": nested["correct"]}}


def format_report(result, digits=4):
  """eval_report.txt of a span head: ner_scoring.format_report's table, then a row for the
  entities inside another (its support: the gold ones)."""
  nested = result["nested"]
  number = "%." + str(digits) + "f"
  return (ner_scoring.format_report(result, digits) +
          ("\nentities inside another: precision " + number + ", recall " + number +
           ", f1 " + number + "; %d gold (%d found), %d predicted (%d correct)\n")
          % (nested["precision"], nested["recall"], nested["f1"], nested["support"],
             nested["found"], nested["predicted"], nested["correct"]))
