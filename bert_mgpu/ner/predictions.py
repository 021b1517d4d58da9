# coding=utf-8
"""NER's predictions and scores: sentence tags from the windows' predictions, the entity
scores of a split (bert_mgpu/ner/scoring.py), and the output files (eval_report.*, predict.txt,
predict.json or CMeEE_test.json, predict_entities.jsonl)."""

import os

from bert_mgpu.data import output_files
from bert_mgpu.ner import featurizing
from bert_mgpu.ner import formats
from bert_mgpu.ner import scoring as ner_scoring
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
