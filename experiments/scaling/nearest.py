"""The two widths nearest each budget's IsoFLOP minimum in the first phase's runs, which the second
phase trains again at seeds 2 and 3: the lowest-loss width and the better of its two neighbours.

usage: python experiments/scaling/nearest.py experiments/scaling/runs   # one "<budget> <w1>,<w2>" a line

Read with attnlab-report's reader (``attnlab.report.sweep``); it stops on a budget with a run that did
not complete, since a missing run could be the minimum.
"""

from __future__ import annotations

import sys

import pandas as pd

from attnlab.report.sweep import read_sweep

BUDGET, WIDTH, LOSS = "trainer.compute_budget", "model.d_model", "val/loss final"
FIRST_SEED = 1337  # the first phase's seed, one run per width


def budget_name(budget: float) -> str:
    """``5e10`` for 5e10 FLOPs: the form run.sh's batch table is keyed by."""
    return f"{budget:.0e}".replace("e+", "e")


def nearest_widths(profile: pd.DataFrame) -> list[int]:
    """The lowest-loss width of one budget's runs and the better of its neighbours, by width."""
    profile = profile.sort_values(WIDTH).reset_index(drop=True)
    best = int(profile[LOSS].idxmin())
    neighbours = [i for i in (best - 1, best + 1) if 0 <= i < len(profile)]
    other = min(neighbours, key=lambda i: profile[LOSS].iloc[i])
    return sorted(int(profile[WIDTH].iloc[i]) for i in (best, other))


def main(runs_dir: str) -> None:
    sweep = read_sweep([runs_dir])
    frame = sweep.runs.join(sweep.configs[[BUDGET, WIDTH, "seed"]])
    for budget, profile in frame.groupby(BUDGET):
        if (profile["status"] != "completed").any():
            raise SystemExit(f"{runs_dir}: a run at budget {budget_name(budget)} did not complete")
        first = profile[profile["seed"] == FIRST_SEED]
        print(budget_name(budget), ",".join(str(w) for w in nearest_widths(first)))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.split("\n\n")[1])
    main(sys.argv[1])
