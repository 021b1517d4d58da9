# coding=utf-8
"""Serving an embedding model (issue #64): the corpus pass (embeddings per second) and the
latency of one search query, ours against sentence-transformers.

Corpus pass (`corpus`): the first --n lines of --titles through each --configs entry, one
fresh process per measurement, alternating A B C ... A B C ... for --rounds rounds:

  tf        predict_text.py's TensorFlow path in-process, built from the package as
            predict_text.py builds it (serving/predictor.load_export, load_predictor on one
            tower, batch --batch_size), then the file mode's featurize_file + predict +
            decode (no output written)
  onnx      the same with --backend=onnxruntime on model.onnx (fp32)
  int8      the same on model.int8.onnx
  int8_3l   the same on --export_dir_3l's model.int8.onnx (the 3-layer model)
  st        sentence-transformers' encode (fp32, the same batch size, max_seq_length and
            texts) of SentenceTransformer(modules=[Transformer(--hf_dir, max_seq_length),
            Pooling(hidden, 'mean'), Normalize()]), under --bench_python
Each process loads its model, warms up on --warmup texts (not timed), then times the pass;
one line per measurement: cpu, config, round, texts, seconds, embeddings_per_s, and the
featurizing seconds (ours) and load seconds. A summary gives per config the mean rate and
each config's ratio to tf. Before any timing, --parity_texts titles are encoded by tf and
st and their cosines printed; the run stops when any is below 0.999 (not the same model).

Query latency (`query`): --export_dir_3l's int8 model (--query_onnx_file) serves
--titles' first --n_index lines as predict_text.py --corpus_file does (EmbeddingPredictor
.prepare: the corpus encoded once and the index kept in --index_dir; a rerun loads it), flat
and hnsw (M, efSearch: search.py's defaults unless given). Then each of --n_queries query
lines (--queries, texts outside the corpus) is answered alone, as POST /search answers one:
featurize + encode + CorpusIndex.search at top_k 10, and p50/p99 of that and of the search
alone are printed. hnsw's recall@10 against flat over those queries follows, at the
default efSearch and at --ef_list.

  python benchmarks/embedding_serving.py corpus --titles T --n 10000 --rounds 2 \\
      --export_dir E12 --export_dir_3l E3 --hf_dir HF12
  python benchmarks/embedding_serving.py query --titles T --queries Q --index_dir D \\
      --export_dir_3l E3

--tf_python (TensorFlow, onnxruntime, faiss) and --bench_python (torch,
sentence-transformers) run the workers; this process imports neither.
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bert_mgpu.serving import kinds  # pylint: disable=wrong-import-position

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = ("tf", "onnx", "int8", "int8_3l", "st")


def cpu_model_name():
  try:
    out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    for line in out.splitlines():
      if line.startswith("Model name:"):
        return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return "unknown"


def read_titles(path, n, start=0):
  with open(path, encoding="utf-8") as f:
    lines = [line.rstrip("\n") for line in f]
  return lines[start:start + n]


# ---------------------------------------------------------------------------
# Workers (run in their own process)
# ---------------------------------------------------------------------------

def _our_predictor(export_dir, backend, onnx_file, batch_size, kind_flags=None):
  """The export's predictor as predict_text.py builds it for --backend (onnxruntime on
  onnx_file, or tensorflow on one tower), given the embedding kind's flags and prepared
  (with "corpus_file": its index loaded or built). Returns (model, predictor)."""
  sys.path.insert(0, ROOT)
  import logging  # pylint: disable=import-outside-toplevel
  # The serving code logs through the "tensorflow" logger (absl's handler is not set up here).
  logger = logging.getLogger("tensorflow")
  if not logger.handlers:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
  logger.setLevel(logging.INFO)
  # pylint: disable=import-outside-toplevel
  if backend == "onnxruntime":
    from bert_mgpu.serving import onnx_predictor
    model = onnx_predictor.load_model(export_dir, onnx_file)
    predictor = onnx_predictor.make_predictor(
        model, onnx_predictor.open_session(model, None), batch_size, length_multiple=1)
  else:
    from bert_mgpu.serving import predictor as serving_predictor
    from bert_mgpu.training import run_settings
    model = serving_predictor.load_export(export_dir)
    predictor = serving_predictor.load_predictor(model, run_settings.DeviceSettings().check(),
                                                 batch_size)
  # pylint: enable=import-outside-toplevel
  model.files.kind.check_flags(kind_flags or {}, False)
  predictor.use_flags(kind_flags or {})
  predictor.prepare()
  return model, predictor


def worker_ours(args):
  """One corpus pass of ours (tf, onnx, int8, int8_3l): a JSON line on stdout."""
  start = time.perf_counter()
  model, predictor = _our_predictor(args.export_dir, args.backend, args.onnx_file,
                                    args.batch_size)
  kind = model.files.kind
  load_seconds = time.perf_counter() - start
  titles = read_titles(args.titles, args.n)

  def inputs_of(texts):
    return kind.parse_input_file("titles", "".join(t + "\n" for t in texts), False,
                                 kinds.InputLimits())
  warm = predictor.featurize_file("warmup", inputs_of(titles[:args.warmup]))
  predictor.decode(warm, predictor.predict(warm.features))
  inputs = inputs_of(titles)
  t0 = time.perf_counter()
  featurized = predictor.featurize_file("titles", inputs)
  t1 = time.perf_counter()
  records = predictor.decode(featurized, predictor.predict(featurized.features))
  t2 = time.perf_counter()
  if args.dump:
    import numpy as np  # pylint: disable=import-outside-toplevel
    np.save(args.dump, np.array([r.embedding for r in records], np.float32))
  print(json.dumps({"texts": len(records), "seconds": t2 - t0, "featurize_seconds": t1 - t0,
                    "truncated": int(featurized.features.truncated.sum()),
                    "load_seconds": load_seconds}), flush=True)
  predictor.close()


def worker_st(args):
  """One corpus pass of sentence-transformers' encode: a JSON line on stdout."""
  start = time.perf_counter()
  import numpy as np  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  from sentence_transformers import SentenceTransformer  # pylint: disable=import-outside-toplevel
  from sentence_transformers import models  # pylint: disable=import-outside-toplevel
  torch.set_num_threads(args.threads or os.cpu_count())
  transformer = models.Transformer(args.hf_dir, max_seq_length=args.max_seq_length)
  dim = transformer.get_word_embedding_dimension()
  model = SentenceTransformer(modules=[transformer, models.Pooling(dim, "mean"),
                                       models.Normalize()], device="cpu")
  model.eval()
  load_seconds = time.perf_counter() - start
  titles = read_titles(args.titles, args.n)
  model.encode(titles[:args.warmup], batch_size=args.batch_size, show_progress_bar=False)
  t0 = time.perf_counter()
  vectors = model.encode(titles, batch_size=args.batch_size, show_progress_bar=False,
                         convert_to_numpy=True)
  t1 = time.perf_counter()
  if args.dump:
    np.save(args.dump, vectors.astype(np.float32))
  print(json.dumps({"texts": len(titles), "seconds": t1 - t0, "load_seconds": load_seconds,
                    "torch": torch.__version__, "threads": torch.get_num_threads()}),
        flush=True)


def _percentile(values, q):
  import numpy as np  # pylint: disable=import-outside-toplevel
  return float(np.percentile(np.asarray(values), q))


def _corpus_file(args):
  """The first --n_index titles as a corpus file in --index_dir (written once)."""
  titles_n = len(read_titles(args.titles, args.n_index))
  if titles_n < args.n_index:
    sys.exit("%s has %d lines, fewer than --n_index=%d" % (args.titles, titles_n, args.n_index))
  corpus_file = os.path.join(args.index_dir, "corpus_%d.txt" % args.n_index)
  if not os.path.isfile(corpus_file):
    os.makedirs(args.index_dir, exist_ok=True)
    with open(corpus_file + ".tmp", "w", encoding="utf-8", newline="\n") as f:
      f.write("".join(t + "\n" for t in read_titles(args.titles, args.n_index)))
    os.rename(corpus_file + ".tmp", corpus_file)
  return corpus_file


def _search_predictor(args, corpus_file, index_type):
  """The 3-layer export's predictor on ONNX Runtime with --corpus_file indexed as
  `index_type`, and the seconds its preparation took (encoding or loading the index)."""
  kind_flags = {"corpus_file": corpus_file, "index": index_type,
                "index_dir": args.index_dir, "top_k": 10}
  if index_type == "hnsw":
    kind_flags.update(hnsw_m=args.hnsw_m, ef_search=args.ef_search)
  t0 = time.perf_counter()
  _, predictor = _our_predictor(args.export_dir_3l, "onnxruntime", args.query_onnx_file, 32,
                                kind_flags)
  return predictor, time.perf_counter() - t0


def _timed_queries(predictor, queries, warmup):
  """(seconds of featurize + encode + search, seconds of search, hit lines) per query."""
  for q in queries[:warmup]:
    predictor.corpus.search(predictor.predict(predictor.featurize([q]).features)["embeddings"],
                            10)
  total, search_only, hits = [], [], []
  for q in queries:
    t0 = time.perf_counter()
    vectors = predictor.predict(predictor.featurize([q]).features)["embeddings"]
    t1 = time.perf_counter()
    result = predictor.corpus.search(vectors, 10)
    t2 = time.perf_counter()
    total.append(t2 - t0)
    search_only.append(t2 - t1)
    hits.append([hit.line for hit in result[0]])
  return total, search_only, hits


def _print_hnsw_recall(args, flat, hnsw, queries):
  """hnsw recall@10 against flat on the same query vectors, efSearch varied on the loaded
  index (restored to --ef_search after)."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  vectors = flat.predict(flat.featurize(queries).features)["embeddings"]
  exact = [[h.line for h in r] for r in flat.corpus.search(vectors, 10)]
  index = hnsw.corpus.index
  for ef in [args.ef_search] + [e for e in args.ef_list if e != args.ef_search]:
    index.hnsw.efSearch = ef
    approx = [[h.line for h in r] for r in hnsw.corpus.search(vectors, 10)]
    t0 = time.perf_counter()
    for i in range(len(vectors)):
      hnsw.corpus.search(vectors[i:i + 1], 10)
    per_query = (time.perf_counter() - t0) / len(vectors)
    print(json.dumps({"measure": "hnsw_recall@10_vs_flat", "ef_search": ef,
                      "hnsw_m": args.hnsw_m, "queries": len(vectors),
                      "recall@10": _recall_at_10(approx, exact),
                      "search_mean_ms": 1e3 * per_query,
                      "default": ef == args.ef_search}), flush=True)
  index.hnsw.efSearch = args.ef_search


def _recall_at_10(approx, exact):
  return sum(len(set(a) & set(e)) / 10.0 for a, e in zip(approx, exact)) / len(exact)


def _print_encode_latency(args, queries):
  """For each --extra_encoders model: featurize + encode of one query alone, no search (their
  vectors do not belong to the index's model)."""
  for spec in args.extra_encoders:
    export_dir, _, onnx_file = spec.partition(":")
    backend = "onnxruntime" if onnx_file else "tensorflow"
    _, predictor = _our_predictor(export_dir, backend, onnx_file or None, 32)
    for q in queries[:args.warmup_queries]:
      predictor.predict(predictor.featurize([q]).features)
    encode = []
    for q in queries:
      t0 = time.perf_counter()
      predictor.predict(predictor.featurize([q]).features)
      encode.append(time.perf_counter() - t0)
    print(json.dumps({"measure": "one_query_encode_latency", "model": spec,
                      "backend": backend, "queries": len(queries),
                      "p50_ms": 1e3 * _percentile(encode, 50),
                      "p99_ms": 1e3 * _percentile(encode, 99)}), flush=True)
    predictor.close()


def worker_query(args):
  """Query latency and hnsw recall (see the module doc): JSON lines on stdout."""
  corpus_file = _corpus_file(args)
  queries = read_titles(args.queries, args.n_queries)
  found, predictors = {}, {}
  for index_type in ("flat", "hnsw"):
    predictor, prepare_seconds = _search_predictor(args, corpus_file, index_type)
    predictors[index_type] = predictor
    total, search_only, found[index_type] = _timed_queries(predictor, queries,
                                                           args.warmup_queries)
    line = {"measure": "query_latency", "index": index_type, "corpus": len(predictor.corpus),
            "queries": len(queries), "top_k": 10,
            "p50_ms": 1e3 * _percentile(total, 50), "p99_ms": 1e3 * _percentile(total, 99),
            "search_p50_ms": 1e3 * _percentile(search_only, 50),
            "search_p99_ms": 1e3 * _percentile(search_only, 99),
            "mean_ms": 1e3 * sum(total) / len(total),
            "prepare_seconds": prepare_seconds, "index_dir": predictor.corpus.directory,
            "model": os.path.join(args.export_dir_3l, args.query_onnx_file)}
    if index_type == "hnsw":
      line.update(hnsw_m=args.hnsw_m, ef_search=args.ef_search)
    print(json.dumps(line), flush=True)
  _print_hnsw_recall(args, predictors["flat"], predictors["hnsw"], queries)
  # The same check on the query lists measured above (encoded one at a time).
  print(json.dumps({"measure": "hnsw_recall@10_vs_flat_timed_queries",
                    "ef_search": args.ef_search,
                    "recall@10": _recall_at_10(found["hnsw"], found["flat"])}), flush=True)
  _print_encode_latency(args, queries)


# ---------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------

def run_worker(python, worker_args, log_path, timeout):
  """Runs this script as a worker; returns its last stdout line's JSON (dicts: all lines)."""
  command = [python, os.path.abspath(__file__)] + worker_args
  with open(log_path, "a", encoding="utf-8") as log:
    log.write("\n$ " + shlex.join(command) + "\n")
    log.flush()
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, text=True,
                          timeout=timeout, cwd=ROOT, check=False)
  if proc.returncode != 0:
    sys.exit("worker failed (rc %d): %s; see %s" % (proc.returncode, shlex.join(command),
                                                     log_path))
  return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def config_args(args, config, n, dump=None):
  common = ["--titles", args.titles, "--n", str(n), "--batch_size", str(args.batch_size),
            "--warmup", str(args.warmup)]
  if dump:
    common += ["--dump", dump]
  if config == "st":
    return args.bench_python, ["worker_st", "--hf_dir", args.hf_dir, "--max_seq_length",
                               str(args.max_seq_length), "--threads", str(args.threads)] + common
  export_dir = args.export_dir_3l if config == "int8_3l" else args.export_dir
  extra = []
  if config != "tf":
    extra = ["--backend", "onnxruntime", "--onnx_file",
             "model.onnx" if config == "onnx" else "model.int8.onnx"]
  return args.tf_python, ["worker_ours", "--export_dir", export_dir] + extra + common


def corpus(args):
  cpu = cpu_model_name()
  configs = [c.strip() for c in args.configs.split(",") if c.strip()]
  for c in configs:
    if c not in CONFIGS:
      sys.exit("--configs: %r is not one of %s" % (c, ", ".join(CONFIGS)))
  os.makedirs(args.work_dir, exist_ok=True)
  log_path = os.path.join(args.work_dir, "workers.log")
  print("cpu: %s (%d logical CPUs); titles %s, n %d, batch %d, max_seq_length %d" % (
      cpu, os.cpu_count(), args.titles, args.n, args.batch_size, args.max_seq_length),
        flush=True)
  if args.parity_texts and "st" in configs:
    dumps = {}
    for c in ("tf", "st"):
      dumps[c] = os.path.join(args.work_dir, "parity_%s.npy" % c)
      python, wargs = config_args(args, c, args.parity_texts, dumps[c])
      wargs[wargs.index("--warmup") + 1] = "1"
      run_worker(python, wargs, log_path, args.timeout)
    import numpy as np  # pylint: disable=import-outside-toplevel
    a, b = np.load(dumps["tf"]), np.load(dumps["st"])
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    cosines = np.sum(a * b, axis=1)
    print(json.dumps({"measure": "parity_tf_vs_st", "texts": len(cosines),
                      "min_cosine": float(cosines.min()), "mean_cosine": float(cosines.mean()),
                      "max_abs_diff": float(np.abs(a - b).max())}), flush=True)
    if cosines.min() < 0.999:
      sys.exit("sentence-transformers' vectors differ from ours (min cosine %.6f): not the "
               "same model; no timing" % cosines.min())
  rates = {c: [] for c in configs}
  for rnd in range(1, args.rounds + 1):
    for c in configs:
      python, wargs = config_args(args, c, args.n)
      result = run_worker(python, wargs, log_path, args.timeout)[-1]
      rate = result["texts"] / result["seconds"]
      rates[c].append(rate)
      line = {"cpu": cpu, "config": c, "round": rnd, "texts": result["texts"],
              "seconds": round(result["seconds"], 3), "embeddings_per_s": round(rate, 1),
              "batch_size": args.batch_size, "load_seconds": round(result["load_seconds"], 2)}
      for key in ("featurize_seconds", "truncated", "threads", "torch"):
        if key in result:
          line[key] = result[key]
      print(json.dumps(line), flush=True)
  summary = {"cpu": cpu, "texts": args.n, "rounds": args.rounds, "mean_embeddings_per_s":
             {c: round(statistics.mean(v), 1) for c, v in rates.items()}}
  if "tf" in rates:
    tf_rate = statistics.mean(rates["tf"])
    summary["ratio_to_tf"] = {c: round(statistics.mean(v) / tf_rate, 3)
                              for c, v in rates.items()}
  print(json.dumps({"measure": "corpus_pass_summary", **summary}), flush=True)


def query(args):
  cpu = cpu_model_name()
  os.makedirs(args.index_dir, exist_ok=True)
  log_path = os.path.join(args.index_dir, "query_worker.log")
  print("cpu: %s (%d logical CPUs)" % (cpu, os.cpu_count()), flush=True)
  wargs = ["worker_query", "--titles", args.titles, "--queries", args.queries,
           "--n_index", str(args.n_index), "--n_queries", str(args.n_queries),
           "--index_dir", args.index_dir, "--export_dir_3l", args.export_dir_3l,
           "--query_onnx_file", args.query_onnx_file, "--hnsw_m", str(args.hnsw_m),
           "--ef_search", str(args.ef_search), "--warmup_queries", str(args.warmup_queries),
           "--ef_list"] + [str(e) for e in args.ef_list]
  if args.extra_encoders:
    wargs += ["--extra_encoders"] + args.extra_encoders
  for line in run_worker(args.tf_python, wargs, log_path, args.timeout):
    print(json.dumps({"cpu": cpu, **line}), flush=True)


def _add_corpus_worker_args(parser):
  """The arguments both corpus-pass workers (ours, sentence-transformers') take."""
  parser.add_argument("--titles", required=True)
  parser.add_argument("--n", type=int, required=True)
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--warmup", type=int, default=256)
  parser.add_argument("--dump", default=None)


def main(argv=None):
  sys.path.insert(0, ROOT)
  p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  sub = p.add_subparsers(dest="command", required=True)
  tf_python = "/work/main/.venv-tf2/bin/python"

  c = sub.add_parser("corpus", help="embeddings/s of the corpus pass, A B A B")
  c.add_argument("--titles", required=True)
  c.add_argument("--n", type=int, default=100000, help="titles per measurement")
  c.add_argument("--rounds", type=int, default=2)
  c.add_argument("--configs", default=",".join(CONFIGS))
  c.add_argument("--export_dir", required=True, help="the BERT-base export (both formats)")
  c.add_argument("--export_dir_3l", required=True, help="the 3-layer export (int8)")
  c.add_argument("--hf_dir", required=True, help="the BERT-base in transformers' format")
  c.add_argument("--batch_size", type=int, default=32)
  c.add_argument("--max_seq_length", type=int, default=64)
  c.add_argument("--threads", type=int, default=0, help="torch threads (0: all CPUs)")
  c.add_argument("--warmup", type=int, default=256)
  c.add_argument("--parity_texts", type=int, default=20)
  c.add_argument("--work_dir", default="/tmp/embedding_serving")
  c.add_argument("--timeout", type=float, default=3600)
  c.add_argument("--tf_python", default=tf_python)
  c.add_argument("--bench_python", default="/work/bench-venv/bin/python")

  q = sub.add_parser("query", help="p50/p99 of one query over the index; hnsw recall")
  q.add_argument("--titles", required=True, help="the corpus: its first --n_index lines")
  q.add_argument("--n_index", type=int, default=100000)
  q.add_argument("--queries", required=True, help="query texts, one a line (not in the corpus)")
  q.add_argument("--n_queries", type=int, default=1000)
  q.add_argument("--warmup_queries", type=int, default=20)
  q.add_argument("--index_dir", required=True)
  q.add_argument("--export_dir_3l", required=True)
  q.add_argument("--query_onnx_file", default="model.int8.onnx")
  q.add_argument("--hnsw_m", type=int, default=32)
  q.add_argument("--ef_search", type=int, default=128)
  q.add_argument("--ef_list", type=int, nargs="*", default=[16, 32, 64, 256])
  q.add_argument("--extra_encoders", nargs="*", default=[],
                 help="EXPORT_DIR:ONNX_FILE (onnxruntime) or EXPORT_DIR (TensorFlow): also "
                      "the latency of encoding one query with these (no search)")
  q.add_argument("--timeout", type=float, default=3600)
  q.add_argument("--tf_python", default=tf_python)

  w = sub.add_parser("worker_ours")
  w.add_argument("--export_dir", required=True)
  w.add_argument("--backend", default="tensorflow")
  w.add_argument("--onnx_file", default="model.onnx")
  _add_corpus_worker_args(w)
  s = sub.add_parser("worker_st")
  s.add_argument("--hf_dir", required=True)
  s.add_argument("--max_seq_length", type=int, default=64)
  s.add_argument("--threads", type=int, default=0)
  _add_corpus_worker_args(s)
  wq = sub.add_parser("worker_query")
  for name in ("--titles", "--queries", "--index_dir", "--export_dir_3l", "--query_onnx_file"):
    wq.add_argument(name, required=True)
  for name in ("--n_index", "--n_queries", "--hnsw_m", "--ef_search", "--warmup_queries"):
    wq.add_argument(name, type=int, required=True)
  wq.add_argument("--ef_list", type=int, nargs="*", default=[])
  wq.add_argument("--extra_encoders", nargs="*", default=[])

  args = p.parse_args(argv)
  {"corpus": corpus, "query": query, "worker_ours": worker_ours, "worker_st": worker_st,
   "worker_query": worker_query}[args.command](args)


if __name__ == "__main__":
  main()
