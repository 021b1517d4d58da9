# coding=utf-8
"""The splits of an NER run: read and checked with the tag list, windowed, written as
TFRecord files (BERT's inputs, tag_ids and tag_mask), and the training batches' loss
weights.

The features are written on every run (no cache): ner_<split>.tf_record in the run's
cache_dir.
"""

import os

import tensorflow.compat.v1 as tf

from bert_mgpu.data import label_files
from bert_mgpu.data import tfrecord_io
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import featurizing
from bert_mgpu.ner import formats
from bert_mgpu.ner import scoring as ner_scoring
from bert_mgpu.ner import tag_labels

# The scheme CLUENER's and CMeEE's spans are written in as tags.
CLUENER_SCHEME = "BIO"


class Split(object):
  """One split, read and featurized.

  Attributes:
    data: the formats.NerFile.
    featurized: per sentence, (SentencePieces, list of NerWindow).
    record_file: the TFRecord file of its windows (once written).
  """

  def __init__(self, data):
    self.data = data
    self.featurized = None
    self.record_file = None

  @property
  def windows(self):
    return [window for _, windows in self.featurized for window in windows]


def feature_spec(max_seq_length):
  return {name: tf.FixedLenFeature([max_seq_length], tf.int64)
          for name in tfrecord_io.SEQUENCE_FEATURES}


def window_records(windows):
  """Serialized tf.train.Examples of windows: BERT's inputs, tag_ids and tag_mask."""
  for window in windows:
    features = {
        "input_ids": window.input_ids, "input_mask": window.input_mask,
        "segment_ids": window.segment_ids, "tag_ids": window.label_ids,
        "tag_mask": window.label_mask}
    yield tf.train.Example(features=tf.train.Features(feature={
        name: tfrecord_io.int64_feature(values) for name, values in features.items()
    })).SerializeToString()


def read_splits(data_dir, data_format, split_names, label_list_dir):
  """Reads the splits and the tag list, and checks every tag, before anything is written.

  Args:
    data_dir: the directory of the data files.
    data_format: one of formats.DATA_FORMATS, or "auto" (conll or cluener, by the file
      names in data_dir).
    split_names: the splits to read ("train", "dev", "test"). With "train", the tag list
      comes from the training data; without, from label_list_dir's labels.txt.
    label_list_dir: the output_dir of a --do_train run.

  Returns:
    (dict split name -> Split, the data format, the label list, its scheme).

  Raises:
    UsageError: a file is missing or malformed, or a tag does not fit.
  """
  if data_format == "auto":
    data_format = formats.detect_data_format(data_dir)
  splits = {name: Split(formats.read_split(data_dir, data_format, name, CLUENER_SCHEME))
            for name in split_names}
  if "train" in splits:
    label_list = tag_labels.resolve_label_list(splits["train"].data, data_dir)
  else:
    labels_file = os.path.join(label_list_dir, label_files.LABELS_FILE)
    if not os.path.isfile(labels_file):
      raise UsageError("%s not found: evaluate or predict with the --output_dir of a "
                       "--do_train run (it keeps the tag list there)." % labels_file)
    label_list = tag_labels.read_label_file(labels_file)
  scheme = ner_scoring.detect_scheme(label_list)
  for split in splits.values():
    tag_labels.check_tags(split.data, scheme, label_list if split.data.tagged else None)
    if split.data.dropped_overlaps:
      # The tags cannot hold them; the sentences' spans still do.
      tf.logging.warning("%s: %d entities overlap an earlier one and were dropped from the "
                         "tags (first on line %s).", split.data.path,
                         split.data.dropped_overlaps, split.data.first_overlap_line)
  tf.logging.info("NER data: %s format, %s scheme, %d tags: %s", data_format, scheme,
                  len(label_list), " ".join(label_list))
  return splits, data_format, label_list, scheme


def featurize_split(split, tokenizer, label_list, max_seq_length, doc_stride):
  """Windows a split's sentences (in memory), unless done already."""
  if split.featurized is None:
    split.featurized = featurizing.featurize_sentences(
        split.data.sentences, tokenizer, label_list, max_seq_length, doc_stride)


def featurize(splits, tokenizer, label_list, cache_dir, max_seq_length, doc_stride):
  """Windows every split (unless done already) and writes its TFRecord file into
  cache_dir."""
  for name, split in splits.items():
    featurize_split(split, tokenizer, label_list, max_seq_length, doc_stride)
    split.record_file = os.path.join(cache_dir, "ner_%s.tf_record" % name)
    count = tfrecord_io.write_records_atomically(split.record_file,
                                                 window_records(split.windows))
    tf.logging.info("%s: %d sentences in %d windows (%d longer than max_seq_length=%d were "
                    "split)", split.data.path, len(split.featurized), count,
                    sum(len(w) > 1 for _, w in split.featurized), max_seq_length)


def with_loss_weights(dataset, num_replicas):
  """Adds loss_weight = replicas / (first pieces in the micro-batch) to every row, so that
  the towers' mean loss is the token mean over the whole batch (ner_model)."""
  def add(batch):
    count = tf.reduce_sum(tf.cast(batch["tag_mask"], tf.float32))
    batch = dict(batch)
    batch["loss_weight"] = tf.fill(tf.shape(batch["tag_mask"])[:1],
                                   float(num_replicas) / tf.maximum(count, 1.0))
    return batch
  return dataset.map(add)
