#!/usr/bin/env bash
# nanoGPT's baby CPU run in attnlab, from the repository root:  experiments/nanogpt_baby/run.sh
# Trains experiment=nanogpt_baby (2,000 steps; validation on the whole val split every 500 steps),
# then writes report.md, runs.csv and plots/ into experiments/nanogpt_baby/results/.
# Tiny Shakespeare is read from $TINYSHAKESPEARE (default ../shared/data/tinyshakespeare.txt). With
# NANOGPT_DIR set (a nanoGPT checkout), nanoGPT's own baby run follows, scored the same way.
set -euo pipefail
HERE=experiments/nanogpt_baby
RUN=${RUN:-$HERE/runs/attnlab}            # git-ignored: checkpoints and logs
TINYSHAKESPEARE=${TINYSHAKESPEARE:-../shared/data/tinyshakespeare.txt}
if [ ! -f "$TINYSHAKESPEARE" ]; then   # else the runs would read an empty data.path
  echo "error: TINYSHAKESPEARE=$TINYSHAKESPEARE: no such file (Tiny Shakespeare, 1.1 MB; set TINYSHAKESPEARE)" >&2
  exit 2
fi
export TINYSHAKESPEARE=$(realpath "$TINYSHAKESPEARE")
export OMP_NUM_THREADS=${THREADS:-1}      # see experiments/pos_extrapolation/run.sh: shared cores
BIN=${ATTNLAB_BIN:-$(dirname "$(command -v python)")}

"$BIN/attnlab-train" experiment=nanogpt_baby run_dir="$RUN" logger=none trainer.enable_progress_bar=false
"$BIN/attnlab-report" "$RUN" --out "$HERE/results"

# nanoGPT itself, if NANOGPT_DIR names a checkout of https://github.com/karpathy/nanoGPT (outside this
# repository): its baby run on the same file, then its checkpoint scored like attnlab's runs.
if [ -n "${NANOGPT_DIR:-}" ]; then
  cp "$TINYSHAKESPEARE" "$NANOGPT_DIR/data/shakespeare_char/input.txt"   # prepare.py downloads it otherwise
  (cd "$NANOGPT_DIR/data/shakespeare_char" && python prepare.py)
  (cd "$NANOGPT_DIR" && time python train.py config/train_shakespeare_char.py --device=cpu --compile=False \
    --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 \
    --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0)
  "$BIN/python" -m benchmarks.nanogpt.val_loss | tee "$HERE/results/nanogpt_val_loss.json"
fi
