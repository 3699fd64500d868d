"""Key/value caches for incremental decoding.

Each attention module gets one ``AttentionCache``; it stores keys and values after positional
rotation, together with the absolute positions of those keys, so score biases (ALiBi, relative)
see the same offsets as in a full forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class AttentionCache:
    """Keys and values (B, Hkv, T, hd) seen so far and their positions (B or 1, T)."""

    k: Tensor | None = None
    v: Tensor | None = None
    positions: Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def append(self, k: Tensor, v: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Add new keys/values and return everything cached, new entries included."""
        positions = positions if positions.dim() == 2 else positions.unsqueeze(0)
        if self.k is None:
            self.k, self.v, self.positions = k, v, positions
        else:
            self.k = torch.cat([self.k, k], dim=2)
            self.v = torch.cat([self.v, v], dim=2)
            rows = max(self.positions.shape[0], positions.shape[0])  # shared (1, T) or per-row (B, T)
            old, new = self.positions.expand(rows, -1), positions.expand(rows, -1)
            self.positions = torch.cat([old, new], dim=1)
        return self.k, self.v, self.positions

    def reorder(self, index: Tensor) -> None:
        """Keep the batch rows in ``index`` (beam search)."""
        if self.k is not None:
            self.k, self.v = self.k.index_select(0, index), self.v.index_select(0, index)
            if self.positions is not None and self.positions.shape[0] > 1:  # cross-attention has none
                self.positions = self.positions.index_select(0, index)


@dataclass
class KVCache:
    """One cache per layer for self-attention and, in encoder-decoders, one for cross-attention.

    Cross-attention caches hold the encoder's keys and values, computed at the first step only.
    """

    self_attn: list[AttentionCache] = field(default_factory=list)
    cross_attn: list[AttentionCache] = field(default_factory=list)

    @classmethod
    def empty(cls, n_layers: int, cross: bool = False) -> KVCache:
        return cls(
            [AttentionCache() for _ in range(n_layers)],
            [AttentionCache() for _ in range(n_layers)] if cross else [],
        )

    @property
    def offset(self) -> int:
        """Number of positions already decoded: where the next token's position starts."""
        return self.self_attn[0].length if self.self_attn else 0

    def reorder(self, index: Tensor) -> None:
        for cache in (*self.self_attn, *self.cross_attn):
            cache.reorder(index)
