# coding=utf-8
"""Retrieval quality of sentence encoders on real matching pairs (issue #64): recall@1,
recall@10 and MRR@10 of each query's answer over a corpus of every answer.

From a pairs file (`text_a<TAB>text_b<TAB>label`, e.g. AFQMC's test.tsv), the positive pairs
(label >= --positive_label) give the queries (text_a, one per positive pair, in file order)
and the answers (text_b). The corpus is every answer once (first-seen order), so each
query's answer has one known corpus line. A query whose own text is also a corpus line is
kept (the count is reported): both systems meet the same queries.

Three steps, so that our model is served through our own search and the peer through its
own `encode` (each under its own Python):

  1. prepare (any Python): the queries, the corpus and the answers' lines.
       python benchmarks/retrieval_quality.py prepare --pairs DATA/test.tsv --out_dir D
     writes D/queries.txt, D/corpus.txt, D/answers.json (the answer line of each query).
  2a. ours, through predict_text.py's search (flat index, exact inner product):
       python predict_text.py --output_dir RUN --input_file D/queries.txt \\
           --corpus_file D/corpus.txt --index_dir D/index --top_k 10 --output_file HITS
  2b. the sentence-transformers model (the bench venv): its vectors, unit length.
       /work/bench-venv/bin/python benchmarks/retrieval_quality.py encode_st \\
           --model ST_DIR --texts D/queries.txt --out Q.npy   (and D/corpus.txt -> C.npy)
  3. score (any Python with NumPy):
       python benchmarks/retrieval_quality.py score --out_dir D \\
           --system ours/s1=hits:HITS --system st/s1=vectors:Q.npy,C.npy ...
     One JSON line per system (recall@1, recall@10, mrr@10, queries, corpus), then per name
     before "/" the mean and sample standard deviation over its systems (seeds), and a table.

Vectors (a system given as vectors, either model's) are ranked by brute force: cosine of the
unit rows, score descending then corpus line ascending (the order predict_text.py's search
gives). A hits file is predict_text.py's output, one {"query", "hits": [{"line", "text",
"score"}]} per query line, in query order. A query's rank is that of its answer's line among
its first 10 hits (absent: not found; its reciprocal rank is 0).
"""

import argparse
import json
import os
import statistics
import sys

TOP = 10


def read_pairs(path, positive_label):
  """(text_a, text_b) of the positive pairs, in file order."""
  pairs = []
  with open(path, encoding="utf-8") as f:
    for number, line in enumerate(f, 1):
      line = line.rstrip("\n")
      if not line:
        continue
      fields = line.split("\t")
      if len(fields) < 3:
        sys.exit("%s:%d: want text_a<TAB>text_b<TAB>label" % (path, number))
      if float(fields[2]) >= positive_label and fields[0].strip() and fields[1].strip():
        pairs.append((fields[0].strip(), fields[1].strip()))
  return pairs


def prepare(args):
  pairs = read_pairs(args.pairs, args.positive_label)
  corpus, line_of = [], {}
  for _, answer in pairs:
    if answer not in line_of:
      line_of[answer] = len(corpus)
      corpus.append(answer)
  queries = [query for query, _ in pairs]
  answers = [line_of[answer] for _, answer in pairs]
  self_in_corpus = sum(1 for q, a in zip(queries, answers) if q in line_of and line_of[q] != a)
  os.makedirs(args.out_dir, exist_ok=True)
  for name, texts in (("queries.txt", queries), ("corpus.txt", corpus)):
    with open(os.path.join(args.out_dir, name), "w", encoding="utf-8", newline="\n") as f:
      f.write("".join(text + "\n" for text in texts))
  info = {"pairs_file": os.path.abspath(args.pairs), "positive_label": args.positive_label,
          "queries": len(queries), "corpus": len(corpus),
          "queries_whose_text_is_another_corpus_line": self_in_corpus, "answers": answers}
  with open(os.path.join(args.out_dir, "answers.json"), "w", encoding="utf-8") as f:
    json.dump(info, f)
  print(json.dumps({k: v for k, v in info.items() if k != "answers"}))


def encode_st(args):
  """The SentenceTransformer's unit vectors of --texts into --out (.npy, float32)."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  from sentence_transformers import SentenceTransformer  # pylint: disable=import-outside-toplevel
  torch.set_num_threads(args.threads)
  model = SentenceTransformer(args.model, device="cpu")
  model.max_seq_length = args.max_seq_length
  with open(args.texts, encoding="utf-8") as f:
    texts = [line.rstrip("\n") for line in f]
  vectors = model.encode(texts, batch_size=args.batch_size, convert_to_numpy=True,
                         normalize_embeddings=True, show_progress_bar=False)
  np.save(args.out, vectors.astype(np.float32))
  print(json.dumps({"texts": len(texts), "dim": int(vectors.shape[1]), "out": args.out}))


def ranks_from_hits(path, queries, answers):
  """Rank (1-based) of each query's answer among its hits, None when absent."""
  ranks = []
  with open(path, encoding="utf-8") as f:
    records = [json.loads(line) for line in f if line.strip()]
  if len(records) != len(queries):
    sys.exit("%s: %d records for %d queries" % (path, len(records), len(queries)))
  for record, query, answer in zip(records, queries, answers):
    if record["query"] != query:
      sys.exit("%s: the record of query %r reads %r" % (path, query, record["query"]))
    lines = [hit["line"] for hit in record["hits"][:TOP]]
    ranks.append(lines.index(answer) + 1 if answer in lines else None)
  return ranks


def ranks_from_vectors(query_path, corpus_path, answers):
  """Brute-force cosine ranking: score descending, then line ascending."""
  import numpy as np  # pylint: disable=import-outside-toplevel

  def unit(path):
    v = np.load(path).astype(np.float64)
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
  queries, corpus = unit(query_path), unit(corpus_path)
  if len(queries) != len(answers):
    sys.exit("%s: %d vectors for %d queries" % (query_path, len(queries), len(answers)))
  scores = (queries @ corpus.T).astype(np.float32)
  ranks = []
  lines = np.arange(corpus.shape[0])
  for row, answer in zip(scores, answers):
    order = np.lexsort((lines, -row))[:TOP]
    found = np.nonzero(order == answer)[0]
    ranks.append(int(found[0]) + 1 if len(found) else None)
  return ranks


def metrics(ranks):
  n = len(ranks)
  return {"recall@1": sum(1 for r in ranks if r == 1) / n,
          "recall@10": sum(1 for r in ranks if r is not None and r <= TOP) / n,
          "mrr@10": sum(1.0 / r for r in ranks if r is not None and r <= TOP) / n}


def score(args):
  with open(os.path.join(args.out_dir, "answers.json"), encoding="utf-8") as f:
    info = json.load(f)
  answers = info["answers"]
  with open(os.path.join(args.out_dir, "queries.txt"), encoding="utf-8") as f:
    queries = [line.rstrip("\n") for line in f]
  results = []
  for spec in args.system:
    name, _, rest = spec.partition("=")
    form, _, paths = rest.partition(":")
    if form == "hits":
      ranks = ranks_from_hits(paths, queries, answers)
    elif form == "vectors":
      query_path, _, corpus_path = paths.partition(",")
      ranks = ranks_from_vectors(query_path, corpus_path, answers)
    else:
      sys.exit("--system NAME=hits:FILE or NAME=vectors:QUERIES.npy,CORPUS.npy, not %r" % spec)
    result = dict(system=name, source=rest, queries=len(queries), corpus=info["corpus"],
                  **metrics(ranks))
    results.append(result)
    print(json.dumps(result))
  groups = {}
  for result in results:
    groups.setdefault(result["system"].split("/")[0], []).append(result)
  print("%-10s %5s  %-16s %-16s %-16s" % ("system", "runs", "recall@1", "recall@10", "MRR@10"))
  for group, members in groups.items():
    summary = {"group": group, "runs": len(members)}
    cells = []
    for key in ("recall@1", "recall@10", "mrr@10"):
      values = [m[key] for m in members]
      mean = statistics.mean(values)
      sd = statistics.stdev(values) if len(values) > 1 else 0.0
      summary[key] = {"mean": mean, "sd": sd, "values": values}
      cells.append("%.4f +- %.4f" % (mean, sd))
    print(json.dumps(summary))
    print("%-10s %5d  %-16s %-16s %-16s" % ((group, len(members)) + tuple(cells)))


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  sub = p.add_subparsers(dest="command", required=True)
  a = sub.add_parser("prepare", help="queries, corpus and answers from a pairs file")
  a.add_argument("--pairs", required=True)
  a.add_argument("--out_dir", required=True)
  a.add_argument("--positive_label", type=float, default=1.0)
  e = sub.add_parser("encode_st", help="a SentenceTransformer's unit vectors (bench venv)")
  e.add_argument("--model", required=True)
  e.add_argument("--texts", required=True)
  e.add_argument("--out", required=True)
  e.add_argument("--batch_size", type=int, default=64)
  e.add_argument("--max_seq_length", type=int, default=64)
  e.add_argument("--threads", type=int, default=2)
  s = sub.add_parser("score", help="recall@1, recall@10, MRR@10 per system")
  s.add_argument("--out_dir", required=True, help="prepare's directory")
  s.add_argument("--system", action="append", required=True,
                 help="NAME=hits:FILE (predict_text.py --corpus_file output) or "
                      "NAME=vectors:QUERIES.npy,CORPUS.npy; NAME's part before '/' groups "
                      "runs (seeds)")
  args = p.parse_args(argv)
  {"prepare": prepare, "encode_st": encode_st, "score": score}[args.command](args)


if __name__ == "__main__":
  main()
