# coding=utf-8
"""What distillation buys in serving (#48): a 3-layer student at BERT-base width served by
predict_text.py's ONNX Runtime int8 path, against the 12-layer teacher served by its
TensorFlow path, on real texts.

Both models have BERT-base's width and vocab (/work/shared/chinese_bert) and random
weights trained one step (speed does not depend on the weights), made and exported by
bench_backends.make_speed_model (--export_format=both --onnx_int8) in --work_dir; the texts
are the test split of waimai_10k (bench_backends.make_data), max_seq_length
--speed_seq_length. Measured, alternating teacher and student (A B A B) within each of
--rounds rounds:

  batch 1    p50 / p99 of predict() on one text at a time (--batch1_calls calls), in this
             process, the texts featurized once
  batch 32   texts/s of predict() on 32 texts at a time (--batch32_texts texts)
  process    the whole predict_text.py process on --process_texts texts from a file: start,
             load, featurize, predict, write (wall seconds, texts/s)

One JSON line per measurement on stdout (the first names the CPU), then the medians and the
student / teacher ratios: the targets are at least 8x the teacher's batch-32 throughput and
at most 0.15x its batch-1 p50. Time it on an idle machine.

  .venv-tf2/bin/python scripts/bench_distilled_serving.py --csv /work/data/waimai_10k.csv \\
      --work_dir /work/bench48

(--prepare_only makes the exports, about 10 minutes on 2 cores, which need no idle machine;
the same command again then only measures.)
"""

import argparse
import os
import sys
import time

import numpy as np

SCRIPTS_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, SCRIPTS_DIR)

# pylint: disable=wrong-import-position
import bench_backends
from bench_predict import emit, run_python
from bert_mgpu.serving import onnx_predictor
# pylint: enable=wrong-import-position

SIDES = ("teacher_tensorflow", "student_onnx_int8")


def load_sides(teacher_dir, student_dir):
  """{side: predictor}: the teacher's export through TensorFlow (1 tower, fp32), the
  student's model.int8.onnx through ONNX Runtime (threads: the usable CPUs)."""
  teacher, _ = bench_backends.tensorflow_predictor(teacher_dir, batch_size=32)
  student = onnx_predictor.load_predictor(
      student_dir, onnx_file=bench_backends.ONNX_FILES["onnx_int8"], batch_size=32,
      threads=None)
  return {"teacher_tensorflow": teacher, "student_onnx_int8": student}


def bench_in_process(teacher_dir, student_dir, texts, args):
  """The batch-1 and batch-32 records, A B alternated within each round."""
  predictors = load_sides(teacher_dir, student_dir)
  try:
    features = bench_backends.featurize_once(predictors, texts)
    batches = bench_backends.speed_batches(features, args)
    for predictor in predictors.values():  # warm-up
      bench_backends.call_seconds(predictor, batches["batch 1"][:10] +
                                  batches["batch 32"][:2])
    records = []
    for round_index in range(1, args.rounds + 1):
      for setting, inputs in batches.items():
        count = sum(len(batch.truncated) for batch in inputs)
        for side, predictor in predictors.items():
          record = bench_backends.timing_record(
              side.split("_")[0], setting, side, round_index,
              bench_backends.call_seconds(predictor, inputs), count)
          emit(record)
          records.append(record)
    return records
  finally:
    bench_backends.close_all(predictors)


def bench_processes(teacher_dir, student_dir, texts, args):
  """Whole predict_text.py processes on a file of texts, A B alternated per round."""
  input_file = os.path.join(args.work_dir, "process_texts.txt")
  with open(input_file, "w", encoding="utf-8") as f:
    f.write("".join(text + "\n" for text in texts))
  commands = {
      "teacher_tensorflow": ["predict_text.py", "--export_dir=" + teacher_dir],
      "student_onnx_int8": ["predict_text.py", "--export_dir=" + student_dir,
                            "--backend=onnxruntime", "--onnx_file=model.int8.onnx"]}
  records = []
  for round_index in range(1, args.rounds + 1):
    for side, command in commands.items():
      output_file = os.path.join(args.work_dir, side + "_predictions.tsv")
      wall, _ = run_python(command + ["--input_file=" + input_file,
                                      "--output_file=" + output_file],
                           os.path.join(args.work_dir, side + "_process.log"))
      record = {"measurement": "process", "backend": side, "round": round_index,
                "texts": len(texts), "seconds": round(wall, 2),
                "texts_per_s": round(len(texts) / wall, 1),
                "load_average_1min": round(os.getloadavg()[0], 2)}
      emit(record)
      records.append(record)
  return records


def median(records, side, key, setting=None):
  values = [r[key] for r in records if r["backend"] == side and
            (setting is None or r.get("setting") == setting)]
  return float(np.median(values))


def summary(speed, processes):
  """The medians of each side and the student / teacher ratios."""
  rows = []
  for side in SIDES:
    rows.append({"measurement": "summary", "backend": side,
                 "b32_texts_per_s": median(speed, side, "texts_per_s", "batch 32"),
                 "b1_p50_ms": median(speed, side, "p50_ms", "batch 1"),
                 "process_seconds": median(processes, side, "seconds")})
  teacher, student = rows
  rows.append({"measurement": "ratios", "b32_throughput_student_vs_teacher": round(
      student["b32_texts_per_s"] / teacher["b32_texts_per_s"], 2),
               "b1_p50_student_vs_teacher": round(student["b1_p50_ms"] / teacher["b1_p50_ms"],
                                                  3),
               "process_seconds_student_vs_teacher": round(
                   student["process_seconds"] / teacher["process_seconds"], 3)})
  return rows


def parse_args():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--csv", help="waimai_10k.csv (until --work_dir/data exists)")
  parser.add_argument("--work_dir", default="/tmp/bench_distilled_serving")
  parser.add_argument("--student_layers", type=int, default=3)
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--batch1_calls", type=int, default=200)
  parser.add_argument("--batch32_texts", type=int, default=640)
  parser.add_argument("--process_texts", type=int, default=1000)
  parser.add_argument("--speed_seq_length", type=int, default=64)
  parser.add_argument("--prepare_only", action="store_true",
                      help="make the two exports and stop (they need no idle machine)")
  args = parser.parse_args()
  args.work_dir = os.path.abspath(args.work_dir)
  # make_data's split and config (the speed models take BERT-base's config instead).
  args.hidden_size, args.num_layers = 256, 4
  return args


def main():
  args = parse_args()
  os.makedirs(args.work_dir, exist_ok=True)
  start = time.time()
  data_dir = bench_backends.make_data(args)
  teacher_dir = bench_backends.make_speed_model(args, data_dir, "base")
  student_config = dict(bench_backends.chinese_bert_config(),
                        num_hidden_layers=args.student_layers)
  student_dir = bench_backends.make_speed_model(
      args, data_dir, "student%d" % args.student_layers, student_config)
  if args.prepare_only:
    bench_backends.log("exports ready: %s, %s" % (teacher_dir, student_dir))
    return
  first = bench_backends.cpu_record()
  emit(first)
  texts = bench_backends.read_split(data_dir, "test")[1]
  speed = bench_in_process(teacher_dir, student_dir, texts, args)
  processes = bench_processes(teacher_dir, student_dir, (texts * 10)[:args.process_texts],
                              args)
  for row in summary(speed, processes):
    emit(row)
  sys.stdout.write(bench_backends.machine_line(first) + "\n")
  bench_backends.log("done in %.0f s" % (time.time() - start))


if __name__ == "__main__":
  main()
