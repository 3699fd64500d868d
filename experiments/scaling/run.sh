#!/usr/bin/env bash
# The scaling study, from the repository root:
#   experiments/scaling/run.sh [path/to/tinyshakespeare.txt]
# experiment=scaling as ordinary Hydra multiruns, char-level tiny Shakespeare: 4 compute budgets
# (5e10 to 4e11 training FLOPs, 8x), GPTs of 2 layers and 2 heads whose width d_model is swept
# (μP, base width 16, so that one learning rate fits every width). Each budget's sizes bracket its
# optimum, as in Chinchilla's IsoFLOP design: d_model 16-64 at every budget, and 8, 12 where the
# optimum lies at or below d_model 16 (8 and 12 at 5e10 and 1e11, 12 at 2e11).
# Each budget has one batch size, doubling with the budget (2, 4, 8, 16 sequences of 64 characters),
# so that the widest model, d_model 64, gets 528 steps at every budget and no run fewer: the steps
# follow from the budget. Every run is scored on the whole validation split, whatever its batch.
# Phase 1: every width at seed 1337. Phase 2: each budget's two widths nearest its IsoFLOP minimum
# (nearest.py: the lowest-loss width and its better neighbour) at seeds 2 and 3. Phase 3: the other
# widths at seeds 2 and 3, so that every (budget, width) has three seeds; the minima's seeds come
# first, so that a sweep cut short still has them. PHASES="phase3 analyse" runs only those steps;
# PHASES=ratecheck (not in the default) checks the borrowed learning rate at the study's batches.
# Two lanes side by side, one torch thread each, niced (the machine is shared), of about equal
# compute; then attnlab-report over every run writes the IsoFLOP profiles, the fitted law and the
# optimal allocation into experiments/scaling/results/, and seeds.py the seed-bootstrap intervals.
# Run directories go to runs/ (git-ignored).
set -euo pipefail
HERE=experiments/scaling
RUNS=$HERE/runs
OUT=$HERE/results
export TINYSHAKESPEARE=${1:-/work/shared/data/tinyshakespeare.txt}
export OMP_NUM_THREADS=${THREADS:-1} WANDB_MODE=offline
BIN=${BIN:-$(dirname "$(command -v attnlab-train)")}   # the environment attnlab is installed in
SHAPE=(
  experiment=scaling model.n_layers=2 model.n_heads=2
  model.parametrization=mup model.mup_base_width=16
  optim.warmup_steps=10
  trainer.limit_val_batches=1.0 trainer.val_every_n_steps=2000
)
RATE=0.015625   # 2^-6, the μP study's best rate (60 steps, untied readout); ratecheck sweeps 2^-7 and 2^-5
declare -A BATCH=([5e10]=2 [1e11]=4 [2e11]=8 [4e11]=16)   # sequences a step, per budget
declare -A WIDTHS=([5e10]=8,12,16,24,32,48,64 [1e11]=8,12,16,24,32,48,64 [2e11]=12,16,24,32,48,64
                   [4e11]=16,24,32,48,64)
sweep() {  # sweep <name> <budget> <widths> [overrides]: one Hydra multirun into runs/<name>
  nice -n 19 "$BIN/attnlab-train" "${SHAPE[@]}" optim.lr="$RATE" trainer.compute_budget="$2" data.batch_size="${BATCH[$2]}" \
    model.d_model="$3" "${@:4}" hydra.sweep.dir="$RUNS/$1" >"$RUNS/$1.log" 2>&1
}
lanes() {  # lanes <phase> <overrides>: budgets 5e10 and 2e11 in one lane, 1e11 and 4e11 in the other
  local -n widths=$2
  (sweep "$1_5e10" 5e10 "${widths[5e10]}" "${@:3}" && sweep "$1_2e11" 2e11 "${widths[2e11]}" "${@:3}") &
  local a=$!
  (sweep "$1_1e11" 1e11 "${widths[1e11]}" "${@:3}" && sweep "$1_4e11" 4e11 "${widths[4e11]}" "${@:3}") &
  local b=$!
  wait "$a"
  wait "$b"
}
phase1() { rm -rf "$RUNS" && mkdir -p "$RUNS" "$OUT" && lanes phase1 WIDTHS seed=1337; }
read_nearest() {  # NEAREST and REST: per budget, the two widths nearest its minimum and the others
  declare -gA NEAREST=() REST=()
  while read -r budget widths; do NEAREST[$budget]=$widths; done < <("$BIN/python" "$HERE/nearest.py" "$RUNS")
  local budget width rest
  for budget in "${!WIDTHS[@]}"; do
    rest=()
    for width in ${WIDTHS[$budget]//,/ }; do [[ ",${NEAREST[$budget]}," == *",$width,"* ]] || rest+=("$width"); done
    REST[$budget]=$(IFS=,; echo "${rest[*]}")
  done
}
phase2() {
  read_nearest
  printf '%s %s\n' 5e10 "${NEAREST[5e10]}" 1e11 "${NEAREST[1e11]}" 2e11 "${NEAREST[2e11]}" 4e11 "${NEAREST[4e11]}" \
    | tee "$OUT/phase2.txt"
  lanes phase2 NEAREST seed=2,3
}
phase3() { read_nearest && lanes phase3 REST seed=2,3; }
ratecheck() {  # the study's rate against 2^-7 and 2^-5, three seeds, at each budget's minimum width among
  # the seed means (results/seeds.md: 16 at 5e10, 24 at the others) and at d_model 8, below the base
  # width; into runs_ratecheck/ (outside runs/, which the fits read), then rate_check.py
  local RUNS=$HERE/runs_ratecheck RATE=0.0078125,0.03125
  rm -rf "$RUNS" && mkdir -p "$RUNS"
  (sweep 5e10_d8 5e10 8 seed=1337,2,3 && sweep 2e11_d24 2e11 24 seed=1337,2,3) &
  local a=$!
  (sweep 5e10_d16 5e10 16 seed=1337,2,3 && sweep 1e11_d24 1e11 24 seed=1337,2,3 \
    && sweep 4e11_d24 4e11 24 seed=1337,2,3) &
  local b=$!
  wait "$a"
  wait "$b"
  "$BIN/python" "$HERE/rate_check.py" "$RUNS"
}
analyse() {
  "$BIN/python" - <<'EOF' | tee "$OUT/wall_time.txt"   # from the runs' own summary.json
import datetime as dt, json, pathlib
runs = [json.loads(p.read_text()) for p in pathlib.Path("experiments/scaling/runs").glob("*/*/summary.json")]
start = min(dt.datetime.fromisoformat(r["started"]) for r in runs)
end = max(dt.datetime.fromisoformat(r["ended"]) for r in runs)
print(f"runs: {len(runs)}; first run started {start:%H:%M:%S}, last ended {end:%H:%M:%S} (UTC, {end:%Y-%m-%d})")
print(f"sweep wall time: {(end - start).total_seconds():.0f} s, two lanes side by side, one torch thread each, niced")
print(f"sum of the runs' own wall times: {sum(r['wall_time_s'] for r in runs):.0f} s")
EOF
  "$BIN/attnlab-report" "$RUNS" --out "$OUT" | tee "$OUT/report.txt"
  "$BIN/python" "$HERE/derived.py" "$TINYSHAKESPEARE"   # the design table and derived figures
  "$BIN/python" "$HERE/seeds.py"                        # seed-bootstrap intervals: results/seeds.md
}
for step in ${PHASES:-phase1 phase2 phase3 analyse}; do "$step"; done
