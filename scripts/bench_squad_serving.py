# coding=utf-8
"""Serving a reading-comprehension model three ways, side by side: predict_text.py's
TensorFlow path, ONNX Runtime float32 (model.onnx) and ONNX Runtime int8 (model.int8.onnx);
issue #43's "Measure and record".

Real questions: CMRC 2018 (SQuAD-format Chinese): its dev set (--dev_file, 3,219 questions
on 848 contexts of up to 980 characters) and its trial set (--trial_file, 1,002 questions).
No pretrained Chinese checkpoint is at hand: every model starts from random weights, with
/work/shared/chinese_bert's vocab.txt (and, for speed, its BERT-base bert_config.json). What
is measured (--measure, both by default):

  answers   a model of --hidden_size x --num_layers trained from random weights
            (run_squad_mgpu.py --initializer=normal --adam_bias_correction, --epochs
            epochs at --learning_rate, batch 32, max_seq_length --answers_seq_length,
            doc_stride 128; run_squad_mgpu.py counts an epoch in questions, not windows) on
            the trial set and the first 2/3 of the dev contexts (in file order: 3,094
            questions), with --do_predict on the last 1/3 (283 contexts, 1,125 questions)
            and --export_format=both --onnx_int8. Then predict_text.py (a process per
            backend) answers the held-out questions as JSON lines {"id", "question",
            "context"}: how many served answers equal predictions.json, the largest
            |probability - nbest_predictions.json's probability of predictions.json's
            answer|, whether context[start:start + len(answer)] == answer for every answer,
            and CMRC 2018's EM / F1 of predictions.json (eval_results.txt, and rescored
            here) and of each backend's answers (squad/scoring.py). The model is weak (no
            pretraining, few questions): the figures that matter are the agreements.
  speed     in this process, three predictors of one BERT-base export (serving.predictor's
            Predictor with 1 tower in fp32, and onnx_predictor.load_predictor of model.onnx
            and of model.int8.onnx; each runs at most 32 windows per session run), fed the
            same dev questions featurized once (max_seq_length --speed_seq_length, doc_stride
            128; each question is all its windows: 2.4 on the 32 dev questions timed):
              batch 1:   p50 / p99 ms of predict() on one question at a time
                         (--batch1_calls questions)
              batch 32:  questions/s and windows/s of predict() on 32 questions at a time
                         (--batch32_questions questions), and p50 / p99 ms per call
            alternating TF, ONNX fp32, ONNX int8 within each of --rounds rounds (the first
            two batch-1 calls of each backend warm it up first). The model has random
            weights trained for one step on --speed_train_questions trial questions
            (run_squad_mgpu.py needs a trained output_dir to export); speed does not depend
            on the weights. TensorFlow's session keeps its default threads; ONNX Runtime's
            intra-op threads are the CPUs this process may use.

Every model is made in --work_dir unless its export is already there (a second run only
measures). One JSON line per measurement goes to stdout (the first names the CPU, its int8
instructions and the threads; each timing has the 1-minute load average), then tables (speed:
the medians over the rounds and the ratios ONNX / TF); progress goes to stderr. Every
process started is bounded in time. Time on an idle machine: ONNX Runtime's threads suffer
more than TensorFlow's from another process on the same CPUs.

The commands (the TF 2 virtualenv with the [onnx] extra; --dev_file and --trial_file
default to /work/bench43/cmrc2018_dev.json and cmrc2018_trial.json):

  # agreement and F1: about 9 minutes on 2 cores with a test suite beside it (training 6,
  # its prediction and export 1.5, the three predict_text.py runs 2)
  .venv-tf2/bin/python scripts/bench_squad_serving.py --measure=answers \\
      --work_dir /work/bench43/serving
  # speed at BERT-base: about 7 minutes on 2 idle cores (making the model about 2, the
  # timing 267 s on 2026-11-28: 3 rounds of 16 + 32 questions, ~114 windows, per
  # backend). Time it on an idle machine.
  .venv-tf2/bin/python scripts/bench_squad_serving.py --measure=speed \\
      --work_dir /work/bench43/serving
"""

import collections
import json
import os
import sys
import time

import numpy as np

# bench_backends puts the repository on sys.path; its helpers serve both benchmarks.
# Started processes: bounded, their stderr kept in a log (bench_predict.run_python).
from bench_backends import (BERT_BASE_DIR, ONNX_FILES, benchmark_parser, call_seconds,
                            chinese_bert_config, close_all, cpu_record, featurize_once,
                            format_table, load_predictors, log, machine_line, median_of,
                            model_record, newest_export, parse_benchmark_args, ratio,
                            rows_of, train_and_export, write_json)
from bench_predict import emit, run_python
# pylint: disable=wrong-import-position,wrong-import-order
from bert_mgpu.squad import data as squad_data
from bert_mgpu.squad import scoring
from bert_mgpu.squad import serving as squad_serving
# pylint: enable=wrong-import-position,wrong-import-order

MEASURES = ("answers", "speed")
DOC_STRIDE = 128
MAX_QUERY_LENGTH = 64  # run_squad_mgpu.py's default
# predict_text.py on the held-out questions (~1,100; the TF run is the slowest).
PREDICT_TIMEOUT_SECONDS = 1800
# The prediction flags of each backend's predict_text.py run.
BACKEND_FLAGS = {"tensorflow": [],
                 "onnx_fp32": ["--backend=onnxruntime"],
                 "onnx_int8": ["--backend=onnxruntime", "--onnx_file=" + ONNX_FILES["onnx_int8"]]}


# ---------------------------------------------------------------------------
# The data
# ---------------------------------------------------------------------------

def paragraphs_of(path):
  """Every (title, paragraph) of a SQuAD-format file, in file order, without its questions
  with an empty text (two of CMRC 2018's trial set; run_squad_mgpu.py refuses them)."""
  with open(path, encoding="utf-8") as f:
    articles = json.load(f)["data"]
  return [(article.get("title", ""),
           dict(paragraph, qas=[qa for qa in paragraph["qas"] if qa["question"].strip()]))
          for article in articles for paragraph in article["paragraphs"]]


def write_squad(path, paragraphs):
  """A SQuAD-format file of (title, paragraph)s, each paragraph its own article."""
  write_json(path, {"version": "v1.0", "data": [{"title": title, "paragraphs": [paragraph]}
                                                 for title, paragraph in paragraphs]})


def questions_of(paragraphs):
  """squad_serving.Question of every question of the paragraphs, in order."""
  return [squad_serving.Question(qa["id"], qa["question"], paragraph["context"])
          for _, paragraph in paragraphs for qa in paragraph["qas"]]


def count_questions(paragraphs):
  return sum(len(paragraph["qas"]) for _, paragraph in paragraphs)


def make_answers_data(args, data_dir):
  """data_dir/train.json (the trial set and the first --train_share of the dev contexts),
  held_out.json (the other dev contexts) and held_out.jsonl (their questions, as
  predict_text.py reads them). Returns {name: path} and the question counts."""
  os.makedirs(data_dir, exist_ok=True)
  dev = paragraphs_of(args.dev_file)
  split = int(round(len(dev) * args.train_share))
  train, held_out = paragraphs_of(args.trial_file) + dev[:split], dev[split:]
  files = {name: os.path.join(data_dir, name) for name in
           ("train.json", "held_out.json", "held_out.jsonl")}
  write_squad(files["train.json"], train)
  write_squad(files["held_out.json"], held_out)
  with open(files["held_out.jsonl"], "w", encoding="utf-8") as f:
    for question in questions_of(held_out):
      f.write(json.dumps(question._asdict(), ensure_ascii=False) + "\n")
  counts = {"train_questions": count_questions(train), "train_contexts": len(train),
            "held_out_questions": count_questions(held_out), "held_out_contexts": len(held_out)}
  return files, counts


# ---------------------------------------------------------------------------
# The models
# ---------------------------------------------------------------------------

def squad_flags(config_file, seq_length):
  """run_squad_mgpu.py's model and window flags."""
  return ["--vocab_file=" + os.path.join(BERT_BASE_DIR, "vocab.txt"),
          "--bert_config_file=" + config_file, "--max_seq_length=%d" % seq_length,
          "--doc_stride=%d" % DOC_STRIDE, "--max_query_length=%d" % MAX_QUERY_LENGTH]


def make_answers_model(args, model_dir, files):
  """The export of --hidden_size x --num_layers trained from random weights, and
  model_dir/output's predictions of the held-out questions. Returns the version directory."""
  os.makedirs(model_dir, exist_ok=True)
  config_file = os.path.join(model_dir, "bert_config.json")
  write_json(config_file, chinese_bert_config(args.hidden_size, args.num_layers))
  return train_and_export(model_dir, squad_flags(config_file, args.answers_seq_length) + [
      "--train_file=" + files["train.json"], "--do_predict",
      "--predict_file=" + files["held_out.json"], "--train_batch_size=32",
      "--predict_batch_size=32", "--learning_rate=%g" % args.learning_rate,
      "--num_train_epochs=%g" % args.epochs, "--initializer=normal",
      "--adam_bias_correction", "--log_steps=20"],
                          "answers model (%d layers, hidden %d)" % (args.num_layers,
                                                                   args.hidden_size),
                          script=("run_squad_mgpu.py",))


def make_speed_model(args, model_dir):
  """The export of BERT-base with random weights trained for one step on
  --speed_train_questions trial questions (run_squad_mgpu.py counts an epoch's steps in
  questions: one step of as many of their windows)."""
  os.makedirs(model_dir, exist_ok=True)
  train_file = os.path.join(model_dir, "train.json")
  head, count = [], 0
  for title, paragraph in paragraphs_of(args.trial_file):
    if count >= args.speed_train_questions:
      break
    qas = paragraph["qas"][:args.speed_train_questions - count]
    head.append((title, dict(paragraph, qas=qas)))
    count += len(qas)
  write_squad(train_file, head)
  config_file = os.path.join(model_dir, "bert_config.json")
  write_json(config_file, chinese_bert_config())
  return train_and_export(model_dir, squad_flags(config_file, args.speed_seq_length) + [
      "--train_file=" + train_file, "--train_batch_size=%d" % count, "--num_train_epochs=1",
      "--learning_rate=1e-4"], "speed model (BERT-base, one step of %d questions)" % count,
                          script=("run_squad_mgpu.py",))


# ---------------------------------------------------------------------------
# Answers: the served answers against predictions.json
# ---------------------------------------------------------------------------

def read_json_lines(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


def read_key_values(path):
  """eval_results.txt: `key = value` lines."""
  values = {}
  with open(path, encoding="utf-8") as f:
    for line in f:
      key, _, value = line.partition(" = ")
      if value:
        values[key.strip()] = float(value)
  return values


def serve_answers(version_dir, files, backend, work_dir):
  """predict_text.py's answers to the held-out questions on one backend, and its seconds."""
  answers_file = os.path.join(work_dir, "answers_%s.jsonl" % backend)
  wall, _ = run_python(["predict_text.py", "--export_dir=" + version_dir,
                        "--input_file=" + files["held_out.jsonl"],
                        "--output_file=" + answers_file] + BACKEND_FLAGS[backend],
                       os.path.join(work_dir, "predict_text_%s.log" % backend),
                       timeout=PREDICT_TIMEOUT_SECONDS)
  return read_json_lines(answers_file), wall


def chosen_probability(nbest, text):
  """The probability nbest_predictions.json gives the answer `text` (its entry's)."""
  return next(entry["probability"] for entry in nbest if entry["text"] == text)


def agreement_record(backend, records, questions, predictions, nbest, examples):
  """How one backend's served answers compare with predictions.json, and their score."""
  if [r["id"] for r in records] != [q.id for q in questions]:
    raise RuntimeError("%s answered other questions, or in another order" % backend)
  same, differences, same_differences, bad_spans = 0, [], [], []
  for record, question in zip(records, questions):
    expected = predictions[question.id]
    difference = abs(record["probability"] -
                     chosen_probability(nbest[question.id], expected))
    differences.append(difference)
    if record["answer"] == expected:
      same += 1
      same_differences.append(difference)
    elif len(differences) - same <= 3:
      log("%s: %s: served %r, predictions.json %r" % (backend, question.id,
                                                      record["answer"], expected))
    start, answer = record["start"], record["answer"]
    in_context = (start == -1 and not answer) if start < 0 else (
        question.context[start:start + len(answer)] == answer)
    if not in_context:
      bad_spans.append(question.id)
  scores = scoring.score_predictions(
      examples, {r["id"]: r["answer"] for r in records}, "cmrc2018")
  return {"measurement": "served_answers", "backend": backend, "questions": len(records),
          "same_answer_as_predictions_json": same,
          "max_abs_probability_difference": float(max(differences)),
          "max_abs_probability_difference_same_answers":
              float(max(same_differences)) if same_differences else None,
          "spans_in_context": not bad_spans, "spans_not_in_context": len(bad_spans),
          "exact_match": round(scores["exact_match"], 3), "f1": round(scores["f1"], 3)}


AnswersModel = collections.namedtuple("AnswersModel", ["work_dir", "files", "version_dir",
                                                     "record"])


def make_answers(args):
  """The answers model's data, its training, predictions.json and export: AnswersModel."""
  work_dir = os.path.join(args.work_dir, "answers")
  files, counts = make_answers_data(args, os.path.join(work_dir, "data"))
  start, made = time.time(), not newest_export(os.path.join(work_dir, "exports"))
  version_dir = make_answers_model(args, work_dir, files)
  record = dict(model_record("answers", version_dir, {}), epochs=args.epochs,
                learning_rate=args.learning_rate, seconds_to_train_predict_export=round(
                    time.time() - start, 1) if made else None, **counts)
  return AnswersModel(work_dir, files, version_dir, record)


def bench_answers(model, args):
  """predictions.json's score; every backend's served answers to the held-out questions
  against it. Returns the records, each emitted."""
  emit(model.record)
  output_dir = os.path.join(model.work_dir, "output")
  with open(os.path.join(output_dir, "predictions.json"), encoding="utf-8") as f:
    predictions = json.load(f)
  with open(os.path.join(output_dir, "nbest_predictions.json"), encoding="utf-8") as f:
    nbest = json.load(f)
  examples, _ = squad_data.read_squad_examples(model.files["held_out.json"], False, False)
  questions = questions_of(paragraphs_of(model.files["held_out.json"]))
  eval_results = read_key_values(os.path.join(output_dir, "eval_results.txt"))
  rescored = scoring.score_predictions(examples, predictions, "cmrc2018")
  records = [{"measurement": "predictions_json", "backend": "predictions.json",
              "questions": len(predictions), "exact_match": round(eval_results["exact_match"], 3),
              "f1": round(eval_results["f1"], 3),
              "rescored_exact_match": round(rescored["exact_match"], 3),
              "rescored_f1": round(rescored["f1"], 3)}]
  emit(records[0])
  for backend in args.backends:
    log("answers: predict_text.py on %s (log: %s/predict_text_%s.log)" % (
        backend, model.work_dir, backend))
    served, wall = serve_answers(model.version_dir, model.files, backend, model.work_dir)
    record = agreement_record(backend, served, questions, predictions, nbest, examples)
    record["predict_text_seconds"] = round(wall, 1)
    emit(record)
    records.append(record)
  return records


ANSWERS_COLUMNS = [("backend", "backend"), ("questions", "questions"),
                   ("= predictions.json", "same_answer_as_predictions_json"),
                   ("max |p diff|", "max_abs_probability_difference"),
                   ("spans in context", "spans_in_context"), ("EM", "exact_match"),
                   ("F1", "f1"), ("seconds", "predict_text_seconds")]


# ---------------------------------------------------------------------------
# Speed
# ---------------------------------------------------------------------------

def speed_questions(args):
  """Dev questions spread over the file: as many as the larger setting takes."""
  questions = questions_of(paragraphs_of(args.dev_file))
  needed = max(args.batch1_calls, args.batch32_questions)
  return questions[::max(1, len(questions) // needed)][:needed]


def speed_batches(featurized, args):
  """{"batch 1": [(1, Features of one question's windows)] x --batch1_calls, "batch 32":
  [(32, Features of 32 questions' windows)] covering --batch32_questions}: the same inputs
  for every backend and round."""
  by_question = squad_data.features_by_example(featurized.windows)
  count = len(featurized.questions)

  def batch(question_indexes):
    rows = [row for index in question_indexes for row in by_question[index % count]]
    return len(question_indexes), rows_of(featurized.features, rows)

  indexes = list(range(args.batch32_questions))
  return {"batch 1": [batch([index]) for index in range(args.batch1_calls)],
          "batch 32": [batch(indexes[i:i + 32]) for i in range(0, len(indexes), 32)]}


def timing_record(setting, backend, round_index, seconds, batches):
  questions = sum(count for count, _ in batches)
  windows = sum(len(features.truncated) for _, features in batches)
  total = float(seconds.sum())
  return {"measurement": "speed", "model": "base", "setting": setting, "backend": backend,
          "round": round_index, "calls": len(seconds), "questions": questions,
          "windows": windows, "questions_per_s": round(questions / total, 3),
          "windows_per_s": round(windows / total, 3),
          "p50_ms": round(1000 * float(np.percentile(seconds, 50)), 1),
          "p99_ms": round(1000 * float(np.percentile(seconds, 99)), 1),
          "load_average_1min": round(os.getloadavg()[0], 2)}


def bench_speed(version_dir, args):
  """Alternates the backends (A B C) within each round on both settings.

  Returns:
    [speed records], each emitted as it is measured.
  """
  predictors, threads = load_predictors(version_dir, args.backends, batch_size=32)
  emit(model_record("base", version_dir, threads))
  try:
    questions = speed_questions(args)
    featurize_once(predictors, questions)  # every backend windows them alike
    featurized = next(iter(predictors.values())).featurize(questions)
    batches = speed_batches(featurized, args)
    windows = len(featurized.windows)
    emit({"measurement": "speed_inputs", "questions": len(questions), "windows": windows,
          "windows_per_question": round(windows / float(len(questions)), 2),
          "context_chars_mean": round(float(np.mean([len(q.context) for q in questions])), 1)})
    for predictor in predictors.values():  # warm-up: the first calls are slow
      call_seconds(predictor, [features for _, features in batches["batch 1"][:2]])
    records = []
    for round_index in range(1, args.rounds + 1):
      for setting, inputs in batches.items():
        mine = {}
        for backend, predictor in predictors.items():
          seconds = call_seconds(predictor, [features for _, features in inputs])
          mine[backend] = timing_record(setting, backend, round_index, seconds, inputs)
          emit(mine[backend])
        log("%s, round %d: %s" % (setting, round_index, "; ".join(
            "%s %.3g questions/s p50 %.0f ms" % (b, r["questions_per_s"], r["p50_ms"])
            for b, r in mine.items())))
        records.extend(mine.values())
    return records
  finally:
    close_all(predictors)


def speed_summary(records, backends):
  """Per backend: the medians over the rounds, and the ratios to TF (questions/s at batch 32:
  ONNX / TF, above 1 is faster; p50 at batch 1: ONNX / TF, below 1 is faster)."""
  rows = []
  for backend in backends:
    row = {"measurement": "speed_summary", "model": "base", "backend": backend}
    for setting, prefix, keys in (
        ("batch 32", "b32_", ("questions_per_s", "windows_per_s", "p50_ms", "p99_ms")),
        ("batch 1", "b1_", ("p50_ms", "p99_ms"))):
      for key in keys:  # a few questions/s: 3 decimals
        row[prefix + key] = median_of(records, "base", setting, backend, key, digits=3)
    tf_row = row if backend == "tensorflow" else next(
        (r for r in rows if r["backend"] == "tensorflow"), {})  # TF comes first
    row["b32_questions_per_s_vs_tf"] = ratio(row["b32_questions_per_s"],
                                             tf_row.get("b32_questions_per_s"))
    row["b1_p50_vs_tf"] = ratio(row["b1_p50_ms"], tf_row.get("b1_p50_ms"))
    rows.append(row)
  return rows


SPEED_COLUMNS = [("backend", "backend"), ("b32 questions/s", "b32_questions_per_s"),
                 ("b32 windows/s", "b32_windows_per_s"), ("b32 p50 ms", "b32_p50_ms"),
                 ("b1 p50 ms", "b1_p50_ms"), ("b1 p99 ms", "b1_p99_ms"),
                 ("b32 q/s / TF", "b32_questions_per_s_vs_tf"),
                 ("b1 p50 / TF", "b1_p50_vs_tf")]


# ---------------------------------------------------------------------------

def parse_args():
  parser = benchmark_parser(__doc__, MEASURES, "/tmp/bench_squad_serving")
  parser.add_argument("--dev_file", default="/work/bench43/cmrc2018_dev.json")
  parser.add_argument("--trial_file", default="/work/bench43/cmrc2018_trial.json")
  parser.add_argument("--batch1_calls", type=int, default=16)
  parser.add_argument("--batch32_questions", type=int, default=32)
  parser.add_argument("--speed_seq_length", type=int, default=384)
  parser.add_argument("--speed_train_questions", type=int, default=4)
  parser.add_argument("--hidden_size", type=int, default=256, help="of the answers model")
  parser.add_argument("--num_layers", type=int, default=4, help="likewise")
  parser.add_argument("--answers_seq_length", type=int, default=256, help="likewise")
  parser.add_argument("--epochs", type=float, default=2.0, help="likewise")
  parser.add_argument("--learning_rate", type=float, default=1e-3, help="likewise")
  parser.add_argument("--train_share", type=float, default=2.0 / 3,
                      help="of the dev contexts, trained on (the rest is held out)")
  return parse_benchmark_args(parser)


def main():
  args = parse_args()
  os.makedirs(args.work_dir, exist_ok=True)
  start = time.time()
  # Every model first: training would disturb the timing.
  if "answers" in args.measure:
    answers_model = make_answers(args)
  if "speed" in args.measure:
    speed_export = make_speed_model(args, os.path.join(args.work_dir, "speed_base"))
  log("models ready in %.0f s" % (time.time() - start))
  first = cpu_record()
  emit(dict(first, backends=args.backends, rounds=args.rounds))
  tables = []
  if "speed" in args.measure:
    speed_start = time.time()
    summary = speed_summary(bench_speed(speed_export, args), args.backends)
    for row in summary:
      emit(row)
    tables.append("%s\n\n%s" % (machine_line(first), format_table(summary, SPEED_COLUMNS)))
    log("speed measured in %.0f s" % (time.time() - speed_start))
  if "answers" in args.measure:
    answers_start = time.time()
    records = bench_answers(answers_model, args)
    tables.append(format_table([dict(dict.fromkeys(key for _, key in ANSWERS_COLUMNS), **r)
                                for r in records], ANSWERS_COLUMNS))
    log("answers served and compared in %.0f s" % (time.time() - answers_start))
  sys.stdout.write("\n%s\n" % "\n\n".join(tables))
  log("done in %.0f s" % (time.time() - start))


if __name__ == "__main__":
  main()
