#!/usr/bin/env bash
# AdamW vs Muon on nanoGPT's baby Shakespeare recipe, from the repository root:
#   experiments/muon/run.sh [train|report|all|tuned]
#   train   experiment=nanogpt_baby with optim=adamw and with optim=muon, seeds $SEEDS (1 2 3), one run after
#           the other, alternating (adamw seed 1, muon seed 1, adamw seed 2, ...) so that a cut-short
#           study still compares the two on the same seeds. Muon: lr 0.02 with torch's "original"
#           adjust_lr (optim=muon's defaults), Newton-Schulz in float32 (optim.ns_dtype=auto on a
#           CPU); its AdamW part (embeddings, head, norms) keeps the recipe's lr 1e-3.
#   report  attnlab-report over the runs, then steps_to_loss.py: the steps each Muon run needs to
#           reach AdamW's final val loss, into experiments/muon/results/
#   tuned   AdamW at each rate of $RATES (default 2e-3 8e-3; 1e-3's and 4e-3's seed 1 are read from
#           earlier results) on seed 1, then at the rate with the lowest final val loss (of seed 1)
#           on seeds $SEEDS, and Muon on seeds $SEEDS, one run at a time (a run
#           already finished is kept), under $RUNS/tuned; then tuned_adamw.py: the sweep's table and
#           Muon's share of the tuned AdamW's wall time, into experiments/muon/results/adamw_tuned/
# The budget is the recipe's with trainer.max_steps=$STEPS (default 300; STEPS=2000 for the recipe's
# own; the cosine schedule follows max_steps): on this project's shared 2-core machine, at load ~15,
# a 2,000-step run took 22 min. Validation every 25 steps on the first 10% of the val split (the same
# text every time; the whole split cost 22 s a time at that load). Tiny Shakespeare is read from
# $TINYSHAKESPEARE (default ../shared/data/tinyshakespeare.txt). One torch thread per run.
set -euo pipefail
STAGE=${1:-all}
HERE=experiments/muon
RUNS=${RUNS:-$HERE/runs}                  # git-ignored: checkpoints and logs
STEPS=${STEPS:-300}
SEEDS=${SEEDS:-1 2 3}                      # SEEDS=2 runs one seed: queues in parallel, one thread each
RATES=${RATES:-2e-3 8e-3}                 # the tuned stage's new AdamW rates (1e-3, 4e-3: earlier results)
TINYSHAKESPEARE=${TINYSHAKESPEARE:-../shared/data/tinyshakespeare.txt}
if [ ! -f "$TINYSHAKESPEARE" ]; then   # else the runs would read an empty data.path
  echo "error: TINYSHAKESPEARE=$TINYSHAKESPEARE: no such file (Tiny Shakespeare, 1.1 MB; set TINYSHAKESPEARE)" >&2
  exit 2
fi
export TINYSHAKESPEARE=$(realpath "$TINYSHAKESPEARE")
export OMP_NUM_THREADS=${THREADS:-1}
export HYDRA_FULL_ERROR=0
BIN=${ATTNLAB_BIN:-$(dirname "$(command -v python)")}

train() {
  mkdir -p "$RUNS"
  for seed in $SEEDS; do
    for optim in adamw muon; do
      "$BIN/attnlab-train" experiment=nanogpt_baby optim="$optim" seed="$seed" trainer.max_steps="$STEPS" \
        trainer.val_every_n_steps=25 trainer.limit_val_batches=0.1 checkpoint.every_n_steps="$STEPS" \
        logger=none trainer.enable_progress_bar=false run_dir="$RUNS/$optim-seed$seed" \
        > "$RUNS/$optim-seed$seed.log" 2>&1
    done
  done
}

# one run: optim, its folder under $RUNS, seed, then any further overrides; a completed run is kept
one() {
  local optim=$1 dir=$2 seed=$3
  shift 3
  grep -qs '"status": "completed"' "$dir/summary.json" && return 0
  "$BIN/attnlab-train" experiment=nanogpt_baby optim="$optim" "$@" seed="$seed" trainer.max_steps="$STEPS" \
    trainer.val_every_n_steps=25 trainer.limit_val_batches=0.1 checkpoint.every_n_steps="$STEPS" \
    logger=none trainer.enable_progress_bar=false run_dir="$dir" > "$dir.log" 2>&1
}

tuned() {
  local R=$RUNS/tuned lr seed
  mkdir -p "$R"
  for lr in $RATES; do one adamw "$R/adamw-lr$lr-seed1" 1 optim.lr="$lr"; done
  lr=$("$BIN/python" "$HERE/tuned_adamw.py" "$R" --tuned-rate)
  for seed in $SEEDS; do
    one adamw "$R/adamw-lr$lr-seed$seed" "$seed" optim.lr="$lr"
    one muon "$R/muon-seed$seed" "$seed"
  done
  "$BIN/python" "$HERE/tuned_adamw.py" "$R" --out "$HERE/results/adamw_tuned"
}

report() {
  "$BIN/attnlab-report" "$RUNS"/adamw-seed*/ "$RUNS"/muon-seed*/ --out "$HERE/results"
  "$BIN/python" "$HERE/steps_to_loss.py" "$RUNS" --out "$HERE/results"
}

case $STAGE in
  train) train ;;
  report) report ;;
  all) train && report ;;
  tuned) tuned ;;
  *) echo "usage: $0 [train|report|all|tuned]" >&2; exit 2 ;;
esac
