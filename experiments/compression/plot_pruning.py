"""The pruning curves as one PNG and a markdown table: each model's test metric against the fraction
of heads pruned, without and with fine-tuning (Michel et al. 2019, Fig. 2).

    python experiments/compression/plot_pruning.py <results folder>

reads ``pruning_gpt_char.csv`` and ``pruning_vit_digits.csv`` (``pruning_curve.py``) there and writes
``pruning.png`` and ``pruning_table.md`` beside them.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

PANELS = {
    "gpt_char": ("loss", "GPT char: test loss (nats/char)"),
    "vit_digits": ("accuracy", "ViT digits: test accuracy"),
}


def read(path: Path) -> list[dict[str, float]]:
    with open(path, encoding="utf-8") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def main() -> None:
    folder = Path(sys.argv[1])
    fig = Figure(figsize=(10, 4), layout="constrained")
    axes = fig.subplots(1, len(PANELS))
    table = [
        "| model | fraction pruned | heads | metric, no fine-tuning | metric, fine-tuned |",
        "|---|---|---|---|---|",
    ]
    for ax, (name, (metric, title)) in zip(axes, PANELS.items()):
        rows = read(folder / f"pruning_{name}.csv")
        base = [r for r in rows if r["finetune_steps"] == 0]
        tuned = {r["fraction"]: r for r in rows if r["finetune_steps"] > 0}
        steps = int(next(iter(tuned.values()))["finetune_steps"]) if tuned else 0
        ax.plot([r["fraction"] for r in base], [r[metric] for r in base], "o-", label="pruned")
        if tuned:
            points = [tuned[f] for f in sorted(tuned)]
            ax.plot(
                [r["fraction"] for r in points],
                [r[metric] for r in points],
                "s--",
                label=f"+ {steps} fine-tuning steps",
            )
        ax.set_xlabel("fraction of attention heads pruned")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend()
        for r in base:
            t = tuned.get(r["fraction"])
            shown = f"{t[metric]:.4f}" if t else "-"
            table.append(f"| {name} | {r['fraction']:.3f} | {int(r['heads'])} | {r[metric]:.4f} | {shown} |")
    FigureCanvasAgg(fig)
    fig.savefig(folder / "pruning.png", dpi=110)
    (folder / "pruning_table.md").write_text("\n".join(table) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
