#!/usr/bin/env bash
# The whole study, from the repository root:  experiments/induction_heads/run.sh
#   three seeds of study.py (one torch thread each, side by side), then summarize.py:
#   results/seed<N>.json (every figure of a seed), results/summary.md, results/plots/*.png
# SEEDS="0 1 2" and extra study.py flags (e.g. --steps 3000) can be given: run.sh --steps 3000
set -euo pipefail
HERE=experiments/induction_heads
OUT=${OUT:-$HERE/results}
SEEDS=${SEEDS:-0 1 2}
PY=${PYTHON:-python}
export OMP_NUM_THREADS=1
mkdir -p "$OUT"
pids=()
for seed in $SEEDS; do
  "$PY" "$HERE/study.py" --seed "$seed" --out "$OUT" "$@" > "$OUT/seed$seed.log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
"$PY" "$HERE/summarize.py" "$OUT"
"$PY" "$HERE/derived.py"   # the ranges and tests the README quotes (results/derived.md)
