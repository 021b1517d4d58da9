# coding=utf-8
"""The part of the command line that needs no TensorFlow: strict flag parsing, main() with
one-line failures, the log and the inference device flags.

predict_text.py --backend=onnxruntime runs on a serving machine with NumPy, ONNX Runtime and
absl-py only, so it imports this module and never command_line.py (which builds on it and
adds everything that needs TensorFlow). absl's flags are TensorFlow's: tf.flags defines into
the same absl.flags.FLAGS on TF 1.15 and 2.x.
"""

import difflib
import logging
import signal
import sys

from absl import app as absl_app
from absl import flags as absl_flags

from bert_mgpu.errors import Preempted, UsageError
from bert_mgpu.training import phases

FLAGS = absl_flags.FLAGS

# --precision's values; training/mixed_precision.PRECISIONS maps each to its dtype.
PRECISIONS = ("fp32", "bf16", "fp16")

# TensorFlow's logger (tf.get_logger() is this one on TF 1.15 and 2.x), and the format TF
# gives its handler, so that a run without TensorFlow logs the same lines.
LOGGER = logging.getLogger("tensorflow")
_LOG_FORMAT = "%(levelname)s:%(name)s:%(message)s"

# Integer flags that must be at least 1 wherever a script defines them.
# (--n_gpus and --towers_per_gpu: multigpu.plan_devices checks them, for every caller.)
_POSITIVE_FLAGS = ("train_batch_size", "eval_batch_size", "predict_batch_size",
                   "save_checkpoints_steps", "log_steps", "accumulation_steps",
                   "max_seq_length", "worker_timeout_secs", "worker_startup_timeout_secs")


def define_device_flags():
  """Defines the device flags of inference (run_settings.DeviceSettings): towers,
  precision, XLA, padding. command_line.define_device_flags adds training's."""
  flags = absl_flags
  flags.DEFINE_integer("n_gpus", 1, "GPUs to use. With none visible, towers run on logical "
                       "CPU devices.")
  flags.DEFINE_integer("towers_per_gpu", 1, "Model replicas (towers) on each GPU.")
  flags.DEFINE_enum("precision", "fp32", list(PRECISIONS), "Compute precision: fp32; bf16 "
                    "(Ampere-or-newer GPUs, CPUs with bf16 units); fp16 with dynamic loss "
                    "scaling (V100/T4-class GPUs). Weights stay float32.")
  flags.DEFINE_bool("use_xla", False, "Compile each tower's step with XLA (for GPUs).")
  flags.DEFINE_bool("pad_to_max_seq_length", False, "Pad every batch to the full sequence "
                    "length (the model's max_seq_length) instead of to its longest example "
                    "(the old behaviour; slower on short texts).")


def flag_value(flag_values, name, default=None):
  """The value of flag `name`, or `default` when the script does not define it."""
  return getattr(flag_values, name) if name in flag_values else default


def check_positive(names=(), flag_values=None):
  """Raises UsageError unless the integer flags `names`, and the shared ones that must be
  (batch sizes, --save_checkpoints_steps...), are at least 1 wherever the script defines
  them."""
  flag_values = FLAGS if flag_values is None else flag_values
  for name in tuple(_POSITIVE_FLAGS) + tuple(names):
    value = flag_value(flag_values, name)
    if value is not None and value < 1:
      raise UsageError("--%s=%d: it must be at least 1." % (name, value))


# ---------------------------------------------------------------------------
# main(): strict parsing, one line per failure
# ---------------------------------------------------------------------------

def _known_flag_names(flag_values):
  names = set()
  for name, flag in flag_values._flags().items():  # pylint: disable=protected-access
    names.add(name)
    if flag.boolean:
      names.add("no" + name)
  return names


def check_command_line(argv, flag_values=None):
  """Parses `argv` strictly: an unknown flag or a stray argument is a UsageError.

  tf.app.run alone tolerates undefined flags, so `--n_gpu=4` would train on one GPU
  (docs/FORMATS.md 9). `--undefok=NAME` lets an old command line keep a flag on purpose.

  Raises:
    UsageError: one line naming the flag and the closest known one.
  """
  flag_values = flag_values or FLAGS
  if flag_values is FLAGS:
    # --help, --helpshort and --helpfull are defined by absl's app.run, which runs later.
    absl_app.define_help_flags()
  try:
    leftover = flag_values(list(argv))
  except absl_flags.Error as e:
    name = getattr(e, "flagname", None)
    if name is None:  # a bad value: absl names the flag and the value
      raise UsageError(" ".join(str(e).split()))
    known = sorted(n for n in _known_flag_names(flag_values) if not n.startswith("no"))
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = ("did you mean --%s? " % close[0]) if close else ""
    raise UsageError("unknown flag --%s: %sIf the command line carries it on purpose, add "
                     "--undefok=%s. (--helpfull lists every flag.)" % (name, hint, name))
  if len(leftover) > 1:
    stray = leftover[1]
    raise UsageError("unexpected argument %r: a boolean flag takes its value after '=', "
                     "e.g. --do_train=true (a bare word after it is not its value)." % stray)


def log_to_stderr():
  """INFO and above of TensorFlow's logger on stderr, in TensorFlow's format, printed once
  (TF 2.x would also hand each record to Python's root logger)."""
  LOGGER.setLevel(logging.INFO)
  LOGGER.propagate = False
  if not LOGGER.handlers:  # TensorFlow, when imported, has added its own (the same format)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(_LOG_FORMAT))
    LOGGER.addHandler(handler)


def run_main(main, argv=None, app_run=absl_app.run):
  """Runs `main(argv)` under absl's app.run (`app_run`: tf.app.run for the TensorFlow
  commands) with strict flags, and turns failures into one line.

  The job's phase breakdown (bert_mgpu/training/phases.py) is logged when main returns. A
  UsageError prints `error: <message>` and exits 1; a preemption prints where it saved
  and exits 128 + the signal (143 for SIGTERM, 130 for Ctrl-C); a Ctrl-C outside training
  exits 130 with no traceback.
  """
  argv = list(sys.argv if argv is None else argv)

  def fail(message, code):
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    sys.exit(code)

  def guarded(args):
    phases.record_import()
    try:
      main(args)
    except UsageError as e:
      fail("error: %s" % e, 1)
    except Preempted as e:
      fail(str(e), 128 + e.signum)
    except KeyboardInterrupt:
      fail("Interrupted (Ctrl-C).", 128 + signal.SIGINT)
    phases.log_summary(LOGGER.info)

  log_to_stderr()
  try:
    check_command_line(argv)
  except UsageError as e:
    fail("error: %s" % e, 1)
  app_run(guarded, argv=argv)
