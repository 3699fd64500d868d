"""Induction and previous-token scores of every head (Olsson et al. 2022, "In-context Learning and
Induction Heads").

On a sequence that repeats a segment, an induction head attends from each token of the second
occurrence to the token that followed the same token in the first, and copies it: its induction score
is the mean attention weight on that position. A previous-token head (the layer before it, which lets
the induction head find "the token after the earlier one") attends from each position to the one
before: its score is the mean weight on it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab.explain.attention import attention_maps, self_attention_layers
from attnlab.schema.data import IGNORE_INDEX


def repeats(labels: Tensor) -> tuple[Tensor, Tensor]:
    """Where each row's repeated segment starts and its length (B,), (B,), for rows whose labels are
    the repeat after its first token (``data.kind=repeated_segments``): the first labelled position is
    the repeat's first token, so the segment is one longer than the labelled part, and the earlier
    occurrence ends where the repeat begins."""
    labelled = labels != IGNORE_INDEX
    second = labelled.float().argmax(dim=1)
    length = labelled.sum(dim=1) + 1
    if (length < 2).any():
        raise ValueError("repeats: every row needs a labelled repeat (data.kind=repeated_segments)")
    return second, length


def induction_scores(model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    """(layers, heads): the mean attention from each token of the repeat (but its last) to the token
    after its earlier occurrence, over the rows of ``batch`` (``repeats`` reads where they are)."""
    second, length = repeats(batch["labels"])
    layers = self_attention_layers(attention_maps(model, batch))
    rows, queries, keys = [], [], []
    for b, (s, n) in enumerate(zip(second.tolist(), length.tolist())):
        offsets = torch.arange(n - 1)
        rows.append(torch.full((n - 1,), b))
        queries.append(s + offsets)
        keys.append(s - n + 1 + offsets)
    rows, queries, keys = torch.cat(rows), torch.cat(queries), torch.cat(keys)
    return torch.stack([w[rows, :, queries, keys].mean(dim=0) for w in layers])


def previous_token_scores(model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    """(layers, heads): the mean attention from each position (but the first) to the one before it."""
    layers = self_attention_layers(attention_maps(model, batch))
    return torch.stack([w.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2)) for w in layers])
