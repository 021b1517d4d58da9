# coding=utf-8
"""Making the pre-training instances of create_pretraining_data.py from tokenized documents.

One function per --pretraining_task: Google's sentence pairs with next-sentence labels
(`create_instances_from_document`), single segments for the masked LM alone
(`create_mlm_instances_from_document`) and bert-ad's pair spans
(`create_pair_span_instance`); `create_instances` picks one. Masking is Google's: 80%
[MASK], 10% the token, 10% a random one, by token or by whole word.
"""

from bert_mgpu.pretraining import data_settings
from bert_mgpu.pretraining import text_input


class TrainingInstance(object):
  """One pre-training example before it becomes ids.

  Attributes:
    tokens: list of str, `[CLS] A [SEP] B [SEP]` after masking.
    segment_ids: list of int, 0 for [CLS], A and the first [SEP], 1 after.
    is_random_next: bool, whether B was taken from a random document (for pair_span:
      whether text_a does not belong in text_b); None for mlm, which writes no
      next_sentence_labels.
    masked_lm_positions: sorted list of int, the positions to predict.
    masked_lm_labels: list of str, the original token at each position.
  """

  def __init__(self, tokens, segment_ids, is_random_next, masked_lm_positions,
               masked_lm_labels):
    self.tokens = tokens
    self.segment_ids = segment_ids
    self.is_random_next = is_random_next
    self.masked_lm_positions = masked_lm_positions
    self.masked_lm_labels = masked_lm_labels

  def __str__(self):
    return ("tokens: %s\nsegment_ids: %s\nis_random_next: %s\nmasked_lm_positions: %s\n"
            "masked_lm_labels: %s" % (" ".join(self.tokens), self.segment_ids,
                                      self.is_random_next, self.masked_lm_positions,
                                      " ".join(self.masked_lm_labels)))


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
  """Cuts the longer of two token lists, at a random end, until both fit.

  Args:
    tokens_a: list, shortened in place.
    tokens_b: list, shortened in place.
    max_num_tokens: int, the most tokens the two may hold together.
    rng: random.Random.
  """
  while len(tokens_a) + len(tokens_b) > max_num_tokens:
    longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
    # Cutting at both ends adds noise; always cutting the end would bias the data.
    if rng.random() < 0.5:
      del longer[0]
    else:
      longer.pop()


def whole_word_candidates(tokens, do_whole_word_mask):
  """Groups token positions into the units masking picks from.

  Args:
    tokens: list of str, `[CLS] A [SEP] B [SEP]`.
    do_whole_word_mask: bool; without it every position is its own group.

  Returns:
    list of lists of positions; [CLS] and [SEP] are in none. With whole-word
    masking a `##` piece or a `WordContinuation` joins the group of the token
    right before it (never across [SEP]).
  """
  groups = []
  previous_position = None
  for position, token in enumerate(tokens):
    if token == "[CLS]" or token == "[SEP]":
      previous_position = None
      continue
    continues_word = isinstance(token, text_input.WordContinuation) or token.startswith("##")
    if do_whole_word_mask and continues_word and previous_position == position - 1:
      groups[-1].append(position)
    else:
      groups.append([position])
    previous_position = position
  return groups


def _masked_token(token, vocab_words, rng):
  """What a position to predict shows: [MASK] 80%, itself 10%, a random token 10%."""
  if rng.random() < 0.8:
    return text_input.MASK_TOKEN
  if rng.random() < 0.5:
    return token
  return vocab_words[rng.randint(0, len(vocab_words) - 1)]


def create_masked_lm_predictions(tokens, masked_lm_prob, max_predictions_per_seq,
                                 vocab_words, rng, do_whole_word_mask=False):
  """Chooses the positions to predict and masks them.

  Args:
    tokens: list of str, `[CLS] A [SEP] B [SEP]`.
    masked_lm_prob: float, share of the tokens to predict.
    max_predictions_per_seq: int, the most positions to predict.
    vocab_words: list of str, the vocab, to draw random replacements from.
    rng: random.Random.
    do_whole_word_mask: bool, mask whole words (see `whole_word_candidates`).

  Returns:
    (output_tokens, masked_lm_positions, masked_lm_labels): the masked tokens, the
    sorted positions to predict and the original token at each.
  """
  candidates = whole_word_candidates(tokens, do_whole_word_mask)
  rng.shuffle(candidates)
  num_to_predict = min(max_predictions_per_seq,
                       max(1, int(round(len(tokens) * masked_lm_prob))))
  output_tokens = list(tokens)
  masked = []  # (position, original token)
  for group in candidates:
    if len(masked) >= num_to_predict:
      break
    # A whole word that would overshoot the budget is skipped, not cut.
    if len(masked) + len(group) > num_to_predict:
      continue
    for position in group:
      output_tokens[position] = _masked_token(tokens[position], vocab_words, rng)
      masked.append((position, tokens[position]))
  masked.sort(key=lambda item: item[0])
  positions = [position for position, _ in masked]
  labels = [str(label) for _, label in masked]
  return output_tokens, positions, labels


def _flatten(sentences):
  """Concatenates a list of token lists."""
  return [token for sentence in sentences for token in sentence]


def _target_length(max_num_tokens, short_seq_prob, rng):
  """The length an instance aims for: mostly max_num_tokens, sometimes (short_seq_prob) a
  random shorter one, so that the model also sees the short sequences of fine-tuning."""
  if rng.random() < short_seq_prob:
    return rng.randint(2, max_num_tokens)
  return max_num_tokens


def create_instances_from_document(all_documents, document_index, max_seq_length,
                                   short_seq_prob, masked_lm_prob, max_predictions_per_seq,
                                   vocab_words, rng, do_whole_word_mask=False):
  """Cuts one document into training instances.

  Args:
    all_documents: list of documents (lists of token lists).
    document_index: int, the document to cut.
    max_seq_length: int, tokens per instance with [CLS] and two [SEP]s.
    short_seq_prob: float, how often to aim for a random shorter length.
    masked_lm_prob, max_predictions_per_seq, vocab_words, do_whole_word_mask: see
      `create_masked_lm_predictions`.
    rng: random.Random.

  Returns:
    list of TrainingInstance.
  """
  document = all_documents[document_index]
  max_num_tokens = max_seq_length - 3  # [CLS], [SEP], [SEP]
  target_seq_length = _target_length(max_num_tokens, short_seq_prob, rng)

  instances = []
  current_chunk = []
  current_length = 0
  i = 0
  while i < len(document):
    sentence = document[i]
    current_chunk.append(sentence)
    current_length += len(sentence)
    if i == len(document) - 1 or current_length >= target_seq_length:
      # Sentences [0, a_end) of the chunk form A.
      a_end = 1
      if len(current_chunk) >= 2:
        a_end = rng.randint(1, len(current_chunk) - 1)
      tokens_a = _flatten(current_chunk[:a_end])
      is_random_next = len(current_chunk) == 1 or rng.random() < 0.5
      if is_random_next:
        target_b_length = target_seq_length - len(tokens_a)
        # Another document, if ten tries find one (a one-document corpus cannot).
        for _ in range(10):
          random_document_index = rng.randint(0, len(all_documents) - 1)
          if random_document_index != document_index:
            break
        random_document = all_documents[random_document_index]
        random_start = rng.randint(0, len(random_document) - 1)
        tokens_b = []
        for j in range(random_start, len(random_document)):
          tokens_b.extend(random_document[j])
          if len(tokens_b) >= target_b_length:
            break
        # The chunk's sentences after A were not used: start the next chunk with them.
        i -= len(current_chunk) - a_end
      else:
        tokens_b = _flatten(current_chunk[a_end:])
      truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
      if tokens_a and tokens_b:
        tokens = ["[CLS]"] + tokens_a + ["[SEP]"] + tokens_b + ["[SEP]"]
        segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
        tokens, positions, labels = create_masked_lm_predictions(
            tokens, masked_lm_prob, max_predictions_per_seq, vocab_words, rng,
            do_whole_word_mask)
        instances.append(TrainingInstance(tokens, segment_ids, is_random_next, positions,
                                          labels))
      current_chunk = []
      current_length = 0
    i += 1
  return instances


def create_mlm_instances_from_document(document, max_seq_length, short_seq_prob,
                                       masked_lm_prob, max_predictions_per_seq, vocab_words,
                                       rng, do_whole_word_mask=False):
  """Cuts one document into `[CLS] tokens [SEP]` instances for the masked LM alone.

  Consecutive sentences fill an instance up to the target length (max_seq_length
  - 2, or with probability short_seq_prob a random shorter one, as in Google's
  pairs); a sentence longer than the room is cut at random ends.

  Args:
    document: list of token lists (sentences).
    max_seq_length: int, tokens per instance with [CLS] and [SEP].
    short_seq_prob, masked_lm_prob, max_predictions_per_seq, vocab_words, rng,
      do_whole_word_mask: as for `create_instances_from_document`.

  Returns:
    list of TrainingInstance, is_random_next None and segment ids all 0.
  """
  max_num_tokens = max_seq_length - 2  # [CLS], [SEP]
  target_seq_length = _target_length(max_num_tokens, short_seq_prob, rng)
  instances = []
  current_chunk = []
  current_length = 0
  for i, sentence in enumerate(document):
    current_chunk.append(sentence)
    current_length += len(sentence)
    if i == len(document) - 1 or current_length >= target_seq_length:
      tokens = _flatten(current_chunk)
      truncate_seq_pair(tokens, [], max_num_tokens, rng)
      tokens = ["[CLS]"] + tokens + ["[SEP]"]
      tokens, positions, labels = create_masked_lm_predictions(
          tokens, masked_lm_prob, max_predictions_per_seq, vocab_words, rng,
          do_whole_word_mask)
      instances.append(TrainingInstance(tokens, [0] * len(tokens), None, positions, labels))
      current_chunk = []
      current_length = 0
  return instances


def create_pair_span_instance(pair, max_seq_length, max_predictions_per_seq, vocab_words,
                              rng):
  """Makes the instance of one pair_span row (one per dupe_factor pass).

  `[CLS] a [SEP] b [SEP]`, segment ids 0 through the first [SEP], 1 after. b is
  cut to fit around its blank (the blank in the middle of what is kept, as far
  as b allows), or keeps its start when it has no blank. A contiguous span of b
  as long as a (at most max_predictions_per_seq, at most b) is predicted, from a
  random start; each of its positions shows [MASK] 80%, itself 10%, a random
  token 10%.

  Args:
    pair: PairTokens for which `pair_fits`.
    max_seq_length, max_predictions_per_seq: int.
    vocab_words: list of str.
    rng: random.Random.

  Returns:
    TrainingInstance; is_random_next is True for label 0 (next_sentence_labels
    1 = text_a does not belong in text_b, Google's meaning).
  """
  tokens_a = list(pair.tokens_a)
  room = max_seq_length - 3 - len(tokens_a)
  tokens_b = list(pair.tokens_b)
  if len(tokens_b) > room:
    start = 0
    if pair.blank_length:  # the blank in the middle of what is kept
      start = min(max(0, pair.blank_start - (room - pair.blank_length) // 2),
                  len(tokens_b) - room)
    tokens_b = tokens_b[start:start + room]
  span_length = min(len(tokens_a), max_predictions_per_seq, len(tokens_b))
  span_start = len(tokens_a) + 2 + rng.randint(0, len(tokens_b) - span_length)
  tokens = ["[CLS]"] + tokens_a + ["[SEP]"] + tokens_b + ["[SEP]"]
  segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
  positions = list(range(span_start, span_start + span_length))
  labels = [str(tokens[position]) for position in positions]
  for position in positions:
    tokens[position] = _masked_token(tokens[position], vocab_words, rng)
  return TrainingInstance(tokens, segment_ids, pair.label == 0, positions, labels)


def create_instances(documents, document_index, settings, vocab_words, rng):
  """The instances of one document (or pair_span row) in one pass, for settings' task.

  Args:
    documents: list of tokenized documents (lists of token lists) or PairTokens.
    document_index: int.
    settings: data_settings.InstanceSettings.
    vocab_words: list of str, the vocab in id order.
    rng: random.Random.

  Returns:
    list of TrainingInstance.
  """
  if settings.pretraining_task == data_settings.MLM:
    return create_mlm_instances_from_document(
        documents[document_index], settings.max_seq_length, settings.short_seq_prob,
        settings.masked_lm_prob, settings.max_predictions_per_seq, vocab_words, rng,
        settings.do_whole_word_mask)
  if settings.pretraining_task == data_settings.PAIR_SPAN:
    return [create_pair_span_instance(documents[document_index], settings.max_seq_length,
                                      settings.max_predictions_per_seq, vocab_words, rng)]
  return create_instances_from_document(
      documents, document_index, settings.max_seq_length, settings.short_seq_prob,
      settings.masked_lm_prob, settings.max_predictions_per_seq, vocab_words, rng,
      settings.do_whole_word_mask)
