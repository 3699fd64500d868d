"""The table of the regression probes (README, "Seed 1337 across code versions"): one row per job of
each run directory given, with the last validation's and the test's metrics and the wall time.

    python experiments/families/probe_table.py LABEL=SWEEP_DIR ... > experiments/families/results/regression/probes.md

LABEL names the row (a commit and what ran; it may hold "=", the last one ends it); a sweep with several jobs gives a row per job, ``LABEL
job N``. Stops on a directory without a finished job.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

COLUMNS = ("val/loss", "val/acc", "test/loss", "test/acc")


def jobs(sweep: Path) -> list[Path]:
    found = sorted(p.parent for p in sweep.glob("*/test_metrics.json"))
    if not found:
        raise SystemExit(f"error: no finished job (test_metrics.json) under {sweep}")
    return found


def row(label: str, job: Path) -> str:
    val = [
        json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines() if '"val/loss"' in line
    ][-1]
    test = json.loads((job / "test_metrics.json").read_text())["metrics"]
    summary = json.loads((job / "summary.json").read_text())
    values = [val.get(c, test.get(c)) for c in COLUMNS]
    cells = [
        "" if v is None else f"{v:.6f}" if c.endswith("loss") else f"{100 * v:.2f}%"
        for c, v in zip(COLUMNS, values)
    ]
    return f"| {label} | {val['step']} | " + " | ".join(cells) + f" | {summary['wall_time_s']:.0f} |"


def main(args: list[str]) -> None:
    print("| run | steps | val loss | val acc | test loss | test acc | wall s |")
    print("|---|---|---|---|---|---|---|")
    for arg in args:
        label, _, sweep = arg.rpartition("=")
        found = jobs(Path(sweep))
        for n, job in enumerate(found):
            print(row(label if len(found) == 1 else f"{label} job {n}", job))


if __name__ == "__main__":
    main(sys.argv[1:])
