"""The training-step cost of each attention hook and layout against the plain block, side by side.

A small decoder (L4 H4 d128, grouped-query 2 key/value heads, RoPE, T128, B8, fp32) takes AdamW steps
(forward, backward, update) in one process, every variant in turn (the order reversed every round),
after warm-up. Each variant's time is divided by the plain block's of the same round: the table prints
the median ratio with its min - max over the rounds, at the default thread count and at one thread.
Soft-capping cannot run on SDPA, so it is compared with the plain block on the explicit path too. QK-clip
is a step plus its clip (one more forward of the batch, no gradients); the largest-logit metric a step
with the (B, H, T, T) scores computed beside the attention.

    nice python -m benchmarks.attention_hooks [--rounds 15]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import replace

import torch
import torch.nn.functional as F

from attnlab.blocks.qk_clip import clip_qk, recording
from attnlab.models import build_model
from attnlab.schema.model import GPTConfig
from attnlab.schema.pos import RopePos
from benchmarks.common import interleaved, machine, spread

VOCAB, T, B = 256, 128, 8
BASE = GPTConfig(
    vocab_size=VOCAB, d_model=128, n_layers=4, n_heads=4, n_kv_heads=2, max_seq_len=T, pos=RopePos()
)
VARIANTS = {  # name -> (settings, extra per step)
    "plain (SDPA)": ({}, None),
    "plain (explicit)": (dict(attn_backend="explicit"), None),
    "soft-capping (explicit)": (dict(attn_backend="explicit", attn_softcap=50.0, logit_softcap=30.0), None),
    "learned sinks (SDPA extra key)": (dict(attn_sink="learned"), None),
    "learned sinks (explicit)": (dict(attn_sink="learned", attn_backend="explicit"), None),
    "off-by-one (SDPA extra key)": (dict(attn_sink="off_by_one"), None),
    "gate, headwise": (dict(attn_gate="headwise"), None),
    "gate, elementwise": (dict(attn_gate="elementwise"), None),
    "partial RoPE 0.25": (dict(pos=RopePos(rope_fraction=0.25)), None),
    "value residual": (dict(value_residual=0.5), None),
    "post-norms": (dict(post_norms=True), None),
    "layout sliding:full, window 32": (dict(attn_window=32, layout="sliding full ..."), None),
    "layout NoPE every 4th": (dict(layout="3*pos nope ..."), None),
    "hooks at identity (cap inf, gate open, mix 0)": (
        dict(
            attn_softcap=float("inf"), attn_gate="headwise", attn_gate_offset=float("inf"), value_residual=0.0
        ),
        None,
    ),
    "QK-clip at 30 (step + clip)": ({}, "clip"),
    "max-logit metric": ({}, "record"),
}


def training_step(settings: dict, extra: str | None) -> Callable[[], None]:
    """One AdamW step of the variant on a fixed batch (the clip or the metric where ``extra`` says)."""
    torch.manual_seed(0)
    model = build_model(replace(BASE, **settings)).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, VOCAB, (B, T + 1), generator=torch.Generator().manual_seed(1))

    def loss() -> torch.Tensor:
        return F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())

    def step() -> None:
        opt.zero_grad()
        if extra == "record":
            with recording(model):
                value = loss()
        else:
            value = loss()
        value.backward()
        opt.step()
        if extra == "clip":
            clip_qk(model, 30.0, lambda: model(ids[:, :-1]))

    return step


def table(rounds: int) -> list[str]:
    steps = {name: training_step(*variant) for name, variant in VARIANTS.items()}
    times = interleaved(steps, repeats=rounds, warmup=2)
    plain = times["plain (SDPA)"]
    lines = [f"{torch.get_num_threads()} threads: plain block {1e3 * spread(plain)[1]:.1f} ms a step"]
    for name, t in times.items():
        low, median, high = spread([v / p for v, p in zip(t, plain, strict=True)])
        lines.append(f"| {name} | {median:.2f}× | {low:.2f}× – {high:.2f}× |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    print(
        f"machine: {machine()}; L4 H4 (2 kv) d128 T{T} B{B} fp32, AdamW step, ratio to the plain block (SDPA)"
    )
    for threads in (torch.get_num_threads(), 1):
        torch.set_num_threads(threads)
        print("\n".join(table(args.rounds)), flush=True)


if __name__ == "__main__":
    main()
