"""What costs μP against a tuned sp at width 128: μP with one of its pieces replaced by
sp's at a time, each arm at a few rates around its optimum, against sp at its own rates, on the
transfer study's set-up (lr_transfer.py: a 2-layer, 2-head GPT with an untied readout, 8 windows of
64 characters a step of tinyshakespeare, attnlab's AdamW, constant rate; base width 16).

    OMP_NUM_THREADS=1 python experiments/mup/ablation.py [--steps 500] [--seeds 0] [--width 128]
        [--data /work/shared/data/tinyshakespeare.txt] [--out experiments/mup/results/ablation_500]

Arms (at the width, m = width / 16):
  sp                    the standard parametrisation
  mup                   attnlab's μP (attnlab.models.parametrization)
  mup, sp attn scale    μP with sp's 1/sqrt(d_head) attention scale (``model.attn_scale``) instead of
                        sqrt(base d_head)/d_head
  mup, queries not 0    μP without the zero-initialised queries
  mup, readout not 0    μP with the untied readout initialised as sp's (``model.init_std``), not at
                        zero (its logits still times 1/m)
The embedding rate is not an arm: attnlab's μP leaves the embeddings' rate and initialisation as sp
has them (``MUP[ParamRole.embedding]`` is the identity), so it cannot be what differs.
Written to ``--out``: ``ablation.csv`` (every run) and ``ablation.md`` (per arm the held-out loss at
each rate, seed-mean, its best and the difference from sp's best).
"""

from __future__ import annotations

import argparse
import math
import time
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pandas as pd
import torch
from lr_transfer import BATCH, HELD_OUT_WINDOWS, N_HEADS, SEQ, WIDTHS, character_ids, next_char_loss, windows

import attnlab.models.parametrization as parametrization
from attnlab.models import build_model
from attnlab.schema.model import GPTConfig
from attnlab.schema.optim import AdamWConfig
from attnlab.tasks.optim import adamw

SP_RATES = [2.0**-e for e in (10, 9, 8)]  # a x2 grid around sp's 60-step optimum at width 128 (2^-10)
MUP_RATES = [2.0**-e for e in (7, 6, 5)]  # and around μP's (2^-6 at every width)
ARMS = {
    "sp": SP_RATES,
    "mup": MUP_RATES,
    "mup, sp attn scale": MUP_RATES,
    "mup, queries not 0": MUP_RATES,
    "mup, readout not 0": MUP_RATES,
}


@contextmanager
def arm_patches(arm: str):
    """The arm's change to attnlab's μP while its model is built."""
    if arm == "mup, queries not 0":
        with mock.patch.object(parametrization, "zero_queries", lambda attention: None):
            yield
    elif arm == "mup, readout not 0":
        table = dict(parametrization.MUP)
        table[parametrization.ParamRole.readout] = parametrization.RoleScaling()
        with mock.patch.object(parametrization, "MUP", table):
            yield
    else:
        yield


def train_once(train, held_out, vocab: int, width: int, lr: float, arm: str, seed: int, steps: int) -> dict:
    torch.manual_seed(seed)
    head_dim = width // N_HEADS
    cfg = GPTConfig(
        d_model=width,
        n_layers=2,
        n_heads=N_HEADS,
        vocab_size=vocab,
        max_seq_len=SEQ,
        dropout=0.0,
        tie_embeddings=False,
        parametrization="sp" if arm == "sp" else "mup",
        mup_base_width=WIDTHS[0],
        attn_scale=1 / math.sqrt(head_dim) if arm == "mup, sp attn scale" else None,
    )
    with arm_patches(arm):
        model = build_model(cfg)
    optimizer = adamw(model, AdamWConfig(lr=lr, weight_decay=0.0), fused=False)
    batches = torch.Generator().manual_seed(1000 + seed)
    for _ in range(steps):
        loss = next_char_loss(model, windows(train, BATCH, batches))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        held = next_char_loss(model, held_out).item()
    return {
        "arm": arm,
        "width": width,
        "seed": seed,
        "lr": lr,
        "held_out_loss": held if math.isfinite(held) else float("nan"),
    }


def table(runs: pd.DataFrame) -> list[str]:
    mean = runs.groupby(["arm", "lr"], sort=False)["held_out_loss"].mean()
    sp_best = mean["sp"].min()
    lines = [
        "| arm | rates | held-out loss at each rate | best rate | best loss | minus sp's best |",
        "|---|---|---|---|---|---|",
    ]
    for arm in ARMS:
        losses = mean[arm]
        rates = ", ".join(f"2^{round(math.log2(r))}" for r in losses.index)
        best = losses.idxmin()
        lines.append(
            f"| {arm} | {rates} | {', '.join(f'{x:.3f}' for x in losses)} | 2^{round(math.log2(best))} "
            f"| {losses.min():.3f} | {losses.min() - sp_best:+.3f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data/tinyshakespeare.txt"))
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "ablation_500")
    args = parser.parse_args()
    ids, vocab = character_ids(args.data)
    split = int(0.9 * len(ids))  # as lr_transfer.py
    held_out = windows(ids[split:], HELD_OUT_WINDOWS, torch.Generator().manual_seed(0))
    start, rows = time.time(), []
    for seed in args.seeds:
        for arm, rates in ARMS.items():
            for lr in rates:
                rows.append(train_once(ids[:split], held_out, vocab, args.width, lr, arm, seed, args.steps))
                print(rows[-1], flush=True)
    runs = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    runs.to_csv(args.out / "ablation.csv", index=False)
    wall = time.time() - start
    lines = [
        f"# μP's pieces at width {args.width}, {args.steps} steps, seeds {' '.join(map(str, args.seeds))}"
        f" (seed-mean held-out loss, nats/char)",
        "",
        *table(runs),
        "",
        f"wall time: {wall:.0f} s for {len(rows)} runs, one torch thread, torch {torch.__version__}",
    ]
    (args.out / "ablation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
