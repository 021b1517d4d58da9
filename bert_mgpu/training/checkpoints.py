# coding=utf-8
"""Checkpoints: which weights a run starts from or predicts with, saving them whole, and
the best one kept in output_dir/best.

A save or a copy that the file system refuses (disk full) becomes one UsageError naming
the path, and leaves no partial file under a name that a later run or a user reads: the
previous checkpoint stays the latest, and the same command resumes once there is room.
"""

import glob
import json
import os
import shutil

import tensorflow.compat.v1 as tf

from bert_mgpu.data import output_files
from bert_mgpu.errors import UsageError, error_reason, write_error
from bert_mgpu.training import run_settings
from bert_mgpu.training import weight_averages
import modeling
import multigpu

BEST_SUBDIR = "best"


def checkpoint_global_step(checkpoint_path):
  """The global_step stored in a checkpoint (0 for one without, like Google's releases)."""
  reader = tf.train.load_checkpoint(checkpoint_path)
  if reader.has_tensor("global_step"):
    return int(reader.get_tensor("global_step"))
  return 0


def latest_checkpoint(directory):
  """The newest checkpoint that `directory`'s `checkpoint` file names, or None."""
  return tf.train.latest_checkpoint(directory) if os.path.isdir(directory) else None


def checkpoint_for_inference(output_dir, init_checkpoint, best_subdir=None,
                             output_dir_flag="--output_dir"):
  """The weights to evaluate or predict with, and a phrase saying why.

  output_dir/<best_subdir> when given and holding a checkpoint, else the latest checkpoint
  in output_dir, else init_checkpoint. output_dir_flag names output_dir in the phrase.

  Raises:
    UsageError: none of them exists.
  """
  if best_subdir:
    best_dir = os.path.join(output_dir, best_subdir)
    best = latest_checkpoint(best_dir)
    if best:
      return best, "the best dev checkpoint, kept in %s" % best_dir
  latest = latest_checkpoint(output_dir)
  if latest:
    return latest, "the latest checkpoint in " + output_dir_flag
  if init_checkpoint:
    return init_checkpoint, "--init_checkpoint (no checkpoint in --output_dir)"
  raise UsageError("No checkpoint in --output_dir=%s and no --init_checkpoint: train first "
                   "(--do_train) or point --output_dir at a trained model." % output_dir)


def init_from_checkpoint(init_checkpoint, prefixes=None, name=None):
  """Initialises the graph's trainable variables that `init_checkpoint` holds (from their
  weight averages when it has them: weight_averages.py).

  Args:
    init_checkpoint: the checkpoint.
    prefixes: dict model variable prefix -> the prefix the checkpoint holds it under (a
      distilled student's layer 1 from its teacher's layer 4: --init_from_teacher_layers),
      or None; other variables are read under their own names.
    name: how errors name the checkpoint (default: --init_checkpoint=<path>).

  Returns:
    The names of the trainable variables it did not hold (a new task head, say).

  Raises:
    UsageError: missing checkpoint, or a variable whose shape differs from the checkpoint's.
  """
  name = name or "--init_checkpoint=" + init_checkpoint
  tvars = _trainable_saveables()
  renamed = {v.op.name: _renamed(v.op.name, prefixes) for v in tvars}
  renamed = {name: source for name, source in renamed.items() if source != name}
  try:
    assignment_map, initialized = modeling.get_assignment_map_from_checkpoint(
        [v for v in tvars if v.op.name not in renamed], init_checkpoint)
  except ValueError as e:
    raise UsageError("%s: %s" % (name, e))
  saved = tf.train.load_checkpoint(init_checkpoint).get_variable_to_shape_map()
  assignment = {name: name for name in assignment_map.values()}  # model name -> saved name
  for v in tvars:
    source = renamed.get(v.op.name)
    if source is None or source not in saved:
      continue
    if list(saved[source]) != v.shape.as_list():
      raise UsageError("%s: variable %s has shape %s there but %s in the model (as %s)" %
                       (name, source, saved[source], v.shape.as_list(), v.op.name))
    assignment[v.op.name] = source
  sources = weight_averages.checkpoint_weight_names(saved, list(assignment.values()))
  tf.train.init_from_checkpoint(init_checkpoint, {sources[source]: name
                                                  for name, source in assignment.items()})
  return [v.op.name for v in tvars if v.op.name not in assignment]


def _renamed(name, prefixes):
  """`name` with the first of `prefixes` (dict old -> new) it starts with replaced."""
  for prefix, source in (prefixes or {}).items():
    if name.startswith(prefix):
      return source + name[len(prefix):]
  return name


def _trainable_saveables():
  """The trainable variables under their checkpoint names (replica 0's copies)."""
  trainable = set(v.op.name for v in tf.trainable_variables())
  return [v for v in multigpu.saveable_variables() if v.op.name in trainable]


def set_up_init_checkpoint(config):
  """Initialises a new run (a RunConfig) from --init_checkpoint, or logs that training starts
  from scratch; warns when BERT's body starts from random weights under Google's uncorrected
  AdamW (run_settings.FROM_SCRATCH_WARNING)."""
  if config.init_checkpoint:
    missing = init_from_checkpoint(config.init_checkpoint, config.init_checkpoint_prefixes,
                                   config.init_checkpoint_description)
    tf.logging.info("Initialised from %s; not in it, so freshly initialised: %s",
                    config.init_checkpoint_description or
                    "--init_checkpoint=" + config.init_checkpoint,
                    ", ".join(missing) or "nothing")
  else:
    missing = [v.op.name for v in _trainable_saveables()]
    tf.logging.info("No checkpoint in %s and no --init_checkpoint: training from scratch.",
                    config.output_dir)
  if run_settings.uncorrected_adam_from_scratch(config, missing):
    tf.logging.warning("%s", run_settings.FROM_SCRATCH_WARNING)


# Variables a model builds but never reads when it only runs the encoder (or the encoder
# and the masked-LM head): a checkpoint may lack them.
UNREAD_SCOPES = ("bert/pooler/",)


def load_pretrained_weights(init_checkpoint):
  """Initialises the graph's variables from a pretrained checkpoint (extract_features,
  fill_mask) and refuses one that lacks any of them but UNREAD_SCOPES.

  Returns:
    The names it lacks that the model does not read.

  Raises:
    UsageError: a variable the model reads is missing (it is not this config's BERT), or a
      shape differs.
  """
  missing = init_from_checkpoint(init_checkpoint)
  needed = [name for name in missing if not name.startswith(UNREAD_SCOPES)]
  if needed:
    raise lacking_variables_error(
        "--init_checkpoint=" + init_checkpoint, needed, "BERT's", "it is not a BERT "
        "checkpoint of this --bert_config_file. Use the bert_model.ckpt that came with the "
        "config.")
  return missing


def lacking_variables_error(checkpoint, missing, what, advice):
  """The UsageError for a checkpoint that lacks `missing` (variable names) of a model.

  Args:
    what: the model, e.g. "this model's", "BERT's", "the classifier's".
    advice: what to do instead, one sentence.
  """
  shown = ", ".join(missing[:3] + ["..."] * (len(missing) > 3))
  return UsageError("%s lacks %d of %s variables (%s): %s" % (
      checkpoint, len(missing), what, shown, advice))


def check_fine_tuned(checkpoint, head_variable, task):
  """Refuses a checkpoint to predict with that lacks the task's head (a pretrained BERT's).

  Args:
    checkpoint: its path.
    head_variable: the name of a variable of the head (the unit's model.py defines it).
    task: what the head is fine-tuned for, e.g. "reading comprehension".

  Raises:
    UsageError: the checkpoint has no `head_variable`.
  """
  if not tf.train.load_checkpoint(checkpoint).has_tensor(head_variable):
    raise UsageError("%s has no %s: it is not a model fine-tuned for %s. Train one first "
                     "(--do_train) or point --output_dir at one." % (checkpoint, head_variable,
                                                                    task))


def missing_variables(checkpoint, variables):
  """The names of `variables` that `checkpoint` does not hold."""
  saved = tf.train.load_checkpoint(checkpoint).get_variable_to_shape_map()
  return [v.op.name for v in variables if v.op.name not in saved]


# ---------------------------------------------------------------------------
# Saving
# ---------------------------------------------------------------------------

def write_arrays(values, checkpoint_prefix):
  """Writes each array of `values` as a variable of that name and dtype to a new checkpoint,
  in a graph of its own: weights made outside a model (converted or drawn) in the form
  --init_checkpoint reads.

  Args:
    values: dict variable name (`bert/embeddings/word_embeddings`) -> numpy array, kept in
      its dtype: give BERT's weights as float32 (a float64 array makes a float64 variable,
      which a float32 model refuses to load).
    checkpoint_prefix: the checkpoint's path; its directory is created if needed.

  Returns:
    The checkpoint's path (its prefix).
  """
  with tf.Graph().as_default():
    variables = [tf.Variable(values[name], name=name) for name in sorted(values)]
    renamed = [v.op.name for v in variables if v.op.name not in values]
    if renamed:
      raise ValueError("TensorFlow renamed these variables: %s" % ", ".join(renamed))
    saver = tf.train.Saver(variables)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      os.makedirs(os.path.dirname(os.path.abspath(checkpoint_prefix)), exist_ok=True)
      return saver.save(sess, checkpoint_prefix, write_meta_graph=False)


def _checkpoint_files(prefix):
  """The files of checkpoint `prefix`, and the temp files TensorFlow writes them through."""
  return glob.glob(glob.escape(prefix) + ".*") + glob.glob(glob.escape(prefix) + "_temp*")


def save(saver, sess, output_dir, step):
  """Saves the variables as output_dir/model.ckpt-<step> and names it the latest.

  Returns:
    The checkpoint path.

  Raises:
    UsageError: the file system refused a write; this step's partial files are removed,
      and the `checkpoint` file still names the previous checkpoint.
  """
  prefix = os.path.join(output_dir, "model.ckpt-%d" % step)
  try:
    path = saver.save(sess, os.path.join(output_dir, "model.ckpt"), global_step=step,
                      write_meta_graph=False)
  except (tf.errors.OpError, OSError) as e:
    latest = latest_checkpoint(output_dir)
    # TF writes the `checkpoint` file through checkpoint.tmp<hex>, left when that fails.
    partial = glob.glob(os.path.join(glob.escape(output_dir), "checkpoint.tmp*"))
    if latest is None or os.path.basename(latest) != os.path.basename(prefix):
      partial += _checkpoint_files(prefix)
    for path in partial:
      output_files.remove_quietly(path)
    raise write_error(prefix, e)
  tf.logging.info("Saved %s", path)
  return path


def discard(saver, output_dir, path):
  """Removes checkpoint `path`, the latest, and names the one saved before it the latest
  again (or none). Removing first frees the room the small `checkpoint` file needs on a
  full disk. Errors are left unreported: this runs while another one is being handled.
  """
  for partial in _checkpoint_files(path):
    output_files.remove_quietly(partial)
  remaining = [os.path.basename(p) for p in saver.last_checkpoints
               if os.path.basename(p) != os.path.basename(path)]
  try:
    if remaining:
      tf.train.update_checkpoint_state(os.path.abspath(output_dir), remaining[-1],
                                       all_model_checkpoint_paths=remaining)
    else:
      output_files.remove_quietly(os.path.join(output_dir, "checkpoint"))
  except tf.errors.OpError:
    pass
  for partial in glob.glob(os.path.join(glob.escape(output_dir), "checkpoint.tmp*")):
    output_files.remove_quietly(partial)
  tf.logging.warning("Removed %s: its evaluation could not be recorded; the next run trains "
                     "from %s.", path, remaining[-1] if remaining else "the start")


def restore(saver, sess, checkpoint, output_dir):
  """Restores `checkpoint` and lets `saver` (keep_checkpoint_max) delete the checkpoints
  written before the restart too."""
  saver.restore(sess, checkpoint)
  state = tf.train.get_checkpoint_state(output_dir)
  if state is not None:
    saver.recover_last_checkpoints(state.all_model_checkpoint_paths)


def training_finished(config, log=True):
  """True when output_dir already holds a checkpoint at config.num_train_steps or later.
  Logs it unless `log` is False (a caller asking before runner.train, which logs it)."""
  latest = latest_checkpoint(config.output_dir)
  if latest and checkpoint_global_step(latest) >= config.num_train_steps:
    if log:
      tf.logging.info("%s is already at step %d of %d: nothing to train.", latest,
                      checkpoint_global_step(latest), config.num_train_steps)
    return True
  return False


# ---------------------------------------------------------------------------
# The best checkpoint
# ---------------------------------------------------------------------------

class BestCheckpoint(object):
  """Keeps a copy of the best-scoring checkpoint in output_dir/best, across restarts.

  best/ holds the checkpoint's files, a `checkpoint` file naming it, and best_metric.json
  (the metric, its value and the evaluations since). A new best replaces the whole
  directory at once (output_files.replace_directory), so best/ is always one complete
  checkpoint, even when the disk fills during the copy.
  """

  def __init__(self, output_dir, metric, resuming):
    """Args: output_dir; metric: the key to maximise; resuming: whether training resumes.

    The stored state counts only when the run resumes with the same metric: a run from
    scratch, or one that maximises another metric, starts a new record (and best/ is
    replaced by its first evaluation).
    """
    self.metric = metric
    self.directory = os.path.join(output_dir, BEST_SUBDIR)
    self.best = None
    self.evals_since_best = 0
    output_files.recover_directory(self.directory)
    state_file = os.path.join(self.directory, "best_metric.json")
    if resuming and os.path.isfile(state_file):
      with open(state_file, encoding="utf-8") as f:
        state = json.load(f)
      if state.get("metric") == metric:
        self.best, self.evals_since_best = state["value"], state["evals_since_best"]

  def _state_json(self, checkpoint_name):
    return json.dumps({"metric": self.metric, "value": self.best,
                       "evals_since_best": self.evals_since_best,
                       "checkpoint": checkpoint_name})

  def _fill(self, checkpoint_path, directory):
    """Writes the checkpoint's files, its `checkpoint` file and the state into
    `directory`."""
    for source in glob.glob(glob.escape(checkpoint_path) + ".*"):
      shutil.copyfile(source, os.path.join(directory, os.path.basename(source)))
    # A bare file name, so output_dir can be moved or copied (as save_relative_paths). The
    # directory must be absolute: with a relative one, TF rewrites the name relative to
    # the working directory (docs/FORMATS.md 9).
    name = os.path.basename(checkpoint_path)
    try:
      tf.train.update_checkpoint_state(os.path.abspath(directory), name,
                                       all_model_checkpoint_paths=[name])
    except tf.errors.OpError as e:
      raise OSError(error_reason(e))  # replace_directory names best/ in the error
    with open(os.path.join(directory, "best_metric.json"), "w", encoding="utf-8") as f:
      f.write(self._state_json(name))

  def update(self, checkpoint_path, metrics):
    """Records an evaluation; copies the checkpoint when it is a new best. Returns True then.

    Raises:
      UsageError: the file system refused a write; best/ keeps its previous content.
    """
    value = metrics[self.metric]
    improved = self.best is None or value > self.best
    if improved:
      previous = (self.best, self.evals_since_best)
      self.best, self.evals_since_best = value, 0
      try:
        output_files.replace_directory(
            self.directory, lambda directory: self._fill(checkpoint_path, directory))
      except UsageError:
        self.best, self.evals_since_best = previous
        raise
    else:
      self.evals_since_best += 1
      output_files.atomic_write_text(os.path.join(self.directory, "best_metric.json"),
                                     self._state_json(None))
    return improved

  def stopped_early(self, patience):
    """True when `patience` (> 0) evaluations in a row brought no new best."""
    return bool(patience) and self.evals_since_best >= patience
