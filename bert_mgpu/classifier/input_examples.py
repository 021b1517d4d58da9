# coding=utf-8
"""The classifier's data model: InputExample, InputFeatures and FeatureOptions, and the rows
of predict_detail.tsv.

The task processors (processors.py, glue_processors.py, clue_processors.py) read data files
into InputExamples; featurizing.py turns them into InputFeatures and records as the
FeatureOptions say. With --multi_label an example's label is a tuple of labels and its
label_ids the multi-hot vector.
"""

import collections


class InputExample(object):
  """One example for sequence (pair) classification."""

  def __init__(self, guid, text_a, text_b=None, label=None, source_file=None,
               source_line=None, raw_id=None):
    """Constructs an InputExample.

    Args:
      guid: unique id of the example (the file's `id` column, or split-index).
      text_a: untokenized text of the first sequence.
      text_b: untokenized text of the second sequence, or None for single
        sequence tasks.
      label: the label string, or None when the example has none (test files).
      source_file: path of the file the example was read from (error messages).
      source_line: 1-based line of the example in `source_file`.
      raw_id: the id as the data file holds it (a JSON int or string), or None: CLUE
        submissions write it back in its own JSON type (bert_mgpu/classifier/clue_submission.py).
    """
    self.guid = guid
    self.text_a = text_a
    self.text_b = text_b
    self.label = label
    self.source_file = source_file
    self.source_line = source_line
    self.raw_id = raw_id

  def __repr__(self):
    return "InputExample(guid=%r, text_a=%r, text_b=%r, label=%r)" % (
        self.guid, self.text_a, self.text_b, self.label)


class InputFeatures(object):
  """The model inputs of one example."""

  def __init__(self, input_ids, input_mask, segment_ids, label_id, is_real_example=True):
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.segment_ids = segment_ids
    self.label_id = label_id
    self.is_real_example = is_real_example


FeatureOptions = collections.namedtuple(
    "FeatureOptions", ["literal_special_tokens", "multi_label", "label_separator",
                       "long_text", "head_tokens", "doc_stride", "max_windows"],
    defaults=(False, False, ",", "truncate", None, 64, 8))
FeatureOptions.__doc__ = """Settings beyond the vocab, case and length that change the records.

Fields:
  literal_special_tokens: the tokenizer reads [MASK], [SEP]... written in the text as single
    tokens (tokenization.FullTokenizer).
  multi_label: examples hold label tuples; label_ids is their multi-hot [num_labels].
  label_separator: the separator the label fields were split at (multi_label only).
  long_text: a text longer than max_seq_length is cut at its end ("truncate", Google's), keeps
    its head and tail ("head_tail"), or is read whole in windows ("windows": windowed
    records, docs/FORMATS.md 6).
  head_tokens: head_tail: tokens kept from the start (None: a quarter of the room).
  doc_stride, max_windows: windows: tokens between window starts, and the most windows kept
    per text.
"""


def options_settings(options):
  """The FeatureOptions that are not the default, as a dict: what the feature cache key and
  model_settings.json add, so that keys and settings files of runs without them stay as
  they were."""
  settings = {}
  if options.literal_special_tokens:
    settings["literal_special_tokens"] = True
  if options.multi_label:
    settings.update(multi_label=True, label_separator=options.label_separator)
  if options.long_text == "head_tail":
    settings.update(long_text="head_tail", head_tokens=options.head_tokens)
  elif options.long_text == "windows":
    settings.update(long_text="windows", doc_stride=options.doc_stride,
                    max_windows=options.max_windows)
  return settings


def _one_line(text):
  return " ".join((text or "").split())


def example_rows(examples, columns, details, gold_column, separator=","):
  """The rows of predict_detail.tsv: a header, then per example its id, text_a, text_b
  (when any example has one), its `details` and its gold label (when any has one), each
  field on one line.

  Args:
    examples: the InputExamples, in order.
    columns: the header of the detail fields.
    details: per example, a list of strings.
    gold_column: the header of the gold field.
    separator: joins a multi-label gold set.

  Returns:
    list of lists of strings.
  """
  has_text_b = any(e.text_b is not None for e in examples)
  has_gold = any(e.label is not None for e in examples)
  rows = [["id", "text_a"] + (["text_b"] if has_text_b else []) + list(columns) +
          ([gold_column] if has_gold else [])]
  for example, detail in zip(examples, details):
    fields = [_one_line(str(example.guid)), _one_line(example.text_a)]
    if has_text_b:
      fields.append(_one_line(example.text_b))
    fields += detail
    if has_gold:
      gold = example.label
      fields.append(_one_line(separator.join(gold) if isinstance(gold, tuple) else gold))
    rows.append(fields)
  return rows
