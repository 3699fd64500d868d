#!/usr/bin/env bash
# The whole study, from the repository root:  experiments/length_generalisation/run.sh [all|TASK...|eval TASK...|report]
#   for each task (default: copy passkey recall addition, two side by side):
#     train   18 runs (experiment=length_generalisation: 6 encodings x 3 seeds, 300 steps at length 16)
#     eval    every last checkpoint at 16, 32, 64, 128, 256 characters (1x-16x) on the first 32 val
#             examples, in one attnlab-eval call per task; the RoPE ones also with linear, NTK and YaRN
#             scaling at factor length / 16
#   report  attnlab-report over the runs: heatmaps, line plots and tables into $HERE/results/
# One thread per process: the 2 cores of the machine this was written on are shared with other work.
set -euo pipefail
HERE=experiments/length_generalisation
RUNS=${RUNS:-$HERE/runs}                  # git-ignored: checkpoints and logs
export OMP_NUM_THREADS=${THREADS:-1}
export HYDRA_FULL_ERROR=0
BIN=${ATTNLAB_BIN:-$(dirname "$(command -v python)")}
LENGTHS="[16,32,64,128,256]"

task_args() {  # what a task sets beyond the experiment (passkey: a 3-digit key, so 16 holds filler)
  case $1 in
    passkey) echo "data=passkey data.passkey_digits=3 data.batch_size=32" ;;
    *) echo "data=$1 data.batch_size=32" ;;
  esac
}

train() {  # one task's 18 trainings
  # shellcheck disable=SC2046
  "$BIN/attnlab-train" experiment=length_generalisation $(task_args "$1") \
    hydra.sweep.dir="$RUNS/$1" > "$RUNS/train_$1.log" 2>&1
}

evaluate() {  # every checkpoint of one task at every length, one attnlab-eval call
  local ckpts
  ckpts=$(find "$RUNS/$1" -path '*/checkpoints/last.ckpt' | sort | paste -sd, -)
  "$BIN/attnlab-eval" -m ckpt_path="$ckpts" "eval.lengths=$LENGTHS" eval.examples=32 split=val \
    logger=none > "$RUNS/eval_$1.log" 2>&1
}

tasks() {  # train and evaluate each task in turn; each one's wall time into results/wall_time.txt
  for task in "$@"; do
    local start
    start=$(date +%s)
    train "$task"
    evaluate "$task"
    echo "$task: train 18 runs and evaluate them: $(($(date +%s) - start)) s wall" >> "$HERE/results/wall_time.txt"
  done
}

report() {
  "$BIN/attnlab-report" "$RUNS" --out "$HERE/results"
}

mkdir -p "$RUNS" "$HERE/results"
case ${1:-all} in
  report) report ;;
  eval) shift; for task in "$@"; do evaluate "$task"; done ;;
  all)
    tasks copy recall &     # two streams side by side
    a=$!
    tasks passkey addition
    wait $a
    report
    ;;
  *) tasks "$@" && report ;;
esac
