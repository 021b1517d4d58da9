# coding=utf-8
"""transformers' weight files: model.safetensors (written and read through the `safetensors`
package's NumPy API), its sharded form, and pytorch_model.bin (read through torch).

`safetensors` is an optional extra (pip install ".[transformers]" in the repo; its 0.4.5 release
has a Python 3.7 wheel, so TF 1.15 converts too). torch is needed only to read a .bin file.
Every array comes out as float32 NumPy: float16 is widened, and bfloat16, which NumPy has no
type for, is read from the file's bytes (the top 16 bits of a float32).
"""

import json
import os
import struct

import numpy as np

from bert_mgpu.errors import UsageError

SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX_FILE = "model.safetensors.index.json"
PYTORCH_FILE = "pytorch_model.bin"
PYTORCH_INDEX_FILE = "pytorch_model.bin.index.json"
WEIGHT_FILES = (SAFETENSORS_FILE, SAFETENSORS_INDEX_FILE, PYTORCH_FILE, PYTORCH_INDEX_FILE)

_INSTALL = ('pip install safetensors (the [transformers] extra: pip install ".[transformers]" '
            'in the repo)')


def _safetensors_numpy():
  """The safetensors package's NumPy API, or a one-line UsageError saying how to install it."""
  try:
    from safetensors import numpy as safetensors_numpy  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise UsageError("converting to or from transformers' format needs the safetensors "
                     "package, which is not installed: %s." % _INSTALL)
  return safetensors_numpy


def check_safetensors_installed():
  """Raises UsageError unless the safetensors package can be imported."""
  _safetensors_numpy()


def write_safetensors(arrays, path):
  """Writes dict name -> array as a safetensors file (with transformers' "format": "pt"
  metadata, which its loader expects). Arrays are written float32 and contiguous."""
  safetensors_numpy = _safetensors_numpy()
  safetensors_numpy.save_file(
      {name: np.ascontiguousarray(array, dtype=np.float32) for name, array in arrays.items()},
      path, metadata={"format": "pt"})


def _safetensors_header(path):
  """The JSON header of a safetensors file and the offset where its data starts."""
  with open(path, "rb") as f:
    size_bytes = f.read(8)
    if len(size_bytes) != 8:
      raise UsageError("%s: not a safetensors file (shorter than its 8-byte header size)."
                       % path)
    (size,) = struct.unpack("<Q", size_bytes)
    try:
      header = json.loads(f.read(size).decode("utf-8"))
    except ValueError as e:
      raise UsageError("%s: not a safetensors file (its header is not JSON: %s)." % (path, e))
  return header, 8 + size


def _read_bfloat16(path, names):
  """The bfloat16 arrays `names` of a safetensors file, as float32."""
  header, data_start = _safetensors_header(path)
  arrays = {}
  with open(path, "rb") as f:
    for name in names:
      begin, end = header[name]["data_offsets"]
      f.seek(data_start + begin)
      raw = np.frombuffer(f.read(end - begin), dtype="<u2")
      arrays[name] = (raw.astype(np.uint32) << 16).view(np.float32).reshape(
          header[name]["shape"])
  return arrays


def read_safetensors(path):
  """dict name -> float32 array of one safetensors file. Raises UsageError."""
  header, _ = _safetensors_header(path)
  bfloat16 = [name for name, info in header.items()
              if name != "__metadata__" and info.get("dtype") == "BF16"]
  safetensors_numpy = _safetensors_numpy()
  if bfloat16:
    # The NumPy API refuses a file with any bfloat16 array: read them all from the bytes.
    # Integer buffers (position_ids of older files) are not weights: left out.
    others = [name for name, info in header.items() if name != "__metadata__" and
              name not in bfloat16 and info.get("dtype", "")[:1] not in ("I", "U")]
    if others:
      raise UsageError("%s mixes bfloat16 with other dtypes (%s): save it in one dtype."
                       % (path, others[0]))
    return _read_bfloat16(path, bfloat16)
  try:
    arrays = safetensors_numpy.load_file(path)
  except Exception as e:  # pylint: disable=broad-except
    raise UsageError("%s: cannot read it as safetensors (%s)." % (path, e))
  return {name: _as_float32(path, name, array) for name, array in arrays.items()}


def _as_float32(path, name, array):
  if array.dtype.kind != "f" and array.dtype.kind not in "iu":
    raise UsageError("%s: %s has dtype %s, not a number." % (path, name, array.dtype))
  # Integer buffers (position_ids) stay integers; the caller drops them.
  return array.astype(np.float32) if array.dtype.kind == "f" else array


def _read_pytorch(path):
  """dict name -> float32 array of a torch-pickled state dict (torch needed)."""
  try:
    import torch  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise UsageError("%s is a PyTorch file, which only torch can read, and torch is not "
                     "installed: pip install torch, or give the model's model.safetensors."
                     % path)
  try:
    state = torch.load(path, map_location="cpu", weights_only=True)
  except Exception as e:  # pylint: disable=broad-except
    raise UsageError("%s: torch cannot read it (%s)." % (path, e))
  arrays = {}
  for name, tensor in state.items():
    if tensor.is_floating_point():
      arrays[name] = tensor.detach().to(torch.float32).numpy()
    else:
      arrays[name] = tensor.detach().numpy()
  return arrays


def _read_index(directory, index_file, read):
  """The arrays of a sharded checkpoint: each file its index's weight_map names, once."""
  path = os.path.join(directory, index_file)
  try:
    with open(path, "r", encoding="utf-8") as f:
      weight_map = json.load(f)["weight_map"]
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise UsageError("%s: cannot read its weight_map (%s)." % (path, e))
  arrays = {}
  for shard in sorted(set(weight_map.values())):
    shard_path = os.path.join(directory, shard)
    if not os.path.isfile(shard_path):
      raise UsageError("%s names %s, which is not in %s: copy every shard of the model."
                       % (path, shard, directory))
    arrays.update(read(shard_path))
  return arrays


def read_weights(directory):
  """The weights of a transformers model directory, dict name -> array, and the file read.

  model.safetensors first, then its sharded index, then pytorch_model.bin and its index.

  Raises:
    UsageError: no weight file, or one that cannot be read.
  """
  readers = ((SAFETENSORS_FILE, read_safetensors), (PYTORCH_FILE, _read_pytorch))
  for file_name, read in readers:
    path = os.path.join(directory, file_name)
    if os.path.isfile(path):
      return read(path), path
    if os.path.isfile(path + ".index.json"):
      return _read_index(directory, file_name + ".index.json", read), path + ".index.json"
  raise UsageError("%s has no weights: expected %s (or %s). Give the directory that "
                   "transformers' save_pretrained wrote." % (directory, SAFETENSORS_FILE,
                                                             PYTORCH_FILE))
