#!/usr/bin/env bash
# Packed documents with the document mask vs packed without it vs one document per padded row, from the
# repository root:  experiments/packing/run.sh
# Corpus: the default one as separate documents (the 79 topics of the Python docs, pydoc_data.topics);
# the last 10% of the topics are the validation documents of every arm. Per seed (SEEDS, default
# "0 1"), three trainings of the same tiny GPT (same seed, steps, batch and window), one after
# another, one thread each; then each last
# checkpoint scored the same way on the same validation documents (attnlab-eval data.packing=padded:
# every document alone, from its first token, in pieces of seq_len); then summarize.py writes the table
# (results/table.md, results/results.json) and the plot (results/val_loss.png).
set -euo pipefail
HERE=experiments/packing
RUNS=${RUNS:-$HERE/runs}                  # git-ignored: checkpoints and logs
STEPS=${STEPS:-600}
SEEDS=${SEEDS:-0 1}
export OMP_NUM_THREADS=${THREADS:-1}      # one thread per run: the machine's cores are shared
BIN=${ATTNLAB_BIN:-$(dirname "$(command -v python)")}
COMMON=(model=gpt-tiny data.seq_len=256 data.batch_size=8 data.val_fraction=0.1 data.test_fraction=0
  optim.lr=3e-3 optim.warmup_steps=50 trainer.max_steps="$STEPS" trainer.val_every_n_steps="$STEPS"
  test_after_fit=false logger=none trainer.enable_progress_bar=false)

train() {  # seed, arm, then the arm's data overrides
  local seed=$1 dir=$RUNS/seed$1/$2
  shift 2
  rm -rf "$dir"
  mkdir -p "$(dirname "$dir")"
  "$BIN/attnlab-train" "${COMMON[@]}" seed="$seed" "$@" run_dir="$dir" > "$dir.log" 2>&1
}

score() {  # every document alone: the same documents and the same scored tokens for every arm
  local dir=$RUNS/seed$1/$2
  "$BIN/attnlab-eval" ckpt_path="$dir/checkpoints/last.ckpt" split=val data.packing=padded \
    data.document_mask=true logger=none trainer.enable_progress_bar=false \
    hydra.run.dir="$dir/eval/alone" >> "$dir.log" 2>&1
}

mkdir -p "$RUNS" "$HERE/results"
for seed in $SEEDS; do
  train "$seed" masked data.packing=documents
  train "$seed" unmasked data.packing=documents data.document_mask=false
  train "$seed" padded data.packing=padded
  for arm in masked unmasked padded; do score "$seed" $arm; done
done
"$BIN/python" "$HERE/summarize.py" "$RUNS" "$HERE/results"
"$BIN/python" -m benchmarks.packing_step 40 | tee "$HERE/results/throughput.json"   # side by side, one process
"$BIN/python" "$HERE/compare.py"                                    # the arms' paired differences
"$BIN/python" "$HERE/corpus.py" > "$HERE/results/corpus.json"       # the corpus's windows
