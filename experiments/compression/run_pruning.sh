#!/usr/bin/env bash
# The pruning curve (Michel et al. 2019, Fig. 2), from the repository root:
#   experiments/compression/run_pruning.sh
# Trains the GPT char model (attnlab-train, what `make train` runs: 300 steps) and the ViT digits
# model (experiment=vit_digits, 1000 steps), unless their checkpoints exist; then, for each, prunes
# 0 to 75% of the attention heads with attnlab-compress method=prune_heads, without and with
# fine-tuning, scores each pruned checkpoint on the run's test split (pruning_curve.py), and draws
# results/pruning.png and results/pruning_table.md (plot_pruning.py).
set -euo pipefail
HERE=experiments/compression
RUNS=${RUNS:-$HERE/runs}                  # git-ignored: checkpoints and logs
OUT=$HERE/results
export OMP_NUM_THREADS=${THREADS:-1}      # one thread per process: the cores are shared
BIN=${ATTNLAB_BIN:-$(dirname "$(command -v python)")}
GPT_FINETUNE=${GPT_FINETUNE:-30}          # fine-tuning steps after pruning (a tenth of its training)
VIT_FINETUNE=${VIT_FINETUNE:-100}
mkdir -p "$RUNS" "$OUT"

train() {  # name, overrides...
  local name=$1; shift
  if [ ! -f "$RUNS/$name/checkpoints/last.ckpt" ]; then
    "$BIN/attnlab-train" "$@" run_dir="$RUNS/$name" logger=none trainer.enable_progress_bar=false
  fi
}
train gpt_char
train vit_digits experiment=vit_digits

"$BIN/python" $HERE/pruning_curve.py "$RUNS/gpt_char/checkpoints/last.ckpt" $OUT/pruning_gpt_char.csv --finetune-steps "$GPT_FINETUNE"
"$BIN/python" $HERE/pruning_curve.py "$RUNS/vit_digits/checkpoints/last.ckpt" $OUT/pruning_vit_digits.csv --finetune-steps "$VIT_FINETUNE"
"$BIN/python" $HERE/plot_pruning.py $OUT
