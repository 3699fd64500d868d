"""Learning-rate transfer (Yang et al. 2022, "Tensor Programs V", Fig. 1): does the best AdamW rate
found at one width stay the best at the next, in the standard parametrisation (sp) and in μP (mup)?

    .venv/bin/python experiments/mup/lr_transfer.py [--data /work/shared/data/tinyshakespeare.txt]
        [--steps 60] [--out experiments/mup/results]

A GPT of 2 layers and 2 heads (an untied readout, as in coord_check.py) is built at widths 32, 64,
128 and 256 (×1..×8 of the base, the heads widening) and trained in-process by attnlab's AdamW (its
per-group rates under mup; constant rate, no weight decay) for a fixed number of steps on random
character windows of the first 90% of tinyshakespeare, once per rate of the grid, seed and
parametrisation. Its loss on fixed windows of the last 10% is the run's figure. Written to ``--out``:
every run (``lr_transfer.csv``), the best rate per parametrisation, width and seed and on the
seed-mean, and how far it moves across the widths in grid steps (``lr_transfer.json``), and the loss
against the rate (``lr_transfer.png``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

from attnlab.models import build_model
from attnlab.schema.model import GPTConfig
from attnlab.schema.optim import AdamWConfig
from attnlab.tasks.optim import adamw

WIDTHS = [16, 32, 64, 128]
RATES = [2.0**-e for e in (12, 10, 8, 6, 4, 2)]  # factors of 4: one grid step is log4
SEEDS = [0, 1, 2]
PARAMETRIZATIONS = ["sp", "mup"]
N_HEADS, SEQ, BATCH, HELD_OUT_WINDOWS = 2, 64, 8, 64


def character_ids(path: Path) -> tuple[torch.Tensor, int]:
    """The corpus as ids of its distinct characters (sorted), and how many there are."""
    text = path.read_text(encoding="utf-8")
    index = {c: i for i, c in enumerate(sorted(set(text)))}
    return torch.tensor([index[c] for c in text]), len(index)


def windows(ids: torch.Tensor, count: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """``count`` random windows of SEQ + 1 characters as a next-character batch."""
    starts = torch.randint(0, len(ids) - SEQ - 1, (count,), generator=generator)
    tokens = ids[starts[:, None] + torch.arange(SEQ + 1)]
    return {"input_ids": tokens[:, :-1], "labels": tokens[:, 1:]}


def next_char_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return F.cross_entropy(model.logits(batch).flatten(0, 1), batch["labels"].flatten())


def train_once(
    train: torch.Tensor,
    held_out: dict,
    vocab: int,
    width: int,
    lr: float,
    parametrization: str,
    seed: int,
    steps: int,
) -> dict:
    """One run: the held-out loss after ``steps`` steps (NaN where training diverged), and the mean
    train loss of the last 10 steps. The seed fixes the initialisation and the batches."""
    torch.manual_seed(seed)
    cfg = GPTConfig(
        d_model=width,
        n_layers=2,
        n_heads=N_HEADS,
        vocab_size=vocab,
        max_seq_len=SEQ,
        dropout=0.0,
        tie_embeddings=False,
        parametrization=parametrization,
        mup_base_width=WIDTHS[0],
    )
    model = build_model(cfg)
    optimizer = adamw(model, AdamWConfig(lr=lr, weight_decay=0.0), fused=False)
    batches = torch.Generator().manual_seed(1000 + seed)
    train_losses = []
    for _ in range(steps):
        loss = next_char_loss(model, windows(train, BATCH, batches))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        train_losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        held = next_char_loss(model, held_out).item()
    finite = math.isfinite(held) and all(math.isfinite(x) for x in train_losses[-10:])
    return {
        "parametrization": parametrization,
        "width": width,
        "seed": seed,
        "lr": lr,
        "held_out_loss": held if finite else float("nan"),
        "train_loss": sum(train_losses[-10:]) / 10 if finite else float("nan"),
    }


def best_rates(runs: pd.DataFrame, loss: str = "held_out_loss") -> pd.DataFrame:
    """Per parametrisation, width and seed (``seed`` "mean": on the seed-mean loss of each rate) the
    rate of the lowest loss, its loss and its index in the sorted grid. A diverged run (NaN) never
    wins; a seed-mean over a diverged seed is NaN; a width where every rate diverged has no row."""
    grid = sorted(runs["lr"].unique())
    mean = runs.groupby(["parametrization", "width", "lr"], as_index=False)[loss].agg(
        lambda x: x.mean(skipna=False)
    )
    tables = [runs.assign(seed=runs["seed"].astype(str)), mean.assign(seed="mean")]
    rows = []
    for (p, width, seed), rates in pd.concat(tables).groupby(["parametrization", "width", "seed"]):
        finite = rates.dropna(subset=[loss])
        if finite.empty:  # every rate diverged: no best rate at this width
            continue
        best = finite.loc[finite[loss].idxmin()]
        rows.append(
            {"parametrization": p, "width": width, "seed": seed, "lr": best["lr"], "loss": best[loss]}
            | {"grid_index": grid.index(best["lr"])}
        )
    return pd.DataFrame(rows)


def movement(best: pd.DataFrame) -> dict:
    """``{parametrization: {seed: steps}}``: how far the best rate moves across the widths, in grid
    steps (the largest index minus the smallest), and its shift from the narrowest to the widest
    width (positive: the wider model wants a larger rate)."""
    out: dict = {}
    for (p, seed), rows in best.groupby(["parametrization", "seed"]):
        rows = rows.sort_values("width")
        index = rows["grid_index"]
        out.setdefault(p, {})[seed] = {
            "range": int(index.max() - index.min()),
            "narrow_to_wide": int(index.iloc[-1] - index.iloc[0]),
        }
    return out


def plot(runs: pd.DataFrame, path: Path, steps: int) -> None:
    """Loss against rate (log x), one line per width (the seed-mean) and the seeds' range as a band,
    one panel per parametrisation; a diverged run is left out of its line."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4), layout="constrained")
    axes = fig.subplots(1, len(PARAMETRIZATIONS), sharey=True)
    for ax, p in zip(axes, PARAMETRIZATIONS):
        for width, rows in runs[runs["parametrization"] == p].groupby("width"):
            by_rate = rows.groupby("lr")["held_out_loss"]
            line = ax.plot(by_rate.mean().index, by_rate.mean(), marker="o", label=f"width {width}")
            ax.fill_between(
                by_rate.min().index, by_rate.min(), by_rate.max(), alpha=0.2, color=line[0].get_color()
            )
        ax.set(xscale="log", xlabel="AdamW learning rate (log)", title=f"{p}, {steps} steps")
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out loss (nats/char), mean of 3 seeds")
    low = runs["held_out_loss"].min()
    axes[0].set_ylim(low - 0.05, min(runs["held_out_loss"].max(), low + 1.5) + 0.05)
    axes[-1].legend(fontsize="small")
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data/tinyshakespeare.txt"))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    if not args.data.is_file():
        print(f"--data {args.data}: no such file; give the path of tinyshakespeare.txt", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    ids, vocab = character_ids(args.data)
    split = int(0.9 * len(ids))
    held_out = windows(ids[split:], HELD_OUT_WINDOWS, torch.Generator().manual_seed(0))
    started = time.perf_counter()
    rows = []
    for p in PARAMETRIZATIONS:
        for width in WIDTHS:
            for seed in SEEDS:
                for lr in RATES:
                    rows.append(train_once(ids[:split], held_out, vocab, width, lr, p, seed, args.steps))
                    print(json.dumps(rows[-1]), flush=True)
    runs = pd.DataFrame(rows)
    runs.to_csv(args.out / "lr_transfer.csv", index=False)
    best = best_rates(runs)
    summary = {
        "steps": args.steps,
        "batch": [BATCH, SEQ],
        "grid": RATES,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "best": best.to_dict(orient="records"),
        "movement_in_grid_steps": movement(best),
    }
    (args.out / "lr_transfer.json").write_text(json.dumps(summary, indent=1))
    plot(runs, args.out / "lr_transfer.png", args.steps)
    print(best[best["seed"] == "mean"].to_string(index=False))
    print(json.dumps(summary["movement_in_grid_steps"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
