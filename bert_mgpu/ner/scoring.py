# coding=utf-8
"""Entities from tag sequences, and entity-level scores with conlleval/seqeval semantics.

Pure Python (no TensorFlow, no NumPy needed), so the data module, the run script and
predict_text.py can all use it.

Tags are `O` or `<prefix>-<type>`: the prefix is one upper-case letter and the type
is the rest after the first "-" (not empty; `B-PER.NAM` has the type `PER.NAM`).

Schemes (detect_scheme names them):

  BIO    B- begins an entity, I- continues it.
  BIOES  as BIO, plus E- ends an entity and S- is a single-token entity.
  BMES   BIOES with M- for "inside" (MSRA and Resume NER releases); M- reads as I-.
  IO     only I-: adjacent tokens of one type form one entity.

The decoding rule (conlleval's, and seqeval's default non-strict mode) applies to every
scheme and accepts any sequence, valid or not:

  * an entity ends before a token tagged O, B-, S- or of another type, and after a
    token tagged E- or S-;
  * a token tagged B- or S- begins an entity; so does a token tagged I-, M- or E-
    when the previous token is O, E-, S- or of another type.

So an ill-formed `O I-PER I-PER` is one PER entity, `B-PER I-LOC` is a PER and a LOC
entity, and `E-PER E-PER` two PER entities. repair() rewrites a sequence into the
valid tags of a scheme that carry the same entities.

An entity is (type, start, end) with token indexes, end exclusive. It is correct when
the gold sequence has an entity of the same type and the same span.
"""

import collections

OUTSIDE = "O"
SCHEMES = ("BIO", "BIOES", "BMES", "IO")

# The prefixes each scheme allows, besides O.
SCHEME_PREFIXES = {
    "BIO": frozenset("BI"),
    "BIOES": frozenset("BIES"),
    "BMES": frozenset("BMES"),
    "IO": frozenset("I"),
}

_ANY_PREFIX = frozenset("BIMES")


def split_tag(tag):
  """(prefix, type) of a tag: ("O", "") for O, None for a malformed tag.

  Args:
    tag: str, e.g. "B-PER", "O".

  Returns:
    A (prefix, type) pair of str, or None when `tag` is neither O nor a prefix among
    B, I, M, E, S followed by "-" and a non-empty type.
  """
  if tag == OUTSIDE:
    return OUTSIDE, ""
  if len(tag) < 3 or tag[1] != "-" or tag[0] not in _ANY_PREFIX:
    return None
  return tag[0], tag[2:]


def is_valid_tag(tag, scheme):
  """Whether `tag` is O or a well-formed tag whose prefix `scheme` allows."""
  parts = split_tag(tag)
  if parts is None:
    return False
  return parts[0] == OUTSIDE or parts[0] in SCHEME_PREFIXES[scheme]


def detect_scheme(tags):
  """The scheme a collection of tags is written in.

  M- means BMES; else E- or S- means BIOES; else B- means BIO; else I- means IO. A
  collection with no entity tag at all (only O) is called BIO.

  Args:
    tags: iterable of str (e.g. every tag of a training file).

  Returns:
    One of SCHEMES.

  Raises:
    ValueError: a malformed tag (the message quotes it), or both I- and M- tags (then
      no scheme fits; the message quotes one of each).
  """
  first_of_prefix = {}
  for tag in tags:
    parts = split_tag(tag)
    if parts is None:
      raise ValueError("tag %r is not O nor <B|I|M|E|S>-<type>" % (tag,))
    first_of_prefix.setdefault(parts[0], tag)
  if "M" in first_of_prefix:
    if "I" in first_of_prefix:
      raise ValueError("tags %r and %r mix the BIO(ES) and BMES schemes"
                       % (first_of_prefix["I"], first_of_prefix["M"]))
    return "BMES"
  if "E" in first_of_prefix or "S" in first_of_prefix:
    return "BIOES"
  if "B" in first_of_prefix or "I" not in first_of_prefix:
    return "BIO"
  return "IO"


def _checked_parts(tags, scheme):
  """split_tag of every tag; ValueError for a malformed tag or one outside `scheme`."""
  parts = []
  for position, tag in enumerate(tags):
    prefix_and_type = split_tag(tag)
    if prefix_and_type is None or (scheme is not None and not is_valid_tag(tag, scheme)):
      raise ValueError("tag %r at position %d is not a %s tag"
                       % (tag, position, scheme or "BIO/BIOES/BMES/IO"))
    parts.append(prefix_and_type)
  return parts


def _ends_before(previous, current):
  """Whether an entity open at `previous` (prefix, type) ends before `current`."""
  previous_prefix, previous_type = previous
  prefix, entity_type = current
  if previous_prefix in (OUTSIDE, "E", "S"):
    return previous_prefix != OUTSIDE
  return prefix in (OUTSIDE, "B", "S") or entity_type != previous_type


def _begins_at(previous, current):
  """Whether a new entity begins at `current` (prefix, type), given the token before."""
  previous_prefix, previous_type = previous
  prefix, entity_type = current
  if prefix == OUTSIDE:
    return False
  if prefix in ("B", "S"):
    return True
  return previous_prefix in (OUTSIDE, "E", "S") or entity_type != previous_type


def entities(tags, scheme=None):
  """The entities of one tag sequence, by the decoding rule of the module docstring.

  Args:
    tags: list of str.
    scheme: one of SCHEMES, or None to accept the tags of any scheme. The rule is the
      same for every scheme (M- reads as I-); the scheme only says which tags are
      allowed.

  Returns:
    list of (type, start, end) in order, token indexes, end exclusive.

  Raises:
    ValueError: a malformed tag, or a tag outside `scheme`.
  """
  found = []
  previous = (OUTSIDE, "")
  start = None
  for position, current in enumerate(_checked_parts(tags, scheme)):
    if start is not None and _ends_before(previous, current):
      found.append((previous[1], start, position))
      start = None
    if _begins_at(previous, current):
      start = position
    previous = current
  if start is not None:
    found.append((previous[1], start, len(tags)))
  return found


def tags_from_entities(entity_list, length, scheme):
  """Writes entities as the valid tags of `scheme`.

  Args:
    entity_list: list of (type, start, end), end exclusive, not overlapping.
    length: the number of tokens.
    scheme: one of SCHEMES. In IO, two adjacent entities of one type cannot be told
      apart and read back as one.

  Returns:
    list of str [length].

  Raises:
    ValueError: an entity outside [0, length), empty, or overlapping another.
  """
  tags = [OUTSIDE] * length
  for entity_type, start, end in entity_list:
    if not 0 <= start < end <= length:
      raise ValueError("entity %r does not fit %d tokens" % ((entity_type, start, end), length))
    if any(tag != OUTSIDE for tag in tags[start:end]):
      raise ValueError("entity %r overlaps another" % ((entity_type, start, end),))
    inside = "M" if scheme == "BMES" else "I"
    prefixes = [inside] * (end - start)
    if scheme != "IO":
      prefixes[0] = "B"
    if scheme in ("BIOES", "BMES"):
      if end - start == 1:
        prefixes[0] = "S"
      else:
        prefixes[-1] = "E"
    tags[start:end] = ["%s-%s" % (prefix, entity_type) for prefix in prefixes]
  return tags


def repair(tags, scheme):
  """Rewrites a possibly ill-formed sequence as valid tags of `scheme`, same entities.

  The entities are those of the decoding rule (e.g. `O I-PER` becomes `O B-PER` in
  BIO, `B-PER I-PER` becomes `B-PER E-PER` in BIOES), so scoring the repaired tags
  gives the same result as scoring the raw ones.

  Args:
    tags: list of str, well-formed tags of any scheme.
    scheme: one of SCHEMES, the scheme to write.

  Returns:
    list of str, as long as `tags`.
  """
  return tags_from_entities(entities(tags), len(tags), scheme)


def ratio(numerator, denominator):
  """numerator / denominator, 0.0 when the denominator is 0 (seqeval's zero_division=0)."""
  return float(numerator) / denominator if denominator else 0.0


def _precision_recall_f1(correct, predicted, gold):
  precision = ratio(correct, predicted)
  recall = ratio(correct, gold)
  return precision, recall, ratio(2 * precision * recall, precision + recall)


def _type_counts(gold_seqs, pred_seqs, scheme):
  """Per-type Counters of gold, predicted and correct entities, and token counts."""
  gold_counts, predicted_counts, correct_counts = (collections.Counter() for _ in range(3))
  num_tokens = num_tokens_right = 0
  if len(gold_seqs) != len(pred_seqs):
    raise ValueError("%d gold sequences but %d predicted" % (len(gold_seqs), len(pred_seqs)))
  for index, (gold, predicted) in enumerate(zip(gold_seqs, pred_seqs)):
    if len(gold) != len(predicted):
      raise ValueError("sequence %d has %d gold tags but %d predicted"
                       % (index, len(gold), len(predicted)))
    gold_entities = entities(gold, scheme)
    predicted_entities = entities(predicted, scheme)
    gold_counts.update(entity[0] for entity in gold_entities)
    predicted_counts.update(entity[0] for entity in predicted_entities)
    correct_counts.update(entity[0] for entity in set(gold_entities) & set(predicted_entities))
    num_tokens += len(gold)
    num_tokens_right += sum(1 for g, p in zip(gold, predicted) if g == p)
  return gold_counts, predicted_counts, correct_counts, num_tokens, num_tokens_right


def score(gold_seqs, pred_seqs, scheme=None):
  """Entity-level precision, recall and F1 (micro over entities), and per type.

  Args:
    gold_seqs: list of tag lists.
    pred_seqs: list of tag lists, each as long as its gold list.
    scheme: one of SCHEMES, or None to accept any (see entities()).

  Returns:
    dict: "precision", "recall", "f1" (micro: every entity counts once), "macro_f1"
    (the mean of the types' F1), "accuracy" (of tags, token level), "num_gold",
    "num_predicted", "num_correct", "num_tokens", and "per_type": {type: {"precision",
    "recall", "f1", "support" (gold entities), "predicted", "correct"}} over every type
    in either the gold or the predictions. A ratio with a zero denominator is 0.0.

  Raises:
    ValueError: lists of different lengths, or a tag refused by entities().
  """
  gold_counts, predicted_counts, correct_counts, num_tokens, num_tokens_right = (
      _type_counts(gold_seqs, pred_seqs, scheme))
  per_type = {}
  for entity_type in sorted(set(gold_counts) | set(predicted_counts)):
    precision, recall, f1 = _precision_recall_f1(
        correct_counts[entity_type], predicted_counts[entity_type], gold_counts[entity_type])
    per_type[entity_type] = {
        "precision": precision, "recall": recall, "f1": f1,
        "support": gold_counts[entity_type], "predicted": predicted_counts[entity_type],
        "correct": correct_counts[entity_type]}
  num_gold, num_predicted, num_correct = (
      sum(counts.values()) for counts in (gold_counts, predicted_counts, correct_counts))
  precision, recall, f1 = _precision_recall_f1(num_correct, num_predicted, num_gold)
  macro_f1 = ratio(sum(row["f1"] for row in per_type.values()), len(per_type))
  return {"precision": precision, "recall": recall, "f1": f1, "macro_f1": macro_f1,
          "accuracy": ratio(num_tokens_right, num_tokens), "num_gold": num_gold,
          "num_predicted": num_predicted, "num_correct": num_correct,
          "num_tokens": num_tokens, "per_type": per_type}


def format_report(result, digits=4):
  """The text of eval_report.txt: conlleval's summary line, then a table per type.

  Args:
    result: a dict from score().
    digits: decimals of the ratios.

  Returns:
    str, lines ending in "\\n": one row per type (precision, recall, f1, support),
    then "micro avg" and "macro avg" rows (the macro row averages the types' ratios).
  """
  per_type = result["per_type"]
  name_width = max([len(name) for name in per_type] + [len("macro avg")])
  number = "%" + str(digits + 5) + "." + str(digits) + "f"
  header = ("%-" + str(name_width) + "s %" + str(digits + 5) + "s %" + str(digits + 5)
            + "s %" + str(digits + 5) + "s %9s\n")
  row = "%-" + str(name_width) + "s " + " ".join([number] * 3) + " %9d\n"
  counts = ("%d entities; found: %d entities; correct: %d.\n"
            % (result["num_gold"], result["num_predicted"], result["num_correct"]))
  if "num_tokens" in result:  # a tag head's
    lines = ["processed %d tokens with %s" % (result["num_tokens"], counts),
             "accuracy: " + (number % (100.0 * result["accuracy"])).strip() + "% (tags)\n\n"]
  else:  # a span head's (span_scoring.score)
    lines = [counts[0].upper() + counts[1:], "\n"]
  lines.append(header % ("", "precision", "recall", "f1", "support"))
  for name in sorted(per_type):
    values = per_type[name]
    lines.append(row % (name, values["precision"], values["recall"], values["f1"],
                        values["support"]))
  lines.append("\n")
  lines.append(row % ("micro avg", result["precision"], result["recall"], result["f1"],
                      result["num_gold"]))
  count = len(per_type)
  lines.append(row % ("macro avg",
                      ratio(sum(v["precision"] for v in per_type.values()), count),
                      ratio(sum(v["recall"] for v in per_type.values()), count),
                      result["macro_f1"], result["num_gold"]))
  return "".join(lines)
