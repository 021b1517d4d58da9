#!/usr/bin/env bash
# The everyday command: fine-tune Google's released Chinese BERT on your own labelled texts on
# every listed GPU, evaluate on dev and write predict.txt. Edit the variables, or set them in the
# environment:
#   BERT_DIR=/data/chinese_L-12_H-768_A-12 DATA_DIR=/data/my_task OUTPUT_DIR=/data/out \
#   GPUS=0,1,2,3 bash scripts/run_classifier.sh
# DATA_DIR holds train.tsv, dev.tsv and test.tsv with a header row: label<TAB>text_a (TASK=tsv);
# see docs/CLASSIFIER.md, "Input: tasks and data formats", for csv, jsonl, tnews, iflytek, thucnews
# and Google's tasks.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
BERT_DIR=${BERT_DIR:-$HOME/models/chinese_L-12_H-768_A-12}
DATA_DIR=${DATA_DIR:-$HOME/data/my_task}
OUTPUT_DIR=${OUTPUT_DIR:-$HOME/output/my_task}
TASK=${TASK:-tsv}
GPUS=${GPUS:-0,1}
PYTHON=${PYTHON:-python}

# One tower per listed GPU; --train_batch_size is per tower, so the global batch is 32 x GPUs.
n_gpus=$(echo "$GPUS" | tr ',' '\n' | grep -c .)
export CUDA_VISIBLE_DEVICES=$GPUS
exec "$PYTHON" "$repo/run_classifier_mgpu.py" \
  --task_name="$TASK" \
  --data_dir="$DATA_DIR" \
  --vocab_file="$BERT_DIR/vocab.txt" \
  --bert_config_file="$BERT_DIR/bert_config.json" \
  --init_checkpoint="$BERT_DIR/bert_model.ckpt" \
  --output_dir="$OUTPUT_DIR" \
  --do_train=true --do_eval=true --do_predict=true \
  --n_gpus="$n_gpus" \
  --max_seq_length=128 \
  --train_batch_size=32 \
  --learning_rate=2e-5 \
  --num_train_epochs=3.0 \
  "$@"
