"""Sizes bounded by what the machine can hold: a setting whose estimated memory exceeds the memory free
on its device is refused in one line that says the estimate, before the work starts (instead of a
MemoryError's traceback, or an hour of swapping).

The estimates count the one tensor that grows fastest with the setting (attention scores, a KV cache,
the logits); they are lower bounds, so a refusal is never wrong, and a setting that passes may still
be too large by the rest of what the model holds.
"""

from __future__ import annotations

import os

from attnlab.schema.errors import ConfigError

FLOAT_BYTES = 4  # float32, what the commands compute in on a CPU
ID_BYTES = 8  # int64, a token id


def free_bytes(device: str = "cpu") -> int | None:
    """The memory free on ``device`` (a CUDA device's, else the machine's RAM); None where the system
    does not say."""
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            return torch.cuda.mem_get_info(torch.device(device))[0]
        return None
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not Linux: no bound rather than a wrong one
        return None


def gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB"


def check_fits(key: str, value: object, needed: float, what: str, device: str = "cpu") -> None:
    """ConfigError naming ``key`` when ``needed`` bytes (the estimate of ``what``) exceed what ``device``
    has free."""
    free = free_bytes(device)
    if free is not None and needed > free:
        raise ConfigError(
            key,
            value,
            f"needs about {gib(needed)} for {what}, more than the {gib(free)} free on {device}: give a "
            "smaller value",
        )


def attention_scores_bytes(batch: int, heads: int, length: int) -> int:
    """One layer's attention scores at ``length`` (batch x heads x length^2 floats), and the softmax's
    copy of them."""
    return 2 * batch * heads * length * length * FLOAT_BYTES


def sampling_bytes(samples: int, total_len: int, cache_len: int, layers: int, kv_dim: int, vocab: int) -> int:
    """Sampling ``samples`` sequences of ``total_len`` tokens: their ids, a KV cache of ``cache_len``
    positions over ``layers`` layers (keys and values of ``kv_dim``), one step's logits."""
    cache = 2 * layers * cache_len * kv_dim * FLOAT_BYTES
    return samples * (total_len * ID_BYTES + cache + vocab * FLOAT_BYTES)
