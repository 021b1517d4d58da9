# coding=utf-8
"""Raw text in, labels, entities, answers or vectors out: runs a trained classifier, NER,
reading-comprehension or embedding model on texts from a file, stdin or HTTP.

The model is an export (--export_dir: the base directory, meaning its newest version, or one
version directory) or a trained output_dir (--output_dir: its best checkpoint, else the
latest) of run_classifier_mgpu.py, run_ner_mgpu.py, run_squad_mgpu.py or
run_embedding_mgpu.py; its
model_settings.json says which kind (bert_mgpu/serving/kinds.py), and the kind reads the
input and writes the output.
It is loaded once and runs on every tower (--n_gpus x --towers_per_gpu).

Input (--input_file, else stdin): UTF-8, one text per line; with --text_b, each line is
`text_a<TAB>text_b`. An empty line, or one with no tokens (only control or invisible
characters), is an error (the message names the file and line).

Output (--output_file, else stdout): one line per input line, in input order:
`label<TAB>probability<TAB>p_1<TAB>...<TAB>p_k`, the probabilities in labels.txt order. A
multi-label classifier writes `labels<TAB>p_1<TAB>...<TAB>p_k`, its predicted labels (those
reaching their thresholds.json thresholds) joined by its separator, empty for none.

An NER model reads the same lines (no --text_b), each character one token as in CLUENER;
a line longer than max_seq_length - 2 pieces is cut into windows doc_stride pieces apart
(the model's settings), as run_ner_mgpu.py does. Output: one predict_entities.jsonl line
per input line, in input order: {"text", "entities": [{"type", "start", "end", "text"}]}
with character offsets into the line, `end` exclusive.

A reading-comprehension model reads JSON lines {"id", "question", "context"} ("id" optional)
and writes one {"id", "answer", "start", "probability"} line per question, in input order,
with the answers of run_squad_mgpu.py --do_predict (docs/SERVING.md section 5); a context
longer than --max_context_chars characters is refused.

An embedding model writes {"text", "embedding"} JSON lines (or one .npy), one cosine per
text_a<TAB>text_b line, or, given a corpus, each line's nearest corpus lines (docs/SERVING.md
section 6, docs/EMBEDDINGS.md).

With --serve=PORT it answers HTTP instead (bert_mgpu/serving/http_server.py, docs/SERVING.md):
  POST /predict  {"texts": [...], "texts_b": [...]} -> {"labels", "probabilities", "truncated"}
                 (a multi-label classifier: "labels" holds a list of labels per text)
                 (NER: {"texts": [...]} -> {"entities": [[...], ...]}, one list per text)
                 (reading comprehension: {"question", "context"} -> one record, or a list
                 of them -> a list of records)
  GET  /labels   {"labels": [...]}
  GET  /healthz  503 {"status": "loading"} until the model is ready, then 200 with counters,
                 503 {"status": "draining"} after SIGTERM
  POST /<route>  a kind's own routes (serving/kinds.TextPredictor.routes)
Requests that arrive within --batch_window_ms of each other run as one batch (at most
--max_batch texts; a larger request runs in chunks of that many).

--backend=onnxruntime runs the export's model.onnx (or --onnx_file, e.g. model.int8.onnx) on
ONNX Runtime instead, on the CPU with --onnx_threads threads (0: the CPUs the process may
use), with the same outputs and HTTP answers. TensorFlow is not imported on that path: a
serving machine needs NumPy, onnxruntime and absl-py only (docs/SERVING.md).
"""

import importlib
import sys
import time

from absl import flags

# No TensorFlow import here: --backend=onnxruntime runs without it (load_predictor imports
# the TensorFlow predictor only for --backend=tensorflow).
from bert_mgpu import command_line_base
from bert_mgpu.data.output_files import atomic_output
from bert_mgpu.data.output_files import atomic_write_text
from bert_mgpu.data import text_files
from bert_mgpu.data.text_files import read_text_file
from bert_mgpu.errors import UsageError
from bert_mgpu.serving import http_server
from bert_mgpu.serving import kinds
from bert_mgpu.serving import model_inputs

FLAGS = flags.FLAGS
LOGGER = command_line_base.LOGGER

BACKENDS = ("tensorflow", "onnxruntime")


def define_flags():
  """Defines the flags; called only under __main__, so the module imports anywhere."""
  flags.DEFINE_string("export_dir", None, "An export of run_classifier_mgpu.py, "
                      "run_ner_mgpu.py, run_squad_mgpu.py or run_embedding_mgpu.py: its base "
                      "directory (the newest version is used) or one version.")
  flags.DEFINE_string("output_dir", None, "Or such a script's --do_train output_dir (its "
                      "best checkpoint, else the latest).")
  flags.DEFINE_string("input_file", None, "Texts, one per line (UTF-8); default: stdin.")
  flags.DEFINE_string("output_file", None, "Where to write the predictions; default: stdout.")
  flags.DEFINE_bool("text_b", False, "Each input line is text_a<TAB>text_b (sentence pairs).")
  command_line_base.define_device_flags()
  flags.DEFINE_integer("predict_batch_size", 32, "Texts (NER: windows) per tower per step.")
  flags.DEFINE_enum("backend", "tensorflow", list(BACKENDS), "What runs the model: "
                    "tensorflow (the export's SavedModel weights, or --output_dir's "
                    "checkpoint, on every tower) or onnxruntime (the export's model.onnx on "
                    "the CPU, without TensorFlow).")
  flags.DEFINE_string("onnx_file", None, "With --backend=onnxruntime: the ONNX model to run: a "
                      "file name, looked up in the export's version directory (default "
                      "model.onnx; model.int8.onnx: --onnx_int8's), or a path (with a "
                      "directory in it).")
  flags.DEFINE_integer("onnx_threads", 0, "With --backend=onnxruntime: ONNX Runtime's threads "
                       "(0: one per CPU this process may use).")
  flags.DEFINE_integer("serve", None, "Answer HTTP on this port instead of reading texts "
                       "(0: any free port; the log names it).")
  flags.DEFINE_string("host", "127.0.0.1", "With --serve: the address to bind (0.0.0.0: all).")
  flags.DEFINE_integer("batch_window_ms", 5, "With --serve: requests arriving within this "
                       "many milliseconds of the first waiting one run as one batch.")
  flags.DEFINE_integer("max_batch", 256, "With --serve: at most this many texts per batch; "
                       "a larger request runs in chunks of this many.")
  flags.DEFINE_integer("max_request_texts", kinds.InputLimits().max_texts, "With --serve: at "
                       "most this many texts per request (more: 413).")
  flags.DEFINE_integer("drain_seconds", 30, "With --serve: after SIGTERM, wait at most this "
                       "long for the requests being answered.")
  define_kind_flags()


# absl's definition of each KindFlag type.
_DEFINE_KIND_FLAG = {"integer": flags.DEFINE_integer, "float": flags.DEFINE_float,
                     "string": flags.DEFINE_string, "bool": flags.DEFINE_bool}


def define_kind_flags():
  """Defines every known kind's own flags (serving/kinds.KindFlag): absl reads the command
  line before the model, and so its kind, is known.

  Raises:
    ValueError: a kind's flag takes the name of one of this command's own.
  """
  for name, (flag, owners) in kinds.all_flags().items():
    if name in FLAGS:
      raise ValueError("the kind %s declares --%s, which predict_text.py defines itself: "
                       "rename it" % (owners[0], name))
    _DEFINE_KIND_FLAG[flag.type](name, flag.default, flag.help)


def kind_flag_values():
  """dict name -> value of every kind's own flag (InputLimits.kind_flags)."""
  return {name: FLAGS[name].value for name in kinds.all_flags()}


def check_kind_flags(model):
  """Raises UsageError for a kind's flag given for a model of another kind, one of the
  model's kind below its minimum, or values the kind refuses together
  (ServableKind.check_flags)."""
  kind = model.files.kind
  for name, (_, owners) in kinds.all_flags().items():
    if FLAGS[name].present and kind.name not in owners:
      raise UsageError("--%s is for %s; %s is %s: drop --%s." % (
          name, " or ".join(kinds.describe(owner) for owner in owners),
          FLAGS.export_dir or FLAGS.output_dir, kind.description, name))
  for flag in kind.flags:
    value = FLAGS[flag.name].value
    if flag.minimum is not None and value is not None and value < flag.minimum:
      raise UsageError("--%s=%s: it must be at least %s." % (flag.name, value, flag.minimum))
  kind.check_flags(kind_flag_values(), FLAGS.text_b)


def training_scripts():
  """The commands that train the kinds of model served: "run_x.py or run_y.py ..."."""
  return kinds.scripts_of(kinds.names())


def check_flags():
  """Raises UsageError for flags that cannot work together."""
  if bool(FLAGS.export_dir) == bool(FLAGS.output_dir):
    raise UsageError("give exactly one of --export_dir (an export) and --output_dir "
                     "(a trained %s output_dir)." % training_scripts())
  command_line_base.check_positive(("max_batch", "max_request_texts"))
  check_backend_flags()
  for name in ("batch_window_ms", "drain_seconds", "onnx_threads"):
    if getattr(FLAGS, name) < 0:
      raise UsageError("--%s=%d: use 0 or more." % (name, getattr(FLAGS, name)))
  if FLAGS.serve is not None and not 0 <= FLAGS.serve <= 65535:
    raise UsageError("--serve=%d: give a port from 0 (any free one) to 65535." % FLAGS.serve)
  if FLAGS.serve is not None and (FLAGS.input_file or FLAGS.output_file):
    raise UsageError("--serve answers HTTP requests: drop --input_file and --output_file.")


def check_backend_flags():
  """Raises UsageError for flags that mean nothing to the chosen --backend."""
  if FLAGS.backend != "onnxruntime":
    for name in ("onnx_file", "onnx_threads"):
      if getattr(FLAGS, name) != FLAGS[name].default:
        raise UsageError("--%s is for --backend=onnxruntime; add it, or drop --%s." %
                         (name, name))
    return
  if FLAGS.output_dir:
    raise UsageError("--backend=onnxruntime runs an export's model.onnx, not --output_dir's "
                     "checkpoint: export it first (%s --output_dir=%s --export_dir=DIR "
                     "--export_format=onnx) and give --export_dir=DIR." %
                     (training_scripts(), FLAGS.output_dir))
  # ONNX Runtime runs here on the CPU in float32 (or int8 with model.int8.onnx).
  for name in ("n_gpus", "towers_per_gpu", "precision", "use_xla"):
    if getattr(FLAGS, name) != FLAGS[name].default:
      raise UsageError("--%s=%s: --backend=onnxruntime runs on the CPU (set its threads with "
                       "--onnx_threads; model.int8.onnx is the faster one); drop --%s." %
                       (name, getattr(FLAGS, name), name))


# ---------------------------------------------------------------------------
# Input and output
# ---------------------------------------------------------------------------

def decode_utf8(name, data):
  """Decodes bytes read from stdin, or raises UsageError naming the line (as for files)."""
  return text_files.decode_utf8(name, data, "send UTF-8 text (e.g. through `iconv -f GB18030 "
                                "-t UTF-8`)")


def read_input_text():
  """(name, decoded text) of --input_file or stdin."""
  if FLAGS.input_file:
    return FLAGS.input_file, read_text_file(FLAGS.input_file)
  return "<stdin>", decode_utf8("<stdin>", sys.stdin.buffer.read())


def write_output(text):
  """Writes the output (str, or bytes: a binary format) to --output_file or stdout."""
  if FLAGS.output_file and isinstance(text, bytes):
    with atomic_output(FLAGS.output_file, binary=True) as f:
      f.write(text)
  elif FLAGS.output_file:
    atomic_write_text(FLAGS.output_file, text)
  else:
    sys.stdout.write(text)
    sys.stdout.flush()


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------

def input_limits():
  """The kinds.InputLimits of the flags."""
  return kinds.InputLimits(max_texts=FLAGS.max_request_texts, kind_flags=kind_flag_values())


def load_tensorflow_model():
  """The model of --export_dir or --output_dir, for TensorFlow (its files and tokenizer;
  make_tensorflow_predictor builds it)."""
  # Imported here, so that --backend=onnxruntime never imports TensorFlow.
  try:
    importlib.import_module("tensorflow.compat.v1")
  except ImportError as e:
    raise UsageError("--backend=tensorflow (the default) needs TensorFlow, which does not "
                     "import here (%s): install it, or run an ONNX export with "
                     "--backend=onnxruntime." % " ".join(str(e).split()))
  # pylint: disable=import-outside-toplevel
  from bert_mgpu.serving import predictor as serving_predictor
  # pylint: enable=import-outside-toplevel
  if FLAGS.export_dir:
    return serving_predictor.load_export(FLAGS.export_dir)
  return serving_predictor.load_output_dir(FLAGS.output_dir)


def make_tensorflow_predictor(model):
  """The model in TensorFlow, on every tower."""
  # pylint: disable=import-outside-toplevel
  from bert_mgpu import command_line
  from bert_mgpu.serving import predictor as serving_predictor
  # pylint: enable=import-outside-toplevel
  devices = command_line.device_settings().check()
  predictor = serving_predictor.load_predictor(model, devices, FLAGS.predict_batch_size)
  LOGGER.info("Loaded %s on %d tower(s): %s, precision %s", model.description,
              devices.num_towers, ", ".join(devices.plan.tower_devices), devices.precision)
  return predictor


def load_onnx_model():
  """The ONNX model of --export_dir, checked (make_onnx_predictor opens it)."""
  from bert_mgpu.serving import onnx_predictor  # pylint: disable=import-outside-toplevel
  return onnx_predictor.load_model(FLAGS.export_dir, FLAGS.onnx_file)


def make_onnx_predictor(model):
  """The ONNX model on ONNX Runtime."""
  from bert_mgpu.serving import onnx_predictor  # pylint: disable=import-outside-toplevel
  session = onnx_predictor.open_session(model, FLAGS.onnx_threads or None)
  predictor = onnx_predictor.make_predictor(
      model, session, FLAGS.predict_batch_size,
      length_multiple=None if FLAGS.pad_to_max_seq_length else 1)
  LOGGER.info("Loaded %s on ONNX Runtime (CPU, %d thread(s)).", model.description,
              session.get_session_options().intra_op_num_threads)
  return predictor


def check_text_b(model):
  kind = model.files.kind
  if FLAGS.text_b and not kind.takes_text_b:
    raise UsageError("--text_b: %s is %s, which takes no text pairs; drop --text_b." %
                     (FLAGS.export_dir or FLAGS.output_dir, kind.description))


def load_model():
  """The model of --export_dir or --output_dir for --backend, checked against the flags but
  not built (its files, tokenizer and kind). Raises UsageError."""
  model = load_onnx_model() if FLAGS.backend == "onnxruntime" else load_tensorflow_model()
  check_text_b(model)
  check_kind_flags(model)
  return model


def make_predictor(model):
  """The serving/kinds.TextPredictor of a load_model() model, built with --backend, given
  the values of its kind's own flags and prepared (TextPredictor.prepare: e.g. a corpus
  indexed)."""
  if FLAGS.backend == "onnxruntime":
    predictor = make_onnx_predictor(model)
  else:
    predictor = make_tensorflow_predictor(model)
  predictor.use_flags(kind_flag_values())
  if predictor.output_is_binary() and not FLAGS.output_file and FLAGS.serve is None:
    raise UsageError("the output asked for is a binary file, which stdout does not take: "
                     "give --output_file.")
  predictor.prepare()
  return predictor


def load_predictor():
  """make_predictor(load_model()). Raises UsageError."""
  return make_predictor(load_model())


def predict_file():
  """File mode: reads and checks every input first (bad input stops before the model is
  built)."""
  name, text = read_input_text()
  model = load_model()
  inputs = model.files.kind.parse_input_file(name, text, FLAGS.text_b, input_limits())
  predictor = make_predictor(model)
  start = time.time()
  featurized = predictor.featurize_file(name, inputs)
  featurize_seconds = time.time() - start
  records = predictor.decode(featurized, predictor.predict(featurized.features))
  seconds = time.time() - start
  write_output(predictor.file_text(records))
  predictor.log_file_run(featurized, records, seconds, featurize_seconds)
  model_inputs.log_truncated(int(featurized.features.truncated.sum()),
                             predictor.request_size(inputs), predictor.max_seq_length)
  predictor.close()


def main(_):
  check_flags()
  if FLAGS.serve is not None:
    http_server.serve(FLAGS.host, FLAGS.serve, load_predictor,
                      batch_window_seconds=FLAGS.batch_window_ms / 1000.0,
                      max_batch=FLAGS.max_batch, limits=input_limits(),
                      drain_seconds=FLAGS.drain_seconds)
  else:
    predict_file()


if __name__ == "__main__":
  define_flags()
  command_line_base.run_main(main)
