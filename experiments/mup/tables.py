"""The README's tables, written from the study's results (so that they are copied, not typed):
the coordinate check's slopes after 5 steps (``coord_check_<sp|mup>.json`` at lr 3e-3 and 1e-2) and
the transfer study's best rate and loss per width on the seed-mean (``lr_transfer.json``, 60 steps),
and the same for every arm of the 500-step transfer study (``steps_500/lr_transfer.json``).

usage: python experiments/mup/tables.py      # writes results/tables.md and results/steps_500/tables.md
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

RESULTS = Path(__file__).resolve().parent / "results"
GROUPS = ["embedding", "attention output", "feed-forward output", "residual stream", "logits"]
STEP = "5"


def slopes(path: Path) -> dict[str, float]:
    return json.loads(path.read_text())["slopes"][STEP]


def coordinate_table() -> list[str]:
    columns = [
        ("sp, lr 3e-3", RESULTS / "coord_check_sp.json", False),
        ("**mup, lr 3e-3**", RESULTS / "coord_check_mup.json", True),
        ("sp, lr 1e-2", RESULTS / "lr_1e-2" / "coord_check_sp.json", False),
        ("mup, lr 1e-2", RESULTS / "lr_1e-2" / "coord_check_mup.json", False),
    ]
    found = [(slopes(path), bold) for _, path, bold in columns]
    lines = ["| group | " + " | ".join(name for name, _, _ in columns) + " |", "|---|---|---|---|---|"]
    for group in GROUPS:
        cells = [f"**{s[group]:+.2f}**" if bold else f"{s[group]:+.2f}" for s, bold in found]
        lines.append(f"| {group} | " + " | ".join(cells) + " |")
    return lines


def transfer_table() -> list[str]:
    best = json.loads((RESULTS / "lr_transfer.json").read_text())["best"]
    mean = {(b["parametrization"], b["width"]): b for b in best if b["seed"] == "mean"}
    lines = [
        "| width | sp: best rate | sp: loss | **mup: best rate** | mup: loss |",
        "|---|---|---|---|---|",
    ]
    for width in sorted({w for _, w in mean}):
        sp, mup = mean[("sp", width)], mean[("mup", width)]
        lines.append(
            f"| {width} | 2^{round(math.log2(sp['lr']))} | {sp['loss']:.3f} | "
            f"**2^{round(math.log2(mup['lr']))}** | {mup['loss']:.3f} |"
        )
    return lines


def rate_cell(best: dict, grid: list[float]) -> str:
    """The best rate as a power of 2, marked "(edge)" where it is the grid's end (the optimum may lie
    beyond it)."""
    edge = " (edge)" if best["lr"] in (min(grid), max(grid)) else ""
    return f"2^{round(math.log2(best['lr']))}{edge}"


def arms_transfer_table(summary: dict) -> list[str]:
    """Per width, each arm's best rate on the seed-mean and that loss, and each seed's best rate."""
    arms = list(summary["grid"])
    by = {(b["parametrization"], b["width"], b["seed"]): b for b in summary["best"]}
    header = " | ".join(f"{arm}: best rate | {arm}: loss | {arm}: each seed's" for arm in arms)
    lines = [f"| width | {header} |", "|---" * (1 + 3 * len(arms)) + "|"]
    seeds = sorted({b["seed"] for b in summary["best"]} - {"mean"})
    for width in sorted({b["width"] for b in summary["best"]}):
        cells = []
        for arm in arms:
            mean, grid = by[(arm, width, "mean")], summary["grid"][arm]
            each = ", ".join(f"2^{round(math.log2(by[(arm, width, s)]['lr']))}" for s in seeds)
            cells.append(f"{rate_cell(mean, grid)} | {mean['loss']:.3f} | {each}")
        lines.append(f"| {width} | {' | '.join(cells)} |")
    return lines


def loss_table(runs: pd.DataFrame) -> list[str]:
    """The seed-mean held-out loss of every arm and width at every rate (blank where not run)."""
    runs = runs.assign(exponent=(-runs["lr"].map(math.log2)).round().astype(int))
    mean = runs.groupby(["parametrization", "width", "exponent"], sort=False)["held_out_loss"].mean()
    exponents = sorted(runs["exponent"].unique(), reverse=True)
    lines = [
        "| arm, width | " + " | ".join(f"2^-{e}" for e in exponents) + " |",
        "|---" * (1 + len(exponents)) + "|",
    ]
    for (arm, width), losses in mean.groupby(level=[0, 1], sort=False):
        at = {e: loss for (_, _, e), loss in losses.items()}
        cells = [f"{at[e]:.3f}" if e in at else "" for e in exponents]
        lines.append(f"| {arm}, width {width} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    lines = [
        "# The README's tables",
        "",
        f"Slope of log RMS against log width after {STEP} steps:",
        "",
        *coordinate_table(),
        "",
        "Best rate on the seed-mean held-out loss (nats/char):",
        "",
        *transfer_table(),
    ]
    (RESULTS / "tables.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    summary = json.loads((RESULTS / "steps_500" / "lr_transfer.json").read_text())
    lines = [
        f"# The transfer study at {summary['steps']} steps",
        "",
        "Best rate on the seed-mean held-out loss (nats/char), and each seed's best rate:",
        "",
        *arms_transfer_table(summary),
        "",
        "Seed-mean held-out loss (nats/char) at each rate:",
        "",
        *loss_table(pd.read_csv(RESULTS / "steps_500" / "lr_transfer.csv")),
    ]
    (RESULTS / "steps_500" / "tables.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
