# coding=utf-8
"""Tests of bert_mgpu/data/label_files.py: labels.txt written one label a line, read in
order, blank lines ignored, and one-line errors (a label listed twice, an empty file, a line
that is not UTF-8, a carriage return inside a line, a label the caller's check refuses),
quoted in both styles.
"""

import pytest

from bert_mgpu.data import label_files
from bert_mgpu.data import text_files
from bert_mgpu.errors import UsageError


def write_bytes(path, data):
  with open(str(path), "wb") as f:
    f.write(data)
  return str(path)


def write(path, text):
  """Writes `text` as UTF-8, byte for byte (no newline translation)."""
  return write_bytes(path, text.encode("utf-8"))


def error_of(func, *args, **kwargs):
  """The message of the one-line UsageError that func(*args, **kwargs) raises."""
  with pytest.raises(UsageError) as info:
    func(*args, **kwargs)
  message = str(info.value)
  assert "\n" not in message
  return message


def test_labels_in_file_order_blank_lines_and_surrounding_space_ignored(tmp_path):
  path = write(tmp_path / "labels.txt", u"\ufeffzeta\n\n  b \r\n\t\na\n体育")
  assert label_files.read_label_file(path) == [u"zeta", u"b", u"a", u"体育"]


def test_a_label_listed_twice_names_both_lines(tmp_path):
  path = write(tmp_path / "labels.txt", u"a\nb\n\na \n")
  assert error_of(label_files.read_label_file, path) == (
      "%s line 4: label 'a' is listed twice (first on line 1); list every label once" % path)
  # NER's style: JSON quotes.
  assert error_of(label_files.read_label_file, path, as_json=True) == (
      '%s line 4: label "a" is listed twice (first on line 1); list every label once' % path)


@pytest.mark.parametrize("text", [u"", u"\n", u"\n  \n\t\r\n"])
def test_a_file_without_labels_is_refused(tmp_path, text):
  path = write(tmp_path / "labels.txt", text)
  assert error_of(label_files.read_label_file, path) == (
      "%s: no labels in the file; write the labels one per line" % path)


def test_a_line_that_is_not_utf8_is_named(tmp_path):
  path = write_bytes(tmp_path / "labels.txt", u"a\n体育\n".encode("utf-8") +
                     u"财经\n".encode("gb18030"))
  message = error_of(label_files.read_label_file, path)
  assert message.startswith("%s line 3: byte 0x" % path)
  assert "not valid UTF-8" in message


def test_a_missing_file_is_one_line(tmp_path):
  path = str(tmp_path / "labels.txt")
  assert error_of(label_files.read_label_file, path) == (
      "%s: file not found; check the path" % path)


def test_a_carriage_return_inside_a_line_is_refused(tmp_path):
  path = write(tmp_path / "labels.txt", u"a\nb\rc\r\n")
  message = error_of(label_files.read_label_file, path)
  assert message.startswith("%s line 2: carriage return (\\r) inside the line, at character 2: "
                            "'b\\rc'; " % path)
  assert '"b\\rc"' in error_of(label_files.read_label_file, path, as_json=True)


def test_the_check_sees_each_label_once_and_its_message_names_the_line(tmp_path):
  path = write(tmp_path / "labels.txt", u"O\n\nB-PER\n x \nI-PER\n")
  seen = []

  def check(label):
    seen.append(label)
    return None if "-" in label or label == "O" else "label %s is no tag; fix it" % label

  assert error_of(label_files.read_label_file, path, check_label=check) == (
      "%s line 4: label x is no tag; fix it" % path)
  assert seen == ["O", "B-PER", "x"]  # stops at the refused label, skips blank lines
  del seen[:]
  path = write(tmp_path / "labels.txt", u"O\nB-PER\n\nI-PER\n")
  assert label_files.read_label_file(path, check_label=check) == ["O", "B-PER", "I-PER"]
  assert seen == ["O", "B-PER", "I-PER"]


def test_a_label_listed_twice_is_refused_before_the_check_sees_it(tmp_path):
  path = write(tmp_path / "labels.txt", u"a\na\n")
  seen = []
  message = error_of(label_files.read_label_file, path,
                     check_label=lambda label: seen.append(label))
  assert "line 2: label 'a' is listed twice (first on line 1)" in message
  assert seen == ["a"]


def test_quote_value_styles_and_shortening():
  assert text_files.quote_value(u"体 育") == u"'体 育'"
  assert text_files.quote_value(u"体 育", as_json=True) == u'"体 育"'
  assert text_files.quote_value(None, as_json=True) == "null"
  assert text_files.quote_value([0, 5], as_json=True) == "[0, 5]"
  assert text_files.quote_value(7) == "'7'"
  # repr: the text is cut at 80 characters; JSON: the quoted text at 60.
  assert text_files.quote_value("x" * 81) == repr("x" * 80 + "...")
  assert text_files.quote_value("x" * 80) == repr("x" * 80)
  assert text_files.quote_value("x" * 59, as_json=True) == '"' + "x" * 59 + '...'
  assert text_files.quote_value("x" * 58, as_json=True) == '"' + "x" * 58 + '"'


def test_the_written_file_is_one_label_a_line_and_reads_back(tmp_path):
  path = label_files.write_label_file(str(tmp_path), [u"O", u"B-地名", u"I-地名"])
  assert path == str(tmp_path / label_files.LABELS_FILE)
  with open(path, "rb") as f:
    assert f.read() == u"O\nB-地名\nI-地名\n".encode("utf-8")
  assert label_files.read_label_file(path) == [u"O", u"B-地名", u"I-地名"]
