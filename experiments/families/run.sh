#!/usr/bin/env bash
# The four families at one budget, from the repository root:  experiments/families/run.sh
# One multirun (experiment=families: model=gpt,bert,seq2seq,vit on their default tasks, 400 steps
# each) over the seeds, then attnlab-report, whose report.md, runs.csv and plots/ land in
# experiments/families/results/ (the test loss of every family in results/test_loss/), and the
# reference points (input-blind baselines of all four families' data) in results/references.json.
# FAMILIES and SEEDS choose a part (FAMILIES=vit SEEDS=1337,1338 OUT=...: a cheaper look).
set -euo pipefail
HERE=experiments/families
RUNS=${RUNS:-$HERE/runs}                  # git-ignored: checkpoints and logs
OUT=${OUT:-$HERE/results}
FAMILIES=${FAMILIES:-gpt,bert,seq2seq,vit}
SEEDS=${SEEDS:-1337,1338,1339}
export OMP_NUM_THREADS=${THREADS:-1}      # see experiments/pos_extrapolation/run.sh: shared cores
BIN=${ATTNLAB_BIN:-$(dirname "$(command -v python)")}

"$BIN/attnlab-train" experiment=families model="$FAMILIES" seed="$SEEDS" hydra.sweep.dir="$RUNS" logger=none \
  trainer.enable_progress_bar=false
"$BIN/attnlab-report" "$RUNS" --out "$OUT"
"$BIN/attnlab-report" "$RUNS" --out "$OUT/test_loss" --metric test/loss
if [ "$FAMILIES" = gpt,bert,seq2seq,vit ]; then   # a part (FAMILIES=...) leaves the references as they are
  "$BIN/python" "$HERE/references.py" ${SEEDS//,/ } > "$OUT/references.json"
fi
