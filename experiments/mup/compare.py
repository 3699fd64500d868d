"""μP against sp at each width of the transfer study, each at its own best rate on the seed-mean,
with the report's significance (attnlab.report.significance: the mean per-seed difference of the
held-out loss, paired by seed, its 95% bootstrap interval over the seeds, the paired t-test's p-value
and the seeds per side 80% power would need), and how far each width's best loss sits above the
count-based bigram model of ``results/bigram.json``; where the study ran a tied-readout arm
(``mup-tied``), the same for it against μP's untied readout.

usage: python experiments/mup/compare.py [results folder]    # writes comparisons.md into it
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from attnlab.report.significance import compare

HERE = Path(__file__).resolve().parent


def at_best_rate(
    runs: pd.DataFrame, best: pd.DataFrame, arm: str, width: int
) -> tuple[float, dict[int, float]]:
    """The arm's best rate at ``width`` on the seed-mean, and each seed's held-out loss there."""
    rate = float(best[(best["width"] == width) & (best["parametrization"] == arm)]["lr"].iloc[0])
    rows = runs[(runs["parametrization"] == arm) & (runs["width"] == width) & (runs["lr"] == rate)]
    return rate, dict(zip(rows["seed"].astype(int), rows["held_out_loss"]))


def rows(runs: pd.DataFrame, best: pd.DataFrame, baseline: str, other: str, bigram: float) -> list[str]:
    """One table row per width: ``other`` against ``baseline``, each at its own best rate."""
    lines = []
    for width in sorted(best["width"].unique()):
        (rate_b, loss_b), (rate_o, loss_o) = (
            at_best_rate(runs, best, arm, width) for arm in (baseline, other)
        )
        c = compare(loss_b, loss_o)
        mean_b, mean_o = (sum(v.values()) / len(v) for v in (loss_b, loss_o))
        lines.append(
            f"| {width} | {rate_b:.6g} | {rate_o:.6g} | {mean_b:.3f} | {mean_o:.3f} "
            f"| {c.difference:+.3f} | [{c.low:+.3f}, {c.high:+.3f}] | {c.p_value:.2g} | {c.seeds_needed} "
            f"| {mean_b - bigram:+.3f} | {mean_o - bigram:+.3f} |"
        )
    return lines


def header(baseline: str, other: str, tag: str = "") -> list[str]:
    """The table's header; ``tag`` marks the statistics' columns of a second table, so that a README
    can name them apart from the first's (check_figures finds the first table with a header)."""
    return [
        f"| width | {baseline} rate | {other} rate | {baseline} loss | {other} loss | {other} - {baseline} "
        f"| 95% interval{tag} | p{tag} | seeds needed{tag} | {baseline} above bigram | {other} above bigram |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]


def main(results: Path) -> None:
    runs = pd.read_csv(results / "lr_transfer.csv")
    best = pd.DataFrame(json.loads((results / "lr_transfer.json").read_text())["best"])
    best = best[best["seed"] == "mean"]
    bigram = json.loads((HERE / "results" / "bigram.json").read_text())["bigram_held_out_windows"]
    lines = [
        "# mup against sp at each one's best rate, paired by seed (held-out loss, nats/char)",
        "",
        *header("sp", "mup"),
        *rows(runs, best, "sp", "mup", bigram),
    ]
    if "mup-tied" in set(runs["parametrization"]):
        lines += [
            "",
            "# mup with a tied readout against mup's untied one, each at its best rate, paired by seed",
            "",
            *header("mup", "mup-tied", " (tied)"),
            *rows(runs, best, "mup", "mup-tied", bigram),
        ]
    (results / "comparisons.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "results")
