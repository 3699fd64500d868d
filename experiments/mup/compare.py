"""μP against sp at each width of the transfer study, each at its own best rate on the seed-mean,
with the report's significance (attnlab.report.significance: the mean per-seed difference of the
held-out loss, paired by seed, its 95% bootstrap interval over the seeds, the paired t-test's p-value
and the seeds per side 80% power would need), and how far each width's best loss sits above the
count-based bigram model of ``results/bigram.json``.

usage: python experiments/mup/compare.py [results folder]    # writes comparisons.md into it
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from attnlab.report.significance import compare

HERE = Path(__file__).resolve().parent


def main(results: Path) -> None:
    runs = pd.read_csv(results / "lr_transfer.csv")
    best = pd.DataFrame(json.loads((results / "lr_transfer.json").read_text())["best"])
    best = best[best["seed"] == "mean"]
    bigram = json.loads((HERE / "results" / "bigram.json").read_text())["bigram_held_out_windows"]
    lines = [
        "# mup against sp at each one's best rate, paired by seed (held-out loss, nats/char)",
        "",
        "| width | sp rate | mup rate | sp loss | mup loss | mup - sp | 95% interval | p | seeds needed "
        "| sp above bigram | mup above bigram |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for width in sorted(best["width"].unique()):
        loss, rate = {}, {}
        for p in ("sp", "mup"):
            rate[p] = float(best[(best["width"] == width) & (best["parametrization"] == p)]["lr"].iloc[0])
            rows = runs[(runs["parametrization"] == p) & (runs["width"] == width) & (runs["lr"] == rate[p])]
            loss[p] = dict(zip(rows["seed"].astype(int), rows["held_out_loss"]))
        c = compare(loss["sp"], loss["mup"])
        means = {p: sum(v.values()) / len(v) for p, v in loss.items()}
        lines.append(
            f"| {width} | {rate['sp']:.6g} | {rate['mup']:.6g} | {means['sp']:.3f} | {means['mup']:.3f} "
            f"| {c.difference:+.3f} | [{c.low:+.3f}, {c.high:+.3f}] | {c.p_value:.2g} | {c.seeds_needed} "
            f"| {means['sp'] - bigram:+.3f} | {means['mup'] - bigram:+.3f} |"
        )
    (results / "comparisons.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "results")
