# coding=utf-8
"""Semantic search over a corpus: its unit vectors in a faiss index (flat or HNSW), kept on
disk under a key of the model and the corpus, and the nearest lines of each query.

faiss (the faiss-cpu package) is an optional extra, imported only here and only when a
corpus is searched. No TensorFlow import.

On disk, an index is one directory of --index_dir, named by the hash of its key:

  key.json     what it was built from (index_key): a rerun with the same key loads it
  index.faiss  the faiss index, vector i the i-th kept corpus line
  lines.jsonl  {"line": 0-based line number in the corpus, "text"} of each vector, in order

It is built in a temporary directory beside it and renamed into place, so a reader never
sees half an index, and of two processes building the same one, the first rename wins and
the other loads it.
"""

import collections
import hashlib
import json
import logging
import os
import shutil
import tempfile

import numpy as np

from bert_mgpu.data.output_files import atomic_write_text
from bert_mgpu.errors import UsageError

_LOGGER = logging.getLogger("tensorflow")

FLAT, HNSW = "flat", "hnsw"
INDEX_TYPES = (FLAT, HNSW)
DEFAULT_TOP_K = 10
# The most hits a query may ask for (top_k): beyond it a reply is a corpus dump, not a search.
MAX_TOP_K = 1000
DEFAULT_HNSW_M = 32
DEFAULT_EF_SEARCH = 128
# --max_index_memory_gb's default.
DEFAULT_MAX_INDEX_GB = 8.0
KEY_FILE, INDEX_FILE, LINES_FILE = "key.json", "index.faiss", "lines.jsonl"
INSTALL_FAISS = "pip install faiss-cpu"

Hit = collections.namedtuple("Hit", ["line", "text", "score"])
Hit.__doc__ = """One search result: the 0-based corpus line, its text, its cosine (float)."""


def import_faiss():
  """The faiss module. Raises UsageError naming the package when it does not import."""
  # Its loader logs each CPU-specific build it does not find; only its warnings matter.
  logging.getLogger("faiss.loader").setLevel(logging.WARNING)
  try:
    import faiss  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise UsageError("--corpus_file needs faiss, which does not import here (%s): install "
                     "it with `%s` (or the [search] extra)." % (" ".join(str(e).split()),
                                                                 INSTALL_FAISS))
  return faiss


def index_bytes(count, dim, index_type, hnsw_m=DEFAULT_HNSW_M):
  """The memory an index of `count` float32 vectors of `dim` holds, in bytes.

  Flat keeps the vectors (4 * dim each). faiss's HNSW adds its graph: 2 * M int32 neighbours
  on level 0, M on each upper level (a vector reaches 1 / (M - 1) upper levels on average),
  an 8-byte offset and a 4-byte level per vector.
  """
  per_vector = 4 * dim
  if index_type == HNSW:
    per_vector += 4 * (2 * hnsw_m + hnsw_m / (hnsw_m - 1.0)) + 12
  return int(count * per_vector)


def building_bytes(count, dim, index_type, hnsw_m=DEFAULT_HNSW_M):
  """The peak memory of building an index: the encoded vectors beside the index's copy."""
  return 4 * count * dim + index_bytes(count, dim, index_type, hnsw_m)


def readable_size(size):
  """Bytes in GB, MB or kB, for messages."""
  for unit, scale in (("GB", 1e9), ("MB", 1e6)):
    if size >= scale:
      return "%.2f %s" % (size / scale, unit)
  return "%.1f kB" % (size / 1e3)


def check_memory(count, dim, index_type, hnsw_m, max_gb, corpus_file):
  """Raises UsageError, before anything is encoded, when building the index of `count`
  vectors would take more than max_gb GB."""
  needed = building_bytes(count, dim, index_type, hnsw_m)
  if needed > max_gb * 1e9:
    raise UsageError("%s: %d texts need %s to index (%s, %d dimensions: %s for the index, "
                     "the rest while encoding), over --max_index_memory_gb=%g: raise it, or "
                     "split the corpus." % (
                         corpus_file, count, readable_size(needed), index_type, dim,
                         readable_size(index_bytes(count, dim, index_type, hnsw_m)), max_gb))


def unit_rows(vectors):
  """float32 [n, dim] rows scaled to length 1 (a zero row stays zero)."""
  vectors = np.asarray(vectors, np.float32)
  norms = np.linalg.norm(vectors, axis=1, keepdims=True)
  return np.ascontiguousarray(vectors / np.maximum(norms, 1e-12), np.float32)


def file_sha256(path):
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def index_key(model, corpus_sha256, index_type, hnsw_m):
  """What an index is built from: dict. `model` is a dict of the model's part (the weights
  file, backend, pooling, normalisation, max_seq_length: EmbeddingPredictor.model_key)."""
  key = collections.OrderedDict(sorted(model.items()))
  key["corpus_sha256"] = corpus_sha256
  key["index"] = index_type
  if index_type == HNSW:
    key["hnsw_m"] = hnsw_m  # efSearch is set when loading, not part of the key
  return key


def _key_name(key):
  return hashlib.sha256(json.dumps(key, sort_keys=True).encode("utf-8")).hexdigest()[:16]


class CorpusIndex(object):
  """A corpus's kept lines and their index.

  Attributes:
    lines: int [n], each vector's 0-based corpus line.
    texts: list of n str.
    index: the faiss index (inner product over unit vectors).
    directory: where it is kept.
  """

  def __init__(self, index, lines, texts, directory):
    self.index, self.lines, self.texts = index, np.asarray(lines, np.int64), texts
    self.directory = directory

  def __len__(self):
    return len(self.texts)

  def search(self, queries, top_k):
    """The hits of each query: by score descending, then line ascending.

    Args:
      queries: float32 [q, dim] (normalised here).
      top_k: hits per query; more than the corpus gives the whole corpus.

    Returns:
      list (per query) of lists of Hit.
    """
    k = min(top_k, len(self))
    if k == 0 or not len(queries):
      return [[] for _ in range(len(queries))]
    queries = unit_rows(queries)
    fetched = k
    while True:
      scores, ids = self.index.search(queries, fetched)
      # A tie at the k-th score may continue past what was fetched; ties go to the lower
      # line, so fetch until the last fetched score is below the k-th of every query.
      if fetched >= len(self) or np.all(scores[:, fetched - 1] < scores[:, k - 1]):
        break
      fetched = min(len(self), 2 * fetched)
    results = []
    for row_scores, row_ids in zip(scores, ids):
      found = [(float(s), int(i)) for s, i in zip(row_scores, row_ids) if i >= 0]
      found.sort(key=lambda hit: (-hit[0], hit[1]))  # ids follow the lines' order
      results.append([Hit(int(self.lines[i]), self.texts[i], s) for s, i in found[:k]])
    return results


def build_index(vectors, index_type, hnsw_m):
  """A faiss index of unit vectors float32 [n, dim] (inner product)."""
  faiss = import_faiss()
  dim = vectors.shape[1]
  if index_type == FLAT:
    index = faiss.IndexFlatIP(dim)
  else:
    index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
  index.add(unit_rows(vectors))
  return index


def _read(directory, ef_search):
  faiss = import_faiss()
  index = faiss.read_index(os.path.join(directory, INDEX_FILE))
  if hasattr(index, "hnsw"):
    index.hnsw.efSearch = ef_search
  lines, texts = [], []
  with open(os.path.join(directory, LINES_FILE), encoding="utf-8") as f:
    for line in f:
      record = json.loads(line)
      lines.append(record["line"])
      texts.append(record["text"])
  return CorpusIndex(index, lines, texts, directory)


def _why_rebuilt(index_dir, key):
  """Which part of the key differs from the newest index kept for the same corpus file."""
  newest, newest_time = None, -1.0
  for name in os.listdir(index_dir):
    path = os.path.join(index_dir, name, KEY_FILE)
    if not name.startswith(".") and os.path.isfile(path):
      try:
        with open(path, encoding="utf-8") as f:
          kept = json.load(f)
      except (OSError, ValueError):
        continue
      same_file = kept.get("corpus_file") == key.get("corpus_file")
      if same_file and os.path.getmtime(path) > newest_time:
        newest, newest_time = kept, os.path.getmtime(path)
  if newest is None:
    return "no index of %s in %s yet" % (key.get("corpus_file"), index_dir)
  changed = [name for name in sorted(set(key) | set(newest))
             if key.get(name) != newest.get(name)]
  return "the kept index of this corpus file differs in %s" % ", ".join(changed)


def load_or_build(index_dir, key, encode_corpus, index_type, hnsw_m, ef_search):
  """The index of `key` in index_dir: loaded when kept, else built and kept.

  Args:
    index_dir: the directory of kept indexes (created when missing).
    key: index_key(), with "corpus_file" (for the log only).
    encode_corpus: function() -> (lines, texts, vectors float32 [n, dim]).
    index_type, hnsw_m, ef_search: the index's.

  Returns:
    CorpusIndex.

  Raises:
    UsageError: index_dir cannot be written.
  """
  import_faiss()  # before any encoding
  try:
    os.makedirs(index_dir, exist_ok=True)
  except OSError as e:
    raise UsageError("--index_dir=%s: cannot create it (%s)." % (index_dir, e))
  directory = os.path.join(index_dir, _key_name(key))
  if os.path.isfile(os.path.join(directory, KEY_FILE)):
    _LOGGER.info("Loading the corpus index kept in %s (same model and corpus).", directory)
    return _read(directory, ef_search)
  _LOGGER.info("Building the corpus index: %s.", _why_rebuilt(index_dir, key))
  lines, texts, vectors = encode_corpus()
  index = build_index(vectors, index_type, hnsw_m)
  try:
    building = tempfile.mkdtemp(prefix=".building-", dir=index_dir)
  except OSError as e:
    raise UsageError("--index_dir=%s: cannot write there (%s)." % (index_dir, e))
  try:
    import_faiss().write_index(index, os.path.join(building, INDEX_FILE))
    atomic_write_text(os.path.join(building, LINES_FILE), "".join(
        json.dumps({"line": int(n), "text": t}, ensure_ascii=False) + "\n"
        for n, t in zip(lines, texts)))
    # Last: a directory holding key.json is complete.
    atomic_write_text(os.path.join(building, KEY_FILE), json.dumps(key, indent=2) + "\n")
    try:
      os.rename(building, directory)
    except OSError:
      if not os.path.isfile(os.path.join(directory, KEY_FILE)):
        raise
      _LOGGER.info("Another process kept the same index in %s first; using it.", directory)
  except (OSError, RuntimeError) as e:
    raise UsageError("--index_dir=%s: cannot keep the index there (%s)." % (index_dir, e))
  finally:
    shutil.rmtree(building, ignore_errors=True)
  _LOGGER.info("Kept the corpus index (%d vectors, %s) in %s.", len(texts), index_type,
               directory)
  if index_type == HNSW:
    index.hnsw.efSearch = ef_search
  return CorpusIndex(index, lines, texts, directory)
