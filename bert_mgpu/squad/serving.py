# coding=utf-8
"""The reading-comprehension model as a servable kind (serving/kinds.py): a question and its
context in, the answer and where it is out, around any runner of windows (TensorFlow's,
squad/serving_graph.py, or ONNX Runtime's, here).

  model_settings.json  {"model": "squad", "do_lower_case", "max_seq_length", "doc_stride",
                       "max_query_length", "max_answer_length", "n_best_size",
                       "version_2_with_negative", "null_score_diff_threshold"} beside
                       vocab.txt and bert_config.json (no labels.txt).
  Input                JSON lines {"id", "question", "context"} ("id" optional: null when
                       absent); HTTP one such object, or a list of them.
  Windows and answers  squad/data.py's, as run_squad_mgpu.py --do_predict: the same windows
                       (doc_stride, max_query_length), n-best and length rules and v2 null
                       threshold, so the answers are predictions.json's.
  Output               one record per question, in input order: {"id", "answer", "start",
                       "probability"}: `start` is the answer's offset in the context in
                       characters (Python's, i.e. code points), so context[start:start +
                       len(answer)] == answer; `probability` its softmax over the question's
                       n-best list. No answer (v2, or no span at all): "answer" "", start -1.

No TensorFlow import: predict_text.py --backend=onnxruntime runs this.
"""

import collections
import json
import logging
import math

import numpy as np

from bert_mgpu.data import text_files
from bert_mgpu.data.batch_shapes import MODEL_INPUTS
from bert_mgpu.serving import kinds
from bert_mgpu.serving import model_inputs
from bert_mgpu.squad import data as squad_data

# TensorFlow's logger (tf.get_logger() is this logger on TF 1.15 and 2.x).
_LOGGER = logging.getLogger("tensorflow")

SQUAD_KIND = "squad"

# The settings an export-only run may change from the trained ones (they only decode).
DECODING_SETTINGS = ("n_best_size", "max_answer_length", "null_score_diff_threshold")


def squad_settings(do_lower_case, max_seq_length, doc_stride, max_query_length,
                   max_answer_length, n_best_size, version_2_with_negative,
                   null_score_diff_threshold):
  """The model_settings.json content of a reading-comprehension model."""
  return collections.OrderedDict([
      ("model", SQUAD_KIND), ("do_lower_case", bool(do_lower_case)),
      ("max_seq_length", int(max_seq_length)), ("doc_stride", int(doc_stride)),
      ("max_query_length", int(max_query_length)),
      ("max_answer_length", int(max_answer_length)), ("n_best_size", int(n_best_size)),
      ("version_2_with_negative", bool(version_2_with_negative)),
      ("null_score_diff_threshold", float(null_score_diff_threshold))])


# ---------------------------------------------------------------------------
# Questions: JSON lines and HTTP requests
# ---------------------------------------------------------------------------

Question = collections.namedtuple("Question", ["id", "question", "context"])

QuestionsRequest = collections.namedtuple("QuestionsRequest", ["questions", "single"])
QuestionsRequest.__doc__ = """The inputs of a POST /predict or an input file: list of
Question, and whether the request was one object (answered by one record) rather than a
list."""


class BadQuestion(ValueError):
  """A question record that cannot be answered: str() says why.

  Attributes:
    too_long: the context is over --max_context_chars (HTTP 413; else 400).
  """

  def __init__(self, problem, too_long=False):
    super(BadQuestion, self).__init__(problem)
    self.too_long = too_long

  def advice(self):
    """What to do, for a line of an input file."""
    if self.too_long:
      return "shorten the context, or raise --max_context_chars"
    return _LINE_ADVICE


_LINE_ADVICE = 'write one JSON object per line: {"id": ..., "question": "...", "context": "..."}'


def question_of(value, max_context_chars):
  """The Question of a decoded JSON object.

  The question and the context must be non-blank strings, the context at most
  max_context_chars characters; "id" is optional (a string or a finite number). No string
  may hold an unpaired surrogate (a broken \\u escape), which no UTF-8 output can carry.

  Raises:
    BadQuestion: saying what is wrong.
  """
  if not isinstance(value, dict):
    raise BadQuestion('expected a JSON object {"id", "question", "context"}, found %s' %
                      text_files.quote_value(value, as_json=True))
  for key in ("question", "context"):
    if key not in value:
      raise BadQuestion('it has no "%s"' % key)
    if not isinstance(value[key], str):
      raise BadQuestion('"%s" is %s, not a string' % (
          key, text_files.quote_value(value[key], as_json=True)))
    if not value[key].strip():
      raise BadQuestion('"%s" is empty' % key)
  question_id = value.get("id")
  if question_id is not None and (
      isinstance(question_id, bool) or not isinstance(question_id, (str, int, float)) or
      (isinstance(question_id, float) and not math.isfinite(question_id))):
    raise BadQuestion('"id" is %s: give a string or a finite number' %
                      text_files.quote_value(question_id, as_json=True))
  for key in ("id", "question", "context"):
    surrogate = isinstance(value.get(key), str) and text_files.find_surrogate(value[key])
    if surrogate:
      raise BadQuestion('"%s" holds an unpaired surrogate \\u%04x at character %d (a broken '
                        '\\u escape; a character outside the BMP is a pair, e.g. '
                        '\\ud83d\\ude00)' % (key, ord(surrogate[0]), surrogate[1]))
  if len(value["context"]) > max_context_chars:
    raise BadQuestion("the context has %d characters, more than --max_context_chars=%d" %
                      (len(value["context"]), max_context_chars), too_long=True)
  return Question(question_id, value["question"], value["context"])


def parse_question_lines(name, text, max_context_chars):
  """The Questions of a JSON-lines input, one per line.

  Raises:
    UsageError: naming the file and line: not JSON, a key given twice, not such an
      object (BadQuestion), an empty line.
  """
  questions = []
  lines = list(text_files.numbered_lines(text))
  if lines and lines[-1][1] == "":
    lines.pop()  # the newline that ends the last line
  for line_number, line in lines:
    if not line.strip():
      raise text_files.line_error(name, line_number, "the line is empty",
                                  "put a question there or remove the line")
    try:
      value = text_files.parse_json(line)
    except text_files.DuplicateKeyError as e:
      raise text_files.line_error(name, line_number, 'the key "%s" is given twice' %
                                  e.args[0], "keep one of them")
    except (ValueError, RecursionError) as e:
      raise text_files.line_error(name, line_number, "not JSON (%s)" % e, _LINE_ADVICE)
    try:
      questions.append(question_of(value, max_context_chars))
    except BadQuestion as e:
      raise text_files.line_error(name, line_number, str(e), e.advice())
  return questions


# ---------------------------------------------------------------------------
# The predictor
# ---------------------------------------------------------------------------

SquadFeatures = collections.namedtuple("SquadFeatures",
                                       ["features", "questions", "examples", "windows"])
SquadFeatures.__doc__ = """The windows of some questions and what turns their logits back.

Fields:
  features: model_inputs.Features of every window, in question order (what the runner runs).
  questions: list of Question.
  examples: list of squad_data.SquadExample, one per question.
  windows: list of squad_data.InputFeatures (their token offsets), one per row of features.
"""


class SquadPredictor(kinds.TextPredictor):
  """A reading-comprehension model: Questions in, answer records out, around a runner of
  windows: predict(model_inputs.Features) -> {"start_logits", "end_logits"}, float32
  [windows, seq] each."""

  def __init__(self, model, runner):
    super(SquadPredictor, self).__init__(model, runner)
    self.settings = model.files.settings

  def featurize(self, questions, texts_b=None):
    """SquadFeatures of a list of Question, windowed as run_squad_mgpu.py does."""
    del texts_b  # the kind takes no pairs
    questions = list(questions)
    settings = self.settings
    examples = [squad_data.SquadExample(q.id, q.question, q.context) for q in questions]
    windows = list(squad_data.convert_examples_to_features(
        examples, self.model.tokenizer, settings["max_seq_length"], settings["doc_stride"],
        settings["max_query_length"], False, collections.Counter()))
    arrays = {name: np.array([getattr(w, name) for w in windows], np.int32).reshape(
        [len(windows), settings["max_seq_length"]]) for name in MODEL_INPUTS}
    return SquadFeatures(model_inputs.Features(arrays, np.zeros([len(windows)], np.bool_)),
                         questions, examples, windows)

  def featurize_file(self, name, inputs):
    """featurize() of an input file's questions (nothing to refuse: every context, even one
    without tokens, has a window, as in run_squad_mgpu.py)."""
    del name
    return self.featurize(inputs.questions)

  def decode(self, featurized, outputs):
    """One {"id", "answer", "start", "probability"} record per question."""
    settings = self.settings
    by_example = squad_data.features_by_example(featurized.windows)
    records = []
    for index, example in enumerate(featurized.examples):
      rows = by_example[index]
      answers = squad_data.question_answers(
          example, [featurized.windows[row] for row in rows], outputs["start_logits"][rows],
          outputs["end_logits"][rows], settings["n_best_size"], settings["max_answer_length"],
          settings["version_2_with_negative"], settings["null_score_diff_threshold"])
      records.append(collections.OrderedDict([
          ("id", example.qas_id), ("answer", answers.answer.text),
          ("start", int(answers.answer.char_start)),
          ("probability", squad_data.answer_probability(answers))]))
    return records

  def file_text(self, records):
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)

  def log_file_run(self, featurized, records, seconds, featurize_seconds):
    del featurize_seconds
    _LOGGER.info("Answered %d question(s) (%d window(s); %d without an answer) in %.2f s "
                 "(%.1f questions/s).", len(records), len(featurized.windows),
                 sum(1 for r in records if not r["answer"]), seconds,
                 len(records) / max(seconds, 1e-9))

  # HTTP: {"question", "context"} or a list of them.

  def parse_request(self, request, limits):
    """QuestionsRequest of one {"id", "question", "context"} object or a list of them."""
    max_texts = limits.max_texts
    single = isinstance(request, dict)
    items = [request] if single else request
    if not isinstance(items, list):
      raise kinds.BadRequest('send a JSON object {"question": "...", "context": "..."} (and '
                             'an optional "id"), or a list of them')
    if len(items) > max_texts:
      raise kinds.TooManyTexts("the request has %d questions; send at most %d per request "
                               "(--max_request_texts)" % (len(items), max_texts))
    max_context_chars = self.model.files.kind.flag_value(limits.kind_flags,
                                                         MAX_CONTEXT_CHARS.name)
    questions = []
    for index, item in enumerate(items):
      try:
        questions.append(question_of(item, max_context_chars))
      except BadQuestion as e:
        error = kinds.TooManyTexts if e.too_long else kinds.BadRequest
        raise error(("" if single else "item %d: " % index) + str(e))
    return QuestionsRequest(questions, single)

  def request_size(self, inputs):
    return len(inputs.questions)

  def featurize_request(self, inputs, start, size):
    return self.featurize(inputs.questions[start:start + size])

  def reply(self, records, truncated, inputs):
    del truncated  # contexts are windowed, never cut
    return records[0] if inputs.single else records

  def metadata(self):
    """GET /labels: no labels; the model's settings (model_settings.json's, as exported)."""
    return {"labels": [], "settings": {key: value for key, value in self.settings.items()
                                       if key != "model"}}


# ---------------------------------------------------------------------------
# The kind
# ---------------------------------------------------------------------------

MAX_CONTEXT_CHARS = kinds.KindFlag(
    "max_context_chars", "integer", 10000, "A reading-comprehension model: the longest "
    "context a question may come with, in characters (longer: refused, naming the line or "
    "the request's item).", minimum=1)


class SquadKind(kinds.ServableKind):
  """A reading-comprehension (span) model (run_squad_mgpu.py): SQuAD v1.1/v2.0, CMRC 2018."""

  name = SQUAD_KIND
  description = "a reading-comprehension model"
  script = "run_squad_mgpu.py"
  settings_fields = ("doc_stride", "max_query_length", "max_answer_length", "n_best_size",
                     "version_2_with_negative", "null_score_diff_threshold")
  has_labels = False
  flags = (MAX_CONTEXT_CHARS,)

  def parse_input_file(self, name, text, with_text_b, limits):
    del with_text_b  # refused before (the kind takes no pairs)
    return QuestionsRequest(parse_question_lines(
        name, text, self.flag_value(limits.kind_flags, MAX_CONTEXT_CHARS.name)), False)

  def outputs(self, files):
    del files
    # [windows, seq]; padding scores below any token, as the model's own padding does.
    logits = model_inputs.OutputSpec((model_inputs.SEQUENCE,), np.float32,
                                     squad_data.PADDING_LOGIT)
    return collections.OrderedDict([("start_logits", logits), ("end_logits", logits)])

  def onnx_outputs(self, files):
    del files
    return {"start_logits": ("tensor(float)", [None, None]),
            "end_logits": ("tensor(float)", [None, None])}

  def text_predictor(self, model, runner):
    return SquadPredictor(model, runner)

  def graph(self):
    from bert_mgpu.squad import serving_graph  # pylint: disable=import-outside-toplevel
    return serving_graph.SquadGraph()


kinds.register(SquadKind())
