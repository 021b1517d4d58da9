# coding=utf-8
"""Fine-tunes BERT for SQuAD-style reading comprehension on every GPU.

Reads SQuAD JSON (v1.1, and v2.0 with --version_2_with_negative). CMRC 2018 and
DRCD use the same JSON and work as they are.

Answers are located by character offsets into the original context:
FullTokenizer.tokenize_with_offsets says which characters each word piece came
from, through cleaning, lower-casing and accent stripping. Training targets and
predicted answer texts are therefore exact for Chinese text (which has no spaces
between words) and for accented text, where Google's word-based mapping slips.

Outputs in --output_dir, with --do_predict:
  predictions.json        {id: answer text}
  nbest_predictions.json  {id: [{text, probability, start_logit, end_logit}, ...]}
  null_odds.json          {id: null score - best non-null score} (v2 only)
  eval_results.txt        exact_match, f1 (and the v2 figures), when the predict file
                          has answers: SQuAD's official scoring for English, CMRC
                          2018's character-level scoring for Chinese (--scoring).

Training and prediction run on the shared multi-tower loop of multigpu.py.
"""

import collections
import json
import os
import re
import string
import unicodedata

import numpy as np
import tensorflow.compat.v1 as tf

import modeling
import multigpu
import tokenization
from multigpu import UsageError, atomic_write_text

# Google's first feature id; ids only have to be unique within a file.
FIRST_UNIQUE_ID = 1000000000

# A null_odds value for a question with no possible non-null answer span.
NO_SPAN_NULL_ODDS = 1e6


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


def load_squad_json(path):
  """Reads a SQuAD-format file; returns its "data" list.

  Raises:
    UsageError: unreadable file, invalid JSON (with the line and column), or no "data" list.
  """
  try:
    with open(path, "rb") as f:
      raw = f.read()
  except (IOError, OSError) as e:
    raise UsageError("%s: cannot read it (%s)." % (path, e))
  try:
    text = raw.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    line = raw[:e.start].count(b"\n") + 1
    raise UsageError("%s line %d: not UTF-8 (byte %d). Save the file as UTF-8." %
                     (path, line, e.start))
  try:
    dataset = json.loads(text)
  except ValueError as e:
    raise UsageError("%s: not valid JSON (%s). SQuAD files are one JSON object with a "
                     "\"data\" list." % (path, e))
  if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
    raise UsageError("%s: no top-level \"data\" list; it is not a SQuAD-format file." % path)
  return dataset["data"]


def _get(path, where, obj, key, kind):
  """obj[key], checked to be of `kind`; the error names the file and the JSON path."""
  if not isinstance(obj, dict) or key not in obj:
    raise UsageError("%s: %s has no \"%s\". Each article needs \"paragraphs\", each "
                     "paragraph \"context\" and \"qas\", each question \"id\", \"question\" "
                     "and \"answers\"." % (path, where, key))
  value = obj[key]
  if not isinstance(value, kind):
    raise UsageError("%s: %s.%s is %r, expected a %s." % (
        path, where, key, value if len(repr(value)) < 80 else type(value).__name__,
        kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)))
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
          if isinstance(start, bool):
            raise UsageError("%s: %s.answers[0].answer_start is %r, expected a character "
                             "offset." % (input_file, qa_where, start))
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
    tf.logging.warning("%s: skipped %d training question(s) whose answer text is not in the "
                       "context (first: id %s).", input_file, counts["answers_not_found"],
                       first_problem["answers_not_found"])
  if counts["answers_moved"]:
    tf.logging.info("%s: %d answer(s) were not at their answer_start; the nearest occurrence "
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


def doc_windows(num_doc_tokens, max_tokens_for_doc, doc_stride):
  """The (start, length) windows over a context of `num_doc_tokens` tokens.

  Windows start every doc_stride tokens until one reaches the end. An empty context
  still gets one empty window, so its question is predicted (as no answer).
  """
  windows = []
  start = 0
  while True:
    length = min(num_doc_tokens - start, max_tokens_for_doc)
    windows.append((start, length))
    if start + length >= num_doc_tokens:
      return windows
    start += min(length, doc_stride)


def best_context_windows(windows, num_doc_tokens):
  """For each context token, the window that gives it the most context.

  A token's context in a window is min(tokens to its left, tokens to its right), plus
  a small bonus for longer windows to break ties; the first such window wins, as in
  Google's script.

  Returns:
    list of int [num_doc_tokens], window indexes.
  """
  best_scores = [None] * num_doc_tokens
  best_windows = [0] * num_doc_tokens
  for index, (start, length) in enumerate(windows):
    for position in range(start, start + length):
      score = min(position - start, start + length - 1 - position) + 0.01 * length
      if best_scores[position] is None or score > best_scores[position]:
        best_scores[position], best_windows[position] = score, index
  return best_windows


def max_context_flags(windows, window_index, best_windows=None):
  """For each token of a window: is this the window where it has the most context.

  Args:
    windows: list of (start, length).
    window_index: the window.
    best_windows: best_context_windows(windows, ...), when already computed.
  """
  start, length = windows[window_index]
  if best_windows is None:
    best_windows = best_context_windows(windows, max(s + n for s, n in windows))
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
  """
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
    windows = doc_windows(len(doc_tokens), max_tokens_for_doc, doc_stride)
    best_windows = best_context_windows(windows, len(doc_tokens))
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


def serialize_features(feature, is_training):
  """A tf.train.Example of one window (Google's SQuAD feature names)."""
  fields = collections.OrderedDict([
      ("unique_ids", multigpu.int64_feature([feature.unique_id])),
      ("input_ids", multigpu.int64_feature(feature.input_ids)),
      ("input_mask", multigpu.int64_feature(feature.input_mask)),
      ("segment_ids", multigpu.int64_feature(feature.segment_ids)),
  ])
  if is_training:
    fields["start_positions"] = multigpu.int64_feature([feature.start_position])
    fields["end_positions"] = multigpu.int64_feature([feature.end_position])
    fields["is_impossible"] = multigpu.int64_feature([int(feature.is_impossible)])
  return tf.train.Example(features=tf.train.Features(feature=fields)).SerializeToString()


def input_feature_spec(max_seq_length, is_training):
  """The feature spec of serialize_features' records."""
  spec = {
      "unique_ids": tf.FixedLenFeature([], tf.int64),
      "input_ids": tf.FixedLenFeature([max_seq_length], tf.int64),
      "input_mask": tf.FixedLenFeature([max_seq_length], tf.int64),
      "segment_ids": tf.FixedLenFeature([max_seq_length], tf.int64),
  }
  if is_training:
    spec["start_positions"] = tf.FixedLenFeature([], tf.int64)
    spec["end_positions"] = tf.FixedLenFeature([], tf.int64)
    spec["is_impossible"] = tf.FixedLenFeature([], tf.int64)
  return spec


def write_features(features, path, is_training, keep_metadata):
  """Writes features to a TFRecord file (atomically: multigpu.write_records_atomically).

  Args:
    features: iterable of InputFeatures.
    path: the TFRecord file.
    is_training: write the targets.
    keep_metadata: return the features without their id lists (for prediction).

  Returns:
    (number written, list of InputFeatures kept, or []).
  """
  kept = []

  def records():
    for feature in features:
      yield serialize_features(feature, is_training)
      if keep_metadata:
        del feature.input_ids, feature.input_mask, feature.segment_ids
        kept.append(feature)

  count = multigpu.write_records_atomically(path, records())
  return count, kept


# ---------------------------------------------------------------------------
# The model head
# ---------------------------------------------------------------------------

def create_model_fn(bert_config):
  """Returns model_fn(features, is_training): BERT + Google's span head.

  The head is cls/squad/output_weights [2, hidden] and cls/squad/output_bias [2], as in
  Google's run_squad.py, so the checkpoints load there. The loss is Google's: the mean
  of the start and end cross-entropies over all positions.
  """
  def model_fn(features, is_training):
    model = modeling.BertModel(
        config=bert_config, is_training=is_training, input_ids=features["input_ids"],
        input_mask=features["input_mask"], token_type_ids=features["segment_ids"])
    sequence_output = model.get_sequence_output()  # [batch, seq, hidden]
    batch_size, seq_length, hidden_size = modeling.get_shape_list(sequence_output,
                                                                  expected_rank=3)
    output_weights = tf.get_variable(
        "cls/squad/output_weights", [2, hidden_size],
        initializer=tf.truncated_normal_initializer(stddev=0.02))
    output_bias = tf.get_variable("cls/squad/output_bias", [2],
                                  initializer=tf.zeros_initializer())
    flat_output = tf.reshape(sequence_output, [batch_size * seq_length, hidden_size])
    logits = tf.nn.bias_add(tf.matmul(flat_output, output_weights, transpose_b=True),
                            output_bias)  # [batch * seq, 2]
    logits = tf.transpose(tf.reshape(logits, [batch_size, seq_length, 2]), [2, 0, 1])
    start_logits, end_logits = logits[0], logits[1]  # [batch, seq] each
    outputs = {"unique_ids": features["unique_ids"], "start_logits": start_logits,
               "end_logits": end_logits}
    if "start_positions" in features:
      def position_loss(position_logits, positions):
        log_probs = tf.nn.log_softmax(position_logits, axis=-1)  # [batch, seq]
        one_hot = tf.one_hot(positions, depth=seq_length, dtype=tf.float32)
        return -tf.reduce_mean(tf.reduce_sum(one_hot * log_probs, axis=-1))
      outputs["loss"] = (position_loss(start_logits, features["start_positions"]) +
                         position_loss(end_logits, features["end_positions"])) / 2.0
    return outputs
  return model_fn


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


def predict_answers(examples, features, start_logits, end_logits, n_best_size,
                    max_answer_length, version_2_with_negative, null_score_diff_threshold):
  """Turns per-window logits into answers, as Google's write_predictions does.

  A candidate span starts at one of the n_best_size highest start logits and ends at one
  of the highest end logits among the context tokens of one window, ends no earlier than
  it starts, has at most max_answer_length tokens and starts on a token this window gives
  its most context. Its text is cut from the original context by character offsets.

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
  features_by_example = collections.defaultdict(list)
  for index, feature in enumerate(features):
    features_by_example[feature.example_index].append(index)
  predictions = collections.OrderedDict()
  all_nbest = collections.OrderedDict()
  null_odds = collections.OrderedDict()
  for example_index, example in enumerate(examples):
    candidates = []  # (score, start_logit, end_logit, char_start, char_end)
    null_score, null_start_logit, null_end_logit = None, 0.0, 0.0
    for index in features_by_example[example_index]:
      feature = features[index]
      starts, ends = start_logits[index], end_logits[index]
      if version_2_with_negative:
        score = float(starts[0] + ends[0])
        if null_score is None or score < null_score:
          null_score, null_start_logit, null_end_logit = score, float(starts[0]), float(ends[0])
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
          candidates.append((float(starts[first] + ends[last]), float(starts[first]),
                             float(ends[last]), feature.token_starts[first],
                             feature.token_ends[last]))
    entries = [(score, start_logit, end_logit, example.context_text[begin:end])
               for score, start_logit, end_logit, begin, end in candidates]
    if null_score is not None:
      entries.append((null_score, null_start_logit, null_end_logit, ""))
    entries.sort(key=lambda entry: -entry[0])
    nbest, seen = [], set()
    for entry in entries:
      if entry[3] in seen:
        continue
      seen.add(entry[3])
      nbest.append(entry)
      if len(nbest) >= n_best_size:
        break
    if null_score is not None and "" not in seen:
      nbest.append((null_score, null_start_logit, null_end_logit, ""))
    if not nbest:  # No valid span at all (e.g. an empty context).
      nbest.append((0.0, 0.0, 0.0, ""))
    probabilities = _softmax([entry[0] for entry in nbest])
    all_nbest[example.qas_id] = [
        collections.OrderedDict([("text", text), ("probability", float(probability)),
                                 ("start_logit", start_logit), ("end_logit", end_logit)])
        for (_, start_logit, end_logit, text), probability in zip(nbest, probabilities)]
    # From all candidates, not only the n best: with a small n_best_size the null entry
    # could crowd out every span.
    best_non_null = next((entry for entry in entries if entry[3]), None)
    if not version_2_with_negative:
      predictions[example.qas_id] = nbest[0][3]
      continue
    if best_non_null is None:
      null_odds[example.qas_id] = NO_SPAN_NULL_ODDS
      predictions[example.qas_id] = ""
      continue
    score_diff = null_score - best_non_null[1] - best_non_null[2]
    null_odds[example.qas_id] = score_diff
    predictions[example.qas_id] = "" if score_diff > null_score_diff_threshold \
        else best_non_null[3]
  return predictions, all_nbest, null_odds


# ---------------------------------------------------------------------------
# Scoring: SQuAD's official rules for English, CMRC 2018's for Chinese
# ---------------------------------------------------------------------------

_ENGLISH_PUNCTUATION = frozenset(string.punctuation)


def normalize_english_answer(text):
  """SQuAD's normalization: lower case, no punctuation, no articles, single spaces."""
  text = "".join(char for char in text.lower() if char not in _ENGLISH_PUNCTUATION)
  text = re.sub(r"\b(a|an|the)\b", " ", text)
  return " ".join(text.split())


def _token_f1(predicted_tokens, gold_tokens):
  """F1 of the bag-of-tokens overlap; two empty answers agree (F1 1), one empty gives 0."""
  if not predicted_tokens or not gold_tokens:
    return float(predicted_tokens == gold_tokens)
  common = collections.Counter(predicted_tokens) & collections.Counter(gold_tokens)
  same = sum(common.values())
  if same == 0:
    return 0.0
  precision = same / float(len(predicted_tokens))
  recall = same / float(len(gold_tokens))
  return 2 * precision * recall / (precision + recall)


def english_exact_and_f1(prediction, gold):
  """SQuAD v1.1/v2.0 exact match and F1 of one prediction against one gold answer."""
  exact = float(normalize_english_answer(prediction) == normalize_english_answer(gold))
  return exact, _token_f1(normalize_english_answer(prediction).split(),
                          normalize_english_answer(gold).split())


# The characters CMRC 2018's official script deletes before comparing answers.
_CMRC_DELETED_CHARS = frozenset(
    u"-:_*^/\\~`+=\uff0c\u3002\uff1a\uff1f\uff01\u201c\u201d\uff1b\u2019\u300a\u300b"
    u"\u00b7\u3001\u300c\u300d\uff08\uff09\uff0d\uff5e\u300e\u300f")


def _is_cmrc_chinese(char):
  """CMRC 2018's test for a Chinese character: U+4E00..U+9FA5."""
  return u"\u4e00" <= char <= u"\u9fa5"


def _split_latin(text):
  """Words of non-Chinese text: split on whitespace, punctuation kept as its own segment
  except "." and "," inside a number (what NLTK's word_tokenize, which CMRC 2018 uses, does
  in the common cases)."""
  segments = []
  for word in text.split():
    run = []
    for index, char in enumerate(word):
      inside_number = (char in ".," and 0 < index < len(word) - 1 and
                       word[index - 1].isdigit() and word[index + 1].isdigit())
      if not inside_number and (unicodedata.category(char).startswith("P") or
                                char in _ENGLISH_PUNCTUATION):
        if run:
          segments.append("".join(run))
          run = []
        segments.append(char)
      else:
        run.append(char)
    if run:
      segments.append("".join(run))
  return segments


def chinese_segments(text):
  """CMRC 2018's segments of an answer: lower-cased and stripped, the characters on its list
  deleted, each Chinese character alone, other text split into words."""
  segments, latin = [], []
  for char in text.lower().strip():
    if char in _CMRC_DELETED_CHARS:
      continue
    if _is_cmrc_chinese(char):
      segments.extend(_split_latin("".join(latin)))
      latin = []
      segments.append(char)
    else:
      latin.append(char)
  segments.extend(_split_latin("".join(latin)))
  return segments


def _cmrc_exact_text(text):
  """What CMRC 2018's exact match compares: lower-cased, stripped, listed characters deleted."""
  return "".join(char for char in text.lower().strip() if char not in _CMRC_DELETED_CHARS)


def _longest_common_run(first, second):
  """Length of the longest common contiguous run of two sequences (CMRC's "LCS")."""
  best = 0
  previous = [0] * (len(second) + 1)
  for a in first:
    current = [0] * (len(second) + 1)
    for j, b in enumerate(second):
      if a == b:
        current[j + 1] = previous[j] + 1
        best = max(best, current[j + 1])
    previous = current
  return best


def chinese_exact_and_f1(prediction, gold):
  """CMRC 2018 exact match and character-level F1 of one prediction against one answer.

  F1 counts the longest common run of segments, as CMRC 2018's official script does. Two
  empty answers (SQuAD 2.0-style unanswerable questions, which CMRC 2018 lacks) agree.
  """
  predicted, expected = chinese_segments(prediction), chinese_segments(gold)
  exact = float(_cmrc_exact_text(prediction) == _cmrc_exact_text(gold))
  if not predicted or not expected:
    return exact, float(predicted == expected)
  common = _longest_common_run(predicted, expected)
  if common == 0:
    return exact, 0.0
  precision = common / float(len(predicted))
  recall = common / float(len(expected))
  return exact, 2 * precision * recall / (precision + recall)


def choose_scoring(examples):
  """"cmrc2018" when most contexts contain CJK characters, else "squad"."""
  chinese = sum(1 for e in examples if any(tokenization.is_cjk_character(c)
                                           for c in e.context_text[:200]))
  return "cmrc2018" if chinese * 2 > len(examples) else "squad"


def best_null_threshold(best_scores, null_odds, has_answer):
  """The null-score threshold that maximises a score, and that score (in %).

  Questions are answered (with their best non-null span) when null_odds <= threshold,
  and predicted unanswerable otherwise, as --null_score_diff_threshold does.

  Args:
    best_scores: {id: score of the best non-null span}, for answerable questions.
    null_odds: {id: null score diff}.
    has_answer: {id: bool}.
  """
  if not null_odds:
    return 0.0, 0.0
  score = sum(1 for qid in null_odds if not has_answer[qid])  # all predicted unanswerable
  ordered = sorted(null_odds, key=lambda q: null_odds[q])
  # Answering nothing: any threshold below every null_odds.
  best, threshold = score, null_odds[ordered[0]] - 1.0
  for position, qid in enumerate(ordered):
    score += best_scores[qid] if has_answer[qid] else -1
    is_last_of_tie = (position + 1 == len(ordered) or
                      null_odds[ordered[position + 1]] != null_odds[qid])
    if is_last_of_tie and score > best:
      best, threshold = score, null_odds[qid]
  return 100.0 * best / len(null_odds), threshold


def score_predictions(examples, predictions, scoring, null_odds=None, nbest=None):
  """exact_match and f1 (in %, the best over each question's gold answers).

  Args:
    examples: SquadExamples with gold answers (v2 unanswerable ones have [""]).
    predictions: {id: text}.
    scoring: "squad" or "cmrc2018".
    null_odds, nbest: for v2: also the HasAns/NoAns figures and the best thresholds.

  Returns:
    dict of figures.
  """
  exact_and_f1 = english_exact_and_f1 if scoring == "squad" else chinese_exact_and_f1

  def best_over_golds(example, text):
    golds = example.gold_answers
    if scoring == "squad" and null_odds is not None:
      # SQuAD 2.0's scorer ignores golds that normalize to nothing.
      golds = [gold for gold in golds if normalize_english_answer(gold)] or [""]
    pairs = [exact_and_f1(text, gold) for gold in golds]
    return max(p[0] for p in pairs), max(p[1] for p in pairs)

  scored = [e for e in examples if e.gold_answers]
  exact = {e.qas_id: best_over_golds(e, predictions[e.qas_id]) for e in scored}
  results = collections.OrderedDict()
  results["exact_match"] = 100.0 * sum(v[0] for v in exact.values()) / len(scored)
  results["f1"] = 100.0 * sum(v[1] for v in exact.values()) / len(scored)
  results["total"] = len(scored)
  if null_odds is None:
    return results
  has_answer = {e.qas_id: e.gold_answers != [""] for e in scored}
  for name, wanted in (("HasAns", True), ("NoAns", False)):
    ids = [qid for qid in exact if has_answer[qid] == wanted]
    results[name + "_total"] = len(ids)
    if ids:
      results[name + "_exact"] = 100.0 * sum(exact[q][0] for q in ids) / len(ids)
      results[name + "_f1"] = 100.0 * sum(exact[q][1] for q in ids) / len(ids)
  # What each question scores when answered with its best non-null span.
  non_null = {}
  for example in scored:
    text = next((entry["text"] for entry in nbest[example.qas_id] if entry["text"]), "")
    non_null[example.qas_id] = best_over_golds(example, text) if has_answer[example.qas_id] \
        else (0.0, 0.0)
  odds = {qid: null_odds[qid] for qid in exact}
  for index, name in ((0, "exact"), (1, "f1")):
    best, threshold = best_null_threshold({q: v[index] for q, v in non_null.items()}, odds,
                                          has_answer)
    results["best_" + name] = best
    results["best_%s_thresh" % name] = threshold
  return results


# ---------------------------------------------------------------------------
# Flags: Google's run_squad.py flags with their defaults, then ours
# ---------------------------------------------------------------------------

FLAGS = tf.flags.FLAGS


def define_flags():
  """Defines the flags. Called only when run as a script, so tests can import the module
  next to other scripts that define flags of the same names."""
  flags = tf.flags
  flags.DEFINE_string("bert_config_file", None, "bert_config.json of the pre-trained model.")
  flags.DEFINE_string("vocab_file", None, "vocab.txt of the pre-trained model.")
  flags.DEFINE_string("output_dir", None, "Checkpoints and the prediction files go here.")
  flags.DEFINE_string("train_file", None, "SQuAD-format JSON for training, e.g. "
                      "train-v1.1.json or cmrc2018_train.json.")
  flags.DEFINE_string("predict_file", None, "SQuAD-format JSON to predict, e.g. "
                      "dev-v1.1.json; scored when it has answers.")
  flags.DEFINE_string("init_checkpoint", None, "Pre-trained checkpoint, e.g. "
                      "chinese_L-12_H-768_A-12/bert_model.ckpt.")
  flags.DEFINE_bool("do_lower_case", True, "Lower-case the input (True for uncased and "
                    "Chinese models).")
  flags.DEFINE_integer("max_seq_length", 384, "Tokens per window, with [CLS], the question "
                       "and two [SEP].")
  flags.DEFINE_integer("doc_stride", 128, "Tokens between the starts of a long context's "
                       "windows.")
  flags.DEFINE_integer("max_query_length", 64, "Question tokens kept (the rest is cut).")
  flags.DEFINE_bool("do_train", False, "Train on --train_file.")
  flags.DEFINE_bool("do_predict", False, "Predict --predict_file.")
  flags.DEFINE_integer("train_batch_size", 32, "Training batch size PER TOWER.")
  flags.DEFINE_integer("predict_batch_size", 8, "Predict batch size per tower.")
  flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
  flags.DEFINE_float("num_train_epochs", 3.0, "Epochs over the training questions.")
  flags.DEFINE_float("warmup_proportion", 0.1, "Share of the steps spent warming up.")
  flags.DEFINE_integer("save_checkpoints_steps", 1000, "Save every this many steps.")
  flags.DEFINE_integer("n_best_size", 20, "Answers per question in nbest_predictions.json.")
  flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in word pieces.")
  flags.DEFINE_bool("verbose_logging", False, "Accepted for Google compatibility; unused "
                    "(Google's logs failures to align answers to words, which character "
                    "offsets do not need).")
  flags.DEFINE_bool("version_2_with_negative", False, "SQuAD 2.0: questions may have no "
                    "answer; writes null_odds.json.")
  flags.DEFINE_float("null_score_diff_threshold", 0.0, "v2: predict no answer when the null "
                     "score minus the best span score exceeds this.")
  multigpu.define_multigpu_flags()
  flags.DEFINE_enum("scoring", "auto", ["auto", "squad", "cmrc2018"], "How eval_results.txt "
                    "scores: SQuAD's official English rules, CMRC 2018's character-level "
                    "rules, or auto (cmrc2018 when most contexts are Chinese).")


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------

def check_flags():
  """Validates flags and files before anything is written. Returns the BertConfig."""
  if not (FLAGS.do_train or FLAGS.do_predict):
    raise UsageError("Nothing to do: pass --do_train and/or --do_predict.")
  if not FLAGS.output_dir:
    raise UsageError("--output_dir is required.")
  multigpu.require_file("bert_config_file", FLAGS.bert_config_file)
  multigpu.require_file("vocab_file", FLAGS.vocab_file)
  if FLAGS.do_train:
    multigpu.require_file("train_file", FLAGS.train_file)
  if FLAGS.do_predict:
    multigpu.require_file("predict_file", FLAGS.predict_file)
  multigpu.check_run_flags(FLAGS, (
      "train_batch_size", "predict_batch_size", "save_checkpoints_steps", "log_steps",
      "accumulation_steps", "doc_stride", "max_query_length", "n_best_size",
      "max_answer_length"))
  if FLAGS.max_seq_length <= FLAGS.max_query_length + 3:
    raise UsageError("--max_seq_length=%d leaves no room for the context after "
                     "--max_query_length=%d and [CLS] [SEP] [SEP]: raise --max_seq_length "
                     "above %d or lower --max_query_length." %
                     (FLAGS.max_seq_length, FLAGS.max_query_length,
                      FLAGS.max_query_length + 3))
  try:
    tokenization.validate_case_matches_checkpoint(FLAGS.do_lower_case, FLAGS.init_checkpoint)
  except ValueError as e:
    raise UsageError(str(e))
  return multigpu.load_bert_config(FLAGS.bert_config_file, FLAGS.max_seq_length)


def featurize(examples, tokenizer, path, is_training):
  """Writes the windows of `examples` to `path` and logs their counts.

  Returns:
    (number of windows, their InputFeatures without id lists when predicting, else []).
  """
  counts = collections.Counter()
  num_features, features = write_features(
      convert_examples_to_features(examples, tokenizer, FLAGS.max_seq_length, FLAGS.doc_stride,
                                   FLAGS.max_query_length, is_training, counts),
      path, is_training, keep_metadata=not is_training)
  tf.logging.info("%s: %s", path, ", ".join("%s %d" % kv for kv in sorted(counts.items())))
  return num_features, features


def _write_json(path, value):
  atomic_write_text(path, json.dumps(value, ensure_ascii=False, indent=4) + "\n")


def checkpoint_for_prediction():
  """The checkpoint to predict with, checked to hold the span head. Raises UsageError."""
  checkpoint, _ = multigpu.checkpoint_for_inference(FLAGS.output_dir, FLAGS.init_checkpoint)
  if not tf.train.load_checkpoint(checkpoint).has_tensor("cls/squad/output_weights"):
    raise UsageError("%s has no cls/squad/output_weights: it is not a model fine-tuned for "
                     "reading comprehension. Train one first (--do_train) or point "
                     "--output_dir at one." % checkpoint)
  return checkpoint


def train(plan, model_fn, tokenizer, train_examples):
  """Featurizes the training questions and trains (or resumes) on every tower."""
  towers = plan.num_towers
  micro_batch = FLAGS.train_batch_size * towers
  update_batch = micro_batch * FLAGS.accumulation_steps
  # Google counts steps in questions, not windows.
  num_train_steps = int(len(train_examples) * FLAGS.num_train_epochs / update_batch)
  num_warmup_steps = int(num_train_steps * FLAGS.warmup_proportion)
  if num_train_steps < 1:
    raise UsageError("%d training questions x %g epochs is less than one global batch of "
                     "%d: lower --train_batch_size or raise --num_train_epochs." %
                     (len(train_examples), FLAGS.num_train_epochs, update_batch))
  latest = tf.train.latest_checkpoint(FLAGS.output_dir)
  if latest and multigpu.checkpoint_global_step(latest) >= num_train_steps:
    tf.logging.info("%s is already at step %d of %d: nothing to train.", latest,
                    multigpu.checkpoint_global_step(latest), num_train_steps)
    return
  train_record = os.path.join(FLAGS.output_dir, "train.tf_record")
  num_features, _ = featurize(train_examples, tokenizer, train_record, is_training=True)
  tf.logging.info(
      "%d training questions in %d windows; %d towers x per-tower batch %d x %d "
      "accumulation step(s) = global batch %d; %g epochs = %d steps, %d warmup steps.",
      len(train_examples), num_features, towers, FLAGS.train_batch_size,
      FLAGS.accumulation_steps, update_batch, FLAGS.num_train_epochs, num_train_steps,
      num_warmup_steps)
  spec = input_feature_spec(FLAGS.max_seq_length, is_training=True)
  multigpu.train(
      plan, model_fn,
      lambda skip: multigpu.make_dataset([train_record], spec, micro_batch, True,
                                         FLAGS.random_seed, min(num_features, 100000), skip),
      FLAGS.output_dir, num_train_steps, num_warmup_steps, FLAGS.learning_rate, micro_batch,
      FLAGS.optimizer, FLAGS.init_checkpoint, FLAGS.save_checkpoints_steps,
      FLAGS.keep_checkpoint_max, FLAGS.log_steps, FLAGS.random_seed, FLAGS.accumulation_steps)


def predict(plan, model_fn, tokenizer, predict_examples, checkpoint):
  """Predicts every question on every tower; writes the prediction files and, when the
  file has answers, eval_results.txt. Files of an earlier run that this one would not
  write (eval_results.txt, null_odds.json) are removed first, so none is left stale."""
  for name in ("eval_results.txt", "null_odds.json"):
    path = os.path.join(FLAGS.output_dir, name)
    if tf.gfile.Exists(path):
      tf.gfile.Remove(path)
  predict_record = os.path.join(FLAGS.output_dir, "predict.tf_record")
  _, features = featurize(predict_examples, tokenizer, predict_record, is_training=False)
  tf.logging.info("Predicting %d questions in %d windows with %s.", len(predict_examples),
                  len(features), checkpoint)
  predict_batch = FLAGS.predict_batch_size * plan.num_towers
  spec = input_feature_spec(FLAGS.max_seq_length, is_training=False)
  outputs = multigpu.infer(
      plan, model_fn,
      lambda: multigpu.make_dataset([predict_record], spec, predict_batch, is_training=False),
      predict_batch, checkpoint)
  expected_ids = [feature.unique_id for feature in features]
  if list(outputs["unique_ids"]) != expected_ids:
    raise AssertionError("prediction outputs are not in feature order")
  predictions, nbest, null_odds = predict_answers(
      predict_examples, features, outputs["start_logits"], outputs["end_logits"],
      FLAGS.n_best_size, FLAGS.max_answer_length, FLAGS.version_2_with_negative,
      FLAGS.null_score_diff_threshold)
  _write_json(os.path.join(FLAGS.output_dir, "predictions.json"), predictions)
  _write_json(os.path.join(FLAGS.output_dir, "nbest_predictions.json"), nbest)
  if FLAGS.version_2_with_negative:
    _write_json(os.path.join(FLAGS.output_dir, "null_odds.json"), null_odds)
  tf.logging.info("Wrote %d predictions to %s", len(predictions),
                  os.path.join(FLAGS.output_dir, "predictions.json"))
  unscored = sum(1 for e in predict_examples if not e.gold_answers)
  if unscored == len(predict_examples):
    tf.logging.info("%s has no answers: not scored.", FLAGS.predict_file)
    return
  if unscored:
    tf.logging.warning("%d of %d questions have no answers and are not scored.", unscored,
                       len(predict_examples))
  scoring = FLAGS.scoring if FLAGS.scoring != "auto" else choose_scoring(predict_examples)
  results = score_predictions(predict_examples, predictions, scoring,
                              null_odds if FLAGS.version_2_with_negative else None, nbest)
  results["global_step"] = multigpu.checkpoint_global_step(checkpoint)
  path = os.path.join(FLAGS.output_dir, "eval_results.txt")
  atomic_write_text(path, multigpu.format_key_values(results))
  tf.logging.info("%s scoring of %d questions: exact_match = %.2f  f1 = %.2f  (%s)", scoring,
                  results["total"], results["exact_match"], results["f1"], path)


def main(_):
  bert_config = check_flags()
  tokenizer = multigpu.load_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case, bert_config,
                                      FLAGS.bert_config_file)
  # Read and validate every input before anything is trained or written.
  if FLAGS.do_train:
    train_examples, _ = read_squad_examples(FLAGS.train_file, True,
                                            FLAGS.version_2_with_negative)
    if not train_examples:
      raise UsageError("%s: no usable training question." % FLAGS.train_file)
  if FLAGS.do_predict:
    predict_examples, _ = read_squad_examples(FLAGS.predict_file, False,
                                              FLAGS.version_2_with_negative)
    if not predict_examples:
      raise UsageError("%s: no question to predict." % FLAGS.predict_file)
    if not FLAGS.do_train:
      checkpoint_for_prediction()
  tf.gfile.MakeDirs(FLAGS.output_dir)
  plan = multigpu.plan_devices(FLAGS.n_gpus, FLAGS.towers_per_gpu, FLAGS.variables_on_gpu)
  model_fn = create_model_fn(bert_config)
  if FLAGS.do_train:
    train(plan, model_fn, tokenizer, train_examples)
  if FLAGS.do_predict:
    predict(plan, model_fn, tokenizer, predict_examples, checkpoint_for_prediction())


if __name__ == "__main__":
  define_flags()
  multigpu.run_main(main)
