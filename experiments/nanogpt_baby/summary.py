"""Both programs' baby runs side by side, seed by seed, with the mean and spread over seeds:

    python experiments/nanogpt_baby/summary.py > experiments/nanogpt_baby/results/summary.md

reads what run.sh saved in results/: attnlab's runs (``runs.csv``, by attnlab-report) and nanoGPT's
(``nanogpt_seed<seed>.json``, by ``benchmarks.nanogpt.val_loss``). The same seed number does not give
the two programs the same initial weights or batches (each draws them its own way), so the seeds are
three independent runs of each program, compared by their means.
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
LAST_ITER = "2000"  # nanoGPT's last evaluation of the baby run


def attnlab_runs() -> dict[int, dict[str, float]]:
    """seed -> attnlab's whole-split val loss at the end and its training throughput."""
    with (RESULTS / "runs.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {
        int(r["seed"]): {"val_loss": float(r["val/loss final"]), "tokens_per_s": float(r["tokens_per_s"])}
        for r in rows
    }


def nanogpt_runs() -> dict[int, dict[str, float]]:
    """seed -> nanoGPT's whole-split val loss, its own 20-batch estimate and median iteration time."""
    runs = {}
    for path in sorted(RESULTS.glob("nanogpt_seed*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        runs[int(path.stem.removeprefix("nanogpt_seed"))] = {
            "val_loss": record["val_loss"],
            "estimate": record["estimate_loss"][LAST_ITER],
            "iteration_ms": record["median_iteration_ms"],
        }
    return runs


def mean_std(values: list[float]) -> str:
    """Mean ± sample standard deviation, to 4 decimals."""
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def main() -> None:
    ours, theirs = attnlab_runs(), nanogpt_runs()
    print(
        "| seed | attnlab val loss (whole split) | nanoGPT val loss (whole split) | nanoGPT estimate_loss "
        "(20 batches) | attnlab tokens/s | nanoGPT median iteration (ms) |"
    )
    print("|---|---|---|---|---|---|")
    for seed in sorted(ours.keys() | theirs.keys()):
        a, n = ours.get(seed, {}), theirs.get(seed, {})
        cells = [
            (a.get("val_loss"), ".4f"),
            (n.get("val_loss"), ".4f"),
            (n.get("estimate"), ".4f"),
            (a.get("tokens_per_s"), ",.0f"),
            (n.get("iteration_ms"), ".1f"),
        ]
        print(f"| {seed} | " + " | ".join("" if c is None else format(c, spec) for c, spec in cells) + " |")
    a_loss = [r["val_loss"] for r in ours.values()]
    n_loss = [r["val_loss"] for r in theirs.values()]
    n_est = [r["estimate"] for r in theirs.values()]
    print(f"| mean ± std | {mean_std(a_loss)} | {mean_std(n_loss)} | {mean_std(n_est)} | | |")
    print()
    print(
        f"attnlab minus nanoGPT, mean whole-split val loss: {statistics.mean(a_loss) - statistics.mean(n_loss):+.4f}"
    )
    print(
        f"spread (max - min) over seeds: attnlab {max(a_loss) - min(a_loss):.4f}, nanoGPT {max(n_loss) - min(n_loss):.4f}"
    )
    gaps = [theirs[s]["estimate"] - theirs[s]["val_loss"] for s in sorted(theirs)]
    print("nanoGPT's estimate minus its whole-split loss, by seed: " + ", ".join(f"{g:+.4f}" for g in gaps))


if __name__ == "__main__":
    main()
