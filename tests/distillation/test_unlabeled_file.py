# coding=utf-8
"""--unlabeled_file's reader (classifier/unlabeled_examples.read_unlabeled_examples): one example
per line, split on "\\n" only, so a text holding U+2028 stays one example and the line an
error names is the editor's; a byte order mark is dropped; blank lines are skipped."""

import pytest

from bert_mgpu.classifier import unlabeled_examples
from bert_mgpu.errors import UsageError


def write(tmp_path, text):
  path = tmp_path / "unlabeled.txt"
  path.write_bytes(text.encode("utf-8"))
  return str(path)


def test_lines_split_on_newlines_only(tmp_path):
  path = write(tmp_path, "\ufefffirst\u2028half\n\nsecond\r\n")
  examples = unlabeled_examples.read_unlabeled_examples(path, pairs=False)
  assert [(e.text_a, e.text_b, e.label, e.source_line) for e in examples] == [
      ("first\u2028half", None, None, 1), ("second", None, None, 3)]


def test_pairs_take_two_fields(tmp_path):
  path = write(tmp_path, "a1\tb1\na2\tb2\n")
  examples = unlabeled_examples.read_unlabeled_examples(path, pairs=True)
  assert [(e.text_a, e.text_b) for e in examples] == [("a1", "b1"), ("a2", "b2")]


def test_a_line_with_other_fields_is_named_by_its_line(tmp_path):
  path = write(tmp_path, "first\u2028half\nsecond\tbad\n")
  with pytest.raises(UsageError) as error:
    unlabeled_examples.read_unlabeled_examples(path, pairs=False)
  assert str(error.value).startswith("%s:2: 2 tab-separated fields, expected 1" % path)


def test_a_file_without_text_is_refused(tmp_path):
  with pytest.raises(UsageError, match="no text in it"):
    unlabeled_examples.read_unlabeled_examples(write(tmp_path, "\n \n"), pairs=False)
