# coding=utf-8
"""Our embedding models through sentence-transformers' format, checked with the real
sentence-transformers library (docs/EMBEDDINGS.md, docs/HUGGING_FACE.md).

Out: a trained run_embedding_mgpu.py output_dir -> convert_checkpoint.py
--to=sentence_transformers -> SentenceTransformer(DIR).encode, against predict_text.py's
vectors of the same texts.

In: that SentenceTransformer saved again by sentence-transformers itself (its own, newer
layout) -> convert_checkpoint.py --to=tensorflow -> run_embedding_mgpu.py --init_checkpoint
--embed_file, against its encode; then, with --data_dir, a short fine-tuning run here from
that start, whose dev scores are printed beside the start's.

Runs with our TensorFlow environment; sentence-transformers runs in --st_python's (a
separate process: torch and TensorFlow need not share one environment).

  python benchmarks/sentence_transformers_parity.py --model_dir=OUT --texts=texts.txt \
      --work_dir=/tmp/parity --st_python=/work/bench-venv/bin/python [--data_dir=STSB]
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_SECONDS = 1800

# Run in --st_python: encodes argv[2]'s lines with SentenceTransformer(argv[1]) into argv[3]
# (.npy); with argv[4], saves that model there with sentence-transformers' own save().
_ST_SCRIPT = """
import sys
import numpy as np
from sentence_transformers import SentenceTransformer
model = SentenceTransformer(sys.argv[1], device="cpu")
with open(sys.argv[2], encoding="utf-8") as f:
  texts = [line.rstrip("\\n") for line in f if line.strip()]
np.save(sys.argv[3], model.encode(texts, batch_size=32).astype(np.float32))
if len(sys.argv) > 4:
  model.save(sys.argv[4])
print(model)
"""


def run(command, **kwargs):
  """Runs a command, bounded in time; exits with its output when it fails."""
  result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=TIMEOUT_SECONDS, **kwargs)
  if result.returncode != 0:
    sys.exit("failed: %s\n%s" % (" ".join(command), result.stderr[-3000:]))
  return result


def ours(script, *flags):
  return run([sys.executable, os.path.join(REPO, script)] + list(flags))


def compare(name, ours_vectors, theirs_vectors):
  difference = float(np.max(np.abs(ours_vectors - theirs_vectors)))
  cosines = np.sum(ours_vectors * theirs_vectors, axis=1) / (
      np.linalg.norm(ours_vectors, axis=1) * np.linalg.norm(theirs_vectors, axis=1))
  print("%-44s %d texts, dim %d: largest |difference| %.2e, lowest cosine %.8f" % (
      name, len(ours_vectors), ours_vectors.shape[1], difference, float(cosines.min())))
  return difference


def dev_scores(output_dir):
  path = os.path.join(output_dir, "eval_results.txt")
  with open(path, encoding="utf-8") as f:
    return dict(line.strip().split(" = ") for line in f if " = " in line)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--model_dir", required=True, help="a run_embedding_mgpu.py output_dir")
  parser.add_argument("--texts", required=True, help="texts to embed, one per line")
  parser.add_argument("--work_dir", required=True)
  parser.add_argument("--st_python", required=True, help="a python with sentence-transformers")
  parser.add_argument("--data_dir", help="with it: fine-tune here from the converted start")
  parser.add_argument("--epochs", type=float, default=1.0)
  args = parser.parse_args()
  work = args.work_dir
  if os.path.exists(work) and os.listdir(work):
    sys.exit("--work_dir=%s is not empty: give a new or empty directory." % work)
  os.makedirs(work, exist_ok=True)
  with open(args.texts, encoding="utf-8") as f:
    texts = [line.rstrip("\n") for line in f if line.strip()]
  texts_file = os.path.join(work, "texts.txt")
  with open(texts_file, "w", encoding="utf-8") as f:
    f.write("".join(t + "\n" for t in texts))
  with open(os.path.join(args.model_dir, "model_settings.json"), encoding="utf-8") as f:
    settings = json.load(f)
  print("model %s: %s" % (args.model_dir, settings))
  st_version = run([args.st_python, "-c", "import sentence_transformers, torch; "
                    "print(sentence_transformers.__version__, torch.__version__)"]).stdout
  print("sentence-transformers, torch: %s" % st_version.strip())

  # Out.
  st_dir = os.path.join(work, "st")
  ours("convert_checkpoint.py", "--to=sentence_transformers", "--input=" + args.model_dir,
       "--output=" + st_dir)
  ours("predict_text.py", "--output_dir=" + args.model_dir, "--input_file=" + texts_file,
       "--output_format=npy", "--output_file=" + os.path.join(work, "ours.npy"))
  saved_dir = os.path.join(work, "st_saved")
  printed = run([args.st_python, "-c", _ST_SCRIPT, st_dir, texts_file,
                 os.path.join(work, "st.npy"), saved_dir]).stdout
  print(printed.strip())
  out_difference = compare("out: SentenceTransformer(ours).encode",
                           np.load(os.path.join(work, "ours.npy")),
                           np.load(os.path.join(work, "st.npy")))

  # In: the directory sentence-transformers saved.
  start = os.path.join(work, "start")
  ours("convert_checkpoint.py", "--to=tensorflow", "--input=" + saved_dir, "--output=" + start)
  checkpoint = os.path.join(start, "bert_model.ckpt")
  model_flags = ["--init_checkpoint=" + checkpoint,
                 "--vocab_file=" + os.path.join(start, "vocab.txt"),
                 "--bert_config_file=" + os.path.join(start, "bert_config.json")]
  embedded = os.path.join(work, "from_st")
  ours("run_embedding_mgpu.py", "--output_dir=" + embedded, "--embed_file=" + texts_file,
       *model_flags)
  run([args.st_python, "-c", _ST_SCRIPT, saved_dir, texts_file,
       os.path.join(work, "st_saved.npy")])
  in_difference = compare("in: ours from sentence-transformers' save",
                          np.load(os.path.join(embedded, "embeddings.npy")),
                          np.load(os.path.join(work, "st_saved.npy")))
  verdict = "within" if max(out_difference, in_difference) <= 1e-5 else "NOT within"
  print("both directions %s 1e-5" % verdict)

  if args.data_dir:
    for name, extra in (("start", []), ("fine-tuned", [
        "--do_train", "--num_train_epochs=%g" % args.epochs,
        "--learning_rate=2e-5", "--train_batch_size=32"])):
      output_dir = os.path.join(work, "tune_" + name.replace("-", "_"))
      ours("run_embedding_mgpu.py", "--output_dir=" + output_dir, "--data_dir=" + args.data_dir,
           "--do_eval", *(model_flags + extra))
      print("dev, %-10s %s" % (name, dev_scores(output_dir)))


if __name__ == "__main__":
  main()
