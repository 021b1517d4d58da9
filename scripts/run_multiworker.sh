#!/usr/bin/env bash
# Fine-tuning on several machines: one worker process per machine, each on all of its GPUs,
# gradients all-reduced through TensorFlow's own distributed runtime (docs/SCALING.md: "Several
# machines").
#
# On each machine, the same command with that machine's index (0 is the chief, which alone
# writes OUTPUT_DIR):
#   WORKER_HOSTS=10.0.0.1:2222,10.0.0.2:2222 GPUS=0,1,2,3 \
#   BERT_DIR=/data/chinese_L-12_H-768_A-12 DATA_DIR=/data/my_task OUTPUT_DIR=/data/out \
#   bash scripts/run_multiworker.sh worker 0        # on 10.0.0.1
#   ...                                    worker 1  # on 10.0.0.2
# Every worker needs the same flags, the same data at DATA_DIR and the BERT files; only the
# chief needs to reach OUTPUT_DIR. To restart, stop every worker and run the same commands
# again: training resumes from the chief's last checkpoint.
#
# To try it on one machine (no GPU needed): two worker processes on 127.0.0.1 train the demo
# classifier, each on one logical CPU device:
#   bash scripts/run_multiworker.sh local [output_dir]      (default: multiworker_demo)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-}

case "$mode" in
  worker)
    index=${2:?usage: run_multiworker.sh worker INDEX}
    : "${WORKER_HOSTS:?set WORKER_HOSTS=host:port,host:port,... (the same list on every worker)}"
    # scripts/run_classifier.sh's command (BERT_DIR, DATA_DIR, OUTPUT_DIR, TASK, GPUS, PYTHON)
    # with the multi-worker flags: the chief also evaluates and predicts once training ends.
    exec bash "$repo/scripts/run_classifier.sh" \
      --variable_update=replicated \
      --worker_hosts="$WORKER_HOSTS" \
      --task_index="$index" \
      "${@:3}"
    ;;
  local)
    cd "$repo"
    out=${2:-multiworker_demo}
    python=${PYTHON:-$(bash scripts/setup_env.sh tf2)}
    "$python" scripts/make_demo_data.py --output_dir "$out/data"
    rm -rf "$out/model" "$out/worker1_output"
    # Two free ports on 127.0.0.1.
    ports=$("$python" -c 'import socket
s = [socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1", 0)) for x in s]
print(",".join("127.0.0.1:%d" % x.getsockname()[1] for x in s))')
    common=(--task_name=tsv --data_dir="$out/data" --vocab_file="$out/data/vocab.txt"
            --bert_config_file="$out/data/bert_config.json" --do_train
            --n_gpus=1 --variable_update=replicated --worker_hosts="$ports"
            --max_seq_length=48 --train_batch_size=16 --learning_rate=1e-3
            --num_train_epochs=8 --save_checkpoints_steps=50 --log_steps=20)
    echo "workers: $ports"
    # Worker 1 writes nothing to its --output_dir; it is given one that stays absent.
    TF_CPP_MIN_LOG_LEVEL=2 "$python" run_classifier_mgpu.py "${common[@]}" --task_index=1 \
      --output_dir="$out/worker1_output" > "$out/worker1.log" 2>&1 &
    worker1=$!
    trap 'kill $worker1 2>/dev/null || true' EXIT
    TF_CPP_MIN_LOG_LEVEL=2 "$python" run_classifier_mgpu.py "${common[@]}" --task_index=0 \
      --output_dir="$out/model" 2>&1 | tee "$out/worker0.log"
    wait $worker1
    trap - EXIT
    echo
    echo "worker 1's log: $out/worker1.log; checkpoints (written by worker 0 only):"
    ls "$out/model" | grep '^model.ckpt-.*index$'
    test ! -e "$out/worker1_output" && echo "worker 1 wrote nothing to its --output_dir"
    ;;
  *)
    echo "usage: run_multiworker.sh worker INDEX [more flags]   (one per machine)" >&2
    echo "       run_multiworker.sh local [output_dir]          (two processes here)" >&2
    exit 2
    ;;
esac
