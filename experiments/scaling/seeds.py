"""The scaling fits over seeds, from ``results/runs.csv``: how far seeds move the IsoFLOP minima and
the law, with intervals from a seed bootstrap rather than attnlab-report's run bootstrap.

usage: python experiments/scaling/seeds.py     # writes results/seeds.md

Each (budget, width) is one point, the mean of its seeds' final losses. A bootstrap draw takes, at each
point with several seeds (every point, after run.sh's three phases), one of its seeds at random, and
refits both approaches with ``attnlab.report.scaling``'s functions: each budget's IsoFLOP parabola and
its minimum N_opt, N_opt ∝ C^a and D_opt ∝ C^b through the minima (approach 2), and the law
L = E + A/N^α + B/D^β (approach 3). The 2.5 and 97.5 percentiles over the draws are the 95% intervals.
A draw is one seed per point, so an interval is that of a one-seed sweep (what a single seed could
have given), wider than the spread of the three seeds' mean that the point estimates are fitted to.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from attnlab.report.scaling import (
    BOOTSTRAP_STARTS,
    Law,
    Runs,
    budget_groups,
    fit_law,
    grid_starts,
    isoflop_profiles,
    law_start,
    optimal_allocation,
)

RESULTS = Path(__file__).resolve().parent / "results"
DRAWS = 500
BUDGET, WIDTH, LOSS = "trainer.compute_budget", "model.d_model", "val/loss final"
NAMES = {"a2": "a (IsoFLOP)", "b2": "b (IsoFLOP)", "E": "E", "A": "A", "B": "B", "alpha": "α",
         "beta": "β", "a": "a (law)", "b": "b (law)"}  # fmt: skip


def completed_runs() -> pd.DataFrame:
    """The completed runs of ``results/runs.csv``; stops if there are none or any run failed."""
    frame = pd.read_csv(RESULTS / "runs.csv")
    if frame.empty or (frame["status"] != "completed").any():
        raise SystemExit(f"{RESULTS / 'runs.csv'}: every run must have completed (statuses: "
                         f"{sorted(frame['status'].unique())})")  # fmt: skip
    return frame


def points(frame: pd.DataFrame, losses: pd.Series) -> Runs:
    """One point per (budget, width): its N, D, C and ``losses`` (one value per point)."""
    first = frame.groupby([BUDGET, WIDTH]).first()
    n, d = first["n_params"].to_numpy(float), first["train_tokens"].to_numpy(float)
    return Runs(n, d, d * first["flops_per_token"].to_numpy(float), losses.loc[first.index].to_numpy(float))


def estimates(runs: Runs, law: Law) -> dict[str, float]:
    """Approach 2 on ``runs`` (each budget's ``N_opt at <budget>``, a2, b2; the exponents only when
    every budget's profile has its minimum inside the sizes tried) and ``law``'s values."""
    profiles = isoflop_profiles(runs)
    values = {"N_opt at " + f"{p.budget:.0e}".replace("e+", "e"): p.n_opt for p in profiles}
    n_opt, d_opt = optimal_allocation(profiles)
    if n_opt is not None and len(profiles) == len(np.unique(budget_groups(runs.c))):
        values.update(a2=n_opt.exponent, b2=d_opt.exponent)
    return values | law.values()


def seed_draws(frame: pd.DataFrame, rng: np.random.Generator) -> pd.Series:
    """One seed's loss per (budget, width), drawn at random among its seeds."""
    return frame.groupby([BUDGET, WIDTH])[LOSS].agg(lambda losses: losses.iloc[rng.integers(len(losses))])


def pooled_seed_sd(frame: pd.DataFrame) -> float:
    """The standard deviation of a run's loss across seeds, pooled over the points with several seeds."""
    groups = [g for _, g in frame.groupby([BUDGET, WIDTH])[LOSS] if len(g) > 1]
    if not groups:
        raise SystemExit(f"{RESULTS / 'runs.csv'}: no (budget, width) has several seeds")
    dof = sum(len(g) - 1 for g in groups)
    return float(np.sqrt(sum(g.var(ddof=1) * (len(g) - 1) for g in groups) / dof))


def bootstrap(frame: pd.DataFrame, law: Law) -> dict[str, list[float]]:
    """Every estimate over ``DRAWS`` refits to ``seed_draws``; each law refit starts from ``law``
    and from the grid's best points for its own draw, as attnlab-report's bootstrap does."""
    rng = np.random.default_rng(0)
    samples: dict[str, list[float]] = {}
    for _ in range(DRAWS):
        runs = points(frame, seed_draws(frame, rng))
        data = (np.log(runs.n), np.log(runs.d), np.log(runs.loss))
        starts = np.vstack([law_start(law), grid_starts(*data, count=BOOTSTRAP_STARTS)])
        for name, value in estimates(runs, fit_law(runs, starts)).items():
            samples.setdefault(name, []).append(value)
    return samples


def seed_spread(frame: pd.DataFrame) -> list[str]:
    """The points with several seeds: their losses' mean and range."""
    lines = [
        "| budget C (FLOPs) | d_model | seeds | mean loss | min | max | max - min |",
        "|---|---|---|---|---|---|---|",
    ]
    for (budget, width), rows in frame.groupby([BUDGET, WIDTH]):
        if len(rows) > 1:
            loss = rows[LOSS]
            lines.append(f"| {budget:.0e} | {width} | {len(rows)} | {loss.mean():.4f} | {loss.min():.4f} | "
                         f"{loss.max():.4f} | {loss.max() - loss.min():.4f} |".replace("e+", "e"))  # fmt: skip
    return lines


def interval(samples: list[float]) -> str:
    """The 2.5 and 97.5 percentiles of ``samples``, as ``[low, high]``."""
    if not samples:
        return "[no draw]"
    low, high = np.percentile(samples, [2.5, 97.5])
    return f"[{low:.4g}, {high:.4g}]"


def main() -> None:
    frame = completed_runs()
    means = points(frame, frame.groupby([BUDGET, WIDTH])[LOSS].mean())
    law = fit_law(means)
    mean = estimates(means, law)
    samples = bootstrap(frame, law)
    lines = [
        "# The fits over seeds: seed means, and intervals from a seed bootstrap",
        "",
        f"Runs: {len(frame)}, at {frame.groupby([BUDGET, WIDTH]).ngroups} (budget, width) points; "
        f"{DRAWS} draws (seed 0) of one seed per point with several.",
        f"Pooled standard deviation of a run's final loss across seeds: {pooled_seed_sd(frame):.4f} nats.",
        "",
        "## The points with several seeds",
        "",
        *seed_spread(frame),
        "",
        "## IsoFLOP minima (approach 2) and the law (approach 3), on the seed means",
        "",
        "| estimate | seed means | 95% seed-bootstrap interval | draws without it |",
        "|---|---|---|---|",
    ]
    for key, value in mean.items():
        drawn = samples.get(key, [])
        lines.append(f"| {NAMES.get(key, key)} | {value:.4g} | {interval(drawn)} | {DRAWS - len(drawn)} |")
    (RESULTS / "seeds.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
