"""Which keys a query may see, described once as a function of positions.

``KeyRule`` says whether a query at position ``q`` may attend to a key at position ``k``: causal
(``k <= q``), within a window (``|q - k| < window``: before the query in a decoder, on both sides in an
encoder), and in the same document where document ids are given. It is written with elementwise
tensor operations only, so the same function gives the dense boolean mask that
``scaled_dot_product_attention`` and the explicit path use, and could serve as a FlexAttention
``mask_mod`` (which calls it on index tensors) for the same rule on another backend.

Positions are absolute (a KV cache stores its keys' positions), so a window over a trimmed cache, or
over left-padded rows whose positions count real tokens only, keeps exactly the keys it should.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class KeyRule:
    """Causality and a window; ``window=None`` is no window (every key allowed by causality)."""

    causal: bool = False
    window: int | None = None

    @property
    def trivial(self) -> bool:
        """Whether every key is allowed (nothing to mask besides padding)."""
        return not self.causal and self.window is None

    def allows(
        self, q_pos: Tensor, k_pos: Tensor, q_doc: Tensor | None = None, k_doc: Tensor | None = None
    ) -> Tensor:
        """Whether each query may see each key; the arguments broadcast against each other.

        ``q_doc``/``k_doc`` are document ids (packed sequences): keys of another document are hidden.
        """
        allowed = torch.ones_like(q_pos - k_pos, dtype=torch.bool)
        if self.causal:
            allowed = allowed & (k_pos <= q_pos)
        if self.window is not None:
            allowed = allowed & ((q_pos - k_pos).abs() < self.window)
        if q_doc is not None and k_doc is not None:
            allowed = allowed & (q_doc == k_doc)
        return allowed

    def dense(self, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """The boolean mask (B or 1, 1, Tq, Tk) of positions (Tq,)/(B, Tq) and (Tk,)/(B, Tk); None if trivial."""
        if self.trivial:
            return None
        q = q_pos if q_pos.dim() == 2 else q_pos.unsqueeze(0)
        k = k_pos if k_pos.dim() == 2 else k_pos.unsqueeze(0)
        return self.allows(q.unsqueeze(-1), k.unsqueeze(-2)).unsqueeze(1)


def additive_mask(
    rule: KeyRule,
    q_pos: Tensor,
    k_pos: Tensor,
    *,
    key_padding_mask: Tensor | None,
    bias: Tensor | None,
    dtype: torch.dtype,
) -> Tensor | None:
    """Fold ``rule``, key padding and a score bias into one additive float mask (or None: nothing to add).

    ``key_padding_mask`` is boolean (B, Tk), True where a key is a real token. Disallowed entries get the
    dtype's most negative finite value rather than -inf, so a fully masked row (a left-padded query)
    gives a uniform distribution instead of NaN.
    """
    allowed = rule.dense(q_pos, k_pos)
    if key_padding_mask is not None:
        keep = key_padding_mask.bool()[:, None, None, :]
        allowed = keep if allowed is None else allowed & keep
    if allowed is None:
        return bias.to(dtype) if bias is not None else None
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    mask = mask.masked_fill(~allowed, torch.finfo(dtype).min)
    return mask if bias is None else mask + bias.to(dtype)
