#!/usr/bin/env bash
# Reading comprehension: fine-tune Google's released Chinese BERT on CMRC 2018 (or any
# SQuAD-format data: DRCD, SQuAD v1.1/v2.0) on every listed GPU, then predict the dev set and
# score it. Edit the variables, or set them in the environment:
#   BERT_DIR=/data/chinese_L-12_H-768_A-12 DATA_DIR=/data/cmrc2018 OUTPUT_DIR=/data/cmrc_out \
#   GPUS=0,1,2,3 bash scripts/run_squad.sh
# DATA_DIR holds $TRAIN_FILE and $DEV_FILE (CMRC 2018's names by default). For SQuAD 2.0 data
# with unanswerable questions set VERSION_2=true; for a cased English model add
# --do_lower_case=false. Extra arguments go to run_squad_mgpu.py and override the ones below
# (e.g. --num_train_epochs=3). OUTPUT_DIR gets the checkpoints, predictions.json,
# nbest_predictions.json, eval_results.txt (and null_odds.json for v2).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
BERT_DIR=${BERT_DIR:-$HOME/models/chinese_L-12_H-768_A-12}
DATA_DIR=${DATA_DIR:-$HOME/data/cmrc2018}
TRAIN_FILE=${TRAIN_FILE:-cmrc2018_train.json}
DEV_FILE=${DEV_FILE:-cmrc2018_dev.json}
OUTPUT_DIR=${OUTPUT_DIR:-$HOME/output/cmrc2018}
VERSION_2=${VERSION_2:-false}
GPUS=${GPUS:-0,1}
PYTHON=${PYTHON:-python}

# One tower per listed GPU; --train_batch_size is per tower, so the global batch is 12 x GPUs
# (BERT-base at 384 tokens x 12 fits in 12 GB).
n_gpus=$(echo "$GPUS" | tr ',' '\n' | grep -c .)
export CUDA_VISIBLE_DEVICES=$GPUS
exec "$PYTHON" "$repo/run_squad_mgpu.py" \
  --vocab_file="$BERT_DIR/vocab.txt" \
  --bert_config_file="$BERT_DIR/bert_config.json" \
  --init_checkpoint="$BERT_DIR/bert_model.ckpt" \
  --do_train=true \
  --train_file="$DATA_DIR/$TRAIN_FILE" \
  --do_predict=true \
  --predict_file="$DATA_DIR/$DEV_FILE" \
  --version_2_with_negative="$VERSION_2" \
  --output_dir="$OUTPUT_DIR" \
  --n_gpus="$n_gpus" \
  --max_seq_length=384 \
  --doc_stride=128 \
  --train_batch_size=12 \
  --learning_rate=3e-5 \
  --num_train_epochs=2.0 \
  "$@"
