"""Coordinate check (Yang et al. 2021, μP's check): how the activations of each layer group grow with
the width during the first steps of training, under one learning rate for every width, in the
standard parametrisation (sp) and in μP (mup).

    .venv/bin/python experiments/mup/coord_check.py [--steps 5] [--lr 3e-3] [--out experiments/mup/results]
    .venv/bin/python experiments/mup/coord_check.py --mixers --seeds 3   # each mixer's GPT, μP only

A GPT of 2 layers and 2 heads is built at widths 32, 64, 128 and 256 (×1..×8 of the base, the heads
widening; an untied readout), trained by attnlab's AdamW (its per-group rates under mup) on windows
of the pydoc corpus, and the RMS of a coordinate of each group's output (``attnlab.models.coordinates``)
is recorded on a fixed batch before each step. Written for each parametrisation: the sizes
(``coord_check_<p>.csv``), the slope of log RMS against log width per group and step
(``coord_check_<p>.json``) and one panel per group (``coord_check_<p>.png``). Under a width-stable
parametrisation every slope stays near 0.
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
from attnlab.schema.mixers import Mixer
from attnlab.schema.model import GPTConfig
from attnlab.schema.optim import AdamWConfig
from attnlab.schema.pos import LearnedPos, RopePos
from attnlab.tasks.optim import adamw

WIDTHS = [32, 64, 128, 256]
N_HEADS, VOCAB, SEQ, BATCH = 2, 64, 32, 8  # the heads widen with the model (μP's width scaling)


def text_windows(seed: int) -> torch.Tensor:
    """BATCH windows of SEQ + 1 characters of Python's pydoc topics (the corpus every install has),
    as ids of its VOCAB most frequent characters (the rarer ones folded into the last id)."""
    from collections import Counter
    from pydoc_data.topics import topics

    text = "".join(topics[key] for key in sorted(topics))
    common = [c for c, _ in Counter(text).most_common(VOCAB - 1)]
    index = {c: i for i, c in enumerate(common)}
    ids = torch.tensor([index.get(c, VOCAB - 1) for c in text])
    starts = torch.randint(0, len(ids) - SEQ - 1, (BATCH,), generator=torch.Generator().manual_seed(seed + 1))
    return ids[starts[:, None] + torch.arange(SEQ + 1)]


def sizes_during_training(
    width: int, steps: int, lr: float, parametrization: str, seed: int = 0, mixer: str | None = None
) -> list[dict]:
    """One row per step and group: the group's RMS at ``width`` before that step's update, the model
    built in ``parametrization`` (sp, or mup with the narrowest width as its base) and trained by
    attnlab's AdamW (its per-group rates). ``mixer``: every layer's token mixer, with RoPE (None:
    softmax attention with learned positions, the check's original model)."""
    torch.manual_seed(seed)
    cfg = GPTConfig(
        mixer=mixer or Mixer.attention,
        pos=RopePos() if mixer else LearnedPos(),
        d_model=width,
        n_layers=2,
        n_heads=N_HEADS,
        vocab_size=VOCAB,
        max_seq_len=SEQ,
        dropout=0.0,
        tie_embeddings=False,  # an untied readout, which μP initialises at zero
        parametrization=parametrization,
        mup_base_width=WIDTHS[0],
    )
    model = build_model(cfg)
    optimizer = adamw(model, AdamWConfig(lr=lr, weight_decay=0.0), fused=False)
    tokens = text_windows(seed)
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


def coordinate_check(
    steps: int,
    lr: float,
    parametrization: str = "sp",
    widths: list[int] = WIDTHS,
    mixer: str | None = None,
    seeds: int = 1,
) -> tuple[pd.DataFrame, dict]:
    """The sizes at every width and step, and ``{step: {group: slope}}`` (``mixer``: as
    ``sizes_during_training``). With ``seeds`` > 1 each size is the mean over that many seeds
    (initialisations and batches): at these small widths one seed's slope moves by up to ±0.2."""
    rows = [
        row
        for seed in range(seeds)
        for width in widths
        for row in sizes_during_training(width, steps, lr, parametrization, seed=seed, mixer=mixer)
    ]
    sizes = pd.DataFrame(rows).groupby(["width", "step", "group"], as_index=False)["rms"].mean()
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
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--mixers", action="store_true", help="each mixer's slopes in μP instead")
    parser.add_argument("--seeds", type=int, default=1, help="sizes averaged over this many seeds")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.mixers:
        check_mixers(args.steps, args.lr, args.out, args.seeds)
        return
    for parametrization in ("sp", "mup"):
        sizes, slopes = coordinate_check(args.steps, args.lr, parametrization, seeds=args.seeds)
        name = f"coord_check_{parametrization}"
        sizes.to_csv(args.out / f"{name}.csv", index=False)
        (args.out / f"{name}.json").write_text(json.dumps({"lr": args.lr, "slopes": slopes}, indent=1))
        plot(sizes, args.out / f"{name}.png", f"coordinate check, {parametrization}, AdamW lr {args.lr:g}")
        for step in (0, args.steps):
            said = ", ".join(f"{group} {slope:+.2f}" for group, slope in slopes[step].items())
            print(f"{parametrization} step {step}: {said}")


def check_mixers(steps: int, lr: float, out: Path, seeds: int) -> None:
    """μP's slopes of each mixer's GPT (sizes averaged over ``seeds``), written to
    ``coord_check_mup_<mixer>.json`` and printed."""
    for mixer in Mixer:
        _, slopes = coordinate_check(steps, lr, "mup", mixer=str(mixer), seeds=seeds)
        path = out / f"coord_check_mup_{mixer}.json"
        record = {"lr": lr, "mixer": str(mixer), "seeds": seeds, "slopes": slopes}
        path.write_text(json.dumps(record, indent=1))
        for step in (0, steps):
            said = ", ".join(f"{group} {slope:+.2f}" for group, slope in slopes[step].items())
            print(f"mup {mixer} step {step}: {said}")
    (out / "coord_check_mup_mixers.md").write_text(mixer_table(out, steps))


MIXER_ROWS = {  # the README's row names of the coordinate groups
    "embedding": "embedding",
    "attention output": 'mixer output ("attention output")',
    "feed-forward output": "feed-forward output",
    "residual stream": "residual stream",
    "logits": "logits",
}


def mixer_table(out: Path, steps: int = 5) -> str:
    """The README's table of each mixer's slopes, at initialisation / after ``steps`` steps, from the
    ``coord_check_mup_<mixer>.json`` files in ``out`` ("zero": logits that are all zero at the start)."""

    def cell(slope: float) -> str:
        return "zero" if slope != slope else f"{slope:+.2f}"  # NaN: no spread to fit

    slopes = {m: json.loads((out / f"coord_check_mup_{m}.json").read_text())["slopes"] for m in Mixer}
    lines = ["| group | " + " | ".join(str(m) for m in Mixer) + " |", "|---" * (len(Mixer) + 1) + "|"]
    for group, row in MIXER_ROWS.items():
        cells = [f"{cell(slopes[m]['0'][group])} / {cell(slopes[m][str(steps)][group])}" for m in Mixer]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
