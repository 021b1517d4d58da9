#!/usr/bin/env bash
# Continue pre-training Google's released Chinese BERT on your own text, on every listed GPU:
# first create the masked-LM / next-sentence TFRecords from $CORPUS, then pre-train from
# $BERT_DIR/bert_model.ckpt. Edit the variables, or set them in the environment:
#   BERT_DIR=/data/chinese_L-12_H-768_A-12 CORPUS='/data/corpus/*.txt' \
#   DATA_DIR=/data/pretrain_records OUTPUT_DIR=/data/pretrain_out GPUS=0,1,2,3 \
#   bash scripts/run_pretraining.sh
# CORPUS: comma-separated globs of UTF-8 text, one sentence per line, a blank line between
# documents. WHOLE_WORD_MASK=jieba masks whole Chinese words of raw text as jieba cuts them
# (pip install jieba); WHOLE_WORD_MASK=spaces, words of pre-segmented text (separated by
# spaces). Extra arguments go to run_pretraining_mgpu.py (e.g. --num_train_steps=20000).
# TASK picks what is trained: nsp (Google's masked LM + next sentence, the default), mlm
# (the masked LM alone on single segments, as HFL's RoBERTa-wwm-ext/MacBERT; usually with
# WHOLE_WORD_MASK=jieba) or pair_span (bert-ad's rewriting pairs: CORPUS is TSV
# label<TAB>id<TAB>text_a<TAB>text_b; BLANK_MARKER, default U+201C, marks the blank).
# Run it again with the same OUTPUT_DIR to resume where it stopped.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
BERT_DIR=${BERT_DIR:-$HOME/models/chinese_L-12_H-768_A-12}
CORPUS=${CORPUS:-$HOME/data/corpus/*.txt}
DATA_DIR=${DATA_DIR:-$HOME/data/pretrain_records}
OUTPUT_DIR=${OUTPUT_DIR:-$HOME/output/pretrain}
GPUS=${GPUS:-0,1}
MAX_SEQ_LENGTH=${MAX_SEQ_LENGTH:-128}
MAX_PREDICTIONS=${MAX_PREDICTIONS:-20}
PYTHON=${PYTHON:-python}
WHOLE_WORD_MASK=${WHOLE_WORD_MASK:-}
TASK=${TASK:-nsp}
BLANK_MARKER=${BLANK_MARKER:-}

case "$TASK" in
  nsp|mlm) task_args=(--pretraining_task="$TASK") ;;
  pair_span)
    task_args=(--pretraining_task=pair_span)
    if [ -n "$BLANK_MARKER" ]; then task_args+=(--blank_marker="$BLANK_MARKER"); fi
    if [ -n "$WHOLE_WORD_MASK" ]; then
      echo "WHOLE_WORD_MASK does not apply to TASK=pair_span: leave it empty." >&2; exit 1
    fi ;;
  *) echo "TASK=$TASK: use nsp, mlm or pair_span." >&2; exit 1 ;;
esac

case "$WHOLE_WORD_MASK" in
  "") masking=() ;;
  spaces) masking=(--do_whole_word_mask=true) ;;
  jieba) masking=(--do_whole_word_mask=true --chinese_segmenter=jieba) ;;
  *) echo "WHOLE_WORD_MASK=$WHOLE_WORD_MASK: use jieba, spaces or leave it empty." >&2; exit 1 ;;
esac

# 1. The TFRecords (skipped when they already exist; delete DATA_DIR to re-create them).
# run_pretraining_mgpu.py trains what they hold: no next_sentence_labels (mlm), no NSP head.
# TASK=nsp keeps the old name and reads all of DATA_DIR; the others read only their file.
record_file="$DATA_DIR/pretrain_data.tfrecord"
train_input="$DATA_DIR"
if [ "$TASK" != nsp ]; then
  record_file="$DATA_DIR/pretrain_data.$TASK.tfrecord"
  train_input="$record_file"
fi
if [ ! -s "$record_file" ]; then
  mkdir -p "$DATA_DIR"
  "$PYTHON" "$repo/create_pretraining_data.py" \
    --input_file="$CORPUS" \
    --output_file="$record_file" \
    --vocab_file="$BERT_DIR/vocab.txt" \
    --do_lower_case=true \
    --max_seq_length="$MAX_SEQ_LENGTH" \
    --max_predictions_per_seq="$MAX_PREDICTIONS" \
    --masked_lm_prob=0.15 \
    --dupe_factor=5 \
    "${task_args[@]}" \
    ${masking[@]+"${masking[@]}"}
fi

# 2. Pre-training. One tower per listed GPU; --train_batch_size is per tower, so the global
# batch is 32 x GPUs. LAMB is the usual optimizer for large pre-training batches.
n_gpus=$(echo "$GPUS" | tr ',' '\n' | grep -c .)
export CUDA_VISIBLE_DEVICES=$GPUS
exec "$PYTHON" "$repo/run_pretraining_mgpu.py" \
  --input_file="$train_input" \
  --bert_config_file="$BERT_DIR/bert_config.json" \
  --init_checkpoint="$BERT_DIR/bert_model.ckpt" \
  --output_dir="$OUTPUT_DIR" \
  --do_train=true --do_eval=true \
  --n_gpus="$n_gpus" \
  --optimizer=lamb \
  --max_seq_length="$MAX_SEQ_LENGTH" \
  --max_predictions_per_seq="$MAX_PREDICTIONS" \
  --train_batch_size=32 \
  --learning_rate=2e-5 \
  --num_train_steps=100000 \
  --num_warmup_steps=10000 \
  --save_checkpoints_steps=1000 \
  "$@"
