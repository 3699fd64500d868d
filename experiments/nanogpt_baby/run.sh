#!/usr/bin/env bash
# nanoGPT's baby CPU run in attnlab, from the repository root:  experiments/nanogpt_baby/run.sh
# Trains experiment=nanogpt_baby (2,000 steps; validation on the whole val split every 500 steps),
# then writes report.md, runs.csv and plots/ into experiments/nanogpt_baby/results/.
# Tiny Shakespeare is read from $TINYSHAKESPEARE (default ../shared/data/tinyshakespeare.txt).
set -euo pipefail
HERE=experiments/nanogpt_baby
RUN=${RUN:-$HERE/runs/attnlab}            # git-ignored: checkpoints and logs
export TINYSHAKESPEARE=${TINYSHAKESPEARE:-$(realpath ../shared/data/tinyshakespeare.txt)}
export OMP_NUM_THREADS=${THREADS:-1}      # see experiments/pos_extrapolation/run.sh: shared cores
BIN=${ATTNLAB_BIN:-$(dirname "$(command -v python)")}

"$BIN/attnlab-train" experiment=nanogpt_baby run_dir="$RUN" logger=none trainer.enable_progress_bar=false
"$BIN/attnlab-report" "$RUN" --out "$HERE/results"
