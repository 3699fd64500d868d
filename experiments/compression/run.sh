#!/usr/bin/env bash
# Compression of the two default experiments, from the repository root:
#   experiments/compression/run.sh
# Teachers: the GPT of `make train` and the ViT of `experiment=vit_digits`. (b) Each teacher compressed
# to int8 by attnlab-compress: attnlab-eval on the test split of both checkpoints, and
# benchmarks/compress_int8.py for file size and CPU speed side by side. (a) A 2-layer student of each
# teacher, distilled vs trained from scratch for the same steps, compared by attnlab-report.
# What exists already (a run's last.ckpt, an evaluation, a benchmark's table) is not made again.
# One torch thread per process, one run at a time.
set -euo pipefail
HERE=experiments/compression
RUNS=${RUNS:-$HERE/runs}                  # git-ignored: checkpoints and logs
OUT=$HERE/results
export OMP_NUM_THREADS=${THREADS:-1}      # the machine is shared: see experiments/pos_extrapolation/run.sh
BIN=${ATTNLAB_BIN:-$(dirname "$(command -v python)")}
QUIET=(logger=none trainer.enable_progress_bar=false)
mkdir -p "$RUNS" "$OUT"

train() {  # train <name> <overrides...>: one run into $RUNS/<name>, the command's wall time in $RUNS/<name>.time
  local name=$1
  shift
  [ -f "$RUNS/$name/checkpoints/last.ckpt" ] && return
  /usr/bin/time -f "%e" -o "$RUNS/$name.time" "$BIN/attnlab-train" "$@" "run_dir=$RUNS/$name" "${QUIET[@]}" \
    > "$RUNS/$name.out" 2>&1
}

compress() {  # compress <model>: compress the teacher, evaluate both checkpoints, benchmark them side by side
  local fp32=$RUNS/$1_teacher/checkpoints/last.ckpt int8=$RUNS/$1_teacher/checkpoints/int8-last.ckpt
  [ -f "$int8" ] || "$BIN/attnlab-compress" ckpt_path="$fp32" method=int8
  for ckpt in "$fp32" "$int8"; do
    local dir=$RUNS/eval/$1_$(basename "$ckpt" .ckpt)
    [ -f "$dir/metrics.json" ] || "$BIN/attnlab-eval" ckpt_path="$ckpt" "${QUIET[@]}" hydra.run.dir="$dir" > /dev/null
  done
  [ -s "$OUT/int8_$1.md" ] || "$BIN/python" -m benchmarks.compress_int8 "$fp32" "$int8" --without-dynamic \
    > "$OUT/int8_$1.md"
}

train gpt_teacher                                              # = make train (4 layers, 300 steps)
train vit_teacher experiment=vit_digits                        # 4 layers, 1000 steps
compress gpt
compress vit

# (a) the same 2-layer student with and without its teacher: same seed, data order, optimiser, steps
# (the GPT's 300 of make train; 300 of the ViT's 1000, to keep the study within an hour on a shared CPU)
train vit_scratch experiment=vit_digits model.n_layers=2 trainer.max_steps=300
train vit_distilled experiment=vit_digits model.n_layers=2 trainer.max_steps=300 \
  task=distill task.teacher="$RUNS/vit_teacher/checkpoints/last.ckpt"
train gpt_scratch model.n_layers=2
train gpt_distilled model.n_layers=2 task=distill task.teacher="$RUNS/gpt_teacher/checkpoints/last.ckpt"
# (a) again for the ViT with three seeds of each student (the same teacher): the spread one seed
# cannot show (the GPT's students, 20-30 minutes each on the loaded machine, have one seed)
for seed in 1337 1338 1339; do
  train "vit_scratch_seed$seed" experiment=vit_digits model.n_layers=2 trainer.max_steps=300 seed="$seed"
  train "vit_distilled_seed$seed" experiment=vit_digits model.n_layers=2 trainer.max_steps=300 seed="$seed" \
    task=distill task.teacher="$RUNS/vit_teacher/checkpoints/last.ckpt"
done
"$BIN/attnlab-report" "$RUNS/vit_scratch" "$RUNS/vit_distilled" --out "$OUT/distill_vit"
"$BIN/attnlab-report" "$RUNS"/vit_scratch_seed*/ "$RUNS"/vit_distilled_seed*/ --out "$OUT/distill_vit_seeds"
"$BIN/attnlab-report" "$RUNS/gpt_scratch" "$RUNS/gpt_distilled" --out "$OUT/distill_gpt"
"$BIN/python" "$HERE/tables.py" "$RUNS" > "$OUT/tables.md"
"$BIN/python" "$HERE/derived.py" "$OUT" > "$OUT/derived.md"
