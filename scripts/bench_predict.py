# coding=utf-8
"""Speed of using a trained classifier: predict_text.py, its --serve endpoint, padding.

Makes a model first (nothing heavy): the demo data (scripts/make_demo_data.py), its vocab,
a BERT of --hidden_size / --num_layers, randomly initialised and trained for one epoch of
the demo's train.tsv, exported with --export_dir. Then measures, on the demo's texts
(train + dev + test, 600 short Chinese sentences):

  process    texts/s of `predict_text.py --export_dir` at --predict_batch_size 1 and 64, and
             of `run_classifier_mgpu.py --do_predict` (batch 64) on the same texts and weights.
             Whole-process wall time (start, TF import, graph, restore, predict, write) for
             all three; each log's own in-process figure is reported beside it.
  serve      p50 / p99 latency of `predict_text.py --serve` under --clients concurrent
             clients (threads, one http.client connection per request), one text per
             request: short texts, and a mix of lengths (1, 2, 4 or 8 texts joined).
  padding    in this process, the graph predict_text.py runs (predictor.Predictor), batches of
             --batch_size length-sorted short texts fed padded to their longest text or to
             max_seq_length (the same rows, the same session).

The machine may be shared: every comparison alternates A B A B within one run, and the ratios
of each round are printed. One JSON line per measurement goes to stdout, then a table; progress
goes to stderr. Every process started is bounded in time and killed at the end.

Usage:
  python scripts/bench_predict.py [--work_dir /tmp/bench_predict] [--rounds 2]
"""

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_DIR)

# No single started process may take longer than this.
PROCESS_TIMEOUT_SECONDS = 600


def log(message):
  sys.stderr.write("[bench_predict] %s\n" % message)
  sys.stderr.flush()


def emit(record):
  """One measurement, as a JSON line on stdout."""
  sys.stdout.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
  sys.stdout.flush()


def script_env():
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def run_python(args, log_path, timeout=PROCESS_TIMEOUT_SECONDS):
  """Runs a repo script with this interpreter, timing each stderr line as it arrives.

  The logs of run_classifier_mgpu.py carry no timestamps, so the arrival times are what
  separates its prediction from its start-up.

  Returns:
    (wall seconds, [(seconds since start, line)]).

  Raises:
    RuntimeError: it failed or timed out (the log tail says why).
  """
  start = time.time()
  process = subprocess.Popen([sys.executable] + args, cwd=REPO_DIR, env=script_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  lines = []

  def read():
    for line in process.stderr:
      lines.append((time.time() - start, line.decode("utf-8", "replace").rstrip("\n")))

  reader = threading.Thread(target=read)
  reader.start()
  try:
    returncode = process.wait(timeout=timeout)
  except subprocess.TimeoutExpired:
    process.kill()
    returncode = process.wait()
  wall = time.time() - start
  reader.join(timeout=60)
  process.stderr.close()
  with open(log_path, "w", encoding="utf-8") as f:
    f.write("".join("%8.3f %s\n" % line for line in lines))
  if returncode != 0:
    raise RuntimeError("%s failed (%d):\n%s" % (args[0], returncode, "\n".join(
        line for _, line in lines[-40:])))
  return wall, lines


def read_texts(path):
  """text_a of a demo split (header label<TAB>text_a)."""
  with open(path, encoding="utf-8") as f:
    lines = f.read().split("\n")[1:]
  return [line.split("\t")[1] for line in lines if line]


def write_lines(path, lines):
  with open(path, "w", encoding="utf-8", newline="") as f:
    f.write("".join(line + "\n" for line in lines))


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------

def make_model(args, work):
  """Demo data, a config of the asked size, one epoch of training, an export.

  Returns:
    dict with data_dir, vocab_file, config_file, output_dir, export_dir, texts (600).
  """
  data_dir = os.path.join(work, "data")
  subprocess.run([sys.executable, os.path.join(REPO_DIR, "scripts", "make_demo_data.py"),
                  "--output_dir", data_dir], check=True, stdout=subprocess.DEVNULL,
                 timeout=120)
  config_file = os.path.join(data_dir, "bert_config.json")
  with open(config_file, encoding="utf-8") as f:
    config = json.load(f)
  config.update({"hidden_size": args.hidden_size, "num_hidden_layers": args.num_layers,
                 "num_attention_heads": args.hidden_size // 64,
                 "intermediate_size": 4 * args.hidden_size, "max_position_embeddings": 512})
  with open(config_file, "w", encoding="utf-8") as f:
    json.dump(config, f, indent=2)
  texts = [text for split in ("train", "dev", "test")
           for text in read_texts(os.path.join(data_dir, split + ".tsv"))]
  output_dir = os.path.join(work, "model")
  export_dir = os.path.join(work, "exports")
  log("training one epoch (hidden %d, %d layers, vocab %d) and exporting" % (
      args.hidden_size, args.num_layers, config["vocab_size"]))
  wall, _ = run_python([
      "run_classifier_mgpu.py", "--task_name=tsv", "--data_dir=" + data_dir,
      "--vocab_file=" + os.path.join(data_dir, "vocab.txt"), "--bert_config_file=" + config_file,
      "--output_dir=" + output_dir, "--export_dir=" + export_dir, "--do_train",
      "--max_seq_length=%d" % args.max_seq_length, "--train_batch_size=16",
      "--learning_rate=1e-4", "--num_train_epochs=1", "--save_checkpoints_steps=1000"],
                       os.path.join(work, "train.log"))
  log("trained and exported in %.1f s" % wall)
  return {"data_dir": data_dir, "vocab_file": os.path.join(data_dir, "vocab.txt"),
          "config_file": config_file, "output_dir": output_dir, "export_dir": export_dir,
          "texts": texts, "config": config}


# ---------------------------------------------------------------------------
# 1. Whole processes: predict_text.py against run_classifier_mgpu.py --do_predict
# ---------------------------------------------------------------------------

def log_seconds(lines, first, last):
  """Seconds between the arrival of the log lines holding `first` and `last`, or None."""
  times = {}
  for seconds, line in lines:
    for key in (first, last):
      if key in line and key not in times:
        times[key] = seconds
  return times[last] - times[first] if len(times) == 2 else None


def bench_processes(args, model, work):
  """Alternates do_predict, predict_text 64, predict_text 1, --rounds times."""
  texts = model["texts"] * args.repeat  # enough work that start-up does not hide it
  texts_file = os.path.join(work, "texts.txt")
  write_lines(texts_file, texts)
  predict_data = os.path.join(work, "predict_data")  # test.tsv alone: text_a only
  os.makedirs(predict_data, exist_ok=True)
  write_lines(os.path.join(predict_data, "test.tsv"), ["text_a"] + texts)

  def do_predict():
    # Its cached test features would skip tokenizing after the first round; predict_text.py
    # tokenizes every time, so every round starts without them.
    for name in os.listdir(model["output_dir"]):
      if name.startswith("test-"):
        os.remove(os.path.join(model["output_dir"], name))
    wall, lines = run_python([
        "run_classifier_mgpu.py", "--task_name=tsv", "--data_dir=" + predict_data,
        "--vocab_file=" + model["vocab_file"], "--bert_config_file=" + model["config_file"],
        "--output_dir=" + model["output_dir"], "--do_predict",
        "--max_seq_length=%d" % args.max_seq_length, "--predict_batch_size=64"],
                            os.path.join(work, "do_predict.log"))
    # Graph, restore and the pass over the test set (the examples were read before).
    inner = log_seconds(lines, "Evaluating and predicting with", "Wrote %d predictions" %
                        len(texts))
    return wall, inner, "log: 'Evaluating and predicting with' to 'Wrote N predictions'"

  def predict_text(batch_size):
    def run():
      wall, lines = run_python([
          "predict_text.py", "--export_dir=" + model["export_dir"],
          "--input_file=" + texts_file, "--output_file=" + os.path.join(work, "out.tsv"),
          "--predict_batch_size=%d" % batch_size], os.path.join(work, "predict_text.log"))
      match = re.search(r"Predicted (\d+) text\(s\) in ([0-9.]+) s",
                        "\n".join(line for _, line in lines))
      return wall, float(match.group(2)) if match else None, "log: tokenizing + predicting"
    return run

  runs = [("run_classifier_mgpu.py --do_predict, batch 64", do_predict),
          ("predict_text.py --predict_batch_size=64", predict_text(64)),
          ("predict_text.py --predict_batch_size=1", predict_text(1))]
  results = {name: [] for name, _ in runs}
  for round_index in range(args.rounds):
    for name, fn in runs:
      log("round %d: %s" % (round_index + 1, name))
      wall, inner, inner_what = fn()
      record = {"measurement": "process", "what": name, "round": round_index + 1,
                "texts": len(texts), "wall_s": round(wall, 2),
                "texts_per_s_wall": round(len(texts) / wall, 1),
                "in_process_s": None if inner is None else round(inner, 2),
                "texts_per_s_in_process": None if not inner else round(len(texts) / inner, 1),
                "in_process_is": inner_what}
      emit(record)
      results[name].append(record)
  return results


# ---------------------------------------------------------------------------
# 2. predict_text.py --serve under concurrent clients
# ---------------------------------------------------------------------------

def http_json(port, method, path, body=None, timeout=60):
  """(status, decoded JSON) of one request on a fresh connection."""
  connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
  try:
    data = None if body is None else json.dumps(body).encode("utf-8")
    headers = {} if data is None else {"Content-Type": "application/json"}
    connection.request(method, path, body=data, headers=headers)
    response = connection.getresponse()
    return response.status, json.loads(response.read().decode("utf-8"))
  finally:
    connection.close()


def start_server(args, model, work):
  """Starts --serve=0 and waits for it to answer /healthz; returns (process, port)."""
  log_path = os.path.join(work, "serve.log")
  err = open(log_path, "w", encoding="utf-8")
  process = subprocess.Popen(
      [sys.executable, "predict_text.py", "--export_dir=" + model["export_dir"], "--serve=0",
       "--predict_batch_size=64"],
      cwd=REPO_DIR, env=script_env(), stdout=subprocess.DEVNULL, stderr=err)
  err.close()
  deadline = time.time() + 300
  port = None
  while time.time() < deadline and process.poll() is None:
    if port is None:
      with open(log_path, encoding="utf-8", errors="replace") as f:
        match = re.search(r"Serving on http://[^:]+:(\d+)", f.read())
      port = match and int(match.group(1))
    if port:
      try:
        if http_json(port, "GET", "/healthz", timeout=5)[0] == 200:
          return process, port
      except (OSError, ValueError):
        pass
    time.sleep(0.2)
  stop_server(process)
  with open(log_path, encoding="utf-8", errors="replace") as f:
    raise RuntimeError("--serve did not become ready:\n" + f.read()[-3000:])


def stop_server(process):
  """SIGTERM (the server drains), then SIGKILL if it still runs after 60 s."""
  if process.poll() is None:
    process.send_signal(signal.SIGTERM)
    try:
      process.wait(timeout=60)
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait(timeout=60)


def load_clients(port, bodies, clients):
  """Sends `bodies` from `clients` threads; returns (latencies in s, wall seconds)."""
  latencies = [None] * len(bodies)
  errors = []
  next_index = [0]
  lock = threading.Lock()

  def client():
    while True:
      with lock:
        index = next_index[0]
        next_index[0] += 1
      if index >= len(bodies):
        return
      start = time.time()
      try:
        status, reply = http_json(port, "POST", "/predict", bodies[index])
        if status != 200 or len(reply["labels"]) != len(bodies[index]["texts"]):
          errors.append("%d %s" % (status, reply))
      except Exception as e:  # pylint: disable=broad-except
        errors.append(repr(e))
      latencies[index] = time.time() - start

  threads = [threading.Thread(target=client) for _ in range(clients)]
  start = time.time()
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join(timeout=PROCESS_TIMEOUT_SECONDS)
  wall = time.time() - start
  if errors or any(thread.is_alive() for thread in threads):
    raise RuntimeError("%d request(s) failed, e.g. %s" % (len(errors), errors[:3]))
  return np.array(latencies), wall


def mixed_texts(texts, count):
  """Texts of 1, 2, 4 and 8 demo sentences joined, in turn (8 reach max_seq_length)."""
  result = []
  for i in range(count):
    joined = 2 ** (i % 4)
    result.append("".join(texts[(i * 8 + j) % len(texts)] for j in range(joined)))
  return result


def bench_serve(args, model, work):
  """Alternates a short and a mixed load, --rounds times, on one server."""
  texts = model["texts"]
  per_round = args.requests // args.rounds
  loads = [("short texts", lambda r: texts[r * per_round:(r + 1) * per_round]),
           ("mixed lengths", lambda r: mixed_texts(texts[r * 37:], per_round))]
  results = {name: [] for name, _ in loads}
  process, port = start_server(args, model, work)
  try:
    # Warm-up, both loads: the first run of each new length is slow (one-off kernel setup).
    warm_up = texts[:4 * args.clients] + mixed_texts(texts[300:], 8 * args.clients)
    load_clients(port, [{"texts": [t]} for t in warm_up], args.clients)
    for round_index in range(args.rounds):
      for name, make in loads:
        before = http_json(port, "GET", "/healthz")[1]
        latencies, wall = load_clients(port, [{"texts": [t]} for t in make(round_index)],
                                       args.clients)
        after = http_json(port, "GET", "/healthz")[1]
        record = {"measurement": "serve", "what": name, "round": round_index + 1,
                  "clients": args.clients, "requests": len(latencies),
                  "p50_ms": round(1000 * float(np.percentile(latencies, 50)), 1),
                  "p99_ms": round(1000 * float(np.percentile(latencies, 99)), 1),
                  "requests_per_s": round(len(latencies) / wall, 1),
                  "health_before": before, "health_after": after}
        emit(record)
        record["latencies"] = latencies
        results[name].append(record)
  finally:
    stop_server(process)
  return results


# ---------------------------------------------------------------------------
# 3. Padded to the longest of a batch against padded to max_seq_length
# ---------------------------------------------------------------------------

def bench_padding(args, model):
  """The Predictor's own graph and session, fed the same sorted batches two ways."""
  import tensorflow.compat.v1 as tf  # pylint: disable=import-outside-toplevel
  from bert_mgpu.training import run_settings  # pylint: disable=import-outside-toplevel
  from bert_mgpu.data import tfrecord_io  # pylint: disable=import-outside-toplevel
  from bert_mgpu.serving import (  # pylint: disable=import-outside-toplevel
      predictor as serving_predictor)

  tf.logging.set_verbosity(tf.logging.WARN)
  loaded = serving_predictor.load_export(model["export_dir"])
  text_predictor = serving_predictor.load_predictor(
      loaded, run_settings.DeviceSettings().check(), args.batch_size)
  features = text_predictor.featurize(model["texts"]).features
  # pylint: disable=protected-access
  predictor = text_predictor._runner  # the TensorFlow Predictor (its session and graph)
  lengths = features.arrays["input_mask"].sum(axis=1)
  order = np.argsort(-lengths, kind="stable")
  # Predictor.predict always cuts to the longest; its graph takes any length, so feeding it
  # the full max_seq_length rows is the fixed-padding baseline on the same weights and session.

  def one_pass(fixed):
    start = time.time()
    for begin in range(0, len(order), args.batch_size):
      rows = order[begin:begin + args.batch_size]
      width = predictor.max_seq_length if fixed else int(lengths[rows].max())
      predictor.run_batch({name: features.arrays[name][rows, :width]
                           for name in tfrecord_io.MODEL_INPUTS})
    return time.time() - start

  one_pass(True), one_pass(False)  # warm-up: first runs of each shape
  results = []
  for round_index in range(args.rounds):
    fixed, longest = one_pass(True), one_pass(False)
    record = {"measurement": "padding", "round": round_index + 1, "texts": len(order),
              "batch_size": args.batch_size, "max_seq_length": predictor.max_seq_length,
              "median_tokens": float(np.median(lengths)), "max_tokens": int(lengths.max()),
              "fixed_texts_per_s": round(len(order) / fixed, 1),
              "longest_texts_per_s": round(len(order) / longest, 1),
              "speedup": round(fixed / longest, 2)}
    emit(record)
    results.append(record)
  predictor.close()
  return results


# ---------------------------------------------------------------------------

def print_table(processes, serve, padding):
  rows = []
  for name, records in processes.items():
    rows.append((name, ", ".join("%.1f" % r["texts_per_s_wall"] for r in records) +
                 " texts/s whole process; " +
                 ", ".join("-" if r["texts_per_s_in_process"] is None else
                           "%.1f" % r["texts_per_s_in_process"] for r in records) +
                 " in process"))
  for name, records in serve.items():
    pooled = np.concatenate([r["latencies"] for r in records])
    rows.append(("--serve, %s, %d clients" % (name, records[0]["clients"]),
                 "p50 %.1f ms, p99 %.1f ms over %d requests (rounds: %s)" % (
                     1000 * np.percentile(pooled, 50), 1000 * np.percentile(pooled, 99),
                     len(pooled), "; ".join("%.1f/%.1f" % (r["p50_ms"], r["p99_ms"])
                                            for r in records))))
  rows.append(("padding: max_seq_length vs longest", ", ".join(
      "%.1f vs %.1f texts/s (%.2fx)" % (r["fixed_texts_per_s"], r["longest_texts_per_s"],
                                        r["speedup"]) for r in padding)))
  width = max(len(name) for name, _ in rows)
  for name, value in rows:
    print("%s  %s" % (name.ljust(width), value))


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--work_dir", default="/tmp/bench_predict",
                      help="Scratch directory (emptied first).")
  parser.add_argument("--hidden_size", type=int, default=256)
  parser.add_argument("--num_layers", type=int, default=4)
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--rounds", type=int, default=2, help="A B rounds of each comparison.")
  parser.add_argument("--repeat", type=int, default=4,
                      help="predict_text.py and --do_predict read the 600 texts this often.")
  parser.add_argument("--clients", type=int, default=8)
  parser.add_argument("--requests", type=int, default=400,
                      help="Requests per --serve load, over all rounds.")
  parser.add_argument("--batch_size", type=int, default=64, help="For the padding figure.")
  args = parser.parse_args()
  shutil.rmtree(args.work_dir, ignore_errors=True)
  os.makedirs(args.work_dir)
  model = make_model(args, args.work_dir)
  processes = bench_processes(args, model, args.work_dir)
  serve = bench_serve(args, model, args.work_dir)
  padding = bench_padding(args, model)
  print_table(processes, serve, padding)


if __name__ == "__main__":
  main()
