"""The scaling law refitted without the optimisation-starved runs, from ``results/runs.csv``.

usage: python experiments/scaling/refit.py [min_steps]     # default 200: drops the 66-, 110- and 132-step runs

Both approaches are fitted, with the report's 100-resample bootstrap (``attnlab.report.scaling``,
seed 0), to every run and to the runs of at least ``min_steps`` steps; the table goes to
``results/refit.md``. It also counts how many of the full fit's bootstrap resamples leave out all the
starved runs, which is why the bootstrap over all runs cannot show what they do to the fit.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from attnlab.report.scaling import Runs, fit_scaling

RESULTS = Path(__file__).resolve().parent / "results"
RESAMPLES = 100  # as attnlab-report's SCALING_RESAMPLES
NAMES = {
    "E": "E",
    "A": "A",
    "B": "B",
    "alpha": "α",
    "beta": "β",
    "a": "a (law)",
    "b": "b (law)",
    "a2": "a (IsoFLOP)",
    "b2": "b (IsoFLOP)",
}


def runs_of(frame: pd.DataFrame) -> Runs:
    n, d, per_token, loss = (
        frame[k].to_numpy(dtype=float)
        for k in ("n_params", "train_tokens", "flops_per_token", "val/loss final")
    )
    return Runs(n, d, d * per_token, loss)


def main(min_steps: int) -> None:
    frame = pd.read_csv(RESULTS / "runs.csv")
    frame = frame[frame["status"] == "completed"]
    kept = frame[frame["final_step"] >= min_steps]
    dropped = frame[frame["final_step"] < min_steps]
    fits = {"all": fit_scaling(runs_of(frame), RESAMPLES), "kept": fit_scaling(runs_of(kept), RESAMPLES)}
    rng = np.random.default_rng(0)  # the bootstrap's own draws (bootstrap_intervals, seed 0)
    starved = set(np.flatnonzero(frame["final_step"].to_numpy() < min_steps))
    none_drawn = sum(
        not starved & set(rng.integers(0, len(frame), len(frame)).tolist()) for _ in range(RESAMPLES)
    )
    left_out = ", ".join(
        f"d_model {r['model.d_model']} at {r['trainer.compute_budget']:.0e} ({r['final_step']} steps)"
        for _, r in dropped.iterrows()
    )
    lines = [
        f"# The law with and without the runs under {min_steps} steps",
        "",
        f"Left out: {left_out}.",
        f"Runs: {len(frame)} and {len(kept)}; 95% intervals from {RESAMPLES} bootstrap resamples (seed 0).",
        f"Resamples of all {len(frame)} runs that draw none of the {len(dropped)} left out: {none_drawn} of {RESAMPLES}.",
        "",
        f"| estimate | all runs | all runs: 95% interval | runs of {min_steps}+ steps | {min_steps}+ steps: 95% interval |",
        "|---|---|---|---|---|",
    ]
    for key, name in NAMES.items():
        cells = []
        for fit in fits.values():
            value = fit.estimates().get(key)
            low, high = fit.intervals.get(key, (float("nan"), float("nan")))
            cells += [f"{value:.4g}", f"[{low:.4g}, {high:.4g}]"]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    (RESULTS / "refit.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
