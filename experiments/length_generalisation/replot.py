"""Redraw the study's accuracy plots from its saved table, without the runs (which git ignores):

    python experiments/length_generalisation/replot.py experiments/length_generalisation/results
    python experiments/length_generalisation/replot.py experiments/length_generalisation/results/longer

Reads ``lengths.csv`` (what ``attnlab-report`` wrote from the evaluations: mean, std and seed count
per task, encoding and length) and writes ``plots/lengths_<task>_heatmap.png`` and
``plots/lengths_<task>_lines.png`` as ``attnlab-report`` draws them now (with each task's chance
levels, and "one seed" where there is one). The settings the table does not hold are the study's
(``run.sh``): trained at 16 characters, passkeys of 3 digits.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from attnlab.report.length_plots import length_heatmap, length_lines

TRAINED, PASSKEY_DIGITS = 16, 3  # run.sh: data.seq_len 16 (the experiment), data.passkey_digits=3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="a folder holding lengths.csv")
    args = parser.parse_args()
    table = args.results / "lengths.csv"
    if not table.is_file():
        raise SystemExit(f"error: no {table}: run experiments/length_generalisation/run.sh first")
    summary = pd.read_csv(table)
    summary["depth"] = summary["depth"].fillna("-")
    for task in sorted(summary["task"].unique()):
        digits = PASSKEY_DIGITS if task == "passkey" else None
        print(length_heatmap(summary, task, args.results / "plots", digits))
        print(length_lines(summary, task, args.results / "plots", TRAINED, digits))


if __name__ == "__main__":
    main()
