#!/usr/bin/env bash
# Every attention variant at one budget (experiment=attention_variants), from the repository root:
#   experiments/attention_variants/run.sh [all|TASK...|train TASK...|eval TASK...|report]
#   for each task (shakespeare, recall, passkey): one interleaved multirun of the 16 variants x 5 seeds
#     (80 trainings of 100 steps, batch 16); recall and passkey trained at 16 characters and every last
#     checkpoint scored at 16, 32, 48 and 64 (1x-4x) on the first 32 val examples, one attnlab-eval call
#     (as trained: eval.rope_scalings=[], no zero-shot RoPE scaling, which would score RoPE models 4 times)
#   report  attnlab-report per task against mha_rope (significance.csv: interval, p, Holm, verdict, seeds
#           needed; Tiny Shakespeare also at equal FLOPs), and lengths_significance.py: the same
#           comparison of the 1x-4x scores, into $OUT/<task>/; sizes.py (parameters, FLOPs) and
#           tables.py (the README's tables) into $OUT/
#   all     shakespeare in one lane, recall then passkey in the other, then the report
# Tiny Shakespeare is read from $TINYSHAKESPEARE (default ../shared/data/tinyshakespeare.txt); the study
# stops before training if it is missing. One torch thread per process, niced: the machine it was
# written on has 2 cores shared with other work. Wall times into $OUT/wall_time.txt. OVERRIDES: more
# attnlab-train overrides (hydra.callbacks.validate.check_jobs=false skips the check of the 80 jobs'
# configs before the first trains: minutes on a loaded 2-core machine).
set -euo pipefail
HERE=experiments/attention_variants
RUNS=${RUNS:-$HERE/runs}                  # git-ignored: checkpoints and logs
OUT=${OUT:-$HERE/results}
TINYSHAKESPEARE=${TINYSHAKESPEARE:-../shared/data/tinyshakespeare.txt}
if [ ! -f "$TINYSHAKESPEARE" ]; then
  echo "error: TINYSHAKESPEARE=$TINYSHAKESPEARE: no such file (Tiny Shakespeare, 1.1 MB; set TINYSHAKESPEARE)" >&2
  exit 2
fi
TINYSHAKESPEARE=$(realpath "$TINYSHAKESPEARE")
export TINYSHAKESPEARE
export OMP_NUM_THREADS=${THREADS:-1}
export HYDRA_FULL_ERROR=0
BIN=${ATTNLAB_BIN:-$(dirname "$(command -v python)")}
NICE=${NICE:-10}
LENGTHS="[16,32,48,64]"

task_args() {  # what a task sets beyond the experiment
  case $1 in
    shakespeare) echo "data=shakespeare" ;;
    recall) echo "data=recall data.seq_len=16 data.num_val=128" ;;
    passkey) echo "data=passkey data.passkey_digits=3 data.seq_len=16 data.num_val=128" ;;
    *) echo "error: unknown task $1 (shakespeare, recall, passkey)" >&2; exit 2 ;;
  esac
}

train() {  # one task's 80 trainings
  local args
  args=$(task_args "$1")
  # shellcheck disable=SC2086
  nice -n "$NICE" "$BIN/attnlab-train" experiment=attention_variants $args ${OVERRIDES:-} \
    hydra.sweep.dir="$RUNS/$1" > "$RUNS/train_$1.log" 2>&1
}

evaluate() {  # every checkpoint of one synthetic task at 1x-4x, one attnlab-eval call
  local ckpts
  ckpts=$(find "$RUNS/$1" -path '*/checkpoints/last.ckpt' | sort -V | paste -sd, -)
  nice -n "$NICE" "$BIN/attnlab-eval" -m ckpt_path="$ckpts" "eval.lengths=$LENGTHS" eval.examples=32 \
    "eval.rope_scalings=[]" split=val logger=none > "$RUNS/eval_$1.log" 2>&1
}

tasks() {  # train (and for the synthetic tasks evaluate) each task in turn, with its wall time
  for task in "$@"; do
    local start
    start=$(date +%s)
    train "$task"
    if [ "$task" != shakespeare ]; then evaluate "$task"; fi
    local what="train 80 runs"
    if [ "$task" != shakespeare ]; then what="$what and evaluate them"; fi
    echo "$task: $what: $(($(date +%s) - start)) s wall" >> "$OUT/wall_time.txt"
  done
}

report() {  # per task: the report against mha_rope, and the significance of the 1x-4x scores
  for task in shakespeare recall passkey; do
    [ -d "$RUNS/$task" ] || continue
    "$BIN/attnlab-report" "$RUNS/$task" --baseline mha_rope --out "$OUT/$task" > /dev/null
    if [ "$task" = shakespeare ]; then
      "$BIN/attnlab-report" "$RUNS/$task" --baseline mha_rope --budget flops --out "$OUT/$task/flops" > /dev/null
      "$BIN/attnlab-report" "$RUNS/$task" --baseline mha_rope --metric val/bpb --out "$OUT/$task/bpb" > /dev/null
    else
      "$BIN/python" "$HERE/lengths_significance.py" "$OUT/$task/runs.csv" --baseline mha_rope --out "$OUT/$task"
    fi
  done
  "$BIN/python" "$HERE/sizes.py" "$RUNS" --out "$OUT"
  "$BIN/python" "$HERE/tables.py" "$OUT"
}

mkdir -p "$RUNS" "$OUT"
case ${1:-all} in
  report) report ;;
  train) shift; for task in "$@"; do
      start=$(date +%s); train "$task"
      echo "$task: train 80 runs: $(($(date +%s) - start)) s wall" >> "$OUT/wall_time.txt"; done ;;
  eval) shift; for task in "$@"; do
      start=$(date +%s); evaluate "$task"
      echo "$task: evaluate 80 runs: $(($(date +%s) - start)) s wall" >> "$OUT/wall_time.txt"; done ;;
  all)
    start=$(date +%s)
    tasks shakespeare &     # two lanes side by side
    a=$!
    tasks recall passkey
    wait $a
    echo "all: both lanes: $(($(date +%s) - start)) s wall" >> "$OUT/wall_time.txt"
    report
    ;;
  *) tasks "$@" && report ;;
esac
