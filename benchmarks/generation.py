"""Greedy decoding: attnlab's ``generate`` with the KV cache, without it, and Hugging Face ``generate``.

Both models have the same weights (the attnlab one is mapped from the Hugging Face one), decode
the same random prompt greedily, and never stop early (no end-of-sequence token). For the
GPT-2-small size the floor is memory bandwidth: every token reads all weights once, so
``floor tokens/s = measured read bandwidth / weight bytes``; the table reports the % of it reached.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import nn

from attnlab.generate import generate
from benchmarks import models
from benchmarks.common import Row, Settings, best, interleaved, ratio_row, speedup
from benchmarks.decode_floor import compiled_floor, greedy_floor
from benchmarks.models import GPTSize

SECTION = "generation"
PROMPT_LEN = 8
KV_TARGET, HF_TARGET, FLOOR_TARGET = 5.0, 3.0, 80.0


def read_bandwidth(settings: Settings) -> float:
    """Memory read bandwidth in bytes/s: the best of several sums over a buffer far larger than the caches."""
    n_bytes = settings.pick(full=2**30, quick=2**29, tiny=2**24)
    buffer = torch.ones(n_bytes // 4)
    seconds = best(lambda: buffer.sum(), repeats=settings.pick(full=10, quick=5, tiny=2))
    return n_bytes / seconds


def weight_bytes(model: nn.Module) -> int:
    """Bytes of weights one decoding step reads: all parameters but the position table (one row is read).

    A tied token embedding is counted once: the output projection reads all of it.
    """
    skip = {id(model.embed.pos.weight)} if hasattr(model.embed.pos, "weight") else set()
    return sum(p.numel() * p.element_size() for p in model.parameters() if id(p) not in skip)


def decoders(size: GPTSize, new_tokens: int) -> tuple[nn.Module, nn.Module, torch.Tensor]:
    """The Hugging Face model, its attnlab twin (eval mode) and a prompt (batch, PROMPT_LEN)."""
    hf = models.hf_gpt2(size, seq_len=max(1024, PROMPT_LEN + new_tokens)).eval()
    hf.generation_config.eos_token_id = None  # decode every token asked for
    hf.generation_config.pad_token_id = 0
    ours = models.twin(hf).eval()
    prompt = torch.randint(
        0, size.vocab, (size.batch, PROMPT_LEN), generator=torch.Generator().manual_seed(0)
    )
    return hf, ours, prompt


def contenders(
    hf: nn.Module, ours: nn.Module, prompt: torch.Tensor, new_tokens: int, with_no_cache: bool
) -> dict[str, Callable[[], object]]:
    """attnlab and HF ``generate``; with ``with_no_cache`` also attnlab without a cache, and at batch 1 the
    hand-written eager floor and its static-shape twin under ``torch.compile`` (``benchmarks.decode_floor``)."""
    mask = torch.ones_like(prompt)
    fns = {
        "cache": lambda: generate(ours, prompt, max_new_tokens=new_tokens, temperature=0),
        "HF": lambda: hf.generate(prompt, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False),
    }
    if with_no_cache:
        fns["no cache"] = lambda: generate(
            ours, prompt, max_new_tokens=new_tokens, temperature=0, use_cache=False
        )
        if prompt.shape[0] == 1:
            fns["floor"] = lambda: greedy_floor(ours, prompt, new_tokens)
            fns["compiled floor"] = compiled_floor(ours, prompt, new_tokens)
    return fns


def same_tokens(hf: nn.Module, ours: nn.Module, prompt: torch.Tensor, n: int) -> str:
    """Whether both greedy decodings agree on the first ``n`` tokens (they may part at a near-tie), and
    at batch 1 whether the hand-written floor decodes them too (it computes the same thing)."""
    mine = torch.tensor(generate(ours, prompt, max_new_tokens=n, temperature=0))
    if prompt.shape[0] == 1 and not torch.equal(mine, torch.tensor(greedy_floor(ours, prompt, n))):
        return "the hand-written floor decodes other tokens"
    with torch.no_grad():
        theirs = hf.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, do_sample=False
        )
    return (
        "same greedy tokens as HF"
        if torch.equal(mine, theirs[:, prompt.shape[1] :])
        else "tokens differ from HF"
    )


def measure(size: GPTSize, new_tokens: int, repeats: int, with_no_cache: bool) -> tuple[dict, str, int]:
    """Seconds per ``generate`` call of each contender, the token check, and attnlab's weight bytes."""
    hf, ours, prompt = decoders(size, new_tokens)
    check = same_tokens(hf, ours, prompt, min(new_tokens, 32))
    times = interleaved(contenders(hf, ours, prompt, new_tokens, with_no_cache), repeats=repeats, warmup=1)
    return times, check, weight_bytes(ours)


def tok_s(times: list[float], size: GPTSize, new_tokens: int) -> float:
    return size.batch * new_tokens / sorted(times)[len(times) // 2]


def small_rows(settings: Settings) -> list[Row]:
    """The 4-layer size at batch 1 and 8: cache vs no cache, and vs Hugging Face."""
    new_tokens = settings.pick(full=512, quick=512, tiny=16)
    base = settings.pick(full=models.GPT_4L, quick=models.GPT_4L, tiny=models.GPT_TINY)
    rows = []
    for batch, repeats in settings.pick(full=[(1, 3), (8, 2)], quick=[(1, 2), (8, 1)], tiny=[(1, 2), (2, 1)]):
        size = dataclasses.replace(base, batch=batch)
        print(f"[generation] {size.name} batch {batch}, {new_tokens} new tokens", flush=True)
        times, check, _ = measure(size, new_tokens, repeats, with_no_cache=True)
        speeds = {k: tok_s(v, size, new_tokens) for k, v in times.items()}
        absolute = ", ".join(f"{k} {v:,.0f} tok/s" for k, v in speeds.items())
        config = f"{size.name} dims, B{batch}, prompt {PROMPT_LEN} + {new_tokens} new, greedy, fp32"
        rows.append(
            ratio_row(
                SECTION,
                "tokens/s, KV cache ÷ no cache",
                config,
                speedup(times, "cache", "no cache"),
                f"{absolute}; {repeats} rounds",
                KV_TARGET if not settings.tiny else None,
            )
        )
        target = HF_TARGET if batch == 1 and not settings.tiny else None
        rows.append(
            ratio_row(
                SECTION,
                "tokens/s, attnlab generate ÷ HF generate",
                config,
                speedup(times, "cache", "HF"),
                f"{absolute}; {check}",
                target,
            )
        )
        rows[-1].extra = {"speeds": speeds, "batch": batch, "size": size.name}
        if "floor" in times:
            rows.append(
                ratio_row(
                    SECTION,
                    "tokens/s, hand-written eager floor ÷ HF generate",
                    config,
                    speedup(times, "floor", "HF"),
                    "benchmarks/decode_floor.py: the ATen calls alone, no framework; no eager "
                    f"generate gets past it; attnlab at {speeds['cache'] / speeds['floor']:.0%} of it",
                )
            )
        if "compiled floor" in times:
            rows.append(
                ratio_row(
                    SECTION,
                    "tokens/s, compiled floor ÷ HF generate",
                    config,
                    speedup(times, "compiled floor", "HF"),
                    "decode_floor.compiled_floor: the floor's step with static shapes under torch.compile, "
                    f"one graph; {speeds['compiled floor'] / speeds['floor']:.2f}x the eager floor",
                )
            )
    return rows


def floor_rows(settings: Settings, bandwidth: float) -> list[Row]:
    """GPT-2-small size at batch 1: % of the bandwidth floor, and vs Hugging Face."""
    size = settings.pick(full=models.GPT2_SMALL, quick=models.GPT2_SMALL, tiny=models.GPT_TINY)
    new_tokens, repeats = settings.pick(full=(512, 3), quick=(128, 1), tiny=(16, 1))
    print(f"[generation] {size.name} batch 1, {new_tokens} new tokens", flush=True)
    times, check, n_bytes = measure(size, new_tokens, repeats, with_no_cache=False)
    floor = bandwidth / n_bytes
    ours_speed, hf_speed = tok_s(times["cache"], size, new_tokens), tok_s(times["HF"], size, new_tokens)
    per_round = [100 * new_tokens / t / floor for t in times["cache"]]
    config = f"{size} ({size.name}), prompt {PROMPT_LEN} + {new_tokens} new, greedy"
    detail = (
        f"attnlab {ours_speed:.1f} tok/s, HF {hf_speed:.1f} tok/s ({100 * hf_speed / floor:.0f}% of floor); "
        f"floor {floor:.1f} tok/s = {bandwidth / 1e9:.1f} GB/s read ÷ {n_bytes / 1e6:.3g} MB of weights"
    )
    target = FLOOR_TARGET if not settings.tiny else None
    return [
        Row(
            SECTION,
            "% of the memory-bandwidth floor, attnlab generate",
            config,
            sorted(per_round)[len(per_round) // 2],
            min(per_round),
            max(per_round),
            "%",
            detail,
            target,
            f"≥ {FLOOR_TARGET:g}%" if target else "",
        ),
        ratio_row(
            SECTION,
            "tokens/s, attnlab generate ÷ HF generate",
            config,
            speedup(times, "cache", "HF"),
            f"{repeats} rounds; {check}",
        ),
    ]


def run(settings: Settings) -> list[Row]:
    values = [read_bandwidth(settings) for _ in range(3)]
    bandwidth = max(values)
    print(f"[generation] read bandwidth {bandwidth / 1e9:.1f} GB/s", flush=True)
    size = settings.pick(full="1 GiB", quick="512 MiB", tiny="16 MiB")
    row = Row(
        SECTION,
        "memory read bandwidth (GB/s)",
        f"torch sum over a {size} fp32 buffer, best of N",
        bandwidth / 1e9,
        min(values) / 1e9,
        bandwidth / 1e9,
        "GB/s",
        "the floor for decoding; 3 measurements",
    )
    return [row, *small_rows(settings), *floor_rows(settings, bandwidth)]
