# coding=utf-8
"""NER sentences written out: the conll and CLUENER formats with given tags, and the
prediction files with their entities' character offsets.

Outputs: predict.txt (conll: each test-file line with its predicted tag appended),
predict.json (CLUENER's submission format) and predict_entities.jsonl (both formats).

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



# ---------------------------------------------------------------------------
# CLUENER
# ---------------------------------------------------------------------------

def cluener_label(sentence, tags):
  """CLUENER's "label" value of a sentence's tags: {type: {entity text: [[start, end]]}}.

  Offsets are characters of sentence.text with inclusive ends; types and texts keep
  their order of first appearance.
  """
  label = collections.OrderedDict()
  for record in entity_records(sentence, tags)["entities"]:
    mentions = label.setdefault(record["type"], collections.OrderedDict())
    mentions.setdefault(record["text"], []).append([record["start"], record["end"] - 1])
  return label


def _json_line(value):
  return json.dumps(value, ensure_ascii=False) + "\n"


def format_cluener(sentences, tags_per_sentence=None):
  """CLUENER training-format lines: {"id", "text", "label"} per sentence.

  Args:
    sentences: list of NerSentence.
    tags_per_sentence: list of tag lists, or None for the sentences' own tags.
  """
  lines = []
  for index, sentence in enumerate(sentences):
    tags = sentence.tags if tags_per_sentence is None else tags_per_sentence[index]
    record = collections.OrderedDict([("id", sentence.example_id), ("text", sentence.text)])
    if tags is not None:
      record["label"] = cluener_label(sentence, tags)
    lines.append(_json_line(record))
  return "".join(lines)


def write_cluener_predictions(path, sentences, predicted_tags):
  """Writes predict.json, CLUENER's submission format: {"id", "label"} per line.

  Ids are those of the test file with their JSON type (the 0-based line index where a
  line had none); a sentence without entities has "label": {}.
  """
  _check_prediction_lengths(sentences, predicted_tags)
  output_files.atomic_write_text(path, "".join(
      _json_line(collections.OrderedDict([("id", sentence.example_id),
                                          ("label", cluener_label(sentence, tags))]))
      for sentence, tags in zip(sentences, predicted_tags)))



# ---------------------------------------------------------------------------
# Entities with character offsets
# ---------------------------------------------------------------------------

def entity_records(sentence, tags):
  """A predict_entities.jsonl record: {"text", "entities": [{"type", "start", "end",
  "text"}]}, offsets into sentence.text, `end` exclusive.

  Entities are read from `tags` by ner_scoring's decoding rule, so ill-formed sequences
  are read as conlleval reads them.
  """
  records = []
  for entity_type, first, end in ner_scoring.entities(tags):
    start = sentence.token_starts[first]
    stop = sentence.token_starts[end - 1] + len(sentence.tokens[end - 1])
    records.append(collections.OrderedDict([
        ("type", entity_type), ("start", start), ("end", stop),
        ("text", sentence.text[start:stop])]))
  return collections.OrderedDict([("text", sentence.text), ("entities", records)])


def write_predict_entities(path, sentences, predicted_tags):
  """Writes predict_entities.jsonl: one entity_records() line per sentence, in order."""
  _check_prediction_lengths(sentences, predicted_tags)
  output_files.atomic_write_text(path, "".join(
      _json_line(entity_records(sentence, tags))
      for sentence, tags in zip(sentences, predicted_tags)))

