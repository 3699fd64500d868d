"""Choosing the next token from logits: greedy, temperature, top-k, top-p, repetition penalty.

Each function works on the logits of the last position, shape (B, V), and returns new logits or
token ids (B, 1); they are small so that the decode loops stay readable and cheap.
"""

from __future__ import annotations

import torch
from torch import Tensor


def check_sampling_args(
    temperature: float, top_k: int | None, top_p: float | None, repetition_penalty: float
) -> None:
    """Raise a ValueError naming the first sampling argument outside its range."""
    if temperature < 0:
        raise ValueError(f"temperature={temperature} must be >= 0 (0 means greedy decoding)")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k={top_k} must be a positive integer or None (no top-k filter)")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p={top_p} must be in (0, 1] or None (no nucleus filter)")
    if repetition_penalty <= 0:
        raise ValueError(f"repetition_penalty={repetition_penalty} must be > 0 (1.0 means no penalty)")


def penalize_repetition(logits: Tensor, seen: Tensor, penalty: float) -> Tensor:
    """CTRL's repetition penalty (Keskar et al. 2019): scale down the logits of tokens already seen.

    ``seen`` (B, V) is True for tokens in the prompt or generated so far. Positive logits are
    divided by ``penalty``, negative ones multiplied, so the token always becomes less likely.
    """
    penalized = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalized, logits)


def top_k_filter(logits: Tensor, k: int) -> Tensor:
    """Keep the ``k`` largest logits of each row (ties with the k-th included); the rest become -inf."""
    if k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, k, dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Nucleus filter (Holtzman et al. 2020): keep the smallest set of tokens whose probability reaches ``p``."""
    if p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs  # probability of the tokens ranked above each one
    drop_sorted = mass_before >= p  # the top token always stays (its mass_before is 0)
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def next_token(
    logits: Tensor,
    *,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    generator: torch.Generator | None,
) -> Tensor:
    """Token ids (B, 1): the argmax when ``temperature`` is 0, else a sample from the filtered softmax."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)
