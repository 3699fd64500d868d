"""Padding lists of token ids into a batch: what the generation functions share."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def _check_nonempty(seqs: Sequence[Sequence[int]], what: str) -> None:
    if len(seqs) == 0:
        raise ValueError(f"{what}s is empty: give at least one {what} (a list of token ids)")
    for i, s in enumerate(seqs):
        if len(s) == 0:
            raise ValueError(f"{what} {i} is empty: it needs at least one token")


def pad_batch(
    seqs: Sequence[Sequence[int]],
    pad_id: int,
    *,
    left: bool,
    device: torch.device | str = "cpu",
    what: str = "sequence",
) -> tuple[Tensor, Tensor]:
    """Token ids (B, T) padded on the left or right with ``pad_id``, and the mask (B, T), True at real tokens."""
    _check_nonempty(seqs, what)
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.bool)
    for i, s in enumerate(seqs):
        cols = slice(width - len(s), width) if left else slice(0, len(s))
        ids[i, cols] = torch.as_tensor(list(s), dtype=torch.long)
        mask[i, cols] = True
    return ids.to(device), mask.to(device)
