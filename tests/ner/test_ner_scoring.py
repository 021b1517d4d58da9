# coding=utf-8
"""Tests of ner_scoring.py against hand-computed cases, seqeval's documented examples
(its README and docstrings, default non-strict mode) and a rule table re-derived from
conlleval's chunk start/end conditions."""

import random

import pytest

from bert_mgpu.ner import scoring as ner_scoring
from bert_mgpu.ner.scoring import entities, repair, score


def test_split_tag():
  assert ner_scoring.split_tag("B-PER") == ("B", "PER")
  assert ner_scoring.split_tag("I-PER.NAM") == ("I", "PER.NAM")
  assert ner_scoring.split_tag("E-A-B") == ("E", "A-B")
  assert ner_scoring.split_tag("O") == ("O", "")
  for malformed in ("X-FOO", "B-", "B", "PER", "b-PER", "BPER", "", "O-PER", "B_PER"):
    assert ner_scoring.split_tag(malformed) is None, malformed


def test_detect_scheme():
  assert ner_scoring.detect_scheme(["O", "B-PER", "I-PER"]) == "BIO"
  assert ner_scoring.detect_scheme(["O", "B-PER"]) == "BIO"
  assert ner_scoring.detect_scheme(["O", "B-PER", "I-PER", "E-PER", "S-LOC"]) == "BIOES"
  assert ner_scoring.detect_scheme(["S-LOC", "O"]) == "BIOES"
  assert ner_scoring.detect_scheme(["B-NS", "M-NS", "E-NS", "S-NR", "O"]) == "BMES"
  assert ner_scoring.detect_scheme(["O", "I-PER", "I-LOC"]) == "IO"
  assert ner_scoring.detect_scheme(["O", "O"]) == "BIO"
  with pytest.raises(ValueError, match="'X-FOO'"):
    ner_scoring.detect_scheme(["O", "B-PER", "X-FOO"])
  with pytest.raises(ValueError, match="'I-PER' and 'M-LOC'"):
    ner_scoring.detect_scheme(["I-PER", "M-LOC"])


def test_is_valid_tag():
  assert ner_scoring.is_valid_tag("O", "IO")
  assert ner_scoring.is_valid_tag("B-PER", "BIO")
  assert not ner_scoring.is_valid_tag("E-PER", "BIO")
  assert not ner_scoring.is_valid_tag("M-PER", "BIOES")
  assert ner_scoring.is_valid_tag("M-PER", "BMES")
  assert not ner_scoring.is_valid_tag("I-PER", "BMES")
  assert not ner_scoring.is_valid_tag("B-PER", "IO")
  assert not ner_scoring.is_valid_tag("X-FOO", "BIO")


def test_bio_entities():
  # seqeval's get_entities docstring: [('PER', 0, 1), ('LOC', 3, 3)], ends inclusive.
  assert entities(["B-PER", "I-PER", "O", "B-LOC"]) == [("PER", 0, 2), ("LOC", 3, 4)]
  assert entities(["B-PER", "B-PER", "I-PER"], "BIO") == [("PER", 0, 1), ("PER", 1, 3)]
  assert entities([]) == []
  assert entities(["O", "O"]) == []


def test_ill_formed_bio_follows_conlleval():
  # An I- after O, or after another type, starts an entity.
  assert entities(["O", "I-PER", "I-PER"]) == [("PER", 1, 3)]
  assert entities(["I-PER", "O", "I-PER"]) == [("PER", 0, 1), ("PER", 2, 3)]
  assert entities(["B-PER", "I-LOC", "I-LOC"]) == [("PER", 0, 1), ("LOC", 1, 3)]
  assert entities(["I-PER", "B-PER"]) == [("PER", 0, 1), ("PER", 1, 2)]


def test_bioes_entities():
  tags = ["B-PER", "I-PER", "E-PER", "S-LOC", "O", "B-ORG", "E-ORG"]
  assert entities(tags, "BIOES") == [("PER", 0, 3), ("LOC", 3, 4), ("ORG", 5, 7)]
  # Ill-formed: S- and E- close their entity; what follows starts a new one.
  assert entities(["S-PER", "I-PER", "E-PER"]) == [("PER", 0, 1), ("PER", 1, 3)]
  assert entities(["E-PER", "E-PER"]) == [("PER", 0, 1), ("PER", 1, 2)]
  assert entities(["B-PER", "S-PER"]) == [("PER", 0, 1), ("PER", 1, 2)]
  assert entities(["B-PER", "E-LOC"]) == [("PER", 0, 1), ("LOC", 1, 2)]
  assert entities(["B-PER", "I-PER"], "BIOES") == [("PER", 0, 2)]  # never closed by E-


def test_bmes_and_io_entities():
  assert entities(["B-NS", "M-NS", "E-NS", "S-NR", "O"], "BMES") == [("NS", 0, 3),
                                                                        ("NR", 3, 4)]
  assert entities(["O", "M-NS", "E-NS"], "BMES") == [("NS", 1, 3)]
  assert entities(["I-PER", "I-PER", "I-LOC", "O", "I-PER"], "IO") == [
      ("PER", 0, 2), ("LOC", 2, 3), ("PER", 4, 5)]


def test_tags_outside_the_scheme_are_refused():
  with pytest.raises(ValueError, match="'E-PER' at position 1 is not a BIO tag"):
    entities(["B-PER", "E-PER"], "BIO")
  with pytest.raises(ValueError, match="'X-FOO'"):
    entities(["X-FOO"])


def test_score_hand_computed_bio():
  gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG"]]
  predicted = [["B-PER", "I-PER", "O", "B-ORG"], ["O", "B-ORG"]]
  result = score(gold, predicted, "BIO")
  # gold: PER, LOC, ORG; predicted: PER, ORG(wrong span type), ORG; correct: PER, ORG.
  assert (result["num_gold"], result["num_predicted"], result["num_correct"]) == (3, 3, 2)
  assert result["precision"] == pytest.approx(2 / 3.0)
  assert result["recall"] == pytest.approx(2 / 3.0)
  assert result["f1"] == pytest.approx(2 / 3.0)
  assert result["accuracy"] == pytest.approx(5 / 6.0)
  assert result["per_type"]["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0,
                                       "support": 1, "predicted": 0, "correct": 0}
  assert result["per_type"]["ORG"]["precision"] == pytest.approx(0.5)
  assert result["per_type"]["ORG"]["recall"] == 1.0
  assert result["per_type"]["ORG"]["f1"] == pytest.approx(2 / 3.0)
  assert result["per_type"]["PER"]["f1"] == 1.0
  assert result["macro_f1"] == pytest.approx((0.0 + 2 / 3.0 + 1.0) / 3)


def test_score_matches_seqeval_readme_example():
  gold = [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
  predicted = [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"],
               ["B-PER", "I-PER", "O"]]
  result = score(gold, predicted)
  # seqeval: f1_score 0.50; MISC 0.00 / 0.00 / 0.00 support 1; PER 1.00 support 1.
  assert result["f1"] == pytest.approx(0.5)
  assert result["precision"] == pytest.approx(0.5) and result["recall"] == pytest.approx(0.5)
  assert result["per_type"]["MISC"]["f1"] == 0.0
  assert result["per_type"]["PER"]["f1"] == 1.0
  assert result["macro_f1"] == pytest.approx(0.5)


def test_score_hand_computed_bioes():
  gold = [["B-PER", "E-PER", "S-LOC", "O", "B-ORG", "I-ORG", "E-ORG"]]
  predicted = [["B-PER", "E-PER", "B-LOC", "O", "B-ORG", "E-ORG", "O"]]
  result = score(gold, predicted, "BIOES")
  # B-LOC then O is the entity LOC(2, 3), correct; ORG(4, 6) misses gold ORG(4, 7).
  assert (result["num_gold"], result["num_predicted"], result["num_correct"]) == (3, 3, 2)
  assert result["f1"] == pytest.approx(2 / 3.0)
  assert result["per_type"]["ORG"]["correct"] == 0


def test_ill_formed_predictions_are_scored_by_the_rule():
  gold = [["O", "B-PER", "I-PER", "O"]]
  assert score(gold, [["O", "I-PER", "I-PER", "O"]])["f1"] == 1.0
  assert score(gold, [["O", "B-PER", "I-LOC", "O"]])["num_predicted"] == 2


def test_empty_predictions_give_zero_without_division_by_zero():
  gold = [["B-PER", "I-PER", "O"]]
  result = score(gold, [["O", "O", "O"]])
  assert (result["precision"], result["recall"], result["f1"]) == (0.0, 0.0, 0.0)
  assert result["per_type"]["PER"]["support"] == 1
  nothing = score([["O"]], [["O"]])
  assert (nothing["precision"], nothing["recall"], nothing["f1"]) == (0.0, 0.0, 0.0)
  assert nothing["per_type"] == {} and nothing["macro_f1"] == 0.0
  assert score([], [])["accuracy"] == 0.0


def test_mismatched_lengths_are_refused():
  with pytest.raises(ValueError, match="2 gold sequences but 1"):
    score([["O"], ["O"]], [["O"]])
  with pytest.raises(ValueError, match="sequence 0 has 2 gold tags but 1"):
    score([["O", "O"]], [["O"]])


def test_repair():
  assert repair(["O", "I-PER", "I-PER", "O", "I-LOC"], "BIO") == [
      "O", "B-PER", "I-PER", "O", "B-LOC"]
  assert repair(["B-PER", "I-LOC"], "BIO") == ["B-PER", "B-LOC"]
  assert repair(["B-PER", "I-PER", "O", "I-LOC"], "BIOES") == [
      "B-PER", "E-PER", "O", "S-LOC"]
  assert repair(["B-NS", "I-NS", "I-NS", "B-NR"], "BMES") == ["B-NS", "M-NS", "E-NS", "S-NR"]
  assert repair(["B-PER", "I-PER", "O", "S-LOC"], "IO") == ["I-PER", "I-PER", "O", "I-LOC"]


def test_tags_from_entities_refuses_bad_entities():
  with pytest.raises(ValueError, match="does not fit"):
    ner_scoring.tags_from_entities([("PER", 2, 4)], 3, "BIO")
  with pytest.raises(ValueError, match="overlaps"):
    ner_scoring.tags_from_entities([("PER", 0, 2), ("LOC", 1, 3)], 3, "BIO")


# conlleval's chunk conditions (with S- and E- as seqeval adds them), written as tables of
# (previous prefix, prefix) pairs; a change of type ends and starts a chunk too. M counts
# as I.
_CONLLEVAL_ENDS = {("B", "B"), ("B", "S"), ("B", "O"), ("I", "B"), ("I", "S"), ("I", "O"),
                   ("E", "B"), ("E", "I"), ("E", "E"), ("E", "S"), ("E", "O"),
                   ("S", "B"), ("S", "I"), ("S", "E"), ("S", "S"), ("S", "O")}
_CONLLEVAL_STARTS = {("O", "I"), ("O", "E"), ("E", "I"), ("E", "E"), ("S", "I"), ("S", "E")}


def conlleval_chunks(tags):
  """Chunks by the table above: an independent oracle for entities()."""
  parts = [("O", "") if tag == "O" else (tag[0].replace("M", "I"), tag[2:]) for tag in tags]
  chunks, start = [], None
  previous = ("O", "")
  for position, (prefix, entity_type) in enumerate(parts + [("O", "")]):
    type_changed = previous[0] != "O" and prefix != "O" and entity_type != previous[1]
    if start is not None and ((previous[0], prefix) in _CONLLEVAL_ENDS or type_changed):
      chunks.append((previous[1], start, position))
      start = None
    if prefix in ("B", "S") or (prefix != "O" and (
        (previous[0], prefix) in _CONLLEVAL_STARTS or entity_type != previous[1])):
      start = position
    previous = (prefix, entity_type)
  return chunks


def random_tags(rng, length, prefixes):
  choices = ["O"] + ["%s-%s" % (p, t) for p in prefixes for t in ("PER", "LOC")]
  return [rng.choice(choices) for _ in range(length)]


def test_random_sequences_agree_with_conlleval_and_survive_repair():
  rng = random.Random(0)
  for _ in range(500):
    tags = random_tags(rng, rng.randint(0, 8), "BIMES")
    found = entities(tags)
    assert found == conlleval_chunks(tags), tags
    for scheme in ("BIO", "BIOES", "BMES"):
      repaired = repair(tags, scheme)
      assert all(ner_scoring.is_valid_tag(tag, scheme) for tag in repaired)
      assert entities(repaired, scheme) == found, (tags, scheme)
      assert repair(repaired, scheme) == repaired


def test_format_report():
  gold = [["B-PER", "I-PER", "O", "B-LOC"]]
  predicted = [["B-PER", "I-PER", "O", "O"]]
  report = ner_scoring.format_report(score(gold, predicted), digits=2)
  lines = report.splitlines()
  assert lines[0] == "processed 4 tokens with 2 entities; found: 1 entities; correct: 1."
  assert lines[1] == "accuracy: 75.00% (tags)"
  assert lines[3].split() == ["precision", "recall", "f1", "support"]
  assert lines[4].split() == ["LOC", "0.00", "0.00", "0.00", "1"]
  assert lines[5].split() == ["PER", "1.00", "1.00", "1.00", "1"]
  assert lines[7].split() == ["micro", "avg", "1.00", "0.50", "0.67", "2"]
  assert lines[8].split() == ["macro", "avg", "0.50", "0.50", "0.50", "2"]
