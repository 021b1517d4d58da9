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
from bert_mgpu.ner import entity_types
from bert_mgpu.ner import featurizing
from bert_mgpu.ner import formats
from bert_mgpu.ner import scoring as ner_scoring
from bert_mgpu.ner import span_scoring
from bert_mgpu.ner import span_windows
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
    self.window_spans = None  # span heads: per window, its (type id, start, end) triples

  @property
  def windows(self):
    return [window for _, windows in self.featurized for window in windows]


def feature_spec(max_seq_length):
  return {name: tf.FixedLenFeature([max_seq_length], tf.int64)
          for name in tfrecord_io.SEQUENCE_FEATURES}


def _serialized(window, **labels):
  """A window's tf.train.Example, serialized: BERT's inputs and the given label features
  (lists of int)."""
  features = dict(labels, input_ids=window.input_ids, input_mask=window.input_mask,
                  segment_ids=window.segment_ids)
  # Deterministic: the same windows give the same bytes (distillation keys them by content).
  return tf.train.Example(features=tf.train.Features(feature={
      name: tfrecord_io.int64_feature(values) for name, values in features.items()
  })).SerializeToString(deterministic=True)


def window_records(windows):
  """Serialized tf.train.Examples of windows: BERT's inputs, tag_ids and tag_mask."""
  for window in windows:
    yield _serialized(window, tag_ids=window.label_ids, tag_mask=window.label_mask)


def read_splits(data_dir, data_format, split_names, label_list_dir, span_head=False):
  """Reads the splits and the tag list, and checks every tag, before anything is written.

  Args:
    data_dir: the directory of the data files.
    data_format: one of formats.DATA_FORMATS, or "auto" (conll or cluener, by the file
      names in data_dir).
    split_names: the splits to read ("train", "dev", "test"). With "train", the tag list
      comes from the training data; without, from label_list_dir's labels.txt.
    label_list_dir: the output_dir of a --do_train run.
    span_head: the label list holds entity types (ner/entity_types.py), and the spans are
      kept as given, nested ones included; the scheme returned is None.

  Returns:
    (dict split name -> Split, the data format, the label list, its scheme).

  Raises:
    UsageError: a file is missing or malformed, or a tag does not fit.
  """
  if data_format == "auto":
    data_format = formats.detect_data_format(data_dir)
  splits = {name: Split(formats.read_split(data_dir, data_format, name, CLUENER_SCHEME))
            for name in split_names}
  if span_head:
    return splits, data_format, _read_type_list(splits, label_list_dir, data_format), None
  if "train" in splits:
    label_list = tag_labels.resolve_label_list(splits["train"].data, data_dir)
  else:
    label_list = tag_labels.read_label_file(_labels_file(label_list_dir))
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


def _read_type_list(splits, label_list_dir, data_format):
  """The span heads' label list (the training spans' types, else labels.txt), checked
  against every split's spans."""
  if "train" in splits:
    type_list = entity_types.types_of(splits["train"].data)
    entity_types.require_types(type_list, splits["train"].data.path)
  else:
    type_list = entity_types.read_type_file(_labels_file(label_list_dir))
  for split in splits.values():
    if split.data.tagged:
      entity_types.check_types(split.data, type_list)
  nested = sum(len(span_scoring.inside_another(sentence.spans))
               for split in splits.values() if split.data.tagged
               for sentence in split.data.sentences)
  tf.logging.info("NER data: %s format, spans (%d entities lie inside another), %d types: "
                  "%s", data_format, nested, len(type_list), " ".join(type_list))
  return type_list


def _labels_file(label_list_dir):
  labels_file = os.path.join(label_list_dir, label_files.LABELS_FILE)
  if not os.path.isfile(labels_file):
    raise UsageError("%s not found: evaluate or predict with the --output_dir of a "
                     "--do_train run (it keeps the label list there)." % labels_file)
  return labels_file


def featurize_split(split, tokenizer, label_list, max_seq_length, doc_stride,
                    span_head=False):
  """Windows a split's sentences (in memory), unless done already; with span_head, the
  label list holds entity types and each window gets the spans it holds."""
  if split.featurized is not None:
    return
  split.featurized = featurizing.featurize_sentences(
      split.data.sentences, tokenizer, label_list, max_seq_length, doc_stride,
      use_tags=not span_head)
  if span_head and split.data.tagged:
    type_ids = {entity_type: index for index, entity_type in enumerate(label_list)}
    split.window_spans, totals = [], [0, 0, 0]
    for sentence, (aligned, windows) in zip(split.data.sentences, split.featurized):
      triples, counts = span_windows.window_span_triples(aligned, windows, sentence.spans,
                                                         type_ids)
      split.window_spans.extend(triples)
      totals = [total + count for total, count in zip(totals, counts)]
    counts = span_windows.SpanCounts(*totals)
    if counts.longer_than_window or counts.without_pieces:
      tf.logging.warning(
          "%s: of %d entities, %d hold more word pieces than a window (max_seq_length - 2) "
          "and %d cover only characters without pieces: no window learns them.",
          split.data.path, *counts)


def span_feature_spec(max_seq_length, max_spans):
  """The span heads' records: BERT's inputs and span_triples [max_spans * 3]."""
  spec = {name: tf.FixedLenFeature([max_seq_length], tf.int64)
          for name in tfrecord_io.MODEL_INPUTS}
  spec["span_triples"] = tf.FixedLenFeature([max_spans * 3], tf.int64)
  return spec


def span_window_records(windows, window_spans, max_spans):
  """Serialized tf.train.Examples of the span heads' windows: BERT's inputs and the
  (type id, start, end) triples of each window, padded with -1 to max_spans."""
  for index, window in enumerate(windows):
    triples = [value for triple in (window_spans[index] if window_spans else [])
               for value in triple]
    yield _serialized(window, span_triples=triples + [-1] * (3 * max_spans - len(triples)))


def featurize(splits, tokenizer, label_list, cache_dir, max_seq_length, doc_stride,
              span_head=False):
  """Windows every split (unless done already) and writes its TFRecord file into
  cache_dir.

  Returns:
    With span_head, the records' padded span count (the most spans a window holds), else
    None.
  """
  max_spans = None
  for split in splits.values():
    featurize_split(split, tokenizer, label_list, max_seq_length, doc_stride, span_head)
  if span_head:
    max_spans = span_windows.max_spans_per_window(
        [triples for split in splits.values() for triples in split.window_spans or []])
  for name, split in splits.items():
    split.record_file = os.path.join(cache_dir, "ner_%s.tf_record" % name)
    records = (span_window_records(split.windows, split.window_spans, max_spans) if span_head
               else window_records(split.windows))
    count = tfrecord_io.write_records_atomically(split.record_file, records)
    tf.logging.info("%s: %d sentences in %d windows (%d longer than max_seq_length=%d were "
                    "split)", split.data.path, len(split.featurized), count,
                    sum(len(w) > 1 for _, w in split.featurized), max_seq_length)
  return max_spans


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
