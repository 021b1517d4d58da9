# coding=utf-8
"""Run settings: what a run's command line says, as objects the package takes (the flags
themselves are read in bert_mgpu/command_line.py only).

- DeviceSettings: where and how the model runs (towers, variable placement, precision, XLA,
  batch padding, the workers of a multi-worker run). Every script that runs the model
  gets one (command_line.device_settings()) and calls check() before it writes anything:
  that is where --n_gpus meets the visible GPUs and --precision meets this TensorFlow and
  these GPUs.
- JobSettings: a job's output_dir, devices, batch sizes, schedule and step count.
- RunConfig: a DeviceSettings plus the batch and step arithmetic of training, made by
  make_run_config(JobSettings), which runs the device check.

multigpu.py makes the device plan; this module only asks it for one.
"""

import collections
import hashlib
import os
import tempfile

import tensorflow.compat.v1 as tf

from bert_mgpu.errors import UsageError
from bert_mgpu.training import training_flags
from bert_mgpu.training import weight_averages
import multigpu

# With --use_xla, batch lengths are rounded up to a multiple of this.
XLA_LENGTH_MULTIPLE = 16

# global_step is an int64.
_MAX_STEPS = 2 ** 63 - 1


# ---------------------------------------------------------------------------
# Devices
# ---------------------------------------------------------------------------

def _gpu_compute_capabilities():
  """(major, minor) of each visible GPU, or None where TensorFlow does not say."""
  details = getattr(tf.config.experimental, "get_device_details", None)
  capabilities = []
  for gpu in tf.config.experimental.list_physical_devices("GPU"):
    capabilities.append(details(gpu).get("compute_capability") if details else None)
  return capabilities


def check_precision_for_tensorflow(precision):
  """Refuses a --precision that this TensorFlow lacks; needs no device (nor its runtime).

  Raises:
    UsageError: bf16 on TF 1.x (it lacks bfloat16 kernels).
  """
  if precision == "bf16" and not tf.__version__.startswith("2"):
    raise UsageError("--precision=bf16 needs TensorFlow 2.x: TF %s lacks bfloat16 kernels "
                     "for some of BERT's ops (Reciprocal, for one). Use "
                     "--precision=fp16 on GPUs, or fp32." % tf.__version__)


def check_precision(precision, plan):
  """Refuses a --precision that this TensorFlow or these devices lack (no silent fallback).

  Raises:
    UsageError: fp16 without a GPU (a CPU only emulates it, slowly); bf16 on TF 1.15 or
      on a GPU older than Ampere.
  """
  check_precision_for_tensorflow(precision)
  if precision == "fp16" and not plan.on_gpu:
    raise UsageError("--precision=fp16 needs a GPU (V100, T4 or newer); on a CPU float16 is "
                     "emulated and slower than fp32. Use --precision=bf16 on CPUs with bf16 "
                     "units, or fp32.")
  if precision == "bf16" and plan.on_gpu:
    for capability in _gpu_compute_capabilities():
      if capability is not None and tuple(capability) < (8, 0):
        raise UsageError("--precision=bf16 needs an Ampere-or-newer GPU (compute capability "
                         "8.0+); this one is %d.%d. Use --precision=fp16 (with loss scaling) "
                         "or fp32." % tuple(capability))


class DeviceSettings(object):
  """Where and how the model runs, for training and inference alike.

  Attributes:
    n_gpus, towers_per_gpu: --n_gpus, --towers_per_gpu (towers of this process).
    variable_update: "host", "gpu0" or "replicated" (--variables_on_gpu resolved).
    precision: "fp32", "bf16" or "fp16".
    use_xla: compile each tower with XLA.
    length_multiple: batches are cut to their longest example rounded up to this (XLA
      compiles one program per shape, so it gets a few lengths); None pads every batch to
      max_seq_length (--pad_to_max_seq_length).
    cluster: a cluster.Cluster for several workers, else None.
    plan: the multigpu.DevicePlan, once check() has made it.
  """

  # pylint: disable=redefined-outer-name
  def __init__(self, n_gpus=1, towers_per_gpu=1, variable_update="host",
               variables_on_gpu=False, precision="fp32", use_xla=False,
               pad_to_max_seq_length=False, cluster=None, plan=None):
    self.n_gpus = n_gpus
    self.towers_per_gpu = towers_per_gpu
    if variables_on_gpu and variable_update == "host":
      variable_update = None  # the flag's default gives way to the old name
    self.variable_update = variable_update
    self.variables_on_gpu = variables_on_gpu
    self.precision = precision
    self.use_xla = use_xla
    self.length_multiple = (None if pad_to_max_seq_length else
                            XLA_LENGTH_MULTIPLE if use_xla else 1)
    self.cluster = cluster
    self.plan = plan  # given by tests; otherwise made by check()
    self.checked = False  # check() has passed

  @property
  def num_towers(self):
    return self.n_gpus * self.towers_per_gpu

  @property
  def num_workers(self):
    return self.cluster.num_workers if self.cluster else 1

  def check(self):
    """Makes the device plan and checks the precision against it. Call it before anything
    is written: it is the last check that can refuse a run. Asks TensorFlow for the GPUs,
    which starts its GPU runtime (fork worker processes before).

    Returns:
      self.

    Raises:
      UsageError: more GPUs asked for than are visible, a --variable_update that does not
        fit, or a --precision this TensorFlow or these devices lack.
    """
    if self.checked:
      return self
    check_precision_for_tensorflow(self.precision)  # before asking for the GPUs
    if self.plan is None:
      try:
        self.plan = multigpu.plan_devices(
            self.n_gpus, self.towers_per_gpu, self.variables_on_gpu,
            variable_update=self.variable_update, num_workers=self.num_workers,
            worker_index=self.cluster.task_index if self.cluster else 0)
      except ValueError as e:
        raise UsageError(str(e))
    check_precision(self.precision, self.plan)
    self.checked = True
    return self


# ---------------------------------------------------------------------------
# The run config: one object with the batch and step arithmetic
# ---------------------------------------------------------------------------

# What a run may set, and the value when it does not (train_batch_size is per tower).
RUN_DEFAULTS = collections.OrderedDict([
    ("init_checkpoint", None),
    # A start read under other names: prefix in the model -> prefix in init_checkpoint
    # (--init_from_teacher_layers), and how the log names that start.
    ("init_checkpoint_prefixes", None), ("init_checkpoint_description", None),
    ("train_batch_size", 1), ("eval_batch_size", 8),
    ("predict_batch_size", 8), ("accumulation_steps", 1), ("learning_rate", 5e-5),
    ("optimizer", "adamw"), ("adam_bias_correction", False),
    # The classifier's and NER's --layerwise_lr_decay (1.0: one rate for every layer).
    ("layerwise_lr_decay", 1.0),
    # Their --ema_decay (0: no weight averages), --ema_bias_correction and --ema_warmup (None:
    # not given: the default for a new run, the checkpoint's rule on resume); the job sets
    # ema_rule_recorded False to resume averages written before their rule was recorded
    # (weight_averages.check_resume).
    ("ema_decay", 0.0), ("ema_bias_correction", True), ("ema_rule_recorded", True),
    ("ema_warmup", None),
    # Their --adversarial: an adversarial.Attack, or None.
    ("attack", None),
    # Their --rdrop_alpha (0: one pass per batch).
    ("rdrop_alpha", 0.0),
    # The distribution of the weights no checkpoint gives (modeling.INITIALIZERS).
    ("initializer", "truncated_normal"),
    ("save_checkpoints_steps", 1000), ("keep_checkpoint_max", 5), ("log_steps", 100),
    ("random_seed", None), ("group_by_length", False),  # group_by_length: training batches
    ("worker_timeout_secs", 60), ("worker_startup_timeout_secs", 600),
    # The values of the flags a resume must not change (command_line.training_flags), and
    # whether this run may change them (training_flags.py).
    ("training_flags", None), ("allow_changed_training_flags", False),
])


class JobSettings(object):
  """What a run's command line says about the job as a whole: output_dir, whether it
  trains, the devices, the RUN_DEFAULTS fields and how to count the training steps
  (command_line.job_settings builds it from the flags). make_run_config() turns it into
  the RunConfig once the training set's size is known.

  Attributes:
    output_dir, do_train: the flags.
    devices: DeviceSettings, not yet checked.
    num_train_epochs, warmup_proportion: Google's step count (fine-tuning).
    num_train_steps, num_warmup_steps: given steps (pretraining), else None.
    and every RUN_DEFAULTS name.
  """

  def __init__(self, output_dir, do_train=False, devices=None, num_train_epochs=3.0,
               warmup_proportion=0.1, num_train_steps=None, num_warmup_steps=None, **fields):
    unknown = set(fields) - set(RUN_DEFAULTS)
    if unknown:
      raise TypeError("unknown JobSettings fields: %s" % sorted(unknown))
    self.output_dir = output_dir
    self.do_train = do_train
    self.devices = devices or DeviceSettings()
    self.num_train_epochs = num_train_epochs
    self.warmup_proportion = warmup_proportion
    self.num_train_steps = num_train_steps
    self.num_warmup_steps = num_warmup_steps
    for name, default in RUN_DEFAULTS.items():
      setattr(self, name, fields.get(name, default))


class RunConfig(object):
  """What the loop needs to know about a run, built from the flags by make_run_config().

  Training batch sizes are counted over all towers of all workers: `micro_batch_size`
  examples run per sess.run, `global_batch_size` = micro_batch_size x accumulation_steps
  examples make one update. Eval and predict run on this process's towers. Steps are
  updates (global_step).

  Tests may pass the DeviceSettings fields (n_gpus=..., plan=...) instead of `devices`.
  """

  def __init__(self, output_dir, devices=None, **fields):
    self.output_dir = output_dir
    if devices is None:
      device_fields = ("n_gpus", "towers_per_gpu", "variable_update", "variables_on_gpu",
                       "precision", "use_xla", "pad_to_max_seq_length", "cluster", "plan")
      devices = DeviceSettings(**{k: fields.pop(k) for k in device_fields if k in fields})
    self.devices = devices
    unknown = set(fields) - set(RUN_DEFAULTS) - {"num_train_steps", "num_warmup_steps",
                                                 "train_data_description"}
    if unknown:
      raise TypeError("unknown RunConfig fields: %s" % sorted(unknown))
    for name, default in RUN_DEFAULTS.items():
      setattr(self, name, fields.get(name, default))
    self.micro_batch_size = self.train_batch_size * self.num_towers * self.num_workers
    self.global_batch_size = self.micro_batch_size * self.accumulation_steps
    self.global_eval_batch_size = self.eval_batch_size * self.num_towers
    self.global_predict_batch_size = self.predict_batch_size * self.num_towers
    self.num_train_steps = fields.get("num_train_steps", 0)
    self.num_warmup_steps = fields.get("num_warmup_steps", 0)
    # A description of the training data for the start-of-run log ("800 training examples").
    self.train_data_description = fields.get("train_data_description")

  # The device facts the loop and the scripts read most, without `.devices`.
  cluster = property(lambda self: self.devices.cluster)
  num_towers = property(lambda self: self.devices.num_towers)  # of this process
  num_workers = property(lambda self: self.devices.num_workers)
  length_multiple = property(lambda self: self.devices.length_multiple)

  @property
  def is_chief(self):
    return self.cluster is None or self.cluster.is_chief

  @property
  def plan(self):
    """The checked DevicePlan (checks the devices on first use)."""
    return self.devices.check().plan

  @property
  def cache_dir(self):
    """Where this process keeps featurized data: output_dir, except on a worker that is not
    the chief, which writes nothing there (a directory of its own under the temp dir)."""
    if self.is_chief:
      return self.output_dir
    key = hashlib.sha1(os.path.abspath(self.output_dir).encode("utf-8")).hexdigest()[:10]
    return os.path.join(tempfile.gettempdir(), "bert-mgpu-worker%d-%s" % (
        self.cluster.task_index, key))

  def training_options(self):
    """multigpu.build_training's arguments after the schedule: the optimizer, the devices'
    precision and XLA, accumulation and the fine-tuning techniques."""
    return dict(optimizer_name=self.optimizer, accumulation_steps=self.accumulation_steps,
                precision=self.devices.precision, use_xla=self.devices.use_xla,
                adam_bias_correction=self.adam_bias_correction,
                layerwise_lr_decay=self.layerwise_lr_decay, ema_decay=self.ema_decay,
                ema_rule=self.ema_rule, attack=self.attack)

  @property
  def training_flags_digest(self):
    """training_flags as one integer, for the workers' settings check."""
    return training_flags.digest(self.training_flags)

  @property
  def ema_rule(self):
    """The weight averages' weight_averages.Rule."""
    return weight_averages.Rule(bool(self.ema_bias_correction), bool(self.ema_rule_recorded),
                                weight_averages.warmup_or_default(self.ema_warmup))

  @property
  def adversarial_passes(self):
    """--adversarial's passes per batch (0: off); each all-reduces the table's gradient, so
    every worker must run the same number."""
    return 0 if self.attack is None else self.attack.passes

  def extra_passes(self):
    """The techniques that add forward and backward passes, and how many passes a batch
    then takes, for the log; None without any."""
    techniques = ([self.attack.describe()] if self.attack is not None else []) + (
        ["R-Drop with alpha %g" % self.rdrop_alpha] if self.rdrop_alpha > 0 else [])
    if not techniques:
      return None
    passes = (1 + (self.attack.passes if self.attack is not None else 0)) * (
        2 if self.rdrop_alpha > 0 else 1)
    return "%s: %d forward and backward passes per batch" % (", ".join(techniques), passes)

  def describe_training(self):
    """The start-of-run log lines: data, batch arithmetic, schedule and device mapping."""
    workers = " x %d workers" % self.num_workers if self.num_workers > 1 else ""
    lines = ["%d tower(s)%s x per-tower batch %d x %d accumulation step(s) = global batch %d" % (
        self.num_towers, workers, self.train_batch_size, self.accumulation_steps,
        self.global_batch_size)]
    optimizer = self.optimizer + (" with bias correction" if self.adam_bias_correction else "")
    steps = "%d steps, %d warmup steps, optimizer %s, peak learning rate %g, precision %s%s" % (
        self.num_train_steps, self.num_warmup_steps, optimizer, self.learning_rate,
        self.devices.precision, ", XLA" if self.devices.use_xla else "")
    if self.layerwise_lr_decay != 1.0:
      steps += ", layer-wise learning-rate decay %g" % self.layerwise_lr_decay
    if self.ema_decay > 0:
      steps += ", weight averages with decay %g, %s (evaluated and kept)" % (
          self.ema_decay, self.ema_rule.describe())
    if self.extra_passes():
      steps += ", " + self.extra_passes()
    if self.initializer != "truncated_normal":
      steps += ", new weights drawn from the %s initializer" % self.initializer
    if self.train_data_description:
      steps = "%s = %s" % (self.train_data_description, steps)
    return lines + [steps] + self.plan.describe()


# Logged once when BERT's body starts from random weights under Google's AdamWeightDecay.
FROM_SCRATCH_WARNING = (
    "Training BERT's body from random weights with Google's AdamWeightDecay, which has no "
    "bias correction: its first steps are several times a bias-corrected Adam's (3.2x at "
    "step 1, 6.5x at step 10, 1.3x at step 1000), and short runs from scratch can stay on a "
    "plateau (a classifier predicting the majority class, a tagger all-O). From scratch, add "
    "--initializer=normal --adam_bias_correction (or --optimizer=radam); docs/TRAINING.md "
    "gives the figures.")

# What makes BERT's body: a checkpoint without the pooler (which an encoder never reads) still
# gives it.
_BODY_SCOPES = ("bert/embeddings/", "bert/encoder/")


def uncorrected_adam_from_scratch(config, fresh_variables):
  """Whether FROM_SCRATCH_WARNING applies: Google's uncorrected AdamW, and BERT's body
  (embeddings or encoder) among the variables no checkpoint initialised.

  Args:
    config: the RunConfig (or JobSettings).
    fresh_variables: names of the trainable variables left to their initializers.
  """
  if config.optimizer != "adamw" or config.adam_bias_correction:
    return False
  return any(name.startswith(_BODY_SCOPES) for name in fresh_variables)


def _training_steps(config, job, num_train_examples, example_noun):
  """Sets config's steps from the job's num_train_steps/num_warmup_steps when it has them
  (pretraining), else as Google's scripts count them. Raises UsageError."""
  if job.num_train_steps is not None:
    config.num_train_steps = job.num_train_steps
    config.num_warmup_steps = job.num_warmup_steps
    return
  epochs = job.num_train_epochs
  config.num_train_steps = int(num_train_examples * epochs / config.global_batch_size)
  config.num_warmup_steps = int(config.num_train_steps * job.warmup_proportion)
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


def planned_cache_dir(job):
  """The cache_dir make_run_config() will give, known before the device check (to decide
  whether to fork featurizing processes): output_dir and the workers alone decide it, and
  reading them starts no TensorFlow runtime."""
  return RunConfig(job.output_dir, cluster=job.devices.cluster).cache_dir


def make_run_config(job, num_train_examples=None, example_noun="training examples"):
  """The RunConfig of a run: the one place for batch and step arithmetic.

  Also the run's last check before it writes: the device plan and the precision
  (DeviceSettings.check()). Call it before claiming output_dir.

  Steps are the job's num_train_steps and num_warmup_steps when it has them (pretraining),
  otherwise as Google's scripts count them: int(examples x epochs / global batch) and
  int(steps x warmup_proportion).

  Args:
    job: JobSettings, from flags already checked by command_line.check_run_flags().
    num_train_examples: examples (SQuAD: questions) in the training set, when training.
    example_noun: what they are, for the messages.

  Raises:
    UsageError: the training set is less than one global batch, or the devices refuse.
  """
  devices = job.devices.check()
  config = RunConfig(job.output_dir, devices=devices,
                     **{name: getattr(job, name) for name in RUN_DEFAULTS})
  if job.do_train:
    _training_steps(config, job, num_train_examples, example_noun)
  return config
