#!/usr/bin/env bash
# The whole study, from the repository root:  experiments/pos_extrapolation/run.sh [train|eval|report|all]
#   train   the 18 trainings (experiment=pos_extrapolation: 6 encodings x 3 seeds, 1,500 steps at length 64)
#   eval    every last checkpoint at 64, 128, 256, 512, 1024 tokens on the first quarter of the val
#           split; the RoPE ones again at each longer length L with linear, NTK (dynamic) and YaRN
#           scaling, factor L / 64
#           (attnlab-eval multiruns, two side by side)
#   report  attnlab-report over the runs: report.md, runs.csv and plots/ into $HERE/results/, and the
#           README's tables (tables.py: mean ± std per length, each seed's difference from 64) in tables.md
# Tiny Shakespeare is read from $TINYSHAKESPEARE (default ../shared/data/tinyshakespeare.txt).
#
# The 2 cores of the machine this was written on are shared with other developers' (niced) test runs;
# under that load torch's 2-thread kernels ran 5-10x slower than 1 thread, so the trainings run as two
# multiruns side by side (encodings split in halves), one thread each (THREADS=<n> to change that).
set -euo pipefail
STAGE=${1:-all}
HERE=experiments/pos_extrapolation
RUNS=${RUNS:-$HERE/runs}                  # git-ignored: checkpoints and logs
EVAL_FRACTION=${EVAL_FRACTION:-0.25}      # of the val split's batches, the same text at every length
TINYSHAKESPEARE=${TINYSHAKESPEARE:-../shared/data/tinyshakespeare.txt}
if [ ! -f "$TINYSHAKESPEARE" ]; then   # else the runs would read an empty data.path
  echo "error: TINYSHAKESPEARE=$TINYSHAKESPEARE: no such file (Tiny Shakespeare, 1.1 MB; set TINYSHAKESPEARE)" >&2
  exit 2
fi
export TINYSHAKESPEARE=$(realpath "$TINYSHAKESPEARE")
export OMP_NUM_THREADS=${THREADS:-1}
export HYDRA_FULL_ERROR=0
BIN=${ATTNLAB_BIN:-$(dirname "$(command -v python)")}
LENGTHS=64,128,256,512,1024

train() {
  "$BIN/attnlab-train" experiment=pos_extrapolation pos=none,sinusoidal,learned \
    hydra.sweep.dir="$RUNS/a" trainer.enable_progress_bar=false "$@" > "$RUNS/train_a.log" 2>&1 &
  local a=$!
  "$BIN/attnlab-train" experiment=pos_extrapolation pos=rope,alibi,relative \
    hydra.sweep.dir="$RUNS/b" trainer.enable_progress_bar=false "$@" > "$RUNS/train_b.log" 2>&1 &
  wait $a
  wait $!
}

checkpoints() {  # comma-separated last checkpoints of the runs trained with pos=$1 (any: all runs)
  find "$RUNS" -path '*/checkpoints/last.ckpt' | sort | while read -r ckpt; do
    run=$(dirname "$(dirname "$ckpt")")
    if [ "$1" = any ] || grep -qx -- "- pos=$1" "$run/.hydra/overrides.yaml"; then
      echo "$ckpt"
    fi
  done | paste -sd, -
}

evaluate() {  # two processes side by side, like the trainings
  base_eval "$(checkpoints any | cut -d, -f1-9)" > "$RUNS/eval_a.log" 2>&1 &
  local a=$!
  { base_eval "$(checkpoints any | cut -d, -f10-)" && rope_eval; } > "$RUNS/eval_b.log" 2>&1 &
  wait $a
  wait $!
}

base_eval() {  # every checkpoint in $1 at every length
  "$BIN/attnlab-eval" -m ckpt_path="$1" data.seq_len=$LENGTHS split=val limit_batches="$EVAL_FRACTION" \
    logger=none trainer.enable_progress_bar=false
}

rope_eval() {
  # RoPE stretched to each longer length L with the factor L / 64 (the trained length; the models' own
  # max_seq_len is 1024, for the learned table to reach 1024, so rope_original_max_len says 64).
  local length
  for length in ${LENGTHS//,/ }; do
    [ "$length" -gt 64 ] || continue   # at 64 the factor is 1: plain RoPE, scored by base_eval
    "$BIN/attnlab-eval" -m ckpt_path="$(checkpoints rope)" data.seq_len="$length" split=val \
      limit_batches="$EVAL_FRACTION" model.pos.rope_scaling=linear,ntk,yarn \
      model.pos.rope_factor=$((length / 64)) model.pos.rope_original_max_len=64 logger=none \
      trainer.enable_progress_bar=false
  done
}

report() {
  "$BIN/attnlab-report" "$RUNS" --out "$HERE/results"
  "$BIN/python" "$HERE/tables.py" "$HERE/results/runs.csv" > "$HERE/results/tables.md"   # the README's tables
}

mkdir -p "$RUNS"
case $STAGE in
  train) shift || true; train "$@" ;;
  eval) evaluate ;;
  report) report ;;
  all) train; evaluate; report ;;
  *) echo "usage: $0 [train|eval|report|all]" >&2; exit 2 ;;
esac
