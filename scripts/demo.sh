#!/usr/bin/env bash
# README command 1: the built-in Chinese classification demo on a CPU-only machine.
# It sets up TensorFlow 2.x (scripts/setup_env.sh), writes a small Chinese data set with a tiny
# vocab and config (scripts/make_demo_data.py), trains a tiny BERT from random weights on 2
# simulated GPUs (logical CPU devices) with the from-scratch recipe (--initializer=normal
# --adam_bias_correction, docs/TRAINING.md), evaluates on dev and writes predict.txt.
#   bash scripts/demo.sh [output_dir]        (default: demo_output)
# PYTHON=/path/to/python uses that interpreter instead of setting one up.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
out=${1:-demo_output}
python=${PYTHON:-$(bash scripts/setup_env.sh tf2)}

"$python" scripts/make_demo_data.py --output_dir "$out/data"
rm -rf "$out/model"
mkdir -p "$out"
# The log goes to the terminal and to $out/train.log, which the summary below reads.
TF_CPP_MIN_LOG_LEVEL=2 "$python" run_classifier_mgpu.py \
  --task_name=tsv \
  --data_dir="$out/data" \
  --vocab_file="$out/data/vocab.txt" \
  --bert_config_file="$out/data/bert_config.json" \
  --output_dir="$out/model" \
  --do_train --do_eval --do_predict \
  --n_gpus=2 \
  --max_seq_length=48 \
  --train_batch_size=16 \
  --learning_rate=5e-3 \
  --num_train_epochs=8 \
  --save_checkpoints_steps=50 \
  --initializer=normal --adam_bias_correction \
  --log_steps=20 2>&1 | tee "$out/train.log"

echo
echo "eval results ($out/model/eval_results.txt):"
cat "$out/model/eval_results.txt"
accuracy=$(sed -n 's/^eval_accuracy = //p' "$out/model/eval_results.txt")
echo "dev accuracy: $accuracy"
echo "evaluated and predicted with: $(sed -n 's/.*Evaluating and predicting with \(.*\)\.$/\1/p' "$out/train.log")"
predict=$(cd "$out/model" && pwd)/predict.txt
echo "predictions: $(wc -l < "$predict") lines in $predict"
