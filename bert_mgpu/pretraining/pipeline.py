# coding=utf-8
"""The whole run of create_pretraining_data.py, stage after stage: check the settings and
files, read the documents (text_input), tokenize them and make their instances chunk by
chunk (parallel, training_instances), write the records (record_writing), and count what
was read and written.
"""

import multiprocessing
import os
import random
import time

import tensorflow.compat.v1 as tf

from bert_mgpu.data import processes
from bert_mgpu.data import tfrecord_io
from bert_mgpu.errors import UsageError
from bert_mgpu.pretraining import data_settings
from bert_mgpu.pretraining import parallel
from bert_mgpu.pretraining import record_writing
from bert_mgpu.pretraining import text_input
import tokenization

# Instances whose tokens are logged, as Google's script does for its first ones.
_NUM_INSTANCES_TO_LOG = 3


class CorpusStats(object):
  """Counts reported at the end of a run.

  Attributes:
    documents: documents with at least one token.
    empty_documents: documents dropped because no line of them had a token.
    documents_without_instances: documents that gave no instance in any pass.
    instances: instances written.
    skipped_lines: lines dropped because they are not valid UTF-8.
    first_skipped_line: "file:line" of the first of them, or None.
    chunks: chunks of documents processed.
    skipped_pairs: pair_span rows dropped because text_a does not fit.
  """

  def __init__(self):
    self.documents = 0
    self.empty_documents = 0
    self.documents_without_instances = 0
    self.instances = 0
    self.skipped_lines = 0
    self.first_skipped_line = None
    self.chunks = 0
    self.skipped_pairs = 0


def _check_files(settings):
  """Checks the vocab and output paths, finds the input files and makes the output directories.

  Args:
    settings: data_settings.DataSettings.

  Returns:
    (list of input paths, list of output paths).

  Raises:
    UsageError: no vocab file, no input file, no output path, an output path
      given twice or one that is a directory.
  """
  if not settings.vocab_file or not tf.gfile.Exists(settings.vocab_file):
    raise UsageError("--vocab_file=%s: no such file. Give the vocab.txt of the model."
                     % settings.vocab_file)
  input_files = tfrecord_io.expand_input_files(settings.input_file)
  output_files = [p.strip() for p in (settings.output_file or "").split(",") if p.strip()]
  if not output_files:
    raise UsageError("--output_file is empty: give one or more TFRecord paths "
                     "(comma-separated).")
  seen_outputs = set()
  for path in output_files:
    if os.path.abspath(path) in seen_outputs:
      raise UsageError("--output_file names %s twice: give each output file once." % path)
    seen_outputs.add(os.path.abspath(path))
    if tf.gfile.IsDirectory(path):
      raise UsageError("--output_file=%s is a directory: give file paths, e.g. %s" %
                       (path, os.path.join(path, "pretrain_data.tfrecord")))
  for path in output_files:
    directory = os.path.dirname(path)
    if directory and not tf.gfile.IsDirectory(directory):
      tf.gfile.MakeDirs(directory)
  return input_files, output_files


def _load_tokenizer(settings):
  """Returns the FullTokenizer of settings.vocab_file; UsageError if it is not a BERT vocab."""
  try:
    tokenizer = tokenization.FullTokenizer(settings.vocab_file,
                                           do_lower_case=settings.do_lower_case)
  except ValueError as e:
    raise UsageError(str(e))
  missing = tokenization.missing_special_token(tokenizer.vocab, ("[CLS]", "[SEP]", "[MASK]"))
  if missing:
    raise UsageError("--vocab_file=%s has no %s token: use the vocab.txt of a BERT model."
                     % (settings.vocab_file, missing))
  return tokenizer


def _usable_documents(tokenized, settings, stats):
  """The documents (or pair_span rows) that can give instances; the others are counted.

  Args:
    tokenized: list of tokenized documents, or of PairTokens.
    settings: data_settings.InstanceSettings.
    stats: CorpusStats; empty_documents, or for pair_span skipped_pairs, is counted.

  Returns:
    list, the usable ones in order.
  """
  if settings.pretraining_task != data_settings.PAIR_SPAN:
    documents = [document for document in tokenized if document]
    stats.empty_documents += len(tokenized) - len(documents)
    return documents
  documents = []
  for pair in tokenized:
    if text_input.pair_fits(pair, settings.max_seq_length):
      documents.append(pair)
      continue
    if not stats.skipped_pairs:
      tf.logging.warning("%s: skipped (and counted): text_a has %d word piece(s) and text_b "
                         "%d; [CLS] a [SEP] b [SEP] must keep all of a, b's blank and a "
                         "token of b within --max_seq_length=%d.", pair.location,
                         len(pair.tokens_a), len(pair.tokens_b), settings.max_seq_length)
    stats.skipped_pairs += 1
  return documents


def _log_summary(stats, progress, output_files, counts):
  """Logs the end of a run: the last progress line, the output files and the counts."""
  tf.logging.info("%s", progress.message(time.time()))
  tf.logging.info("*** Wrote %d output file(s) ***", len(output_files))
  for path, count in zip(output_files, counts):
    tf.logging.info("  %s: %d instances", path, count)
  tf.logging.info("documents: %d, documents without tokens (dropped): %d, documents that "
                  "gave no instance: %d, instances: %d, non-UTF-8 lines skipped: %d, "
                  "chunks: %d", stats.documents, stats.empty_documents,
                  stats.documents_without_instances, stats.instances, stats.skipped_lines,
                  stats.chunks)
  if stats.skipped_pairs:
    tf.logging.warning("pair_span: %d pair(s) skipped because text_a and the blank do not "
                       "fit in --max_seq_length.", stats.skipped_pairs)


_INPUT_NOUN = {data_settings.NSP: "document with any token",
               data_settings.MLM: "document with any token",
               data_settings.PAIR_SPAN: "row whose text_a fits"}
_INPUT_LAYOUT = {
    data_settings.NSP: "The input is one sentence per line with a blank line between documents.",
    data_settings.MLM: "The input is one sentence per line with a blank line between documents.",
    data_settings.PAIR_SPAN: "The input is label<TAB>id<TAB>text_a<TAB>text_b rows.",
}


def create_pretraining_data(settings, stop_signals=None,
                            progress_interval_seconds=parallel.DEFAULT_PROGRESS_INTERVAL_SECONDS):
  """Reads text files and writes pre-training TFRecord files (the whole script).

  Args:
    settings: data_settings.DataSettings: the files and the flags of the run.
    stop_signals: None, or the signals.StopOnSignals installed around the call; once the
      output files are being renamed (or a failure cleaned up), a signal no
      longer stops the run.
    progress_interval_seconds: float, the least time between two progress lines.

  Returns:
    CorpusStats.

  Raises:
    UsageError: a missing file, bad settings, a missing segmenter or a corpus
      without documents.
  """
  data_settings.check_settings(settings)
  segment = text_input.load_chinese_segmenter(settings.chinese_segmenter)
  input_files, output_files = _check_files(settings)
  tokenizer = _load_tokenizer(settings)

  num_workers = settings.num_workers or processes.available_cpus()
  per_instance = data_settings.instance_settings(settings)
  if "fork" in multiprocessing.get_all_start_methods():
    context = multiprocessing.get_context("fork")
  else:
    context = multiprocessing.get_context()
  total_bytes = sum(tf.gfile.Stat(path).length for path in input_files)
  tf.logging.info("*** Reading %s from %d input file(s), %s documents per chunk, %d "
                  "worker process(es) ***", parallel.format_bytes(total_bytes), len(input_files),
                  settings.docs_per_chunk or "all", num_workers)
  for path in input_files:
    tf.logging.info("  %s", path)

  stats = CorpusStats()
  progress = parallel.ProgressLog(total_bytes, progress_interval_seconds)
  # One stream for the whole run: with one chunk and one worker it is used
  # exactly as in Google's script.
  rng = random.Random(settings.random_seed)
  writer = record_writing.RoundRobinRecordWriter(output_files)
  num_logged = 0
  try:
    if settings.pretraining_task == data_settings.PAIR_SPAN:
      raw_documents = text_input.read_pair_rows(input_files, stats, settings.blank_marker,
                                                progress)
    else:
      raw_documents = text_input.read_raw_documents(input_files, stats, progress)
    for chunk_index, raw_chunk in enumerate(parallel.iter_chunks(raw_documents,
                                                                 settings.docs_per_chunk)):
      tokenized = parallel.tokenize_chunk(raw_chunk, tokenizer, per_instance, segment,
                                          num_workers, context, progress)
      documents = _usable_documents(tokenized, per_instance, stats)
      del tokenized
      if not documents:
        progress.bytes_done = progress.bytes_read
        continue
      stats.documents += len(documents)
      stats.chunks += 1
      records, without_instances, logged = parallel.create_chunk_records(
          documents, chunk_index, tokenizer, per_instance, num_workers, rng, context,
          progress, _NUM_INSTANCES_TO_LOG - num_logged)
      del documents
      stats.documents_without_instances += without_instances
      for text in logged:
        tf.logging.info("*** Example %d ***\n%s", num_logged, text)
        num_logged += 1
      for record in records:
        writer.write(record)
        progress.instances_written += 1
        progress.maybe_log()
      del records
    if stats.skipped_lines:
      tf.logging.warning("Skipped %d line(s) that are not valid UTF-8; the first is %s.",
                         stats.skipped_lines, stats.first_skipped_line)
    if not stats.documents:
      raise UsageError("--input_file=%s: no %s in %s. %s" % (
          settings.input_file, _INPUT_NOUN[settings.pretraining_task],
          ", ".join(input_files), _INPUT_LAYOUT[settings.pretraining_task]))
    if not progress.instances_written:
      raise UsageError("--input_file=%s: no instance could be made from %d document(s)."
                       % (settings.input_file, stats.documents))
    if stop_signals is not None:
      stop_signals.stop_raising()  # all output files get their names, or none
    writer.commit()
  except BaseException:
    if stop_signals is not None:
      stop_signals.stop_raising()
    writer.abort()
    raise
  stats.instances = sum(writer.counts)
  _log_summary(stats, progress, output_files, writer.counts)
  return stats
