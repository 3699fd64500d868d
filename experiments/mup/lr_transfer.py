"""Learning-rate transfer (Yang et al. 2022, "Tensor Programs V", Fig. 1): does the best AdamW rate
found at one width stay the best at the next, in the standard parametrisation (sp) and in μP (mup)?

    .venv/bin/python experiments/mup/lr_transfer.py [--data /work/shared/data/tinyshakespeare.txt]
        [--steps 60] [--seeds 0 1 2] [--widths 16 32 64 128] [--arms sp mup mup-tied]
        [--sp-rates 12 10 8 6 4 2] [--mup-rates 12 10 8 6 4 2] [--out experiments/mup/results]
    .venv/bin/python experiments/mup/lr_transfer.py --merge DIR DIR ... --out DIR

A GPT of 2 layers and 2 heads (an untied readout, as in coord_check.py) is built at each width (the
heads widening; μP's base width is 16 whatever the widths, so a width of 8 is μP at m = 1/2) and
trained in-process by attnlab's AdamW (its per-group rates under mup; constant rate, no weight decay)
for a fixed number of steps on random character windows of the first 90% of tinyshakespeare, once per
rate of the arm's grid, seed and arm. Its loss on fixed windows of the last 10% is the run's figure.

Arms: ``sp``; ``mup``; ``mup-tied``, μP with ``tie_embeddings=True``. attnlab's μP treats a tied
readout as the token table it is (role ``embedding``): initialised as sp's (not at zero, as an untied
readout is) and trained at Adam's lr (not lr/m), its logits still times 1/m. The grids are exponents
of 2 per arm (``--sp-rates 11 10 9`` is 2^-11, 2^-10, 2^-9; ``mup-tied`` uses ``--mup-rates``); the
defaults are the committed 60-step study's x4 grid. Written to ``--out``: every run
(``lr_transfer.csv``, the arm in its ``parametrization`` column), the best rate per arm, width and
seed and on the seed-mean, each arm's grid and its factor, and how far the best rate moves across the
widths in grid steps and in factors of 2 (``lr_transfer.json``), and the loss against the rate
(``lr_transfer.png``). ``--merge`` writes the same from the ``lr_transfer.csv`` of several such
folders (runs split into lanes by seed or arm), its wall time the lanes' sum.
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

BASE_WIDTH = 16  # μP's base width (m = 1 there), whatever widths a run is given
WIDTHS = [16, 32, 64, 128]
RATE_EXPONENTS = [12, 10, 8, 6, 4, 2]  # rates 2^-12 .. 2^-2, factors of 4: one grid step is x4
SEEDS = [0, 1, 2]
ARMS = ["sp", "mup"]
KNOWN_ARMS = {
    "sp": ("sp", False),
    "mup": ("mup", False),
    "mup-tied": ("mup", True),
}  # (parametrisation, tied)
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
    arm: str,
    seed: int,
    steps: int,
) -> dict:
    """One run of ``arm`` (``KNOWN_ARMS``): the held-out loss after ``steps`` steps (NaN where
    training diverged), and the mean train loss of the last 10 steps. The seed fixes the
    initialisation and the batches."""
    torch.manual_seed(seed)
    parametrization, tied = KNOWN_ARMS[arm]
    cfg = GPTConfig(
        d_model=width,
        n_layers=2,
        n_heads=N_HEADS,
        vocab_size=vocab,
        max_seq_len=SEQ,
        dropout=0.0,
        tie_embeddings=tied,
        parametrization=parametrization,
        mup_base_width=BASE_WIDTH,
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
    tail = train_losses[-10:]
    finite = math.isfinite(held) and all(math.isfinite(x) for x in tail)
    return {
        "parametrization": arm,
        "width": width,
        "seed": seed,
        "lr": lr,
        "held_out_loss": held if finite else float("nan"),
        "train_loss": sum(tail) / len(tail) if finite else float("nan"),
    }


def best_rates(runs: pd.DataFrame, loss: str = "held_out_loss") -> pd.DataFrame:
    """Per arm, width and seed (``seed`` "mean": on the seed-mean loss of each rate) the rate of the
    lowest loss, its loss and its index in the arm's sorted grid. A diverged run (NaN) never wins; a
    seed-mean over a diverged seed is NaN; a width where every rate diverged has no row."""
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
        grid = sorted(runs.loc[runs["parametrization"] == p, "lr"].unique())
        rows.append(
            {"parametrization": p, "width": width, "seed": seed, "lr": best["lr"], "loss": best[loss]}
            | {"grid_index": grid.index(best["lr"])}
        )
    return pd.DataFrame(rows)


def grid_factor(rates: list[float]) -> float:
    """The factor between neighbouring rates of a grid (2 for 2^-8, 2^-7, 2^-6); one that is not
    even stops here, since its moves could not be counted in grid steps."""
    ratios = {round(b / a, 9) for a, b in zip(sorted(rates), sorted(rates)[1:])}
    if len(ratios) > 1:
        raise ValueError(
            f"rates {sorted(rates)}: the grid's steps differ ({sorted(ratios)}); give an even grid"
        )
    return ratios.pop() if ratios else 1.0


def movement(best: pd.DataFrame, factors: dict[str, float]) -> dict:
    """``{arm: {seed: moves}}``: how far the best rate moves across the widths in the arm's grid steps
    (the largest index minus the smallest) and its shift from the narrowest to the widest width
    (positive: the wider model wants a larger rate), both also in factors of 2 (grid steps times
    log2 of the arm's grid factor, ``factors``)."""
    out: dict = {}
    for (p, seed), rows in best.groupby(["parametrization", "seed"]):
        rows = rows.sort_values("width")
        index, per_step = rows["grid_index"], math.log2(factors[p])
        spread, shift = int(index.max() - index.min()), int(index.iloc[-1] - index.iloc[0])
        out.setdefault(p, {})[seed] = {
            "range": spread,
            "narrow_to_wide": shift,
            "range_in_factors_of_2": round(spread * per_step, 6),
            "narrow_to_wide_in_factors_of_2": round(shift * per_step, 6),
        }
    return out


def plot(runs: pd.DataFrame, path: Path, steps: int) -> None:
    """Loss against rate (log x), one line per width (the seed-mean) and the seeds' range as a band,
    one panel per arm; a diverged run is left out of its line."""
    from matplotlib.figure import Figure

    arms = list(dict.fromkeys(runs["parametrization"]))
    fig = Figure(figsize=(5 * len(arms), 4), layout="constrained")
    axes = fig.subplots(1, len(arms), sharey=True, squeeze=False)[0]
    for ax, p in zip(axes, arms):
        for width, rows in runs[runs["parametrization"] == p].groupby("width"):
            by_rate = rows.groupby("lr")["held_out_loss"]
            line = ax.plot(by_rate.mean().index, by_rate.mean(), marker="o", label=f"width {width}")
            ax.fill_between(
                by_rate.min().index, by_rate.min(), by_rate.max(), alpha=0.2, color=line[0].get_color()
            )
        ax.set(xscale="log", xlabel="AdamW learning rate (log)", title=f"{p}, {steps} steps")
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"held-out loss (nats/char), mean of {runs['seed'].nunique()} seeds")
    low = runs["held_out_loss"].min()
    axes[0].set_ylim(low - 0.05, min(runs["held_out_loss"].max(), low + 1.5) + 0.05)
    axes[-1].legend(fontsize="small")
    fig.savefig(path, dpi=110)


def summarise(runs: pd.DataFrame, out: Path, steps: int, wall_seconds: float) -> dict:
    """Write every run, the best rates and their movement (json) and the plot into ``out``."""
    runs.to_csv(out / "lr_transfer.csv", index=False)
    grids = {
        p: sorted(rows["lr"].unique().tolist()) for p, rows in runs.groupby("parametrization", sort=False)
    }
    factors = {p: grid_factor(grid) for p, grid in grids.items()}
    best = best_rates(runs)
    summary = {
        "steps": steps,
        "batch": [BATCH, SEQ],
        "base_width": BASE_WIDTH,
        "grid": grids,
        "grid_factor": factors,
        "wall_seconds": round(wall_seconds, 1),
        "best": best.to_dict(orient="records"),
        "movement_in_grid_steps": movement(best, factors),
    }
    (out / "lr_transfer.json").write_text(json.dumps(summary, indent=1))
    plot(runs, out / "lr_transfer.png", steps)
    print(best[best["seed"] == "mean"].to_string(index=False))
    print(json.dumps(summary["movement_in_grid_steps"]))
    return summary


def merge(folders: list[Path], out: Path) -> int:
    """The lanes' runs (each folder's ``lr_transfer.csv`` and ``.json``) summarised together in ``out``."""
    missing = [
        f for f in folders if not (f / "lr_transfer.csv").is_file() or not (f / "lr_transfer.json").is_file()
    ]
    if missing:
        print(
            f"--merge {missing[0]}: no lr_transfer.csv and .json there; give folders this script wrote",
            file=sys.stderr,
        )
        return 2
    parts = [json.loads((f / "lr_transfer.json").read_text()) for f in folders]
    if len({part["steps"] for part in parts}) > 1:
        print(
            f"--merge: the folders ran different steps ({[p['steps'] for p in parts]}); merge one budget",
            file=sys.stderr,
        )
        return 2
    runs = pd.concat([pd.read_csv(f / "lr_transfer.csv") for f in folders], ignore_index=True)
    out.mkdir(parents=True, exist_ok=True)
    summarise(runs, out, parts[0]["steps"], sum(part["wall_seconds"] for part in parts))
    return 0


def rates(exponents: list[int]) -> list[float]:
    return [2.0**-e for e in exponents]


def evenly_spaced(exponents: list[int]) -> bool:
    """Whether a grid's exponents are distinct and a constant step apart, so that its moves count in
    grid steps (one exponent is a grid too)."""
    steps = {b - a for a, b in zip(sorted(exponents), sorted(exponents)[1:])}
    return len(steps) <= 1 and 0 not in steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data/tinyshakespeare.txt"))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seeds", type=int, nargs="+", default=SEEDS)
    parser.add_argument("--widths", type=int, nargs="+", default=WIDTHS)
    parser.add_argument("--arms", nargs="+", choices=list(KNOWN_ARMS), default=ARMS)
    parser.add_argument("--sp-rates", type=int, nargs="+", default=RATE_EXPONENTS, help="exponents e of 2^-e")
    parser.add_argument(
        "--mup-rates", type=int, nargs="+", default=RATE_EXPONENTS, help="for mup and mup-tied"
    )
    parser.add_argument("--merge", type=Path, nargs="+", help="summarise these folders' runs together")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.out)
    if not args.data.is_file():
        print(f"--data {args.data}: no such file; give the path of tinyshakespeare.txt", file=sys.stderr)
        return 2
    for option, exponents in (("--sp-rates", args.sp_rates), ("--mup-rates", args.mup_rates)):
        if not evenly_spaced(exponents):
            print(
                f"{option} {' '.join(map(str, exponents))}: give evenly spaced, distinct exponents (11 10 9)",
                file=sys.stderr,
            )
            return 2
    grids = {arm: rates(args.sp_rates if arm == "sp" else args.mup_rates) for arm in args.arms}
    args.out.mkdir(parents=True, exist_ok=True)
    ids, vocab = character_ids(args.data)
    split = int(0.9 * len(ids))
    held_out = windows(ids[split:], HELD_OUT_WINDOWS, torch.Generator().manual_seed(0))
    started = time.perf_counter()
    rows = []
    for arm, grid in grids.items():
        for width in args.widths:
            for seed in args.seeds:
                for lr in grid:
                    rows.append(train_once(ids[:split], held_out, vocab, width, lr, arm, seed, args.steps))
                    print(json.dumps(rows[-1]), flush=True)
    summarise(pd.DataFrame(rows), args.out, args.steps, time.perf_counter() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
