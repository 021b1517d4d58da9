# coding=utf-8
"""An exponential moving average of the weights (--ema_decay=D): kept while training, used
by everything after it.

After each applied update t (t = 1, 2, ...: global_step + 1, so skipped fp16 updates and
accumulated micro-batches do not count, and a resumed run continues t), every trained
variable w has a shadow s (a variable named "<w's name>/ExponentialMovingAverage",
tf.train.ExponentialMovingAverage's name) that moves towards it:

  s <- s - r_t * (s - w),   r_t = (1 - D) / (1 - D^t)      (the bias-corrected rule)

r_1 = 1, so after the first update s is that update's weights, and after t updates s is
sum_i (1 - D) D^(t-i) w_i / (1 - D^t): the average of the weights after each update with
the starting weights out of it (bert4keras's bias-corrected EMA: averages that start at
zero, divided by 1 - D^t). r_t falls to 1 - D as t grows. Without the correction
(--ema_bias_correction=false, and the rule of every checkpoint written before it) r_t is
1 - D from the start, and the shadows start from the weights the run starts from, which
then keep a share D^t (0.61 after 500 updates at D = 0.999). An fp16 update that loss
scaling skips leaves the shadows as they are.

With --ema_warmup (tf.train.ExponentialMovingAverage's num_updates rule), update t uses
D_t = min(D, (1 + t) / (10 + t)) in place of D: the averages span about the last t / 10
updates early on (0.98 at t = 500) and reach D only when (1 + t) / (10 + t) does (t = 8,991
for D = 0.999). The general rate, for both rules and their combination, is

  r_t = (1 - D_t) / (1 - P_t),   P_t = D_1 D_2 ... D_t

(bias-corrected: the average of the weights after each update, weighted (1 - D_i) D_(i+1)
... D_t and normalised), or r_t = 1 - D_t without the correction.

A checkpoint records the rule beside the shadows: RECORDED_DECAY (D),
RECORDED_CORRECTION (1.0 for the bias-corrected rule, 0.0 without it) and, only with
--ema_warmup, RECORDED_WARMUP (1.0), scalars that never change (a checkpoint without
RECORDED_WARMUP has no warmup, so checkpoints written before it existed restore as they
are). A checkpoint with shadows and no record was written before the correction existed:
a resume of it continues its averages by the old rule (check_resume says which rule a run
follows, and refuses a changed D or rule). Readers of the model skip the record like any
training state.

One rule says which weights are used, in one place (this module):
- A checkpoint holds the raw weights under their plain names, which a resumed run
  continues from, and the shadows under their own names beside them.
- Everything that uses a checkpoint's model instead of resuming it reads each weight from
  its shadow when the checkpoint has one: eval and predict (runner.infer), exports, the
  predictor, convert_checkpoint.py --to=transformers, and a later run's --init_checkpoint.
  They all go through checkpoint_weight_names() (restore_saver, read_weights,
  read_weight).
- The training session's own dev evaluation and in-session inference run towers that
  read the shadow variables instead of the weights (multigpu.build_inference's
  read_averages); best/ is a copy of a checkpoint, and so holds both.
A variable the loss does not reach (NER's pooler) never changes and gets no shadow: its
weight is its average.
"""

import collections

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu.errors import UsageError

SUFFIX = "/ExponentialMovingAverage"
# The graph collection of the shadow variables (of every replica).
_COLLECTION = "weight_averages"
# The rule a checkpoint's averages follow (float32 scalars, one per run, never changed).
RECORD_SCOPE = "weight_averages/"
RECORDED_DECAY = RECORD_SCOPE + "decay"
RECORDED_CORRECTION = RECORD_SCOPE + "bias_correction"
RECORDED_WARMUP = RECORD_SCOPE + "warmup"
_RECORD_COLLECTION = "weight_averages_record"


class Rule(collections.namedtuple("Rule", ["bias_correction", "recorded", "warmup"])):
  """How a run's averages move (with D from --ema_decay).

  Attributes:
    bias_correction: r_t = (1 - D_t) / (1 - P_t); False: 1 - D_t from the start weights.
    recorded: the graph keeps RECORDED_DECAY and RECORDED_CORRECTION (False only to resume
      a checkpoint written before the record existed, which has none to restore).
    warmup: D_t = min(D, (1 + t) / (10 + t)) (--ema_warmup); False: D_t = D.
  """

  def describe(self):
    decay = "min(D, (1 + t) / (10 + t))" if self.warmup else "D"
    if self.bias_correction:
      if self.warmup:
        return ("bias-corrected with warmup: update t moves them by (1 - D_t) / (1 - D_1 ... "
                "D_t), D_t = %s" % decay)
      return "bias-corrected: each update moves them by (1 - D) / (1 - D^t)"
    return "not bias-corrected: they start from the start weights and move by 1 - %s" % decay


Rule.__new__.__defaults__ = (False,)  # warmup (namedtuple's defaults= needs Python 3.7)
BIAS_CORRECTED = Rule(bias_correction=True, recorded=True)
# --ema_warmup's default for a new run (docs/experiments/ema_bias_correction.md: without it
# the corrected 0.999 average of a short run from random weights lost 10 to 17 points).
WARMUP_BY_DEFAULT = True


def warmup_or_default(warmup):
  """--ema_warmup as given (True/False), or the default for a new run when not (None)."""
  return WARMUP_BY_DEFAULT if warmup is None else bool(warmup)


def check_decay(decay):
  """Raises UsageError unless 0 <= decay < 1."""
  if not 0.0 <= decay < 1.0:
    raise UsageError("--ema_decay=%s: give a factor in [0, 1), e.g. 0.999 (0: no average)."
                     % decay)


def average_name(name):
  """The name of the shadow of the variable called `name`."""
  return name + SUFFIX


def is_average(name):
  return name.endswith(SUFFIX)


# ---------------------------------------------------------------------------
# Reading a checkpoint for use
# ---------------------------------------------------------------------------

def checkpoint_weight_names(saved_names, names):
  """Where a checkpoint keeps the weight to use of each variable.

  Args:
    saved_names: the names a checkpoint holds (a container supporting `in`).
    names: the variables' plain names.

  Returns:
    dict plain name -> the checkpoint name to read: its average when saved, else itself.
  """
  return {name: average_name(name) if average_name(name) in saved_names else name
          for name in names}


def has_averages(checkpoint):
  """Whether `checkpoint` holds weight averages (a run with --ema_decay wrote it)."""
  return any(is_average(name) for name, _ in tf.train.list_variables(checkpoint))


def restore_saver(checkpoint, variables):
  """A Saver that restores `variables` from `checkpoint` with each weight's average when
  the checkpoint has one (under the variables' plain names otherwise)."""
  saved = tf.train.load_checkpoint(checkpoint).get_variable_to_shape_map()
  names = checkpoint_weight_names(saved, [v.op.name for v in variables])
  return tf.train.Saver({names[v.op.name]: v for v in variables})


def read_weights(reader, names):
  """The arrays of `names` a model uses, read with a tf.train.load_checkpoint reader.

  Returns:
    dict plain name -> np.ndarray (an average where the checkpoint has one).
  """
  keys = checkpoint_weight_names(reader.get_variable_to_shape_map(), names)
  return {name: reader.get_tensor(keys[name]) for name in names}


def read_weight(checkpoint, name):
  """One weight of `checkpoint` as a model uses it (its average when saved)."""
  return read_weights(tf.train.load_checkpoint(checkpoint), [name])[name]


def is_record(name):
  """Whether `name` is the record of the averages' rule (training state, not a weight)."""
  return name.startswith(RECORD_SCOPE)


def check_resume(checkpoint, decay, bias_correction=True, warmup=None):
  """Refuses to resume from a checkpoint whose averages do not match --ema_decay, and says
  by which rule the resumed averages move.

  Args:
    checkpoint: the checkpoint the run resumes.
    decay: --ema_decay (0: none).
    bias_correction: --ema_bias_correction.
    warmup: --ema_warmup when given, None when not (the checkpoint's rule then, and
      WARMUP_BY_DEFAULT for a checkpoint without averages).

  Returns:
    The Rule to build the training graph with: the checkpoint's own (a checkpoint written
    before the record existed continues without the correction and without a record).

  Raises:
    UsageError: --ema_decay given and the checkpoint has no averages, or not given and it
      has them; a D or a rule other than the recorded ones.
  """
  saved = has_averages(checkpoint)
  if decay > 0 and not saved:
    raise UsageError("--ema_decay=%s: %s was trained without it and has no weight averages "
                     "to continue. Resume without --ema_decay, or train into a new "
                     "--output_dir." % (decay, checkpoint))
  if decay == 0 and saved:
    raise UsageError("%s was trained with --ema_decay and holds weight averages that this "
                     "run would drop. Resume with the same --ema_decay, or train into a new "
                     "--output_dir." % checkpoint)
  if not saved:
    return Rule(bias_correction, recorded=True, warmup=warmup_or_default(warmup))
  reader = tf.train.load_checkpoint(checkpoint)
  if not reader.has_tensor(RECORDED_DECAY):
    if warmup:
      raise UsageError("--ema_warmup: %s kept its weight averages without warmup (it was "
                       "written before the rule was recorded). Resume without --ema_warmup, "
                       "or train into a new --output_dir." % checkpoint)
    return Rule(bias_correction=False, recorded=False)
  recorded_decay = float(reader.get_tensor(RECORDED_DECAY))
  if np.float32(decay) != np.float32(recorded_decay):
    raise UsageError("--ema_decay=%s: %s kept its weight averages with --ema_decay=%s, and "
                     "their bias correction holds for that D only. Resume with "
                     "--ema_decay=%s, or train into a new --output_dir." % (
                         decay, checkpoint, _short(recorded_decay), _short(recorded_decay)))
  recorded_correction = bool(reader.get_tensor(RECORDED_CORRECTION))
  if recorded_correction != bool(bias_correction):
    raise UsageError("--ema_bias_correction=%s: %s kept its weight averages with "
                     "--ema_bias_correction=%s. Resume with it, or train into a new "
                     "--output_dir." % (_flag_bool(bias_correction), checkpoint,
                                        _flag_bool(recorded_correction)))
  recorded_warmup = (reader.has_tensor(RECORDED_WARMUP) and
                     bool(reader.get_tensor(RECORDED_WARMUP)))
  if warmup is not None and recorded_warmup != bool(warmup):
    raise UsageError("--ema_warmup=%s: %s kept its weight averages with --ema_warmup=%s. "
                     "Resume with it, or train into a new --output_dir." % (
                         _flag_bool(warmup), checkpoint, _flag_bool(recorded_warmup)))
  return Rule(recorded_correction, recorded=True, warmup=recorded_warmup)


def _short(value):
  """A float32 value as the user typed it (0.999, not 0.99900001)."""
  return "%.7g" % value


def _flag_bool(value):
  return "true" if value else "false"


# ---------------------------------------------------------------------------
# The shadows in a training graph
# ---------------------------------------------------------------------------

def build_update(variables, decay, global_step, applied=None, rule=BIAS_CORRECTED):
  """Creates the shadows of `variables` and the op that moves them towards the variables.

  Build it after the update and before global_step's increment: the op reads the
  variables under a control dependency the caller sets. Each shadow lives on its
  variable's device (a replica's on that replica); the record of the rule, once per graph,
  on global_step's.

  Args:
    variables: the trained variables (one replica's).
    decay: D in (0, 1).
    global_step: the step variable, not yet incremented for this update (t = its value
      + 1).
    applied: optional bool scalar; when False (a skipped fp16 update) the shadows keep
      their values exactly.
    rule: a Rule.

  Returns:
    The op.
  """
  if rule.recorded:
    _record(decay, rule, global_step.device)
  rate = tf.cast(move_rate(decay, global_step, rule.bias_correction, rule.warmup), tf.float32)
  if applied is not None:
    rate *= tf.cast(applied, tf.float32)
  moves = []
  with tf.name_scope("weight_averages"):
    for variable in variables:
      shadow = _shadow(variable)
      # Exact at r = 1 (the first update's weights) and r = 0 (a skipped update).
      moves.append(shadow.assign(shadow * (1.0 - rate) + variable * rate, read_value=False))
  return tf.group(*moves)


def move_rate(decay, global_step, bias_correction, warmup=False):
  """r_t, the share of the way from the shadow to the weight that update t moves it (t =
  global_step + 1): (1 - D_t) / (1 - P_t) with the correction, else 1 - D_t (the module's
  docstring). float64, so that 1 - P_t keeps its digits for D near 1."""
  with tf.name_scope("average_rate"):
    t = tf.cast(global_step, tf.float64) + 1.0
    step_decay = tf.constant(decay, tf.float64)
    if warmup:
      step_decay = tf.minimum(step_decay, (1.0 + t) / (10.0 + t))
    if not bias_correction:
      return 1.0 - step_decay
    rate = (1.0 - step_decay) / (1.0 - tf.exp(log_decay_product(decay, t, warmup)))
    # r_t <= 1 (1 - P_t >= 1 - D_t); lgamma's rounding may exceed it at t = 1.
    return tf.minimum(rate, 1.0)


def log_decay_product(decay, t, warmup):
  """log P_t = log(D_1 ... D_t) in closed form (float64 tensor t >= 1).

  Without warmup, t log D. With it, D_i = (1 + i) / (10 + i) while that is below D, i.e.
  for i <= K = floor((10 D - 1) / (1 - D)), and D after: the first min(t, K) factors
  telescope to 10! (m + 1)! / (m + 10)!, written with lgamma.
  """
  log_decay = tf.constant(np.log(decay) if decay > 0 else -np.inf, tf.float64)
  if not warmup:
    return t * log_decay
  warm_steps = max(0.0, float(np.floor((10.0 * decay - 1.0) / (1.0 - decay))))
  m = tf.minimum(t, warm_steps)
  warm = tf.lgamma(m + 2.0) - tf.lgamma(m + 11.0) + tf.lgamma(tf.constant(11.0, tf.float64))
  return warm + (t - m) * log_decay


def _record(decay, rule, device):
  """The graph's RECORDED_DECAY, RECORDED_CORRECTION and (with warmup) RECORDED_WARMUP,
  created on first use."""
  if tf.get_collection(_RECORD_COLLECTION):
    return
  record = [(RECORDED_DECAY, decay), (RECORDED_CORRECTION, 1.0 if rule.bias_correction else 0.0)]
  if rule.warmup:
    record.append((RECORDED_WARMUP, 1.0))
  with tf.device(device):
    for name, value in record:
      tf.add_to_collection(_RECORD_COLLECTION, tf.get_variable(
          name, [], tf.float32, tf.constant_initializer(value), trainable=False,
          use_resource=True))


def _shadow(variable):
  with tf.device(variable.device):
    shadow = tf.get_variable(
        average_name(variable.op.name), variable.shape, tf.float32, tf.zeros_initializer(),
        trainable=False, use_resource=True)
  tf.add_to_collection(_COLLECTION, shadow)
  return shadow


def shadow_of(variable):
  """The shadow of `variable` in the current graph, or None."""
  name = average_name(variable.op.name)
  for shadow in tf.get_collection(_COLLECTION):
    if shadow.op.name == name:
      return shadow
  return None


def build_start():
  """The op that sets every shadow to its variable's value (run once, after a new run's
  variables are initialised); None in a graph without shadows."""
  shadows = tf.get_collection(_COLLECTION)
  if not shadows:
    return None
  by_name = {v.op.name: v for v in tf.global_variables()}
  with tf.name_scope("weight_averages"):
    return tf.group(*[shadow.assign(by_name[shadow.op.name[:-len(SUFFIX)]], read_value=False)
                      for shadow in shadows])


def used_variables(variables):
  """The variables towers built with read_averages read in place of `variables`: each
  one's shadow, where it has one."""
  shadows = [shadow_of(v) for v in variables]
  return [v if shadow is None else shadow for v, shadow in zip(variables, shadows)]
