#!/usr/bin/env bash
# The μP study, from the repository root:
#   experiments/mup/run.sh [path/to/tinyshakespeare.txt]
# (1) the coordinate checks at lr 3e-3 and 1e-2 (about 20 s each), (2) the learning-rate transfer
# study (4 widths x 6 rates x 3 seeds x sp|mup, 60 steps each: about 15 minutes on a shared 2-core
# CPU), (3) the transfer study at 500 steps (about 17 minutes in two lanes), (4) the ablation of μP's
# pieces at width 128 (about 20 minutes in two lanes). Each writes into experiments/mup/results/.
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
# the transfer study past the bigram floor: 500 steps, widths 8 (below the base 16) to 128, a tied-readout
# μP arm, x2 grids; two lanes (one a seed, niced) merged into steps_500/ (about 17 minutes a lane)
S500=$OUT/steps_500
mkdir -p "$S500/lanes"
TRANSFER=(--data "$DATA" --steps 500 --widths 8 16 32 64 128 --arms sp mup mup-tied
  --sp-rates 10 9 8 7 6 5 4 --mup-rates 8 7 6 5 4)
for seed in 0 1; do
  nice -n 19 "$PY" "$HERE/lr_transfer.py" "${TRANSFER[@]}" --seeds $seed --out "$S500/lanes/seed$seed" \
    > "$S500/lanes/seed$seed.txt" &
done
wait
# the tied arm's optimum for one seed sat on the grid's lower edge at width 8: the next rates down
nice -n 19 "$PY" "$HERE/lr_transfer.py" "${TRANSFER[@]}" --seeds 0 1 --widths 8 --arms mup-tied --mup-rates 10 9 \
  --out "$S500/lanes/tied_width8_low_rates" > "$S500/lanes/tied_width8_low_rates.txt"
"$PY" "$HERE/lr_transfer.py" --merge "$S500"/lanes/*/ --out "$S500" | tee "$S500/lr_transfer.txt"
"$PY" "$HERE/compare.py" "$S500"
"$PY" "$HERE/tables.py"
# what costs μP against a tuned sp at width 128, 500 steps, seeds 0 and 1: each piece of μP replaced
# by sp's alone, and sp with each piece of μP alone (ablation.py's ARMS), a lane a seed; the arms whose
# optimum sat on the grid's edge at 2^-8 too; the output and attention multipliers tuned at the base
# width 16, and the best of them (attention x4) at 128; each merged into one table. (The committed
# lanes split the same runs by when each arm was added: seed 0's first five arms are lanes/seed0_first.)
A500=$OUT/ablation_500
B16=$A500/base_width_16
ABLATE=(--data "$DATA" --steps 500)
for seed in 0 1; do
  nice -n 19 "$PY" "$HERE/ablation.py" "${ABLATE[@]}" --seeds $seed --out "$A500/lanes/seed$seed" &
done
wait
( nice -n 19 "$PY" "$HERE/ablation.py" "${ABLATE[@]}" --seeds 0 1 --arms "mup, sp attn scale" "mup, hidden init sp" \
    --rates 8 --out "$A500/lanes/edges_rate_2-8"
  nice -n 19 "$PY" "$HERE/ablation.py" "${ABLATE[@]}" --seeds 0 1 --arms "sp + mup's hidden rate" --rates 7 6 5 4 \
    --out "$A500/lanes/converse_hidden_rate"
  nice -n 19 "$PY" "$HERE/ablation.py" "${ABLATE[@]}" --seeds 0 1 --arms "sp + mup's readout" "sp + mup's logits" \
    --rates 11 --out "$A500/lanes/converse_2-11" ) &
( nice -n 19 "$PY" "$HERE/ablation.py" "${ABLATE[@]}" --width 16 --seeds 0 1 --arms sp --rates 10 9 8 7 6 5 \
    --out "$B16/lanes/sp"
  nice -n 19 "$PY" "$HERE/ablation.py" "${ABLATE[@]}" --width 16 --seeds 0 1 --arms mup \
    --output-multipliers 0.25 0.5 2 4 --attention-multipliers 0.25 0.5 2 4 --out "$B16/lanes/mup" ) &
wait
nice -n 19 "$PY" "$HERE/ablation.py" "${ABLATE[@]}" --width 16 --seeds 0 1 --arms --attention-multipliers 4 \
  --rates 8 --out "$B16/lanes/mup_attention_x4_rate_2-8" &
nice -n 19 "$PY" "$HERE/ablation.py" "${ABLATE[@]}" --seeds 0 1 --arms --attention-multipliers 4 --rates 8 7 6 \
  --out "$A500/lanes/attention_x4" &
wait
# μP with its pieces replaced by sp's cumulatively, the costliest (to sp, above) first, until it is sp
for seed in 0 1; do
  nice -n 19 "$PY" "$HERE/ablation.py" "${ABLATE[@]}" --seeds $seed --arms \
    --cumulative logits "attn scale" readout "hidden rate" "hidden init" --out "$A500/cumulative/lanes/seed$seed" &
done
wait
"$PY" "$HERE/ablation.py" --merge "$B16"/lanes/*/ablation.csv --out "$B16"
"$PY" "$HERE/ablation.py" --merge "$A500"/lanes/*/ablation.csv "$A500"/cumulative/lanes/*/ablation.csv --out "$A500"
