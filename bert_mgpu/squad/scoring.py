# coding=utf-8
"""Scoring reading-comprehension predictions: SQuAD's official rules for English (v1.1 and
v2.0) and CMRC 2018's character-level rules for Chinese. docs/READING_COMPREHENSION.md (its
"Scoring" paragraph) lists where they differ from the official scripts.
"""

import collections
import re
import string
import unicodedata

import tokenization


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
