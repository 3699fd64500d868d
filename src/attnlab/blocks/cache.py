"""Key/value caches for incremental decoding.

Each attention module gets one ``AttentionCache``; it stores keys and values after positional
rotation, together with the absolute positions of those keys, so score biases (ALiBi, relative)
see the same offsets as in a full forward pass.

Outside autograd, keys, values and positions are written into buffers that grow by doubling, and
``k``/``v``/``positions`` are views of their filled part: a decoding step then copies only its new
entries, where concatenating would copy the whole cache at every step (quadratic in the length).
With a sliding window the cache keeps only the window's last keys: the views' start moves forward,
and when the buffers are full the kept entries move into fresh ones of the same size, so the memory
of a cache stays at about twice the window however long the decoding runs. A caller that knows the
final length (``generate``) reserves it: the first buffers then hold every step, none is regrown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor


@dataclass
class AttentionCache:
    """Keys and values (B, Hkv, T, hd) kept so far and their positions (B or 1, T).

    A sliding window (``append(..., keep=W)``) keeps only the last W entries: ``dropped`` counts the
    ones trimmed from the front, so memory stays flat however many tokens are decoded.
    """

    static: ClassVar[bool] = False  # holds written keys only (attnlab.blocks.static_cache: not so)
    k: Tensor | None = None
    v: Tensor | None = None
    positions: Tensor | None = None
    dropped: int = 0  # entries trimmed from the front by a window; an attention mask still has their columns
    reserve: int = 0  # entries the first buffers hold at least (generate knows its length: no regrowth)
    _buffers: tuple[Tensor, Tensor, Tensor] | None = field(default=None, repr=False, compare=False)
    _start: int = field(default=0, repr=False, compare=False)  # where ``k`` begins in the buffers

    @property
    def length(self) -> int:
        """Entries kept."""
        return 0 if self.k is None else self.k.shape[2]

    @property
    def seen(self) -> int:
        """Entries ever appended (kept or trimmed): where the next token's position starts."""
        return self.dropped + self.length

    @property
    def capacity(self) -> int:
        """Entries the allocated storage can hold (the buffers, or what is kept where there are none)."""
        return self._buffers[0].shape[2] if self._buffers is not None else self.length

    def append(
        self, k: Tensor, v: Tensor, positions: Tensor, keep: int | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Add new keys/values and return everything cached, new entries included; then, with ``keep``,
        trim the cache to its last ``keep`` entries (the returned tensors still hold them all)."""
        positions = positions if positions.dim() == 2 else positions.unsqueeze(0)
        if torch.is_grad_enabled() and (k.requires_grad or v.requires_grad):  # autograd sees plain cats
            self._concatenate(k, v, positions)
        else:
            self._write(k, v, positions)
        everything = (self.k, self.v, self.positions)
        if keep is not None and self.length > keep:
            self._trim(self.length - keep)
        return everything

    def _concatenate(self, k: Tensor, v: Tensor, positions: Tensor) -> None:
        """New tensors of the cached and the new entries (the buffers, if any, are left behind)."""
        self._buffers, self._start = None, 0
        if self.k is None:
            self.k, self.v, self.positions = k, v, positions
            return
        rows = max(self.positions.shape[0], positions.shape[0])  # shared (1, T) or per-row (B, T)
        self.k, self.v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        self.positions = torch.cat([self.positions.expand(rows, -1), positions.expand(rows, -1)], dim=1)

    def _write(self, k: Tensor, v: Tensor, positions: Tensor) -> None:
        """Copy the new entries into the buffers, after the kept ones (new buffers when they do not fit)."""
        if not self._has_room(k, positions):
            self._grow(k, v, positions)
        kb, vb, pb = self._buffers
        start, end, new = self._start, self._start + self.length, k.shape[2]
        kb.narrow(2, end, new).copy_(k)
        vb.narrow(2, end, new).copy_(v)
        pb.narrow(1, end, new).copy_(positions)
        self._view(start, end + new)

    def _view(self, start: int, end: int) -> None:
        """Make ``k``/``v``/``positions`` the views of the buffers' entries ``start:end``."""
        kb, vb, pb = self._buffers
        self._start = start
        self.k, self.v, self.positions = (
            kb.narrow(2, start, end - start),
            vb.narrow(2, start, end - start),
            pb.narrow(1, start, end - start),
        )

    def _trim(self, drop: int) -> None:
        """Forget the first ``drop`` entries: in the buffers a moved start, otherwise a view (copied into
        buffers of the window's size at the next step)."""
        self.dropped += drop
        if self._buffers is not None:
            self._view(self._start + drop, self._start + self.k.shape[2])
        else:
            self.k, self.v, self.positions = (
                self.k[:, :, drop:],
                self.v[:, :, drop:],
                self.positions[:, drop:],
            )

    def _has_room(self, k: Tensor, positions: Tensor) -> bool:
        """Whether the buffers fit ``k`` after the cached entries (same batch and heads)."""
        if self._buffers is None:
            return False
        kb, _, pb = self._buffers
        return (
            self._start + self.k.shape[2] + k.shape[2] <= kb.shape[2]
            and kb.shape[:2] == k.shape[:2]
            and positions.shape[0] in (1, pb.shape[0])
        )

    def _grow(self, k: Tensor, v: Tensor, positions: Tensor) -> None:
        """Buffers of twice the needed length (at the first write at least ``reserve``), holding what is
        cached so far at their start."""
        n = self.length
        capacity = 2 * (n + k.shape[2])
        if self._buffers is None:
            capacity = max(capacity, self.reserve)
        rows = max(self.positions.shape[0] if n else 1, positions.shape[0])
        kb = k.new_empty((*k.shape[:2], capacity, k.shape[3]))
        vb = v.new_empty((*v.shape[:2], capacity, v.shape[3]))
        pb = positions.new_empty((rows, capacity))
        if n:
            kb[:, :, :n], vb[:, :, :n], pb[:, :n] = self.k, self.v, self.positions
        self._buffers = (kb, vb, pb)
        self._view(0, n)

    def reorder(self, index: Tensor) -> None:
        """Keep the batch rows in ``index`` (beam search): new tensors, so the buffers are left behind."""
        self._buffers, self._start = None, 0
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
    def empty(cls, n_layers: int, cross: bool = False, reserve: int | list[int] = 0) -> KVCache:
        """Empty caches; ``reserve``: the self-attention entries to allocate at the first write (one
        number for every layer, or one per layer)."""
        reserves = reserve if isinstance(reserve, list) else [reserve] * n_layers
        return cls(
            [AttentionCache(reserve=r) for r in reserves],
            [AttentionCache() for _ in range(n_layers)] if cross else [],
        )

    @property
    def offset(self) -> int:
        """Number of positions already decoded: where the next token's position starts."""
        return self.self_attn[0].seen if self.self_attn else 0

    def reorder(self, index: Tensor) -> None:
        for cache in (*self.self_attn, *self.cross_attn):
            cache.reorder(index)
