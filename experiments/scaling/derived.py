"""The scaling study's design table and the figures its README derives, from ``results/runs.csv`` and
``results/report.md`` (no run needed; ``refit.py`` is the slow part, the law without the starved runs).

usage: python experiments/scaling/derived.py [corpus]   # writes results/derived.md

The corpus (default /work/shared/data/tinyshakespeare.txt) gives the size of the training split, so
that D can be read in epochs.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd

RESULTS = Path(__file__).resolve().parent / "results"
VAL_FRACTION = 0.1  # data.val_fraction of every run


def main(corpus: Path) -> None:
    runs = pd.read_csv(RESULTS / "runs.csv")
    runs = runs[runs["status"] == "completed"]
    if runs.empty:
        raise SystemExit("no completed run in results/runs.csv")
    characters = len(corpus.read_text(encoding="utf-8"))
    train = characters * (1 - VAL_FRACTION)
    lines = [
        "# The design and the figures derived from the runs",
        "",
        "| budget C (FLOPs) | widths d_model | parameters N | steps |",
        "|---|---|---|---|",
    ]
    for budget, rows in runs.groupby("trainer.compute_budget"):
        rows = rows.sort_values("model.d_model")
        widths = ", ".join(str(w) for w in rows["model.d_model"])
        lines.append(
            f"| {budget:.0e}".replace("e+", "e") + f" | {widths} | {rows['n_params'].iloc[0]:,} to "
            f"{rows['n_params'].iloc[-1]:,} | {rows['final_step'].iloc[0]:,} to {rows['final_step'].iloc[-1]:,} |"
        )
    d_opt = [float(x.replace(",", "")) for x in minima_column("D_opt")]
    budgets = sorted(runs["trainer.compute_budget"].unique())
    by_size = runs.set_index(["trainer.compute_budget", "model.d_model"])["val/loss final"]
    quantities = {
        "corpus characters": characters,
        "training split, characters (tokens)": train,
        "epochs read by a run: min": runs["train_tokens"].min() / train,
        "epochs read by a run: max": runs["train_tokens"].max() / train,
        "epochs read at the IsoFLOP minimum: min": min(d_opt) / train,
        "epochs read at the IsoFLOP minimum: max": max(d_opt) / train,
        "decades of compute (log10 of the largest budget over the smallest)": math.log10(
            budgets[-1] / budgets[0]
        ),
        "decades of N (log10 of the largest over the smallest)": math.log10(
            runs["n_params"].max() / runs["n_params"].min()
        ),
        "loss at 4e11, d_model 32 minus d_model 24": by_size[(4e11, 32)] - by_size[(4e11, 24)],
        "steps of the runs: min": int(runs["final_step"].min()),
        "runs under 200 steps": int((runs["final_step"] < 200).sum()),
    }
    lines += ["", "| quantity | value |", "|---|---|"]
    lines += [
        f"| {name} | {value:,} |" if isinstance(value, int) else f"| {name} | {value:.4g} |"
        for name, value in quantities.items()
    ]
    (RESULTS / "derived.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def minima_column(column: str) -> list[str]:
    """A column of the report's IsoFLOP minima table (the table whose header has ``column``)."""
    text = (RESULTS / "report.md").read_text(encoding="utf-8")
    for block in text.split("\n\n"):
        rows = [
            [c.strip() for c in line.strip().strip("|").split("|")]
            for line in block.splitlines()
            if line.startswith("|")
        ]
        if rows and column in rows[0]:
            return [r[rows[0].index(column)] for r in rows[2:]]
    raise SystemExit(f"no table with a column {column!r} in results/report.md")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/work/shared/data/tinyshakespeare.txt"))
