# coding=utf-8
"""The classifier's tasks: each --task_name with its processor (PROCESSORS), and
get_processor.

Supported tasks (`--task_name`, case-insensitive; files live in --data_dir):

  cola, mnli, mrpc, xnli  Google's GLUE/XNLI processors, same files and columns.
  tsv, csv                {train,dev,test}.tsv / .csv with a header row.
  jsonl                   {train,dev,test}.jsonl, one JSON object per line.
  tnews, iflytek, afqmc,  CLUE: {train,dev,test}.json (OCNLI: train.50k.json first), one
  cmnli, ocnli, csl,      JSON object per line, mapped as docs/FORMATS.md 12 says.
  cluewsc2020
  thucnews                `label<TAB>text` lines, no header:
                          {train,dev,test}.txt or cnews.{train,val,test}.txt.

With --multi_label (tsv, csv, jsonl) an example's label is a tuple of labels.
"""

import collections

from bert_mgpu.classifier import clue_processors
from bert_mgpu.classifier import file_readers
from bert_mgpu.classifier import glue_processors
from bert_mgpu.classifier import processors
from bert_mgpu.errors import UsageError


PROCESSORS = collections.OrderedDict([
    ("cola", glue_processors.ColaProcessor),
    ("mnli", glue_processors.MnliProcessor),
    ("mrpc", glue_processors.MrpcProcessor),
    ("xnli", glue_processors.XnliProcessor),
    ("tsv", processors.TsvProcessor),
    ("csv", processors.CsvProcessor),
    ("jsonl", processors.JsonlProcessor),
    ("tnews", clue_processors.TnewsProcessor),
    ("iflytek", clue_processors.IflytekProcessor),
    ("afqmc", clue_processors.AfqmcProcessor),
    ("cmnli", clue_processors.CmnliProcessor),
    ("ocnli", clue_processors.OcnliProcessor),
    ("csl", clue_processors.CslProcessor),
    ("cluewsc2020", clue_processors.Cluewsc2020Processor),
    ("thucnews", processors.ThucnewsProcessor),
])


# The tasks whose files can hold several labels per example (--multi_label).
MULTI_LABEL_TASKS = ("tsv", "csv", "jsonl")


def get_processor(task_name, label_separator=None):
  """Returns a new processor for `task_name` (case-insensitive).

  Args:
    task_name: the --task_name.
    label_separator: None for one label per example; else multi-label (--multi_label),
      labels separated by this string (a JSON list also works in jsonl).

  Raises:
    UsageError: unknown task name, or a multi-label run of a task with one label per example.
  """
  name = (task_name or "").strip().lower()
  if name not in PROCESSORS:
    raise UsageError("unknown --task_name %s; use one of: %s"
                     % (file_readers.quote(task_name or ""), ", ".join(PROCESSORS)))
  if label_separator is not None:
    if name not in MULTI_LABEL_TASKS:
      raise UsageError("--multi_label: task %s has one label per example; use --task_name="
                       "%s for multi-label files" % (name, ", ".join(MULTI_LABEL_TASKS)))
    if not label_separator.strip():
      raise UsageError("--label_separator=%s: use a visible separator such as , or |"
                       % file_readers.quote(label_separator))
  return PROCESSORS[name](label_separator)
