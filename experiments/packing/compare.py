"""The packing study's loss comparisons with the report's significance (attnlab.report.significance,
paired by seed: the arms of a seed share their initialisation, and the two packed arms their windows),
from ``results/results.json``: the mean per-seed difference of the loss on each document alone, its
95% bootstrap interval over the seed pairs, the paired t-test's p-value and the seeds per side that
80% power would need at the observed difference.

usage: python experiments/packing/compare.py      # writes experiments/packing/results/comparisons.md
"""

from __future__ import annotations

import json
from pathlib import Path

from attnlab.report.significance import compare

RESULTS = Path(__file__).resolve().parent / "results"
PAIRS = [("unmasked", "masked"), ("padded", "masked"), ("padded", "unmasked")]  # (baseline, other)


def main() -> None:
    results = json.loads((RESULTS / "results.json").read_text())
    loss = {
        arm: {int(seed.removeprefix("seed")): arms[arm]["val_loss_alone"] for seed, arms in results.items()}
        for arm in ("masked", "unmasked", "padded")
    }
    lines = [
        "# Loss on each document alone: arm against arm, paired by seed",
        "",
        "| comparison | per-seed differences | difference | 95% interval | p | seeds needed |",
        "|---|---|---|---|---|---|",
    ]
    for baseline, other in PAIRS:
        c = compare(loss[baseline], loss[other])
        each = ", ".join(f"{loss[other][s] - loss[baseline][s]:+.4f}" for s in sorted(loss[other]))
        lines.append(
            f"| {other} - {baseline} | {each} | {c.difference:+.4f} | [{c.low:+.4f}, {c.high:+.4f}] "
            f"| {c.p_value:.2g} | {c.seeds_needed} |"
        )
    (RESULTS / "comparisons.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
