"""Key/value caches for incremental decoding.

Each attention module gets one ``AttentionCache``; it stores keys and values after positional
rotation, together with the absolute positions of those keys, so score biases (ALiBi, relative)
see the same offsets as in a full forward pass.

Outside autograd, keys, values and positions are written into buffers that grow by doubling, and
``k``/``v``/``positions`` are views of their filled part: a decoding step then copies only its new
entries, where concatenating would copy the whole cache at every step (quadratic in the length).
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
    _buffers: tuple[Tensor, Tensor, Tensor] | None = field(default=None, repr=False, compare=False)

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def append(self, k: Tensor, v: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Add new keys/values and return everything cached, new entries included."""
        positions = positions if positions.dim() == 2 else positions.unsqueeze(0)
        if self.k is None:
            self.k, self.v, self.positions = k, v, positions
        elif torch.is_grad_enabled() and (k.requires_grad or v.requires_grad):  # autograd sees plain cats
            rows = max(self.positions.shape[0], positions.shape[0])  # shared (1, T) or per-row (B, T)
            self.k, self.v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
            self.positions = torch.cat([self.positions.expand(rows, -1), positions.expand(rows, -1)], dim=1)
        else:
            if not self._has_room(k, positions):
                self._grow(k.shape[2], positions.shape[0])
            kb, vb, pb = self._buffers
            n, new = self.k.shape[2], k.shape[2]
            kb.narrow(2, n, new).copy_(k)
            vb.narrow(2, n, new).copy_(v)
            pb.narrow(1, n, new).copy_(positions)
            self.k, self.v, self.positions = (
                kb.narrow(2, 0, n + new),
                vb.narrow(2, 0, n + new),
                pb.narrow(1, 0, n + new),
            )
        return self.k, self.v, self.positions

    def _has_room(self, k: Tensor, positions: Tensor) -> bool:
        """Whether the buffers hold exactly the cached entries (nobody replaced them) and fit ``k``."""
        if self._buffers is None:
            return False
        kb, vb, pb = self._buffers
        return (
            self.k.data_ptr() == kb.data_ptr()  # views of the buffers (inference tensors have no ``_base``)
            and self.v.data_ptr() == vb.data_ptr()
            and self.positions.data_ptr() == pb.data_ptr()
            and self.k.shape[2] + k.shape[2] <= kb.shape[2]
            and kb.shape[:2] == k.shape[:2]
            and positions.shape[0] in (1, pb.shape[0])
        )

    def _grow(self, new: int, new_rows: int) -> None:
        """Buffers of twice the needed length, holding what is cached so far."""
        n = self.k.shape[2]
        capacity = 2 * (n + new)
        rows = max(self.positions.shape[0], new_rows)
        kb = self.k.new_empty((*self.k.shape[:2], capacity, self.k.shape[3]))
        vb = self.v.new_empty((*self.v.shape[:2], capacity, self.v.shape[3]))
        pb = self.positions.new_empty((rows, capacity))
        kb[:, :, :n], vb[:, :, :n], pb[:, :n] = self.k, self.v, self.positions
        self._buffers = (kb, vb, pb)
        self.k, self.v, self.positions = kb[:, :, :n], vb[:, :, :n], pb[:, :n]

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
