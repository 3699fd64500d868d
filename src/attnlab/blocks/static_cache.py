"""A KV cache of fixed length, written in place: what a compiled decoding step needs.

``AttentionCache`` grows and trims, so its shapes change with every token, and a compiled step would
recompile at each one. ``StaticAttentionCache`` allocates the final length once (the prompt and every
new token) and writes each step's keys, values and positions at the columns the decoding loop names.
Attention then always sees all ``length`` columns; ``written_keys`` marks the ones written so far, and
the attention module masks the rest. Shapes never change, so one graph serves every step (and, on a
GPU, one CUDA graph replays it), as in gpt-fast.

A sliding window needs no trimming here: the window's rule masks the keys it excludes, exactly the
ones the growing cache would have dropped. The cost is memory: the whole length is held.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.blocks.cache import KVCache


class StaticAttentionCache:
    """Keys and values (B, Hkv, L, hd) and key positions (B, L) of one attention module, fixed length L.

    ``columns`` is shared by every layer's cache and set by the decoding loop before each forward
    pass (``StaticCache.write_at``): the columns that the pass's new tokens occupy, in order.
    """

    static = True
    dropped = 0  # nothing is ever trimmed: a window is a mask here

    def __init__(
        self, batch: int, kv_heads: int, length: int, head_dim: int, dtype: torch.dtype, device
    ) -> None:
        self.k = torch.zeros((batch, kv_heads, length, head_dim), dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.positions = torch.zeros((batch, length), dtype=torch.long, device=device)
        self.column_ids = torch.arange(length, device=device)
        self.columns = self.column_ids[:0]

    @property
    def length(self) -> int:
        """Columns held (written or not)."""
        return self.k.shape[2]

    def append(
        self, k: Tensor, v: Tensor, positions: Tensor, keep: int | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Write the new keys, values and positions at ``columns``; return the whole buffers.
        ``keep`` (a window) is ignored: the attention's window rule masks the keys it excludes."""
        positions = positions if positions.dim() == 2 else positions.unsqueeze(0)
        self.k.index_copy_(2, self.columns, k.to(self.k.dtype))
        self.v.index_copy_(2, self.columns, v.to(self.v.dtype))
        self.positions.index_copy_(1, self.columns, positions.expand(self.positions.shape[0], -1))
        return self.k, self.v, self.positions

    def written_keys(self) -> Tensor:
        """(1, L) booleans: True for the columns written so far (up to the last of ``columns``)."""
        return (self.column_ids <= self.columns[-1]).unsqueeze(0)

    def buffers(self) -> tuple[Tensor, Tensor, Tensor]:
        return self.k, self.v, self.positions


class StaticCache(KVCache):
    """One ``StaticAttentionCache`` per layer of a decoder-only model, all of the same length."""

    def write_at(self, columns: Tensor) -> None:
        """The columns (T,) that the next forward pass's T tokens are written to, in every layer."""
        for cache in self.self_attn:
            cache.columns = columns

    def tensors(self) -> list[Tensor]:
        """Every buffer, e.g. to mark them as static addresses for CUDA graphs."""
        return [t for cache in self.self_attn for t in cache.buffers()]

    @property
    def offset(self) -> int:
        raise TypeError("a StaticCache does not count its tokens: pass positions to the model explicitly")
