# coding=utf-8
"""The files a trained model needs beside its weights, and the check that weights belong to it.

A trained model is complete when its directory holds, beside the weights:

  vocab.txt            the WordPiece vocab it was trained with
  bert_config.json     its BERT config
  labels.txt           the label (tag) list, in label-id order (for a kind with labels)
  model_settings.json  {"model": <its kind>, "do_lower_case", "max_seq_length", ...}: the
                       fields its kind needs (serving/kinds.py; e.g. classifier/serving.py,
                       ner/serving.py)

The training scripts write them into output_dir with --do_train; an export carries them in
its assets.extra/ directory (export.py, docs/SERVING.md), so either is enough to serve.

No TensorFlow import: predict_text.py --backend=onnxruntime reads these files without it.
"""

import collections
import json
import os

from bert_mgpu.data import label_files
from bert_mgpu.data.output_files import atomic_write_text
from bert_mgpu.errors import UsageError
from bert_mgpu.serving import kinds as servable_kinds

VOCAB_FILE = "vocab.txt"
CONFIG_FILE = "bert_config.json"
LABELS_FILE = label_files.LABELS_FILE
SETTINGS_FILE = "model_settings.json"
ASSET_FILES = (VOCAB_FILE, CONFIG_FILE, LABELS_FILE, SETTINGS_FILE)


def any_kind():
  """Every kind predict_text.py serves."""
  return tuple(servable_kinds.names())


# ---------------------------------------------------------------------------
# The files a model needs: vocab, config, labels and tokenizer settings
# ---------------------------------------------------------------------------

def read_utf8(path):
  with open(path, "r", encoding="utf-8", newline="") as f:
    return f.read()


def save_model_files(directory, vocab_file, bert_config_file, settings):
  """Copies the vocab and the config into `directory` and writes model_settings.json there.

  Each file is written atomically; labels.txt is written by the caller (it is the task's).

  Args:
    directory: an existing directory (output_dir, or an export's assets.extra).
    vocab_file, bert_config_file: the files the model was trained with.
    settings: the model_settings.json dict (its kind's, e.g.
      classifier/serving.classifier_settings()).
  """
  for source, name in ((vocab_file, VOCAB_FILE), (bert_config_file, CONFIG_FILE)):
    target = os.path.join(directory, name)
    if os.path.abspath(source) != os.path.abspath(target):
      atomic_write_text(target, read_utf8(source))
  atomic_write_text(os.path.join(directory, SETTINGS_FILE),
                    json.dumps(settings, indent=2) + "\n")


def _load_settings(path):
  """Parses a model_settings.json, once for every use of it in one load.

  Args:
    path: the file.

  Returns:
    (settings, error): the parsed JSON and None, or None and the OSError or ValueError that
    reading it raised (_checked_settings words it).
  """
  try:
    return json.loads(read_utf8(path)), None
  except (OSError, ValueError) as e:
    return None, e


def read_settings(path, kinds=None):
  """Reads and checks a model_settings.json. Raises UsageError.

  Args:
    path: the file.
    kinds: the `model` values the caller takes (kind names; None: any servable kind); another
      one is a one-line error naming it.
  """
  return _checked_settings(path, _load_settings(path), kinds)


def _checked_settings(path, loaded, kinds):
  """read_settings of a file already loaded: `loaded` is _load_settings(path)."""
  kinds = any_kind() if kinds is None else tuple(kinds)
  script = servable_kinds.scripts_of(kinds)
  settings, error = loaded
  if error is not None:
    raise UsageError("%s: cannot read it as JSON (%s); export the model again with "
                     "%s --export_dir." % (path, error, script))
  missing = [key for key in ("model", "do_lower_case", "max_seq_length")
             if not isinstance(settings, dict) or key not in settings]
  if missing:
    raise UsageError("%s lacks %s; export the model again with %s --export_dir." %
                     (path, ", ".join(missing), script))
  if settings["model"] not in kinds:
    raise UsageError("%s says this is a %r model, not %s: give the output_dir or export of a "
                     "%s model." % (path, settings["model"], " or ".join(
                         servable_kinds.describe(kind) for kind in kinds), script))
  kind = servable_kinds.checked(settings["model"], path)
  missing = [key for key in kind.settings_fields if key not in settings]
  if missing:
    raise UsageError("%s lacks %s; export the model again with %s --export_dir." %
                     (path, ", ".join(missing), kind.script))
  return settings


class ModelFiles(collections.namedtuple(
    "ModelFiles", ["vocab_file", "bert_config_file", "labels_file", "settings", "labels",
                   "assets"])):
  """The checked files of a trained model.

  Fields:
    vocab_file, bert_config_file, labels_file: paths (labels_file None for a kind without
      labels).
    settings: the model_settings.json dict; settings["model"] names its kind.
    labels: the label list, in label-id order ([] for a kind without labels).
    assets: dict of what the kind read beside them (ServableKind.read_assets), e.g. a
      multi-label classifier's thresholds.
  """

  __slots__ = ()

  @property
  def kind(self):
    """The model's serving/kinds.ServableKind."""
    return servable_kinds.get(self.settings["model"])


def model_files(vocab_file, bert_config_file, labels_file, settings):
  """ModelFiles of files given one by one (the labels file is read, by the reader of the
  settings' kind). Raises UsageError."""
  kind = servable_kinds.checked(settings["model"], SETTINGS_FILE)
  labels = []
  if kind.has_labels:
    if not os.path.isfile(labels_file):
      raise UsageError("%s: file not found: the label list of the model is missing; train "
                       "with %s --do_train, which writes it." % (labels_file, kind.script))
    labels = kind.read_labels(labels_file)
  else:
    labels_file = None
  directory = os.path.dirname(labels_file or vocab_file)
  return ModelFiles(vocab_file, bert_config_file, labels_file, settings, labels,
                    kind.read_assets(directory, settings, labels))


def _needs_file(directory, name, loaded):
  """Whether a complete model in `directory` has the file `name`: labels.txt only for a
  kind with labels (when the settings cannot be read, the settings check says why).

  Args:
    directory: the model's directory.
    name: one of ASSET_FILES.
    loaded: _load_settings of the directory's model_settings.json.
  """
  if name != LABELS_FILE:
    return True
  if not os.path.isfile(os.path.join(directory, SETTINGS_FILE)):
    # The kind is unknown, so whether it has labels too: name the missing settings file
    # (a kind without labels, e.g. reading comprehension, was told labels.txt was missing).
    return False
  settings, error = loaded
  if error is not None:
    return True
  try:
    kind = servable_kinds.get(settings["model"])
  except (KeyError, TypeError):
    return True
  return kind is None or kind.has_labels


def find_model_files(directory, advice, kinds=None):
  """The model files in `directory` (output_dir or an export's assets.extra), checked.

  Args:
    directory: the directory.
    advice: what to do when a file is missing (ends the error message).
    kinds: the kinds of model the caller takes (read_settings; None: any).

  Raises:
    UsageError: a file is missing or unreadable, or the model is of another kind.
  """
  kinds = any_kind() if kinds is None else tuple(kinds)
  settings_path = os.path.join(directory, SETTINGS_FILE)
  # Read once: it says whether labels.txt is needed, and then it is checked.
  loaded = _load_settings(settings_path)
  for name in ASSET_FILES:
    if (_needs_file(directory, name, loaded) and
        not os.path.isfile(os.path.join(directory, name))):
      raise UsageError("%s has no %s: it is not a complete %s model; %s" %
                       (directory, name, _complete_model_noun(kinds), advice))
  settings = _checked_settings(settings_path, loaded, kinds)
  return model_files(os.path.join(directory, VOCAB_FILE),
                     os.path.join(directory, CONFIG_FILE),
                     os.path.join(directory, LABELS_FILE), settings)


def _complete_model_noun(kinds):
  """"classifier" when the caller takes one kind that names itself so, else "trained"."""
  kind = servable_kinds.get(kinds[0]) if len(kinds) == 1 else None
  return kind.model_noun if kind is not None else "trained"


def has_model_files(directory):
  loaded = _load_settings(os.path.join(directory, SETTINGS_FILE))
  return all(os.path.isfile(os.path.join(directory, name)) for name in ASSET_FILES
             if _needs_file(directory, name, loaded))
