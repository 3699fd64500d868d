"""The README's two tables, written from the study's results (so that they are copied, not typed):
the coordinate check's slopes after 5 steps (``coord_check_<sp|mup>.json`` at lr 3e-3 and 1e-2) and
the transfer study's best rate and loss per width on the seed-mean (``lr_transfer.json``).

usage: python experiments/mup/tables.py      # writes experiments/mup/results/tables.md
"""

from __future__ import annotations

import json
import math
from pathlib import Path

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


if __name__ == "__main__":
    main()
