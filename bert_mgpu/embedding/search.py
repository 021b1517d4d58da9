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
sees half an index. A lock file per key makes a second process building the same index wait
for the first and load its result rather than encode the corpus again.
"""

import collections
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile

import numpy as np

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
# Key fields that name the index's source for the log but do not make it another index.
_LOG_ONLY_KEY_FIELDS = ("corpus_file",)
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
                     "it with `%s` (Python 3.10 or newer; or the [search] extra)." % (
                         " ".join(str(e).split()), INSTALL_FAISS))
  return faiss


# ---------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------

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
  """The peak memory of building an index: the encoded vectors (one array, normalised in
  place) beside the index's own copy."""
  return 4 * count * dim + index_bytes(count, dim, index_type, hnsw_m)


def readable_size(size):
  """Bytes in GB, MB or kB, for messages."""
  for unit, scale in (("GB", 1e9), ("MB", 1e6)):
    if size >= scale:
      return "%.2f %s" % (size / scale, unit)
  return "%.1f kB" % (size / 1e3)


def check_memory(count, dim, index_type, hnsw_m, max_gb, corpus_file, building=True):
  """Raises UsageError, before anything is encoded (or loaded), when building (or loading)
  the index of `count` vectors would take more than max_gb GB."""
  needed = (building_bytes if building else index_bytes)(count, dim, index_type, hnsw_m)
  if needed > max_gb * 1e9:
    raise UsageError("%s: %d texts need %s to %s (%s, %d dimensions: %s for the index%s), "
                     "over --max_index_memory_gb=%g: raise it, or split the corpus." % (
                         corpus_file, count, readable_size(needed),
                         "index" if building else "load their index", index_type, dim,
                         readable_size(index_bytes(count, dim, index_type, hnsw_m)),
                         ", the rest while encoding" if building else "", max_gb))


# ---------------------------------------------------------------------------
# The index and its search
# ---------------------------------------------------------------------------

def unit_rows(vectors):
  """float32 [n, dim] rows scaled to length 1 (a zero row stays zero), as a new array."""
  vectors = np.array(vectors, np.float32)
  normalize_in_place(vectors)
  return vectors


def normalize_in_place(vectors):
  """Scales the rows of float32 [n, dim] `vectors` to length 1 (a zero row stays zero)."""
  vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def bytes_sha256(data):
  """The sha256 (hex) of bytes."""
  return hashlib.sha256(data).hexdigest()


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
  kept = {name: value for name, value in key.items() if name not in _LOG_ONLY_KEY_FIELDS}
  return hashlib.sha256(json.dumps(kept, sort_keys=True).encode("utf-8")).hexdigest()[:16]


class CorpusIndex(object):
  """A corpus's kept lines and their index.

  Attributes:
    line_numbers: int64 [n], each vector's 0-based corpus line (ascending).
    texts: list of n str.
    index: the faiss index (inner product over unit vectors).
    directory: where it is kept (None: not kept).
  """

  def __init__(self, index, line_numbers, texts, directory):
    self.index, self.texts = index, texts
    self.line_numbers = np.asarray(line_numbers, np.int64)
    self.directory = directory

  def __len__(self):
    return len(self.texts)

  def _exact(self):
    """A flat index of the same vectors (HNSW's own storage), for the whole corpus."""
    if hasattr(self.index, "hnsw"):
      return import_faiss().downcast_index(self.index.storage)
    return self.index

  def search(self, queries, top_k):
    """The hits of each query: by score descending, then line ascending.

    Args:
      queries: float32 [q, dim] (normalised here).
      top_k: hits per query; more than the corpus gives the whole corpus (exactly, HNSW
        too).

    Returns:
      list (per query) of lists of Hit.
    """
    k = min(top_k, len(self))
    if k == 0 or not len(queries):
      return [[] for _ in range(len(queries))]
    queries = unit_rows(queries)
    # One past k: a tie at the k-th score may go on past it, and ties go to the lower line,
    # so fetch until the last one fetched scores below the k-th (or nothing more is found).
    fetched = min(len(self), k + 1)
    while True:
      index = self._exact() if fetched == len(self) else self.index
      scores, ids = index.search(queries, fetched)
      if (fetched == len(self) or np.all(ids[:, -1] < 0) or
          np.all(scores[:, -1] < scores[:, k - 1])):
        break
      fetched = min(len(self), 2 * fetched)
    results = []
    for row_scores, row_ids in zip(scores, ids):
      found = [(float(s), int(i)) for s, i in zip(row_scores, row_ids) if i >= 0]
      found.sort(key=lambda hit: (-hit[0], hit[1]))  # ids follow the lines' order
      # Cosines of unit vectors; float rounding may pass 1 by a hair.
      results.append([Hit(int(self.line_numbers[i]), self.texts[i], min(1.0, max(-1.0, s)))
                      for s, i in found[:k]])
    return results


def build_index(vectors, index_type, hnsw_m):
  """A faiss index of float32 [n, dim] vectors, normalised in place first (inner product)."""
  faiss = import_faiss()
  normalize_in_place(vectors)
  dim = vectors.shape[1]
  if index_type == FLAT:
    index = faiss.IndexFlatIP(dim)
  else:
    index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
  index.add(vectors)
  return index


# ---------------------------------------------------------------------------
# Kept on disk
# ---------------------------------------------------------------------------

def _read(directory, key, ef_search):
  """The CorpusIndex kept in `directory`. Raises ValueError (or faiss's RuntimeError, an
  OSError) when it is damaged or not of `key`."""
  faiss = import_faiss()
  with open(os.path.join(directory, KEY_FILE), encoding="utf-8") as f:
    if _key_name(json.load(f)) != _key_name(key):
      raise ValueError("its key.json is another index's")
  index = faiss.read_index(os.path.join(directory, INDEX_FILE))
  line_numbers, texts = [], []
  with open(os.path.join(directory, LINES_FILE), encoding="utf-8") as f:
    for line in f:
      record = json.loads(line)
      line_numbers.append(int(record["line"]))
      texts.append(record["text"])
  if index.ntotal != len(texts):
    raise ValueError("%d vectors but %d lines" % (index.ntotal, len(texts)))
  if hasattr(index, "hnsw"):
    index.hnsw.efSearch = ef_search
  return CorpusIndex(index, line_numbers, texts, directory)


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


def _write(building, index, line_numbers, texts, key):
  """Writes an index's files into the directory `building`; key.json last (a directory
  holding it is complete)."""
  import_faiss().write_index(index, os.path.join(building, INDEX_FILE))
  with open(os.path.join(building, LINES_FILE), "w", encoding="utf-8") as f:
    for number, text in zip(line_numbers, texts):
      f.write(json.dumps({"line": int(number), "text": text}, ensure_ascii=False) + "\n")
    f.flush()
    os.fsync(f.fileno())
  with open(os.path.join(building, KEY_FILE), "w", encoding="utf-8") as f:
    f.write(json.dumps(key, indent=2) + "\n")
    f.flush()
    os.fsync(f.fileno())
  # mkdtemp makes it private; readers under other accounts should see it as any new
  # directory.
  umask = os.umask(0)
  os.umask(umask)
  os.chmod(building, 0o777 & ~umask)


def _load_kept(directory, key, ef_search):
  """The index kept in `directory`, or None when there is none or it cannot be read (then
  removed, with a warning)."""
  if not os.path.isfile(os.path.join(directory, KEY_FILE)):
    return None
  try:
    corpus = _read(directory, key, ef_search)
  except (OSError, ValueError, KeyError, RuntimeError) as e:
    _LOGGER.warning("The index kept in %s cannot be read (%s): building it again.",
                    directory, " ".join(str(e).split())[:200])
    shutil.rmtree(directory, ignore_errors=True)
    return None
  _LOGGER.info("Loading the corpus index kept in %s (same model and corpus).", directory)
  return corpus


def _build_and_keep(index_dir, directory, key, encode_corpus, index_type, hnsw_m, ef_search):
  """Encodes the corpus, builds its index and keeps it in `directory` (through a temporary
  directory renamed into place). An index that cannot be kept is used from memory."""
  # Before encoding, so that a directory that cannot be written costs no encoding.
  try:
    building = tempfile.mkdtemp(prefix=".building-", dir=index_dir)
  except OSError as e:
    raise UsageError("--index_dir=%s: cannot write there (%s)." % (index_dir, e))
  try:
    _LOGGER.info("Building the corpus index: %s.", _why_rebuilt(index_dir, key))
    line_numbers, texts, vectors = encode_corpus()
    index = build_index(vectors, index_type, hnsw_m)
    del vectors
    if index_type == HNSW:
      index.hnsw.efSearch = ef_search
    try:
      _write(building, index, line_numbers, texts, key)
      os.rename(building, directory)
      _LOGGER.info("Kept the corpus index (%d vectors, %s) in %s.", len(texts), index_type,
                   directory)
    except (OSError, RuntimeError) as e:
      _LOGGER.warning("Could not keep the corpus index in %s (%s): it is used from memory "
                      "and built again next time.", index_dir, " ".join(str(e).split()))
      directory = None
    return CorpusIndex(index, line_numbers, texts, directory)
  finally:
    shutil.rmtree(building, ignore_errors=True)


def load_or_build(index_dir, key, encode_corpus, index_type, hnsw_m, ef_search,
                  check_memory=None):
  """The index of `key` in index_dir: loaded when kept, else built and kept.

  A lock file per key (index_dir/.lock-NAME) makes a second process wait for the first
  building the same index, then load it.

  Args:
    index_dir: the directory of kept indexes (created when missing).
    key: index_key(), with "corpus_file" (named in the log, not part of the key's hash).
    encode_corpus: function() -> (line numbers, texts, vectors float32 [n, dim]).
    index_type, hnsw_m, ef_search: the index's.
    check_memory: None, or function(building) raising UsageError when building (True) or
      loading (False) the index would need too much memory; called before either.

  Returns:
    CorpusIndex.

  Raises:
    UsageError: index_dir cannot be written, or memory.
  """
  import_faiss()  # before any encoding
  name = _key_name(key)
  directory = os.path.join(index_dir, name)
  if check_memory is not None:  # before anything is written
    check_memory(not os.path.isfile(os.path.join(directory, KEY_FILE)))
  created = not os.path.isdir(index_dir)
  lock_path = os.path.join(index_dir, ".lock-" + name)
  try:
    os.makedirs(index_dir, exist_ok=True)
    lock = open(lock_path, "a")
  except OSError as e:
    raise UsageError("--index_dir=%s: cannot write there (%s)." % (index_dir, e))
  try:
    with lock:  # closing the file releases the lock
      fcntl.flock(lock, fcntl.LOCK_EX)
      corpus = _load_kept(directory, key, ef_search)
      if corpus is not None:
        return corpus
      if check_memory is not None:  # kept in between, or gone
        check_memory(True)
      return _build_and_keep(index_dir, directory, key, encode_corpus, index_type, hnsw_m,
                             ef_search)
  except UsageError:
    # Nothing kept: leave no lock file, nor an index_dir this call made.
    if not os.path.isdir(directory):
      for remove, path in ((os.remove, lock_path), (os.rmdir, index_dir if created else None)):
        try:
          if path:
            remove(path)
        except OSError:
          pass
    raise
