"""Whether the study's borrowed learning rate (2^-6, tuned in the μP study at a batch of 8 with an
untied readout) is the best of its neighbours at this study's own batches, with a tied readout, and
below μP's base width.

usage: python experiments/scaling/rate_check.py [experiments/scaling/runs_ratecheck]

Reads the runs of ``run.sh``'s ratecheck phase (2^-7 and 2^-5, seeds 1337, 2 and 3, at each budget's
minimum width among the seed means and at d_model 8) and, for 2^-6, the study's own runs of the same
(budget, width) from ``results/runs.csv``. Writes ``results/rate_check.md``: per point, each rate's
final val loss over the seeds, the best rate, and the best minus 2^-6 paired by seed (95% bootstrap
interval and paired t-test, ``attnlab.report.significance.compare``); and the wall time of the runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from nearest import budget_name

from attnlab.report.significance import compare
from attnlab.report.sweep import read_sweep

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
STUDY_RATE = 2.0**-6
BUDGET, WIDTH, LR, SEED, LOSS = (
    "trainer.compute_budget",
    "model.d_model",
    "optim.lr",
    "seed",
    "val/loss final",
)


def check_runs(runs: Path) -> pd.DataFrame:
    """Every ratecheck run (budget, width, rate, seed, loss), stopping on a run that did not complete."""
    sweep = read_sweep([runs])
    frame = sweep.configs[[BUDGET, WIDTH, LR, SEED]].join(sweep.runs[["status", LOSS]])
    unfinished = frame[frame["status"] != "completed"]
    if not unfinished.empty:
        raise SystemExit(
            f"error: {len(unfinished)} ratecheck runs did not complete: {list(unfinished.index)}"
        )
    return frame.drop(columns="status")


def study_runs(points: set[tuple[float, int]]) -> pd.DataFrame:
    """The study's own runs at 2^-6 at those (budget, width) points, from results/runs.csv."""
    frame = pd.read_csv(RESULTS / "runs.csv")
    frame = frame[frame["row"] == "training"][[BUDGET, WIDTH, LR, SEED, LOSS]]
    keep = [(b, w) in points for b, w in zip(frame[BUDGET], frame[WIDTH])]
    return frame[keep]


def exponent(rate: float) -> str:
    return f"2^{round(float(np.log2(rate)))}"


def point_rows(frame: pd.DataFrame) -> list[str]:
    """One table row per (budget, width): each rate's mean ± sd, the best, best minus 2^-6."""
    rates = sorted(frame[LR].unique())
    rows = []
    for (budget, width), point in frame.groupby([BUDGET, WIDTH]):
        by_rate = {r: dict(zip(g[SEED], g[LOSS])) for r, g in point.groupby(LR)}
        means = {r: float(np.mean(list(v.values()))) for r, v in by_rate.items()}
        cells = [f"{means[r]:.4f} ± {np.std(list(by_rate[r].values()), ddof=1):.4f}" for r in rates]
        best = min(means, key=means.get)
        if best == STUDY_RATE:
            versus = "the study's rate"
        else:
            c = compare(by_rate[STUDY_RATE], by_rate[best])
            versus = f"{c.difference:+.4f} [{c.low:+.4f}, {c.high:+.4f}], p {c.p_value:.2g}"
        rows.append(
            f"| {budget_name(budget)} | {width} | " + " | ".join(cells) + f" | {exponent(best)} | {versus} |"
        )
    return rows


def wall_time(runs: Path) -> str:
    summaries = [json.loads(p.read_text()) for p in runs.glob("*/*/summary.json")]
    return (
        f"{len(summaries)} runs; the runs' own wall times add up to "
        f"{sum(s['wall_time_s'] for s in summaries):.0f} s (two lanes side by side, one torch thread each, niced)"
    )


def main(runs: Path) -> None:
    checked = check_runs(runs)
    points = set(zip(checked[BUDGET], checked[WIDTH]))
    frame = pd.concat([checked, study_runs(points)], ignore_index=True)
    rates = sorted(frame[LR].unique())
    lines = [
        "# The borrowed learning rate at the study's own batches (run.sh's ratecheck phase)",
        "",
        "Final val loss (mean ± sd over seeds 1337, 2 and 3) at each rate; 2^-6 is the study's rate (its",
        "own runs, results/runs.csv). best - 2^-6: paired by seed, 95% bootstrap interval, paired t-test.",
        "",
        "| budget C (FLOPs) | d_model | "
        + " | ".join(exponent(r) for r in rates)
        + " | best | best - 2^-6 |",
        "|---|---|" + "---|" * len(rates) + "---|---|",
        *point_rows(frame),
        "",
        f"Wall time: {wall_time(runs)}.",
    ]
    (RESULTS / "rate_check.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "runs_ratecheck")
