#!/usr/bin/env bash
# nanoGPT's baby CPU run in attnlab, from the repository root:  experiments/nanogpt_baby/run.sh
# Trains experiment=nanogpt_baby once per seed (2,000 steps; validation on the whole val split every
# 500 steps), then writes report.md, runs.csv and plots/ into experiments/nanogpt_baby/results/.
# Tiny Shakespeare is read from $TINYSHAKESPEARE (default ../shared/data/tinyshakespeare.txt). With
# NANOGPT_DIR set (a nanoGPT checkout), nanoGPT's own baby run follows for the same seeds, each scored
# the same way and saved with what its console printed in results/nanogpt_seed<seed>.json.
set -euo pipefail
HERE=experiments/nanogpt_baby
RUNS=${RUNS:-$HERE/runs}                  # git-ignored: checkpoints and logs
SEEDS=${SEEDS:-1337 1338 1339}            # 1337: both programs' default
TINYSHAKESPEARE=${TINYSHAKESPEARE:-../shared/data/tinyshakespeare.txt}
if [ ! -f "$TINYSHAKESPEARE" ]; then   # else the runs would read an empty data.path
  echo "error: TINYSHAKESPEARE=$TINYSHAKESPEARE: no such file (Tiny Shakespeare, 1.1 MB; set TINYSHAKESPEARE)" >&2
  exit 2
fi
export TINYSHAKESPEARE=$(realpath "$TINYSHAKESPEARE")
export OMP_NUM_THREADS=${THREADS:-1}      # see experiments/pos_extrapolation/run.sh: shared cores
BIN=${ATTNLAB_BIN:-$(dirname "$(command -v python)")}

for seed in $SEEDS; do
  [ -f "$RUNS/attnlab_seed$seed/checkpoints/last.ckpt" ] ||
    "$BIN/attnlab-train" experiment=nanogpt_baby seed="$seed" run_dir="$RUNS/attnlab_seed$seed" logger=none \
      trainer.enable_progress_bar=false > "$RUNS/attnlab_seed$seed.out" 2>&1
done
"$BIN/attnlab-report" "$RUNS"/attnlab_seed*/ --out "$HERE/results"

# nanoGPT itself, if NANOGPT_DIR names a checkout of https://github.com/karpathy/nanoGPT (outside this
# repository): its baby run on the same file for each seed, then its checkpoint scored like attnlab's
# runs, with its console's validation estimates and iteration times (kept whole in $RUNS).
if [ -n "${NANOGPT_DIR:-}" ]; then
  RUNS=$(realpath "$RUNS")
  cp "$TINYSHAKESPEARE" "$NANOGPT_DIR/data/shakespeare_char/input.txt"   # prepare.py downloads it otherwise
  (cd "$NANOGPT_DIR/data/shakespeare_char" && "$BIN/python" prepare.py)
  # train.py seeds torch with the constant 1337; train_seeded.py, beside it, takes --seed (default 1337)
  sed -e 's/^torch.manual_seed(1337 + seed_offset)/torch.manual_seed(seed + seed_offset)/' \
    -e 's/^config_keys = /seed = 1337\nconfig_keys = /' "$NANOGPT_DIR/train.py" > "$NANOGPT_DIR/train_seeded.py"
  for seed in $SEEDS; do
    (cd "$NANOGPT_DIR" && "$BIN/python" train_seeded.py config/train_shakespeare_char.py --device=cpu \
      --compile=False --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 \
      --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0 --seed="$seed" \
      --out_dir="out-baby-seed$seed" --always_save_checkpoint=True) > "$RUNS/nanogpt_seed$seed.log" 2>&1
    "$BIN/python" -m benchmarks.nanogpt.val_loss --out-dir "out-baby-seed$seed" --log "$RUNS/nanogpt_seed$seed.log" \
      > "$HERE/results/nanogpt_seed$seed.json"
  done
  "$BIN/python" "$HERE/summary.py" > "$HERE/results/summary.md"   # both programs by seed, mean ± std
fi
