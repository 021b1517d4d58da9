# coding=utf-8
"""One text as the encoder reads it: [CLS] tokens [SEP], cut to max_seq_length.

Training's records (records.py) and serving (serving.py) both convert texts here, so a
served text is the row it was trained and embedded as. No TensorFlow import.
"""


def text_row(text, tokenizer, max_seq_length):
  """(input_ids, input_mask, segment_ids) of one text, padded to max_seq_length, and
  whether it was cut."""
  tokens = tokenizer.tokenize(text)
  cut = len(tokens) > max_seq_length - 2
  tokens = ["[CLS]"] + tokens[:max_seq_length - 2] + ["[SEP]"]
  ids = tokenizer.convert_tokens_to_ids(tokens)
  padding = [0] * (max_seq_length - len(ids))
  return ids + padding, [1] * len(ids) + padding, [0] * max_seq_length, cut
