# coding=utf-8
"""An exponential moving average of the weights (--ema_decay=D): kept while training, used
by everything after it.

After each applied update, every trained variable w has a shadow s (a variable named
"<w's name>/ExponentialMovingAverage", tf.train.ExponentialMovingAverage's name):

  s <- s - (1 - D) * (s - w)        (= D * s + (1 - D) * w)

The shadows start from the weights the run starts from (the init checkpoint or the
initializer). An fp16 update that loss scaling skips leaves them as they are.

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

import tensorflow.compat.v1 as tf

from bert_mgpu.errors import UsageError

SUFFIX = "/ExponentialMovingAverage"
# The graph collection of the shadow variables (of every replica).
_COLLECTION = "weight_averages"


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


def check_resume(checkpoint, decay):
  """Refuses to resume from a checkpoint whose averages do not match --ema_decay.

  Raises:
    UsageError: --ema_decay given and the checkpoint has no averages, or not given and it
      has them.
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


# ---------------------------------------------------------------------------
# The shadows in a training graph
# ---------------------------------------------------------------------------

def build_update(variables, decay, applied=None):
  """Creates the shadows of `variables` and the op that moves them towards the variables.

  Build it after the update: the op reads the variables under a control dependency the
  caller sets. Each shadow lives on its variable's device (a replica's on that replica).

  Args:
    variables: the trained variables (one replica's).
    decay: D in (0, 1).
    applied: optional bool scalar; when False (a skipped fp16 update) the shadows keep
      their values exactly.

  Returns:
    The op.
  """
  rate = tf.constant(1.0 - decay, tf.float32)
  if applied is not None:
    rate *= tf.cast(applied, tf.float32)
  moves = []
  with tf.name_scope("weight_averages"):
    for variable in variables:
      shadow = _shadow(variable)
      moves.append(shadow.assign_sub((shadow - variable) * rate, read_value=False))
  return tf.group(*moves)


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
