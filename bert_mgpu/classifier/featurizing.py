# coding=utf-8
"""Featurizing classifier examples: tokens, truncation or head and tail, their label ids,
and the checks made before featurizing; no TensorFlow (the ONNX Runtime predictor runs it).

Texts longer than max_seq_length are truncated (Google's), keep head and tail, or are cut
into windows (FeatureOptions.long_text; windowed records: records.windowed_record).
records.py writes the features as TFRecords; featurizing_pool.py runs both over whole splits,
in worker processes when they are large.
"""

import os

from bert_mgpu.classifier import class_labels
from bert_mgpu.classifier import input_examples
from bert_mgpu.classifier import long_text
from bert_mgpu.errors import UsageError
import tokenization


def _truncate_seq_pair(tokens_a, tokens_b, max_length):
  """Shortens the longer sequence one token at a time until both fit (in place).

  Dropping from the longer one keeps as much of the shorter text as possible;
  on a tie the second sequence loses a token, as in Google's code.
  """
  while len(tokens_a) + len(tokens_b) > max_length:
    if len(tokens_a) > len(tokens_b):
      tokens_a.pop()
    else:
      tokens_b.pop()


def _fit_tokens(tokens_a, tokens_b, max_seq_length, options):
  """The tokens kept of each text so that the pair fits max_seq_length.

  Each text keeps as many tokens as Google's truncation keeps (the longer text loses tokens
  first); "truncate" keeps them from the start, "head_tail" the first head_tokens (at most
  what the text keeps) and the rest from the end.
  """
  if tokens_b:
    kept_a, kept_b = list(tokens_a), list(tokens_b)
    _truncate_seq_pair(kept_a, kept_b, max_seq_length - 3)  # [CLS] [SEP] [SEP]
    rooms = (len(kept_a), len(kept_b))
  else:
    rooms = (max_seq_length - 2, 0)  # [CLS] [SEP]
  if options.long_text != "head_tail":
    return tokens_a[:rooms[0]], tokens_b[:rooms[1]]
  return tuple(long_text.head_tail(tokens, room, None if options.head_tokens is None else
                                   min(options.head_tokens, room))
               for tokens, room in ((tokens_a, rooms[0]), (tokens_b, rooms[1])))


def convert_example_counting_truncation(example, label_map, max_seq_length, tokenizer,
                                        options=input_examples.FeatureOptions()):
  """convert_single_example (with long_text "truncate" or "head_tail"), and whether the
  texts had to be cut."""
  tokens_a = tokenizer.tokenize(example.text_a)
  tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else []
  num_tokens = len(tokens_a) + len(tokens_b)
  tokens_a, tokens_b = _fit_tokens(tokens_a, tokens_b, max_seq_length, options)
  truncated = len(tokens_a) + len(tokens_b) < num_tokens

  tokens = ["[CLS]"] + tokens_a + ["[SEP]"]
  segment_ids = [0] * len(tokens)
  if tokens_b:
    tokens += tokens_b + ["[SEP]"]
    segment_ids += [1] * (len(tokens_b) + 1)
  input_ids = list(tokenizer.convert_tokens_to_ids(tokens))
  input_mask = [1] * len(input_ids)

  padding = max_seq_length - len(input_ids)
  input_ids += [0] * padding
  input_mask += [0] * padding
  segment_ids += [0] * padding

  features = input_examples.InputFeatures(
      input_ids, input_mask, segment_ids,
      example_label_ids(example, label_map, options.multi_label), is_real_example=True)
  return features, truncated


def example_label_ids(example, label_map, multi_label):
  """The label id of an example (0 without a label); with multi_label, its multi-hot list
  [num_labels] (all zeros without labels)."""
  for label in class_labels.example_labels(example):
    if label not in label_map:
      raise class_labels.unknown_label_error(example, sorted(label_map, key=label_map.get),
                                             label)
  if not multi_label:
    return label_map[example.label] if example.label is not None else 0
  multi_hot = [0] * len(label_map)
  for label in class_labels.example_labels(example):
    multi_hot[label_map[label]] = 1
  return multi_hot


def convert_single_example(example, label_map, max_seq_length, tokenizer, multi_label=False):
  """Converts one InputExample into InputFeatures.

  Layout: [CLS] a [SEP] for one text, [CLS] a [SEP] b [SEP] for a pair, with
  segment id 0 up to and including the first [SEP] and 1 after it; the input
  mask is 1 on real tokens; ids, mask and segments are zero-padded. A text_b
  that is empty or has no tokens makes a single-text example, as in Google's code.

  Args:
    example: an InputExample.
    label_map: dict label -> label id.
    max_seq_length: length of the padded sequences (>= 3).
    tokenizer: object with tokenize(text) and convert_tokens_to_ids(tokens).
    multi_label: the example's label is a tuple of labels; label_id becomes their
      multi-hot list [len(label_map)].

  Returns:
    InputFeatures; label_id is 0 when the example has no label.

  Raises:
    UsageError: the example's label is not in label_map.
  """
  options = input_examples.FeatureOptions(multi_label=multi_label)
  return convert_example_counting_truncation(example, label_map, max_seq_length, tokenizer,
                                             options)[0]


def _check_vocab(vocab_file):
  """Fails early, in this process, when the vocab cannot serve the tokenizer."""
  if os.path.isdir(vocab_file):
    raise UsageError("%s is a directory, not a vocab file; give vocab.txt itself" % vocab_file)
  try:
    tokens = tokenization.load_vocab(vocab_file)  # the tokenizer's own reading of it
  except ValueError as e:
    raise UsageError(str(e))
  missing = tokenization.missing_special_token(tokens)
  if missing:
    raise UsageError("%s: the vocab has no %s token; use the vocab.txt that came with the "
                     "checkpoint" % (vocab_file, missing))


def _check_max_seq_length(max_seq_length):
  if max_seq_length < 3:
    raise UsageError("--max_seq_length=%d is too small; it must leave room for [CLS] and two "
                     "[SEP] tokens (use at least 3, typically 128)" % max_seq_length)


def check_featurizing_inputs(max_seq_length, vocab_file):
  """The checks write_features makes before featurizing, for a script to make first.

  ClassifierTask calls it before claiming output_dir, so that a
  too small --max_seq_length or a vocab without [CLS]/[SEP]/[UNK] creates no output_dir.

  Raises:
    UsageError: max_seq_length below 3, or the vocab lacks a special token.
  """
  _check_max_seq_length(max_seq_length)
  _check_vocab(vocab_file)
