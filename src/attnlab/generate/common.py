"""Padding lists of token ids into a batch: what the generation functions share."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence


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
    rows = [torch.as_tensor(list(s), dtype=torch.long) for s in seqs]
    side = "left" if left else "right"
    ids = pad_sequence(rows, batch_first=True, padding_value=pad_id, padding_side=side)
    ones = [torch.ones(len(r), dtype=torch.bool) for r in rows]
    mask = pad_sequence(ones, batch_first=True, padding_value=False, padding_side=side)
    return ids.to(device), mask.to(device)
