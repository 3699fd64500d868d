#!/usr/bin/env bash
# The scaling study, from the repository root:
#   experiments/scaling/run.sh [path/to/tinyshakespeare.txt]
# experiment=scaling as ordinary Hydra multiruns, char-level tiny Shakespeare: 4 compute budgets
# (5e10 to 4e11 training FLOPs, 8x), GPTs of 2 layers and 2 heads whose width d_model is swept
# (μP, base width 16, so that one learning rate fits every width). Each budget's sizes bracket its
# optimum, as in Chinchilla's IsoFLOP design: d_model 16-64 at every budget, and 8, 12 where the
# first runs put the optimum at or below d_model 16 (8 and 12 at 5e10 and 1e11, 12 at 2e11).
# Two lanes side by side, one torch thread each, niced (the machine is shared), of about equal
# compute; then attnlab-report over every run writes the IsoFLOP profiles, the fitted law and the
# optimal allocation into experiments/scaling/results/. Run directories go to runs/ (git-ignored).
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
  optim.lr=0.015625 optim.warmup_steps=10
  trainer.limit_val_batches=40 trainer.val_every_n_steps=1000
)
sweep() {  # sweep <name> <budgets> <widths>: one Hydra multirun into runs/<name>
  nice -n 5 "$BIN/attnlab-train" "${SHAPE[@]}" trainer.compute_budget="$2" model.d_model="$3" \
    hydra.sweep.dir="$RUNS/$1" >"$RUNS/$1.log" 2>&1
}
lane_a() { sweep large 4e11 16,24,32,48,64 && sweep left_5e10 5e10 8,12 && sweep left_2e11 2e11 12; }
lane_b() { sweep small 5e10,1e11,2e11 16,24,32,48,64 && sweep left_1e11 1e11 8,12; }
rm -rf "$RUNS" && mkdir -p "$RUNS" "$OUT"
lane_a &
a=$!
lane_b &
b=$!
wait "$a"
wait "$b"
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
"$BIN/python" "$HERE/refit.py"                        # the law without the runs under 200 steps
