# coding=utf-8
"""The sentence encoder put to work (#64): run_embedding_mgpu.py --export_dir, and
predict_text.py on its export and output_dir (embeddings, pairs' cosines, semantic search
over a corpus through faiss), in a file, over HTTP and on ONNX Runtime.

One module fixture trains a tiny embedding model (a 2-layer BERT of hidden size 16, a few
CoSENT steps on Chinese character pairs) with --embed_file and --export_dir. The oracle is
the run's own embeddings.npy: the texts the tests send are --embed_file's, so every vector,
cosine and search score served has a row there to equal; search hits are checked against a
NumPy brute force over those rows (by score descending, then line ascending). The corpus
holds exact duplicate lines (ties), blank and tokenless lines (skipped, their numbers kept).

A second model (TF 2.x only) has the real Chinese BERT vocabulary
(../shared/chinese_bert/vocab.txt, 21,128 pieces) and random weights trained a few steps:
int8 ONNX against float32 on real Chinese sentences.

ONNX tests skip where the ONNX export or onnxruntime is missing (TF 1.15), and search tests
where faiss is (TF 1.15 then checks the missing-faiss refusal without blocking it). ONNX
Runtime runs with TensorFlow made unimportable (cli.write_blocking_wrapper).
"""

import collections
import hashlib
import json
import os
import re
import shutil
import signal

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cli
from cli import read_json, read_jsonl
import tiny_task_files
import tokenization


from optional_packages import HAS_ONNX, faiss, needs_faiss, needs_onnx, onnxruntime

MAX_SEQ_LENGTH = 12
CONFIG = dict(tiny_task_files.TINY_CONFIG, num_hidden_layers=2, max_position_embeddings=16)
HIDDEN = CONFIG["hidden_size"]
CHARS = u"天气很好今日晴朗我喜欢猫狗吃饭睡觉学习工作下雨出门看书唱歌跑步"
LONG_TEXT = u"今日晴朗我喜欢出门看书唱歌跑步"  # 15 characters: cut at MAX_SEQ_LENGTH - 2
# --embed_file's lines: row i of embeddings.npy is EMBED_TEXTS[i]; rows 1 and 9 are one text.
EMBED_TEXTS = [u"今天天气很好", u"我喜欢猫", u"下雨了", u"出门跑步", u"看书学习", u"吃饭睡觉",
               u"唱歌", LONG_TEXT, u"工作很好", u"我喜欢猫"]
E = EMBED_TEXTS
# The corpus searched: duplicates of lines 0 (lines 4, 10) and 1 (line 9), two blank lines
# (2, 5) and a tokenless one (7: a zero-width space) skipped.
CORPUS = [E[0], E[1], u"", E[2], E[0], u"   ", E[3], u"\u200b", E[4], E[1], E[0], E[5],
          LONG_TEXT, E[6]]
CORPUS_KEPT = [n for n, text in enumerate(CORPUS) if text in EMBED_TEXTS]
# E[8] is not in the corpus.
QUERIES = [E[0], E[3], E[8], E[1], LONG_TEXT]
PAIRS = [(E[0], E[1]), (E[1], E[9]), (E[2], E[2]), (LONG_TEXT, E[3]), (E[5], E[8]),
         (E[4], E[6])]
TOLERANCE = 1e-5
REQUEST_TIMEOUT_SECONDS = 60
SERVING_PATTERN = r"Serving on (http://\S+)"

REAL_VOCAB = os.path.join(cli.REPO_DIR, "..", "shared", "chinese_bert", "vocab.txt")
REAL_SENTENCES = [
    u"国务院常务会议部署进一步稳定和扩大就业的措施",
    u"央行宣布下调金融机构存款准备金率",
    u"今年夏粮再获丰收，总产量创历史新高",
    u"北京地铁新线路年底开通运营",
    u"中国女排三比零战胜对手晋级决赛",
    u"新能源汽车销量连续五个月同比增长",
    u"气象台发布暴雨黄色预警，提醒市民注意出行安全",
    u"教育部：严禁在校园内组织商业活动",
    u"科学家发现一种新的深海鱼类",
    u"多地出台政策支持小微企业发展",
    u"春节假期国内旅游人数大幅回升",
    u"高铁票价调整方案正式公布",
    u"这家餐厅的菜味道很好，服务也很周到",
    u"手机电池不耐用，充一次电只能用半天",
    u"周末我们一起去公园散步吧",
    u"请问去火车站怎么走？",
    u"我想退掉昨天买的那件衣服",
    u"这部电影的情节太拖沓了",
    u"图书馆明天上午九点开门",
    u"医院门诊部周六照常接诊",
]


def index_entries(index_dir):
  """What an --index_dir holds beside its lock files (one per key, kept on purpose)."""
  return [name for name in os.listdir(index_dir) if not name.startswith(".lock-")]


def write_lines(path, lines):
  with open(path, "w", encoding="utf-8", newline="") as f:
    f.write(u"".join(line + u"\n" for line in lines))
  return path


def unit(vectors):
  vectors = np.asarray(vectors, np.float64)
  return vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)


def truncated_count(texts):
  """Texts cut at MAX_SEQ_LENGTH: here one character is one token."""
  return sum(len(text) > MAX_SEQ_LENGTH - 2 for text in texts)


# ---------------------------------------------------------------------------
# The trained model
# ---------------------------------------------------------------------------

class EmbeddingModel(object):
  """A trained run: its output_dir, its export and --embed_file's embeddings.npy."""

  def __init__(self, root):
    self.root = root
    self.data_dir = os.path.join(root, "data")
    self.output_dir = os.path.join(root, "model")
    self.export_base = os.path.join(root, "exports")
    self.version_dir = os.path.join(self.export_base, "1")
    self.embed_file = os.path.join(root, "embed.txt")

  def train(self, texts, train_pairs, config, max_seq_length, vocab_file=None):
    self.texts = texts
    write_lines(self.embed_file, texts)
    tiny_task_files.write_text(os.path.join(self.data_dir, "train.tsv"), u"".join(
        u"%s\t%s\t%d\n" % row for row in train_pairs))
    if vocab_file is None:
      vocab_file, config_file = tiny_task_files.write_model_files(
          os.path.join(self.root, "model_files"), [CHARS] + texts)
      config = dict(read_json(config_file), **config)
    config_file = tiny_task_files.write_text(
        os.path.join(self.root, "model_files", "bert_config.json"), json.dumps(config))
    flags = collections.OrderedDict([
        ("data_dir", self.data_dir), ("vocab_file", vocab_file),
        ("bert_config_file", config_file), ("output_dir", self.output_dir),
        ("do_train", True), ("loss", "cosent"), ("max_seq_length", max_seq_length),
        ("train_batch_size", 4), ("learning_rate", 5e-3), ("num_train_epochs", 1),
        ("save_checkpoints_steps", 100), ("log_steps", 1), ("n_gpus", 1),
        ("embed_file", self.embed_file), ("export_dir", self.export_base),
        ("export_format", "both" if HAS_ONNX else None), ("onnx_int8", HAS_ONNX or None)])
    result = cli.run_script("run_embedding_mgpu.py", cli.flag_list(flags))
    cli.assert_succeeded(result)
    self.embeddings = np.load(os.path.join(self.output_dir, "embeddings.npy"))
    with open(os.path.join(self.output_dir, "embeddings.txt"), encoding="utf-8") as f:
      assert f.read().split(u"\n")[:-1] == texts
    self.settings = read_json(os.path.join(self.output_dir, "model_settings.json"))
    self.vocab_file = vocab_file
    return self

  def vector(self, text):
    return self.embeddings[self.texts.index(text)]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("embedding_serving"))
  rng = np.random.RandomState(0)
  pool = EMBED_TEXTS[:9] + [u"".join(rng.choice(list(CHARS), size=rng.randint(2, 9)))
                            for _ in range(12)]
  pairs = [(pool[rng.randint(len(pool))], pool[rng.randint(len(pool))], rng.randint(0, 6))
           for _ in range(16)]
  return EmbeddingModel(root).train(EMBED_TEXTS, pairs, CONFIG, MAX_SEQ_LENGTH)


def predict(model, args, input_lines, name, script="predict_text.py", output=True):
  """predict_text.py with `args` on input_lines (written to NAME.in); returns (the
  CompletedProcess, the output file's path)."""
  input_file = write_lines(os.path.join(model.root, name + ".in"), input_lines)
  output_file = os.path.join(model.root, name + ".out")
  if os.path.exists(output_file):
    os.remove(output_file)
  result = cli.run_script(script, list(args) + ["--input_file=" + input_file] + (
      ["--output_file=" + output_file] if output else []))
  return result, output_file


def no_tensorflow(model):
  """A predict_text.py wrapper run with TensorFlow unimportable (cli.write_blocking_wrapper's
  first argument)."""
  return cli.write_blocking_wrapper(os.path.join(model.root, "predict_text_blocking.py"),
                                    "predict_text.py")


def source_args(model, source):
  """(script, args) of predict_text.py serving `source`: export or output_dir
  (TensorFlow), onnx or int8 (ONNX Runtime, TensorFlow unimportable)."""
  if source == "export":
    return "predict_text.py", ["--export_dir=" + model.export_base, "--predict_batch_size=3"]
  if source == "output_dir":
    return "predict_text.py", ["--output_dir=" + model.output_dir, "--n_gpus=2",
                               "--predict_batch_size=2"]
  onnx_file = {"onnx": "model.onnx", "int8": "model.int8.onnx"}[source]
  return no_tensorflow(model), ["tensorflow", "--backend=onnxruntime",
                                "--export_dir=" + model.export_base,
                                "--onnx_file=" + onnx_file, "--onnx_threads=1"]


_EMBEDDED = {}


def embedded(model, source, texts=EMBED_TEXTS):
  """predict_text.py's JSON lines on `texts` from `source` (run once per model and source):
  float64 [n, hidden]."""
  key = (model.root, source, tuple(texts))
  if key not in _EMBEDDED:
    script, args = source_args(model, source)
    result, output_file = predict(model, args, texts, "embed_" + source, script=script)
    cli.assert_succeeded(result)
    assert "Embedded %d text(s)" % len(texts) in result.stderr
    records = read_jsonl(output_file)
    assert [list(r) for r in records] == [["text", "embedding"]] * len(texts)
    assert [r["text"] for r in records] == list(texts)
    _EMBEDDED[key] = np.array([r["embedding"] for r in records], np.float64)
  return _EMBEDDED[key]


# ---------------------------------------------------------------------------
# The export
# ---------------------------------------------------------------------------

def test_the_export_returns_embeddings_batch_by_hidden(model):
  expected = {"assets.extra", "saved_model.pb", "variables"}
  if HAS_ONNX:
    expected |= {"model.onnx", "model.int8.onnx"}
  assert set(os.listdir(model.version_dir)) == expected
  assert read_json(os.path.join(model.version_dir, "assets.extra", "model_settings.json")) \
      == model.settings
  assert model.settings["model"] == "embedding"
  with tf.Graph().as_default(), tf.Session() as sess:
    meta_graph = tf.saved_model.loader.load(sess, [tf.saved_model.tag_constants.SERVING],
                                            model.version_dir)
  signature = meta_graph.signature_def["serving_default"]
  assert sorted(signature.inputs) == ["input_ids", "input_mask", "segment_ids"]
  assert list(signature.outputs) == ["embeddings"]
  output = signature.outputs["embeddings"]
  assert output.dtype == tf.float32.as_datatype_enum
  assert [d.size for d in output.tensor_shape.dim] == [-1, HIDDEN]


@needs_onnx
def test_the_onnx_model_returns_embeddings_batch_by_hidden(model):
  for name in ("model.onnx", "model.int8.onnx"):
    session = onnxruntime.InferenceSession(os.path.join(model.version_dir, name),
                                           providers=["CPUExecutionProvider"])
    (output,) = session.get_outputs()
    assert output.name == "embeddings" and output.type == "tensor(float)"
    assert output.shape[1] == HIDDEN


# ---------------------------------------------------------------------------
# Embeddings and cosines: those of embeddings.npy
# ---------------------------------------------------------------------------

SOURCES = ["export", "output_dir", pytest.param("onnx", marks=needs_onnx)]


@pytest.mark.parametrize("source", SOURCES)
def test_served_embeddings_equal_the_embed_files(model, source):
  served = embedded(model, source)
  assert served.shape == (len(EMBED_TEXTS), HIDDEN)
  np.testing.assert_allclose(served, model.embeddings, rtol=0, atol=TOLERANCE)
  np.testing.assert_allclose(np.linalg.norm(served, axis=1), 1.0, atol=1e-5)
  # The premise: the texts' vectors differ, so equality above meant something.
  assert np.min(np.linalg.norm(served[:9, None] - served[None, :9], axis=-1) +
                np.eye(9)) > 1e-3


@needs_onnx
def test_onnx_float32_is_within_1e5_of_tensorflow(model):
  np.testing.assert_allclose(embedded(model, "onnx"), embedded(model, "export"), rtol=0,
                             atol=1e-5)


@pytest.mark.parametrize("source", ["export", pytest.param("onnx", marks=needs_onnx)])
def test_npy_output_equals_the_embed_files(model, source):
  script, args = source_args(model, source)
  result, output_file = predict(model, args + ["--output_format=npy"], EMBED_TEXTS,
                                "npy_" + source, script=script)
  cli.assert_succeeded(result)
  with open(output_file, "rb") as f:
    assert f.read(6) == b"\x93NUMPY"
  vectors = np.load(output_file)
  assert vectors.dtype == np.float32 and vectors.shape == (len(EMBED_TEXTS), HIDDEN)
  np.testing.assert_allclose(vectors, model.embeddings, rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("source", ["export", pytest.param("onnx", marks=needs_onnx)])
def test_text_b_gives_the_cosines_of_the_embed_files_rows(model, source):
  script, args = source_args(model, source)
  result, output_file = predict(model, args + ["--text_b"],
                                [a + u"\t" + b for a, b in PAIRS], "pairs_" + source,
                                script=script)
  cli.assert_succeeded(result)
  assert "Scored %d pair(s)" % len(PAIRS) in result.stderr
  with open(output_file, encoding="utf-8") as f:
    lines = f.read().split("\n")
  assert lines[-1] == "" and len(lines) == len(PAIRS) + 1
  assert all(re.match(r"^-?\d\.\d{6}$", line) for line in lines[:-1]), lines
  expected = [float(np.dot(unit(model.vector(a)), unit(model.vector(b)))) for a, b in PAIRS]
  np.testing.assert_allclose([float(line) for line in lines[:-1]], expected, rtol=0,
                             atol=TOLERANCE)
  assert float(lines[1]) == pytest.approx(1.0, abs=1e-6)  # one text twice
  assert max(expected) - min(expected) > 1e-3


# ---------------------------------------------------------------------------
# int8 on real texts (the real Chinese vocabulary)
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real_model(tmp_path_factory):
  if not HAS_ONNX:
    pytest.skip("the ONNX export and onnxruntime are TF 2.x only")
  if not os.path.isfile(REAL_VOCAB):
    pytest.skip("no real vocabulary at %s" % REAL_VOCAB)
  root = str(tmp_path_factory.mktemp("embedding_real_vocab"))
  with open(REAL_VOCAB, encoding="utf-8") as f:
    vocab_size = sum(1 for _ in f)
  config = dict(tiny_task_files.TINY_CONFIG, vocab_size=vocab_size, hidden_size=32,
                num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                max_position_embeddings=64)
  rng = np.random.RandomState(1)
  n = len(REAL_SENTENCES)
  pairs = [(REAL_SENTENCES[rng.randint(n)], REAL_SENTENCES[rng.randint(n)], rng.randint(0, 6))
           for _ in range(16)]
  return EmbeddingModel(root).train(REAL_SENTENCES, pairs, config, 32, vocab_file=REAL_VOCAB)


@needs_onnx
def test_int8_is_at_cosine_099_with_float32_on_real_texts(real_model):
  # The premise: the real vocabulary knows these texts (few [UNK]).
  tokenizer = tokenization.FullTokenizer(REAL_VOCAB, do_lower_case=True)
  tokens = [t for text in REAL_SENTENCES for t in tokenizer.tokenize(text)]
  assert len(tokens) > 200 and tokens.count("[UNK]") <= 0.02 * len(tokens)
  with open(REAL_VOCAB, encoding="utf-8") as f:
    assert sum(1 for _ in f) == 21128

  tensorflow_vectors = embedded(real_model, "export", REAL_SENTENCES)
  np.testing.assert_allclose(tensorflow_vectors, real_model.embeddings, rtol=0,
                             atol=TOLERANCE)
  float32 = embedded(real_model, "onnx", REAL_SENTENCES)
  np.testing.assert_allclose(float32, tensorflow_vectors, rtol=0, atol=1e-5)
  int8 = embedded(real_model, "int8", REAL_SENTENCES)
  cosines = np.sum(unit(int8) * unit(float32), axis=1)
  assert np.min(cosines) >= 0.99, cosines
  # model.int8.onnx ran, not model.onnx again.
  assert np.max(np.abs(int8 - float32)) > 1e-4


# ---------------------------------------------------------------------------
# Search: a NumPy brute force over embeddings.npy
# ---------------------------------------------------------------------------

def brute_force(model, corpus, queries, top_k):
  """{"query", "hits"} of each query: the cosines of its embeddings.npy row with every
  corpus line that has one, by score descending, then line ascending."""
  kept = [(n, text) for n, text in enumerate(corpus) if text in model.texts]
  vectors = unit([model.vector(text) for _, text in kept])
  results = []
  for query in queries:
    scores = vectors @ unit(model.vector(query))
    order = sorted(range(len(kept)), key=lambda i: (-scores[i], kept[i][0]))[:top_k]
    results.append({"query": query, "hits": [
        {"line": kept[i][0], "text": kept[i][1], "score": float(scores[i])} for i in order]})
  return results


def assert_same_search(actual, expected, tolerance=TOLERANCE):
  assert [r["query"] for r in actual] == [r["query"] for r in expected]
  for a, e in zip(actual, expected):
    assert list(a) == ["query", "hits"], a
    assert [list(hit) for hit in a["hits"]] == [["line", "text", "score"]] * len(a["hits"])
    assert [(h["line"], h["text"]) for h in a["hits"]] == [
        (h["line"], h["text"]) for h in e["hits"]], (a["query"], a["hits"], e["hits"])
    np.testing.assert_allclose([h["score"] for h in a["hits"]],
                               [h["score"] for h in e["hits"]], rtol=0, atol=tolerance)


@pytest.fixture(scope="module")
def corpus_file(model):
  return write_lines(os.path.join(model.root, "faq.txt"), CORPUS)


Searched = collections.namedtuple("Searched", ["results", "stderr"])


@pytest.fixture(scope="module")
def searched(model, corpus_file):
  """predict_text.py --corpus_file (the default flat index beside it) at --top_k 1000
  (built), 2 and the default (loaded): {top_k: Searched}."""
  if faiss is None:
    pytest.skip("faiss-cpu is not installed here")
  runs = collections.OrderedDict()
  for top_k in (1000, 2, None):
    args = ["--export_dir=" + model.export_base, "--corpus_file=" + corpus_file]
    args += [] if top_k is None else ["--top_k=%d" % top_k]
    result, output_file = predict(model, args, QUERIES, "search_%s" % top_k)
    cli.assert_succeeded(result)
    runs[top_k or 10] = Searched(read_jsonl(output_file), result.stderr)
  return runs


def test_only_exact_duplicates_tie_in_the_corpus(model):
  """The premise of the search tests: the model's cosines of different texts are further
  apart than served vectors are from embeddings.npy's, so only exact duplicates tie."""
  for query in QUERIES:
    distinct = sorted({float(np.dot(unit(model.vector(query)), unit(model.vector(text))))
                       for text in set(CORPUS) & set(EMBED_TEXTS)})
    assert np.min(np.diff(distinct)) > 10 * TOLERANCE, (query, distinct)


@needs_faiss
@pytest.mark.parametrize("top_k", [1000, 2, 10])
def test_flat_search_equals_the_brute_force(model, searched, top_k):
  results = searched[top_k].results
  expected = brute_force(model, CORPUS, QUERIES, top_k)
  assert_same_search(results, expected)
  assert "Searched %d quer(ies)" % len(QUERIES) in searched[top_k].stderr
  by_query = dict(zip(QUERIES, results))
  if top_k == 1000:  # the whole corpus, each kept line once
    for result in results:
      assert sorted(h["line"] for h in result["hits"]) == CORPUS_KEPT
  # The ties: a query's own text at 1.0 on each of its lines, in line order.
  assert [h["line"] for h in by_query[E[0]]["hits"][:3]] == [0, 4, 10][:top_k]
  assert [h["line"] for h in by_query[E[1]]["hits"][:2]] == [1, 9]
  assert all(h["score"] == pytest.approx(1.0, abs=1e-5) for h in by_query[E[0]]["hits"][:2])
  assert len(set(h["score"] for h in by_query[E[0]]["hits"][:min(top_k, 3)])) == 1
  assert all(len(r["hits"]) == min(top_k, len(CORPUS_KEPT)) for r in results)


@needs_faiss
def test_the_index_is_built_once_and_kept_beside_the_corpus(model, searched, corpus_file):
  built, loaded = searched[1000].stderr, searched[2].stderr
  index_dir = corpus_file + ".index"
  assert "Building the corpus index: no index of %s in %s yet." % (
      os.path.abspath(corpus_file), index_dir) in built
  # Equal lines are encoded once: 9 distinct non-blank texts, 8 of them with tokens.
  distinct = len(set(text for text in CORPUS if text.strip()))
  assert "Encoded %d of %d distinct corpus texts" % (distinct, distinct) in built, built[-3000:]
  assert ("%s: 11 texts indexed (%d distinct); 2 blank and 1 tokenless line(s) skipped"
          % (corpus_file, distinct - 1) in built), built[-3000:]
  (name,) = index_entries(index_dir)  # one index, no .building-* left
  directory = os.path.join(index_dir, name)
  assert "Kept the corpus index (11 vectors, flat) in %s." % directory in built
  for stderr in (loaded, searched[10].stderr):
    assert "Loading the corpus index kept in %s (same model and corpus)." % directory in stderr
    assert "Building the corpus index" not in stderr and "Encoded" not in stderr
  assert sorted(os.listdir(directory)) == ["index.faiss", "key.json", "lines.jsonl"]
  assert read_jsonl(os.path.join(directory, "lines.jsonl")) == [
      {"line": n, "text": CORPUS[n]} for n in CORPUS_KEPT]
  key = read_json(os.path.join(directory, "key.json"))
  with open(corpus_file, "rb") as f:
    sha256 = hashlib.sha256(f.read()).hexdigest()
  weights = os.path.join(model.version_dir, "variables", "variables.index")
  assert key["corpus_sha256"] == sha256
  assert key["corpus_file"] == os.path.abspath(corpus_file)
  assert (key["backend"], key["weights"], key["weights_bytes"]) == (
      "tensorflow", os.path.abspath(weights), os.path.getsize(weights))
  assert key["index"] == "flat" and "hnsw_m" not in key
  for name in ("pooling", "normalize_embeddings", "max_seq_length", "do_lower_case"):
    assert key[name] == model.settings[name], name


def rebuilt_because(stderr):
  """The fields the log says differ from the kept index (a set), or None."""
  match = re.search(r"Building the corpus index: the kept index of this corpus file differs "
                    r"in ([\w, ]+)\.", stderr)
  return None if match is None else set(match.group(1).split(", "))


@needs_faiss
def test_hnsw_search_through_predict_text(model, tmp_path):
  corpus = write_lines(str(tmp_path / "faq.txt"), CORPUS)
  args = ["--export_dir=" + model.export_base, "--corpus_file=" + corpus, "--index=hnsw",
          "--hnsw_m=4", "--top_k=5"]
  runs = []
  for ef_search in (16, 64):
    result, output_file = predict(model, args + ["--ef_search=%d" % ef_search], QUERIES,
                                  "hnsw_%d" % ef_search)
    cli.assert_succeeded(result)
    runs.append(result.stderr)
    # A corpus this small is searched exactly: ties in line order, as flat.
    assert_same_search(read_jsonl(output_file), brute_force(model, CORPUS, QUERIES, 5))
  (name,) = index_entries(corpus + ".index")
  directory = os.path.join(corpus + ".index", name)
  assert "Kept the corpus index (11 vectors, hnsw) in %s." % directory in runs[0]
  key = read_json(os.path.join(directory, "key.json"))
  assert (key["index"], key["hnsw_m"]) == ("hnsw", 4)
  assert not any("ef" in field for field in key)
  # Another --ef_search is set when loading: the same index.
  assert "Loading the corpus index kept in %s" % directory in runs[1]
  assert "Searching 11 texts of %s (hnsw index)." % corpus in runs[1]


@needs_faiss
def test_a_changed_corpus_is_indexed_again(model, tmp_path):
  corpus = write_lines(str(tmp_path / "faq.txt"), CORPUS)
  args = ["--export_dir=" + model.export_base, "--corpus_file=" + corpus]
  result, _ = predict(model, args, QUERIES[:1], "changed_corpus_1")
  cli.assert_succeeded(result)
  assert "Building the corpus index: no index of" in result.stderr
  changed = CORPUS + [E[8]]
  write_lines(corpus, changed)
  result, output_file = predict(model, args + ["--top_k=1000"], QUERIES, "changed_corpus_2")
  cli.assert_succeeded(result)
  assert rebuilt_because(result.stderr) == {"corpus_sha256"}, result.stderr[-3000:]
  assert_same_search(read_jsonl(output_file), brute_force(model, changed, QUERIES, 1000))
  assert len(index_entries(corpus + ".index")) == 2  # each corpus's own


@needs_faiss
def test_a_new_export_version_is_indexed_again_in_index_dir(model, tmp_path):
  export_base = str(tmp_path / "exports")
  shutil.copytree(model.export_base, export_base)
  result = cli.run_script("run_embedding_mgpu.py", ["--output_dir=" + model.output_dir,
                                                    "--export_dir=" + export_base])
  cli.assert_succeeded(result)
  assert sorted(os.listdir(export_base)) == ["1", "2"]
  corpus = write_lines(str(tmp_path / "faq.txt"), CORPUS)
  index_dir = str(tmp_path / "kept")
  common = ["--corpus_file=" + corpus, "--index_dir=" + index_dir, "--top_k=1000"]
  runs = []
  for step, export_dir in enumerate([os.path.join(export_base, "1"), export_base,
                                     os.path.join(export_base, "1")]):
    result, output_file = predict(model, ["--export_dir=" + export_dir] + common, QUERIES,
                                  "new_version_%d" % step)
    cli.assert_succeeded(result)
    runs.append(result.stderr)
    assert_same_search(read_jsonl(output_file), brute_force(model, CORPUS, QUERIES, 1000))
  assert "Building the corpus index: no index of %s in %s yet." % (corpus, index_dir) in \
      runs[0]
  because = rebuilt_because(runs[1])
  assert because is not None and "weights" in because, runs[1][-3000:]
  assert because <= {"weights", "weights_bytes", "weights_mtime_ns"}, because
  assert "Loading the corpus index kept in" in runs[2]  # version 1's is still kept
  assert len(index_entries(index_dir)) == 2
  assert not any(name.startswith(".") for name in index_entries(index_dir))
  assert not os.path.exists(corpus + ".index")  # --index_dir, not the default


@needs_onnx
@needs_faiss
def test_onnx_searches_as_tensorflow_and_int8_is_another_index(model, tmp_path):
  corpus = write_lines(str(tmp_path / "faq.txt"), CORPUS)
  index_dir = str(tmp_path / "kept")
  script, _ = source_args(model, "onnx")
  runs = []
  for onnx_file in ("model.onnx", "model.int8.onnx"):
    result, output_file = predict(model, [
        "tensorflow", "--backend=onnxruntime", "--export_dir=" + model.version_dir,
        "--onnx_file=" + onnx_file, "--onnx_threads=1", "--corpus_file=" + corpus,
        "--index_dir=" + index_dir, "--top_k=1000"], QUERIES, "onnx_search", script=script)
    cli.assert_succeeded(result)
    runs.append((result.stderr, read_jsonl(output_file)))
  assert "Building the corpus index: no index of" in runs[0][0]
  assert_same_search(runs[0][1], brute_force(model, CORPUS, QUERIES, 1000))
  because = rebuilt_because(runs[1][0])
  assert because is not None and {"weights", "weights_bytes"} <= because, runs[1][0][-3000:]
  assert because <= {"weights", "weights_bytes", "weights_mtime_ns"}, because
  keys = [read_json(os.path.join(index_dir, name, "key.json"))
          for name in index_entries(index_dir)]
  assert sorted(os.path.basename(k["weights"]) for k in keys) == ["model.int8.onnx",
                                                                 "model.onnx"]
  assert {k["backend"] for k in keys} == {"onnxruntime"}
  # int8: the same lines, scores near float32's.
  for a, b in zip(runs[1][1], runs[0][1]):
    assert sorted(h["line"] for h in a["hits"]) == CORPUS_KEPT
    assert a["hits"][0]["line"] == b["hits"][0]["line"]


# ---------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------

def post(url, path, payload):
  body = payload if isinstance(payload, bytes) else json.dumps(
      payload, ensure_ascii=False).encode("utf-8")
  return cli.http_json(url + path, body, REQUEST_TIMEOUT_SECONDS)


class Server(object):
  """predict_text.py --serve=0 on 127.0.0.1, killed on exit if still running."""

  def __init__(self, args, log_path, script="predict_text.py"):
    self.running = cli.RunningScript(script, list(args) + ["--serve=0", "--host=127.0.0.1",
                                                           "--max_batch=4"], log_path)

  def __enter__(self):
    running = self.running.__enter__()
    running.wait_for(lambda: re.search(SERVING_PATTERN, running.stderr()),
                     "the server listening")
    self.url = re.search(SERVING_PATTERN, running.stderr()).group(1)
    assert self.url.startswith("http://127.0.0.1:")
    running.wait_for(lambda: cli.http_json(self.url + "/healthz")[0] == 200,
                     "the model ready")
    return self

  def stop(self):
    self.running.signal(signal.SIGTERM)
    assert self.running.wait() == 0, self.running.stderr()[-3000:]
    assert "Traceback" not in self.running.stderr()

  def __exit__(self, *exc):
    self.running.__exit__(*exc)


def file_cosines(model, source):
  script, args = source_args(model, source)
  result, output_file = predict(model, args + ["--text_b"], [a + u"\t" + b for a, b in PAIRS],
                                "http_pairs_" + source, script=script)
  cli.assert_succeeded(result)
  with open(output_file, encoding="utf-8") as f:
    return [float(line) for line in f]


@needs_faiss
def test_http_predict_and_search_answer_as_the_file(model, searched, corpus_file, tmp_path):
  expected_vectors = embedded(model, "export")
  expected_cosines = file_cosines(model, "export")
  args = ["--export_dir=" + model.export_base, "--corpus_file=" + corpus_file]
  with Server(args, str(tmp_path / "serve.log")) as server:
    url = server.url
    # The index the file mode kept (the searched fixture) is loaded, not built again.
    assert "Loading the corpus index kept in %s" % corpus_file in server.running.stderr()
    status, reply = cli.http_json(url + "/labels")
    assert status == 200, reply
    settings = {k: v for k, v in model.settings.items() if k != "model"}
    assert reply == {"labels": [], "dimension": HIDDEN, "settings": settings,
                     "corpus": {"file": corpus_file, "texts": len(CORPUS_KEPT)}}

    status, reply = post(url, "/predict", {"texts": EMBED_TEXTS})
    assert status == 200, reply
    assert sorted(reply) == ["embeddings", "truncated"]
    np.testing.assert_allclose(reply["embeddings"], expected_vectors, rtol=0, atol=TOLERANCE)
    assert reply["truncated"] == truncated_count(EMBED_TEXTS) == 1
    status, reply = post(url, "/predict", {"texts": [a for a, _ in PAIRS],
                                           "texts_b": [b for _, b in PAIRS]})
    assert status == 200, reply
    assert sorted(reply) == ["cosines", "truncated"]
    np.testing.assert_allclose(reply["cosines"], expected_cosines, rtol=0, atol=TOLERANCE)
    assert reply["truncated"] == truncated_count(a + b for a, b in PAIRS)

    def assert_search(payload, expected):
      status, reply = post(url, "/search", payload)
      assert status == 200, reply
      assert sorted(reply) == ["results", "truncated"]
      assert_same_search(reply["results"], expected)
    assert_search({"queries": QUERIES, "top_k": 1000}, searched[1000].results)
    assert_search({"queries": QUERIES, "top_k": 2}, searched[2].results)
    assert_search({"queries": QUERIES}, searched[10].results)  # --top_k's default
    whole = searched[1000].results[1]
    assert_search({"queries": [QUERIES[1]], "top_k": 3}, [dict(whole, hits=whole["hits"][:3])])

    bad = [
        ("/search", {"queries": [u""]}, "queries[0] is empty"),
        ("/search", {"queries": [E[0], u"  "]}, "queries[1] is empty"),
        ("/search", {"queries": [u"\u200b"]}, "queries[0] has no tokens"),
        ("/search", {"queries": QUERIES, "top_k": 1001}, '"top_k" must be an integer from 1 '
         "to 1000"),
        ("/search", {"queries": QUERIES, "top_k": "3"}, '"top_k" must be an integer'),
        ("/search", {"queries": QUERIES, "top_k": 0}, '"top_k" must be an integer'),
        ("/search", {"queries": QUERIES, "top_k": 2.5}, '"top_k" must be an integer'),
        ("/search", {"queries": QUERIES, "top_k": True}, '"top_k" must be an integer'),
        ("/search", {"queries": E[0]}, '"queries" must be a list of strings'),
        ("/search", {"texts": QUERIES}, '"queries"'),
        ("/search", b'{"queries": ["a"', None),
        ("/search", b"\xff\xfe", None),
        ("/predict", {"texts": [u""]}, "texts[0] is empty"),
        ("/predict", {"texts": [E[0]], "texts_b": [u" "]}, "texts_b[0] is empty"),
        ("/predict", b"not json", None),
    ]
    for path, payload, fragment in bad:
      status, reply = post(url, path, payload)
      assert status == 400, (path, payload, status, reply)
      assert fragment is None or fragment in reply["error"], (payload, reply)
      # The server stays up and answers the next good request.
      status, reply = post(url, "/search", {"queries": QUERIES[:1], "top_k": 2})
      assert status == 200, reply
      assert_same_search(reply["results"], searched[2].results[:1])
    assert cli.http_json(url + "/healthz")[0] == 200
    server.stop()


@pytest.mark.parametrize("backend", ["tensorflow",
                                     pytest.param("onnxruntime", marks=needs_onnx)])
def test_http_without_a_corpus_has_no_search(model, tmp_path, backend):
  source = "export" if backend == "tensorflow" else "onnx"
  script, args = source_args(model, source)
  args = [a for a in args if not a.startswith("--predict_batch_size")]
  with Server(args, str(tmp_path / "serve.log"), script=script) as server:
    status, reply = post(server.url, "/search", {"queries": [E[0]]})
    assert status == 404, reply
    assert reply == {"error": "no such path: use POST /predict"}
    status, reply = cli.http_json(server.url + "/labels")
    assert status == 200 and "corpus" not in reply and reply["dimension"] == HIDDEN, reply
    status, reply = post(server.url, "/predict", {"texts": EMBED_TEXTS})
    assert status == 200, reply
    np.testing.assert_allclose(reply["embeddings"], embedded(model, source), rtol=0,
                               atol=TOLERANCE)
    server.stop()


# ---------------------------------------------------------------------------
# Refusals: one line
# ---------------------------------------------------------------------------

def test_missing_faiss_is_one_line_naming_the_package(model, tmp_path):
  corpus = write_lines(str(tmp_path / "faq.txt"), CORPUS)
  blocking = cli.write_blocking_wrapper(str(tmp_path / "no_faiss.py"), "predict_text.py")
  runs = [(blocking, ["faiss"])]
  if faiss is None:  # TF 1.15's environment: no faiss to block
    runs.append(("predict_text.py", []))
  for script, blocked in runs:
    result, output_file = predict(
        model, blocked + ["--export_dir=" + model.export_base, "--corpus_file=" + corpus],
        QUERIES, "no_faiss", script=script)
    cli.assert_one_line_error(result, "--corpus_file needs faiss", "faiss-cpu",
                              "`pip install faiss-cpu`", last=True)
    assert not os.path.exists(output_file)
    assert not os.path.exists(corpus + ".index")
    assert "Encoded" not in result.stderr


@needs_faiss  # without faiss, its refusal comes first
def test_the_memory_refusal_comes_before_any_encoding(model, tmp_path):
  corpus = write_lines(str(tmp_path / "faq.txt"), CORPUS)
  result, output_file = predict(model, [
      "--export_dir=" + model.export_base, "--corpus_file=" + corpus,
      "--max_index_memory_gb=1e-9"], QUERIES, "memory")
  texts = sum(1 for line in CORPUS if line.strip())  # tokenless ones are known only later
  cli.assert_one_line_error(result, "%s: %d texts need " % (corpus, texts),
                            "flat, %d dimensions" % HIDDEN, "--max_index_memory_gb=1e-09",
                            last=True)
  assert "Encoded" not in result.stderr and "Building the corpus index" not in result.stderr
  assert not os.path.exists(corpus + ".index")
  assert not os.path.exists(output_file)


CLASSIFIER = os.path.join(cli.REPO_DIR, "tests", "serving", "golden", "models", "pair")

# case: (extra flags ({corpus}: a corpus file), input lines, writes --output_file, fragments)
REFUSALS = {
    "text_b_and_corpus": (["--text_b", "--corpus_file={corpus}"], [E[0] + u"\t" + E[1]],
                          True, ["--text_b writes the cosines of pairs and --corpus_file "
                                 "searches for each line: drop one."]),
    "npy_and_corpus": (["--output_format=npy", "--corpus_file={corpus}"], QUERIES, True,
                       ["--output_format=npy writes embeddings; with --corpus_file"]),
    "npy_to_stdout": (["--output_format=npy"], QUERIES, False,
                      ["the output asked for is a binary file, which stdout does not take: give "
                       "--output_file."]),
    "npy_and_text_b": (["--output_format=npy", "--text_b"], [E[0] + u"\t" + E[1]], True,
                       ["--output_format=npy writes embeddings; --text_b writes one cosine "
                        "per pair: drop one."]),
    "hnsw_without_corpus": (["--index=hnsw"], QUERIES, True,
                            ["--index is read with --corpus_file: add it, or drop --index."]),
    "top_k_without_corpus": (["--top_k=5"], QUERIES, True, ["--top_k is read with "
                                                            "--corpus_file"]),
    "index_dir_without_corpus": (["--index_dir=/tmp/x"], QUERIES, True,
                                 ["--index_dir is read with --corpus_file"]),
    "xml": (["--output_format=xml"], QUERIES, True, ["--output_format=xml: use jsonl or npy."]),
    "top_k_1001": (["--top_k=1001", "--corpus_file={corpus}"], QUERIES, True,
                   ["--top_k=1001: at most 1000."]),
    "top_k_0": (["--top_k=0", "--corpus_file={corpus}"], QUERIES, True,
                ["--top_k=0: it must be at least 1."]),
    "hnsw_m_1": (["--index=hnsw", "--hnsw_m=1", "--corpus_file={corpus}"], QUERIES, True,
                 ["--hnsw_m=1: it must be at least 2."]),
    "ivf": (["--index=ivf", "--corpus_file={corpus}"], QUERIES, True,
            ["--index=ivf: use flat or hnsw."]),
    "no_corpus_file": (["--corpus_file={missing}"], QUERIES, True,
                       ["--corpus_file={missing}: no such file."]),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_the_kinds_flag_refusals_are_one_line(model, tmp_path, case):
  """On ONNX Runtime where there is one (the refusals are the kind's, whatever the backend;
  it starts in a fraction of TensorFlow's time), else on TensorFlow."""
  flags, lines, to_file, fragments = REFUSALS[case]
  names = {"corpus": write_lines(str(tmp_path / "faq.txt"), CORPUS),
           "missing": str(tmp_path / "missing.txt")}
  flags = [flag.format(**names) for flag in flags]
  script, args = source_args(model, "onnx" if HAS_ONNX else "export")
  result, output_file = predict(model, args + flags, lines, "refusal_" + case, script=script,
                                output=to_file)
  cli.assert_one_line_error(result, *[f.format(**names) for f in fragments], last=True)
  assert not os.path.exists(output_file)
  assert result.stdout == ""
  assert "Encoded" not in result.stderr
  assert not os.path.exists(names["corpus"] + ".index")


def test_a_corpus_without_tokens_is_one_line(model, tmp_path):
  if faiss is None:
    pytest.skip("faiss-cpu is not installed here (refused before the corpus is read)")
  corpus = write_lines(str(tmp_path / "faq.txt"), [u"", u"\u200b", u"  ", u"\u0001"])
  result, output_file = predict(model, ["--export_dir=" + model.export_base,
                                        "--corpus_file=" + corpus], QUERIES, "tokenless")
  cli.assert_one_line_error(result, "--corpus_file=%s has no text with tokens." % corpus,
                            last=True)
  assert not os.path.exists(output_file)
  index_dir = corpus + ".index"
  assert not os.path.isdir(index_dir) or index_entries(index_dir) == []


def test_corpus_file_for_a_classifier_is_one_line(model, tmp_path):
  corpus = write_lines(str(tmp_path / "faq.txt"), CORPUS)
  result, output_file = predict(model, ["--output_dir=" + CLASSIFIER,
                                        "--corpus_file=" + corpus], [u"好"], "classifier")
  cli.assert_one_line_error(
      result, "--corpus_file is for an embedding model; %s is a classifier: drop "
      "--corpus_file." % CLASSIFIER, last=True)
  assert not os.path.exists(output_file)
  assert not os.path.exists(corpus + ".index")
