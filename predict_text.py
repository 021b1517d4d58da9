# coding=utf-8
"""Raw text in, labels or entities out: runs a trained classifier or NER model on texts from
a file, stdin or HTTP.

The model is an export (--export_dir: the base directory, meaning its newest version, or one
version directory) or a trained output_dir (--output_dir: its best checkpoint, else the
latest) of run_classifier_mgpu.py or run_ner_mgpu.py; its model_settings.json says which.
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

With --serve=PORT it answers HTTP instead (bert_mgpu/serving/http_server.py, docs/SERVING.md):
  POST /predict  {"texts": [...], "texts_b": [...]} -> {"labels", "probabilities", "truncated"}
                 (a multi-label classifier: "labels" holds a list of labels per text)
                 (NER: {"texts": [...]} -> {"entities": [[...], ...]}, one list per text)
  GET  /labels   {"labels": [...]}
  GET  /healthz  503 {"status": "loading"} until the model is ready, then 200 with counters,
                 503 {"status": "draining"} after SIGTERM
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
from bert_mgpu.data.output_files import atomic_write_text
from bert_mgpu.data import text_files
from bert_mgpu.data.text_files import line_error, read_text_file
from bert_mgpu.errors import UsageError
from bert_mgpu.serving import http_server
from bert_mgpu.serving import model_inputs

FLAGS = flags.FLAGS
LOGGER = command_line_base.LOGGER

BACKENDS = ("tensorflow", "onnxruntime")


def define_flags():
  """Defines the flags; called only under __main__, so the module imports anywhere."""
  flags.DEFINE_string("export_dir", None, "An export of run_classifier_mgpu.py or "
                      "run_ner_mgpu.py: its base directory (the newest version is used) or "
                      "one version.")
  flags.DEFINE_string("output_dir", None, "Or a run_classifier_mgpu.py or run_ner_mgpu.py "
                      "--do_train output_dir (its best checkpoint, else the latest).")
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
  flags.DEFINE_integer("max_request_texts", 4096, "With --serve: at most this many texts per "
                       "request (more: 413).")
  flags.DEFINE_integer("drain_seconds", 30, "With --serve: after SIGTERM, wait at most this "
                       "long for the requests being answered.")


def check_flags():
  """Raises UsageError for flags that cannot work together."""
  if bool(FLAGS.export_dir) == bool(FLAGS.output_dir):
    raise UsageError("give exactly one of --export_dir (an export) and --output_dir "
                     "(a trained run_classifier_mgpu.py or run_ner_mgpu.py output_dir).")
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
                     "checkpoint: export it first (run_classifier_mgpu.py or run_ner_mgpu.py "
                     "--output_dir=%s --export_dir=DIR --export_format=onnx) and give "
                     "--export_dir=DIR." % FLAGS.output_dir)
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


def parse_lines(name, text, with_text_b):
  """Texts of the input, one per line.

  Args:
    name: the file name, or <stdin>, for the messages.
    text: the decoded input.
    with_text_b: lines are text_a<TAB>text_b.

  Returns:
    (texts_a, texts_b or None).

  Raises:
    UsageError: an empty line, a missing or extra tab, naming the file and line.
  """
  lines = text.split("\n")
  if lines and lines[-1] == "":
    lines.pop()  # the newline that ends the last line
  texts_a, texts_b = [], []
  for line_number, line in enumerate(lines, 1):
    line = line[:-1] if line.endswith("\r") else line
    fields = line.split("\t")
    if with_text_b and len(fields) != 2:
      raise line_error(name, line_number, "expected text_a<TAB>text_b, found %d tab(s)" %
                       (len(fields) - 1), "write one pair per line with one tab between")
    if not with_text_b and len(fields) > 1:
      raise line_error(name, line_number, "the line holds a tab",
                       "pass --text_b for text_a<TAB>text_b pairs, or remove the tab")
    for index, field in enumerate(fields):
      if not field.strip():
        raise line_error(name, line_number, "the line is empty" if len(fields) == 1 else
                         "text_%s is empty" % "ab"[index], "put a text there or remove the line")
    texts_a.append(fields[0])
    texts_b.extend(fields[1:])
  return texts_a, (texts_b if with_text_b else None)


def read_input():
  """The texts of --input_file or stdin: (texts_a, texts_b or None)."""
  if FLAGS.input_file:
    return parse_lines(FLAGS.input_file, read_text_file(FLAGS.input_file), FLAGS.text_b)
  return parse_lines("<stdin>", decode_utf8("<stdin>", sys.stdin.buffer.read()), FLAGS.text_b)


def write_output(text):
  if FLAGS.output_file:
    atomic_write_text(FLAGS.output_file, text)
  else:
    sys.stdout.write(text)
    sys.stdout.flush()


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------

def load_tensorflow_predictor():
  """The model of --export_dir or --output_dir in TensorFlow, on every tower."""
  # Imported here, so that --backend=onnxruntime never imports TensorFlow.
  # pylint: disable=import-outside-toplevel
  try:
    importlib.import_module("tensorflow.compat.v1")
  except ImportError as e:
    raise UsageError("--backend=tensorflow (the default) needs TensorFlow, which does not "
                     "import here (%s): install it, or run an ONNX export with "
                     "--backend=onnxruntime." % " ".join(str(e).split()))
  from bert_mgpu import command_line
  from bert_mgpu.serving import predictor as serving_predictor
  # pylint: enable=import-outside-toplevel
  if FLAGS.export_dir:
    model = serving_predictor.load_export(FLAGS.export_dir)
  else:
    model = serving_predictor.load_output_dir(FLAGS.output_dir)
  check_text_b(model)
  devices = command_line.device_settings().check()
  predictor = serving_predictor.load_predictor(model, devices, FLAGS.predict_batch_size)
  LOGGER.info("Loaded %s on %d tower(s): %s, precision %s", model.description,
              devices.num_towers, ", ".join(devices.plan.tower_devices), devices.precision)
  return predictor


def load_onnx_predictor():
  """The ONNX model of --export_dir on ONNX Runtime."""
  from bert_mgpu.serving import onnx_predictor  # pylint: disable=import-outside-toplevel
  model = onnx_predictor.load_model(FLAGS.export_dir, FLAGS.onnx_file)
  check_text_b(model)
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
    raise UsageError("--text_b: %s is %s, which reads one text per line; drop --text_b." %
                     (FLAGS.export_dir or FLAGS.output_dir, kind.description))


def load_predictor():
  """Loads the model of --export_dir or --output_dir with --backend: the
  serving/kinds.TextPredictor of its kind. Raises UsageError."""
  if FLAGS.backend == "onnxruntime":
    return load_onnx_predictor()
  return load_tensorflow_predictor()


def predict_file():
  """File mode: reads every text first (bad input stops before the model loads)."""
  texts_a, texts_b = read_input()
  predictor = load_predictor()
  start = time.time()
  try:
    featurized = predictor.featurize(texts_a, texts_b)
  except model_inputs.NoTokensError as e:
    # A line is one text, so the row names the line.
    raise line_error(FLAGS.input_file or "<stdin>", e.row + 1,
                     "%s has no tokens (only spaces, control or invisible characters)" %
                     ("the line" if texts_b is None else "text_" + e.field),
                     "put a text there or remove the line")
  featurize_seconds = time.time() - start
  records = predictor.decode(featurized, predictor.predict(featurized.features))
  seconds = time.time() - start
  write_output(predictor.file_text(records))
  predictor.log_file_run(featurized, records, seconds, featurize_seconds)
  model_inputs.log_truncated(int(featurized.features.truncated.sum()), len(texts_a),
                             predictor.max_seq_length)
  predictor.close()


def main(_):
  check_flags()
  if FLAGS.serve is not None:
    http_server.serve(FLAGS.host, FLAGS.serve, load_predictor,
                      batch_window_seconds=FLAGS.batch_window_ms / 1000.0,
                      max_batch=FLAGS.max_batch, max_request_texts=FLAGS.max_request_texts,
                      drain_seconds=FLAGS.drain_seconds)
  else:
    predict_file()


if __name__ == "__main__":
  define_flags()
  command_line_base.run_main(main)
