# coding=utf-8
"""The command line every run script shares: flags, their checks, and main(). With
command_line_base.py, the only modules of the package that read flags (`FLAGS`); everything
else takes the settings built here.

- define_shared_flags(): Google's flags a script picks (with Google's names and defaults),
  the device flags (define_device_flags(), also for fill_mask.py and extract_features.py;
  predict_text.py takes command_line_base's) and the runner's own.
- job_settings(), device_settings(), run_cluster(): the run_settings objects of the flags.
- check_run_flags(), check_actions(), export_only(), refuse_unread_flags(),
  check_positive(), output_directory(): the checks that need no file but the init
  checkpoint; then run_settings.make_run_config() makes the device check. All run before
  anything is written.
- run_main(): strict parsing (a misspelt flag is an error, not ignored), and one line on
  stderr for a UsageError or a preemption instead of a traceback.

What needs no TensorFlow (the strict parsing and run_main's one-line failures, the inference
device flags) is command_line_base.py, which predict_text.py --backend=onnxruntime uses
alone. The model files (bert_config.json, vocab.txt) are loaded and checked by
bert_mgpu/bert_files.py, which takes values, not flags.
"""

import collections
import os

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu import command_line_base
from bert_mgpu.command_line_base import check_positive, flag_value  # the scripts' too
from bert_mgpu.distillation import options as distillation_flags
from bert_mgpu.distributed import cluster
from bert_mgpu.errors import UsageError
from bert_mgpu.serving import onnx_export
from bert_mgpu.training import adversarial
from bert_mgpu.training import layerwise_lr
from bert_mgpu.training import rdrop
from bert_mgpu.training import run_settings
from bert_mgpu.training import weight_averages
import modeling
import multigpu
import optimization
import tokenization

FLAGS = tf.flags.FLAGS

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
    ("group_by_length", ("bool", False, "Draw each global batch from training examples of "
                         "similar length (sorted within chunks of 50 batches of the shuffled "
                         "data, the batches' order shuffled): less padding on long-tailed "
                         "texts. Every example still comes once per epoch.")),
])


def define_shared_flags(names, training=True, **defaults):
  """Defines the shared flags `names` (with `defaults` overriding theirs), the device
  flags and the runner's.

  Called from a script's define_flags(), which runs only under __main__, so that the
  modules can be imported together (a flag may be defined once per process).

  The runner's flags are the multi-GPU ones and Google's TPU flags; the TPU flags are
  accepted so that users' command lines parse, and --use_tpu=true is refused. With
  training=False (extract_features.py) only the TPU flags, the inference device flags and
  --log_steps: a script that trains nothing takes no optimizer, worker or checkpoint flag.
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
  define_device_flags(training=training)
  flags.DEFINE_integer("log_steps", 100, "Log progress every this many steps.")
  if not training:
    return
  flags.DEFINE_integer("random_seed", 12345, "Seed for initialisation, shuffling and dropout.")
  flags.DEFINE_enum("optimizer", "adamw", ["adamw", "radam", "lamb"], "The optimizer.")
  flags.DEFINE_bool("adam_bias_correction", False, "With --optimizer=adamw: correct the bias "
                    "of Adam's moments, as torch.optim.AdamW does (Google's AdamWeightDecay, "
                    "the default, does not). Use it with --initializer=normal when training "
                    "from random weights (docs/TRAINING.md).")
  flags.DEFINE_enum("initializer", "truncated_normal", list(modeling.INITIALIZERS),
                    "Distribution of the weights that no checkpoint gives (all of them when "
                    "training from scratch, else the task head): Google's truncated normal "
                    "(stddev initializer_range, cut at 2 stddev), or 'normal': the untruncated "
                    "normal and a zero [PAD] embedding row, as transformers' BERT starts "
                    "(docs/PERFORMANCE.md: training from random weights).")
  flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints to keep in output_dir (0: all).")
  flags.DEFINE_integer("accumulation_steps", 1, "Micro-batches whose gradients are averaged "
                       "into one update.")
  flags.DEFINE_bool("allow_changed_training_flags", False, "Resume an output_dir with flags "
                    "that change how it trains (learning rate, batch, techniques...: its "
                    "training_flags.json); each change is logged and the new values are "
                    "recorded. Without it such a resume is refused (docs/TRAINING.md).")

def define_device_flags(training=False):
  """Defines the flags of run_settings.DeviceSettings: towers, precision, XLA, padding
  (command_line_base.define_device_flags).

  Args:
    training: also the flags only training has: where the variables live and how
      gradients meet, and the workers of a multi-worker run.
  """
  flags = tf.flags
  command_line_base.define_device_flags()
  if not training:
    return
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


# ---------------------------------------------------------------------------
# Settings objects from the flags (the package takes these, never the flags)
# ---------------------------------------------------------------------------

def run_cluster(flag_values=None):
  """The cluster.Cluster of a multi-worker run (--worker_hosts or TF_CONFIG), else None.

  Raises:
    UsageError: the worker flags are malformed.
  """
  flag_values = FLAGS if flag_values is None else flag_values
  if "worker_hosts" not in flag_values:
    return None
  try:
    return cluster.cluster_from_flags(flag_values.worker_hosts, flag_values.task_index)
  except cluster.ClusterError as e:
    raise UsageError(str(e))


def device_settings(training=False, flag_values=None):
  """The DeviceSettings of the device flags a script defines (the others keep their
  defaults). Not yet checked: call check() before writing anything.

  Args:
    training: whether this run trains; only training runs on several workers.

  Raises:
    UsageError: malformed worker flags, or several workers for a run that does not train.
  """
  flag_values = FLAGS if flag_values is None else flag_values
  names = ("n_gpus", "towers_per_gpu", "variable_update", "variables_on_gpu", "precision",
           "use_xla", "pad_to_max_seq_length")
  fields = {name: getattr(flag_values, name) for name in names if name in flag_values}
  workers = run_cluster(flag_values)
  if workers is not None and not training:
    raise UsageError("--worker_hosts (or TF_CONFIG) is for training (--do_train): evaluate, "
                     "predict and extract with one process (unset TF_CONFIG if it is set "
                     "for another job).")
  return run_settings.DeviceSettings(cluster=workers, **fields)


# The flags whose values decide a run's updates or the order of its data: its first run
# records them in output_dir, and a resume that changes one is refused
# (bert_mgpu/training/training_flags.py). Each script records those it defines. Not here:
# how long to train (the end step is recorded apart), the cadences, devices that change no
# arithmetic (--variable_update, XLA), and the start (--init_checkpoint, --initializer,
# --init_from_teacher_layers), which a resume does not read. Paths are recorded only as set
# or not (_SWITCHES): a user may move data, and distillation identifies its teacher by the
# checkpoint's contents (teacher.check_resumed_student).
TRAINING_FLAGS = (
    # The optimizer, its corrections, the schedule, precision (and so loss scaling).
    "optimizer", "adam_bias_correction", "learning_rate", "warmup_proportion",
    "num_warmup_steps", "precision",
    # The fine-tuning techniques.
    "ema_decay", "ema_bias_correction", "ema_warmup", "layerwise_lr_decay", "adversarial",
    "adversarial_epsilon", "adversarial_alpha", "adversarial_steps", "rdrop_alpha",
    "teacher_dir", "unlabeled_file", "distill_temperature", "distill_alpha",
    # The batch and the data order (the workers are recorded by count).
    "train_batch_size", "n_gpus", "towers_per_gpu", "accumulation_steps", "group_by_length",
    "group_by_length_within_label", "random_seed", "max_seq_length",
    # The tasks' data settings.
    "task_name", "do_lower_case", "literal_special_tokens", "multi_label", "label_separator",
    "long_text", "head_tokens", "doc_stride", "max_windows", "window_pooling", "data_format",
    "ner_head", "use_crf", "max_query_length", "version_2_with_negative",
    "max_predictions_per_seq", "loss", "cosent_scale", "temperature", "positive_threshold",
    "hard_negatives", "pooling",
)
# Path flags that switch a technique on: recorded as whether they are set.
_SWITCHES = ("teacher_dir", "unlabeled_file")
# Flags that do nothing while another is off, by that flag and its off value: left out
# then, so that changing them needs no override.
_DEPENDENT_FLAGS = {
    "ema_bias_correction": ("ema_decay", 0.0),
    "ema_warmup": ("ema_decay", 0.0),
    "adversarial_epsilon": ("adversarial", "none"),
    "adversarial_alpha": ("adversarial", "none"),
    "adversarial_steps": ("adversarial", "none"),
    "distill_temperature": ("teacher_dir", None),
    "distill_alpha": ("teacher_dir", None),
    "unlabeled_file": ("teacher_dir", None),
    "label_separator": ("multi_label", False),
}
# Flags read only under some values of another (the embedding losses' settings): left out
# under the others.
_READ_ONLY_WITH = {
    "cosent_scale": ("loss", ("cosent",)),
    "temperature": ("loss", ("in_batch",)),
    "positive_threshold": ("loss", ("in_batch",)),
    "hard_negatives": ("loss", ("in_batch",)),
}
SWITCH_SET = "(set)"


def training_flags(flag_values=None):
  """The TRAINING_FLAGS the script defines, by name, with their values (JSON types): a
  _SWITCHES path as SWITCH_SET or None, no flag whose _DEPENDENT_FLAGS parent is off nor
  any _READ_ONLY_WITH flag under another value of its parent."""
  flag_values = FLAGS if flag_values is None else flag_values
  values = collections.OrderedDict()
  for name in TRAINING_FLAGS:
    if name not in flag_values:
      continue
    parent, off = _DEPENDENT_FLAGS.get(name, (None, None))
    if parent is not None and parent in flag_values and (
        getattr(flag_values, parent) or None) == (off or None):
      continue
    parent, used_with = _READ_ONLY_WITH.get(name, (None, ()))
    if parent is not None and parent in flag_values and (
        getattr(flag_values, parent) not in used_with):
      continue
    value = getattr(flag_values, name)
    values[name] = (SWITCH_SET if value else None) if name in _SWITCHES else value
  return values


def job_settings(flag_values=None):
  """The run_settings.JobSettings of the flags a run script defines (the others keep their
  defaults). Not yet checked: make_run_config() makes the device check."""
  flag_values = FLAGS if flag_values is None else flag_values
  do_train = bool(flag_value(flag_values, "do_train"))
  fields = {name: getattr(flag_values, name) for name in list(run_settings.RUN_DEFAULTS) + [
      "num_train_epochs", "warmup_proportion", "num_train_steps", "num_warmup_steps"]
            if name in flag_values}
  fields["attack"] = attack(flag_values)
  if "ema_warmup" in flag_values and not flag_values["ema_warmup"].present:
    fields["ema_warmup"] = None  # the default for a new run, the checkpoint's rule on resume
  if do_train:
    fields["training_flags"] = training_flags(flag_values)
  return run_settings.JobSettings(flag_value(flag_values, "output_dir"), do_train,
                                  device_settings(do_train, flag_values), **fields)


def attack(flag_values=None):
  """The adversarial.Attack of the --adversarial flags (None: off, or a script without
  them). Raises UsageError for a value out of range."""
  flag_values = FLAGS if flag_values is None else flag_values
  if "adversarial" not in flag_values:
    return None
  return adversarial.make_attack(flag_values.adversarial, flag_values.adversarial_epsilon,
                                 flag_values.adversarial_alpha, flag_values.adversarial_steps)


def check_run_flags(positive_flag_names=(), flag_values=None):
  """Checks the flags every run script shares, before any work. Raises UsageError.

  Args:
    positive_flag_names: the script's own integer flags that must be at least 1.
    flag_values: the flags (tests pass their own), by default tf.flags.FLAGS.
  """
  flag_values = FLAGS if flag_values is None else flag_values
  if flag_value(flag_values, "use_tpu"):
    raise UsageError("--use_tpu=true: bert-mgpu does not run on TPUs. Drop --use_tpu and set "
                     "--n_gpus to the GPUs to use.")
  check_positive(positive_flag_names, flag_values)
  learning_rate = flag_value(flag_values, "learning_rate")
  if learning_rate is not None and not (np.isfinite(learning_rate) and learning_rate > 0):
    raise UsageError("--learning_rate=%s: it must be a positive number, e.g. 5e-5." %
                     learning_rate)
  epochs = flag_value(flag_values, "num_train_epochs")
  if epochs is not None and not (np.isfinite(epochs) and epochs > 0):
    raise UsageError("--num_train_epochs=%s: it must be a positive number." % epochs)
  optimizer = flag_value(flag_values, "optimizer")
  if flag_value(flag_values, "adam_bias_correction") and optimizer != "adamw":
    raise UsageError(optimization.ADAM_BIAS_CORRECTION_ONLY_ADAMW % optimizer)
  decay = flag_value(flag_values, "layerwise_lr_decay")
  if decay is not None:
    layerwise_lr.check_decay(decay)
  ema_decay = flag_value(flag_values, "ema_decay")
  if ema_decay is not None:
    weight_averages.check_decay(ema_decay)
  attack(flag_values)
  rdrop_alpha = flag_value(flag_values, "rdrop_alpha")
  if rdrop_alpha is not None:
    rdrop.check_alpha(rdrop_alpha)
  warmup = flag_value(flag_values, "warmup_proportion")
  if warmup is not None and not 0 <= warmup <= 1:
    raise UsageError("--warmup_proportion=%s: it is a share of the training steps, from 0 "
                     "to 1 (e.g. 0.1)." % warmup)
  if flag_value(flag_values, "keep_checkpoint_max", 0) < 0:
    raise UsageError("--keep_checkpoint_max=%d: use 0 (keep all) or more." %
                     flag_values.keep_checkpoint_max)
  if "output_dir" in flag_values and not flag_values.output_dir:
    raise UsageError("--output_dir is required.")
  workers = run_cluster(flag_values)
  if workers is not None and not workers.is_chief:
    return  # a non-chief worker reads neither output_dir nor the init checkpoint
  if "output_dir" in flag_values:
    _check_output_dir(flag_values.output_dir)
  _check_init_checkpoint(flag_values)


def _check_output_dir(output_dir):
  if "://" in output_dir:
    raise UsageError("--output_dir=%s: give a local directory. The atomic writes and the "
                     "run lock need a local file system; copy the directory to %s after the "
                     "run." % (output_dir, output_dir.split("://")[0] + "://..."))
  if tf.gfile.Exists(output_dir) and not tf.gfile.IsDirectory(output_dir):
    raise UsageError("--output_dir=%s is a file, not a directory: give a directory path." %
                     output_dir)


def _check_init_checkpoint(flag_values):
  init_checkpoint = flag_value(flag_values, "init_checkpoint")
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


def define_fine_tuning_flags():
  """The fine-tuning techniques that run_classifier_mgpu.py, run_ner_mgpu.py and
  run_embedding_mgpu.py (which refuses the per-tower ones: --adversarial, --rdrop_alpha) add
  to the runner's training (docs/TRAINING.md)."""
  tf.flags.DEFINE_float("layerwise_lr_decay", 1.0, "Layer-wise learning-rate decay d in "
                        "(0, 1]: the head and pooler train at the learning rate, encoder layer "
                        "i of L at d^(L-i) times it, the embeddings at d^(L+1) times it "
                        "(1.0: one rate for all).")
  tf.flags.DEFINE_float("ema_decay", 0.0, "Keep an exponential moving average of the "
                        "weights with decay D in [0, 1) (e.g. 0.999), updated after each "
                        "step; dev evaluation, best/, predictions, exports and conversions "
                        "use it, checkpoints keep both (0: none).")
  tf.flags.DEFINE_bool("ema_bias_correction", True, "Correct the weight averages' bias "
                       "towards the starting weights: update t moves them by "
                       "(1 - D) / (1 - D^t), so they average the weights after each update "
                       "(bert4keras's default). false: by 1 - D from the starting weights, "
                       "the rule before it.")
  tf.flags.DEFINE_bool("ema_warmup", True, "Warm the weight averages' decay up as "
                       "tf.train.ExponentialMovingAverage(num_updates=t) does: update t uses "
                       "min(D, (1 + t) / (10 + t)), so a short run averages only its last "
                       "updates (about t / 10 of them) (docs/TRAINING.md). A resume keeps "
                       "its checkpoint's choice unless this is given.")
  tf.flags.DEFINE_enum("adversarial", "none", list(adversarial.METHODS), "Adversarial "
                       "training on the token-embedding table, its step taken from the whole "
                       "global batch's gradient: fgm (one more forward and backward pass per "
                       "batch) or pgd (--adversarial_steps more).")
  tf.flags.DEFINE_float("adversarial_epsilon", 1.0, "FGM's step and PGD's radius (the "
                        "perturbation's norm over the whole table).")
  tf.flags.DEFINE_float("adversarial_alpha", 0.3, "PGD's step, at most "
                        "--adversarial_epsilon.")
  tf.flags.DEFINE_integer("adversarial_steps", 3, "PGD's steps.")
  tf.flags.DEFINE_float("rdrop_alpha", 0.0, "R-Drop: two forward passes per batch with "
                        "independent dropout, their cross-entropies averaged, plus alpha/4 "
                        "times their symmetric KL divergence (the paper's alpha; 0: off).")


def distillation_options(flag_values=None):
  """The distillation.options.DistillationOptions of the flags, checked before any work
  (several workers refused: the teacher's outputs are computed on one machine's towers).
  Raises UsageError."""
  flag_values = FLAGS if flag_values is None else flag_values
  options = distillation_flags.from_flags(flag_values)
  if options.distills and run_cluster(flag_values) is not None:
    raise UsageError("--teacher_dir with several workers: distillation runs on one machine's "
                     "GPUs for now; drop --worker_hosts (and TF_CONFIG).")
  return options


def define_export_flags(what):
  """--export_dir, --export_format and --onnx_int8 of a script that exports `what`."""
  flags = tf.flags
  flags.DEFINE_string("export_dir", None, "Export the trained %s into the next numbered "
                      "version directory here (TF Serving's layout); alone, it exports the "
                      "model in --output_dir and needs no --data_dir." % what)
  flags.DEFINE_enum("export_format", "savedmodel", list(onnx_export.EXPORT_FORMATS),
                    "What --export_dir gets: a SavedModel, model.onnx (TF 2.x, the [onnx] "
                    "extra), or both (docs/SERVING.md).")
  flags.DEFINE_bool("onnx_int8", False, "With --export_format=onnx or both: also "
                    "model.int8.onnx, its weights quantized to int8.")


def export_format(flag_values=None):
  """The onnx_export.ExportFormat of --export_format and --onnx_int8, checked before any
  work. Raises UsageError."""
  flag_values = FLAGS if flag_values is None else flag_values
  onnx_export.check_export_format(flag_values.export_format, flag_values.onnx_int8)
  if not flag_values.export_dir and (flag_values["export_format"].present or
                                     flag_values.onnx_int8):
    raise UsageError("--export_format and --onnx_int8 say what --export_dir gets: add "
                     "--export_dir.")
  return onnx_export.ExportFormat(flag_values.export_format, flag_values.onnx_int8)


def export_job_settings(flag_values=None):
  """The run_settings.JobSettings of an export-only run: its output_dir alone (no devices
  or cluster are read: the export runs in this process, on its CPU)."""
  flag_values = FLAGS if flag_values is None else flag_values
  return run_settings.JobSettings(flag_value(flag_values, "output_dir"))


def export_only(flag_values=None, other_actions=()):
  """True when a run only exports a trained output_dir (--export_dir and no --do_* nor any
  of the script's `other_actions`, e.g. run_embedding_mgpu.py's --embed_file)."""
  flag_values = FLAGS if flag_values is None else flag_values
  return bool(flag_value(flag_values, "export_dir")) and not (
      flag_values.do_train or flag_value(flag_values, "do_eval") or flag_values.do_predict
      or any(flag_value(flag_values, name) for name in other_actions))


def run_or_export(task_class, settings, flag_values=None, other_actions=()):
  """main()'s last step in a script with --export_dir: the task's job (job.run_job, which
  exports at the end with --export_dir), or, when the run only exports (export_only), the
  export of its trained output_dir alone, with no data read and no device set up.

  Args:
    task_class: the script's job.Task subclass, made with (JobSettings, settings).
    settings: the task's settings object.
  """
  from bert_mgpu.training import job  # pylint: disable=import-outside-toplevel
  flag_values = FLAGS if flag_values is None else flag_values
  if export_only(flag_values, other_actions):
    task_class(export_job_settings(flag_values), settings).export(flag_values.export_dir)
    return
  job.run_job(task_class(job_settings(flag_values), settings), flag_values.export_dir)


def check_actions(data_flags, flag_values=None, other_actions=()):
  """The first checks of a script with --do_train/--do_eval/--do_predict/--export_dir:
  something to do, the flags it needs, --export_dir a directory, a sane patience.

  Args:
    data_flags: the flags that name the data (needed unless the run only exports).
    flag_values: the flags (tests pass their own), by default tf.flags.FLAGS.
    other_actions: the script's own flags that are something to do too (e.g.
      run_embedding_mgpu.py's --embed_file).

  Returns:
    export_only().

  Raises:
    UsageError: the first problem.
  """
  flag_values = FLAGS if flag_values is None else flag_values
  actions = [name for name in ("do_train", "do_eval", "do_predict", "export_dir") +
             tuple(other_actions) if name in flag_values]
  if not any(getattr(flag_values, name) for name in actions):
    raise UsageError("Nothing to do: pass at least one of %s." %
                     ", ".join("--" + name for name in actions))
  only_export = export_only(flag_values, other_actions)
  for name in ("output_dir",) + (() if only_export else tuple(data_flags)):
    if not getattr(flag_values, name):
      raise UsageError("--%s is required." % name)
  export_dir = flag_value(flag_values, "export_dir")
  if export_dir and os.path.isfile(export_dir):
    raise UsageError("--export_dir=%s is a file: give a directory (the versions go inside)." %
                     export_dir)
  if flag_value(flag_values, "early_stopping_patience", 0) < 0:
    raise UsageError("--early_stopping_patience=%d: use 0 (never stop early) or more." %
                     flag_values.early_stopping_patience)
  return only_export


def refuse_unread_flags(unread, flag_values=None):
  """Refuses a flag given on the command line that this run would silently ignore.

  Args:
    unread: {flag name: the setting under which that flag is read}.
    flag_values: the flags, by default tf.flags.FLAGS.

  Raises:
    UsageError: naming the first such flag.
  """
  flag_values = FLAGS if flag_values is None else flag_values
  for name in sorted(unread):
    if flag_values[name].present:
      raise UsageError("--%s=%s is read only with %s, which this run does not have: drop "
                       "--%s, or use %s." % (name, flag_values[name].value, unread[name], name,
                                             unread[name]))


def output_directory(path, flag_name="output_file"):
  """Checks an output file flag before any work; returns its directory (may not exist yet).

  Raises:
    UsageError: the flag is missing, remote, a directory, or under a file.
  """
  flag = "--%s=%s" % (flag_name, path)
  if not path:
    raise UsageError("--%s is required." % flag_name)
  if "://" in path:
    raise UsageError("%s: give a local path (the file is written through a local temp file "
                     "and a rename); copy it after the run." % flag)
  if os.path.isdir(path):
    raise UsageError("%s is a directory: give a file path." % flag)
  directory = os.path.dirname(os.path.abspath(path))
  parent = directory
  while not os.path.exists(parent):
    parent = os.path.dirname(parent)
  if not os.path.isdir(parent):
    raise UsageError("%s: %s is a file, not a directory." % (flag, parent))
  return directory


def run_main(main, argv=None):
  """command_line_base.run_main under tf.app.run, with TensorFlow's log at INFO.

  UsageError, preemption and Ctrl-C end in one line (command_line_base.run_main).
  """
  tf.logging.set_verbosity(tf.logging.INFO)  # also gives TF's logger its handler
  command_line_base.run_main(main, argv, app_run=tf.app.run)
