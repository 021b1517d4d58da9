# coding=utf-8
"""NER sentences written out: the conll format with given tags, the CLUENER and CMeEE
formats with given spans, and the prediction files with their entities' character offsets.

Spans are (type, start, end) over token indexes, end exclusive, as NerSentence.spans holds
them; nested and overlapping spans are written as they are (CLUENER, CMeEE and
predict_entities.jsonl hold them; only conll's tags cannot).

Outputs: predict.txt (conll: each test-file line with its predicted tag appended),
predict.json (CLUENER's submission format), CMeEE_test.json (CBLUE's submission format for
CMeEE) and predict_entities.jsonl (every format).

No TensorFlow import.
"""

import collections
import json

from bert_mgpu.data import output_files
from bert_mgpu.ner import formats
from bert_mgpu.ner import scoring as ner_scoring


# ---------------------------------------------------------------------------
# conll
# ---------------------------------------------------------------------------

def format_conll(sentences, tags_per_sentence=None):
  """conll text: `token<TAB>tag` lines, a blank line after each sentence.

  Args:
    sentences: list of NerSentence.
    tags_per_sentence: list of tag lists, or None for the sentences' own tags (or none).
  """
  lines = []
  for index, sentence in enumerate(sentences):
    tags = sentence.tags if tags_per_sentence is None else tags_per_sentence[index]
    for position, token in enumerate(sentence.tokens):
      lines.append(token if tags is None else token + "\t" + tags[position])
    lines.append("")
  return "".join(line + "\n" for line in lines)


def write_conll_predictions(path, conll_file, predicted_tags):
  """Writes predict.txt: one line per line of the test file, in order.

  A token line becomes the line (trailing spaces and tabs removed) + TAB + its predicted
  tag; a `-DOCSTART-` line gets the tag O; blank lines stay as they are. With a tagged
  test file, each line is then `token gold pred`, conlleval's input.

  Args:
    path: the file to write.
    conll_file: the NerFile of the test file (formats.read_conll).
    predicted_tags: list [len(conll_file.sentences)] of tag lists.
  """
  _check_prediction_lengths(conll_file.sentences, predicted_tags)
  appended = {}
  for sentence, tags in zip(conll_file.sentences, predicted_tags):
    appended.update(zip(sentence.token_lines, tags))
  out = []
  for index, line in enumerate(conll_file.lines):
    tag = appended.get(index + 1)
    if (tag is None and not formats.is_blank(line)
        and formats.conll_columns(line)[0] == formats.DOCSTART):
      tag = ner_scoring.OUTSIDE
    out.append(line if tag is None else line.rstrip(" \t") + "\t" + tag)
  output_files.atomic_write_text(path, "".join(line + "\n" for line in out))


def _check_prediction_lengths(sentences, predicted_tags):
  """ValueError unless there is one tag list per sentence and one tag per token."""
  if len(predicted_tags) != len(sentences):
    raise ValueError("%d predictions for %d sentences" % (len(predicted_tags), len(sentences)))
  for sentence, tags in zip(sentences, predicted_tags):
    if len(tags) != len(sentence.tokens):
      raise ValueError("%d tags for the %d tokens of the sentence at %s line %d" % (
          len(tags), len(sentence.tokens), sentence.source_file, sentence.source_line))


def _check_span_lists(sentences, spans_per_sentence):
  """ValueError unless there is one span list per sentence and every span fits its
  sentence's tokens."""
  if len(spans_per_sentence) != len(sentences):
    raise ValueError("%d span lists for %d sentences" % (len(spans_per_sentence),
                                                         len(sentences)))
  for sentence, spans in zip(sentences, spans_per_sentence):
    for entity_type, start, end in spans:
      if not 0 <= start < end <= len(sentence.tokens):
        raise ValueError("span %r does not fit the %d tokens of the sentence at %s line %s"
                         % ((entity_type, start, end), len(sentence.tokens),
                            sentence.source_file, sentence.source_line))


def _own_spans(sentences, spans_per_sentence):
  """The span lists to write: the given ones (checked), else the sentences' own."""
  if spans_per_sentence is None:
    return [sentence.spans for sentence in sentences]
  _check_span_lists(sentences, spans_per_sentence)
  return spans_per_sentence


def _char_spans(sentence, spans):
  """(type, start, end exclusive) in characters of sentence.text of token spans, in
  formats.normalize_spans order."""
  result = []
  for entity_type, first, end in formats.normalize_spans(spans):
    start = sentence.token_starts[first]
    result.append((entity_type, start,
                   sentence.token_starts[end - 1] + len(sentence.tokens[end - 1])))
  return result


def _json_line(value):
  return json.dumps(value, ensure_ascii=False) + "\n"


# ---------------------------------------------------------------------------
# CLUENER
# ---------------------------------------------------------------------------

def cluener_label(sentence, spans):
  """CLUENER's "label" value of a sentence's spans: {type: {entity text: [[start, end]]}}.

  Args:
    sentence: the NerSentence.
    spans: list of (type, start, end) over its tokens, end exclusive.

  Returns:
    An OrderedDict. Offsets are characters of sentence.text with inclusive ends; types
    and texts keep their order of first appearance (by start, then end).
  """
  label = collections.OrderedDict()
  for entity_type, start, stop in _char_spans(sentence, spans):
    mentions = label.setdefault(entity_type, collections.OrderedDict())
    mentions.setdefault(sentence.text[start:stop], []).append([start, stop - 1])
  return label


def format_cluener(sentences, spans_per_sentence=None):
  """CLUENER training-format lines: {"id", "text", "label"} per sentence.

  Args:
    sentences: list of NerSentence.
    spans_per_sentence: list of span lists, or None for the sentences' own spans (no
      "label" for a sentence that has none).
  """
  lines = []
  for sentence, spans in zip(sentences, _own_spans(sentences, spans_per_sentence)):
    record = collections.OrderedDict([("id", sentence.example_id), ("text", sentence.text)])
    if spans is not None:
      record["label"] = cluener_label(sentence, spans)
    lines.append(_json_line(record))
  return "".join(lines)


def write_cluener_predictions(path, sentences, predicted_spans):
  """Writes predict.json, CLUENER's submission format: {"id", "label"} per line.

  Args:
    path: the file to write.
    sentences: list of NerSentence (the test file's).
    predicted_spans: list [len(sentences)] of span lists.

  Ids are those of the test file with their JSON type (the 0-based line index where a
  line had none); a sentence without entities has "label": {}.
  """
  _check_span_lists(sentences, predicted_spans)
  output_files.atomic_write_text(path, "".join(
      _json_line(collections.OrderedDict([("id", sentence.example_id),
                                          ("label", cluener_label(sentence, spans))]))
      for sentence, spans in zip(sentences, predicted_spans)))


# ---------------------------------------------------------------------------
# CMeEE
# ---------------------------------------------------------------------------

def cmeee_record(sentence, spans):
  """A CMeEE record of a sentence: {"text", "entities": [{"start_idx", "end_idx",
  "type", "entity"}]}, character offsets into sentence.text, end_idx inclusive; or
  {"text"} alone when spans is None (a test file)."""
  record = collections.OrderedDict([("text", sentence.text)])
  if spans is not None:
    record["entities"] = [
        collections.OrderedDict([("start_idx", start), ("end_idx", stop - 1),
                                 ("type", entity_type), ("entity", sentence.text[start:stop])])
        for entity_type, start, stop in _char_spans(sentence, spans)]
  return record


def _json_array_text(records):
  # Indented, one key per line, as CBLUE's own files are.
  return json.dumps(records, ensure_ascii=False, indent=2) + "\n"


def format_cmeee(sentences, spans_per_sentence=None):
  """A CMeEE file's text: a JSON array with one cmeee_record per sentence.

  Args:
    sentences: list of NerSentence.
    spans_per_sentence: list of span lists, or None for the sentences' own spans (no
      "entities" for a sentence that has none).
  """
  return _json_array_text([
      cmeee_record(sentence, spans)
      for sentence, spans in zip(sentences, _own_spans(sentences, spans_per_sentence))])


def write_cmeee_predictions(path, sentences, predicted_spans):
  """Writes CMeEE_test.json, CBLUE's submission format for CMeEE: the test file's records
  in order, each with its predicted "entities" ([] for none).

  Args:
    path: the file to write.
    sentences: list of NerSentence (the test file's).
    predicted_spans: list [len(sentences)] of span lists.
  """
  _check_span_lists(sentences, predicted_spans)
  output_files.atomic_write_text(path, _json_array_text([
      cmeee_record(sentence, spans) for sentence, spans in zip(sentences, predicted_spans)]))


# ---------------------------------------------------------------------------
# Entities with character offsets
# ---------------------------------------------------------------------------

def entity_records(sentence, spans):
  """A predict_entities.jsonl record: {"text", "entities": [{"type", "start", "end",
  "text"}]}, offsets into sentence.text, `end` exclusive.

  Args:
    sentence: the NerSentence.
    spans: list of (type, start, end) over its tokens, end exclusive; from tags,
      ner_scoring.entities(tags) (conlleval's reading of ill-formed sequences).

  Returns:
    An OrderedDict; entities in formats.normalize_spans order, nested ones included.
  """
  records = [collections.OrderedDict([("type", entity_type), ("start", start), ("end", stop),
                                      ("text", sentence.text[start:stop])])
             for entity_type, start, stop in _char_spans(sentence, spans)]
  return collections.OrderedDict([("text", sentence.text), ("entities", records)])


def write_predict_entities(path, sentences, predicted_spans):
  """Writes predict_entities.jsonl: one entity_records() line per sentence, in order.

  Args:
    path: the file to write.
    sentences: list of NerSentence.
    predicted_spans: list [len(sentences)] of span lists.
  """
  _check_span_lists(sentences, predicted_spans)
  output_files.atomic_write_text(path, "".join(
      _json_line(entity_records(sentence, spans))
      for sentence, spans in zip(sentences, predicted_spans)))
