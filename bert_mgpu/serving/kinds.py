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
  - the named outputs its runners return (outputs: model_inputs.OutputSpec each), the
    outputs of its ONNX model (onnx_outputs) and how ONNX Runtime runs it (onnx_runner);
  - its own predict_text.py flags (flags: KindFlag each) and HTTP routes beside
    POST /predict (its TextPredictor's routes);
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

InputLimits = collections.namedtuple("InputLimits", ["max_texts", "kind_flags"])
InputLimits.__new__.__defaults__ = (4096, None)
InputLimits.__doc__ = """What one request or input file may ask of the model (predict_text.py's
flags), given to the kind's parsing and its HTTP routes.

Fields:
  max_texts: the most texts (a kind's records) one HTTP request may hold
    (--max_request_texts; more: 413).
  kind_flags: dict flag name -> value of the kinds' own flags (ServableKind.flags), or None
    for every flag's default; a kind reads its own with ServableKind.flag_value.
"""

KindFlag = collections.namedtuple("KindFlag", ["name", "type", "default", "help", "minimum"])
KindFlag.__new__.__defaults__ = (None,)
KindFlag.__doc__ = """A predict_text.py flag of one kind of model (ServableKind.flags).

predict_text.py defines every known kind's flags before it reads the command line (absl
parses flags before the model, and so its kind, is known), and refuses one given for a
model of another kind.

Fields:
  name: the flag's name, without --.
  type: "integer", "float", "string" or "bool".
  default: its value when not given.
  help: its help text.
  minimum: the least value a number may take (refused below, in one line), or None.
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
    flags: the kind's own predict_text.py flags (KindFlag), read from InputLimits.kind_flags.
  """

  name = None
  description = None
  script = None
  settings_fields = ()
  has_labels = True
  takes_text_b = False
  model_noun = "trained"
  flags = ()

  def flag_value(self, values, name):
    """The value of the kind's flag `name` in `values` (dict name -> value, e.g.
    InputLimits.kind_flags), or its default when `values` is None or lacks it."""
    if values and name in values:
      return values[name]
    for flag in self.flags:
      if flag.name == name:
        return flag.default
    raise KeyError("%s declares no flag --%s" % (self.name, name))

  def check_flags(self, values, with_text_b):
    """Raises UsageError for values of the kind's own flags (dict name -> value) that cannot
    work together, or with text pairs (with_text_b); predict_text.py calls it before the
    model is built, after each flag's minimum is checked."""
    del values, with_text_b

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

  def outputs(self, files):
    """The outputs its runners return (TensorFlow's and ONNX Runtime's alike): an
    OrderedDict name -> model_inputs.OutputSpec."""
    raise NotImplementedError

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
    """Runs featurized rows on ONNX Runtime: predict(model_inputs.Features) -> dict name ->
    output (those of outputs()), close(). By default onnx_predictor.OnnxRun, which fetches
    the ONNX model's outputs of those names."""
    # Here, not at the top: onnx_predictor imports this module.
    from bert_mgpu.serving import onnx_predictor  # pylint: disable=import-outside-toplevel
    return onnx_predictor.OnnxRun(model, session, batch_size, length_multiple)

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
    for column, field in enumerate(fields):
      if not field.strip():
        raise text_files.line_error(
            name, line_number, "the line is empty" if len(fields) == 1 else
            "text_%s is empty" % "ab"[column], "put a text there or remove the line")
    texts_a.append(fields[0])
    texts_b.extend(fields[1:])
  return texts_a, (texts_b if with_text_b else None)


class BadRequest(Exception):
  """A request the HTTP server answers with 400 and {"error": message}."""


class TooManyTexts(Exception):
  """A request the HTTP server answers with 413 and {"error": message}."""


def text_list(request, key):
  """request[key], checked as a list of non-empty strings. Raises BadRequest."""
  texts = request.get(key)
  if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
    raise BadRequest('"%s" must be a list of strings' % key)
  for position, text in enumerate(texts):
    if not text.strip():
      raise BadRequest('%s[%d] is empty: send a text' % (key, position))
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
    kind_flags: the values of the kind's own flags (use_flags), or None: flag() then gives
      their defaults (a predictor built outside predict_text.py).
  """

  def __init__(self, model, runner):
    self.model = model
    self.labels = list(model.files.labels)
    self.max_seq_length = model.files.settings["max_seq_length"]
    self.takes_text_b = model.files.kind.takes_text_b
    self._runner = runner
    self.kind_flags = None  # use_flags()

  def use_flags(self, values):
    """Takes the values of the kind's own flags (dict name -> value; predict_text.py gives
    them once the predictor is built); flag() reads them."""
    self.kind_flags = dict(values)

  def flag(self, name):
    """The value of the kind's own flag `name` (its default before use_flags)."""
    return self.model.files.kind.flag_value(self.kind_flags, name)

  def prepare(self):
    """Runs once the flags are in (use_flags), before the first input: what the kind's
    flags ask to be ready (e.g. a corpus encoded and indexed). It may take long: under
    --serve, /healthz answers 503 meanwhile. Raises UsageError."""

  def output_is_binary(self):
    """Whether file_text() returns bytes (then predict_text.py needs --output_file)."""
    return False

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
    texts = text_list(request, "texts")
    if "texts_b" not in request:
      return texts, None
    texts_b = text_list(request, "texts_b")
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
    """The runner's outputs of model_inputs.Features: dict name -> array [rows, ...] (the
    kind's outputs(); no rows give empty arrays)."""
    return self._runner.predict(features)

  def routes(self):
    """The HTTP routes the kind adds beside POST /predict: dict path -> function(request,
    predict, limits) -> the JSON reply, where request is the decoded JSON body, predict
    runs model_inputs.Features through the server's micro-batcher (this predict()'s
    outputs) and limits is the InputLimits. The function raises BadRequest (400) or
    TooManyTexts (413); its reply must be JSON (NumPy values converted). POST only; a route
    is not split into chunks of --max_batch as /predict is, and the texts it truncates are
    not counted in /healthz."""
    return {}

  def decode(self, featurized, outputs):
    """One record per text of predict()'s outputs (dict name -> array) of
    featurized.features."""
    raise NotImplementedError

  def file_text(self, records):
    """predict_text.py's output file of the records: str (bytes when output_is_binary)."""
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


def all_flags():
  """Every known kind's own flags: an OrderedDict flag name -> (KindFlag, names of the kinds
  that declare it). Raises ValueError when two kinds declare one name differently."""
  found = collections.OrderedDict()
  for name in names():
    for flag in get(name).flags:
      if flag.name in found and found[flag.name][0] != flag:
        raise ValueError("the kinds %s and %s declare the flag --%s differently" %
                         (found[flag.name][1][0], name, flag.name))
      found.setdefault(flag.name, (flag, []))[1].append(name)
  return found


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
