#!/usr/bin/env bash
# The μP study, from the repository root:
#   experiments/mup/run.sh [path/to/tinyshakespeare.txt]
# (1) the coordinate checks at lr 3e-3 and 1e-2 (about 20 s each), (2) the learning-rate transfer
# study (4 widths x 6 rates x 3 seeds x sp|mup, 60 steps each: about 15 minutes on a shared 2-core
# CPU). Each writes into experiments/mup/results/, with what it printed beside it.
# One torch thread: the machine is shared.
set -euo pipefail
HERE=experiments/mup
OUT=$HERE/results
DATA=${1:-/work/shared/data/tinyshakespeare.txt}
export OMP_NUM_THREADS=${THREADS:-1}
PY=${PYTHON:-$(command -v python)}   # the environment attnlab is installed in
mkdir -p "$OUT/lr_1e-2"
"$PY" "$HERE/coord_check.py" | tee "$OUT/coord_check.txt"
"$PY" "$HERE/coord_check.py" --lr 1e-2 --out "$OUT/lr_1e-2" | tee "$OUT/lr_1e-2/coord_check.txt"
"$PY" "$HERE/lr_transfer.py" --data "$DATA" | tee "$OUT/lr_transfer.txt"
# the figures the README derives: the bigram floor, μP against sp with the report's significance,
# and the README's tables written from the results
"$PY" "$HERE/bigram.py" --data "$DATA" > "$OUT/bigram.json"
"$PY" "$HERE/compare.py"
"$PY" "$HERE/tables.py"
# what costs μP against a tuned sp at width 128: one piece of μP replaced by sp's at a time, 500 steps
"$PY" "$HERE/ablation.py" --data "$DATA" --steps 500 --seeds 0
