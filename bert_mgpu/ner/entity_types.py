# coding=utf-8
"""The label list of the span heads: entity types, not tags (labels.txt holds one type per
line, in type-id order).

No TensorFlow import.
"""

from bert_mgpu.data import label_files
from bert_mgpu.data import text_files
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import formats


def _type_problem(label):
  """label_files.read_label_file's check of one type: None when fine, else the error."""
  if not label or any(char.isspace() for char in label):
    return "entity type %s is empty or holds whitespace" % formats.quote(label)
  return None


def read_type_file(path):
  """Reads a span head's labels.txt: one entity type per line; blank lines ignored.

  Raises:
    UsageError: a type listed twice, a bad type, or none.
  """
  return label_files.read_label_file(path, check_label=_type_problem, as_json=True)


def types_of(ner_file):
  """The sorted entity types of a tagged file's spans."""
  return sorted(set(span[0] for sentence in ner_file.sentences for span in sentence.spans))


def check_types(ner_file, type_list):
  """Checks that every span of a tagged file has a type of type_list.

  Raises:
    UsageError: the first span of another type, with its file and line.
  """
  known = frozenset(type_list)
  for sentence in ner_file.sentences:
    for entity_type, start, _ in sentence.spans or ():
      if entity_type not in known:
        raise text_files.line_error(
            ner_file.path, sentence.line_of_token(start),
            "entity type %s is not among the %d types of the model (%s)"
            % (formats.quote(entity_type), len(type_list), " ".join(type_list)),
            "fix the type, or train on data that has it")


def require_types(type_list, train_path):
  """Refuses a training file without any entity: a span head would have no type."""
  if not type_list:
    raise UsageError("%s has no entity: a span head needs at least one entity type in the "
                     "training data" % train_path)
