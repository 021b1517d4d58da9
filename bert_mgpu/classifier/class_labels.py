# coding=utf-8
"""The label list of a classifier run: resolving, checking and saving it.

Label list: data_dir/labels.txt (one label per line), else the task's fixed
list, else the sorted labels of the training file; training saves it to
output_dir/labels.txt, which runs without --do_train reuse. Every label of every example
(each of a --multi_label example's labels) must be in the list.
"""

import logging
import os

from bert_mgpu.classifier import file_readers
from bert_mgpu.data import label_files
from bert_mgpu.errors import UsageError, write_error

# Child of TensorFlow's logger (tf.get_logger() is the "tensorflow" logger; naming it
# needs no TensorFlow import): the messages appear next to tf.logging's and
# follow tf.logging.set_verbosity(). The classifier's data modules share it, under the
# name their log lines have always shown.
_LOGGER = logging.getLogger("tensorflow").getChild("classifier_data")


def resolve_label_list(processor, data_dir, output_dir, do_train):
  """The label list of a run, in label-id order.

  Training uses data_dir/labels.txt, else the task's fixed list, else the sorted
  distinct labels of the training file (main() saves it with write_label_list
  once every split has been checked). A run that does not train reuses output_dir/labels.txt
  when it exists: those are the labels the model was trained with.

  Args:
    processor: a DataProcessor.
    data_dir: the data directory.
    output_dir: the model directory.
    do_train: whether this run trains.

  Returns:
    A list of label strings.
  """
  saved_path = os.path.join(output_dir, label_files.LABELS_FILE)
  if not do_train and os.path.exists(saved_path):
    labels = label_files.read_label_file(saved_path)
    _LOGGER.info("label list (%d labels) from %s", len(labels), saved_path)
    return labels
  labels = processor.get_labels(data_dir)
  separator = processor.label_separator
  for label in labels:
    if "\n" in label or "\r" in label:
      raise UsageError("label %s contains a line break; labels must be single-line strings"
                       % file_readers.quote(label))
    if separator is not None and separator in label:
      raise UsageError("label %s contains the label separator %s; choose another "
                       "--label_separator or rename the label" % (file_readers.quote(label),
                                                                  file_readers.quote(separator)))
  return labels


def read_splits(processor, data_dir, output_dir, splits):
  """Reads and checks the splits a run uses, before anything is trained or written.

  Args:
    processor: the task's DataProcessor.
    data_dir, output_dir: as for resolve_label_list.
    splits: the split names to read ("train", "dev", "test"); with "train" the label list
      comes from the data, else from output_dir/labels.txt when it exists.

  Returns:
    (dict split -> list of InputExample, the label list).
  """
  examples = {split: processor.get_examples(data_dir, split) for split in splits}
  label_list = resolve_label_list(processor, data_dir, output_dir, "train" in splits)
  for split_examples in examples.values():
    check_labels(split_examples, label_list)
  return examples, label_list


def make_dirs(directory):
  """Creates `directory` (and its parents) unless it exists; a UsageError when it cannot."""
  try:
    if not os.path.isdir(directory):
      os.makedirs(directory)
  except OSError as e:
    raise write_error(directory, e)


def write_label_list(output_dir, labels):
  """Saves the label list a model is trained with as output_dir/labels.txt.

  Raises:
    UsageError: the file cannot be written.
  """
  make_dirs(output_dir)
  saved_path = label_files.write_label_file(output_dir, labels)
  _LOGGER.info("label list (%d labels) written to %s", len(labels), saved_path)


def _describe_labels(label_list, limit=10):
  """A short rendering of a label list for error messages."""
  shown = ", ".join(label_list[:limit])
  if len(label_list) > limit:
    shown += ", ... (%d labels)" % len(label_list)
  return "[" + shown + "]"


def unknown_label_error(example, label_list, label):
  """The UsageError for `label` of `example`, which is not in `label_list`."""
  if example.source_file and example.source_line:
    where = "%s line %d" % (example.source_file, example.source_line)
  else:
    where = "example %s" % example.guid
  return UsageError(
      "%s: label %s is not in the label list %s; fix the label, or list every label in "
      "labels.txt in the data directory and train again"
      % (where, file_readers.quote(label), _describe_labels(label_list)))


def example_labels(example):
  """The labels of an example: () for none, one for a label string, all of a label set."""
  if example.label is None:
    return ()
  return example.label if isinstance(example.label, tuple) else (example.label,)


def check_labels(examples, label_list):
  """Raises UsageError for the first example with a label not in `label_list`."""
  known = set(label_list)
  for example in examples:
    for label in example_labels(example):
      if label not in known:
        raise unknown_label_error(example, label_list, label)
