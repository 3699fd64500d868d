#!/usr/bin/env bash
# The whole study, from the repository root:
#   experiments/length_generalisation/run.sh [all|TASK...|sweep TASK...|eval TASK...|report|longer TASK...]
#   for each task (default: copy passkey recall addition, two side by side):
#     train   18 runs (experiment=length_generalisation: 6 encodings x 3 seeds, 300 steps at length 16)
#     eval    every last checkpoint at 16, 32, 64, 128, 256 characters (1x-16x) on the first 32 val
#             examples, in one attnlab-eval call per task; the RoPE ones also with linear, NTK and YaRN
#             scaling at factor length / 16
#   sweep   train and evaluate, without the report (for sweeps run side by side; report them after)
#   report  attnlab-report over the runs: heatmaps, line plots and tables into $HERE/results/
#   longer  a probe of whether more training teaches a task at the trained length: the six encodings,
#           seed 1 only, 5x the steps (1,500), scored at 16 and 32, reported into $HERE/results/longer/
# TRAIN_MIN_LEN=n trains on every length from n to 16 (data.train_min_len: each training example its
# own length, so copy's offset varies, as Kazemnejad et al. train); RUNS and OUT keep such a run apart:
#   TRAIN_MIN_LEN=2 RUNS=$HERE/runs/range OUT=$HERE/results/train_lengths_2_16 run.sh copy
# STEPS, SEEDS, ENCODINGS, EXAMPLES and LENGTHS change the budget (300 steps), the seeds (1,2,3), the
# encodings (all six), the evaluation examples (32) and lengths ([16,32,64,128,256]); SWEEP names a
# second sweep of a task beside the first (runs/<task><SWEEP>), e.g. more seeds of some encodings:
#   ... STEPS=1500 SEEDS=4,5,6 ENCODINGS=learned,rope SWEEP=-seeds4-6 run.sh copy
# One thread per process: the 2 cores of the machine this was written on are shared with other work.
set -euo pipefail
HERE=experiments/length_generalisation
RUNS=${RUNS:-$HERE/runs}                  # git-ignored: checkpoints and logs
OUT=${OUT:-$HERE/results}
export OMP_NUM_THREADS=${THREADS:-1}
export HYDRA_FULL_ERROR=0
BIN=${ATTNLAB_BIN:-$(dirname "$(command -v python)")}
LENGTHS=${LENGTHS:-[16,32,64,128,256]}
EXAMPLES=${EXAMPLES:-32}
SWEEP=${SWEEP:-}

task_args() {  # what a task sets beyond the experiment (passkey: a 3-digit key, so 16 holds filler)
  case $1 in
    passkey) echo "data=passkey data.passkey_digits=3 data.batch_size=32" ;;
    *) echo "data=$1 data.batch_size=32" ;;
  esac
  if [ -n "${TRAIN_MIN_LEN:-}" ]; then echo "data.train_min_len=$TRAIN_MIN_LEN"; fi
  if [ -n "${STEPS:-}" ]; then  # validate and save once, at the end, as the 300-step default does
    echo "trainer.max_steps=$STEPS trainer.val_every_n_steps=$STEPS checkpoint.every_n_steps=$STEPS"
  fi
  # quoted, so that Hydra reads a list as the sweeper's value rather than as a sweep of hydra's config
  if [ -n "${SEEDS:-}" ]; then echo "hydra.sweeper.params.seed='$SEEDS'"; fi
  if [ -n "${ENCODINGS:-}" ]; then echo "hydra.sweeper.params.pos='$ENCODINGS'"; fi
}

runs_per_task() {  # the trainings of one sweep: encodings x seeds (18 by default)
  local seeds=${SEEDS:-1,2,3} encodings=${ENCODINGS:-none,sinusoidal,learned,rope,alibi,relative}
  echo $(($(tr ',' '\n' <<< "$seeds" | wc -l) * $(tr ',' '\n' <<< "$encodings" | wc -l)))
}

train() {  # one task's sweep: 18 trainings by default
  # shellcheck disable=SC2046
  "$BIN/attnlab-train" experiment=length_generalisation $(task_args "$1") \
    hydra.sweep.dir="$RUNS/$1$SWEEP" > "$RUNS/train_$1$SWEEP.log" 2>&1
}

evaluate() {  # every checkpoint of one task at every length, one attnlab-eval call
  local ckpts
  ckpts=$(find "$RUNS/$1$SWEEP" -path '*/checkpoints/last.ckpt' | sort | paste -sd, -)
  "$BIN/attnlab-eval" -m ckpt_path="$ckpts" "eval.lengths=$LENGTHS" eval.examples="$EXAMPLES" split=val \
    logger=none > "$RUNS/eval_$1$SWEEP.log" 2>&1
}

tasks() {  # train and evaluate each task in turn; each one's wall time into results/wall_time.txt
  for task in "$@"; do
    local start
    start=$(date +%s)
    train "$task"
    evaluate "$task"
    echo "$task$SWEEP: train $(runs_per_task) runs${STEPS:+ of $STEPS steps} and evaluate them:" \
      "$(($(date +%s) - start)) s wall" >> "$OUT/wall_time.txt"
  done
}

longer() {  # one task's six encodings at 1,500 steps (seed 1), scored at 1x and 2x
  local runs=$RUNS/longer start
  start=$(date +%s)
  mkdir -p "$runs"
  # shellcheck disable=SC2046
  "$BIN/attnlab-train" experiment=length_generalisation $(task_args "$1") hydra.sweeper.params.seed=1 \
    trainer.max_steps=1500 trainer.val_every_n_steps=1500 checkpoint.every_n_steps=1500 \
    hydra.sweep.dir="$runs/$1" > "$runs/train_$1.log" 2>&1
  "$BIN/attnlab-eval" -m ckpt_path="$(find "$runs/$1" -path '*/checkpoints/last.ckpt' | sort | paste -sd, -)" \
    "eval.lengths=[16,32]" eval.examples=32 split=val logger=none > "$runs/eval_$1.log" 2>&1
  mkdir -p "$HERE/results/longer"
  echo "$1: train 6 runs of 1,500 steps and evaluate them: $(($(date +%s) - start)) s wall" \
    >> "$HERE/results/longer/wall_time.txt"
}

report() {  # the four tasks' sweeps only: runs/longer is the probe's, reported into results/longer
  local sweeps
  mapfile -t sweeps < <(find "$RUNS" -mindepth 1 -maxdepth 1 -type d ! -name longer | sort)
  "$BIN/attnlab-report" "${sweeps[@]}" --out "$OUT"
  # the README's comparisons, paired by seed, from runs.csv (trained on a range: copy's own pairs)
  "$BIN/python" "$HERE/compare.py" "$OUT" ${TRAIN_MIN_LEN:+--pairs range}
  if [ "$OUT" = "$HERE/results" ]; then "$BIN/python" "$HERE/tables.py"; fi   # the README's tables
}

mkdir -p "$RUNS" "$OUT"
case ${1:-all} in
  report) report ;;
  sweep) shift; tasks "$@" ;;
  eval) shift; for task in "$@"; do evaluate "$task"; done ;;
  longer) shift; for task in "$@"; do longer "$task"; done
    "$BIN/attnlab-report" "$RUNS/longer" --out "$HERE/results/longer" ;;
  all)
    tasks copy recall &     # two streams side by side
    a=$!
    tasks passkey addition
    wait $a
    report
    ;;
  *) tasks "$@" && report ;;
esac
