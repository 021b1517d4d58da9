# coding=utf-8
"""The classifier's unlabelled examples of distillation (--unlabeled_file,
docs/DISTILLATION.md). They are featurized into the feature cache like a split; the
teacher's logits on them and on the training records are computed over the student's own
records (distillation/teacher_outputs.py), so a --long_text teacher gives one row per
document after its window pooling, as the student's loss needs."""

from bert_mgpu.classifier import input_examples
from bert_mgpu.data import text_files
from bert_mgpu.errors import UsageError

UNLABELED_SPLIT = "unlabeled"


def read_unlabeled_examples(path, pairs):
  """The examples of --unlabeled_file: one per line, its text (text_a TAB text_b for a pair
  task), no label; blank lines are skipped.

  Args:
    path: the file.
    pairs: whether the task's examples are text pairs (any training example has a text_b).

  Raises:
    UsageError: no such file, not UTF-8 (text_files.text_lines), or a line with another
      number of columns.
  """
  columns = 2 if pairs else 1
  examples = []
  for number, line in text_files.text_lines(path):
    if not line.strip():
      continue
    fields = line.split("\t")
    if len(fields) != columns:
      raise UsageError("%s:%d: %d tab-separated fields, expected %d (%s): %r" % (
          path, number, len(fields), columns,
          "text_a TAB text_b, as the task's pairs" if pairs else "the text alone, no tab",
          line[:60]))
    examples.append(input_examples.InputExample(
        guid="%s-%d" % (UNLABELED_SPLIT, number), text_a=fields[0],
        text_b=fields[1] if pairs else None, source_file=path, source_line=number))
  if not examples:
    raise UsageError("--unlabeled_file=%s: no text in it; give one example per line, or "
                     "leave the flag out." % path)
  return examples
