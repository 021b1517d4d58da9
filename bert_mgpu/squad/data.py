# coding=utf-8
"""SQuAD-style data: reading the JSON, windowing contexts into features, and turning the
model's start/end logits back into answer texts (n-best). Their TFRecord files are
squad/records.py's.

SQuAD v1.1 and v2.0 JSON; CMRC 2018 and DRCD use the same format. Answers are located by
character offsets into the original context: FullTokenizer.tokenize_with_offsets says which
characters each word piece came from, through cleaning, lower-casing and accent stripping,
so training targets and predicted texts are exact for Chinese and accented text, where
Google's whitespace-word mapping slips.

No TensorFlow import: serving reading comprehension on ONNX Runtime windows and decodes
with it too.
"""

import collections
import json
import logging

import numpy as np

from bert_mgpu.data import sequence_windows
from bert_mgpu.data import text_files
from bert_mgpu.errors import UsageError
import tokenization

# TensorFlow's logger (tf.get_logger() is this logger on TF 1.15 and 2.x).
_LOGGER = logging.getLogger("tensorflow")

# Google's first feature id; ids only have to be unique within a file.
FIRST_UNIQUE_ID = 1000000000

# A null_odds value for a question with no possible non-null answer span.
NO_SPAN_NULL_ODDS = 1e6

# A span logit for padding positions: their softmax weight is then 0 (as in attention).
PADDING_LOGIT = -10000.0


# ---------------------------------------------------------------------------
# Reading SQuAD JSON
# ---------------------------------------------------------------------------

class SquadExample(object):
  """One question about one context.

  Attributes:
    qas_id: the question's "id".
    question_text, context_text: str.
    answer_start, answer_end: char span [start, end) of the training answer in
      context_text, or None (no answer, or not training).
    is_impossible: bool (v2).
    gold_answers: list of answer texts for scoring ([""] for an unanswerable question);
      None when the question has no "answers" key.
  """

  def __init__(self, qas_id, question_text, context_text, answer_start=None, answer_end=None,
               is_impossible=False, gold_answers=None):
    self.qas_id = qas_id
    self.question_text = question_text
    self.context_text = context_text
    self.answer_start = answer_start
    self.answer_end = answer_end
    self.is_impossible = is_impossible
    self.gold_answers = gold_answers


def _short(value, limit=60):
  text = json.dumps(value, ensure_ascii=False)
  return text if len(text) <= limit else text[:limit] + "..."


def load_squad_json(path):
  """Reads a SQuAD-format file; returns its "data" list.

  Raises:
    UsageError: unreadable file, UTF-16/32 or otherwise not UTF-8, invalid JSON (with the
      line and column), a key given twice in one object, or no "data" list.
  """
  text = text_files.read_text_file(path)
  try:
    dataset = text_files.parse_json(text)
  except text_files.DuplicateKeyError as e:
    key, first, second = e.args
    raise UsageError("%s: a JSON object has the key \"%s\" twice (%s and %s); JSON readers "
                     "keep only one of them. Give each key once." %
                     (path, key, _short(first), _short(second)))
  except RecursionError:
    raise UsageError("%s: the JSON is nested too deeply to read. SQuAD files are one JSON "
                     "object with a \"data\" list." % path)
  except ValueError as e:
    raise UsageError("%s: not valid JSON (%s). SQuAD files are one JSON object with a "
                     "\"data\" list." % (path, e))
  if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
    raise UsageError("%s: no top-level \"data\" list; it is not a SQuAD-format file." % path)
  return dataset["data"]


def _get(path, where, obj, key, kind):
  """obj[key], checked to be of `kind`; the error names the file and the JSON path.

  A JSON true/false is not an int here, and a string must not hold an unpaired surrogate.
  """
  if not isinstance(obj, dict) or key not in obj:
    raise UsageError("%s: %s has no \"%s\". Each article needs \"paragraphs\", each "
                     "paragraph \"context\" and \"qas\", each question \"id\", \"question\" "
                     "and \"answers\"." % (path, where, key))
  value = obj[key]
  if not isinstance(value, kind) or isinstance(value, bool):
    raise UsageError("%s: %s.%s is %r, expected a %s." % (
        path, where, key, value if len(repr(value)) < 80 else type(value).__name__,
        kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)))
  if isinstance(value, str):
    surrogate = text_files.find_surrogate(value)
    if surrogate:
      raise UsageError(
          "%s: %s.%s holds an unpaired surrogate \\u%04x at character %d (a broken \\u "
          "escape). Fix the escape (a character outside the BMP is a pair, e.g. "
          "\\ud83d\\ude00) or remove it." %
          (path, where, key, ord(surrogate[0]), surrogate[1]))
  return value


def locate_answer(context, answer_text, answer_start):
  """The char span [start, end) of a training answer in its context.

  The given answer_start is used when the text is there. Otherwise the occurrence nearest
  to it is taken: some CMRC/DRCD answers are off by a few characters.

  Returns:
    (start, end, moved) or None when the text is not in the context at all.
  """
  for text in (answer_text, answer_text.strip()):
    if not text:
      continue
    if context[answer_start:answer_start + len(text)] == text:
      return answer_start, answer_start + len(text), False
    found = []
    position = context.find(text)
    while position >= 0:  # every occurrence, overlapping ones too
      found.append(position)
      position = context.find(text, position + 1)
    if found:
      start = min(found, key=lambda position: abs(position - answer_start))
      return start, start + len(text), True
  return None


def read_squad_examples(input_file, is_training, version_2_with_negative):
  """Reads SQuAD JSON into SquadExamples.

  For training, each answerable question uses its first answer. An answer whose text
  is not in its context is skipped and counted, as Google's script skips it.

  Args:
    input_file: path of the JSON file.
    is_training: locate training answers (and require them).
    version_2_with_negative: questions may be unanswerable ("is_impossible").

  Returns:
    (list of SquadExample, dict of counts: "answers_not_found", "answers_moved").

  Raises:
    UsageError: malformed data, a duplicate question id, or a training question without
      an answer.
  """
  examples = []
  counts = collections.Counter()
  seen_ids = {}
  first_problem = {}
  for i, article in enumerate(load_squad_json(input_file)):
    paragraphs = _get(input_file, "data[%d]" % i, article, "paragraphs", list)
    for j, paragraph in enumerate(paragraphs):
      where = "data[%d].paragraphs[%d]" % (i, j)
      context = _get(input_file, where, paragraph, "context", str)
      for k, qa in enumerate(_get(input_file, where, paragraph, "qas", list)):
        qa_where = "%s.qas[%d]" % (where, k)
        qas_id = str(_get(input_file, qa_where, qa, "id", (str, int)))
        if qas_id in seen_ids:
          raise UsageError("%s: %s has id %r, which %s already has. Question ids must be "
                           "unique: predictions are keyed by them." %
                           (input_file, qa_where, qas_id, seen_ids[qas_id]))
        seen_ids[qas_id] = qa_where
        question = _get(input_file, qa_where, qa, "question", str)
        if not question.strip():
          raise UsageError("%s: %s (id %r) has an empty question. Give it its question "
                           "text or remove it." % (input_file, qa_where, qas_id))
        is_impossible = False
        if version_2_with_negative and "is_impossible" in qa:
          is_impossible = qa["is_impossible"]
          if is_impossible not in (True, False):  # 0 and 1 compare equal to them
            raise UsageError("%s: %s.is_impossible is %r; it must be true or false (a JSON "
                             "boolean, not a string)." % (input_file, qa_where, is_impossible))
          is_impossible = bool(is_impossible)
        answers = qa.get("answers", [])
        if not isinstance(answers, list):
          raise UsageError("%s: %s.answers is not a list." % (input_file, qa_where))
        gold = []
        for n, answer in enumerate(answers):
          gold.append(_get(input_file, "%s.answers[%d]" % (qa_where, n), answer, "text", str))
        if "answers" not in qa:
          gold = None  # Nothing to score against (a file with the answers taken out).
        elif is_impossible:
          gold = [""]
        example = SquadExample(qas_id, question, context, is_impossible=is_impossible,
                               gold_answers=gold)
        if is_training and not is_impossible:
          if not answers:
            raise UsageError(
                "%s: %s (id %r) has no answer. Every training question needs one; for "
                "SQuAD 2.0 data with unanswerable questions (\"is_impossible\": true) pass "
                "--version_2_with_negative." % (input_file, qa_where, qas_id))
          start = _get(input_file, qa_where + ".answers[0]", answers[0], "answer_start", int)
          if start < 0:
            # Python would count a negative offset from the end of the context.
            raise UsageError("%s: %s.answers[0].answer_start is %d; it is a character offset "
                             "into the context, 0 or more." % (input_file, qa_where, start))
          span = locate_answer(context, gold[0], start)
          if span is None:
            counts["answers_not_found"] += 1
            first_problem.setdefault("answers_not_found", qas_id)
            continue
          example.answer_start, example.answer_end, moved = span
          if moved:
            counts["answers_moved"] += 1
            first_problem.setdefault("answers_moved", qas_id)
        examples.append(example)
  if counts["answers_not_found"]:
    _LOGGER.warning("%s: skipped %d training question(s) whose answer text is not in the "
                    "context (first: id %s).", input_file, counts["answers_not_found"],
                    first_problem["answers_not_found"])
  if counts["answers_moved"]:
    _LOGGER.info("%s: %d answer(s) were not at their answer_start; the nearest occurrence "
                 "of the text was used (first: id %s).", input_file, counts["answers_moved"],
                 first_problem["answers_moved"])
  return examples, dict(counts)


# ---------------------------------------------------------------------------
# Features: [CLS] question [SEP] context window [SEP]
# ---------------------------------------------------------------------------

class InputFeatures(object):
  """One window of one example.

  Attributes:
    unique_id: int, unique in its file.
    example_index: index of the example in the example list.
    doc_span_index: which window of the example.
    input_ids, input_mask, segment_ids: lists of int [max_seq_length].
    token_starts, token_ends: lists [max_seq_length]: the char span in the context of
      the token at each position; -1 for question, special and padding positions.
    token_is_max_context: list of bool [max_seq_length]: whether this window gives the
      token at that position its most context (of the windows that hold it).
    start_position, end_position: training targets (0 = [CLS], no answer).
    is_impossible: training target has no answer in this window.
  """

  def __init__(self, **fields):
    self.__dict__.update(fields)


def max_context_flags(windows, window_index, best_windows=None):
  """For each token of a window: is this the window where it has the most context.

  Args:
    windows: list of (start, length).
    window_index: the window.
    best_windows: sequence_windows.max_context_windows(windows, ...), when already computed.
  """
  start, length = windows[window_index]
  if best_windows is None:
    best_windows = sequence_windows.max_context_windows(windows, max(s + n for s, n in windows))
  return [best_windows[position] == window_index for position in range(start, start + length)]


def answer_token_span(token_starts, token_ends, answer_start, answer_end):
  """The first and last context tokens that overlap the char span [answer_start, answer_end).

  Returns:
    (first, last) token indexes, or None when no token overlaps (an answer that is only
    whitespace or deleted characters).
  """
  overlapping = [i for i, (start, end) in enumerate(zip(token_starts, token_ends))
                 if start < answer_end and end > answer_start]
  if not overlapping:
    return None
  return overlapping[0], overlapping[-1]


def convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride,
                                 max_query_length, is_training, counts):
  """Yields the InputFeatures of every window of every example.

  A training answer outside a window makes that window a no-answer target ([CLS]), as
  in Google's script; such windows are counted in counts["windows_without_answer"].

  Args:
    examples: list of SquadExample.
    tokenizer: FullTokenizer.
    max_seq_length, doc_stride, max_query_length: Google's flags.
    is_training: compute start/end targets.
    counts: collections.Counter, updated.

  Raises:
    UsageError: the tokenizer's vocab lacks [CLS], [SEP] or [UNK] (raised at the first
      window, before any is yielded).
  """
  vocab = getattr(tokenizer, "vocab", None)  # None: a test's stand-in tokenizer
  missing = vocab is not None and tokenization.missing_special_token(vocab)
  if missing:
    raise UsageError("The vocab (--vocab_file) has no %s token, which every window needs. "
                     "Use the vocab.txt that came with the checkpoint." % missing)
  unique_id = FIRST_UNIQUE_ID
  context, context_tokens = None, None
  for example_index, example in enumerate(examples):
    query_tokens = tokenizer.tokenize(example.question_text)[:max_query_length]
    if example.context_text != context:  # The questions of a paragraph come together.
      context = example.context_text
      context_tokens = tokenizer.tokenize_with_offsets(context)
    doc_tokens, doc_starts, doc_ends = context_tokens
    answer_span = None
    if is_training and not example.is_impossible:
      answer_span = answer_token_span(doc_starts, doc_ends, example.answer_start,
                                      example.answer_end)
      if answer_span is None:
        counts["answers_without_tokens"] += 1
    max_tokens_for_doc = max_seq_length - len(query_tokens) - 3
    windows = sequence_windows.sliding_windows(len(doc_tokens), max_tokens_for_doc, doc_stride)
    best_windows = sequence_windows.max_context_windows(windows, len(doc_tokens))
    for window_index, (window_start, window_length) in enumerate(windows):
      tokens = ["[CLS]"] + query_tokens + ["[SEP]"]
      offset = len(tokens)  # position of the window's first token
      tokens += doc_tokens[window_start:window_start + window_length] + ["[SEP]"]
      segment_ids = [0] * offset + [1] * (window_length + 1)
      token_starts = [-1] * offset + doc_starts[window_start:window_start + window_length]
      token_ends = [-1] * offset + doc_ends[window_start:window_start + window_length]
      is_max_context = [False] * offset + max_context_flags(windows, window_index,
                                                            best_windows)
      input_ids = tokenizer.convert_tokens_to_ids(tokens)
      input_mask = [1] * len(input_ids)
      padding = max_seq_length - len(input_ids)
      input_ids += [0] * padding
      input_mask += [0] * padding
      segment_ids += [0] * padding
      token_starts += [-1] * (padding + 1)  # the final [SEP] too
      token_ends += [-1] * (padding + 1)
      is_max_context += [False] * (padding + 1)

      start_position = end_position = 0
      window_is_impossible = bool(example.is_impossible)
      if is_training and answer_span is not None:
        first, last = answer_span
        if window_start <= first and last < window_start + window_length:
          start_position = first - window_start + offset
          end_position = last - window_start + offset
        else:
          window_is_impossible = True
          counts["windows_without_answer"] += 1
      elif is_training:
        window_is_impossible = True
      counts["features"] += 1
      yield InputFeatures(
          unique_id=unique_id, example_index=example_index, doc_span_index=window_index,
          input_ids=input_ids, input_mask=input_mask, segment_ids=segment_ids,
          token_starts=token_starts, token_ends=token_ends,
          token_is_max_context=is_max_context, start_position=start_position,
          end_position=end_position, is_impossible=window_is_impossible)
      unique_id += 1


# ---------------------------------------------------------------------------
# Predictions: n-best spans per question
# ---------------------------------------------------------------------------

def _top_indexes(logits, n, allowed):
  """Indexes of the n largest logits among the `allowed` positions, largest first (ties:
  lower index first)."""
  allowed = np.flatnonzero(allowed)
  order = np.argsort(-np.asarray(logits)[allowed], kind="stable")
  return list(allowed[order[:n]])


def _softmax(scores):
  if not scores:
    return []
  scores = np.asarray(scores, dtype=np.float64)
  exp = np.exp(scores - scores.max())
  return list(exp / exp.sum())


# One answer candidate of a question: `text` is context[char_start:char_end]; the null
# (no-answer) entry has text "" and char_start -1.
Candidate = collections.namedtuple(
    "Candidate", ["score", "start_logit", "end_logit", "text", "char_start"])

QuestionAnswers = collections.namedtuple(
    "QuestionAnswers", ["nbest", "probabilities", "answer", "null_odds"])
QuestionAnswers.__doc__ = """The answers of one question (question_answers).

Fields:
  nbest: list of Candidate, best first, one per distinct text (with the null entry on v2).
  probabilities: list of float, the softmax of the nbest scores.
  answer: the chosen Candidate (predictions.json's text; on v2 the null entry when the null
    odds exceed the threshold).
  null_odds: v2: the null score minus the best non-null score (NO_SPAN_NULL_ODDS without
    a span); v1: None.
"""


def question_answers(example, features, start_logits, end_logits, n_best_size,
                     max_answer_length, version_2_with_negative, null_score_diff_threshold):
  """The n-best answers of one question and the one chosen, as Google's write_predictions.

  A candidate span starts at one of the n_best_size highest start logits and ends at one
  of the highest end logits among the context tokens of one window, ends no earlier than
  it starts, has at most max_answer_length tokens and starts on a token this window gives
  its most context. Its text is cut from the original context by character offsets.

  Args:
    example: SquadExample.
    features: its windows (InputFeatures, without id lists), in order.
    start_logits, end_logits: float arrays [len(features), seq] (seq >= each window's).
    n_best_size, max_answer_length, version_2_with_negative, null_score_diff_threshold:
      Google's flags.

  Returns:
    QuestionAnswers.
  """
  candidates = []
  null = None
  for feature, starts, ends in zip(features, start_logits, end_logits):
    if version_2_with_negative:
      score = float(starts[0] + ends[0])
      if null is None or score < null.score:
        null = Candidate(score, float(starts[0]), float(ends[0]), "", -1)
    # The n best starts and ends among the context tokens (Google's takes them among all
    # positions, so [CLS] and question tokens could use up a small n_best_size).
    in_context = np.asarray(feature.token_starts) >= 0
    top_ends = _top_indexes(ends, n_best_size, in_context)
    for first in _top_indexes(starts, n_best_size, in_context):
      if not feature.token_is_max_context[first]:
        continue
      for last in top_ends:
        if last < first or last - first + 1 > max_answer_length:
          continue
        begin, end = feature.token_starts[first], feature.token_ends[last]
        candidates.append(Candidate(float(starts[first] + ends[last]), float(starts[first]),
                                    float(ends[last]), example.context_text[begin:end],
                                    begin))
  entries = candidates + ([null] if null is not None else [])
  entries.sort(key=lambda entry: -entry.score)  # stable: ties keep the candidates' order
  nbest, seen = [], set()
  for entry in entries:
    if entry.text in seen:
      continue
    seen.add(entry.text)
    nbest.append(entry)
    if len(nbest) >= n_best_size:
      break
  if null is not None and "" not in seen:
    nbest.append(null)
  if not nbest:  # No valid span at all (e.g. an empty context).
    nbest.append(Candidate(0.0, 0.0, 0.0, "", -1))
  probabilities = [float(p) for p in _softmax([entry.score for entry in nbest])]
  if not version_2_with_negative:
    return QuestionAnswers(nbest, probabilities, nbest[0], None)
  # From all candidates, not only the n best: with a small n_best_size the null entry
  # could crowd out every span.
  best_non_null = next((entry for entry in entries if entry.text), None)
  if best_non_null is None or null is None:  # no span (null is None: no window either)
    return QuestionAnswers(nbest, probabilities, null or nbest[0], NO_SPAN_NULL_ODDS)
  null_odds = null.score - best_non_null.start_logit - best_non_null.end_logit
  answer = null if null_odds > null_score_diff_threshold else best_non_null
  return QuestionAnswers(nbest, probabilities, answer, null_odds)


def answer_probability(answers):
  """The chosen answer's probability: its softmax over its question's n-best list.

  With n_best_size=1 on v2 the null entry can hold the one place while the threshold still
  picks the best span; that span's probability is then the softmax over the list and it.
  """
  for entry, probability in zip(answers.nbest, answers.probabilities):
    if entry.text == answers.answer.text:
      return probability
  return _softmax([e.score for e in answers.nbest] + [answers.answer.score])[-1]


def features_by_example(features):
  """The windows of each example: dict example_index -> list of indexes into features."""
  by_example = collections.defaultdict(list)
  for index, feature in enumerate(features):
    by_example[feature.example_index].append(index)
  return by_example


def predict_answers(examples, features, start_logits, end_logits, n_best_size,
                    max_answer_length, version_2_with_negative, null_score_diff_threshold):
  """Turns per-window logits into the prediction files' answers (question_answers).

  Args:
    examples: list of SquadExample.
    features: list of InputFeatures (without id lists), in the order of the logits.
    start_logits, end_logits: float arrays [num_features, max_seq_length].
    n_best_size, max_answer_length, version_2_with_negative, null_score_diff_threshold:
      Google's flags.

  Returns:
    (predictions {id: text}, nbest {id: list of dicts}, null_odds {id: float}, empty for v1),
    each with every question of `examples`, in order.
  """
  windows = features_by_example(features)
  predictions = collections.OrderedDict()
  all_nbest = collections.OrderedDict()
  null_odds = collections.OrderedDict()
  for example_index, example in enumerate(examples):
    indexes = windows[example_index]
    answers = question_answers(
        example, [features[i] for i in indexes], [start_logits[i] for i in indexes],
        [end_logits[i] for i in indexes], n_best_size, max_answer_length,
        version_2_with_negative, null_score_diff_threshold)
    all_nbest[example.qas_id] = [
        collections.OrderedDict([("text", entry.text), ("probability", probability),
                                 ("start_logit", entry.start_logit),
                                 ("end_logit", entry.end_logit)])
        for entry, probability in zip(answers.nbest, answers.probabilities)]
    predictions[example.qas_id] = answers.answer.text
    if version_2_with_negative:
      null_odds[example.qas_id] = answers.null_odds
  return predictions, all_nbest, null_odds
