# coding=utf-8
"""The CLUE classification task processors: tnews, iflytek, afqmc, cmnli, ocnli, csl and
cluewsc2020.

{train,dev,test}.json as CLUE ships them (OCNLI: train.50k.json first), one JSON object per
line, mapped as docs/FORMATS.md 12 says. bert_mgpu/classifier/clue_submission.py writes
predictions in CLUE's submission format.
"""

import collections
import json

import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import file_readers
from bert_mgpu.classifier import input_examples
from bert_mgpu.classifier import processors
from bert_mgpu.data.text_files import line_error

# Child of TensorFlow's logger: the messages appear next to tf.logging's and
# follow tf.logging.set_verbosity(). The classifier's data modules share it, under the
# name their log lines have always shown.
_LOGGER = tf.get_logger().getChild("classifier_data")


class _ClueProcessor(processors.JsonlProcessor):
  """CLUE classification: {train,dev,test}.json as CLUE ships them, one JSON object per line.

  KEYS name the keys of the label, the texts and the id; `_texts` builds the texts where
  CLUE's baseline does more than read a key (CSL, CLUEWSC2020). Test objects need no
  label. Each example keeps its id as the file holds it (raw_id, often a JSON integer):
  --clue_submission writes it back in that type. Train and dev objects labelled with one
  of NO_GOLD_LABELS are dropped and counted in the log, as CLUE's baseline drops them.
  """

  SPLIT_FILES = {"train": ("train.json",), "dev": ("dev.json",), "test": ("test.json",)}
  KEYS = collections.OrderedDict([
      ("label", ("label",)), ("text_a", ("sentence",)), ("text_b", ()), ("id", ("id",))])
  NO_GOLD_LABELS = ()

  def _read_examples(self, path, split):
    examples = []
    num_dropped = 0
    for line_number, obj in file_readers.json_objects(path):
      label = processors.json_value(path, line_number, obj, self.KEYS["label"])
      label = label.strip() if label is not None else ""
      if label in self.NO_GOLD_LABELS:
        if split != "test":
          num_dropped += 1
          continue
        label = ""
      if not label and split != "test":
        raise line_error(path, line_number, "the object has no label (no %s key, null or "
                         "empty): %s" % (" / ".join(self.KEYS["label"]), _shown_object(obj)),
                         "give every training and dev example a label")
      text_a, text_b = self._texts(path, line_number, obj)
      guid = processors.json_value(path, line_number, obj, self.KEYS["id"])
      if guid is None or not guid.strip():
        guid = "%s-%d" % (split, len(examples))
      raw_id = next((obj[key] for key in self.KEYS["id"] if key in obj), None)
      examples.append(input_examples.InputExample(guid, text_a, text_b, label or None, path,
                                                  line_number, raw_id=raw_id))
    if self.NO_GOLD_LABELS and split != "test":
      _LOGGER.info("%s: %d of %d examples dropped: labelled %s (no gold label), as CLUE's "
                   "baseline drops them", path, num_dropped, num_dropped + len(examples),
                   " or ".join(self.NO_GOLD_LABELS))
    return examples

  def _texts(self, path, line_number, obj):
    """(text_a, text_b or None) of one object."""
    text_a = _required_json_value(path, line_number, obj, self.KEYS["text_a"])
    text_b = None
    if self.KEYS["text_b"]:
      text_b = _required_json_value(path, line_number, obj, self.KEYS["text_b"]) or None
    return text_a, text_b


def _shown_object(obj):
  return file_readers.quote(json.dumps(obj, ensure_ascii=False))


def _required_json_value(path, line_number, obj, keys):
  """_json_value of a key the object must have: a UsageError when it is absent or null."""
  value = processors.json_value(path, line_number, obj, keys)
  if value is None:
    raise line_error(path, line_number, "the object has no %s key (or it is null): %s"
                     % (" / ".join(keys), _shown_object(obj)),
                     "give every object the keys of the task's CLUE files")
  return value


class TnewsProcessor(_ClueProcessor):
  """TNEWS: 15 news categories, labels "100".."116" without "105" and "111".

  The fixed label order is the one of CLUE's baseline scripts, so label ids
  match models fine-tuned with them.
  """

  FIXED_LABELS = tuple(str(100 + i) for i in range(17) if i not in (5, 11))


class IflytekProcessor(_ClueProcessor):
  """IFLYTEK: 119 app categories, labels "0".."118" (CLUE's order)."""

  FIXED_LABELS = tuple(str(i) for i in range(119))


class _SentencePairProcessor(_ClueProcessor):
  """CLUE's sentence pairs: text_a = sentence1, text_b = sentence2."""

  KEYS = collections.OrderedDict([
      ("label", ("label",)), ("text_a", ("sentence1",)), ("text_b", ("sentence2",)),
      ("id", ("id",))])


class AfqmcProcessor(_SentencePairProcessor):
  """AFQMC: do two questions mean the same? Labels "0", "1" (CLUE's order)."""

  FIXED_LABELS = ("0", "1")


class CmnliProcessor(_SentencePairProcessor):
  """CMNLI: natural language inference, CLUE's order of the three labels.

  Pairs labelled "-" (the annotators did not agree) are dropped from train and dev.
  """

  FIXED_LABELS = ("contradiction", "entailment", "neutral")
  NO_GOLD_LABELS = ("-",)


class OcnliProcessor(CmnliProcessor):
  """OCNLI: CMNLI's format; the training file is train.50k.json (CLUE's), else train.json."""

  SPLIT_FILES = {"train": ("train.50k.json", "train.json"), "dev": ("dev.json",),
                 "test": ("test.json",)}


class CslProcessor(_ClueProcessor):
  """CSL: are all the `keyword`s those of the abstract `abst`? Labels "0", "1".

  As in CLUE's baseline, text_a is the keyword list joined by spaces, text_b the abstract.
  """

  KEYS = collections.OrderedDict([
      ("label", ("label",)), ("text_a", ("keyword",)), ("text_b", ("abst",)), ("id", ("id",))])
  FIXED_LABELS = ("0", "1")

  def _texts(self, path, line_number, obj):
    keywords = obj.get("keyword")
    if not (isinstance(keywords, list) and all(isinstance(k, str) for k in keywords)):
      raise line_error(path, line_number,
                       "key 'keyword' must hold a JSON list of strings: %s" % _shown_object(obj),
                       "write the keywords as a list, e.g. \"keyword\": [\"a\", \"b\"]")
    text_a = " ".join(keywords)
    file_readers.check_no_surrogates(text_a, lambda problem: line_error(
        path, line_number, "key 'keyword' holds %s" % problem, "fix the \\u escape"))
    return text_a, _required_json_value(path, line_number, obj, self.KEYS["text_b"])


class Cluewsc2020Processor(_ClueProcessor):
  """CLUEWSC2020: does the pronoun span2 refer to span1? Labels "true", "false" (CLUE's order).

  text_a is `text` with span1 marked _so_ and span2 [so], as CLUE's baseline WSC
  processor marks them; the id is `idx`. Objects: {"target": {"span1_index": 5,
  "span1_text": ..., "span2_index": 37, "span2_text": ...}, "idx": 261, "label": "false",
  "text": ...}, the indexes counting characters from 0.
  """

  KEYS = collections.OrderedDict([
      ("label", ("label",)), ("text_a", ("text",)), ("text_b", ()), ("id", ("idx",))])
  FIXED_LABELS = ("true", "false")
  # The span, and the markers before and after it.
  SPAN_MARKERS = (("span1", "_", "_"), ("span2", "[", "]"))

  def _texts(self, path, line_number, obj):
    text = _required_json_value(path, line_number, obj, self.KEYS["text_a"])
    target = obj.get("target")
    if not isinstance(target, dict):
      raise line_error(path, line_number, "the object has no 'target' object with the spans: "
                       "%s" % _shown_object(obj), "give every object its target spans")
    # (position, 0 for a closing / 1 for an opening marker, marker): at a position where one
    # span ends and the other starts, the first one is closed before the next is opened.
    inserts = []
    for span, opening, closing in self.SPAN_MARKERS:
      start, end = _wsc_span(path, line_number, target, span, text)
      inserts += [(start, 1, opening), (end, 0, closing)]
    pieces = []
    done = 0
    for position, _, marker in sorted(inserts):
      pieces += [text[done:position], marker]
      done = position
    return "".join(pieces) + text[done:], None


def _wsc_span(path, line_number, target, span, text):
  """(start, end) of a CLUEWSC2020 span in `text`; a UsageError unless its text is there."""
  index_key, text_key = span + "_index", span + "_text"
  index, span_text = target.get(index_key), target.get(text_key)
  if isinstance(index, bool) or not isinstance(index, int) or not isinstance(span_text, str) \
      or not span_text:
    raise line_error(path, line_number, "the target needs %s (an integer) and %s (a non-empty "
                     "string): %s" % (index_key, text_key, _shown_object(target)),
                     "give both spans of every object")
  found = text[index:index + len(span_text)] if index >= 0 else ""
  if found != span_text:
    raise line_error(path, line_number, "%s %s does not match the text at %s %d (%s)"
                     % (text_key, file_readers.quote(span_text), index_key, index,
                        file_readers.quote(found)),
                     "fix the span: %s counts the characters of text from 0" % index_key)
  return index, index + len(span_text)
