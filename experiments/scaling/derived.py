"""The scaling study's design table and the figures its README derives, from ``results/runs.csv`` and
``results/report.md`` (no run needed; ``seeds.py`` is the slower part, the seed bootstrap).

usage: python experiments/scaling/derived.py [corpus]   # writes results/derived.md

The corpus (default /work/shared/data/tinyshakespeare.txt) gives the sizes of the training and
validation splits, carved as the runs carve them, so that D can be read in epochs and the characters
every run is scored on can be stated.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd

from attnlab.data.sources import carve_text

RESULTS = Path(__file__).resolve().parent / "results"
VAL_FRACTION = 0.1  # data.val_fraction of every run
SEQ_LEN = 64  # data.seq_len: validation windows of 64 scored characters, non-overlapping
FIRST_SEED = 1337  # the first phase: every width once
BUDGET, WIDTH = "trainer.compute_budget", "model.d_model"


def design_rows(runs: pd.DataFrame) -> list[str]:
    """One row per budget: its batch, widths, parameters and steps (the first phase's runs)."""
    lines = [
        "| budget C (FLOPs) | batch (sequences of 64) | widths d_model | parameters N | steps |",
        "|---|---|---|---|---|",
    ]
    first = runs[runs["seed"] == FIRST_SEED]
    for budget, rows in first.groupby(BUDGET):
        rows = rows.sort_values(WIDTH)
        widths = ", ".join(str(w) for w in rows[WIDTH])
        batch = ", ".join(str(b) for b in rows["data.batch_size"].unique())
        lines.append(
            f"| {budget:.0e}".replace("e+", "e") + f" | {batch} | {widths} | {rows['n_params'].iloc[0]:,} to "
            f"{rows['n_params'].iloc[-1]:,} | {rows['final_step'].iloc[0]:,} to {rows['final_step'].iloc[-1]:,} |"
        )
    return lines


def main(corpus: Path) -> None:
    runs = pd.read_csv(RESULTS / "runs.csv")
    if runs.empty or (runs["status"] != "completed").any():
        raise SystemExit(f"{RESULTS / 'runs.csv'}: every run must have completed")
    text = corpus.read_text(encoding="utf-8")
    splits = carve_text({"train": text}, VAL_FRACTION, 0.0)
    train = len(splits["train"])
    val_windows = (len(splits["val"]) - (SEQ_LEN + 1)) // SEQ_LEN + 1
    d_opt = [float(x.replace(",", "")) for x in minima_column("D_opt")]
    budgets = sorted(runs[BUDGET].unique())
    quantities = {
        "corpus characters": len(text),
        "training split, characters (tokens)": train,
        "validation characters scored by every run": val_windows * SEQ_LEN,
        "runs": len(runs),
        "runs at seeds 2 and 3": int((runs["seed"] != FIRST_SEED).sum()),
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
        "steps of the runs: min": int(runs["final_step"].min()),
        "steps of the runs: max": int(runs["final_step"].max()),
        "runs under 500 steps": int((runs["final_step"] < 500).sum()),
    }
    lines = ["# The design and the figures derived from the runs", "", *design_rows(runs)]
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
