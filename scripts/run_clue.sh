#!/usr/bin/env bash
# Fine-tune Google's released Chinese BERT-base on one CLUE classification task with the recipe
# of CLUE's own BERT-base baseline, on every listed GPU; evaluate on dev and write the
# leaderboard's submission file(s) (--clue_submission). Edit the variables, or set them in the
# environment; further arguments go to run_classifier_mgpu.py:
#   BERT_DIR=/data/chinese_L-12_H-768_A-12 DATA_DIR=/data/clue/afqmc OUTPUT_DIR=/data/out/afqmc \
#   GPUS=0,1 bash scripts/run_clue.sh afqmc
# TASK: afqmc, tnews, iflytek, cmnli, ocnli, csl or cluewsc2020. DATA_DIR holds the files as
# CLUE ships them (train.json or, for OCNLI, train.50k.json; dev.json; test.json).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
TASK=${1:?usage: bash scripts/run_clue.sh TASK [flags...]  (TASK: afqmc, tnews, iflytek, cmnli, ocnli, csl, cluewsc2020)}
shift
BERT_DIR=${BERT_DIR:-$HOME/models/chinese_L-12_H-768_A-12}
DATA_DIR=${DATA_DIR:-$HOME/data/clue/$TASK}
OUTPUT_DIR=${OUTPUT_DIR:-$HOME/output/clue/$TASK}
GPUS=${GPUS:-0,1}
PYTHON=${PYTHON:-python}

# CLUE's BERT-base recipe per task: global batch, max_seq_length, epochs, learning rate.
# Source: the "训练参数" column of the BERT-base rows in CLUE's README, section "各任务详细对比"
# (github.com/CLUEbenchmark/CLUE); OCNLI, which that README does not list: "BERT: lr=2e-5,
# batch_size=32, #epochs=3.0" with --max_seq_length=128 in OCNLI's rep_baseline.md
# (github.com/CLUEbenchmark/OCNLI). Warmup: Google's default 0.1, as CLUE's run scripts.
case "$TASK" in
  afqmc)       batch=16; length=128; epochs=3;  lr=2e-5 ;;  # AFQMC table
  tnews)       batch=16; length=128; epochs=3;  lr=2e-5 ;;  # TNEWS' table
  iflytek)     batch=32; length=128; epochs=3;  lr=2e-5 ;;  # IFLYTEK' table
  cmnli)       batch=64; length=128; epochs=2;  lr=3e-5 ;;  # CMNLI table
  ocnli)       batch=32; length=128; epochs=3;  lr=2e-5 ;;  # OCNLI's rep_baseline.md
  csl)         batch=4;  length=256; epochs=5;  lr=1e-5 ;;  # CSL table
  cluewsc2020) batch=8;  length=128; epochs=50; lr=2e-5 ;;  # WSC table
  *) echo "error: unknown CLUE task '$TASK': use afqmc, tnews, iflytek, cmnli, ocnli, csl or cluewsc2020" >&2
     exit 1 ;;
esac

# One tower per listed GPU; --train_batch_size is per tower, so CLUE's global batch is split
# across the GPUs (the same update as CLUE's one-device run).
n_gpus=$(echo "$GPUS" | tr ',' '\n' | grep -c .)
if (( batch % n_gpus != 0 )); then
  echo "error: CLUE's batch of $batch for $TASK does not split evenly over $n_gpus GPUs; list a number of GPUs in GPUS that divides it" >&2
  exit 1
fi
# run_classifier.sh's command (train, eval and predict on the GPUs in $GPUS) with CLUE's recipe
# after its defaults: the last value given for a flag is the one used.
export TASK DATA_DIR OUTPUT_DIR BERT_DIR GPUS PYTHON
exec bash "$repo/scripts/run_classifier.sh" \
  --clue_submission=true \
  --max_seq_length="$length" \
  --train_batch_size=$(( batch / n_gpus )) \
  --learning_rate="$lr" \
  --num_train_epochs="$epochs" \
  "$@"
