# coding=utf-8
"""NER tags: the tag scheme of a file, the checks of its tags, and the label list
(labels.txt, else the training file's tags).

No TensorFlow import.
"""

import collections
import os

from bert_mgpu.data import label_files
from bert_mgpu.data import text_files
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import formats
from bert_mgpu.ner import scoring as ner_scoring


def _tagged_positions(ner_file):
  """Yields (sentence, token index, tag) over every tag of a tagged file."""
  for sentence in ner_file.sentences:
    for index, tag in enumerate(sentence.tags or ()):
      yield sentence, index, tag


def detect_file_scheme(ner_file):
  """The tag scheme of a file (the training file's decides a run's scheme).

  Returns:
    One of ner_scoring.SCHEMES (see ner_scoring.detect_scheme).

  Raises:
    UsageError: the file has both I- and M- tags (the message names a line of each).
  """
  first_of_prefix = collections.OrderedDict()
  for sentence, index, tag in _tagged_positions(ner_file):
    first_of_prefix.setdefault(tag[0], (tag, sentence.line_of_token(index)))
  try:
    return ner_scoring.detect_scheme(tag for tag, _ in first_of_prefix.values())
  except ValueError:
    (i_tag, i_line), (m_tag, m_line) = first_of_prefix["I"], first_of_prefix["M"]
    raise text_files.line_error(
        ner_file.path, m_line, "tag %s is BMES but line %d has %s, a BIO/BIOES tag"
        % (formats.quote(m_tag), i_line, formats.quote(i_tag)),
        "write all tags in one scheme (M- and I- both mean inside)")


def not_in_labels_error(sentence, index, num_labels):
  """The UsageError for token `index` of `sentence`, whose tag is not a known label."""
  return text_files.line_error(
      sentence.source_file, sentence.line_of_token(index),
      "tag %s is not in the label list (%d labels)" % (formats.quote(sentence.tags[index]),
                                                       num_labels),
      "fix the tag, or list every tag in labels.txt in the data directory and train again")


def check_tags(ner_file, scheme, label_list=None):
  """Checks that every tag of a file is in `scheme` and, if given, in `label_list`.

  Raises:
    UsageError: the first tag outside them, with its file, line and value.
  """
  known = frozenset(label_list) if label_list is not None else None
  for sentence, index, tag in _tagged_positions(ner_file):
    if not ner_scoring.is_valid_tag(tag, scheme):
      raise text_files.line_error(
          ner_file.path, sentence.line_of_token(index),
          "tag %s is outside the %s scheme of the training file" % (formats.quote(tag), scheme),
          "write the tags of every split in one scheme (%s allows O and %s-<type>)"
          % (scheme, "-, ".join(sorted(ner_scoring.SCHEME_PREFIXES[scheme]))))
    if known is not None and tag not in known:
      raise not_in_labels_error(sentence, index, len(known))


def _tag_label_problem(label):
  """label_files.read_label_file's check of one label: None for a tag, else the error."""
  if ner_scoring.split_tag(label) is None:
    return ("label %s is not O nor B-, I-, M-, E- or S-<type>; list the tags of the data"
            % formats.quote(label))
  return None


def read_label_file(path):
  """Reads labels.txt: one tag per line, in label-id order; blank lines ignored.

  Raises:
    UsageError: a tag listed twice, a malformed tag, no label at all, or no O.
  """
  labels = label_files.read_label_file(path, check_label=_tag_label_problem, as_json=True)
  if ner_scoring.OUTSIDE not in labels:
    raise UsageError("%s: no label O; list O and every other tag, one per line" % path)
  return labels


def resolve_label_list(train_file, data_dir):
  """The label list: data_dir/labels.txt when present, else O and the training file's
  other tags sorted.

  Args:
    train_file: the NerFile of the training split.
    data_dir: the data directory.

  Returns:
    list of str; the index of a tag is its label id.
  """
  path = os.path.join(data_dir, label_files.LABELS_FILE)
  if os.path.exists(path):
    return read_label_file(path)
  tags = set(tag for _, _, tag in _tagged_positions(train_file))
  tags.discard(ner_scoring.OUTSIDE)
  return [ner_scoring.OUTSIDE] + sorted(tags)

