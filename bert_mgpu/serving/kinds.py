# coding=utf-8
"""Servable kinds: what serving needs to know of one kind of model, behind one interface.

A trained model's model_settings.json names its kind in "model" ("classifier", "ner"). The
task unit that trains that kind defines a ServableKind subclass in its serving.py (no
TensorFlow import there) and registers it; bert_mgpu/serving/ and predict_text.py reach the
kind only through this module, so they import no task unit and a new kind needs no edit here.

A kind says:
  - its model_settings.json fields beside model, do_lower_case and max_seq_length
    (settings_fields), and whether it has a labels.txt (read_labels);
  - the asset files an export carries beside vocab.txt, bert_config.json and
    model_settings.json (write_assets), and what it reads back from them (read_assets);
  - how raw requests are read, featurized and decoded, in its TextPredictor: a text, or a
    text pair when takes_text_b (its HTTP request: parse_request; its reply and GET /labels
    metadata: reply, metadata);
  - the outputs of its ONNX model (onnx_outputs) and how ONNX Runtime runs it (onnx_runner);
  - the TensorFlow side, imported only when asked for (graph(): the SavedModel signature,
    the export's extra assets, the predictor's graph on every tower).

The built-in kinds are listed by module name in bert_mgpu/task_units.py and imported the
first time get() is asked for one.
"""

import collections
import importlib

from bert_mgpu import task_units
from bert_mgpu.data import label_files
from bert_mgpu.data import text_files
from bert_mgpu.serving import model_inputs
from bert_mgpu.errors import UsageError

_KINDS = {}

InputLimits = collections.namedtuple("InputLimits", ["max_texts", "max_context_chars"])
InputLimits.__new__.__defaults__ = (4096, 10000)
InputLimits.__doc__ = """What one request or input file may ask of the model (predict_text.py's
flags), given to the kind's parsing; a kind reads what concerns it.

Fields:
  max_texts: the most texts (a kind's records) one HTTP request may hold
    (--max_request_texts; more: 413).
  max_context_chars: the longest passage a reading-comprehension question may come with, in
    characters (--max_context_chars; 10,000 by default).
"""


class ServableKind(object):
  """One kind of servable model. Subclasses set the class attributes and override what
  differs.

  Attributes:
    name: the model_settings.json "model" value.
    description: what a message calls such a model ("a classifier").
    script: the command that trains and exports it ("run_classifier_mgpu.py").
    settings_fields: model_settings.json fields it needs beside model, do_lower_case and
      max_seq_length.
    has_labels: whether the model has a labels.txt (read by read_labels).
    takes_text_b: whether a request may hold text pairs (--text_b, "texts_b").
    model_noun: what "it is not a complete ... model" calls it, in messages.
  """

  name = None
  description = None
  script = None
  settings_fields = ()
  has_labels = True
  takes_text_b = False
  model_noun = "trained"

  def read_labels(self, path):
    """The label list in labels.txt. Raises UsageError."""
    return label_files.read_label_file(path)

  def read_assets(self, directory, settings, labels):
    """What else the model's directory (output_dir or assets.extra/) gives the predictor:
    a dict kept as ModelFiles.assets. Raises UsageError."""
    del directory, settings, labels
    return {}

  def write_assets(self, directory, files):
    """Writes into an export's assets.extra/ what the kind needs beside vocab.txt,
    bert_config.json and model_settings.json: by default its labels.txt."""
    if self.has_labels:
      label_files.write_label_file(directory, files.labels)

  def parse_input_file(self, name, text, with_text_b, limits):
    """The inputs of predict_text.py's input file (or stdin), as parse_request gives them:
    by default (texts_a, texts_b or None) of one text (text_a<TAB>text_b) per line.

    Args:
      name: the file name, or <stdin>, for the messages.
      text: its decoded content.
      with_text_b: --text_b.
      limits: InputLimits.

    Raises:
      UsageError: naming the file and line.
    """
    del limits
    return parse_text_lines(name, text, with_text_b)

  def input_rank(self, settings):
    """2 when the model reads [batch, seq] inputs; 3 for [batch, windows, seq]."""
    del settings
    return 2

  def onnx_outputs(self, files):
    """The ONNX model's outputs the predictor reads: dict name -> (ONNX type, shape), None
    in a shape for a dimension of any size."""
    raise NotImplementedError

  def read_onnx_assets(self, assets_dir, files):
    """What ONNX Runtime needs beside the model (e.g. a CRF's transitions): a dict kept as
    OnnxModel.assets. Raises UsageError."""
    del assets_dir, files
    return {}

  def onnx_runner(self, model, session, batch_size, length_multiple):
    """Runs featurized rows on ONNX Runtime: predict(model_inputs.Features) -> outputs,
    close(). See serving/onnx_predictor.OnnxRun."""
    raise NotImplementedError

  def text_predictor(self, model, runner):
    """The TextPredictor of a loaded model around its runner (TensorFlow or ONNX)."""
    raise NotImplementedError

  def graph(self):
    """The kind's TensorFlow side (imported here, never on the ONNX Runtime path): a
    KindGraph with signature_outputs(model, inputs), onnx_output_names(files),
    export_assets(files, checkpoint, export_format) and
    tensorflow_runner(model, devices, batch_size_per_tower)."""
    raise NotImplementedError


def parse_text_lines(name, text, with_text_b):
  """Texts of an input file, one per line (ServableKind.parse_input_file's default).

  Args:
    name: the file name, or <stdin>, for the messages.
    text: the decoded input.
    with_text_b: lines are text_a<TAB>text_b.

  Returns:
    (texts_a, texts_b or None).

  Raises:
    UsageError: an empty line, a missing or extra tab, naming the file and line.
  """
  lines = list(text_files.numbered_lines(text))
  if lines and lines[-1][1] == "":
    lines.pop()  # the newline that ends the last line
  texts_a, texts_b = [], []
  for line_number, line in lines:
    fields = line.split("\t")
    if with_text_b and len(fields) != 2:
      raise text_files.line_error(
          name, line_number, "expected text_a<TAB>text_b, found %d tab(s)" %
          (len(fields) - 1), "write one pair per line with one tab between")
    if not with_text_b and len(fields) > 1:
      raise text_files.line_error(
          name, line_number, "the line holds a tab",
          "pass --text_b for text_a<TAB>text_b pairs, or remove the tab")
    for index, field in enumerate(fields):
      if not field.strip():
        raise text_files.line_error(
            name, line_number, "the line is empty" if len(fields) == 1 else
            "text_%s is empty" % "ab"[index], "put a text there or remove the line")
    texts_a.append(fields[0])
    texts_b.extend(fields[1:])
  return texts_a, (texts_b if with_text_b else None)


class BadRequest(Exception):
  """A request the HTTP server answers with 400 and {"error": message}."""


class TooManyTexts(Exception):
  """A request the HTTP server answers with 413 and {"error": message}."""


def _text_list(request, key):
  texts = request.get(key)
  if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
    raise BadRequest('"%s" must be a list of strings' % key)
  for index, text in enumerate(texts):
    if not text.strip():
      raise BadRequest('%s[%d] is empty: send a text' % (key, index))
  return texts


class KindGraph(object):
  """The base of a kind's graph(): the defaults of what most kinds need not say."""

  def onnx_output_names(self, files):
    """The signature outputs the ONNX model keeps (the numeric ones the kind's runner
    reads)."""
    raise NotImplementedError

  def export_assets(self, files, checkpoint, export_format):
    """Files for the export's assets.extra/ that only the weights give: dict name -> text."""
    del files, checkpoint, export_format
    return {}


class TextPredictor(object):
  """Raw texts in, one record per text out, around a runner of featurized rows.

  Split in three so that the HTTP server's micro-batcher runs the rows of concurrent
  requests together: featurize() (request threads), predict() (the batcher, on
  features.features), decode() (request threads).

  Attributes:
    model: the loaded model (.files, .tokenizer, .description).
    labels: the label list ([] for a kind without labels).
    max_seq_length: the model's.
    takes_text_b: the kind's.
  """

  def __init__(self, model, runner):
    self.model = model
    self.labels = list(model.files.labels)
    self.max_seq_length = model.files.settings["max_seq_length"]
    self.takes_text_b = model.files.kind.takes_text_b
    self._runner = runner

  def featurize(self, texts_a, texts_b=None):
    """Featurized texts: an object whose .features is the model_inputs.Features run by
    predict(). Raises model_inputs.NoTokensError for a text without tokens."""
    raise NotImplementedError

  def featurize_file(self, name, inputs):
    """featurize() of parse_input_file's inputs of the file `name`.

    Raises:
      UsageError: a text has no tokens, naming its line.
    """
    texts_a, texts_b = inputs
    try:
      return self.featurize(texts_a, texts_b)
    except model_inputs.NoTokensError as e:
      # A line is one text, so the row names the line.
      raise text_files.line_error(
          name, e.row + 1, "%s has no tokens (only spaces, control or invisible characters)"
          % ("the line" if texts_b is None else "text_" + e.field),
          "put a text there or remove the line")

  # The HTTP request. A kind that reads other JSON than {"texts", "texts_b"} overrides the
  # three methods below; its inputs are whatever its parse_request returns.

  def parse_request(self, request, limits):
    """The inputs of a decoded POST /predict body: (texts, texts_b or None) of
    {"texts": [...], "texts_b": [...]} ("texts_b" only for a kind that takes pairs).

    Args:
      request: the decoded JSON.
      limits: InputLimits.

    Raises:
      BadRequest: not the JSON the kind takes.
      TooManyTexts: more than limits.max_texts texts.
    """
    max_texts = limits.max_texts
    if not isinstance(request, dict) or "texts" not in request:
      raise BadRequest('send a JSON object with "texts": a list of strings (and "texts_b" '
                       'for pairs)')
    if isinstance(request["texts"], list) and len(request["texts"]) > max_texts:
      raise TooManyTexts("the request has %d texts; send at most %d per request "
                         "(--max_request_texts)" % (len(request["texts"]), max_texts))
    texts = _text_list(request, "texts")
    if "texts_b" not in request:
      return texts, None
    texts_b = _text_list(request, "texts_b")
    if len(texts_b) != len(texts):
      raise BadRequest('"texts_b" has %d texts but "texts" has %d: send one text_b per '
                       'text' % (len(texts_b), len(texts)))
    if not self.takes_text_b:
      raise BadRequest('this is %s: send "texts" only (no "texts_b")' %
                       self.model.files.kind.description)
    return texts, texts_b

  def request_size(self, inputs):
    """How many records parse_request's inputs ask for."""
    return len(inputs[0])

  def featurize_request(self, inputs, start, size):
    """featurize() of the inputs' records [start, start + size).

    Raises:
      BadRequest: a text has no tokens (named by its index in the request).
    """
    texts, texts_b = inputs
    chunk_b = texts_b[start:start + size] if texts_b is not None else None
    try:
      return self.featurize(texts[start:start + size], chunk_b)
    except model_inputs.NoTokensError as e:
      raise BadRequest("%s[%d] has no tokens (only spaces, control or invisible "
                       "characters): send a text" %
                       ("texts" if e.field == "a" else "texts_b", start + e.row))

  def predict(self, features):
    """The runner's outputs of model_inputs.Features: an array [rows, ...]."""
    return self._runner.predict(features)

  def decode(self, featurized, outputs):
    """One record per text of predict()'s outputs of featurized.features."""
    raise NotImplementedError

  def file_text(self, records):
    """predict_text.py's output file of the records."""
    raise NotImplementedError

  def log_file_run(self, featurized, records, seconds, featurize_seconds):
    """Logs predict_text.py's summary line of a file run."""
    raise NotImplementedError

  def reply(self, records, truncated, inputs):
    """The JSON reply of POST /predict: records of the request's texts (its inputs, as
    parse_request gave them), of which `truncated` were cut to max_seq_length."""
    raise NotImplementedError

  def metadata(self):
    """The JSON reply of GET /labels."""
    return {"labels": self.labels}

  def close(self):
    self._runner.close()


def register(kind):
  """Registers a ServableKind instance under kind.name (a later one replaces it)."""
  _KINDS[kind.name] = kind
  return kind


def unregister(name):
  """Forgets a kind registered with register() (a test's own kind)."""
  _KINDS.pop(name, None)


def get(name):
  """The registered kind of a model_settings.json "model" value, or None."""
  if name not in _KINDS and name in task_units.SERVABLE_KIND_MODULES:
    importlib.import_module(task_units.SERVABLE_KIND_MODULES[name])
  return _KINDS.get(name)


def names():
  """The names of every known kind: built in, then registered."""
  return list(task_units.SERVABLE_KIND_MODULES) + [
      name for name in _KINDS if name not in task_units.SERVABLE_KIND_MODULES]


def describe(name):
  """What a message calls a model of kind `name`, known or not."""
  kind = get(name) if isinstance(name, str) else None
  return kind.description if kind else "a %r model" % (name,)


def script_of(name):
  """The command that trains models of kind `name` (the classifier's for an unknown one)."""
  kind = get(name) if isinstance(name, str) else None
  return kind.script if kind else "run_classifier_mgpu.py"


def scripts_of(names):
  """The commands that train models of the kinds `names`, joined by "or" (for messages)."""
  return " or ".join(script_of(name) for name in names)


def checked(name, path):
  """The kind of a model_settings.json's "model" value. Raises UsageError for none."""
  kind = get(name) if isinstance(name, str) else None
  if kind is None:
    raise UsageError("%s says this is a %r model, which nothing here serves: give the "
                     "output_dir or export of a model trained with %s." %
                     (path, name, scripts_of(names())))
  return kind
