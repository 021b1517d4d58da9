# coding=utf-8
"""The sentence encoder as a servable kind (serving/kinds.py): texts in, their vectors out;
pairs in, their cosines out; and semantic search over a corpus (embedding/search.py).

  model_settings.json  {"model": "embedding", "do_lower_case", "max_seq_length",
                       "pooling", "normalize_embeddings"} (embedding/task.py writes it).
  Outputs              embeddings [batch, hidden] float32, pooled and (with
                       normalize_embeddings) unit-length, as embedding/serving_graph.py
                       builds them.
  predict_text.py      JSON lines {"text", "embedding"} (--output_format=npy: one .npy
                       [texts, hidden] in --output_file); with --text_b one cosine per
                       line; with --corpus_file the input lines are queries and each gets
                       {"query", "hits": [{"line", "text", "score"}]}.
  HTTP                 POST /predict {"texts"} -> {"embeddings", "truncated"}, with
                       "texts_b" -> {"cosines", "truncated"}; with --corpus_file also
                       POST /search {"queries", "top_k"} -> {"results": [{"query", "hits"}]}.

No TensorFlow import: predict_text.py --backend=onnxruntime runs this.
"""

import collections
import io
import json
import logging
import os
import time

import numpy as np

from bert_mgpu import progress
from bert_mgpu.data.batch_shapes import MODEL_INPUTS
from bert_mgpu.data import text_files
from bert_mgpu.embedding import search
from bert_mgpu.embedding.text_rows import text_row
from bert_mgpu.errors import UsageError
from bert_mgpu.serving import kinds
from bert_mgpu.serving import model_inputs

_LOGGER = logging.getLogger("tensorflow")

EMBEDDING_KIND = "embedding"
# The runners' one output: [texts, hidden] float32.
EMBEDDINGS = "embeddings"
JSONL, NPY = "jsonl", "npy"
# Corpus texts featurized and encoded at a time while building an index (a progress line
# may follow each).
CORPUS_CHUNK = 1024
PROGRESS_SECONDS = 10.0


# ---------------------------------------------------------------------------
# The kind's flags (predict_text.py)
# ---------------------------------------------------------------------------

OUTPUT_FORMAT = kinds.KindFlag(
    "output_format", "string", JSONL, "An embedding model: jsonl (one {\"text\", "
    "\"embedding\"} per line) or npy (one float32 [texts, dim] array; needs --output_file).")
CORPUS_FILE = kinds.KindFlag(
    "corpus_file", "string", None, "An embedding model: search this UTF-8 file's lines (one "
    "text per line) for the input lines (or POST /search); its index is kept in --index_dir "
    "(needs faiss-cpu).")
INDEX = kinds.KindFlag(
    "index", "string", search.FLAT, "With --corpus_file: flat (exact inner product) or hnsw "
    "(approximate, for large corpora: --hnsw_m, --ef_search).")
INDEX_DIR = kinds.KindFlag(
    "index_dir", "string", None, "With --corpus_file: where its indexes are kept, one "
    "directory per model and corpus (default: CORPUS_FILE.index beside it).")
HNSW_M = kinds.KindFlag(
    "hnsw_m", "integer", search.DEFAULT_HNSW_M, "With --index=hnsw: neighbours per vector "
    "(more: better recall, more memory; part of the index's key).", minimum=2)
EF_SEARCH = kinds.KindFlag(
    "ef_search", "integer", search.DEFAULT_EF_SEARCH, "With --index=hnsw: candidates "
    "visited per query (more: better recall, slower), set when the index is loaded.",
    minimum=1)
TOP_K = kinds.KindFlag(
    "top_k", "integer", search.DEFAULT_TOP_K, "With --corpus_file: hits per query (at most "
    "%d; POST /search's default)." % search.MAX_TOP_K, minimum=1)
MAX_INDEX_MEMORY_GB = kinds.KindFlag(
    "max_index_memory_gb", "float", search.DEFAULT_MAX_INDEX_GB, "With --corpus_file: refuse, "
    "before encoding, a corpus whose index would need more memory than this.", minimum=0)
# Read only with --corpus_file (refused without it).
CORPUS_FLAGS = (INDEX, INDEX_DIR, HNSW_M, EF_SEARCH, TOP_K, MAX_INDEX_MEMORY_GB)
HNSW_FLAGS = (HNSW_M, EF_SEARCH)


def hidden_size(files):
  """The model's vector width, from its bert_config.json."""
  with open(files.bert_config_file, encoding="utf-8") as f:
    return int(json.load(f)["hidden_size"])


def check_flags(values, with_text_b):
  """Raises UsageError for the kind's flags that cannot work together, or with --text_b
  (EmbeddingKind.check_flags)."""
  def flag(kind_flag):
    return EMBEDDING.flag_value(values, kind_flag.name)
  if flag(OUTPUT_FORMAT) not in (JSONL, NPY):
    raise UsageError("--output_format=%s: use jsonl or npy." % flag(OUTPUT_FORMAT))
  if flag(INDEX) not in search.INDEX_TYPES:
    raise UsageError("--index=%s: use flat or hnsw." % flag(INDEX))
  if flag(TOP_K) > search.MAX_TOP_K:
    raise UsageError("--top_k=%d: at most %d." % (flag(TOP_K), search.MAX_TOP_K))
  def given(kind_flag):
    return bool(values) and values.get(kind_flag.name, kind_flag.default) != kind_flag.default

  if flag(CORPUS_FILE) is None:
    for kind_flag in CORPUS_FLAGS:
      if given(kind_flag):
        raise UsageError("--%s is read with --corpus_file: add it, or drop --%s." % (
            kind_flag.name, kind_flag.name))
    if with_text_b and flag(OUTPUT_FORMAT) == NPY:
      raise UsageError("--output_format=npy writes embeddings; --text_b writes one cosine "
                       "per pair: drop one.")
    return
  if with_text_b:
    raise UsageError("--text_b writes the cosines of pairs and --corpus_file searches for "
                     "each line: drop one.")
  if flag(OUTPUT_FORMAT) == NPY:
    raise UsageError("--output_format=npy writes embeddings; with --corpus_file the output "
                     "is each line's hits (JSON lines): drop one.")
  for kind_flag in HNSW_FLAGS:
    if flag(INDEX) != search.HNSW and given(kind_flag):
      raise UsageError("--%s is read with --index=hnsw: add it, or drop --%s." % (
          kind_flag.name, kind_flag.name))
  if not os.path.isfile(flag(CORPUS_FILE)):
    raise UsageError("--corpus_file=%s: no such file." % flag(CORPUS_FILE))
  search.import_faiss()  # refused before the model loads


# ---------------------------------------------------------------------------
# Texts to rows
# ---------------------------------------------------------------------------

def featurize_texts(tokenizer, max_seq_length, texts):
  """model_inputs.Features of texts, one row each ([CLS] text [SEP], as training reads it),
  and the rows without tokens (int list: their indexes)."""
  arrays = {name: np.zeros([len(texts), max_seq_length], np.int32) for name in MODEL_INPUTS}
  truncated = np.zeros([len(texts)], np.bool_)
  tokenless_rows = []
  for row, text in enumerate(texts):
    ids, mask, segments, truncated[row] = text_row(text, tokenizer, max_seq_length)
    arrays["input_ids"][row], arrays["input_mask"][row] = ids, mask
    arrays["segment_ids"][row] = segments
    if sum(mask) == 2:
      tokenless_rows.append(row)
  return model_inputs.Features(arrays, truncated), tokenless_rows


def _keep_rows(features, rows):
  return model_inputs.Features({name: array[rows] for name, array in features.arrays.items()},
                               features.truncated[rows])


def read_corpus(path):
  """The texts of a corpus file to index.

  Returns:
    (kept, blank, sha256): (0-based line number, text) of each non-blank line, the number
    of blank lines, and the sha256 of the bytes read (the index's key).

  Raises:
    UsageError: unreadable, not UTF-8, a stray carriage return, or no text at all.
  """
  try:
    with open(path, "rb") as f:
      data = f.read()
  except OSError as e:
    raise UsageError("--corpus_file=%s: cannot read it (%s)." % (path, e))
  text = text_files.decode_utf8(path, data, "save it as UTF-8")
  numbered = list(text_files.checked_lines(path, text))
  if numbered and numbered[-1][1] == "":
    numbered.pop()  # the newline that ends the last line
  kept = [(number - 1, line) for number, line in numbered if line.strip()]
  if not kept:
    raise UsageError("--corpus_file=%s has no text: give one text per line." % path)
  return kept, len(numbered) - len(kept), search.bytes_sha256(data)


def search_answer(query, hits):
  """The JSON of one query's answer: {"query", "hits": [{"line", "text", "score"}]}."""
  return collections.OrderedDict([("query", query), ("hits", [collections.OrderedDict([
      ("line", hit.line), ("text", hit.text), ("score", hit.score)]) for hit in hits])])


EmbeddingFeatures = collections.namedtuple("EmbeddingFeatures",
                                           ["features", "texts", "pairs", "queries"])
EmbeddingFeatures.__doc__ = """Featurized texts.

Fields:
  features: model_inputs.Features: texts_a's rows, then texts_b's (pairs).
  texts: texts_a.
  pairs: whether texts_b follow (the records are cosines).
  queries: whether the texts are searched in the corpus (predict_text.py's file mode with
    --corpus_file).
"""

EmbeddingRecord = collections.namedtuple("EmbeddingRecord", ["text", "embedding"])
CosineRecord = collections.namedtuple("CosineRecord", ["cosine"])
SearchRecord = collections.namedtuple("SearchRecord", ["query", "hits"])


class EmbeddingPredictor(kinds.TextPredictor):
  """A sentence encoder: texts in, vectors out (pairs: cosines; with a corpus: its hits).

  Attributes:
    corpus: the search.CorpusIndex of --corpus_file once prepare() has run, else None.
  """

  def __init__(self, model, runner):
    super(EmbeddingPredictor, self).__init__(model, runner)
    self.settings = model.files.settings
    self.corpus = None

  # Texts, pairs and queries.

  def featurize(self, texts_a, texts_b=None):
    """EmbeddingFeatures of texts (pairs: texts_a's rows, then texts_b's). Raises
    model_inputs.NoTokensError for the first text without tokens."""
    texts = list(texts_a) + list(texts_b or [])
    features, tokenless_rows = featurize_texts(self.model.tokenizer, self.max_seq_length,
                                               texts)
    if tokenless_rows:
      # The first input (a pair's text_a before its text_b) without tokens.
      row, field = min((row % len(texts_a), "ab"[row // len(texts_a)])
                       for row in tokenless_rows)
      raise model_inputs.NoTokensError(row, field)
    return EmbeddingFeatures(features, list(texts_a), texts_b is not None, False)

  def featurize_file(self, name, inputs):
    featurized = super(EmbeddingPredictor, self).featurize_file(name, inputs)
    return featurized._replace(queries=self.corpus is not None)

  def decode(self, featurized, outputs):
    vectors = outputs[EMBEDDINGS]  # [rows, hidden]
    n = len(featurized.texts)
    if featurized.pairs:
      cosines = np.sum(search.unit_rows(vectors[:n]) * search.unit_rows(vectors[n:]), axis=-1)
      return [CosineRecord(float(c)) for c in cosines]
    if featurized.queries:
      return [SearchRecord(query, hits) for query, hits in zip(
          featurized.texts, self.corpus.search(vectors, self.flag(TOP_K.name)))]
    return [EmbeddingRecord(text, vector) for text, vector in zip(featurized.texts, vectors)]

  def output_is_binary(self):
    return self.flag(OUTPUT_FORMAT.name) == NPY

  def file_text(self, records):
    """JSON lines {"text", "embedding"} (npy: the .npy file's bytes), one cosine per pair, or
    {"query", "hits"} per query."""
    if records and isinstance(records[0], CosineRecord):
      return "".join("%.6f\n" % record.cosine for record in records)
    if records and isinstance(records[0], SearchRecord):
      return "".join(json.dumps(search_answer(record.query, record.hits), ensure_ascii=False)
                     + "\n" for record in records)
    if self.output_is_binary():
      buffer = io.BytesIO()
      dim = hidden_size(self.model.files)
      np.save(buffer, np.array([r.embedding for r in records], np.float32).reshape([-1, dim]))
      return buffer.getvalue()
    return "".join(json.dumps(collections.OrderedDict([
        ("text", record.text), ("embedding", record.embedding.tolist())]),
                              ensure_ascii=False) + "\n" for record in records)

  def log_file_run(self, featurized, records, seconds, featurize_seconds):
    what = ("searched %d quer(ies)" if featurized.queries else
            "scored %d pair(s)" if featurized.pairs else "embedded %d text(s)")
    _LOGGER.info("%s in %.2f s (%.1f/s; tokenizing %.2f s).", (what % len(records)).capitalize(),
                 seconds, len(records) / max(seconds, 1e-9), featurize_seconds)

  def reply(self, records, truncated, inputs):
    if inputs[1] is not None:
      return {"cosines": [record.cosine for record in records], "truncated": truncated}
    return {"embeddings": [record.embedding.tolist() for record in records],
            "truncated": truncated}

  def metadata(self):
    """GET /labels: no labels; the model's settings, its width and the corpus searched."""
    reply = {"labels": [], "dimension": hidden_size(self.model.files),
             "settings": {key: value for key, value in self.settings.items()
                          if key != "model"}}
    if self.corpus is not None:
      reply["corpus"] = {"file": self.flag(CORPUS_FILE.name), "texts": len(self.corpus)}
    return reply

  # The corpus.

  def prepare(self):
    """With --corpus_file: loads its kept index, or encodes the corpus and keeps one."""
    corpus_file = self.flag(CORPUS_FILE.name)
    if corpus_file is None:
      return
    kept, blank, corpus_sha256 = read_corpus(corpus_file)
    index_type, hnsw_m = self.flag(INDEX.name), self.flag(HNSW_M.name)
    dim = hidden_size(self.model.files)

    def check_memory(building):
      search.check_memory(len(kept), dim, index_type, hnsw_m,
                          self.flag(MAX_INDEX_MEMORY_GB.name), corpus_file, building)

    key = search.index_key(self.model_key(), corpus_sha256, index_type, hnsw_m)
    key["corpus_file"] = os.path.abspath(corpus_file)
    self.corpus = search.load_or_build(
        self.flag(INDEX_DIR.name) or corpus_file + ".index", key,
        lambda: self._encode_corpus(corpus_file, kept, blank, dim), index_type, hnsw_m,
        self.flag(EF_SEARCH.name), check_memory)
    _LOGGER.info("Searching %d texts of %s (%s index).", len(self.corpus), corpus_file,
                 index_type)

  def model_key(self):
    """The model's part of an index's key: the weights file (an export's version, a
    checkpoint, or an ONNX file, with its size and time), the backend and the settings that
    change a vector."""
    onnx_path = getattr(self.model, "onnx_path", None)  # serving/onnx_predictor.OnnxModel
    weights = onnx_path or self.model.checkpoint + ".index"
    key = {"backend": "onnxruntime" if onnx_path else "tensorflow",
           "weights": os.path.abspath(weights)}
    try:
      status = os.stat(weights)
      key.update(weights_bytes=status.st_size, weights_mtime_ns=status.st_mtime_ns)
    except OSError:  # not a local file (gs://...): its path alone
      pass
    for name in ("pooling", "normalize_embeddings", "max_seq_length", "do_lower_case"):
      key[name] = self.settings.get(name)
    return key

  def _encode_corpus(self, corpus_file, kept, blank, dim):
    """(line numbers, texts, vectors float32 [n, dim]) of the corpus texts with tokens.

    Each distinct text is encoded once, so that equal lines get equal vectors (their order
    in a tie is then their lines'), in chunks of CORPUS_CHUNK with a progress line."""
    distinct = list(collections.OrderedDict.fromkeys(text for _, text in kept))
    row_of = {}  # distinct text -> its row in `encoded`, or None without tokens
    encoded = np.empty([len(distinct), dim], np.float32)
    rows, cut = 0, 0
    meter = progress.Progress(len(distinct), PROGRESS_SECONDS)
    for start in range(0, len(distinct), CORPUS_CHUNK):
      chunk = distinct[start:start + CORPUS_CHUNK]
      features, tokenless_rows = featurize_texts(self.model.tokenizer, self.max_seq_length,
                                                 chunk)
      with_tokens = np.setdiff1d(np.arange(len(chunk)), tokenless_rows)
      for row in tokenless_rows:
        row_of[chunk[row]] = None
      features = _keep_rows(features, with_tokens)
      encoded[rows:rows + len(with_tokens)] = self.predict(features)[EMBEDDINGS]
      for offset, row in enumerate(with_tokens):
        row_of[chunk[row]] = rows + offset
      rows += len(with_tokens)
      cut += int(features.truncated.sum())
      done = start + len(chunk)
      if meter.due() or done == len(distinct):
        _LOGGER.info("Encoded %d of %d distinct corpus texts (%.0f texts/s, %s left).", done,
                     len(distinct), meter.rate(done),
                     progress.format_duration(meter.eta_seconds(done)))
    found = [(number, text) for number, text in kept if row_of[text] is not None]
    if not found:
      raise UsageError("--corpus_file=%s has no text with tokens." % corpus_file)
    tokenless = len(kept) - len(found)
    _LOGGER.info("%s: %d texts indexed (%d distinct); %d blank and %d tokenless line(s) "
                 "skipped (line numbers stay the file's, from 0); %d text(s) cut to "
                 "max_seq_length=%d.", corpus_file, len(found), rows, blank, tokenless, cut,
                 self.max_seq_length)
    # One row per kept line; equal lines share their vector.
    vectors = encoded[[row_of[text] for _, text in found]]
    del encoded
    return [number for number, _ in found], [text for _, text in found], vectors

  def routes(self):
    return {"/search": self._search} if self.corpus is not None else {}

  def _search(self, request, predict, limits):
    """POST /search {"queries": [...], "top_k": k} -> {"results": [{"query", "hits"}]}."""
    if not isinstance(request, dict) or "queries" not in request:
      raise kinds.BadRequest('send a JSON object with "queries": a list of strings (and '
                             '"top_k": hits per query, at most %d)' % search.MAX_TOP_K)
    unknown = sorted(set(request) - {"queries", "top_k"})
    if unknown:
      raise kinds.BadRequest('%s is not a field of a search: send "queries" and "top_k"' %
                             json.dumps(unknown[0]))
    if isinstance(request["queries"], list) and len(request["queries"]) > limits.max_texts:
      raise kinds.TooManyTexts("the request has %d queries; send at most %d per request "
                               "(--max_request_texts)" % (len(request["queries"]),
                                                          limits.max_texts))
    queries = kinds.text_list(request, "queries")
    top_k = request.get("top_k", self.flag(TOP_K.name))
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not (
        1 <= top_k <= search.MAX_TOP_K):
      raise kinds.BadRequest('"top_k" must be an integer from 1 to %d' % search.MAX_TOP_K)
    try:
      featurized = self.featurize(queries)
    except model_inputs.NoTokensError as e:
      raise kinds.BadRequest("queries[%d] has no tokens (only spaces, control or invisible "
                             "characters): send a text" % e.row)
    found = self.corpus.search(predict(featurized.features)[EMBEDDINGS], top_k)
    return {"results": [search_answer(query, hits) for query, hits in zip(queries, found)],
            "truncated": int(featurized.features.truncated.sum())}


class EmbeddingKind(kinds.ServableKind):
  """A sentence encoder (run_embedding_mgpu.py): CoSENT, in-batch negatives, Sentence-BERT."""

  name = EMBEDDING_KIND
  description = "an embedding model"
  script = "run_embedding_mgpu.py"
  settings_fields = ("pooling", "normalize_embeddings")
  has_labels = False
  takes_text_b = True
  model_noun = "embedding"
  flags = (OUTPUT_FORMAT, CORPUS_FILE) + CORPUS_FLAGS

  def check_flags(self, values, with_text_b):
    check_flags(values, with_text_b)

  def outputs(self, files):
    return collections.OrderedDict([
        (EMBEDDINGS, model_inputs.OutputSpec((hidden_size(files),)))])

  def onnx_outputs(self, files):
    return {EMBEDDINGS: ("tensor(float)", [None, hidden_size(files)])}

  def text_predictor(self, model, runner):
    return EmbeddingPredictor(model, runner)

  def graph(self):
    from bert_mgpu.embedding import serving_graph  # pylint: disable=import-outside-toplevel
    return serving_graph.EmbeddingGraph()


EMBEDDING = kinds.register(EmbeddingKind())
