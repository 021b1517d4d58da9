# coding=utf-8
"""The three ways of serving a classifier export, side by side: predict_text.py's TensorFlow
path, ONNX Runtime float32 (model.onnx) and ONNX Runtime int8 (model.int8.onnx); issue #33.

Real texts: SophonPlus/ChineseNlpCorpus's waimai_10k.csv (--csv), split by
benchmarks/make_review_data.py into --work_dir/data (train / dev / test, a character vocab
and a config of --hidden_size x --num_layers). What is measured (--measure, both by default):

  speed     in this process, three predictors of the same export (serving.predictor's
            Predictor with 1 tower in fp32, and onnx_predictor.load_predictor of model.onnx
            and of model.int8.onnx), fed the same test texts featurized once:
              batch 1:   p50 / p99 latency of predict() on one text at a time
                         (--batch1_calls calls)
              batch 32:  texts/s of predict() on 32 texts at a time, and p50 / p99 per call
                         (--batch32_texts texts)
            alternating TF, ONNX fp32, ONNX int8 within each round, --rounds rounds; for a
            BERT-base-shaped model (/work/shared/chinese_bert's bert_config.json and vocab)
            and a small one (its vocab, --hidden_size x --num_layers). Both have random
            weights trained for one step on 64 training texts (run_classifier_mgpu.py
            needs a trained output_dir to export), max_seq_length --speed_seq_length.
            TensorFlow's session keeps its default threads; ONNX Runtime's intra-op threads
            are the CPUs this process may use (onnx_predictor's default).
  accuracy  a model of the data's config trained from random weights
            (run_classifier_mgpu.py --initializer=normal --group_by_length, --epochs epochs,
            max_seq_length --accuracy_seq_length), exported with --export_format=both
            --onnx_int8; then the accuracy on dev and test of each backend, how many
            predictions ONNX fp32 changes against TF and int8 against fp32, and the largest
            probability differences. Target (#33): int8 no more than 1 point below fp32.

Every model is made in --work_dir unless its export is already there (a second run only
measures). One JSON line per measurement goes to stdout (the first names the CPU, its int8
instructions and the threads; each timing has the 1-minute load average, which this run's
own threads raise by about the CPUs it uses), then a table of the medians over the rounds
and the ratios ONNX / TF; progress goes to stderr. Every process started is bounded in time.
ONNX Runtime's threads suffer more than TensorFlow's from another process on the same
CPUs: time on an idle machine.

The whole run, from the CSV (about 15 minutes on 2 cores: making the models about 7, the
timing about 8; a second run only measures):

  git --git-dir=<a clone of SophonPlus/ChineseNlpCorpus>/.git \\
      show HEAD:datasets/waimai_10k/waimai_10k.csv > /work/bench33/waimai_10k.csv
  .venv-tf2/bin/python scripts/bench_backends.py --csv /work/bench33/waimai_10k.csv \\
      --work_dir /work/bench33

(the TF 2 virtualenv with the [onnx] extra; --measure=accuracy or speed for one half,
--models=small for the quick one.)
"""

import argparse
import json
import os
import platform
import shutil
import sys
import time

import numpy as np

SCRIPTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(SCRIPTS_DIR)
sys.path.insert(0, REPO_DIR)

# pylint: disable=wrong-import-position
import onnxruntime
import tensorflow.compat.v1 as tf

# Started processes: bounded, their stderr kept in a log (bench_predict.run_python).
from bench_predict import emit, run_python
from bert_mgpu.serving import onnx_predictor
from bert_mgpu.serving import predictor as serving_predictor
from bert_mgpu.training import run_settings
# pylint: enable=wrong-import-position

BERT_BASE_DIR = "/work/shared/chinese_bert"
BACKENDS = ("tensorflow", "onnx_fp32", "onnx_int8")
# The ONNX file of each ONNX Runtime backend (export_versions.ONNX_FILE / ONNX_INT8_FILE).
ONNX_FILES = {"onnx_fp32": "model.onnx", "onnx_int8": "model.int8.onnx"}
MEASURES = ("speed", "accuracy")
SPEED_MODELS = ("base", "small")
# Instructions that decide how fast int8 (and bf16) matrix products run on x86.
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile",
             "amx_int8", "amx_bf16")
# Training texts of the speed models: one step of batch 64.
SPEED_TRAIN_TEXTS = 64
# A model's training and export may take this long (the accuracy model: ~5 min on 2 cores).
TRAIN_TIMEOUT_SECONDS = 3600


def log(message):
  """Progress on stderr, named by the script that runs (this one or one importing it)."""
  sys.stderr.write("[%s] %s\n" % (os.path.splitext(os.path.basename(sys.argv[0]))[0],
                                   message))
  sys.stderr.flush()


def read_split(data_dir, split):
  """(labels, texts) of a make_review_data.py split (header label<TAB>text_a)."""
  with open(os.path.join(data_dir, split + ".tsv"), encoding="utf-8") as f:
    rows = [line.split("\t") for line in f.read().split("\n")[1:] if line]
  return [row[0] for row in rows], [row[1] for row in rows]


def write_json(path, value):
  with open(path, "w", encoding="utf-8") as f:
    json.dump(value, f, indent=2)


# ---------------------------------------------------------------------------
# The machine
# ---------------------------------------------------------------------------

def cpu_record():
  """The CPU's name, its int8-relevant flags, the CPUs this process may use, the versions."""
  fields = {}
  with open("/proc/cpuinfo", encoding="utf-8") as f:
    for line in f:
      key, _, value = line.partition(":")
      fields.setdefault(key.strip(), value.strip())
  flags = set(fields.get("flags", "").split())
  return {"measurement": "machine", "cpu": fields.get("model name", platform.processor()),
          "cpu_family_model": "%s/%s" % (fields.get("cpu family"), fields.get("model")),
          "cpu_flags": {flag: flag in flags for flag in CPU_FLAGS},
          "cpus_usable": len(os.sched_getaffinity(0)), "cpus_online": os.cpu_count(),
          "load_average": [round(x, 2) for x in os.getloadavg()],
          "python": platform.python_version(), "tensorflow": tf.__version__,
          "onnxruntime": onnxruntime.__version__, "numpy": np.__version__}


def machine_line(first):
  """One line naming the CPU, its int8 flags and the load before the timing (`first`, a
  cpu_record) and now."""
  machine = cpu_record()
  return ("CPU: %s (family/model %s), %d usable CPUs, %s; 1-minute load %.2f before the "
          "timing, %.2f after" % (
              machine["cpu"], machine["cpu_family_model"], machine["cpus_usable"],
              ", ".join(flag for flag, present in machine["cpu_flags"].items() if present),
              first["load_average"][0], machine["load_average"][0]))


# ---------------------------------------------------------------------------
# The data and the models
# ---------------------------------------------------------------------------

def make_data(args):
  """--work_dir/data from --csv by make_review_data.py, unless it is there."""
  data_dir = os.path.join(args.work_dir, "data")
  if os.path.exists(os.path.join(data_dir, "bert_config.json")):
    return data_dir
  if not args.csv:
    sys.exit("error: %s does not exist yet: give --csv waimai_10k.csv (see this script's "
             "docstring) to make it." % data_dir)
  log("making %s from %s" % (data_dir, args.csv))
  run_python([os.path.join("benchmarks", "make_review_data.py"), "--csv", args.csv,
              "--output_dir", data_dir, "--hidden_size", str(args.hidden_size),
              "--num_hidden_layers", str(args.num_layers)],
             os.path.join(args.work_dir, "make_review_data.log"), timeout=600)
  return data_dir


def newest_export(export_base):
  """The newest version directory under export_base holding model.int8.onnx, or None."""
  if not os.path.isdir(export_base):
    return None
  versions = sorted((int(name) for name in os.listdir(export_base) if name.isdigit()),
                    reverse=True)
  for version in versions:
    version_dir = os.path.join(export_base, str(version))
    if os.path.exists(os.path.join(version_dir, ONNX_FILES["onnx_int8"])):
      return version_dir
  return None


def train_and_export(model_dir, flags, what, script=("run_classifier_mgpu.py",
                                                     "--task_name=tsv")):
  """`script` (a training script and its first arguments) --do_train with `flags` into
  model_dir/output, exported (both formats, int8) into model_dir/exports, unless an export
  is there. Returns the version directory."""
  export_base = os.path.join(model_dir, "exports")
  version_dir = newest_export(export_base)
  if version_dir:
    log("%s: using %s" % (what, version_dir))
    return version_dir
  output_dir = os.path.join(model_dir, "output")
  shutil.rmtree(output_dir, ignore_errors=True)  # a run stopped half-way
  log("%s: training and exporting (log: %s/train.log)" % (what, model_dir))
  wall, _ = run_python(list(script) + ["--do_train",
                        "--output_dir=" + output_dir, "--export_dir=" + export_base,
                        "--export_format=both", "--onnx_int8", "--n_gpus=1",
                        "--save_checkpoints_steps=100000"] + flags,
                       os.path.join(model_dir, "train.log"), timeout=TRAIN_TIMEOUT_SECONDS)
  log("%s: trained and exported in %.0f s" % (what, wall))
  return newest_export(export_base)


def chinese_bert_config(hidden_size=None, num_layers=None):
  """BERT_BASE_DIR's bert_config.json (BERT-base), or the same at hidden_size x num_layers
  (heads of 64, intermediate 4 x hidden)."""
  with open(os.path.join(BERT_BASE_DIR, "bert_config.json"), encoding="utf-8") as f:
    config = json.load(f)
  if hidden_size:
    config.update(hidden_size=hidden_size, num_hidden_layers=num_layers,
                  num_attention_heads=hidden_size // 64, intermediate_size=4 * hidden_size)
  return config


def make_speed_model(args, data_dir, name, config=None):
  """The export of a randomly initialised model trained for one step: "base" is
  BERT-base's shape with its vocab, "small" the same vocab at --hidden_size x
  --num_layers; another name takes `config` (a bert_config dict of that vocab)."""
  model_dir = os.path.join(args.work_dir, "speed_" + name)
  train_dir = os.path.join(model_dir, "data")
  os.makedirs(train_dir, exist_ok=True)
  with open(os.path.join(data_dir, "train.tsv"), encoding="utf-8") as f:
    head = f.read().split("\n")[:SPEED_TRAIN_TEXTS + 1]
  with open(os.path.join(train_dir, "train.tsv"), "w", encoding="utf-8") as f:
    f.write("\n".join(head) + "\n")
  shutil.copy(os.path.join(data_dir, "labels.txt"), train_dir)
  if config is None:
    config = (chinese_bert_config(args.hidden_size, args.num_layers) if name == "small" else
              chinese_bert_config())
  config_file = os.path.join(model_dir, "bert_config.json")
  write_json(config_file, config)
  return train_and_export(model_dir, [
      "--data_dir=" + train_dir, "--vocab_file=" + os.path.join(BERT_BASE_DIR, "vocab.txt"),
      "--bert_config_file=" + config_file, "--max_seq_length=%d" % args.speed_seq_length,
      "--train_batch_size=%d" % SPEED_TRAIN_TEXTS, "--num_train_epochs=1",
      "--learning_rate=1e-4"], "speed model %s (%d layers, hidden %d)" % (
          name, config["num_hidden_layers"], config["hidden_size"]))


def make_accuracy_model(args, data_dir):
  """The export of the data's config trained from random weights (--epochs epochs)."""
  return train_and_export(os.path.join(args.work_dir, "accuracy_model"), [
      "--data_dir=" + data_dir, "--vocab_file=" + os.path.join(data_dir, "vocab.txt"),
      "--bert_config_file=" + os.path.join(data_dir, "bert_config.json"),
      "--max_seq_length=%d" % args.accuracy_seq_length, "--train_batch_size=32",
      "--learning_rate=%g" % args.learning_rate, "--num_train_epochs=%g" % args.epochs,
      "--initializer=normal", "--group_by_length", "--log_steps=50"],
                          "accuracy model (the data's config)")


# ---------------------------------------------------------------------------
# The predictors
# ---------------------------------------------------------------------------

def load_predictors(version_dir, backends, batch_size):
  """{backend: predictor} of one export version, each the classifier's TextPredictor
  (featurize(texts).features / predict / predicted_labels / close), and {backend: its
  threads, as a record's fields}."""
  predictors, threads = {}, {}
  for backend in backends:
    start = time.time()
    if backend == "tensorflow":
      predictors[backend], threads[backend] = tensorflow_predictor(version_dir, batch_size)
    else:
      predictors[backend] = onnx_predictor.load_predictor(
          version_dir, onnx_file=ONNX_FILES[backend], batch_size=batch_size, threads=None)
      # threads=None: intra-op threads are the CPUs this process may use.
      threads[backend] = {"intra_op_threads": onnx_predictor.usable_cpus()}
    log("loaded %s in %.1f s" % (backend, time.time() - start))
  return predictors, threads


def tensorflow_predictor(version_dir, batch_size):
  """predict_text.py's TensorFlow path: the export's weights in a graph of 1 tower, fp32."""
  tf.logging.set_verbosity(tf.logging.WARN)
  model = serving_predictor.load_export(version_dir)
  devices = run_settings.DeviceSettings(n_gpus=1, precision="fp32").check()
  predictor = serving_predictor.load_predictor(model, devices, batch_size)
  config = devices.plan.for_inference().session_config()
  threads = {"intra_op_threads": config.intra_op_parallelism_threads or "default",
             "inter_op_threads": config.inter_op_parallelism_threads or "default"}
  return predictor, threads


def model_record(model_name, version_dir, threads):
  """What a model is (its shape, from the export's files) and the threads of each backend."""
  assets = os.path.join(version_dir, "assets.extra")
  with open(os.path.join(assets, "bert_config.json"), encoding="utf-8") as f:
    config = json.load(f)
  with open(os.path.join(assets, "model_settings.json"), encoding="utf-8") as f:
    settings = json.load(f)
  sizes = {name: os.path.getsize(os.path.join(version_dir, ONNX_FILES[name]))
           for name in ONNX_FILES}
  return {"measurement": "model", "model": model_name, "export": version_dir,
          "layers": config["num_hidden_layers"], "hidden": config["hidden_size"],
          "heads": config["num_attention_heads"], "vocab": config["vocab_size"],
          "max_seq_length": settings["max_seq_length"],
          "onnx_mb": {name: round(size / 2.0 ** 20, 1) for name, size in sizes.items()},
          "threads": threads}


def rows_of(features, rows):
  """The Features of the given rows."""
  return features._replace(arrays={name: array[rows] for name, array in
                                   features.arrays.items()},
                           truncated=features.truncated[rows])


def featurize_once(predictors, texts):
  """The texts featurized by the first predictor; the others must featurize them alike."""
  features = None
  for backend, predictor in predictors.items():
    mine = predictor.featurize(texts).features
    if features is None:
      features = mine
      continue
    for name, array in features.arrays.items():
      if not np.array_equal(np.asarray(mine.arrays[name]), array):
        raise RuntimeError("%s featurizes the texts differently (%s)" % (backend, name))
  return features


def close_all(predictors):
  for predictor in predictors.values():
    predictor.close()


# ---------------------------------------------------------------------------
# Speed
# ---------------------------------------------------------------------------

def call_seconds(predictor, batches):
  """Seconds of each predictor.predict() call on the batches, in order."""
  seconds = []
  for batch in batches:
    start = time.perf_counter()
    predictor.predict(batch)
    seconds.append(time.perf_counter() - start)
  return np.array(seconds)


def speed_batches(features, args):
  """{"batch 1": [Features of one text] x --batch1_calls, "batch 32": [Features of 32
  texts] covering --batch32_texts}: the same inputs for every backend and round."""
  count = len(features.truncated)
  one = [rows_of(features, [i % count]) for i in range(args.batch1_calls)]
  rows = np.arange(args.batch32_texts) % count
  thirty_two = [rows_of(features, rows[i:i + 32]) for i in range(0, len(rows), 32)]
  return {"batch 1": one, "batch 32": thirty_two}


def timing_record(model_name, setting, backend, round_index, seconds, texts):
  return {"measurement": "speed", "model": model_name, "setting": setting,
          "backend": backend, "round": round_index, "calls": len(seconds), "texts": texts,
          "texts_per_s": round(texts / float(seconds.sum()), 1),
          "p50_ms": round(1000 * float(np.percentile(seconds, 50)), 2),
          "p99_ms": round(1000 * float(np.percentile(seconds, 99)), 2),
          "load_average_1min": round(os.getloadavg()[0], 2)}


def round_ratios(mine):
  """One round's ONNX / TF ratios of texts/s and of p50 latency."""
  base = mine["tensorflow"]
  record = {"measurement": "speed_ratios", "model": base["model"], "setting": base["setting"],
            "round": base["round"]}
  for backend, measured in mine.items():
    if backend != "tensorflow":
      record[backend + "_texts_per_s_vs_tf"] = ratio(measured["texts_per_s"],
                                                     base["texts_per_s"])
      record[backend + "_p50_vs_tf"] = ratio(measured["p50_ms"], base["p50_ms"])
  return record


def bench_speed(model_name, version_dir, texts, args):
  """Alternates the backends (A B C) within each round on both settings.

  Returns:
    [speed records], each emitted as it is measured.
  """
  predictors, threads = load_predictors(version_dir, args.backends, batch_size=32)
  emit(model_record(model_name, version_dir, threads))
  try:
    features = featurize_once(predictors, texts)
    batches = speed_batches(features, args)
    for predictor in predictors.values():  # warm-up: the first calls are slow
      call_seconds(predictor, batches["batch 1"][:10] + batches["batch 32"][:2])
    records = []
    for round_index in range(1, args.rounds + 1):
      for setting, inputs in batches.items():
        texts_count = sum(len(batch.truncated) for batch in inputs)
        mine = {}
        for backend, predictor in predictors.items():
          mine[backend] = timing_record(model_name, setting, backend, round_index,
                                        call_seconds(predictor, inputs), texts_count)
          emit(mine[backend])
        log("%s, %s, round %d: %s" % (model_name, setting, round_index, "; ".join(
            "%s %.1f texts/s p50 %.1f ms" % (b, r["texts_per_s"], r["p50_ms"])
            for b, r in mine.items())))
        if "tensorflow" in mine:
          emit(round_ratios(mine))
        records.extend(mine.values())
    return records
  finally:
    close_all(predictors)


def median_of(records, model_name, setting, backend, key, digits=2):
  values = [r[key] for r in records if (r["model"], r["setting"], r["backend"]) ==
            (model_name, setting, backend)]
  return round(float(np.median(values)), digits) if values else None


def ratio(value, base):
  return None if value is None or not base else round(value / base, 2)


def speed_summary(records, args):
  """Per model and backend: the medians over the rounds, and the ratios to TF (texts/s
  at batch 32: ONNX / TF, above 1 is faster; p50 at batch 1: ONNX / TF, below 1 is
  faster)."""
  rows = []
  for model_name in args.models:
    for backend in args.backends:
      row = {"measurement": "speed_summary", "model": model_name, "backend": backend}
      for setting, prefix in (("batch 32", "b32_"), ("batch 1", "b1_")):
        for key in ("texts_per_s", "p50_ms", "p99_ms"):
          row[prefix + key] = median_of(records, model_name, setting, backend, key)
      tf_row = next((r for r in rows if (r["model"], r["backend"]) == (model_name,
                                                                      "tensorflow")), row)
      row["b32_texts_per_s_vs_tf"] = ratio(row["b32_texts_per_s"], tf_row["b32_texts_per_s"])
      row["b1_p50_vs_tf"] = ratio(row["b1_p50_ms"], tf_row["b1_p50_ms"])
      rows.append(row)
  return rows


def format_cell(value):
  if value is None:
    return "-"
  if not isinstance(value, float):
    return str(value)
  return "%.0f" % value if abs(value) >= 1000 else "%.4g" % value


def format_table(rows, columns):
  """A plain-text table of `rows` (dicts): columns is [(heading, key)]."""
  cells = [[heading for heading, _ in columns]] + [
      [format_cell(row[key]) for _, key in columns] for row in rows]
  widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
  return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(line, widths))
                   for line in cells)


SPEED_COLUMNS = [("model", "model"), ("backend", "backend"),
                 ("b32 texts/s", "b32_texts_per_s"), ("b32 p50 ms", "b32_p50_ms"),
                 ("b32 p99 ms", "b32_p99_ms"), ("b1 p50 ms", "b1_p50_ms"),
                 ("b1 p99 ms", "b1_p99_ms"), ("b32 texts/s / TF", "b32_texts_per_s_vs_tf"),
                 ("b1 p50 / TF", "b1_p50_vs_tf")]


# ---------------------------------------------------------------------------
# Accuracy
# ---------------------------------------------------------------------------

# (backend, the backend it is compared with).
COMPARISONS = (("onnx_fp32", "tensorflow"), ("onnx_int8", "onnx_fp32"),
               ("onnx_int8", "tensorflow"))


def split_accuracy(predictors, data_dir, split):
  """The accuracy of each backend on a split, and the differences between backends.

  Returns:
    [records]: one "accuracy" record per backend, one "agreement" record per comparison.
  """
  gold, texts = read_split(data_dir, split)
  features = featurize_once(predictors, texts)
  probabilities, labels, records = {}, {}, []
  for backend, predictor in predictors.items():
    start = time.time()
    probabilities[backend] = predictor.predict(features)["probabilities"]
    seconds = time.time() - start
    labels[backend] = np.array(predictor.predicted_labels(probabilities[backend]))
    records.append({"measurement": "accuracy", "split": split, "backend": backend,
                    "texts": len(texts),
                    "accuracy": round(float(np.mean(labels[backend] == np.array(gold))), 4),
                    "texts_per_s_batch_32": round(len(texts) / seconds, 1)})
  accuracy = {r["backend"]: r["accuracy"] for r in records}
  for backend, other in COMPARISONS:
    if backend in predictors and other in predictors:
      records.append({
          "measurement": "agreement", "split": split, "backend": backend, "against": other,
          "texts": len(texts),
          "changed_predictions": int(np.sum(labels[backend] != labels[other])),
          "accuracy_points": round(100 * (accuracy[backend] - accuracy[other]), 2),
          "max_abs_probability_difference": float(np.abs(
              probabilities[backend] - probabilities[other]).max())})
  return records


def bench_accuracy(version_dir, data_dir, args):
  """Every backend on dev and test. Returns the records, each emitted."""
  predictors, threads = load_predictors(version_dir, args.backends, batch_size=32)
  emit(model_record("accuracy", version_dir, threads))
  try:
    records = []
    for split in ("dev", "test"):
      for record in split_accuracy(predictors, data_dir, split):
        emit(record)
        records.append(record)
    return records
  finally:
    close_all(predictors)


ACCURACY_COLUMNS = [("split", "split"), ("backend", "backend"), ("accuracy", "accuracy")]
AGREEMENT_COLUMNS = [("split", "split"), ("backend", "backend"), ("against", "against"),
                     ("changed", "changed_predictions"), ("of", "texts"),
                     ("accuracy points", "accuracy_points"),
                     ("max |p diff|", "max_abs_probability_difference")]


# ---------------------------------------------------------------------------

def comma_list(allowed):
  """An argparse type: a comma-separated list of `allowed` names, in the given order."""
  def parse(text):
    names = [name for name in text.split(",") if name]
    unknown = sorted(set(names) - set(allowed))
    if unknown or not names:
      raise argparse.ArgumentTypeError("use names of %s, separated by commas" %
                                       ", ".join(allowed))
    return names
  return parse


def benchmark_parser(doc, measures, work_dir):
  """An ArgumentParser of a benchmark of the backends (described by the first line of its
  docstring `doc`) with what they all take: --work_dir, --measure, --backends, --rounds."""
  parser = argparse.ArgumentParser(description=doc.split("\n")[0])
  parser.add_argument("--work_dir", default=work_dir,
                      help="the data, models and logs (kept: a second run only measures)")
  parser.add_argument("--measure", type=comma_list(measures), default=list(measures))
  parser.add_argument("--backends", type=comma_list(BACKENDS), default=list(BACKENDS))
  parser.add_argument("--rounds", type=int, default=3)
  return parser


def parse_benchmark_args(parser):
  """The arguments of a benchmark_parser: the backends in BACKENDS' order (TF first: the
  ratios' base), --work_dir absolute."""
  args = parser.parse_args()
  args.backends = [b for b in BACKENDS if b in args.backends]
  args.work_dir = os.path.abspath(args.work_dir)
  return args


def parse_args():
  parser = benchmark_parser(__doc__, MEASURES, "/tmp/bench_backends")
  parser.add_argument("--csv", help="waimai_10k.csv (needed until --work_dir/data exists; "
                      "see above)")
  parser.add_argument("--models", type=comma_list(SPEED_MODELS), default=list(SPEED_MODELS),
                      help="the speed models")
  parser.add_argument("--batch1_calls", type=int, default=200)
  parser.add_argument("--batch32_texts", type=int, default=640)
  parser.add_argument("--speed_seq_length", type=int, default=64)
  parser.add_argument("--hidden_size", type=int, default=256,
                      help="the small speed model's and the accuracy model's")
  parser.add_argument("--num_layers", type=int, default=4, help="likewise")
  parser.add_argument("--accuracy_seq_length", type=int, default=128)
  parser.add_argument("--epochs", type=float, default=3.0, help="of the accuracy model")
  parser.add_argument("--learning_rate", type=float, default=2e-4, help="likewise")
  return parse_benchmark_args(parser)


def main():
  args = parse_args()
  os.makedirs(args.work_dir, exist_ok=True)
  start = time.time()
  data_dir = make_data(args)
  # Every model first: training would disturb the timing.
  exports = {}
  if "speed" in args.measure:
    for name in args.models:
      exports[name] = make_speed_model(args, data_dir, name)
  if "accuracy" in args.measure:
    exports["accuracy"] = make_accuracy_model(args, data_dir)
  first = cpu_record()
  emit(dict(first, backends=args.backends, rounds=args.rounds))
  tables = []
  if "speed" in args.measure:
    texts = read_split(data_dir, "test")[1]
    records = []
    for name in args.models:
      records.extend(bench_speed(name, exports[name], texts, args))
    summary = speed_summary(records, args)
    for row in summary:
      emit(row)
    tables.append(format_table(summary, SPEED_COLUMNS))
  if "accuracy" in args.measure:
    records = bench_accuracy(exports["accuracy"], data_dir, args)
    tables.append(format_table([r for r in records if r["measurement"] == "accuracy"],
                               ACCURACY_COLUMNS))
    tables.append(format_table([r for r in records if r["measurement"] == "agreement"],
                               AGREEMENT_COLUMNS))
  sys.stdout.write("\n%s\n\n%s\n" % (machine_line(first), "\n\n".join(tables)))
  log("done in %.0f s" % (time.time() - start))


if __name__ == "__main__":
  main()
