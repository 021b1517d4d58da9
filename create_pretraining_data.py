# coding=utf-8
"""Creates masked-LM / next-sentence TFRecord files for BERT pre-training.

The flags, the algorithm and the TFRecord features are those of Google's
create_pretraining_data.py (REFERENCE.md sections 6 and 8), so existing run
scripts and run_pretraining readers keep working:

  * Input: UTF-8 text, one sentence per line, a blank line between documents.
  * Each document is cut into chunks of about max_seq_length tokens; a chunk
    becomes `[CLS] A [SEP] B [SEP]` where B either continues A
    (next_sentence_labels 0) or, half of the time, is taken from a random
    other document (next_sentence_labels 1).
  * Of the tokens (never [CLS]/[SEP]) min(max_predictions_per_seq,
    max(1, round(len(tokens) * masked_lm_prob))) are predicted: 80% become
    [MASK], 10% stay, 10% become a random vocab token.
  * The whole corpus is processed dupe_factor times with different masks, and
    the instances are shuffled and written round-robin to the output files.

With --do_whole_word_mask, a word is masked as a whole: a token is grouped
with the `##` pieces that follow it and, for Chinese text segmented into words
by spaces (e.g. "北京 是 首都"), the characters of one word are grouped. The
token ids written are the plain characters either way.

Differences from Google's script: lines that are not valid UTF-8 are skipped
and counted (Google silently drops the bad bytes), the end of an input file
also ends a document, a missing file or an empty corpus is a one-line error,
the output is written through temporary files, and a `##` piece is grouped
only with the token right before it (Google could group the first `##` piece
of segment B with the last token of segment A).

--num_workers (not in Google's script; default 0 = one process per CPU core)
creates the instances in parallel, each worker on a contiguous shard of the
shuffled documents with its own random stream. The output is the same for the
same seed and number of workers; --num_workers=1 keeps Google's single random
stream.
"""

import collections
import multiprocessing
import os
import random

import tensorflow.compat.v1 as tf

import multigpu
import tokenization
from multigpu import UsageError

# Instances whose tokens are logged, as Google's script does for its first ones.
_NUM_INSTANCES_TO_LOG = 3

class WordContinuation(str):
  """A token (a plain str for every other purpose) that continues the word before it.

  Whole-word masking marks the second and later characters of a Chinese word
  with this type. It compares and hashes like the plain token, so vocab
  look-ups and the written ids are those of the character itself.
  """
  __slots__ = ()


class TrainingInstance(object):
  """One pre-training example before it becomes ids.

  Attributes:
    tokens: list of str, `[CLS] A [SEP] B [SEP]` after masking.
    segment_ids: list of int, 0 for [CLS], A and the first [SEP], 1 after.
    is_random_next: bool, whether B was taken from a random document.
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


class CorpusStats(object):
  """Counts reported at the end of a run.

  Attributes:
    documents: documents with at least one token.
    empty_documents: documents dropped because no line of them had a token.
    documents_without_instances: documents that gave no instance in any pass.
    instances: instances written.
    skipped_lines: lines dropped because they are not valid UTF-8.
    first_skipped_line: "file:line" of the first of them, or None.
  """

  def __init__(self):
    self.documents = 0
    self.empty_documents = 0
    self.documents_without_instances = 0
    self.instances = 0
    self.skipped_lines = 0
    self.first_skipped_line = None


def tokenize_line(tokenizer, line, do_whole_word_mask):
  """Tokenizes one sentence.

  Args:
    tokenizer: tokenization.FullTokenizer.
    line: str, one sentence.
    do_whole_word_mask: bool; when set, the second and later characters of a
      space-separated Chinese word come back as `WordContinuation`s. The line
      is then tokenized word by word (split on Python whitespace), which gives
      the tokens of the whole line except around the rare characters that
      Python counts as whitespace but BERT does not (controls such as U+000B,
      U+001C..U+001F and U+0085, and U+2028/U+2029).

  Returns:
    list of str (word pieces).
  """
  if not do_whole_word_mask:
    return tokenizer.tokenize(line)
  tokens = []
  for word in line.split():
    previous_was_cjk = False
    for basic_token in tokenizer.basic_tokenizer.tokenize(word):
      is_cjk = len(basic_token) == 1 and tokenization.is_cjk_character(basic_token)
      for piece in tokenizer.wordpiece_tokenizer.tokenize(basic_token):
        tokens.append(WordContinuation(piece) if is_cjk and previous_was_cjk else piece)
      previous_was_cjk = is_cjk
  return tokens


def read_documents(input_files, tokenizer, do_whole_word_mask, stats):
  """Reads and tokenizes documents: one sentence per line, blank line between documents.

  Args:
    input_files: list of paths.
    tokenizer: tokenization.FullTokenizer.
    do_whole_word_mask: bool, passed to `tokenize_line`.
    stats: CorpusStats; documents, empty_documents and skipped lines are counted.

  Returns:
    list of documents, each a non-empty list of non-empty token lists (sentences),
    in input order.
  """
  documents = [[]]
  # Whether the document being read has a non-blank line, to count documents
  # whose lines all tokenize to nothing.
  has_text = False
  for input_file in input_files:
    with tf.gfile.GFile(input_file, "rb") as reader:
      line_number = 0
      while True:
        raw_line = reader.readline()
        if not raw_line:
          break
        line_number += 1
        try:
          line = raw_line.decode("utf-8").strip()
        except UnicodeDecodeError:
          stats.skipped_lines += 1
          if stats.first_skipped_line is None:
            stats.first_skipped_line = "%s:%d" % (input_file, line_number)
          continue
        if not line:
          if has_text and not documents[-1]:
            stats.empty_documents += 1
          documents.append([])
          has_text = False
          continue
        has_text = True
        tokens = tokenize_line(tokenizer, line, do_whole_word_mask)
        if tokens:
          documents[-1].append(tokens)
    # A file ends the document even without a trailing blank line.
    if has_text and not documents[-1]:
      stats.empty_documents += 1
    documents.append([])
    has_text = False
  # Blank lines in a row leave empty lists that are not documents.
  non_empty = [document for document in documents if document]
  stats.documents = len(non_empty)
  return non_empty


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
    continues_word = isinstance(token, WordContinuation) or token.startswith("##")
    if do_whole_word_mask and continues_word and previous_position == position - 1:
      groups[-1].append(position)
    else:
      groups.append([position])
    previous_position = position
  return groups


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
      if rng.random() < 0.8:
        replacement = "[MASK]"
      elif rng.random() < 0.5:
        replacement = tokens[position]
      else:
        replacement = vocab_words[rng.randint(0, len(vocab_words) - 1)]
      output_tokens[position] = replacement
      masked.append((position, tokens[position]))
  masked.sort(key=lambda item: item[0])
  positions = [position for position, _ in masked]
  labels = [str(label) for _, label in masked]
  return output_tokens, positions, labels


def _flatten(sentences):
  """Concatenates a list of token lists."""
  return [token for sentence in sentences for token in sentence]


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
  # Mostly fill the sequence; sometimes aim shorter so that the model also sees
  # the short sequences of fine-tuning.
  target_seq_length = max_num_tokens
  if rng.random() < short_seq_prob:
    target_seq_length = rng.randint(2, max_num_tokens)

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


def create_training_instances(all_documents, vocab_words, max_seq_length, dupe_factor,
                              short_seq_prob, masked_lm_prob, max_predictions_per_seq, rng,
                              do_whole_word_mask=False, stats=None):
  """Creates the shuffled instances of all passes over the corpus.

  Args:
    all_documents: list of documents (lists of non-empty token lists); shuffled in place.
    vocab_words: list of str, the vocab in id order.
    max_seq_length, short_seq_prob: see `create_instances_from_document`.
    dupe_factor: int, passes over the corpus, each with different masks.
    masked_lm_prob, max_predictions_per_seq, do_whole_word_mask: see
      `create_masked_lm_predictions`.
    rng: random.Random.
    stats: CorpusStats or None; documents_without_instances is counted.

  Returns:
    list of TrainingInstance.
  """
  rng.shuffle(all_documents)
  instances = []
  instances_per_document = [0] * len(all_documents)
  for _ in range(dupe_factor):
    for document_index in range(len(all_documents)):
      new_instances = create_instances_from_document(
          all_documents, document_index, max_seq_length, short_seq_prob, masked_lm_prob,
          max_predictions_per_seq, vocab_words, rng, do_whole_word_mask)
      instances_per_document[document_index] += len(new_instances)
      instances.extend(new_instances)
  rng.shuffle(instances)
  if stats is not None:
    stats.documents_without_instances = instances_per_document.count(0)
  return instances


def _int64_feature(values):
  return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def _float_feature(values):
  return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def instance_to_example(instance, tokenizer, max_seq_length, max_predictions_per_seq):
  """Turns an instance into the tf.train.Example Google's run_pretraining reads.

  Args:
    instance: TrainingInstance.
    tokenizer: tokenization.FullTokenizer (for the vocab).
    max_seq_length: int, length of input_ids, input_mask and segment_ids.
    max_predictions_per_seq: int, length of the masked_lm_* features.

  Returns:
    tf.train.Example with input_ids, input_mask, segment_ids, masked_lm_positions,
    masked_lm_ids, masked_lm_weights and next_sentence_labels, zero padded.
  """
  input_ids = tokenizer.convert_tokens_to_ids(instance.tokens)
  num_tokens = len(input_ids)
  assert num_tokens <= max_seq_length
  pad = [0] * (max_seq_length - num_tokens)
  masked_lm_ids = tokenizer.convert_tokens_to_ids(instance.masked_lm_labels)
  num_masked = len(masked_lm_ids)
  assert num_masked <= max_predictions_per_seq
  prediction_pad = [0] * (max_predictions_per_seq - num_masked)
  features = collections.OrderedDict()
  features["input_ids"] = _int64_feature(input_ids + pad)
  features["input_mask"] = _int64_feature([1] * num_tokens + pad)
  features["segment_ids"] = _int64_feature(list(instance.segment_ids) + pad)
  features["masked_lm_positions"] = _int64_feature(
      list(instance.masked_lm_positions) + prediction_pad)
  features["masked_lm_ids"] = _int64_feature(masked_lm_ids + prediction_pad)
  features["masked_lm_weights"] = _float_feature([1.0] * num_masked + [0.0] * len(prediction_pad))
  features["next_sentence_labels"] = _int64_feature([1 if instance.is_random_next else 0])
  return tf.train.Example(features=tf.train.Features(feature=features))


def serialize_instance(instance, tokenizer, max_seq_length, max_predictions_per_seq):
  """Returns the serialized tf.train.Example of an instance (see `instance_to_example`)."""
  example = instance_to_example(instance, tokenizer, max_seq_length, max_predictions_per_seq)
  # Map fields (the feature dict) serialize in hash order unless told otherwise,
  # which would make the bytes differ from run to run.
  return example.SerializeToString(deterministic=True)


def write_records(records, output_files):
  """Writes records round-robin to TFRecord files, each through `<path>.tmp`.

  Args:
    records: iterable of bytes (serialized Examples).
    output_files: list of paths; record k goes to output_files[k % len(output_files)].

  Returns:
    list of int, the records written to each file.
  """
  temp_files = [path + ".tmp" for path in output_files]
  writers = [tf.io.TFRecordWriter(path) for path in temp_files]
  counts = [0] * len(output_files)
  try:
    for index, record in enumerate(records):
      writer_index = index % len(writers)
      writers[writer_index].write(record)
      counts[writer_index] += 1
    for writer in writers:
      writer.close()
    for temp_file, path in zip(temp_files, output_files):
      tf.gfile.Rename(temp_file, path, overwrite=True)
  except BaseException:
    for writer in writers:
      writer.close()
    for temp_file in temp_files:
      if tf.gfile.Exists(temp_file):
        tf.gfile.Remove(temp_file)
    raise
  return counts


def _serialize_and_log(instances, tokenizer, max_seq_length, max_predictions_per_seq):
  """Yields the serialized instances, logging the first few."""
  for index, instance in enumerate(instances):
    if index < _NUM_INSTANCES_TO_LOG:
      tf.logging.info("*** Example %d ***\n%s", index, instance)
    yield serialize_instance(instance, tokenizer, max_seq_length, max_predictions_per_seq)


# What every worker process needs; documents and tokenizer reach the workers
# once, through the pool initializer (inherited, not pickled, where fork exists).
InstanceSettings = collections.namedtuple("InstanceSettings", [
    "max_seq_length", "short_seq_prob", "masked_lm_prob", "max_predictions_per_seq",
    "dupe_factor", "do_whole_word_mask", "random_seed"])
_WORKER_STATE = {}


def _init_worker(all_documents, tokenizer, settings):
  _WORKER_STATE["all_documents"] = all_documents
  _WORKER_STATE["tokenizer"] = tokenizer
  _WORKER_STATE["settings"] = settings


def _create_shard_records(shard):
  """Worker: the serialized instances of documents [start, end) over all passes.

  Args:
    shard: (shard_index, start, end).

  Returns:
    (records, number of the shard's documents without an instance, str of the
    first few instances).
  """
  shard_index, start, end = shard
  all_documents = _WORKER_STATE["all_documents"]
  tokenizer = _WORKER_STATE["tokenizer"]
  settings = _WORKER_STATE["settings"]
  vocab_words = list(tokenizer.vocab.keys())
  # A string seed is hashed with SHA-512: the same stream on every Python version.
  rng = random.Random("%d/%d" % (settings.random_seed, shard_index))
  records = []
  instances_per_document = [0] * (end - start)
  logged = []
  for _ in range(settings.dupe_factor):
    for document_index in range(start, end):
      instances = create_instances_from_document(
          all_documents, document_index, settings.max_seq_length, settings.short_seq_prob,
          settings.masked_lm_prob, settings.max_predictions_per_seq, vocab_words, rng,
          settings.do_whole_word_mask)
      instances_per_document[document_index - start] += len(instances)
      for instance in instances:
        if len(logged) < _NUM_INSTANCES_TO_LOG:
          logged.append(str(instance))
        records.append(serialize_instance(instance, tokenizer, settings.max_seq_length,
                                          settings.max_predictions_per_seq))
  return records, instances_per_document.count(0), logged


def create_records_in_parallel(all_documents, tokenizer, settings, num_workers, rng, stats):
  """Creates the serialized, shuffled instances with `num_workers` processes.

  The documents are shuffled with `rng` and cut into `num_workers` contiguous
  shards; each worker makes the instances of its shard with a generator seeded
  by (random_seed, shard), drawing random next sentences from the whole
  corpus. The output depends on the seed and the number of workers only.

  Args:
    all_documents: list of documents; shuffled in place.
    tokenizer: tokenization.FullTokenizer.
    settings: InstanceSettings.
    num_workers: int >= 2, at most len(all_documents).
    rng: random.Random, for the document and the final shuffle.
    stats: CorpusStats; documents_without_instances is counted.

  Returns:
    list of bytes.
  """
  rng.shuffle(all_documents)
  num_documents = len(all_documents)
  bounds = [num_documents * i // num_workers for i in range(num_workers + 1)]
  shards = [(i, bounds[i], bounds[i + 1]) for i in range(num_workers)]
  if "fork" in multiprocessing.get_all_start_methods():
    context = multiprocessing.get_context("fork")
  else:
    context = multiprocessing.get_context()
  pool = context.Pool(num_workers, initializer=_init_worker,
                      initargs=(all_documents, tokenizer, settings))
  try:
    results = pool.map(_create_shard_records, shards)
  finally:
    pool.terminate()
    pool.join()
  records = []
  stats.documents_without_instances = 0
  logged = []
  for shard_records, without_instances, shard_logged in results:
    records.extend(shard_records)
    stats.documents_without_instances += without_instances
    logged.extend(shard_logged)
  for index, text in enumerate(logged[:_NUM_INSTANCES_TO_LOG]):
    tf.logging.info("*** Example %d ***\n%s", index, text)
  rng.shuffle(records)
  return records


def check_settings(max_seq_length, max_predictions_per_seq, dupe_factor, masked_lm_prob,
                   short_seq_prob):
  """Raises UsageError for settings the algorithm cannot work with."""
  if max_seq_length < 5:
    raise UsageError("--max_seq_length=%d: it must be at least 5 ([CLS], [SEP], [SEP] and one "
                     "token of each segment)." % max_seq_length)
  if max_predictions_per_seq < 1:
    raise UsageError("--max_predictions_per_seq=%d: it must be at least 1."
                     % max_predictions_per_seq)
  if dupe_factor < 1:
    raise UsageError("--dupe_factor=%d: it must be at least 1." % dupe_factor)
  if not 0.0 < masked_lm_prob <= 1.0:
    raise UsageError("--masked_lm_prob=%s: it must be in (0, 1]." % masked_lm_prob)
  if not 0.0 <= short_seq_prob <= 1.0:
    raise UsageError("--short_seq_prob=%s: it must be in [0, 1]." % short_seq_prob)


def create_pretraining_data(input_file, output_file, vocab_file, do_lower_case=True,
                            do_whole_word_mask=False, max_seq_length=128,
                            max_predictions_per_seq=20, random_seed=12345, dupe_factor=10,
                            masked_lm_prob=0.15, short_seq_prob=0.1, num_workers=1):
  """Reads text files and writes pre-training TFRecord files (the whole script).

  Args:
    input_file: str, comma-separated globs of text files.
    output_file: str, comma-separated TFRecord paths, written round-robin.
    vocab_file: str, vocab.txt.
    num_workers: int, processes that create instances; 0 means one per CPU core.
      With 1 the instances come from one random stream as in Google's script.
    The others: as the flags of the same names.

  Returns:
    CorpusStats.

  Raises:
    UsageError: a missing file, bad settings or a corpus without documents.
  """
  check_settings(max_seq_length, max_predictions_per_seq, dupe_factor, masked_lm_prob,
                 short_seq_prob)
  if num_workers < 0:
    raise UsageError("--num_workers=%d: give 0 (one per CPU core) or a positive number."
                     % num_workers)
  if not vocab_file or not tf.gfile.Exists(vocab_file):
    raise UsageError("--vocab_file=%s: no such file. Give the vocab.txt of the model."
                     % vocab_file)
  input_files = multigpu.expand_input_files(input_file)
  output_files = [p.strip() for p in (output_file or "").split(",") if p.strip()]
  if not output_files:
    raise UsageError("--output_file is empty: give one or more TFRecord paths "
                     "(comma-separated).")
  for path in output_files:
    directory = os.path.dirname(path)
    if directory and not tf.gfile.IsDirectory(directory):
      tf.gfile.MakeDirs(directory)
  try:
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
  except ValueError as e:
    raise UsageError(str(e))
  for special in ("[CLS]", "[SEP]", "[MASK]"):
    if special not in tokenizer.vocab:
      raise UsageError("--vocab_file=%s has no %s token: use the vocab.txt of a BERT model."
                       % (vocab_file, special))

  tf.logging.info("*** Reading from %d input file(s) ***", len(input_files))
  for path in input_files:
    tf.logging.info("  %s", path)
  stats = CorpusStats()
  documents = read_documents(input_files, tokenizer, do_whole_word_mask, stats)
  if stats.skipped_lines:
    tf.logging.warning("Skipped %d line(s) that are not valid UTF-8; the first is %s.",
                       stats.skipped_lines, stats.first_skipped_line)
  if not documents:
    raise UsageError("--input_file=%s: no document with any token in %s. The input is one "
                     "sentence per line with a blank line between documents."
                     % (input_file, ", ".join(input_files)))

  rng = random.Random(random_seed)
  num_workers = min(num_workers or os.cpu_count() or 1, len(documents))
  if num_workers == 1:
    vocab_words = list(tokenizer.vocab.keys())
    instances = create_training_instances(
        documents, vocab_words, max_seq_length, dupe_factor, short_seq_prob, masked_lm_prob,
        max_predictions_per_seq, rng, do_whole_word_mask, stats)
    num_instances = len(instances)
    records = _serialize_and_log(instances, tokenizer, max_seq_length,
                                 max_predictions_per_seq)
  else:
    tf.logging.info("*** Creating instances with %d worker processes ***", num_workers)
    settings = InstanceSettings(max_seq_length, short_seq_prob, masked_lm_prob,
                                max_predictions_per_seq, dupe_factor, do_whole_word_mask,
                                random_seed)
    records = create_records_in_parallel(documents, tokenizer, settings, num_workers, rng,
                                         stats)
    num_instances = len(records)
  if not num_instances:
    raise UsageError("--input_file=%s: no instance could be made from %d document(s)."
                     % (input_file, stats.documents))
  tf.logging.info("*** Writing to %d output file(s) ***", len(output_files))
  counts = write_records(records, output_files)
  stats.instances = sum(counts)
  for path, count in zip(output_files, counts):
    tf.logging.info("  %s: %d instances", path, count)
  tf.logging.info("documents: %d, documents without tokens (dropped): %d, documents that "
                  "gave no instance: %d, instances: %d, non-UTF-8 lines skipped: %d",
                  stats.documents, stats.empty_documents, stats.documents_without_instances,
                  stats.instances, stats.skipped_lines)
  return stats


def define_flags():
  """Defines Google's flags. Called only when run as a script, so that importing this
  module next to run_classifier_mgpu (which defines some of the same names) works."""
  flags = tf.flags
  flags.DEFINE_string("input_file", None,
                      "Input text file(s): comma-separated globs. One sentence per line, a "
                      "blank line between documents.")
  flags.DEFINE_string("output_file", None,
                      "Output TFRecord file(s), comma-separated; instances are written "
                      "round-robin.")
  flags.DEFINE_string("vocab_file", None, "The vocab.txt the BERT model was trained with.")
  flags.DEFINE_bool("do_lower_case", True,
                    "Lower-case the input (True for uncased and Chinese models).")
  flags.DEFINE_bool("do_whole_word_mask", False,
                    "Mask whole words: a token with its ## pieces, the characters of a "
                    "space-separated Chinese word.")
  flags.DEFINE_integer("max_seq_length", 128, "Tokens per instance, with [CLS] and [SEP]s.")
  flags.DEFINE_integer("max_predictions_per_seq", 20,
                       "Most masked-LM predictions per instance.")
  flags.DEFINE_integer("random_seed", 12345, "Seed: the same seed gives the same files.")
  flags.DEFINE_integer("dupe_factor", 10, "Passes over the input, each with different masks.")
  flags.DEFINE_float("masked_lm_prob", 0.15, "Share of the tokens to predict.")
  flags.DEFINE_float("short_seq_prob", 0.1,
                     "Share of instances that aim for a random length below max_seq_length.")
  flags.DEFINE_integer("num_workers", 0,
                       "Processes that create instances (0: one per CPU core). The output "
                       "depends on the seed and this number; 1 follows Google's single "
                       "random stream.")


def main(_):
  FLAGS = tf.flags.FLAGS
  for name in ("input_file", "output_file", "vocab_file"):
    if not getattr(FLAGS, name):
      raise UsageError("--%s is required." % name)
  create_pretraining_data(
      FLAGS.input_file, FLAGS.output_file, FLAGS.vocab_file,
      do_lower_case=FLAGS.do_lower_case, do_whole_word_mask=FLAGS.do_whole_word_mask,
      max_seq_length=FLAGS.max_seq_length,
      max_predictions_per_seq=FLAGS.max_predictions_per_seq,
      random_seed=FLAGS.random_seed, dupe_factor=FLAGS.dupe_factor,
      masked_lm_prob=FLAGS.masked_lm_prob, short_seq_prob=FLAGS.short_seq_prob,
      num_workers=FLAGS.num_workers)


if __name__ == "__main__":
  define_flags()
  multigpu.run_main(main)
