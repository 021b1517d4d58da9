# coding=utf-8
"""Benchmarks create_pretraining_data.py: parallel workers against one.

Writes its own corpus into a temporary directory (fixed seed, no external
data): documents of generated Chinese text with some English words, digits and
punctuation, one sentence per line, and a vocab that covers it. Then runs
create_pretraining_data with --num_workers=1, 2 and the default (0 = one per
CPU core), each in a fresh Python process, and prints per run:

  * import_s: the time to import the module (TensorFlow), not part of the work;
  * work_s: the time of create_pretraining_data() itself, best of --repeats;
  * cores: the CPU time of the work (main process and workers) over work_s,
    i.e. how many cores the run really had;
  * the instances written and the peak resident memory of the largest process
    of the run (the main one or a worker; Linux only);
  * speed-up: work_s of --num_workers=1 divided by this run's.

It also checks that the repeats of one worker count wrote the same bytes. The
machine's load average is printed before and after: other processes on the
same cores slow the parallel runs most.

  python scripts/bench_pretraining_data.py [--num_documents 4000] [--dupe_factor 5]
      [--repeats 2] [--workers 1,2,0] [--docs_per_chunk N] [--chinese_segmenter jieba]
"""

import argparse
import hashlib
import itertools
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT_PATH = os.path.abspath(__file__)

ENGLISH_WORDS = ["bert", "model", "data", "app", "game", "vip", "wifi", "iphone", "android",
                 "online", "the", "new", "top", "free", "ok"]
CJK_PUNCTUATION = [u"，", u"、", u"；", u"：", u"“", u"”"]
SENTENCE_ENDS = [u"。", u"！", u"？"]


def make_corpus(num_documents, seed):
  """Returns (corpus text, sorted list of the characters it uses).

  Words of one to three characters drawn with a skewed frequency from about
  3000 common-looking CJK characters, some English words and numbers; 3 to 15
  sentences per document.
  """
  rng = random.Random(seed)
  characters = sorted(set(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(3000)))
  rng.shuffle(characters)
  words = [u"".join(rng.choice(characters[:1500]) for _ in range(rng.choice([1, 2, 2, 3])))
           for _ in range(8000)]
  cum_weights = list(itertools.accumulate(1.0 / (rank + 1) ** 0.8 for rank in range(len(words))))
  documents = []
  for _ in range(num_documents):
    sentences = []
    for _ in range(rng.randint(3, 15)):
      parts = []
      for _ in range(rng.randint(4, 25)):
        roll = rng.random()
        if roll < 0.88:
          parts.append(rng.choices(words, cum_weights=cum_weights)[0])
        elif roll < 0.94:
          parts.append(rng.choice(CJK_PUNCTUATION))
        elif roll < 0.98:
          parts.append(u" %s " % rng.choice(ENGLISH_WORDS))
        else:
          parts.append(str(rng.randint(0, 2024)))
      sentences.append(u"".join(parts).strip() + rng.choice(SENTENCE_ENDS))
    documents.append(u"\n".join(sentences))
  text = u"\n\n".join(documents) + u"\n"
  return text, sorted(set(characters))


def make_vocab(characters):
  """Specials, the CJK characters, ASCII letters and digits (also as ## pieces),
  the English words and the punctuation."""
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  tokens.extend(characters)
  alphanumerics = [chr(c) for c in range(ord("a"), ord("z") + 1)]
  alphanumerics += [str(d) for d in range(10)]
  tokens.extend(alphanumerics)
  tokens.extend("##" + c for c in alphanumerics)
  tokens.extend(ENGLISH_WORDS)
  tokens.extend(str(n) for n in range(100))
  tokens.extend(CJK_PUNCTUATION + SENTENCE_ENDS)
  return tokens


def run_child(args):
  """In the child process: times the import and the work, writes them as JSON."""

  def cpu_seconds():
    # This process and the workers it has reaped.
    return sum(usage.ru_utime + usage.ru_stime for usage in (
        resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))

  start = time.time()
  sys.path.insert(0, REPO_DIR)
  # pylint: disable=g-import-not-at-top
  from bert_mgpu.pretraining import data_settings
  from bert_mgpu.pretraining import pipeline
  # pylint: enable=g-import-not-at-top
  import_seconds = time.time() - start
  settings = data_settings.DataSettings(
      input_file=args.child_input, output_file=args.child_output, vocab_file=args.child_vocab,
      do_whole_word_mask=bool(args.chinese_segmenter), max_seq_length=args.max_seq_length,
      dupe_factor=args.dupe_factor, num_workers=args.child_workers,
      docs_per_chunk=args.docs_per_chunk, chinese_segmenter=args.chinese_segmenter)
  start = time.time()
  start_cpu = cpu_seconds()
  stats = pipeline.create_pretraining_data(settings, progress_interval_seconds=1e9)
  work_seconds = time.time() - start
  work_cpu_seconds = cpu_seconds() - start_cpu
  with open(args.child_result, "w") as f:
    json.dump({"import_seconds": import_seconds, "work_seconds": work_seconds,
               "work_cpu_seconds": work_cpu_seconds,
               "instances": stats.instances, "documents": stats.documents,
               "chunks": stats.chunks}, f)


def run_once(args, workdir, input_path, vocab_path, num_workers, index):
  """Runs one configuration in a fresh process.

  Returns:
    (result dict, peak RSS in MB or None, md5 of the output file).
  """
  output_path = os.path.join(workdir, "out-%d-%d.tfrecord" % (num_workers, index))
  result_path = os.path.join(workdir, "result.json")
  log_path = os.path.join(workdir, "child.log")
  command = [sys.executable, SCRIPT_PATH, "--child_input", input_path,
             "--child_output", output_path, "--child_vocab", vocab_path,
             "--child_workers", str(num_workers), "--child_result", result_path,
             "--dupe_factor", str(args.dupe_factor),
             "--max_seq_length", str(args.max_seq_length),
             "--docs_per_chunk", str(args.docs_per_chunk),
             "--chinese_segmenter", args.chinese_segmenter]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  with open(log_path, "w") as log:
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    peak_mb = None
    if hasattr(os, "wait4"):
      # The rusage of a reaped child covers the children it reaped (the workers).
      _, status, usage = os.wait4(process.pid, 0)
      process.returncode = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
      peak_mb = usage.ru_maxrss / 1024.0
    else:
      process.wait()
  if process.returncode != 0:
    with open(log_path) as log:
      sys.stderr.write(log.read()[-4000:])
    raise SystemExit("the run with --num_workers=%d failed" % num_workers)
  with open(result_path) as f:
    result = json.load(f)
  with open(output_path, "rb") as f:
    digest = hashlib.md5(f.read()).hexdigest()
  os.remove(output_path)
  return result, peak_mb, digest


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--num_documents", type=int, default=4000)
  parser.add_argument("--dupe_factor", type=int, default=5)
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument("--workers", default="1,2,0",
                      help="comma-separated --num_workers values; 0 is the default (all cores)")
  parser.add_argument("--docs_per_chunk", type=int, default=None,
                      help="default: create_pretraining_data's default")
  parser.add_argument("--chinese_segmenter", default="",
                      help="'jieba' also turns on --do_whole_word_mask")
  parser.add_argument("--seed", type=int, default=1)
  for name in ("child_input", "child_output", "child_vocab", "child_result"):
    parser.add_argument("--" + name, help=argparse.SUPPRESS)
  parser.add_argument("--child_workers", type=int, help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child_result:
    run_child(args)
    return
  if args.docs_per_chunk is None:
    # Read from the source so that the parent needs no TensorFlow import.
    with open(os.path.join(REPO_DIR, "bert_mgpu", "pretraining", "data_settings.py"),
              encoding="utf-8") as f:
      for line in f:
        if line.startswith("DEFAULT_DOCS_PER_CHUNK"):
          args.docs_per_chunk = int(line.split("=")[1].split("#")[0])
  workers = [int(w) for w in args.workers.split(",") if w.strip()]

  workdir = tempfile.mkdtemp(prefix="bench_pretraining_data.")
  try:
    text, characters = make_corpus(args.num_documents, args.seed)
    input_path = os.path.join(workdir, "corpus.txt")
    with open(input_path, "w", encoding="utf-8") as f:
      f.write(text)
    vocab_path = os.path.join(workdir, "vocab.txt")
    with open(vocab_path, "w", encoding="utf-8") as f:
      f.write("".join(token + "\n" for token in make_vocab(characters)))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print("corpus: %d documents, %.2f MB; dupe_factor %d, max_seq_length %d, docs_per_chunk %d%s"
          % (args.num_documents, os.path.getsize(input_path) / 1e6, args.dupe_factor,
             args.max_seq_length, args.docs_per_chunk,
             ", whole-word masking with " + args.chinese_segmenter
             if args.chinese_segmenter else ""))
    print("python %s, %d CPU cores, load average before: %s"
          % (sys.version.split()[0], cores, " ".join("%.2f" % x for x in os.getloadavg())))
    rows = []
    for num_workers in workers:
      results = [run_once(args, workdir, input_path, vocab_path, num_workers, index)
                 for index in range(args.repeats)]
      best = min(results, key=lambda r: r[0]["work_seconds"])
      rows.append((num_workers, best[0], max(r[1] or 0 for r in results),
                   len(set(r[2] for r in results)) == 1,
                   [r[0]["work_seconds"] for r in results]))
    print("load average after: %s" % " ".join("%.2f" % x for x in os.getloadavg()))
    serial_seconds = dict((row[0], row[1]["work_seconds"]) for row in rows).get(1)
    print("%-12s %9s %9s %8s %10s %12s %9s %6s  %s" % (
        "num_workers", "import_s", "work_s", "cores", "instances", "peak_rss_MB", "speed-up",
        "same", "all work_s"))
    for num_workers, result, peak_mb, same, all_seconds in rows:
      label = "%d" % num_workers if num_workers else "0 (=%d)" % cores
      speedup = ("%.2fx" % (serial_seconds / result["work_seconds"])
                 if serial_seconds else "-")
      print("%-12s %9.2f %9.2f %8.2f %10d %12s %9s %6s  %s" % (
          label, result["import_seconds"], result["work_seconds"],
          result["work_cpu_seconds"] / result["work_seconds"], result["instances"],
          "%.0f" % peak_mb if peak_mb else "n/a", speedup, "yes" if same else "NO",
          " ".join("%.2f" % s for s in all_seconds)))
  finally:
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
  main()
