#!/usr/bin/env bash
# The four families at one budget, from the repository root:  experiments/families/run.sh
# One multirun (experiment=families: model=gpt,bert,seq2seq,vit on their default tasks, 400 steps
# each), then attnlab-report, whose report.md, runs.csv and plots/ land in experiments/families/results/.
set -euo pipefail
HERE=experiments/families
RUNS=${RUNS:-$HERE/runs}                  # git-ignored: checkpoints and logs
export OMP_NUM_THREADS=${THREADS:-1}      # see experiments/pos_extrapolation/run.sh: shared cores
BIN=${ATTNLAB_BIN:-$(dirname "$(command -v python)")}

"$BIN/attnlab-train" experiment=families hydra.sweep.dir="$RUNS" logger=none trainer.enable_progress_bar=false
"$BIN/attnlab-report" "$RUNS" --out "$HERE/results"
