# coding=utf-8
"""Creates masked-LM / next-sentence TFRecord files for BERT pre-training.

The flags, the algorithm and the TFRecord features are those of Google's
create_pretraining_data.py (docs/FORMATS.md sections 6 and 8), so existing run
scripts and run_pretraining readers keep working:

  * Input: UTF-8 text, one sentence per line, a blank line between documents.
  * Each document is cut into pieces of about max_seq_length tokens; a piece
    becomes `[CLS] A [SEP] B [SEP]` where B either continues A
    (next_sentence_labels 0) or, half of the time, is taken from a random
    other document (next_sentence_labels 1).
  * Of the tokens (never [CLS]/[SEP]) min(max_predictions_per_seq,
    max(1, round(len(tokens) * masked_lm_prob))) are predicted: 80% become
    [MASK], 10% stay, 10% become a random vocab token.
  * The documents are processed dupe_factor times with different masks, and
    the instances are shuffled and written round-robin to the output files.

Streaming. Google's script holds the whole corpus and every instance in
memory. Here the documents are read in chunks of --docs_per_chunk documents
(default 20000; 0 = the whole corpus in one chunk, like Google's). A chunk is
tokenized, gives its instances (random next sentences come from documents of
the same chunk; the dupe_factor passes run over the chunk; the chunk's
instances are shuffled together), they are written and the chunk is dropped,
so memory follows the chunk size, not the corpus size. The chunks are written
in input order, so instances of one chunk stay together in the output files:
shuffle the documents of a corpus whose files are sorted by topic or date
first. Memory: in one process about (20 + 11 * dupe_factor) bytes per token of
the chunk, 130 bytes with dupe_factor 10 and max_seq_length 128 (measured on
generated Chinese text of 260 tokens per document), e.g. 1.3 GB for the
default 20000 documents of 500 tokens; with worker processes about three times
that in all, as each worker also holds its shard's instances and their copy on
the way back.

--pretraining_task chooses what an instance is (the streaming, workers, progress
and the options below work for all three):

  * nsp (the default): Google's pairs above, with next_sentence_labels.
  * mlm: `[CLS] tokens [SEP]`, filled with consecutive sentences of one document
    up to max_seq_length (short_seq_prob as Google's; a long document gives
    several instances), all segment ids 0, for the masked LM alone (HFL's
    RoBERTa-wwm-ext and MacBERT were pre-trained so). No next_sentence_labels
    feature is written; run_pretraining_mgpu.py then trains no NSP head.
  * pair_span (bert-ad's text rewriting): the input is TSV rows
    `label<TAB>id<TAB>text_a<TAB>text_b`, no header row, label 1 when text_a
    belongs in text_b and 0 when it does not. Each row gives one instance per
    dupe_factor pass, `[CLS] a [SEP] b [SEP]` (segment ids 0 through the first
    [SEP], 1 after). text_b may hold one blank, a run of --blank_marker (default
    U+201C, as in bert-ad's data; pick a character your text lacks) or one
    literal [MASK], written as as many [MASK] tokens as a has word pieces. b is
    cut to fit around the blank; a is kept whole, or the row is skipped and
    counted. One contiguous span of b as long as a (at most
    max_predictions_per_seq) is predicted, from a seeded random start (it may
    overlap the blank), 80/10/10 per position. next_sentence_labels = 1 - label:
    Google's meaning, 0 = the pair belongs together. --do_whole_word_mask is
    refused. A malformed row is a one-line error naming the file and line.

With --do_whole_word_mask, a word is masked as a whole: a token is grouped
with the `##` pieces that follow it and, for Chinese text segmented into words
by spaces (e.g. "北京 是 首都"), the characters of one word are grouped; a run
of Chinese characters without spaces counts as one word.
--chinese_segmenter=jieba finds the words of raw Chinese text with jieba
(https://github.com/fxsjy/jieba, `pip install jieba`; optional) instead. The
token ids written are the plain characters either way.

--num_workers (not in Google's script; default 0 = one process per CPU core)
tokenizes and creates the instances of each chunk in parallel, each worker on a
contiguous shard of the chunk's shuffled documents with its own random stream.

Determinism: the output is the same for the same seed, number of workers and
chunk size. With --num_workers=1 the instances come from one random stream in
Google's order, so with one chunk holding the whole corpus the output files
are those of Google's algorithm.

Progress (documents and bytes read, instances written, their rate and an ETA)
is logged at most every 30 seconds.

Stopping: Ctrl-C (SIGINT to the terminal's whole process group) and SIGTERM
(from Slurm, Kubernetes, kill) stop the run cleanly, without a traceback: the
worker processes end, the temporary files are deleted and no output file is
written; the exit code is 130 for Ctrl-C and 143 for SIGTERM. Only the main
process decides: the workers ignore Ctrl-C and end at once on SIGTERM, which
the main process sends them when it stops (or Linux, when it dies).

Differences from Google's script: lines that are not valid UTF-8 are skipped
and counted (Google silently drops the bad bytes), the end of an input file
also ends a document, a missing file or an empty corpus is a one-line error,
the output is written through temporary files renamed at the end, and a `##`
piece is grouped only with the token right before it (Google could group the
first `##` piece of segment B with the last token of segment A).
"""

# This module holds the flags and main() (the docstring above is the --help text). The
# stages are in bert_mgpu/pretraining/: data_settings (the settings and their checks),
# text_input (reading and tokenizing), training_instances, record_writing, parallel (chunks,
# worker pool, progress) and pipeline (the whole run: pipeline.create_pretraining_data).
# Stopping on signals: bert_mgpu/signals.py.

import signal
import sys

import tensorflow.compat.v1 as tf

from bert_mgpu.errors import UsageError
from bert_mgpu.pretraining import data_settings
from bert_mgpu.pretraining import pipeline
from bert_mgpu import signals


def data_settings_from_flags(flag_values=None):
  """Returns the data_settings.DataSettings of the flags that `define_flags` defines (same
  names); flag_values: the absl FlagValues, None means tf.flags.FLAGS."""
  flag_values = tf.flags.FLAGS if flag_values is None else flag_values
  return data_settings.DataSettings(**{name: getattr(flag_values, name)
                                       for name in data_settings.DataSettings._fields})


def define_flags(flag_values=None):
  """Defines Google's flags. Called only when run as a script, so that importing this
  module next to run_classifier_mgpu (which defines some of the same names) works.

  Args:
    flag_values: the absl FlagValues to define them in; None means tf.flags.FLAGS.
  """
  flags = tf.flags
  where = {} if flag_values is None else {"flag_values": flag_values}
  flags.DEFINE_string("input_file", None,
                      "Input text file(s): comma-separated globs. One sentence per line, a "
                      "blank line between documents.", **where)
  flags.DEFINE_string("output_file", None,
                      "Output TFRecord file(s), comma-separated; instances are written "
                      "round-robin.", **where)
  flags.DEFINE_string("vocab_file", None, "The vocab.txt the BERT model was trained with.",
                      **where)
  flags.DEFINE_bool("do_lower_case", True,
                    "Lower-case the input (True for uncased and Chinese models).", **where)
  flags.DEFINE_bool("do_whole_word_mask", False,
                    "Mask whole words: a token with its ## pieces, the characters of a "
                    "Chinese word (words separated by spaces, or found by "
                    "--chinese_segmenter).", **where)
  flags.DEFINE_integer("max_seq_length", 128, "Tokens per instance, with [CLS] and [SEP]s.",
                       **where)
  flags.DEFINE_integer("max_predictions_per_seq", 20,
                       "Most masked-LM predictions per instance.", **where)
  flags.DEFINE_integer("random_seed", 12345, "Seed: the same seed gives the same files.", **where)
  flags.DEFINE_integer("dupe_factor", 10, "Passes over the input, each with different masks.",
                       **where)
  flags.DEFINE_float("masked_lm_prob", 0.15, "Share of the tokens to predict.", **where)
  flags.DEFINE_float("short_seq_prob", 0.1,
                     "Share of instances that aim for a random length below max_seq_length.",
                     **where)
  flags.DEFINE_integer("num_workers", 0,
                       "Processes that tokenize and create instances (0: one per CPU core). "
                       "The output depends on the seed, this number and --docs_per_chunk; 1 "
                       "follows Google's single random stream.", **where)
  flags.DEFINE_integer("docs_per_chunk", data_settings.DEFAULT_DOCS_PER_CHUNK,
                       "Documents held in memory at a time (0: the whole corpus, as Google's "
                       "script). Random next sentences and the shuffle stay within a chunk. "
                       "Memory: about 130 bytes per token of a chunk with dupe_factor=10 in "
                       "one process, about three times that with worker processes.", **where)
  flags.DEFINE_string("chinese_segmenter", "",
                      "With --do_whole_word_mask: 'jieba' finds the words of raw Chinese text "
                      "with jieba (pip install jieba). Empty: Chinese words are separated by "
                      "spaces in the input.", **where)
  flags.DEFINE_enum("pretraining_task", data_settings.NSP, list(data_settings.PRETRAINING_TASKS),
                    "nsp: Google's sentence pairs with next_sentence_labels. mlm: [CLS] "
                    "tokens [SEP] of consecutive sentences, masked LM only (no "
                    "next_sentence_labels). pair_span: TSV rows label<TAB>id<TAB>text_a"
                    "<TAB>text_b; a span of b as long as a is masked and "
                    "next_sentence_labels = 1 - label.", **where)
  flags.DEFINE_string("blank_marker", data_settings.DEFAULT_BLANK_MARKER,
                      "With --pretraining_task=pair_span: a run of this character in text_b "
                      "(or one literal [MASK]) is the blank. Pick one your text lacks.",
                      **where)


def main(_):
  FLAGS = tf.flags.FLAGS
  for name in ("input_file", "output_file", "vocab_file"):
    if not getattr(FLAGS, name):
      raise UsageError("--%s is required." % name)
  # Ctrl-C ends as a KeyboardInterrupt, which command_line.run_main turns into exit 130.
  with signals.StopOnSignals() as stop:
    try:
      pipeline.create_pretraining_data(data_settings_from_flags(), stop_signals=stop)
    except signals.Terminated:
      sys.stderr.write("Stopped by SIGTERM; no output written.\n")
      sys.stderr.flush()
      sys.exit(128 + signal.SIGTERM)
  if stop.signum is not None:
    tf.logging.warning("%s came while the output files were being renamed: they are "
                       "complete.", "SIGTERM" if stop.signum == signal.SIGTERM else "Ctrl-C")


if __name__ == "__main__":
  # Imported here: the command line module loads the training stack, which the data
  # pipeline does not need.
  from bert_mgpu import command_line  # pylint: disable=g-import-not-at-top
  define_flags()
  command_line.run_main(main)
