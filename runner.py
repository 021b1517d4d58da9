# coding=utf-8
"""The runner under every run_*_mgpu.py script: flags, run config, and the train/eval/predict
loop.

A run script defines its own flags and calls define_shared_flags() for the rest, builds a
RunConfig with make_run_config() (the batch and step arithmetic lives there, once), claims
its output_dir with lock_output_dir(), and hands its model_fn and datasets to train(),
infer() and evaluate(). run_main() turns a UsageError into one line on stderr and exit 1,
and a preemption (SIGTERM, Ctrl-C) into a saved checkpoint, one line and exit 143 / 130.

Devices and towers are multigpu.py's business; this module only asks it for a plan and
for the training and inference graphs.
"""

import collections
import contextlib
import difflib
import errno
import hashlib
import json
import os
import re
import signal
import sys
import tempfile
import time

import numpy as np
import tensorflow.compat.v1 as tf
from absl import app as absl_app

import cluster
import mixed_precision
import modeling
import multigpu
import tokenization

try:
  import fcntl  # POSIX only; without it output_dir is not locked (with a warning).
except ImportError:  # pragma: no cover
  fcntl = None


class UsageError(Exception):
  """Bad input or flags: run_main() prints the message on one line and exits 1.

  The message names the flag or the file, line and value where there is one, and says
  what to do about it.
  """


class TrainingDiverged(UsageError):
  """The loss became NaN or infinite."""


class Preempted(Exception):
  """SIGTERM or Ctrl-C stopped the run after a checkpoint was saved.

  Attributes:
    signum: the signal that asked for the stop (the exit code is 128 + signum).
  """

  def __init__(self, signum, message):
    super(Preempted, self).__init__(message)
    self.signum = signum


def _signal_name(signum):
  return "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"


# ---------------------------------------------------------------------------
# Output files: written whole or not at all
# ---------------------------------------------------------------------------

def _current_umask():
  """The process umask (reading it means setting it, so it is set straight back)."""
  mask = os.umask(0o022)
  os.umask(mask)
  return mask


def atomic_write_text(path, text):
  """Writes `text` (UTF-8) to `path` through a temp file and a rename.

  A crash leaves either the old file or the new one, never half a file.

  Raises:
    UsageError: the file system refused the write (disk full, a directory in the way...).
  """
  directory = os.path.dirname(os.path.abspath(path))
  try:
    fd, tmp_path = tempfile.mkstemp(dir=directory, prefix=".tmp-" + os.path.basename(path))
  except OSError as e:
    raise write_error(path, e)
  try:
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
      f.write(text)
    make_file_readable(tmp_path)
    os.replace(tmp_path, path)
  except OSError as e:
    if os.path.exists(tmp_path):
      os.remove(tmp_path)
    raise write_error(path, e)
  except BaseException:
    if os.path.exists(tmp_path):
      os.remove(tmp_path)
    raise


def write_error(path, error, tmp_path=None):
  """The UsageError for a write that the file system refused (disk full, quota, a
  directory in the way, permissions, a read-only file system)."""
  if isinstance(error, tf.errors.OpError):
    reason = error.message.split("\n")[0]
    if tmp_path and reason.startswith(tmp_path + "; "):  # TF names the temp file first
      reason = reason[len(tmp_path) + 2:]
  else:
    reason = getattr(error, "strerror", None) or str(error)
  return UsageError("cannot write %s (%s): free some space, fix the permissions, or remove "
                    "what is in the way, then run again." % (path, reason))


def make_file_readable(path):
  """Gives a temp file (mkstemp makes them 0600) the mode open() would give it."""
  os.chmod(path, 0o666 & ~_current_umask())


def format_key_values(values):
  """Google's eval_results.txt: `key = value` lines, keys sorted (docs/FORMATS.md 7)."""
  return "".join("%s = %s\n" % (key, values[key]) for key in sorted(values))


def write_eval_results(output_dir, metrics, checkpoint):
  """Adds the checkpoint's global_step to `metrics` and writes output_dir/eval_results.txt.

  Returns:
    The path written.
  """
  metrics["global_step"] = checkpoint_global_step(checkpoint)
  path = os.path.join(output_dir, "eval_results.txt")
  atomic_write_text(path, format_key_values(metrics))
  tf.logging.info("Eval results of %s, in %s:", checkpoint, path)
  for key in sorted(metrics):
    tf.logging.info("  %s = %s", key, metrics[key])
  return path


# ---------------------------------------------------------------------------
# Flags shared by the run scripts
# ---------------------------------------------------------------------------

# name -> (kind, default, help). Google's names and defaults (docs/FORMATS.md 8); a script
# picks the ones it has and may change a default (run_squad's max_seq_length is 384).
_SHARED_FLAGS = collections.OrderedDict([
    ("bert_config_file", ("string", None, "bert_config.json of the pre-trained model.")),
    ("vocab_file", ("string", None, "vocab.txt of the pre-trained model.")),
    ("output_dir", ("string", None, "Checkpoints, TensorBoard events and every output file "
                    "go here.")),
    ("init_checkpoint", ("string", None, "Checkpoint to start from, e.g. "
                         "chinese_L-12_H-768_A-12/bert_model.ckpt.")),
    ("do_lower_case", ("bool", True, "Lower-case the input (True for uncased and Chinese "
                       "models).")),
    ("max_seq_length", ("integer", 128, "Tokens per example after WordPiece, with [CLS] and "
                        "[SEP]; longer inputs are truncated, shorter ones padded.")),
    ("do_train", ("bool", False, "Train.")),
    ("do_eval", ("bool", False, "Evaluate (at every checkpoint when training too, and at "
                 "the end).")),
    ("do_predict", ("bool", False, "Predict.")),
    ("train_batch_size", ("integer", 32, "Training batch size PER TOWER.")),
    ("eval_batch_size", ("integer", 8, "Eval batch size per tower.")),
    ("predict_batch_size", ("integer", 8, "Predict batch size per tower.")),
    ("learning_rate", ("float", 5e-5, "Peak learning rate.")),
    ("num_train_epochs", ("float", 3.0, "Epochs over the training set.")),
    ("warmup_proportion", ("float", 0.1, "Share of the steps spent warming up.")),
    ("save_checkpoints_steps", ("integer", 1000, "Save (and evaluate) every this many "
                                "steps.")),
])

# Integer flags that must be at least 1 wherever a script defines them.
_POSITIVE_FLAGS = ("train_batch_size", "eval_batch_size", "predict_batch_size",
                   "save_checkpoints_steps", "log_steps", "accumulation_steps",
                   "max_seq_length", "n_gpus", "towers_per_gpu", "worker_timeout_secs",
                   "worker_startup_timeout_secs")


def define_shared_flags(names, **defaults):
  """Defines the shared flags `names` (with `defaults` overriding theirs) and the runner's.

  Called from a script's define_flags(), which runs only under __main__, so that the
  modules can be imported together (a flag may be defined once per process).

  The runner's flags are the multi-GPU ones and Google's TPU flags; the TPU flags are
  accepted so that users' command lines parse, and --use_tpu=true is refused.
  """
  flags = tf.flags
  definers = {"string": flags.DEFINE_string, "bool": flags.DEFINE_bool,
              "integer": flags.DEFINE_integer, "float": flags.DEFINE_float}
  for name in names:
    kind, default, help_text = _SHARED_FLAGS[name]
    definers[kind](name, defaults.pop(name, default), help_text)
  if defaults:
    raise ValueError("defaults for flags not defined: %s" % sorted(defaults))
  flags.DEFINE_bool("use_tpu", False, "Not supported; accepted so that command lines parse.")
  for name in ("tpu_name", "tpu_zone", "gcp_project", "master"):
    flags.DEFINE_string(name, None, "Accepted for Google compatibility; unused.")
  flags.DEFINE_integer("num_tpu_cores", 8, "Accepted for Google compatibility; unused.")
  flags.DEFINE_integer("iterations_per_loop", 1000, "Accepted for Google compatibility (TPU "
                       "only); unused.")
  flags.DEFINE_integer("n_gpus", 1, "GPUs to use. With none visible, towers run on logical "
                       "CPU devices.")
  flags.DEFINE_integer("towers_per_gpu", 1, "Model replicas (towers) on each GPU.")
  flags.DEFINE_bool("variables_on_gpu", False, "The old name of --variable_update=gpu0.")
  flags.DEFINE_enum("variable_update", "host", list(multigpu.VARIABLE_UPDATES),
                    "Where the variables live and how gradients meet: host (one copy on the "
                    "CPU; the default), gpu0 (one copy on GPU 0), replicated (a copy on every "
                    "GPU, gradients summed by an NCCL/ring all-reduce). docs/SCALING.md says "
                    "which to choose.")
  flags.DEFINE_string("worker_hosts", None, "Several machines: every worker's host:port, "
                      "comma-separated, the same list on each (worker 0 is the chief). "
                      "Needs --variable_update=replicated. Or set TF_CONFIG.")
  flags.DEFINE_integer("task_index", 0, "This worker's index in --worker_hosts.")
  flags.DEFINE_integer("worker_timeout_secs", 60, "A worker unreachable for this long stops "
                       "the others with an error naming it.")
  flags.DEFINE_integer("worker_startup_timeout_secs", 600, "How long a worker waits at the "
                       "start for the others to come up.")
  flags.DEFINE_integer("random_seed", 12345, "Seed for initialisation, shuffling and dropout.")
  flags.DEFINE_enum("optimizer", "adamw", ["adamw", "radam", "lamb"], "The optimizer.")
  flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints to keep in output_dir (0: all).")
  flags.DEFINE_integer("log_steps", 100, "Log progress every this many steps.")
  flags.DEFINE_integer("accumulation_steps", 1, "Micro-batches whose gradients are averaged "
                       "into one update.")
  flags.DEFINE_enum("precision", "fp32", list(mixed_precision.PRECISIONS), "Compute "
                    "precision: fp32; bf16 (Ampere-or-newer GPUs, CPUs with bf16 units); fp16 "
                    "with dynamic loss scaling (V100/T4-class GPUs). Weights stay float32.")
  flags.DEFINE_bool("use_xla", False, "Compile each tower's step with XLA (for GPUs).")
  flags.DEFINE_bool("pad_to_max_seq_length", False, "Pad every batch to --max_seq_length "
                    "instead of to its longest example (the old behaviour; slower on short "
                    "texts).")


def _flag_value(flag_values, name, default=None):
  """The value of flag `name`, or `default` when the script does not define it."""
  return getattr(flag_values, name) if name in flag_values else default


def check_run_flags(flag_values, positive_flag_names=()):
  """Checks the flags every run script shares, before any work. Raises UsageError.

  Args:
    flag_values: tf.flags.FLAGS.
    positive_flag_names: the script's own integer flags that must be at least 1.
  """
  if flag_values.use_tpu:
    raise UsageError("--use_tpu=true: bert-mgpu does not run on TPUs. Drop --use_tpu and set "
                     "--n_gpus to the GPUs to use.")
  for name in tuple(_POSITIVE_FLAGS) + tuple(positive_flag_names):
    value = _flag_value(flag_values, name)
    if value is not None and value < 1:
      raise UsageError("--%s=%d: it must be at least 1." % (name, value))
  learning_rate = _flag_value(flag_values, "learning_rate")
  if learning_rate is not None and not (np.isfinite(learning_rate) and learning_rate > 0):
    raise UsageError("--learning_rate=%s: it must be a positive number, e.g. 5e-5." %
                     learning_rate)
  epochs = _flag_value(flag_values, "num_train_epochs")
  if epochs is not None and not (np.isfinite(epochs) and epochs > 0):
    raise UsageError("--num_train_epochs=%s: it must be a positive number." % epochs)
  warmup = _flag_value(flag_values, "warmup_proportion")
  if warmup is not None and not 0 <= warmup <= 1:
    raise UsageError("--warmup_proportion=%s: it is a share of the training steps, from 0 "
                     "to 1 (e.g. 0.1)." % warmup)
  if flag_values.keep_checkpoint_max < 0:
    raise UsageError("--keep_checkpoint_max=%d: use 0 (keep all) or more." %
                     flag_values.keep_checkpoint_max)
  output_dir = _flag_value(flag_values, "output_dir")
  if not output_dir:
    raise UsageError("--output_dir is required.")
  workers = run_cluster(flag_values)
  if workers is not None and not workers.is_chief:
    return  # a non-chief worker reads neither output_dir nor the init checkpoint
  if "://" in output_dir:
    raise UsageError("--output_dir=%s: give a local directory. The atomic writes and the "
                     "run lock need a local file system; copy the directory to %s after the "
                     "run." % (output_dir, output_dir.split("://")[0] + "://..."))
  if tf.gfile.Exists(output_dir) and not tf.gfile.IsDirectory(output_dir):
    raise UsageError("--output_dir=%s is a file, not a directory: give a directory path." %
                     output_dir)
  init_checkpoint = _flag_value(flag_values, "init_checkpoint")
  if init_checkpoint and not tf.gfile.Exists(init_checkpoint + ".index"):
    raise UsageError("--init_checkpoint=%s: no checkpoint there (expected %s.index). Give the "
                     "path without the .index/.data suffix, e.g. "
                     "chinese_L-12_H-768_A-12/bert_model.ckpt." %
                     (init_checkpoint, init_checkpoint))
  if init_checkpoint and "do_lower_case" in flag_values:
    try:
      tokenization.validate_case_matches_checkpoint(flag_values.do_lower_case, init_checkpoint)
    except ValueError as e:
      raise UsageError(str(e))


def run_cluster(flag_values):
  """The cluster.Cluster of a multi-worker run (--worker_hosts or TF_CONFIG), else None.

  Raises:
    UsageError: the worker flags are malformed.
  """
  if "worker_hosts" not in flag_values:
    return None
  try:
    return cluster.cluster_from_flags(flag_values.worker_hosts, flag_values.task_index)
  except cluster.ClusterError as e:
    raise UsageError(str(e))


def require_file(flag_name, path):
  """Raises UsageError unless the file flag `flag_name` is set to an existing path."""
  if not path:
    raise UsageError("--%s is required." % flag_name)
  if not tf.gfile.Exists(path):
    raise UsageError("--%s=%s: no such file. Check the path." % (flag_name, path))
  if tf.gfile.IsDirectory(path):
    raise UsageError("--%s=%s is a directory: give the file itself." % (flag_name, path))


def load_bert_config(config_file, max_seq_length):
  """Reads bert_config.json and checks max_seq_length against it. Raises UsageError."""
  require_file("bert_config_file", config_file)
  try:
    bert_config = modeling.BertConfig.from_json_file(config_file)
  except ValueError as e:
    raise UsageError(str(e))
  if max_seq_length > bert_config.max_position_embeddings:
    raise UsageError(
        "--max_seq_length=%d is longer than max_position_embeddings=%d in %s: use "
        "--max_seq_length=%d or less." % (max_seq_length, bert_config.max_position_embeddings,
                                          config_file, bert_config.max_position_embeddings))
  return bert_config


def load_tokenizer(vocab_file, do_lower_case, bert_config, bert_config_file):
  """The FullTokenizer of `vocab_file`, checked against the config's vocab_size.

  Raises:
    UsageError: the vocab file is unreadable, lacks [CLS], [SEP] or [UNK], or has more
      lines than the model's vocab.
  """
  require_file("vocab_file", vocab_file)
  try:
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
  except ValueError as e:
    raise UsageError(str(e))
  for token in ("[CLS]", "[SEP]", "[UNK]"):
    if token not in tokenizer.vocab:
      raise UsageError("%s has no %s token: use the vocab.txt that came with the checkpoint."
                       % (vocab_file, token))
  # Ids are line numbers: a token listed twice makes the lines outnumber the tokens, and
  # an id at or past vocab_size is out of the embedding table.
  num_ids = max(tokenizer.vocab.values()) + 1 if tokenizer.vocab else 0
  if num_ids > bert_config.vocab_size:
    raise UsageError(
        "%s has %d tokens (one per line, ids 0-%d) but vocab_size is %d in %s: the vocab "
        "and the config belong to different models. Use the vocab.txt that came with the "
        "checkpoint." % (vocab_file, num_ids, num_ids - 1, bert_config.vocab_size,
                         bert_config_file))
  return tokenizer


def available_cpus():
  """CPU cores this process may run on."""
  if hasattr(os, "sched_getaffinity"):
    return len(os.sched_getaffinity(0))
  return os.cpu_count() or 1


# ---------------------------------------------------------------------------
# The run config: one object with the batch and step arithmetic
# ---------------------------------------------------------------------------

# With --use_xla, batch lengths are rounded up to a multiple of this.
XLA_LENGTH_MULTIPLE = 16


class RunConfig(object):
  """What the loop needs to know about a run, built from the flags by make_run_config().

  Training batch sizes are counted over all towers of all workers: `micro_batch_size`
  examples run per sess.run, `global_batch_size` = micro_batch_size x accumulation_steps
  examples make one update. Eval and predict run on this process's towers. Steps are
  updates (global_step).
  """

  def __init__(self, **fields):
    self.output_dir = fields.pop("output_dir")
    self.init_checkpoint = fields.pop("init_checkpoint", None)
    self.n_gpus = fields.pop("n_gpus", 1)
    self.towers_per_gpu = fields.pop("towers_per_gpu", 1)
    self.variables_on_gpu = fields.pop("variables_on_gpu", False)
    self.variable_update = fields.pop("variable_update", None)
    # A cluster.Cluster for several workers, else None.
    self.cluster = fields.pop("cluster", None)
    self.num_workers = self.cluster.num_workers if self.cluster else 1
    self.is_chief = self.cluster is None or self.cluster.is_chief
    self.worker_timeout_secs = fields.pop("worker_timeout_secs", 60)
    self.worker_startup_timeout_secs = fields.pop("worker_startup_timeout_secs", 600)
    self.num_towers = self.n_gpus * self.towers_per_gpu  # of this process
    self.train_batch_size = fields.pop("train_batch_size", 1)  # per tower
    self.accumulation_steps = fields.pop("accumulation_steps", 1)
    self.micro_batch_size = self.train_batch_size * self.num_towers * self.num_workers
    self.global_batch_size = self.micro_batch_size * self.accumulation_steps
    self.global_eval_batch_size = fields.pop("eval_batch_size", 8) * self.num_towers
    self.global_predict_batch_size = fields.pop("predict_batch_size", 8) * self.num_towers
    self.num_train_steps = fields.pop("num_train_steps", 0)
    self.num_warmup_steps = fields.pop("num_warmup_steps", 0)
    self.learning_rate = fields.pop("learning_rate", 5e-5)
    self.optimizer = fields.pop("optimizer", "adamw")
    self.save_checkpoints_steps = fields.pop("save_checkpoints_steps", 1000)
    self.keep_checkpoint_max = fields.pop("keep_checkpoint_max", 5)
    self.log_steps = fields.pop("log_steps", 100)
    self.random_seed = fields.pop("random_seed", None)
    self.precision = fields.pop("precision", "fp32")
    self.use_xla = fields.pop("use_xla", False)
    # Batches are cut to their longest example rounded up to this (XLA compiles one program
    # per shape, so it gets a few lengths); None pads them all to max_seq_length.
    self.length_multiple = (None if fields.pop("pad_to_max_seq_length", False)
                            else XLA_LENGTH_MULTIPLE if self.use_xla else 1)
    # A description of the training data for the start-of-run log ("800 training examples").
    self.train_data_description = fields.pop("train_data_description", None)
    self._plan = fields.pop("plan", None)  # a DevicePlan, for tests; else made by plan()
    if fields:
      raise TypeError("unknown RunConfig fields: %s" % sorted(fields))

  def plan(self):
    """The DevicePlan of this run (asks TensorFlow for the GPUs once, on first use).

    Raises:
      UsageError: more GPUs asked for than are visible.
    """
    if self._plan is None:
      try:
        variable_update = self.variable_update
        if self.variables_on_gpu and variable_update == "host":
          variable_update = None  # the flag's default gives way to the old name
        self._plan = multigpu.plan_devices(
            self.n_gpus, self.towers_per_gpu, self.variables_on_gpu,
            variable_update=variable_update, num_workers=self.num_workers,
            worker_index=self.cluster.task_index if self.cluster else 0)
      except ValueError as e:
        raise UsageError(str(e))
      check_precision(self.precision, self._plan)
    return self._plan

  @property
  def cache_dir(self):
    """Where this process keeps featurized data: output_dir, except on a worker that is not
    the chief, which writes nothing there (a directory of its own under the temp dir)."""
    if self.is_chief:
      return self.output_dir
    key = hashlib.sha1(os.path.abspath(self.output_dir).encode("utf-8")).hexdigest()[:10]
    return os.path.join(tempfile.gettempdir(), "bert-mgpu-worker%d-%s" % (
        self.cluster.task_index, key))

  def describe_training(self):
    """The start-of-run log lines: data, batch arithmetic, schedule and device mapping."""
    workers = " x %d workers" % self.num_workers if self.num_workers > 1 else ""
    lines = ["%d tower(s)%s x per-tower batch %d x %d accumulation step(s) = global batch %d" % (
        self.num_towers, workers, self.train_batch_size, self.accumulation_steps,
        self.global_batch_size)]
    steps = "%d steps, %d warmup steps, optimizer %s, peak learning rate %g, precision %s%s" % (
        self.num_train_steps, self.num_warmup_steps, self.optimizer, self.learning_rate,
        self.precision, ", XLA" if self.use_xla else "")
    if self.train_data_description:
      steps = "%s = %s" % (self.train_data_description, steps)
    return lines + [steps] + self.plan().describe()


# global_step is an int64.
_MAX_STEPS = 2 ** 63 - 1


def _gpu_compute_capabilities():
  """(major, minor) of each visible GPU, or None where TensorFlow does not say."""
  details = getattr(tf.config.experimental, "get_device_details", None)
  capabilities = []
  for gpu in tf.config.experimental.list_physical_devices("GPU"):
    capabilities.append(details(gpu).get("compute_capability") if details else None)
  return capabilities


def check_precision(precision, plan):
  """Refuses a --precision that this TensorFlow or these devices lack (no silent fallback).

  Raises:
    UsageError: fp16 without a GPU (a CPU only emulates it, slowly); bf16 on TF 1.15 (it
      lacks bfloat16 kernels) or on a GPU older than Ampere.
  """
  on_gpu = any("gpu" in device.lower() for device in plan.tower_devices)
  if precision == "bf16" and not tf.__version__.startswith("2"):
    raise UsageError("--precision=bf16 needs TensorFlow 2.x: TF %s lacks bfloat16 kernels "
                     "for some of BERT's ops (Reciprocal, for one). Use "
                     "--precision=fp16 on GPUs, or fp32." % tf.__version__)
  if precision == "fp16" and not on_gpu:
    raise UsageError("--precision=fp16 needs a GPU (V100, T4 or newer); on a CPU float16 is "
                     "emulated and slower than fp32. Use --precision=bf16 on CPUs with bf16 "
                     "units, or fp32.")
  if precision == "bf16" and on_gpu:
    for capability in _gpu_compute_capabilities():
      if capability is not None and tuple(capability) < (8, 0):
        raise UsageError("--precision=bf16 needs an Ampere-or-newer GPU (compute capability "
                         "8.0+); this one is %d.%d. Use --precision=fp16 (with loss scaling) "
                         "or fp32." % tuple(capability))


def make_run_config(flag_values, num_train_examples=None, example_noun="training examples"):
  """The RunConfig of a run, from the flags: the one place for batch and step arithmetic.

  Steps come from --num_train_steps and --num_warmup_steps when the script has them
  (pretraining), otherwise as Google's scripts count them: int(examples x epochs / global
  batch) and int(steps x warmup_proportion).

  Args:
    flag_values: tf.flags.FLAGS, already checked by check_run_flags().
    num_train_examples: examples (SQuAD: questions) in the training set, with --do_train.
    example_noun: what they are, for the messages.

  Raises:
    UsageError: the training set is less than one global batch.
  """
  # The flags this script has; RunConfig's defaults stand for the others.
  fields = {name: getattr(flag_values, name) for name in (
      "output_dir", "init_checkpoint", "n_gpus", "towers_per_gpu", "variables_on_gpu",
      "variable_update", "train_batch_size", "eval_batch_size", "predict_batch_size",
      "accumulation_steps", "learning_rate", "optimizer", "save_checkpoints_steps",
      "keep_checkpoint_max", "log_steps", "random_seed", "precision", "use_xla",
      "pad_to_max_seq_length", "worker_timeout_secs", "worker_startup_timeout_secs")
            if name in flag_values}
  fields["cluster"] = run_cluster(flag_values)
  config = RunConfig(**fields)
  if config.cluster is not None:
    if not _flag_value(flag_values, "do_train"):
      raise UsageError("--worker_hosts (or TF_CONFIG) is for training (--do_train): evaluate "
                       "and predict with one process on the chief's output_dir.")
    try:
      multigpu.check_variable_update(config.variable_update, num_workers=config.num_workers)
    except ValueError as e:
      raise UsageError(str(e))
  if not _flag_value(flag_values, "do_train"):
    return config
  if "num_train_steps" in flag_values:
    config.num_train_steps = flag_values.num_train_steps
    config.num_warmup_steps = flag_values.num_warmup_steps
    return config
  epochs = flag_values.num_train_epochs
  config.num_train_steps = int(num_train_examples * epochs / config.global_batch_size)
  config.num_warmup_steps = int(config.num_train_steps * flag_values.warmup_proportion)
  if config.num_train_steps > _MAX_STEPS:
    raise UsageError("--num_train_epochs=%g: %d %s x %g epochs is %d steps, more than "
                     "global_step can count (%d). Give a realistic number of epochs." %
                     (epochs, num_train_examples, example_noun, epochs,
                      config.num_train_steps, _MAX_STEPS))
  if config.num_train_steps < 1:
    raise UsageError("%d %s x %g epochs is less than one global batch of %d: lower "
                     "--train_batch_size or raise --num_train_epochs." %
                     (num_train_examples, example_noun, epochs, config.global_batch_size))
  config.train_data_description = "%d %s x %g epochs" % (num_train_examples, example_noun,
                                                         epochs)
  return config


# ---------------------------------------------------------------------------
# The output_dir lock: one run per output_dir
# ---------------------------------------------------------------------------

LOCK_FILE_NAME = ".bert-mgpu.lock"

# output_dir (absolute) -> open lock file descriptor. The kernel releases a lock when its
# process dies, SIGKILL included, so a killed run leaves no stale lock.
_held_locks = {}


def _close_inherited_locks():
  """In a forked child (featurizing workers): the lock belongs to the parent alone, so a
  worker that outlives a killed parent does not keep output_dir locked."""
  for fd in _held_locks.values():
    os.close(fd)
  _held_locks.clear()


if hasattr(os, "register_at_fork"):
  os.register_at_fork(after_in_child=_close_inherited_locks)


def _lock_holder(lock_path):
  try:
    with open(lock_path) as f:
      return f.read().strip() or "unknown"
  except (IOError, OSError):
    return "unknown"


def lock_output_dir(output_dir):
  """Creates output_dir and holds an exclusive lock on it until this process exits.

  Call it after the flags and inputs are checked (bad input creates no output_dir) and
  before anything is written there. The lock file holds the holder's pid.

  Raises:
    UsageError: output_dir cannot be created, or another live process holds its lock.
  """
  try:
    tf.gfile.MakeDirs(output_dir)
  except tf.errors.OpError as e:
    raise UsageError("--output_dir=%s: cannot create it (%s). Check the path and its "
                     "permissions." % (output_dir, e.message.split("\n")[0]))
  if fcntl is None:
    tf.logging.warning("--output_dir=%s is not locked (no fcntl on this system): make sure no "
                       "other run writes there.", output_dir)
    return
  key = os.path.abspath(output_dir)
  if key in _held_locks:
    return
  lock_path = os.path.join(output_dir, LOCK_FILE_NAME)
  try:
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
  except OSError as e:
    raise UsageError("--output_dir=%s: cannot write there (%s). Check its permissions." %
                     (output_dir, e.strerror))
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError as e:
    os.close(fd)
    if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
      raise UsageError("--output_dir=%s is in use by another run (process %s, see %s): wait "
                       "for it to finish or stop it, or use another --output_dir." %
                       (output_dir, _lock_holder(lock_path), lock_path))
    tf.logging.warning("--output_dir=%s cannot be locked (%s; some network file systems refuse "
                       "locks): make sure no other run writes there.", output_dir, e.strerror)
    return
  os.ftruncate(fd, 0)
  os.write(fd, ("%d\n" % os.getpid()).encode("ascii"))
  _held_locks[key] = fd


def claim_output_dir(config):
  """lock_output_dir(config.output_dir) on the chief. Any other worker of a multi-worker run
  writes nothing to output_dir (it may not even see it): it takes no lock, and its feature
  caches go to config.cache_dir."""
  if config.is_chief:
    lock_output_dir(config.output_dir)
  else:
    tf.gfile.MakeDirs(config.cache_dir)
    tf.logging.info("Worker %d writes nothing to --output_dir (the chief does); its caches go "
                    "to %s.", config.cluster.task_index, config.cache_dir)


# ---------------------------------------------------------------------------
# Preemption: SIGTERM and Ctrl-C stop training at the next step boundary
# ---------------------------------------------------------------------------

class _StopSignals(object):
  """Catches SIGTERM and the first SIGINT while training; the loop polls `signum`.

  A second Ctrl-C interrupts at once (KeyboardInterrupt), for a user who will not wait.
  Only the main thread can install handlers; elsewhere this does nothing.
  """

  def __init__(self):
    self.signum = None
    self._previous = {}

  def _handle(self, signum, unused_frame):
    if self.signum is not None and signum == signal.SIGINT:
      raise KeyboardInterrupt
    self.signum = signum
    tf.logging.warning("Received %s: stopping after the current step (and evaluation, if one "
                       "is running) and saving a checkpoint%s.", _signal_name(signum),
                       " (Ctrl-C again to stop at once)" if signum == signal.SIGINT else "")

  def __enter__(self):
    try:
      for signum in (signal.SIGTERM, signal.SIGINT):
        self._previous[signum] = signal.signal(signum, self._handle)
    except ValueError:  # not the main thread
      pass
    return self

  def __exit__(self, *unused_exc):
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    self._previous = {}


# ---------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------

def checkpoint_global_step(checkpoint_path):
  """The global_step stored in a checkpoint (0 for one without, like Google's releases)."""
  reader = tf.train.load_checkpoint(checkpoint_path)
  if reader.has_tensor("global_step"):
    return int(reader.get_tensor("global_step"))
  return 0


def checkpoint_for_inference(output_dir, init_checkpoint, best_subdir=None):
  """The weights to evaluate or predict with, and a phrase saying why.

  output_dir/<best_subdir> when given and holding a checkpoint, else the latest checkpoint
  in output_dir, else init_checkpoint.

  Raises:
    UsageError: none of them exists.
  """
  if best_subdir:
    best_dir = os.path.join(output_dir, best_subdir)
    best = tf.train.latest_checkpoint(best_dir) if tf.gfile.IsDirectory(best_dir) else None
    if best:
      return best, "the best dev checkpoint, kept in %s" % best_dir
  latest = tf.train.latest_checkpoint(output_dir) if tf.gfile.IsDirectory(output_dir) else None
  if latest:
    return latest, "the latest checkpoint in --output_dir"
  if init_checkpoint:
    return init_checkpoint, "--init_checkpoint (no checkpoint in --output_dir)"
  raise UsageError("No checkpoint in --output_dir=%s and no --init_checkpoint: train first "
                   "(--do_train) or point --output_dir at a trained model." % output_dir)


def init_from_checkpoint(init_checkpoint):
  """Initialises the graph's trainable variables that `init_checkpoint` holds.

  Returns:
    The names of the trainable variables it did not hold (a new task head, say).

  Raises:
    UsageError: missing checkpoint, or a variable whose shape differs from the checkpoint's.
  """
  trainable = set(v.op.name for v in tf.trainable_variables())
  tvars = [v for v in multigpu.saveable_variables() if v.op.name in trainable]
  try:
    assignment_map, initialized = modeling.get_assignment_map_from_checkpoint(
        tvars, init_checkpoint)
  except ValueError as e:
    raise UsageError("--init_checkpoint=%s: %s" % (init_checkpoint, e))
  tf.train.init_from_checkpoint(init_checkpoint, assignment_map)
  return [v.op.name for v in tvars if v.op.name not in initialized]


def _scalar_summary(writer, step, values):
  summary = tf.Summary(value=[tf.Summary.Value(tag=tag, simple_value=float(value))
                              for tag, value in sorted(values.items())])
  writer.add_summary(summary, step)
  writer.flush()


class _BestCheckpoint(object):
  """Keeps a copy of the best-scoring checkpoint in output_dir/best, across restarts."""

  def __init__(self, output_dir, metric, resuming):
    """Args: output_dir; metric: the key to maximise; resuming: whether training resumes.

    The stored state counts only when the run resumes with the same metric: a run from
    scratch, or one that maximises another metric, starts a new record (and best/ is
    overwritten by its first evaluation).
    """
    self.metric = metric
    self.directory = os.path.join(output_dir, "best")
    self.state_file = os.path.join(self.directory, "best_metric.json")
    self.best = None
    self.evals_since_best = 0
    if resuming and tf.gfile.Exists(self.state_file):
      with tf.gfile.GFile(self.state_file) as f:
        state = json.load(f)
      if state.get("metric") == metric:
        self.best, self.evals_since_best = state["value"], state["evals_since_best"]

  def update(self, checkpoint_path, metrics):
    """Records an evaluation; copies the checkpoint when it is a new best. Returns True then."""
    value = metrics[self.metric]
    improved = self.best is None or value > self.best
    if improved:
      tf.gfile.MakeDirs(self.directory)
      old = tf.train.latest_checkpoint(self.directory)
      for source in tf.gfile.Glob(checkpoint_path + ".*"):
        target = os.path.join(self.directory, os.path.basename(source))
        tf.gfile.Copy(source, target + ".tmp", overwrite=True)
        tf.gfile.Rename(target + ".tmp", target, overwrite=True)
      # A bare file name, so output_dir can be moved or copied (as save_relative_paths). The
      # directory must be absolute: with a relative one, TF rewrites the name relative to
      # the working directory (docs/FORMATS.md 9).
      name = os.path.basename(checkpoint_path)
      tf.train.update_checkpoint_state(os.path.abspath(self.directory), name,
                                       all_model_checkpoint_paths=[name])
      if old and os.path.basename(old) != os.path.basename(checkpoint_path):
        for stale in tf.gfile.Glob(old + ".*"):
          tf.gfile.Remove(stale)
      self.best, self.evals_since_best = value, 0
    else:
      self.evals_since_best += 1
    atomic_write_text(self.state_file, json.dumps(
        {"metric": self.metric, "value": self.best, "evals_since_best": self.evals_since_best,
         "checkpoint": os.path.basename(checkpoint_path) if improved else None}))
    return improved



# ---------------------------------------------------------------------------
# The loop: train, evaluate, predict
# ---------------------------------------------------------------------------

EvalSpec = collections.namedtuple(
    "EvalSpec", ["make_dataset", "metrics_fn", "best_metric", "patience"])
EvalSpec.__doc__ = """Evaluation during training, at every checkpoint.

Fields:
  make_dataset: function() -> tf.data.Dataset of the dev set in global batches of
    config.global_eval_batch_size (is_training=False); called inside the graph being built.
  metrics_fn: function(dict name -> np.ndarray of per-example outputs) -> dict name -> float.
  best_metric: key of metrics_fn's result to maximise; its best checkpoint is kept in
    output_dir/best. None: keep no best checkpoint.
  patience: stop after this many evaluations without a new best (None or 0: never).
"""


def _run_to_end(sess, iterator, outputs):
  """Runs `outputs` over one pass of `iterator`; returns dict name -> concatenated arrays."""
  sess.run(iterator.initializer)
  chunks = collections.defaultdict(list)
  while True:
    try:
      values = sess.run(outputs)
    except tf.errors.OutOfRangeError:
      break
    for name, value in values.items():
      chunks[name].append(value)
  return {name: np.concatenate(parts, axis=0) for name, parts in chunks.items()}


def _format_eta(seconds):
  seconds = int(max(0, seconds))
  return "%d:%02d:%02d" % (seconds // 3600, seconds // 60 % 60, seconds % 60)


class _Progress(object):
  """The progress line and TensorBoard scalars, every config.log_steps steps."""

  def __init__(self, config, writer):
    self.config = config
    self.writer = writer
    self.examples_per_step = config.global_batch_size
    self.restart()

  def restart(self):
    """Starts a new timing window (saving and evaluating are not training speed)."""
    self.start, self.steps, self.loss = time.time(), 0, 0.0

  def add(self, step, result):
    self.steps += 1
    self.loss += result["loss"]
    if step % self.config.log_steps and step != self.config.num_train_steps:
      return
    elapsed = max(time.time() - self.start, 1e-9)
    examples_per_sec = self.steps * self.examples_per_step / elapsed
    mean_loss = self.loss / self.steps
    tf.logging.info(
        "step %d/%d  loss %.4f  lr %.3g  grad_norm %.3f  examples/sec %.1f  ETA %s", step,
        self.config.num_train_steps, mean_loss, result["lr"], result["global_norm"],
        examples_per_sec,
        _format_eta(elapsed / self.steps * (self.config.num_train_steps - step)))
    if self.writer is not None:  # None on a worker that is not the chief
      _scalar_summary(self.writer, step, {
          "loss": mean_loss, "learning_rate": result["lr"],
          "examples_per_sec": examples_per_sec, "global_norm": result["global_norm"]})
    self.restart()


def _batches_consumed(sess, ops, config):
  """Micro-batches of training data that the run up to its current global_step consumed.

  global_step x accumulation_steps, except with fp16, whose skipped updates consumed their
  batches without moving global_step: there the loss scale counts the updates attempted.
  Read from the session (after the chief's variables reached every worker), so a worker
  that does not see the chief's checkpoint resumes at the same data position.
  """
  counter = ops.loss_scale.steps_attempted if ops.loss_scale is not None else ops.global_step
  return int(sess.run(counter)) * config.accumulation_steps


def _report_overflow(step, loss, scale, overflows_at_minimum_scale, last_path):
  """Logs an fp16 update skipped for overflowing gradients; raises when skipping cannot help.

  An overflow is not a divergence: the loss scale halves and the step is tried again on
  the next batch. Gradients that overflow twice with the scale at its minimum (1) are
  infinite unscaled: that is one.
  """
  tf.logging.info("step %d overflowed in fp16 (loss %s): update skipped, loss scale now %g",
                  step, loss, scale)
  if overflows_at_minimum_scale >= 2:
    raise TrainingDiverged(
        "The gradients are not finite at step %d even with the fp16 loss scale at 1; stopped "
        "without saving, so the last good checkpoint (%s) is intact. Lower --learning_rate, "
        "check the input data, or use --precision=bf16 or fp32." % (step, last_path or "none"))


def training_finished(config):
  """True when output_dir already holds a checkpoint at config.num_train_steps or later."""
  latest = tf.train.latest_checkpoint(config.output_dir)
  if latest and checkpoint_global_step(latest) >= config.num_train_steps:
    tf.logging.info("%s is already at step %d of %d: nothing to train.", latest,
                    checkpoint_global_step(latest), config.num_train_steps)
    return True
  return False


class WorkerLost(UsageError):
  """Another worker of a multi-worker run died or cannot be reached."""


def _chief_start_state(config, eval_spec):
  """On the chief: (latest checkpoint, _BestCheckpoint or None, whether training is over:
  the plan's last step is reached, or early stopping ended it)."""
  tf.gfile.MakeDirs(config.output_dir)
  latest = tf.train.latest_checkpoint(config.output_dir)
  if training_finished(config):
    return latest, None, True
  best = None
  if eval_spec is not None and eval_spec.best_metric:
    best = _BestCheckpoint(config.output_dir, eval_spec.best_metric, resuming=latest is not None)
    if eval_spec.patience and best.evals_since_best >= eval_spec.patience:
      tf.logging.info("%s stopped early (no better %s in %d evaluations): nothing to train.",
                      config.output_dir, best.metric, best.evals_since_best)
      return latest, best, True
  return latest, best, False


@contextlib.contextmanager
def _training_session(config, plan):
  """The session of the training graph: a local one, or for several workers one on this
  worker's tf.train.Server once every peer is up, watched by a cluster.PeerWatchdog (None
  for one process)."""
  if config.cluster is None:
    with tf.Session(config=plan.session_config()) as sess:
      yield sess, None
    return
  try:
    server = cluster.start_server(config.cluster, plan.session_config())
    tf.logging.info("Worker %d of %d serving at %s; waiting for the others.",
                    config.cluster.task_index, config.num_workers,
                    config.cluster.worker_hosts[config.cluster.task_index])
    cluster.wait_for_peers(config.cluster, config.worker_startup_timeout_secs)
  except cluster.ClusterError as e:
    raise UsageError(str(e))
  sess = tf.Session(server.target, config=plan.session_config())
  with cluster.PeerWatchdog(config.cluster, config.worker_timeout_secs) as watchdog:
    yield sess, watchdog
  if tf.__version__.startswith("1."):
    # TF 1.15's close waits forever for a peer that has left (docs/FORMATS.md 9): the
    # session stays open until the process exits, which does not wait.
    _SESSIONS_LEFT_OPEN.append(sess)
  else:
    sess.close()


# Training sessions that must not be closed (nor garbage-collected, which closes them).
_SESSIONS_LEFT_OPEN = []


def _worker_lost(error, watchdog):
  """The one-line WorkerLost for a collective that failed because a peer went away (TF 2.x
  raises; on TF 1.15 the collective waits and the watchdog ends the process instead)."""
  peer = watchdog.unreachable_peer(within_secs=min(10, watchdog.timeout_secs))
  if peer is None:
    # TF names the peer it lost, e.g. "... remote target /job:worker/replica:0/task:1 ...".
    match = re.search(r"/job:worker/replica:0/task:(\d+)", str(error))
    if match and int(match.group(1)) != watchdog.cluster.task_index:
      peer = int(match.group(1))
  first_line = str(error).strip().split("\n")[0].replace("Graph execution error:", "").strip()
  what = ("%s cannot be reached: it stopped or its machine is down" %
          watchdog.cluster.describe(peer) if peer is not None else
          "the all-reduce between workers failed (%s: %s)" % (type(error).__name__,
                                                               first_line[:200]))
  return WorkerLost("%s (this worker was at step %s). Stop every worker and start them all "
                    "again with the same command; training resumes from the chief's last "
                    "checkpoint." % (what, watchdog.step))


# The settings every worker must share, in the order build_worker_check gets them.
_WORKER_SETTINGS = ("num_train_steps", "save_checkpoints_steps", "accumulation_steps",
                    "train_batch_size", "num_towers", "micro_batch_size", "random_seed")


def _check_worker_settings(run, check, config):
  """Raises UsageError when the workers do not share the settings that pair up their
  collectives (different flags or data would make them wait on each other forever)."""
  values, chief_values, differing = check
  mine = [int(getattr(config, name) or 0) for name in _WORKER_SETTINGS]
  chief, counts = run([chief_values, differing], {values: mine})
  for name, own, chiefs, count in zip(_WORKER_SETTINGS, mine, chief, counts):
    if count:
      where = ("the chief has %d, this worker %d" % (chiefs, own) if own != chiefs else
               "the chief has %d, %d other worker(s) differ" % (chiefs, count))
      raise UsageError("the workers disagree on %s (%s): start every worker with the same "
                       "flags, --n_gpus and data." % (name, where))


def train(config, model_fn, make_train_dataset, eval_spec=None):
  """Trains on every tower until global_step == config.num_train_steps; resumes where it
  stopped.

  If output_dir holds a checkpoint, training resumes from it (global step, optimizer slots and
  so the learning-rate schedule) and skips the batches it already trained on; the
  init_checkpoint is used only when it does not. A checkpoint is written every
  save_checkpoints_steps and at the end; with eval_spec, the dev set is evaluated at each one.
  SIGTERM or Ctrl-C stops after the current step with a checkpoint that is not evaluated.

  With several workers, every worker calls this with the same config. The chief restores or
  initialises, and its variables reach every replica before the first step; it alone
  saves, evaluates and writes summaries. All workers stop at the same step, whether the
  plan ends, the chief stops early or any of them gets a signal.

  Args:
    config: RunConfig.
    model_fn: function(features, is_training) -> dict with "loss" and per-example outputs.
    make_train_dataset: function(skip_batches) -> tf.data.Dataset of micro-batches of
      config.micro_batch_size that first skips `skip_batches` (an int64 scalar tensor) of
      them.
    eval_spec: EvalSpec or None (used on the chief only).

  Returns:
    Path of the last checkpoint (None on a worker that is not the chief).

  Raises:
    TrainingDiverged: non-finite loss; the last good checkpoint is left as it was.
    Preempted: stopped by a signal after saving a checkpoint.
    WorkerLost: another worker died or cannot be reached.
  """
  output_dir = config.output_dir
  latest, best, finished = None, None, False
  if config.is_chief:
    latest, best, finished = _chief_start_state(config, eval_spec)
    if finished and config.cluster is None:
      return latest
  else:
    eval_spec = None
  start_step = checkpoint_global_step(latest) if latest else 0
  for line in config.describe_training():
    tf.logging.info("Training: %s", line)
  plan = config.plan()

  graph = tf.Graph()
  with graph.as_default(), tf.device(plan.worker_device() if config.cluster else None):
    # First, so that its collective key does not depend on what it checks.
    worker_check = multigpu.build_worker_check(plan, len(_WORKER_SETTINGS))
    if config.random_seed is not None:
      tf.set_random_seed(config.random_seed)
    skip_batches = tf.placeholder(tf.int64, [], name="skip_batches")
    train_iterator = tf.data.make_initializable_iterator(make_train_dataset(skip_batches))
    features = multigpu.worker_slice(train_iterator.get_next(), plan)
    if config.random_seed is not None and config.cluster is not None:
      # Every worker reads the same shuffled batches (the seed above), but draws its own
      # dropout masks, as the towers of one process do; initial values come from the chief.
      tf.set_random_seed(config.random_seed + config.cluster.task_index)
    ops = multigpu.build_training(
        plan, model_fn, features, init_lr=config.learning_rate,
        num_train_steps=config.num_train_steps, num_warmup_steps=config.num_warmup_steps,
        optimizer_name=config.optimizer, accumulation_steps=config.accumulation_steps,
        precision=config.precision, use_xla=config.use_xla)
    start_sync = multigpu.build_start_sync(plan)
    vote, votes = multigpu.build_worker_vote(plan)
    if eval_spec is not None:
      eval_iterator = tf.data.make_initializable_iterator(eval_spec.make_dataset())
      eval_outputs = multigpu.build_inference(plan, model_fn, eval_iterator.get_next(),
                                              config.global_eval_batch_size, config.precision,
                                              config.use_xla)
    if not config.is_chief:
      tf.logging.info("Worker %d starts from the chief's variables.", config.cluster.task_index)
    elif latest:
      tf.logging.info("Resuming from %s (step %d of %d); the init checkpoint is not used.",
                      latest, start_step, config.num_train_steps)
    elif config.init_checkpoint:
      missing = init_from_checkpoint(config.init_checkpoint)
      tf.logging.info("Initialised from --init_checkpoint=%s; not in it, so freshly "
                      "initialised: %s", config.init_checkpoint, ", ".join(missing) or "nothing")
    else:
      tf.logging.info("No checkpoint in %s and no --init_checkpoint: training from scratch.",
                      output_dir)
    # Replica 0's variables: Google's plain names, whatever --variable_update.
    saver = tf.train.Saver(multigpu.saveable_variables(), max_to_keep=config.keep_checkpoint_max,
                           save_relative_paths=True)
    global_init = tf.global_variables_initializer()
    local_init = tf.local_variables_initializer()
    graph.finalize()

    with _training_session(config, plan) as (sess, watchdog), _StopSignals() as stop:

      def run_collective(fetches, feed_dict=None):
        """sess.run of ops that wait on other workers: a lost peer becomes one line."""
        try:
          return sess.run(fetches, feed_dict)
        except tf.errors.OpError as e:
          if watchdog is None:
            raise
          raise _worker_lost(e, watchdog)

      if watchdog is not None:
        _check_worker_settings(run_collective, worker_check, config)
      if latest:
        saver.restore(sess, latest)
        # Lets keep_checkpoint_max delete the checkpoints written before the restart too.
        saver.recover_last_checkpoints(
            tf.train.get_checkpoint_state(output_dir).all_model_checkpoint_paths)
      else:
        sess.run(global_init)
      sess.run(local_init)
      if start_sync is not None:
        run_collective(start_sync)
      if run_collective(votes, {vote: float(finished)}):
        return latest  # the chief found nothing to train (several workers)
      step = int(sess.run(ops.global_step))  # the chief's, on every worker
      sess.run(train_iterator.initializer, {skip_batches: _batches_consumed(sess, ops, config)})
      writer = eval_writer = None
      if config.is_chief:
        writer = tf.summary.FileWriter(output_dir)
        if eval_spec:
          eval_writer = tf.summary.FileWriter(os.path.join(output_dir, "eval"))
      progress = _Progress(config, writer)

      def save(step):
        path = saver.save(sess, os.path.join(output_dir, "model.ckpt"), global_step=step,
                          write_meta_graph=False)
        tf.logging.info("Saved %s", path)
        return path

      def evaluate_checkpoint(step, path):
        """Evaluates the dev set; returns True when early stopping says stop."""
        metrics = eval_spec.metrics_fn(_run_to_end(sess, eval_iterator, eval_outputs))
        _scalar_summary(eval_writer, step, metrics)
        tf.logging.info("eval at step %d: %s", step, "  ".join(
            "%s = %.4f" % kv for kv in sorted(metrics.items())))
        if best is None:
          return False
        if best.update(path, metrics):
          tf.logging.info("New best %s = %.4f, kept in %s", best.metric, best.best,
                          best.directory)
        if eval_spec.patience and best.evals_since_best >= eval_spec.patience:
          tf.logging.info("Early stopping: no better %s in %d evaluations.", best.metric,
                          best.evals_since_best)
          return True
        return False

      last_path, saved_step, early_stopped, stop_agreed = latest, step, False, False
      fetches = {"train_op": ops.train_op, "loss": ops.update_loss, "lr": ops.learning_rate,
                 "global_norm": ops.global_norm, "stop": ops.stop_agreed}
      overflows_at_minimum_scale = 0
      # What the messages call the last good checkpoint before this run saved one.
      no_checkpoint = "none" if config.is_chief else "the chief's latest"

      def stopping():
        # Alone, a signal stops at once; workers stop together, after the step that carried
        # the request to all of them.
        return stop_agreed or (config.cluster is None and stop.signum is not None)

      while step < config.num_train_steps and not stopping():
        if watchdog is not None:
          watchdog.step = step + 1
        for _ in range(config.accumulation_steps if ops.accumulate_op is not None else 0):
          sess.run(ops.accumulate_op)
        result = run_collective(fetches, {ops.stop_request: float(stop.signum is not None)})
        stop_agreed = result["stop"] > 0
        if ops.loss_scale is not None and not np.isfinite(result["global_norm"]):
          # Skipped: global_step did not move, the loss scale halved (read after the update).
          scale = float(sess.run(ops.loss_scale.scale))
          overflows_at_minimum_scale = overflows_at_minimum_scale + 1 if scale <= 1.0 else 0
          _report_overflow(step + 1, result["loss"], scale, overflows_at_minimum_scale,
                           last_path or no_checkpoint)
          continue
        overflows_at_minimum_scale = 0
        step += 1
        # A non-finite gradient norm means this update wrote NaN/inf into the weights.
        if not (np.isfinite(result["loss"]) and np.isfinite(result["global_norm"])):
          raise TrainingDiverged(
              "The training loss is %s and the gradient norm %s at step %d; stopped without "
              "saving, so the last good checkpoint (%s) is intact. Lower --learning_rate or "
              "check the input data." %
              (result["loss"], result["global_norm"], step, last_path or no_checkpoint))
        progress.add(step, result)
        if step % config.save_checkpoints_steps == 0 or step == config.num_train_steps:
          if config.is_chief:
            last_path, saved_step = save(step), step
            early_stopped = eval_spec is not None and evaluate_checkpoint(step, last_path)
          # The chief's verdict reaches every worker (they wait here while it evaluates).
          early_stopped = bool(run_collective(votes, {vote: float(early_stopped)}))
          if early_stopped:
            break
          progress.restart()
      if watchdog is not None:
        watchdog.stop()  # no collective from here on: peers may leave
      if stopping() and saved_step != step and config.is_chief:
        # Not an evaluation: best/ and the early-stopping count are left as they are.
        last_path = save(step)
      for summary_writer in (writer, eval_writer):
        if summary_writer:
          summary_writer.close()
  if stop_agreed or stop.signum is not None:
    _raise_preempted(config, stop.signum, step, last_path, early_stopped)
  return last_path


def _raise_preempted(config, signum, step, last_path, early_stopped):
  """Ends a run stopped by a signal (to this worker or, with several workers, another)."""
  where = ("saved %s" % last_path if config.is_chief else
           "the chief saved the checkpoint")
  if signum is None:
    signum = signal.SIGTERM
    cause = "another worker's signal"
  else:
    cause = _signal_name(signum)
  if step < config.num_train_steps and not early_stopped:
    raise Preempted(signum, "Stopped by %s at step %d of %d; %s. Run the same command again "
                    "to resume from it." % (cause, step, config.num_train_steps, where))
  # Also when training had just ended: the signal asked the whole run to stop, so the
  # evaluation and prediction after training are left to the rerun.
  raise Preempted(signum, "Stopped by %s after training ended (step %d); %s. Run the same "
                  "command again to evaluate and predict." % (cause, step, where))


def infer(config, model_fn, make_dataset, batch_size, checkpoint_path):
  """Runs the model (is_training=False) over one pass of a dataset on every tower.

  Args:
    config: RunConfig (for the device plan).
    model_fn: function(features, is_training) -> dict of per-example outputs.
    make_dataset: function() -> tf.data.Dataset in global batches of `batch_size`.
    batch_size: its batch size over all towers.
    checkpoint_path: the weights to use.

  Returns:
    dict name -> np.ndarray [num_examples, ...], in input order.

  Raises:
    UsageError: the checkpoint lacks variables of this model (another task's checkpoint).
  """
  plan = config.plan().for_inference()
  graph = tf.Graph()
  with graph.as_default():
    iterator = tf.data.make_initializable_iterator(make_dataset())
    outputs = multigpu.build_inference(plan, model_fn, iterator.get_next(), batch_size,
                                       config.precision, config.use_xla)
    saved = tf.train.load_checkpoint(checkpoint_path).get_variable_to_shape_map()
    missing = [v.op.name for v in tf.global_variables() if v.op.name not in saved]
    if missing:
      raise UsageError(
          "%s lacks %d of this model's variables (%s): it is not a model trained for this task. "
          "Evaluate or predict with a checkpoint from --do_train." %
          (checkpoint_path, len(missing), ", ".join(missing[:3] + ["..."] * (len(missing) > 3))))
    saver = tf.train.Saver(tf.global_variables())
    graph.finalize()
    with tf.Session(config=plan.session_config()) as sess:
      saver.restore(sess, checkpoint_path)
      return _run_to_end(sess, iterator, outputs)


def evaluate(config, model_fn, make_dataset, checkpoint, metrics_fn):
  """The evaluation tail: infers the eval set, scores it and writes eval_results.txt.

  Args:
    config: RunConfig; the dataset comes in global batches of config.global_eval_batch_size.
    model_fn, make_dataset: as for infer().
    checkpoint: the weights to evaluate.
    metrics_fn: function(per-example outputs) -> dict name -> number.

  Returns:
    (metrics with global_step, the per-example outputs).
  """
  outputs = infer(config, model_fn, make_dataset, config.global_eval_batch_size, checkpoint)
  metrics = metrics_fn(outputs)
  write_eval_results(config.output_dir, metrics, checkpoint)
  return metrics, outputs


# ---------------------------------------------------------------------------
# main()
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
  flag_values = flag_values or tf.flags.FLAGS
  if flag_values is tf.flags.FLAGS:
    # --help, --helpshort and --helpfull are defined by absl's app.run, which runs later.
    absl_app.define_help_flags()
  try:
    leftover = flag_values(list(argv))
  except tf.flags.Error as e:
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


def run_main(main, argv=None):
  """Runs `main(argv)` under tf.app.run with strict flags, and turns failures into one line.

  A UsageError prints `error: <message>` and exits 1; a preemption prints where it saved
  and exits 128 + the signal (143 for SIGTERM, 130 for Ctrl-C); a Ctrl-C outside training
  exits 130 with no traceback.
  """
  argv = list(sys.argv if argv is None else argv)

  def fail(message, code):
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    sys.exit(code)

  def guarded(args):
    try:
      main(args)
    except UsageError as e:
      fail("error: %s" % e, 1)
    except Preempted as e:
      fail(str(e), 128 + e.signum)
    except KeyboardInterrupt:
      fail("Interrupted (Ctrl-C).", 128 + signal.SIGINT)

  tf.logging.set_verbosity(tf.logging.INFO)
  # TF 2.x hands each record to absl and to Python's root logger: print it once.
  tf.get_logger().propagate = False
  try:
    check_command_line(argv)
  except UsageError as e:
    fail("error: %s" % e, 1)
  tf.app.run(guarded, argv=argv)
