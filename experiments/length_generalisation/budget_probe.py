"""The validation curves of single training runs, as a table: how many steps a task takes to be learned
at the trained length, read before a sweep's budget is chosen (the runs themselves are git-ignored).

    python experiments/length_generalisation/budget_probe.py OUT.md RUN_FOLDER...

Reads each run's ``config.yaml`` (its encoding and step budget) and ``metrics.jsonl`` (the validation
records: ``val/exact_match``, the share of the validation examples whose every answer token is the
teacher-forced argmax, which for copy equals greedy exact match, and ``val/loss``), and writes one
row per validation: encoding, budget, step, exact match, loss and the fit time so far.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml


def validations(run: Path) -> list[str]:
    """The table rows of one run folder, one per validation record."""
    config = yaml.safe_load((run / "config.yaml").read_text())
    encoding, budget = config["model"]["pos"]["name"], config["trainer"]["max_steps"]
    rows = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "val/exact_match" in record:
            rows.append(
                f"| {encoding} | {budget} | {record['step']} | {record['val/exact_match']:.3f} "
                f"| {record['val/loss']:.4f} | {record['time_s']:.0f} |"
            )
    if not rows:
        raise SystemExit(f"{run}: no validation record in metrics.jsonl")
    return rows


def main(out: Path, runs: list[Path]) -> None:
    lines = [
        "# Validation during single trainings (exact match and loss at the trained length, 128 examples)",
        "",
        "| encoding | budget | step | val exact match | val loss | fit time s |",
        "|---|---|---|---|---|---|",
    ]
    for run in runs:
        lines += validations(run)
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
