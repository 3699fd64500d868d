"""Mixers: what each keeps per token to decode, and what a training step costs, against softmax attention.

At one model size (d 512, 8 heads of 64, float32 weights, the cache in bfloat16 where a KV cache is
kept), the decode cache of one layer after 256 tokens, counted from the tensors the caches hold:
multi-head attention (8 key/value heads), grouped-query attention (2), multi-head latent attention
(DeepSeek-V3's proportions: kv_lora_rank = 4 head_dim, a rotary key of head_dim / 2) and gated
DeltaNet (a state of 8 heads of 64 x 64 and the convolution's last 3 inputs, float32), whose size
does not grow with the length: its figure per token is the whole state over the tokens decoded.

Then the training step (forward, backward, AdamW) of a 4-layer GPT (d 256, 8 heads, T 256, batch 8)
with each mixer in every layer, and Qwen3-Next's hybrid (3 gated DeltaNet : 1 attention), each as a
ratio of its time to the softmax-attention GPT's, rounds interleaved; at the default threads and at 1.

    nice python -m benchmarks.mixers [--rounds 5]            # prints the table
    nice python -m benchmarks.run --sections mixers           # the same as a section of results.md
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import replace

import torch
import torch.nn.functional as F

from attnlab.blocks.attention import SelfAttention
from attnlab.blocks.cache import AttentionCache
from attnlab.blocks.mixers import GatedDeltaNet, LatentAttention, LatentCache, RecurrentCache
from attnlab.blocks.positional import RotaryPositionalEncoding
from attnlab.blocks.view import AttentionView
from attnlab.models import build_model
from attnlab.schema.model import GPTConfig
from attnlab.schema.pos import pos_config
from benchmarks.common import Row, Settings, interleaved, ratio_row, speedup

SECTION = "mixers"
D, HEADS, HD, TOKENS = 512, 8, 64, 256
STEP = GPTConfig(
    d_model=256,
    n_layers=4,
    n_heads=8,
    vocab_size=256,
    max_seq_len=256,
    norm="rmsnorm",
    pos=pos_config("rope"),
)
STEP_TINY = replace(STEP, d_model=32, n_heads=4, max_seq_len=16)
BATCH, SEQ = 8, 256
HYBRID = ["deltanet", "deltanet", "deltanet", "attention"]


def cache_modules() -> dict[str, tuple[torch.nn.Module, object]]:
    """One layer of each kind at the cache size, and an empty cache of its kind."""
    rope = RotaryPositionalEncoding(HD)
    return {
        "MHA (8 kv heads)": (SelfAttention(D, HEADS, HEADS, pos=rope), AttentionCache()),
        "GQA (2 kv heads)": (SelfAttention(D, HEADS, 2, pos=rope), AttentionCache()),
        "MLA (r 256 + rope 32)": (
            LatentAttention(
                D, HEADS, kv_lora_rank=4 * HD, qk_nope_head_dim=HD, qk_rope_head_dim=HD // 2, v_head_dim=HD
            ),
            LatentCache(),
        ),
        "gated DeltaNet (8 x 64 x 64)": (
            GatedDeltaNet(D, HEADS, head_k_dim=HD, head_v_dim=HD),
            RecurrentCache(),
        ),
    }


def cache_bytes(module: torch.nn.Module, cache: object, tokens: int) -> int:
    """Bytes the cache holds after decoding ``tokens`` tokens one at a time (batch 1; a KV or latent
    cache in bfloat16, the recurrent state in the float32 its rule keeps)."""
    module = module.to(torch.bfloat16) if not isinstance(module, GatedDeltaNet) else module
    dtype = next(module.parameters()).dtype
    x = torch.randn(1, tokens, D, dtype=dtype)
    with torch.no_grad():
        for t in range(tokens):
            module(x[:, t : t + 1], AttentionView(torch.arange(t, t + 1), causal=True), cache)
    held = [cache.conv, cache.state] if isinstance(cache, RecurrentCache) else [cache.k, cache.v]
    return sum(t.numel() * t.element_size() for t in held)


def cache_rows(tokens: int = TOKENS) -> list[Row]:
    rows = []
    for name, (module, cache) in cache_modules().items():
        total = cache_bytes(module, cache, tokens)
        constant = isinstance(cache, RecurrentCache)
        detail = (
            f"{total:,} bytes whatever the length (state and convolution inputs in float32): "
            f"{total / tokens:.0f} per token at T {tokens}, {total / 4096:.0f} at T 4096"
            if constant
            else f"{total:,} bytes after {tokens} tokens"
        )
        per = total / tokens
        rows.append(
            Row(SECTION, f"cache bytes per token, {name}", f"d {D}, one layer", per, per, per, "B", detail)
        )
    return rows


def model_of(mixer: str | list[str], shape: GPTConfig) -> torch.nn.Module:
    torch.manual_seed(0)
    if isinstance(mixer, str):
        cfg = replace(shape, mixer=mixer)
    else:
        cfg = replace(shape, layout=list(mixer))  # the layout's mixer tags, one per layer
    return build_model(cfg).train()


def training_step(model: torch.nn.Module, batch: int, seq: int) -> Callable[[], None]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.cfg.vocab_size, (batch, seq + 1), generator=g)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        loss = F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def step_rows(threads: list[int], rounds: int, tiny: bool = False) -> list[Row]:
    kinds = {"latent": "latent", "differential": "differential", "deltanet": "deltanet", "hybrid 3:1": HYBRID}
    shape, batch, seq = (STEP_TINY, 2, 16) if tiny else (STEP, BATCH, SEQ)
    steps = {"attention": training_step(model_of("attention", shape), batch, seq)}
    steps |= {name: training_step(model_of(mixer, shape), batch, seq) for name, mixer in kinds.items()}
    config = f"GPT L{shape.n_layers} d{shape.d_model} H{shape.n_heads} T{seq} B{batch}, AdamW"
    rows = []
    before = torch.get_num_threads()
    try:
        for n in threads:
            torch.set_num_threads(n)
            print(f"[mixers] training steps at {n} threads", flush=True)
            times = interleaved(steps, repeats=rounds, warmup=1)
            base = 1e3 * sorted(times["attention"])[len(times["attention"]) // 2]
            for name in kinds:
                slower = tuple(
                    1 / r for r in reversed(speedup(times, name, "attention"))
                )  # time ÷ attention's
                ms = 1e3 * sorted(times[name])[len(times[name]) // 2]
                detail = f"{ms:.0f} ms against attention's {base:.0f} ms (medians of {rounds} rounds)"
                rows.append(
                    ratio_row(SECTION, f"step time ÷ attention, {name}, {n} threads", config, slower, detail)
                )
                rows[-1].higher_is_better = False
    finally:
        torch.set_num_threads(before)
    return rows


def run(settings: Settings) -> list[Row]:
    load = os.getloadavg()[0]
    settings.notes.append(
        "ratios are a mixer's step time over softmax attention's (above 1×: slower; the method line's "
        f"'faster' is the other sections'); load average {load:.1f} on {os.cpu_count()} cores at the start: "
        "where it exceeds the cores, the rounds at the default threads compete for them (see their spread)"
    )
    rounds = settings.pick(full=5, quick=3, tiny=1)
    tokens = settings.pick(full=TOKENS, quick=TOKENS, tiny=8)
    threads = sorted({settings.threads, 1}, reverse=True)
    if settings.tiny:
        settings.notes.append("tiny: the cache after 8 tokens, one round of a d 32 model's steps")
    return cache_rows(tokens) + step_rows(threads, rounds, settings.tiny)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mixers", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tiny", action="store_true", help="smoke-test sizes")
    args = parser.parse_args()
    settings = Settings(size="tiny" if args.tiny else "full", memory=False)
    rows = cache_rows(8 if args.tiny else TOKENS) + step_rows(
        sorted({settings.threads, 1}, reverse=True), args.rounds
    )
    for row in rows:
        print(
            f"{row.measure:55s} {row.median:10.2f} {row.unit}  [{row.low:.2f}, {row.high:.2f}]  {row.detail}"
        )


if __name__ == "__main__":
    main()
