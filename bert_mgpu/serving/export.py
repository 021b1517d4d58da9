# coding=utf-8
"""SavedModel export: a trained model of any kind (its signature is its kind's,
serving/kinds.py) into the next version directory, with its model files in assets.extra/
(export_versions.py, docs/SERVING.md).
"""

import os
import shutil
import time

import tensorflow.compat.v1 as tf

from bert_mgpu.data.output_files import atomic_write_text
from bert_mgpu.errors import write_error
from bert_mgpu.serving import export_versions
from bert_mgpu.serving import model_files
from bert_mgpu.serving import onnx_export
from bert_mgpu.serving import serving_graph
from bert_mgpu.training import weight_averages


def format_description(export_format):
  """What an export of onnx_export.ExportFormat writes, for the log."""
  parts = []
  if onnx_export.writes_savedmodel(export_format.name):
    parts.append("a SavedModel")
  if onnx_export.writes_onnx(export_format.name):
    parts.append("an ONNX model" + (" (and its int8 quantization)"
                                    if export_format.onnx_int8 else ""))
  return " and ".join(parts)


# ---------------------------------------------------------------------------
# Writing an export
# ---------------------------------------------------------------------------


def _write_saved_model(path, graph, checkpoint, inputs, outputs):
  """Restores `checkpoint` into `graph` and saves it as a SavedModel at `path`."""
  with tf.Session(graph=graph) as sess:
    weight_averages.restore_saver(checkpoint, tf.global_variables()).restore(sess, checkpoint)
    builder = tf.saved_model.builder.SavedModelBuilder(path)
    signature = tf.saved_model.signature_def_utils.predict_signature_def(
        inputs=inputs, outputs=outputs)
    builder.add_meta_graph_and_variables(
        sess, [tf.saved_model.tag_constants.SERVING],
        signature_def_map={
            tf.saved_model.signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY: signature},
        strip_default_attrs=True)
    builder.save()


_TEMP_PREFIX = ".tmp-export-"

# An empty numbered directory older than this is a crash's leftover, not a claim in progress
# (an export renames its temp directory onto its claim microseconds after the mkdir).
_STALE_CLAIM_SECONDS = 60


def _pid_alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True  # another user's process
  return True


def remove_export_leftovers(export_base):
  """Removes what crashed exports left in `export_base`.

  That is: `.tmp-export-<pid>` directories of processes no longer running (or of this one),
  and empty numbered directories older than _STALE_CLAIM_SECONDS (a crash between claiming
  the number and the rename), which TF Serving would otherwise try to load.
  """
  for name in os.listdir(export_base):
    path = os.path.join(export_base, name)
    if name.startswith(_TEMP_PREFIX) and name[len(_TEMP_PREFIX):].isdigit():
      pid = int(name[len(_TEMP_PREFIX):])
      if pid == os.getpid() or not _pid_alive(pid):
        tf.logging.info("Removing %s, left by a crashed export.", path)
        shutil.rmtree(path, ignore_errors=True)  # another export may be removing it too
    elif (name.isdigit() and os.path.isdir(path) and not os.listdir(path) and
          time.time() - os.path.getmtime(path) > _STALE_CLAIM_SECONDS):
      tf.logging.warning("Removing the empty version directory %s, left by a crashed export.",
                         path)
      try:
        os.rmdir(path)
      except OSError:
        pass  # filled or removed meanwhile by another export


def _claim_version_dir(export_base, temp_dir):
  """Renames `temp_dir` to the next free version number under `export_base`; returns it.

  The number follows every numbered directory, complete or not, so that a number TF Serving
  may have seen is never reused.
  """
  version = (export_versions.version_numbers(export_base) or [0])[-1] + 1
  while True:
    target = os.path.join(export_base, str(version))
    try:
      # os.rename replaces an empty directory silently: claim the name with mkdir first.
      os.mkdir(target)
    except FileExistsError:
      version += 1
      continue
    os.rename(temp_dir, target)
    return target


def export_model(export_base, model, export_format=onnx_export.ExportFormat()):
  """Writes a SavedModel of a trained model (and, as export_format says, an ONNX model) into
  the next version directory of export_base, with the model files in assets.extra/. What
  the signature returns is the kind's (its graph().signature_outputs; docs/SERVING.md).

  Args:
    export_base: the --export_dir (created if missing).
    model: predictor.LoadedModel of the weights to export.
    export_format: onnx_export.ExportFormat.

  Returns:
    The version directory written.

  Raises:
    UsageError: the checkpoint does not match the model, or export_base cannot be written.
  """
  files = model.files
  kind_graph = files.kind.graph()
  return export_saved_model(
      export_base, files, model.checkpoint,
      lambda inputs: kind_graph.signature_outputs(model, inputs), export_format,
      kind_graph.onnx_output_names(files),
      kind_graph.export_assets(files, model.checkpoint, export_format))


def export_saved_model(export_base, files, checkpoint, build_outputs,
                       export_format=onnx_export.ExportFormat(), onnx_outputs=(),
                       extra_assets=None):
  """Writes a SavedModel, an ONNX model or both into the next version directory of
  export_base (any kind).

  Args:
    export_base: the --export_dir (created if missing).
    files: model_files.ModelFiles of the trained model; they go into assets.extra/.
    checkpoint: the weights to export.
    build_outputs: builds the model on the dict of int32 placeholders input_ids,
      input_mask and segment_ids ([batch, seq], or of the kind's input_rank); returns the
      signature's outputs (a dict).
    export_format: onnx_export.ExportFormat.
    onnx_outputs: the signature outputs the ONNX model keeps (the numeric ones the head's
      client needs).
    extra_assets: dict file name -> text, more files for assets.extra/.

  Returns:
    The version directory written.

  Raises:
    UsageError: the checkpoint does not match the model, or export_base cannot be written.
  """
  graph = tf.Graph()
  with graph.as_default():
    inputs = serving_graph.serving_inputs(rank=files.kind.input_rank(files.settings))
    outputs = build_outputs(inputs)
    serving_graph.check_checkpoint_variables(checkpoint, files.labels_file, files.kind)
  try:
    os.makedirs(export_base, exist_ok=True)
  except OSError as e:
    raise write_error(export_base, e)
  temp_dir = os.path.join(export_base, "%s%d" % (_TEMP_PREFIX, os.getpid()))
  try:
    remove_export_leftovers(export_base)
    if onnx_export.writes_savedmodel(export_format.name):
      _write_saved_model(temp_dir, graph, checkpoint, inputs, outputs)
    else:
      os.mkdir(temp_dir)
    if onnx_export.writes_onnx(export_format.name):
      with tf.Session(graph=graph) as sess:
        weight_averages.restore_saver(checkpoint, tf.global_variables()).restore(sess, checkpoint)
        onnx_export.write_onnx(sess, inputs, {name: outputs[name] for name in
                                              onnx_outputs}, temp_dir,
                               export_format.onnx_int8)
    assets = export_versions.assets_dir(temp_dir)
    os.mkdir(assets)
    for name, text in (extra_assets or {}).items():
      atomic_write_text(os.path.join(assets, name), text)
    model_files.save_model_files(assets, files.vocab_file, files.bert_config_file,
                                 files.settings)
    files.kind.write_assets(assets, files)
    return _claim_version_dir(export_base, temp_dir)
  except (OSError, tf.errors.OpError) as e:
    raise write_error(export_base, e)
  finally:
    if os.path.exists(temp_dir):
      tf.gfile.DeleteRecursively(temp_dir)
