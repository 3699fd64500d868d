"""FlexAttention vs SDPA: the memory a forward pass adds, and its time, where the mask carries a bias.

A 4-layer d128 GPT (4 heads, vocabulary 65) at batch 4 and T=2048, forward only (FlexAttention has
no backward on the CPU in torch 2.13), with ``pos=none`` (SDPA's causal fast path: the reference),
``pos=alibi`` and ``pos=relative``, whose biases the SDPA path folds into a (B, H, T, T) float mask
and the flex path computes inside the kernel (``score_mod``). Memory: the peak RSS a forward adds
above the built model, after one warm-up forward (which compiles the flex kernel), in a fresh
process per case. Time: the two backends' forwards interleaved in one process, after compiling.
Target: flex adds at most half of what SDPA adds, with ALiBi and with relative bias.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from attnlab.models import build_model
from attnlab.schema.model import model_config
from attnlab.schema.pos import pos_config
from benchmarks.common import Row, Settings, interleaved, peak_memory_mib, ratio_row, speedup

SECTION = "flex"
POSITIONS = ("none", "alibi", "relative")
TARGET = 0.5  # flex's added memory ÷ SDPA's, at most, for the positional encodings with a bias
VOCAB, D_MODEL, N_LAYERS, N_HEADS = 65, 128, 4, 4


def forward_step(backend: str, pos: str, seq_len: int, batch: int) -> Callable[[], None]:
    """One forward pass (no gradients) of the GPT on ``backend`` over random tokens (batch, seq_len)."""
    torch.manual_seed(0)
    cfg = model_config(
        "gpt",
        vocab_size=VOCAB,
        d_model=D_MODEL,
        n_layers=N_LAYERS,
        n_heads=N_HEADS,
        max_seq_len=seq_len,
        pos=pos_config(pos),
        attn_backend=backend,
    )
    model = build_model(cfg).eval()
    ids = torch.randint(0, VOCAB, (batch, seq_len), generator=torch.Generator().manual_seed(0))

    def step() -> None:
        with torch.no_grad():
            model(ids)

    return step


def memory_step(backend: str, pos: str, seq_len: int, batch: int) -> Callable[[], None]:
    """The forward pass alone, for ``benchmarks.memprobe`` (called with ``warm``)."""
    return forward_step(backend, pos, seq_len, batch)


def run(settings: Settings) -> list[Row]:
    seq_len, batch = settings.pick(full=(2048, 4), quick=(2048, 4), tiny=(256, 2))
    repeats = settings.pick(full=5, quick=3, tiny=2)
    config = f"L{N_LAYERS} H{N_HEADS} d{D_MODEL} T{seq_len} B{batch} V{VOCAB} fp32 GPT, forward"
    rows = []
    for pos in POSITIONS:
        print(f"[flex] pos={pos} T={seq_len}", flush=True)
        steps = {backend: forward_step(backend, pos, seq_len, batch) for backend in ("sdpa", "flex")}
        start = time.perf_counter()
        steps["flex"]()  # compiles the kernel for this score_mod and these shapes
        compile_s = time.perf_counter() - start
        times = interleaved(steps, repeats=repeats, warmup=1)
        ms = {b: 1e3 * sorted(t)[len(t) // 2] for b, t in times.items()}
        mib = {
            b: peak_memory_mib(settings, "flex", warm=True, backend=b, pos=pos, seq_len=seq_len, batch=batch)
            for b in steps
        }
        detail = (
            f"SDPA adds {mib['sdpa']:.0f} MiB, flex {mib['flex']:.0f} MiB (peak RSS over the built, "
            f"warmed model, own process); SDPA {ms['sdpa']:.0f} ms, flex {ms['flex']:.0f} ms per forward; "
            f"first flex forward (compilation) {compile_s:.0f} s"
        )
        share = mib["flex"] / mib["sdpa"] if mib["sdpa"] > 0 else float("nan")
        target = TARGET if pos != "none" else None
        rows.append(
            Row(
                SECTION,
                "memory a forward adds, flex ÷ SDPA",
                f"{config}, pos={pos}",
                share,
                share,
                share,
                "×",
                detail,
                target,
                f"≤ {TARGET:g}×" if target is not None else "",
                higher_is_better=False,
            )
        )
        rows[-1].extra = {"pos": pos, "ms": ms, "mib": mib}
        rows.append(
            ratio_row(
                SECTION,
                "time, SDPA ÷ flex (flex speed-up)",
                f"{config}, pos={pos}",
                speedup(times, "flex", "sdpa"),
                f"{repeats} rounds",
            )
        )
    return rows
