# coding=utf-8
"""Unit tests of semantic search's index (bert_mgpu/embedding/search.py), no model.

The reference is NumPy: the cosines of every query with every corpus vector in float64,
sorted by score descending, then line ascending. Corpora hold exact duplicate rows (exact
ties) and their line numbers have gaps (blank corpus lines skipped), so that the order of
ties, and a top_k cutting through a group of ties, are tested. HNSW's recall@10 is measured
against that reference on clustered vectors, and index_bytes against a formula written here
from faiss's HNSW layout and against the arrays a faiss index really holds.

faiss (faiss-cpu) is an optional extra: the tests that build an index skip without it (TF
1.15's environment); the memory arithmetic and the missing-faiss refusal run everywhere.
"""

import functools
import hashlib
import json
import logging
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from bert_mgpu.embedding import search
from bert_mgpu.embedding import serving as embedding_serving
from bert_mgpu.errors import UsageError

try:
  import faiss  # pylint: disable=g-import-not-at-top
except ImportError:
  faiss = None

needs_faiss = pytest.mark.skipif(faiss is None, reason="faiss-cpu is not installed here")


class LogLines(logging.Handler):
  """The messages logged to the "tensorflow" logger (search.py's) while installed."""

  def __init__(self):
    super(LogLines, self).__init__(logging.INFO)
    self.lines = []

  def emit(self, record):
    self.lines.append(record.getMessage())

  def matching(self, prefix):
    return [line for line in self.lines if line.startswith(prefix)]


@pytest.fixture
def log_lines():
  logger = logging.getLogger("tensorflow")
  handler, level = LogLines(), logger.level
  logger.addHandler(handler)
  logger.setLevel(logging.INFO)
  yield handler
  logger.removeHandler(handler)
  logger.setLevel(level)


# ---------------------------------------------------------------------------
# The reference
# ---------------------------------------------------------------------------

def brute_force(queries, vectors, lines, top_k):
  """[(line, score)] per query: float64 cosines, by score descending then line ascending."""
  q = np.asarray(queries, np.float64)
  v = np.asarray(vectors, np.float64)
  q /= np.linalg.norm(q, axis=1, keepdims=True)
  v /= np.linalg.norm(v, axis=1, keepdims=True)
  results = []
  for row in q @ v.T:
    order = sorted(range(len(lines)), key=lambda i: (-row[i], lines[i]))
    results.append([(lines[i], row[i]) for i in order[:top_k]])
  return results


def assert_distinct_scores_apart(queries, vectors, min_gap):
  """The test's premise: two corpus vectors that are not the same row score at least
  min_gap apart for every query (so a float32 index cannot swap them)."""
  q = np.asarray(queries, np.float64)
  v = np.asarray(vectors, np.float64)
  q /= np.linalg.norm(q, axis=1, keepdims=True)
  v /= np.linalg.norm(v, axis=1, keepdims=True)
  for row in q @ v.T:
    distinct = np.unique(np.round(row, 12))
    assert np.min(np.diff(distinct)) > min_gap, np.min(np.diff(distinct))


def assert_hits(hits, expected, texts_of_line, tolerance=1e-5):
  assert [hit.line for hit in hits] == [line for line, _ in expected]
  assert [hit.text for hit in hits] == [texts_of_line[line] for line, _ in expected]
  assert all(isinstance(hit.score, float) for hit in hits)
  np.testing.assert_allclose([hit.score for hit in hits], [s for _, s in expected],
                             rtol=0, atol=tolerance)


def corpus_with_ties(rng, count=40, dim=8):
  """(vectors float32 [count, dim], lines, texts): random rows with exact duplicates, and
  increasing line numbers with gaps.

  Rows 5, 11, 17, 23 and 30 are one vector (a group of five ties); rows 2 and 3 another.
  """
  vectors = rng.randn(count, dim).astype(np.float32)
  for row in (11, 17, 23, 30):
    vectors[row] = vectors[5]
  vectors[3] = vectors[2]
  lines = np.cumsum(rng.randint(1, 4, size=count)) - 1  # e.g. 0, 2, 3, 6, ...
  texts = ["text of line %d" % line for line in lines]
  return vectors, [int(line) for line in lines], texts


# ---------------------------------------------------------------------------
# CorpusIndex.search against NumPy
# ---------------------------------------------------------------------------

TOP_KS = [1, 2, 3, 5, 7, 39, 40, 41, 100, search.MAX_TOP_K]


@needs_faiss
def test_flat_search_equals_brute_force_with_ties_by_line():
  rng = np.random.RandomState(0)
  vectors, lines, texts = corpus_with_ties(rng)
  # Queries: the tied group's vector (five hits at 1.0), the pair's, a scaled copy of it,
  # another row, and random ones.
  queries = np.concatenate([vectors[[5, 2]], vectors[[2]] * 0.25, vectors[[7]],
                            rng.randn(4, 8).astype(np.float32)])
  unique_rows = np.delete(vectors, [11, 17, 23, 30, 3], axis=0)
  assert_distinct_scores_apart(queries, unique_rows, 1e-6)
  corpus = search.CorpusIndex(search.build_index(vectors, search.FLAT, search.DEFAULT_HNSW_M),
                              lines, texts, "unused")
  assert len(corpus) == len(texts)
  by_line = dict(zip(lines, texts))
  for top_k in TOP_KS:
    results = corpus.search(queries, top_k)
    expected = brute_force(queries, vectors, lines, top_k)
    assert len(results) == len(queries)
    for query, (hits, want) in enumerate(zip(results, expected)):
      assert len(hits) == min(top_k, len(texts)), (query, top_k)
      assert [hit.line for hit in hits] == [line for line, _ in want], (query, top_k)
      assert_hits(hits, want, by_line)


@functools.lru_cache(maxsize=None)
def tied_corpus(index_type, count):
  """(CorpusIndex, vectors, lines) of corpus_with_ties, built once per module."""
  vectors, lines, texts = corpus_with_ties(np.random.RandomState(1), count=count)
  index = search.build_index(vectors, index_type, search.DEFAULT_HNSW_M)
  if index_type == search.HNSW:
    index.hnsw.efSearch = search.DEFAULT_EF_SEARCH  # as load_or_build sets it
  return search.CorpusIndex(index, lines, texts, "unused"), vectors, lines


@needs_faiss
@pytest.mark.parametrize("index_type, count", [(search.FLAT, 40), (search.HNSW, 40),
                                               (search.HNSW, 3000)])
@pytest.mark.parametrize("top_k", [1, 2, 3, 4, 5, 6])
def test_a_top_k_through_a_group_of_ties_keeps_the_lowest_lines(index_type, count, top_k):
  """faiss's HNSW returns tied vectors in no particular order (its flat index happens to
  return the lowest ids): the hits are still the lowest lines of the group."""
  corpus, vectors, lines = tied_corpus(index_type, count)
  tied = [lines[row] for row in (5, 11, 17, 23, 30)]  # in line order
  hits = corpus.search(vectors[[23]], top_k)[0]
  assert [hit.line for hit in hits[:5]] == tied[:top_k]
  assert all(hit.score == hits[0].score for hit in hits[:min(top_k, 5)])
  assert hits[0].score == pytest.approx(1.0, abs=1e-6)
  if top_k == 6:  # past the group: the next best, below 1
    assert hits[5].line == brute_force(vectors[[23]], vectors, lines, 6)[0][5][0]
    assert hits[5].score < hits[4].score


@needs_faiss
@pytest.mark.parametrize("top_k", [1, 3, 9, 10, 11, search.MAX_TOP_K])
def test_a_corpus_of_one_repeated_vector_answers_in_line_order(top_k):
  vector = np.random.RandomState(2).randn(1, 16).astype(np.float32)
  lines = [0, 1, 4, 5, 6, 9, 10, 20, 21, 30]
  corpus = search.CorpusIndex(
      search.build_index(np.repeat(vector, len(lines), axis=0), search.FLAT, 32), lines,
      ["t%d" % line for line in lines], "unused")
  hits = corpus.search(np.concatenate([vector, -vector]), top_k)
  for query_hits in hits:
    assert [hit.line for hit in query_hits] == lines[:top_k]
  assert hits[0][0].score == pytest.approx(1.0, abs=1e-6)
  assert hits[1][0].score == pytest.approx(-1.0, abs=1e-6)


@needs_faiss
def test_a_top_k_over_the_corpus_gives_the_whole_corpus_once():
  rng = np.random.RandomState(3)
  vectors, lines, texts = corpus_with_ties(rng, count=60, dim=12)
  corpus = search.CorpusIndex(search.build_index(vectors, search.FLAT, 8), lines, texts,
                              "unused")
  queries = rng.randn(5, 12).astype(np.float32)
  for top_k in (60, 61, search.MAX_TOP_K):
    for hits, want in zip(corpus.search(queries, top_k),
                          brute_force(queries, vectors, lines, top_k)):
      assert sorted(hit.line for hit in hits) == sorted(lines)
      scores = [hit.score for hit in hits]
      assert scores == sorted(scores, reverse=True)
      np.testing.assert_allclose(scores, [s for _, s in want], rtol=0, atol=1e-5)


@needs_faiss
def test_no_queries_give_no_results_and_queries_are_normalised():
  rng = np.random.RandomState(4)
  vectors = rng.randn(10, 4).astype(np.float32)
  corpus = search.CorpusIndex(search.build_index(vectors * 7.0, search.FLAT, 32),
                              list(range(10)), [str(i) for i in range(10)], "unused")
  assert corpus.search(np.zeros([0, 4], np.float32), 3) == []
  hits = corpus.search(vectors[[6]] * 0.01, 1)[0]
  assert hits[0].line == 6 and hits[0].score == pytest.approx(1.0, abs=1e-6)


# ---------------------------------------------------------------------------
# HNSW
# ---------------------------------------------------------------------------

def clustered_vectors(rng, centers, count, noise=1.0):
  """float32 [count, dim]: rows around randomly chosen centers [clusters, dim]."""
  rows = centers[rng.randint(len(centers), size=count)]
  return (rows + noise * rng.randn(count, centers.shape[1])).astype(np.float32)


def recall_at(found, expected, k):
  """Mean over queries of |found top k ∩ expected top k| / k (by line)."""
  return np.mean([len(set(f[:k]) & set(e[:k])) / float(k) for f, e in zip(found, expected)])


@needs_faiss
def test_hnsw_recall_at_10_against_brute_force_at_the_defaults(tmp_path):
  rng = np.random.RandomState(5)
  centers = rng.randn(40, 32)
  vectors = clustered_vectors(rng, centers, 4000)
  queries = clustered_vectors(rng, centers, 200)  # near the corpus, as real queries are
  lines = list(range(len(vectors)))
  expected = [[line for line, _ in hits] for hits in brute_force(queries, vectors, lines, 10)]
  key = search.index_key({"weights": "w"}, "sha", search.HNSW, search.DEFAULT_HNSW_M)
  built = search.load_or_build(
      str(tmp_path), key, lambda: (lines, [str(i) for i in lines], vectors), search.HNSW,
      search.DEFAULT_HNSW_M, search.DEFAULT_EF_SEARCH)
  loaded = search.load_or_build(str(tmp_path), key, None, search.HNSW, search.DEFAULT_HNSW_M,
                                search.DEFAULT_EF_SEARCH)
  for corpus in (built, loaded):
    assert corpus.index.hnsw.efSearch == search.DEFAULT_EF_SEARCH
    assert corpus.index.hnsw.nb_neighbors(1) == search.DEFAULT_HNSW_M
    found = [[hit.line for hit in hits] for hits in corpus.search(queries, 10)]
    assert recall_at(found, expected, 10) >= 0.95
  # The premise: HNSW is approximate on this fixture (ef_search 1 misses much of the true
  # top 10), so the recall above measured something.
  hasty = search.load_or_build(str(tmp_path), key, None, search.HNSW, search.DEFAULT_HNSW_M, 1)
  assert hasty.index.hnsw.efSearch == 1
  found = [[hit.line for hit in hits] for hits in hasty.search(queries, 10)]
  assert recall_at(found, expected, 10) < 0.9


# ---------------------------------------------------------------------------
# Keeping the index: its key, reuse, rebuild, atomic writes
# ---------------------------------------------------------------------------

MODEL = {"backend": "tensorflow", "weights": "/models/1/variables/variables.index",
         "weights_bytes": 1234, "weights_mtime_ns": 1, "pooling": "mean",
         "normalize_embeddings": True, "max_seq_length": 32, "do_lower_case": True}


def test_the_key_holds_hnsw_m_only_for_hnsw_and_never_ef_search():
  flat = search.index_key(MODEL, "abc", search.FLAT, 32)
  hnsw = search.index_key(MODEL, "abc", search.HNSW, 16)
  assert dict(flat) == dict(MODEL, corpus_sha256="abc", index="flat")
  assert dict(hnsw) == dict(MODEL, corpus_sha256="abc", index="hnsw", hnsw_m=16)
  assert not any("ef" in name for name in hnsw)


def test_the_corpus_key_is_the_sha256_of_the_files_bytes(tmp_path):
  path = tmp_path / "corpus.txt"
  path.write_bytes(b"a\n\xe4\xbd\xa0\xe5\xa5\xbd\n" * 100000)
  _, _, sha256 = embedding_serving.read_corpus(str(path))
  assert sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


class Encoder(object):
  """encode_corpus for load_or_build, counting its calls."""

  def __init__(self, vectors, lines=None):
    self.vectors = vectors
    self.lines = list(range(len(vectors))) if lines is None else lines
    self.calls = 0

  def __call__(self):
    self.calls += 1
    return self.lines, ["t%d" % line for line in self.lines], self.vectors


def kept_dirs(index_dir):
  """What index_dir holds beside the lock files (one per key, kept on purpose)."""
  return sorted(name for name in os.listdir(index_dir) if not name.startswith(".lock-"))


def corpus_key(corpus_file="/data/faq.txt", sha="s1", index_type=search.FLAT, hnsw_m=32,
               **model):
  key = search.index_key(dict(MODEL, **model), sha, index_type, hnsw_m)
  key["corpus_file"] = corpus_file
  return key


@needs_faiss
def test_an_index_is_kept_under_its_key_and_loaded_again(tmp_path, log_lines):
  index_dir = str(tmp_path / "kept")
  vectors = np.random.RandomState(6).randn(12, 8).astype(np.float32)
  encoder = Encoder(vectors, [0, 1, 3, 4, 5, 8, 9, 10, 11, 13, 14, 15])
  key = corpus_key()
  built = search.load_or_build(index_dir, key, encoder, search.FLAT, 32, 128)
  assert encoder.calls == 1
  assert log_lines.matching("Building the corpus index: ") == [
      "Building the corpus index: no index of /data/faq.txt in %s yet." % index_dir]
  (name,) = kept_dirs(index_dir)
  directory = os.path.join(index_dir, name)
  assert built.directory == directory
  assert sorted(os.listdir(directory)) == ["index.faiss", "key.json", "lines.jsonl"]
  with open(os.path.join(directory, "key.json"), encoding="utf-8") as f:
    assert json.load(f) == dict(key)
  with open(os.path.join(directory, "lines.jsonl"), encoding="utf-8") as f:
    assert [json.loads(line) for line in f] == [{"line": n, "text": "t%d" % n}
                                               for n in encoder.lines]
  assert faiss.read_index(os.path.join(directory, "index.faiss")).ntotal == 12

  loaded = search.load_or_build(index_dir, dict(key), encoder, search.FLAT, 32, 128)
  assert encoder.calls == 1  # not encoded again
  assert log_lines.matching("Loading the corpus index kept in ") == [
      "Loading the corpus index kept in %s (same model and corpus)." % directory]
  assert list(loaded.line_numbers) == encoder.lines and loaded.texts == built.texts
  queries = vectors[[3, 7]]
  assert loaded.search(queries, 5) == built.search(queries, 5)
  assert kept_dirs(index_dir) == [name]


CHANGES = [
    # (what changes in the key, the fields the log names)
    ({"sha": "s2"}, "corpus_sha256"),
    ({"weights": "/models/2/variables/variables.index"}, "weights"),
    ({"weights_bytes": 999, "weights_mtime_ns": 2}, "weights_bytes, weights_mtime_ns"),
    ({"backend": "onnxruntime", "weights": "/models/1/model.int8.onnx"}, "backend, weights"),
    ({"pooling": "cls", "max_seq_length": 64}, "max_seq_length, pooling"),
    ({"normalize_embeddings": False}, "normalize_embeddings"),
    ({"index_type": search.HNSW}, "hnsw_m, index"),
]


@needs_faiss
def test_another_hnsw_m_rebuilds(tmp_path, log_lines):
  index_dir = str(tmp_path / "kept")
  encoder = Encoder(np.random.RandomState(12).randn(20, 4).astype(np.float32))
  for m in (16, 8):
    corpus = search.load_or_build(index_dir, corpus_key(index_type=search.HNSW, hnsw_m=m),
                                  encoder, search.HNSW, m, 128)
    assert corpus.index.hnsw.nb_neighbors(1) == m
  assert encoder.calls == 2
  assert log_lines.matching("Building the corpus index: ")[-1] == (
      "Building the corpus index: the kept index of this corpus file differs in hnsw_m.")


@needs_faiss
@pytest.mark.parametrize("change, fields", CHANGES, ids=[c[1] for c in CHANGES])
def test_a_different_key_rebuilds_and_the_log_names_what_differs(tmp_path, log_lines, change,
                                                                  fields):
  index_dir = str(tmp_path / "kept")
  encoder = Encoder(np.random.RandomState(7).randn(6, 4).astype(np.float32))
  search.load_or_build(index_dir, corpus_key(), encoder, search.FLAT, 32, 128)
  index_type = change.get("index_type", search.FLAT)
  key = corpus_key(**change)
  corpus = search.load_or_build(index_dir, key, encoder, index_type, 32, 128)
  assert encoder.calls == 2
  assert log_lines.matching("Building the corpus index: ")[-1] == (
      "Building the corpus index: the kept index of this corpus file differs in %s." %
      fields)
  assert len(kept_dirs(index_dir)) == 2  # the first one stays, for its own key
  assert hasattr(corpus.index, "hnsw") == (index_type == search.HNSW)
  # Back to the first key: loaded, not built.
  search.load_or_build(index_dir, corpus_key(), encoder, search.FLAT, 32, 128)
  assert encoder.calls == 2


@needs_faiss
def test_another_corpus_file_is_not_compared_with(tmp_path, log_lines):
  index_dir = str(tmp_path / "kept")
  encoder = Encoder(np.random.RandomState(8).randn(6, 4).astype(np.float32))
  search.load_or_build(index_dir, corpus_key("/data/a.txt"), encoder, search.FLAT, 32, 128)
  search.load_or_build(index_dir, corpus_key("/data/b.txt", sha="s2"), encoder, search.FLAT,
                       32, 128)
  assert log_lines.matching("Building the corpus index: ")[-1] == (
      "Building the corpus index: no index of /data/b.txt in %s yet." % index_dir)


@needs_faiss
def test_ef_search_is_set_at_load_and_keeps_the_index(tmp_path):
  index_dir = str(tmp_path / "kept")
  encoder = Encoder(np.random.RandomState(9).randn(50, 8).astype(np.float32))
  key = corpus_key(index_type=search.HNSW, hnsw_m=8)
  built = search.load_or_build(index_dir, key, encoder, search.HNSW, 8, 40)
  assert built.index.hnsw.efSearch == 40
  loaded = search.load_or_build(index_dir, key, encoder, search.HNSW, 8, 300)
  assert encoder.calls == 1 and loaded.index.hnsw.efSearch == 300
  assert loaded.index.hnsw.nb_neighbors(1) == 8


@needs_faiss
def test_an_encoding_failure_keeps_nothing(tmp_path):
  index_dir = str(tmp_path / "kept")

  def fail():
    raise UsageError("no text with tokens")
  with pytest.raises(UsageError, match="no text with tokens"):
    search.load_or_build(index_dir, corpus_key(), fail, search.FLAT, 32, 128)
  assert not os.path.exists(index_dir)  # the call made it, and leaves nothing


# Run in a second process: builds the index of argv[2] in argv[1], its encoding signalling
# argv[3] (a file it creates) and then taking 2 seconds.
_SLOW_BUILDER = """
import json, os, sys, time
import numpy as np
sys.path.insert(0, %(repo)r)
from bert_mgpu.embedding import search
def encode():
  open(sys.argv[3], "w").close()
  time.sleep(2)
  return [0, 1, 2], ["a", "b", "c"], np.eye(3, 4, dtype=np.float32)
search.load_or_build(sys.argv[1], json.loads(sys.argv[2]), encode, "flat", 32, 128)
"""


@needs_faiss
def test_a_second_builder_waits_for_the_first_and_loads_its_index(tmp_path, log_lines):
  """Two processes asking for the same index: the second waits on the key's lock while the
  first encodes, then loads what the first kept instead of encoding again."""
  index_dir, started = str(tmp_path / "kept"), str(tmp_path / "started")
  key = corpus_key()
  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  first = subprocess.Popen([sys.executable, "-c", _SLOW_BUILDER % {"repo": repo}, index_dir,
                            json.dumps(key), started])
  try:
    deadline = time.time() + 60
    while not os.path.exists(started):
      assert first.poll() is None and time.time() < deadline, "the first builder did not start"
      time.sleep(0.05)
    second = Encoder(np.eye(3, 4, dtype=np.float32))
    corpus = search.load_or_build(index_dir, key, second, search.FLAT, 32, 128)
    assert first.wait(timeout=60) == 0
  finally:
    if first.poll() is None:
      first.kill()
      first.wait()
  assert second.calls == 0  # it waited, then loaded
  assert len(log_lines.matching("Loading the corpus index kept in")) == 1
  assert corpus.texts == ["a", "b", "c"]
  (name,) = kept_dirs(index_dir)  # no .building-* left
  assert not name.startswith(".")


# ---------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------

def expected_hnsw_bytes_per_vector(dim, m):
  """faiss's IndexHNSWFlat per vector: the float32 vector; 2 * m int32 neighbours on
  level 0; m on each upper level, a vector reaching level l >= 1 with probability m^-l
  (faiss's default level probabilities); an int32 level and a size_t offset."""
  upper_levels = sum(float(m) ** -level for level in range(1, 60))
  return 4 * dim + 4 * 2 * m + 4 * m * upper_levels + 4 + 8


@pytest.mark.parametrize("dim, m", [(768, 32), (768, 16), (32, 8), (1024, 64)])
def test_index_bytes_is_the_formula(dim, m):
  assert search.index_bytes(10 ** 6, dim, search.FLAT, m) == 4 * dim * 10 ** 6
  assert search.index_bytes(10 ** 6, dim, search.HNSW, m) == pytest.approx(
      10 ** 6 * expected_hnsw_bytes_per_vector(dim, m), abs=2)
  assert search.building_bytes(10 ** 6, dim, search.FLAT, m) == 2 * 4 * dim * 10 ** 6


def test_bert_base_index_memory_per_million_vectors():
  """The figures issue #64 has the docs state: 3.07 GB flat and about 3.34 GB hnsw (M=32)
  per million 768-dimension vectors."""
  assert search.index_bytes(10 ** 6, 768, search.FLAT) / 1e9 == pytest.approx(3.072)
  assert search.index_bytes(10 ** 6, 768, search.HNSW) / 1e9 == pytest.approx(3.344, abs=1e-3)


@needs_faiss
@pytest.mark.parametrize("index_type, m", [(search.FLAT, 32), (search.HNSW, 16),
                                           (search.HNSW, 32)])
def test_index_bytes_is_what_faiss_holds(index_type, m):
  count, dim = 5000, 32
  vectors = np.random.RandomState(11).randn(count, dim).astype(np.float32)
  index = search.build_index(vectors, index_type, m)
  if index_type == search.FLAT:
    held = faiss.vector_to_array(index.codes).nbytes
  else:
    hnsw = index.hnsw
    held = (faiss.vector_to_array(faiss.downcast_index(index.storage).codes).nbytes +
            faiss.vector_to_array(hnsw.neighbors).nbytes +
            faiss.vector_to_array(hnsw.levels).nbytes +
            faiss.vector_to_array(hnsw.offsets).nbytes)
  estimate = search.index_bytes(count, dim, index_type, m)
  assert abs(estimate - held) <= 0.01 * held, (estimate, held)


def test_check_memory_refuses_past_the_limit_in_one_message():
  # 1000 vectors of 250 dimensions: 1 MB of encoded vectors and 1 MB of flat index.
  search.check_memory(1000, 250, search.FLAT, 32, 0.002, "faq.txt")
  with pytest.raises(UsageError) as raised:
    search.check_memory(1000, 250, search.FLAT, 32, 0.0019, "faq.txt")
  message = str(raised.value)
  assert "\n" not in message
  for fragment in ("faq.txt: 1000 texts need 2.00 MB", "flat, 250 dimensions",
                   "--max_index_memory_gb=0.0019"):
    assert fragment in message, message
  # HNSW needs more than flat for the same corpus.
  search.check_memory(10 ** 6, 768, search.FLAT, 32, 6.2, "big.txt")
  with pytest.raises(UsageError, match=r"big.txt: 1000000 texts need 6\.42 GB to index "
                     r"\(hnsw, 768 dimensions: 3\.34 GB for the index"):
    search.check_memory(10 ** 6, 768, search.HNSW, 32, 6.2, "big.txt")


# ---------------------------------------------------------------------------
# faiss missing
# ---------------------------------------------------------------------------

def test_import_faiss_refuses_naming_the_package(monkeypatch):
  monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss raises ImportError
  with pytest.raises(UsageError) as raised:
    search.import_faiss()
  message = str(raised.value)
  assert "faiss-cpu" in message and "`pip install faiss-cpu`" in message, message
  assert "\n" not in message


def test_load_or_build_refuses_before_encoding_without_faiss(monkeypatch, tmp_path):
  monkeypatch.setitem(sys.modules, "faiss", None)
  encoder = Encoder(np.zeros([2, 4], np.float32))
  with pytest.raises(UsageError, match="pip install faiss-cpu"):
    search.load_or_build(str(tmp_path / "kept"), corpus_key(), encoder, search.FLAT, 32, 128)
  assert encoder.calls == 0
  assert not os.path.exists(str(tmp_path / "kept"))
