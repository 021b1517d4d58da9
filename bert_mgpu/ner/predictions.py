# coding=utf-8
"""NER's predictions and scores: sentence tags from the windows' predictions, the entity
scores of a split (bert_mgpu/ner/scoring.py), and the output files (eval_report.*, predict.txt,
predict.json or CMeEE_test.json, predict_entities.jsonl)."""

import logging
import os

from bert_mgpu.data import output_files
from bert_mgpu.ner import featurizing
from bert_mgpu.ner import formats
from bert_mgpu.ner import scoring as ner_scoring
from bert_mgpu.ner import span_scoring
from bert_mgpu.ner import span_windows
from bert_mgpu.ner import writers


def sentence_tags(split, window_tag_ids, label_list, scheme):
  """The predicted tags of every sentence, from the windows' per-piece predictions."""
  tags, start = [], 0
  for aligned, windows in split.featurized:
    predicted = window_tag_ids[start:start + len(windows)]
    tags.append(featurizing.tags_from_windows(aligned, windows, predicted, label_list, scheme))
    start += len(windows)
  if start != len(window_tag_ids):
    raise AssertionError("%d window predictions for %d windows" % (len(window_tag_ids), start))
  return tags


def ner_metrics(split, outputs, label_list, scheme, use_crf):
  """(eval_results metrics, the full ner_scoring.score result) of a split's outputs.

  Args:
    use_crf: whether the head is a CRF: its loss is then per window, not per token.
  """
  predicted = sentence_tags(split, outputs["tag_ids"], label_list, scheme)
  result = ner_scoring.score([s.tags for s in split.data.sentences], predicted, scheme)
  # Token mean of the cross-entropy, or the mean CRF negative log-likelihood per window.
  denominator = len(outputs["row_loss"]) if use_crf else outputs["row_tokens"].sum()
  loss = float(outputs["row_loss"].sum() / max(denominator, 1.0))
  metrics = {"precision": result["precision"], "recall": result["recall"],
             "f1": result["f1"], "macro_f1": result["macro_f1"], "loss": loss}
  return metrics, result


def eval_report(result):
  """The output_files.EvalReport of ner_scoring.score()'s `result`, per entity type
  (runner.write_eval_results writes it)."""
  return output_files.EvalReport(ner_scoring.format_report(result), result, sort_keys=True)


# The submission file of each span format, written by write_predictions.
SUBMISSION_FILES = {"cluener": "predict.json", "cmeee": "CMeEE_test.json"}


def write_predictions(output_dir, split, data_format, tags, spans=None):
  """Writes the test split's prediction files into output_dir: predict.txt (conll, from
  the tags), predict.json (cluener) or CMeEE_test.json (cmeee), and predict_entities.jsonl.

  Args:
    output_dir: the directory.
    split: the test Split.
    data_format: one of formats.DATA_FORMATS.
    tags: per sentence, the predicted tag list; or None when a span head predicts (then
      conll writes no predict.txt).
    spans: per sentence, the predicted (type, start, end exclusive) token spans, nested
      ones allowed; None for the entities of `tags`.
  """
  if data_format not in formats.DATA_FORMATS:
    raise ValueError("data format %r is not one of %s" % (data_format, formats.DATA_FORMATS))
  sentences = split.data.sentences
  if spans is None:
    if tags is None:
      raise ValueError("write_predictions needs tags or spans")
    spans = [ner_scoring.entities(sentence_tags) for sentence_tags in tags]
  if data_format == "conll":
    if tags is not None:
      writers.write_conll_predictions(os.path.join(output_dir, "predict.txt"), split.data,
                                      tags)
  elif data_format == "cluener":
    writers.write_cluener_predictions(
        os.path.join(output_dir, SUBMISSION_FILES["cluener"]), sentences, spans)
  elif data_format == "cmeee":
    writers.write_cmeee_predictions(
        os.path.join(output_dir, SUBMISSION_FILES["cmeee"]), sentences, spans)
  writers.write_predict_entities(os.path.join(output_dir, "predict_entities.jsonl"),
                                 sentences, spans)


# ---------------------------------------------------------------------------
# The span heads (ner/global_pointer.py)
# ---------------------------------------------------------------------------

SPAN_OUTPUTS = ("span_types", "span_starts", "span_ends", "span_scores")


def sentence_spans(split, outputs, type_list):
  """The predicted spans of every sentence, from the windows' best pairs.

  Logs a warning when a window's last kept pair still scores above 0: the window had
  more spans above 0 than the model outputs (global_pointer.top_spans).
  """
  spans, start = [], 0
  for aligned, windows in split.featurized:
    window_outputs = [tuple(outputs[name][start + index] for name in SPAN_OUTPUTS)
                      for index in range(len(windows))]
    spans.append(span_windows.spans_from_windows(aligned, windows, window_outputs,
                                                 type_list))
    start += len(windows)
  if start != len(outputs["span_scores"]):
    raise AssertionError("%d window predictions for %d windows"
                         % (len(outputs["span_scores"]), start))
  full = int((outputs["span_scores"][:, -1] > 0).sum()) if start else 0
  if full:
    logging.getLogger("tensorflow").warning(
        "%d windows of %s have more spans scored above 0 than the %d the model outputs per "
        "window; the lowest-scored of them were dropped.", full, split.data.path,
        outputs["span_scores"].shape[1])
  return spans


def span_metrics(split, outputs, type_list):
  """(eval_results metrics, the full span_scoring.score result) of a split's outputs; the
  loss is the mean over (window, type) rows."""
  predicted = sentence_spans(split, outputs, type_list)
  result = span_scoring.score([sentence.spans for sentence in split.data.sentences],
                              predicted)
  rows = len(outputs["row_loss"]) * len(type_list)  # each window's loss sums its types'
  loss = float(outputs["row_loss"].sum() / max(rows, 1))
  metrics = {"precision": result["precision"], "recall": result["recall"],
             "f1": result["f1"], "macro_f1": result["macro_f1"], "loss": loss,
             "nested_recall": result["nested"]["recall"]}
  return metrics, result


def span_eval_report(result):
  """The output_files.EvalReport of span_scoring.score()'s `result`."""
  return output_files.EvalReport(span_scoring.format_report(result), result, sort_keys=True)
