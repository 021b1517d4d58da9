# coding=utf-8
"""The teacher of a run that distills (--teacher_dir): its files and checkpoint, the checks
that it matches the student, the identity its stored outputs are keyed by, and the layers
--init_from_teacher_layers copies.

The teacher is a trained output_dir of the student's kind: its model files
(serving/model_files.py) and its best/ checkpoint, else its latest. Its outputs are computed
on the student's records, so everything that makes those records, and the label order of the
outputs, must be the teacher's own.
"""

import collections
import hashlib
import json
import os

from bert_mgpu import bert_files
from bert_mgpu.errors import UsageError
from bert_mgpu.serving import model_files
from bert_mgpu.training import checkpoints

# model_settings.json fields that need not match: the task's name (a teacher of "tsv" can
# teach "iflytek" read from the same files) and how the label fields were split.
_FIELDS_NOT_COMPARED = ("task_name", "label_separator")

# BERT config fields that decide the shapes of the weights --init_from_teacher_layers copies
# (and the heads, which decide how the attention weights are read).
_SHAPE_FIELDS = ("hidden_size", "intermediate_size", "vocab_size", "type_vocab_size",
                 "max_position_embeddings", "num_attention_heads")

# The files of the teacher's outputs in a student's output_dir (teacher_outputs.py).
OUTPUTS_PREFIX = "distill-"

# The encoder layer's variable scope, as modeling.py names it.
_LAYER_SCOPE = "bert/encoder/layer_%d/"


Teacher = collections.namedtuple("Teacher", ["directory", "files", "checkpoint", "why",
                                             "identity", "bert_config"])
Teacher.__doc__ = """A run's teacher (read_teacher).

Fields:
  directory: --teacher_dir.
  files: its serving/model_files.ModelFiles.
  checkpoint, why: the checkpoint to distill from (best/, else the latest) and why.
  identity: checkpoint_identity(checkpoint).
  bert_config: its modeling.BertConfig.
"""


def prepare_teacher(kinds, settings, labels, bert_config, job_settings):
  """Reads and checks the teacher of a run that distills, and with --init_from_teacher_layers
  makes a new run start from it (start_from_teacher_layers).

  Args:
    kinds: the servable kinds the student's script trains (the teacher must be one).
    settings: the student's task settings (ClassifierSettings, NerSettings): their
      distillation options, model_settings(), vocab_file and max_seq_length.
    labels: the student's label list, in id order.
    bert_config: the student's modeling.BertConfig.
    job_settings: the run's JobSettings (its output_dir; its start may be set).

  Returns:
    The Teacher.

  Raises:
    UsageError: read_teacher's, check_matches_student's, layer_prefixes' and
      check_resumed_student's refusals.
  """
  options, output_dir = settings.distillation, job_settings.output_dir
  if _same_or_inside(options.teacher_dir, output_dir):
    raise UsageError("--teacher_dir=%s and --output_dir=%s overlap: the student would "
                     "overwrite its teacher; give the student an output_dir of its own." %
                     (options.teacher_dir, output_dir))
  teacher = read_teacher(options.teacher_dir, kinds, settings.max_seq_length)
  check_matches_student(teacher, settings.model_settings(), labels, settings.vocab_file)
  check_resumed_student(teacher, output_dir)
  if options.teacher_layers is not None:
    start_from_teacher_layers(job_settings, teacher, options.teacher_layers, bert_config)
  return teacher


def _same_or_inside(directory, other):
  """Whether two directories are one, or one holds the other."""
  first, second = (os.path.realpath(path) for path in (directory, other))
  return first == second or (first + os.sep).startswith(second + os.sep) or \
      (second + os.sep).startswith(first + os.sep)


def read_teacher(teacher_dir, kinds, max_seq_length):
  """The teacher in `teacher_dir`: its model files and the checkpoint to distill from.

  Args:
    teacher_dir: --teacher_dir, a trained output_dir.
    kinds: the servable kinds the student's script trains (the teacher must be one).
    max_seq_length: the student's (the teacher's config must allow it).

  Returns:
    The Teacher.

  Raises:
    UsageError: no such directory, files missing, another kind, or no checkpoint.
  """
  if not os.path.isdir(teacher_dir):
    raise UsageError("--teacher_dir=%s: no such directory; give the output_dir of a trained "
                     "teacher." % teacher_dir)
  files = model_files.find_model_files(
      teacher_dir, "give the --output_dir of a teacher trained with --do_train.", kinds)
  try:
    checkpoint, why = checkpoints.checkpoint_for_inference(
        teacher_dir, None, checkpoints.BEST_SUBDIR, output_dir_flag="--teacher_dir")
  except UsageError:
    raise UsageError("--teacher_dir=%s: no checkpoint there (neither in best/ nor a latest "
                     "one); train the teacher first (--do_train)." % teacher_dir)
  try:
    identity = checkpoint_identity(checkpoint)
  except OSError as e:
    raise UsageError("--teacher_dir=%s: cannot read %s.index (%s); check the teacher's "
                     "files." % (teacher_dir, checkpoint, e.strerror or e))
  bert_config = bert_files.load_bert_config(files.bert_config_file, max_seq_length)
  return Teacher(teacher_dir, files, checkpoint, why, identity, bert_config)


def check_resumed_student(teacher, output_dir):
  """Refuses to resume a student with another teacher checkpoint than the one whose outputs
  it trained on (the teacher trained on since, say): its targets would change mid-run.

  The outputs a run trained on are named in output_dir's distill-*.json
  (teacher_outputs.py); a new run (no checkpoint in output_dir) may take any teacher.
  """
  if not checkpoints.latest_checkpoint(output_dir):
    return
  used = teacher_outputs_identities(output_dir)
  if used and teacher.identity not in used:
    raise UsageError(
        "--teacher_dir=%s: %s is not the teacher checkpoint this student has trained on "
        "(%s), and --output_dir=%s resumes it; resume with that teacher, or start the "
        "student in a new output_dir." % (teacher.directory, teacher.checkpoint,
                                          ", ".join(sorted(used.values())), output_dir))


def teacher_outputs_identities(output_dir):
  """{teacher identity: its checkpoint path} of the teacher outputs kept in output_dir."""
  used = {}
  for name in sorted(os.listdir(output_dir)):
    if name.startswith(OUTPUTS_PREFIX) and name.endswith(".json"):
      try:
        with open(os.path.join(output_dir, name), encoding="utf-8") as f:
          info = json.load(f)
        used[info["teacher_identity"]] = info["teacher_checkpoint"]
      except (OSError, ValueError, KeyError, TypeError):
        continue  # not a complete record of outputs: nothing was trained on it
  return used


def check_matches_student(teacher, settings, labels, vocab_file):
  """Refuses a teacher whose outputs cannot teach this student.

  Args:
    teacher: a Teacher.
    settings: the student's model_settings.json dict (what its records are made with).
    labels: the student's label list, in id order.
    vocab_file: the student's vocab.

  Raises:
    UsageError: one line naming the first difference.
  """
  where = "--teacher_dir=%s" % teacher.directory
  theirs = teacher.files.settings
  for field in sorted(set(theirs) | set(settings)):
    if field in _FIELDS_NOT_COMPARED or theirs.get(field) == settings.get(field):
      continue
    raise UsageError("%s: the teacher's %s is %s, this run's %s; the teacher's outputs are "
                     "computed on this run's records, so give the student the teacher's "
                     "settings (its model_settings.json) or train a teacher with these." %
                     (where, field, _shown(theirs.get(field)), _shown(settings.get(field))))
  if list(teacher.files.labels) != list(labels):
    raise UsageError("%s: the teacher's labels are %s, this run's %s; labels and their order "
                     "must be the same (the teacher's labels.txt)." %
                     (where, _shown_list(teacher.files.labels), _shown_list(labels)))
  if model_files.read_utf8(teacher.files.vocab_file) != model_files.read_utf8(vocab_file):
    raise UsageError("%s: the teacher's vocab.txt differs from --vocab_file=%s; a student "
                     "reads the teacher's vocabulary: pass --vocab_file=%s." %
                     (where, vocab_file, teacher.files.vocab_file))


def _shown(value):
  """A model_settings.json value as an error message shows it."""
  if value is None:
    return "unset"
  if isinstance(value, bool):
    return str(value).lower()
  return repr(value) if isinstance(value, str) else str(value)


def _shown_list(values, most=6):
  shown = ", ".join(values[:most]) + (", ..." if len(values) > most else "")
  return "[%s] (%d)" % (shown, len(values))


def checkpoint_identity(checkpoint):
  """The sha256 (hex) of a checkpoint's .index file (raises OSError when unreadable).

  The index holds every tensor's name, shape, place and crc32c checksum, so another
  checkpoint (another run, another step, the same step retrained) has another identity,
  whatever its path; reading it costs milliseconds where hashing the weights would not.
  """
  with open(checkpoint + ".index", "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


def start_from_teacher_layers(job_settings, teacher, layers, student_config):
  """Makes a new run start from the teacher's checkpoint, the student's layer i read from
  teacher layer layers[i] (--init_from_teacher_layers): sets job_settings' init_checkpoint,
  init_checkpoint_prefixes and init_checkpoint_description (training/checkpoints.py reads
  them; a resumed run keeps its own checkpoint).

  Raises:
    UsageError: as layer_prefixes.
  """
  job_settings.init_checkpoint_prefixes = layer_prefixes(layers, teacher.bert_config,
                                                         student_config)
  job_settings.init_checkpoint = teacher.checkpoint
  job_settings.init_checkpoint_description = (
      "the teacher's %s (the student's layers 0, 1, ... from its layers %s, and its "
      "embeddings, pooler and head)" % (teacher.checkpoint, ",".join(str(layer)
                                                                     for layer in layers)))


def layer_prefixes(layers, teacher_config, student_config):
  """dict student variable prefix -> teacher variable prefix of --init_from_teacher_layers:
  student layer i starts from teacher layer layers[i] (the embeddings, pooler and head
  start from the teacher's under their own names).

  Args:
    layers: the teacher layers (options.parse_layers), one per student layer.
    teacher_config, student_config: their modeling.BertConfig.

  Raises:
    UsageError: a count or layer out of range, or a weight shape that differs.
  """
  flag = "--init_from_teacher_layers=%s" % ",".join(str(layer) for layer in layers)
  teacher_layers = teacher_config.num_hidden_layers
  for layer in layers:
    if not 0 <= layer < teacher_layers:
      raise UsageError("%s: the teacher has layers 0 to %d; layer %d is not one of them." %
                       (flag, teacher_layers - 1, layer))
  if len(layers) != student_config.num_hidden_layers:
    raise UsageError("%s: %d layers for a student of %d (num_hidden_layers in "
                     "--bert_config_file); give one teacher layer per student layer." %
                     (flag, len(layers), student_config.num_hidden_layers))
  for field in _SHAPE_FIELDS:
    theirs, ours = getattr(teacher_config, field), getattr(student_config, field)
    if theirs != ours:
      raise UsageError("%s: the teacher's %s is %s, the student's %s; copied weights keep "
                       "their shapes, so the student's --bert_config_file must have the "
                       "teacher's %s." % (flag, field, theirs, ours, field))
  return collections.OrderedDict((_LAYER_SCOPE % i, _LAYER_SCOPE % layer)
                                 for i, layer in enumerate(layers))
