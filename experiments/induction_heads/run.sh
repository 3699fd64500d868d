#!/usr/bin/env bash
# The whole study, from the repository root:  experiments/induction_heads/run.sh
#   the seeds of study.py, LANES at a time (one torch thread each, niced), then summarize.py and
#   derived.py: results/seed<N>.json (every figure of a seed), results/summary.md, results/plots/*.png
# SEEDS="0 1 2", LANES=2, OUT=... and extra study.py flags can be given: run.sh --n-heads 8 --eval-every 10
set -euo pipefail
HERE=experiments/induction_heads
OUT=${OUT:-$HERE/results}
SEEDS=${SEEDS:-0 1 2}
LANES=${LANES:-2}
PY=${PYTHON:-python}
export OMP_NUM_THREADS=1
mkdir -p "$OUT"
running=0
for seed in $SEEDS; do
  if (( running >= LANES )); then wait -n; running=$((running - 1)); fi
  nice -n 19 "$PY" "$HERE/study.py" --seed "$seed" --out "$OUT" "$@" > "$OUT/seed$seed.log" 2>&1 &
  running=$((running + 1))
done
wait
"$PY" "$HERE/summarize.py" "$OUT"
"$PY" "$HERE/derived.py" "$OUT"   # the ranges and tests the README quotes ($OUT/derived.md; results/: with learned_positions)
