# coding=utf-8
"""A run's distillation flags (--teacher_dir and the flags that go with it), defined once for
the scripts that distill, and checked before any work. No TensorFlow import."""

import collections

from bert_mgpu.errors import UsageError

_FLAGS_NEEDING_TEACHER = ("distill_temperature", "distill_alpha", "unlabeled_file",
                          "init_from_teacher_layers")


class DistillationOptions(collections.namedtuple(
    "DistillationOptions", ["teacher_dir", "temperature", "alpha", "unlabeled_file",
                            "teacher_layers"])):
  """What a run's distillation flags say.

  Fields:
    teacher_dir: the trained teacher's output_dir, or None (no distillation).
    temperature, alpha: --distill_temperature and --distill_alpha (distillation/losses.py).
    unlabeled_file: --unlabeled_file, or None.
    teacher_layers: --init_from_teacher_layers as a list of layer numbers, or None.
  """

  __slots__ = ()

  @property
  def distills(self):
    return bool(self.teacher_dir)


NO_DISTILLATION = DistillationOptions(None, 1.0, 0.5, None, None)


def define_flags(flags):
  """The distillation flags (docs/DISTILLATION.md)."""
  flags.DEFINE_string("teacher_dir", None, "Distill: train this run's model (the student) "
                      "from the predictions of a trained model of the same kind, the "
                      "output_dir given here (its best/ checkpoint, else its latest).")
  flags.DEFINE_float("distill_temperature", 1.0, "With --teacher_dir: the temperature T that "
                     "softens both models' predictions in the distillation term (its KL is "
                     "multiplied by T^2).")
  flags.DEFINE_float("distill_alpha", 0.5, "With --teacher_dir: the teacher's share a of a "
                     "labelled example's loss, a * T^2 * KL + (1 - a) * cross-entropy "
                     "(unlabelled examples: the KL term alone).")
  flags.DEFINE_string("unlabeled_file", None, "With --teacher_dir: more in-domain text "
                      "without labels, one example per line (text_a TAB text_b for pair "
                      "tasks), trained on the teacher's predictions alone.")
  flags.DEFINE_string("init_from_teacher_layers", None, "With --teacher_dir: start the "
                      "student from these teacher layers (e.g. 0,1,2, one per student layer) "
                      "and the teacher's embeddings, pooler and head. Without it the student "
                      "starts from --init_checkpoint or random weights.")


def from_flags(flag_values):
  """The DistillationOptions of the flags, checked. Raises UsageError.

  Refused: a distillation flag without --teacher_dir, a teacher without --do_train,
  --rdrop_alpha, --init_from_teacher_layers with --init_checkpoint, a temperature
  or alpha out of range, and layers that are not numbers.
  """
  if not flag_values.teacher_dir:
    for name in _FLAGS_NEEDING_TEACHER:
      if flag_values[name].present:
        raise UsageError("--%s is read only with --teacher_dir: add the teacher's output_dir, "
                         "or drop --%s." % (name, name))
    return NO_DISTILLATION
  where = "--teacher_dir=%s" % flag_values.teacher_dir
  if not flag_values.do_train:
    raise UsageError("%s teaches a student while it trains: add --do_train (a distilled "
                     "model evaluates, predicts and exports like any other)." % where)
  if flag_values.rdrop_alpha:
    raise UsageError("%s with --rdrop_alpha=%s: R-Drop's second pass has no teacher term; "
                     "use one of the two." % (where, flag_values.rdrop_alpha))
  if not 0.0 < flag_values.distill_temperature < float("inf"):
    raise UsageError("--distill_temperature=%s: give a temperature above 0 (1: the models' "
                     "own probabilities; 2 to 4 soften them)." %
                     flag_values.distill_temperature)
  if not 0.0 <= flag_values.distill_alpha <= 1.0:
    raise UsageError("--distill_alpha=%s: give a weight from 0 to 1 (the teacher's share of a "
                     "labelled example's loss; 1: the teacher alone)." %
                     flag_values.distill_alpha)
  layers = None
  if flag_values.init_from_teacher_layers is not None:
    if flag_values.init_checkpoint:
      raise UsageError("--init_from_teacher_layers and --init_checkpoint both say where the "
                       "student starts: give one of them.")
    layers = parse_layers(flag_values.init_from_teacher_layers)
  return DistillationOptions(flag_values.teacher_dir, flag_values.distill_temperature,
                             flag_values.distill_alpha, flag_values.unlabeled_file, layers)


def parse_layers(text):
  """The teacher layers of --init_from_teacher_layers ("0,1,2"). Raises UsageError."""
  try:
    layers = [int(part) for part in text.split(",")]
  except ValueError:
    raise UsageError("--init_from_teacher_layers=%s: give teacher layer numbers separated "
                     "by commas, counting from 0, e.g. 0,1,2 or 0,4,8." % text)
  if len(set(layers)) != len(layers):
    raise UsageError("--init_from_teacher_layers=%s: a teacher layer is named twice; give "
                     "each once." % text)
  return layers
