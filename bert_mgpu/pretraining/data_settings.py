# coding=utf-8
"""What a create_pretraining_data.py run reads, writes and how: DataSettings (its flags), the
part every worker process needs (InstanceSettings), the tasks and the checks of the values.

No TensorFlow import.
"""

import collections

from bert_mgpu.errors import UsageError

# Documents per chunk: about 1.3 GB of memory in one process for documents of
# 500 tokens with dupe_factor 10 (see create_pretraining_data.py's docstring).
DEFAULT_DOCS_PER_CHUNK = 20000
# --pretraining_task: Google's pairs with next-sentence labels, single segments for the
# masked LM alone, or bert-ad's text-rewriting pairs (see create_pretraining_data.py).
NSP, MLM, PAIR_SPAN = "nsp", "mlm", "pair_span"
PRETRAINING_TASKS = (NSP, MLM, PAIR_SPAN)
# The blank of a pair_span text_b: a run of this character (bert-ad's data uses it).
DEFAULT_BLANK_MARKER = u"\u201c"


class DataSettings(collections.namedtuple("DataSettings", [
    "input_file", "output_file", "vocab_file", "do_lower_case", "do_whole_word_mask",
    "max_seq_length", "max_predictions_per_seq", "random_seed", "dupe_factor",
    "masked_lm_prob", "short_seq_prob", "num_workers", "docs_per_chunk",
    "chinese_segmenter", "pretraining_task", "blank_marker"], defaults=(
        True, False, 128, 20, 12345, 10, 0.15, 0.1, 1, DEFAULT_DOCS_PER_CHUNK, "", NSP,
        DEFAULT_BLANK_MARKER))):
  """What a run reads, writes and how: the flags of the same names
  (create_pretraining_data.define_flags).

  Built from the flags by create_pretraining_data.data_settings_from_flags; in code, e.g.
  `DataSettings(input_file=..., output_file=..., vocab_file=..., dupe_factor=5)`.
  The defaults are Google's, and those of the flags, except num_workers.

  Attributes:
    input_file: str, comma-separated globs of text files.
    output_file: str, comma-separated TFRecord paths, written round-robin.
    vocab_file: str, vocab.txt.
    do_lower_case: bool (True).
    do_whole_word_mask: bool (False), mask whole words.
    max_seq_length: int (128), tokens per instance with [CLS] and two [SEP]s.
    max_predictions_per_seq: int (20), the most masked-LM predictions per instance.
    random_seed: int (12345).
    dupe_factor: int (10), passes over the documents, each with different masks.
    masked_lm_prob: float (0.15), share of the tokens to predict.
    short_seq_prob: float (0.1), share of instances that aim for a random
      shorter length.
    num_workers: int, processes that tokenize and create instances; 0 means one
      per CPU core (the flag's default). With 1 (the default here) the
      instances come from one random stream as in Google's script.
    docs_per_chunk: int (DEFAULT_DOCS_PER_CHUNK), documents held in memory at a
      time; 0 means all.
    chinese_segmenter: str, "" (Chinese words are delimited by spaces) or
      "jieba".
    pretraining_task: str, "nsp" (Google's, the default), "mlm" or "pair_span".
    blank_marker: str (DEFAULT_BLANK_MARKER), with pair_span: a run of it in text_b
      is the blank.
  """
  __slots__ = ()


# What every worker process needs besides the documents: a subset of DataSettings.
InstanceSettings = collections.namedtuple("InstanceSettings", [
    "max_seq_length", "short_seq_prob", "masked_lm_prob", "max_predictions_per_seq",
    "dupe_factor", "do_whole_word_mask", "random_seed", "chinese_segmenter",
    "pretraining_task"], defaults=(NSP,))


def instance_settings(settings):
  """Returns the InstanceSettings of a DataSettings (chinese_segmenter None becomes "")."""
  values = {name: getattr(settings, name) for name in InstanceSettings._fields}
  values["chinese_segmenter"] = values["chinese_segmenter"] or ""
  return InstanceSettings(**values)


def _check_task(settings):
  """Raises UsageError for a --pretraining_task, or task options, that cannot work."""
  task = settings.pretraining_task
  if task not in PRETRAINING_TASKS:
    raise UsageError("--pretraining_task=%s: use one of %s." % (task, ", ".join(PRETRAINING_TASKS)))
  if task != PAIR_SPAN:
    return
  if settings.do_whole_word_mask:
    raise UsageError("--do_whole_word_mask does not apply to --pretraining_task=pair_span: its "
                     "masked span is as long as text_a, counted in word pieces. Drop "
                     "--do_whole_word_mask.")
  marker = settings.blank_marker
  if not marker or any(char.isspace() for char in marker):
    raise UsageError("--blank_marker=%r: give one or more characters, no whitespace or tab "
                     "(the default is %s)." % (marker, DEFAULT_BLANK_MARKER))


def check_settings(settings):
  """Raises UsageError for settings the algorithm cannot work with.

  Args:
    settings: DataSettings; its numbers, num_workers, docs_per_chunk and
      chinese_segmenter are checked, not its files.
  """
  _check_task(settings)
  least_length = 4 if settings.pretraining_task == MLM else 5
  if settings.max_seq_length < least_length:
    raise UsageError("--max_seq_length=%d: it must be at least %d with --pretraining_task=%s "
                     "([CLS], the [SEP]s and tokens of each segment)."
                     % (settings.max_seq_length, least_length, settings.pretraining_task))
  if settings.max_predictions_per_seq < 1:
    raise UsageError("--max_predictions_per_seq=%d: it must be at least 1."
                     % settings.max_predictions_per_seq)
  if settings.dupe_factor < 1:
    raise UsageError("--dupe_factor=%d: it must be at least 1." % settings.dupe_factor)
  if not 0.0 < settings.masked_lm_prob <= 1.0:
    raise UsageError("--masked_lm_prob=%s: it must be in (0, 1]." % settings.masked_lm_prob)
  if not 0.0 <= settings.short_seq_prob <= 1.0:
    raise UsageError("--short_seq_prob=%s: it must be in [0, 1]." % settings.short_seq_prob)
  if settings.num_workers < 0:
    raise UsageError("--num_workers=%d: give 0 (one per CPU core) or a positive number."
                     % settings.num_workers)
  if settings.docs_per_chunk < 0 or (settings.docs_per_chunk == 1 and
                                     settings.pretraining_task == NSP):
    raise UsageError("--docs_per_chunk=%d: give 2 or more documents (random next sentences "
                     "come from the other documents of a chunk), or 0 to hold the whole "
                     "corpus in memory." % settings.docs_per_chunk)
  if settings.chinese_segmenter and not settings.do_whole_word_mask:
    raise UsageError("--chinese_segmenter=%s only changes whole-word masking: add "
                     "--do_whole_word_mask, or drop --chinese_segmenter."
                     % settings.chinese_segmenter)
