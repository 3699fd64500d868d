"""Coordinate check (Yang et al. 2021, μP's check): how the activations of each layer group grow with
the width during the first steps of training, under one learning rate for every width.

    .venv/bin/python experiments/mup/coord_check.py [--steps 5] [--lr 1e-2] [--out experiments/mup/results]

A GPT of 2 layers is built at widths 32, 64, 128 and 256 (×1..×8 of the base, 16 dimensions per head),
trained on random tokens with AdamW, and the RMS of a coordinate of each group's output
(``attnlab.models.coordinates``) is recorded on a fixed batch before each step. Written: the sizes
(``coord_check_sp.csv``), the slope of log RMS against log width per group and step
(``coord_check_sp.json``) and one panel per group (``coord_check_sp.png``). Under a width-stable
parametrisation every slope stays near 0; the standard parametrisation (sp, attnlab's only one so
far) lets them grow.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

from attnlab.models import build_model
from attnlab.models.coordinates import GROUPS, activation_rms, width_slope
from attnlab.schema.model import GPTConfig

WIDTHS = [32, 64, 128, 256]
HEAD_DIM, VOCAB, SEQ, BATCH = 16, 64, 32, 8


def sizes_during_training(width: int, steps: int, lr: float, seed: int = 0) -> list[dict]:
    """One row per step and group: the group's RMS at ``width`` before that step's update."""
    torch.manual_seed(seed)
    cfg = GPTConfig(
        d_model=width, n_layers=2, n_heads=width // HEAD_DIM, vocab_size=VOCAB, max_seq_len=SEQ, dropout=0.0
    )
    model = build_model(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=torch.Generator().manual_seed(seed + 1))
    batch = {"input_ids": tokens[:, :-1], "labels": tokens[:, 1:]}
    rows = []
    for step in range(steps + 1):
        rows += [
            {"width": width, "step": step, "group": g, "rms": r}
            for g, r in activation_rms(model, batch).items()
        ]
        loss = F.cross_entropy(model.logits(batch).flatten(0, 1), batch["labels"].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return rows


def coordinate_check(steps: int, lr: float, widths: list[int] = WIDTHS) -> tuple[pd.DataFrame, dict]:
    """The sizes at every width and step, and ``{step: {group: slope}}``."""
    sizes = pd.DataFrame([row for width in widths for row in sizes_during_training(width, steps, lr)])
    slopes = {
        int(step): {
            group: width_slope(list(g["width"]), list(g["rms"])) for group, g in at_step.groupby("group")
        }
        for step, at_step in sizes.groupby("step")
    }
    return sizes, slopes


def plot(sizes: pd.DataFrame, path: Path, title: str) -> None:
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator

    groups = [g for g in GROUPS if g in set(sizes["group"])]
    fig = Figure(figsize=(3.2 * len(groups), 3.4), layout="constrained")
    for ax, group in zip(fig.subplots(1, len(groups), squeeze=False)[0], groups):
        for step, rows in sizes[sizes["group"] == group].groupby("step"):
            ax.plot(rows["width"], rows["rms"], marker="o", label=f"step {step}")
        ax.set(
            xscale="log",
            yscale="log",
            title=group,
            xlabel="width d_model (log)",
            ylabel="RMS of a coordinate",
        )
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(WIDTHS, [str(w) for w in WIDTHS])
        ax.grid(alpha=0.3)
    fig.axes[-1].legend(fontsize="small")
    fig.suptitle(title)
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    sizes, slopes = coordinate_check(args.steps, args.lr)
    sizes.to_csv(args.out / "coord_check_sp.csv", index=False)
    (args.out / "coord_check_sp.json").write_text(json.dumps({"lr": args.lr, "slopes": slopes}, indent=1))
    plot(
        sizes,
        args.out / "coord_check_sp.png",
        f"coordinate check, standard parametrisation, AdamW lr {args.lr:g}",
    )
    for step in (0, args.steps):
        print(f"step {step}: " + ", ".join(f"{g} {s:+.2f}" for g, s in slopes[step].items()))


if __name__ == "__main__":
    main()
