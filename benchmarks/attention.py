"""Attention: the fused SDPA path vs the explicit path that returns the weights, over sequence length.

One causal self-attention module (d 384, 6 heads of 64, batch 1), forward + backward, at sequence
lengths 128 to 2048. The explicit path is what ``record_attention`` switches on for inspection;
it materialises the (B, H, T, T) weights, so its memory grows with T² where SDPA's does not.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextlib import ExitStack

import torch

from attnlab.blocks.attention import SelfAttention, record_attention
from attnlab.blocks.backends import backend_named
from attnlab.blocks.view import AttentionView
from benchmarks.common import Row, Settings, interleaved, peak_memory_mib, ratio_row, speedup

SECTION = "attention"
D_MODEL, N_HEADS, BATCH = 384, 6, 1


def attention_step(module: SelfAttention, seq_len: int) -> Callable[[], None]:
    """Forward and backward of causal self-attention over a random (1, T, D) input."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(BATCH, seq_len, D_MODEL, generator=g, requires_grad=True)
    view = AttentionView(torch.arange(seq_len), causal=True)

    def step() -> None:
        module(x, view).sum().backward()

    return step


def memory_step(path: str, seq_len: int) -> Callable[[], None]:
    """One path alone, for ``benchmarks.memprobe``: ``sdpa`` or ``explicit``."""
    module = SelfAttention(D_MODEL, N_HEADS)
    module.backend = backend_named(path)  # "explicit" is what record_attention switches on, without its hooks
    return attention_step(module, seq_len)


def run(settings: Settings) -> list[Row]:
    lengths = settings.pick(full=[128, 256, 512, 1024, 2048], quick=[128, 512, 2048], tiny=[16, 32])
    repeats = settings.pick(full=7, quick=3, tiny=2)
    torch.manual_seed(0)
    fused = SelfAttention(D_MODEL, N_HEADS)
    explicit = copy.deepcopy(fused)
    rows = []
    with ExitStack() as stack:
        stack.enter_context(record_attention(explicit))
        for t in lengths:
            print(f"[attention] T={t}", flush=True)
            steps = {"sdpa": attention_step(fused, t), "explicit": attention_step(explicit, t)}
            times = interleaved(steps, repeats=repeats, warmup=1)
            memory = {p: peak_memory_mib(settings, "attention", path=p, seq_len=t) for p in steps}
            ms = {p: 1e3 * sorted(v)[len(v) // 2] for p, v in times.items()}
            detail = (
                f"SDPA {ms['sdpa']:.2f} ms, {memory['sdpa']:.0f} MiB; explicit {ms['explicit']:.2f} ms, "
                f"{memory['explicit']:.0f} MiB (peak RSS above imports, own process)"
            )
            config = f"causal self-attn d{D_MODEL} H{N_HEADS} B{BATCH} T{t} fwd+bwd fp32"
            rows.append(
                ratio_row(
                    SECTION,
                    "time, explicit ÷ SDPA (SDPA speed-up)",
                    config,
                    speedup(times, "sdpa", "explicit"),
                    detail,
                )
            )
            rows[-1].extra = {"seq_len": t, "ms": ms, "mib": memory}
    return rows
