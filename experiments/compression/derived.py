"""The differences and ratios that experiments/compression/README.md quotes, computed from the tables
that run.sh saved (``results/tables.md``, ``results/int8_<model>.md``), so that each is in a file:

    python experiments/compression/derived.py experiments/compression/results > experiments/compression/results/derived.md
"""

from __future__ import annotations

import sys
from pathlib import Path


def table_rows(text: str) -> list[list[str]]:
    """The cells of every Markdown table row of ``text`` (header and rule rows included)."""
    return [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("|")
    ]


def number(cell: str) -> float:
    return float(cell.rstrip("%").replace(",", ""))


def derived(results: Path) -> list[str]:
    rows = table_rows((results / "tables.md").read_text(encoding="utf-8"))
    by_run = {(r[0], r[1]): r for r in rows if len(r) >= 5 and r[0] in ("gpt", "vit")}
    lines = ["| quantity | value |", "|---|---|"]
    for task in ("gpt", "vit"):
        scratch, distilled = by_run[(task, "scratch")], by_run[(task, "distilled")]
        loss = number(distilled[4]) - number(scratch[4])
        lines.append(f"| {task}: distilled minus scratch, test loss | {loss:+.4f} |")
        if scratch[5]:
            points = number(distilled[5]) - number(scratch[5])
            lines.append(f"| {task}: distilled minus scratch, test accuracy (points) | {points:+.2f} |")
        fp32, int8 = by_run[(task, "fp32 (attnlab-train)")], by_run[(task, "int8 (attnlab-compress)")]
        lines.append(f"| {task}: int8 minus fp32, test loss | {number(int8[3]) - number(fp32[3]):+.4f} |")
        sizes = {
            r[0]: number(r[1])
            for r in table_rows((results / f"int8_{task}.md").read_text())
            if r[-1][:1].isdigit() and len(r) == 2
        }
        checkpoint = sizes["training checkpoint (fp32 weights + optimizer state)"]
        weights, small = sizes["fp32 weights alone (state dict)"], sizes["int8 checkpoint (attnlab-compress)"]
        lines.append(
            f"| {task}: int8 file, times smaller than the training checkpoint | {checkpoint / small:.1f} |"
        )
        lines.append(f"| {task}: int8 file, times smaller than the fp32 weights | {weights / small:.1f} |")
    return lines


if __name__ == "__main__":
    print("\n".join(derived(Path(sys.argv[1]))))
