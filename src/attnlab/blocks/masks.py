"""Which keys a query may see, described once as a function of positions.

``KeyRule`` says whether a query at position ``q`` may attend to a key at position ``k``: causal
(``k <= q``), within a window (``|q - k| < window``: before the query in a decoder, on both sides in an
encoder), and in the same document where document ids are given. It is written with elementwise
tensor operations only, so the same function gives the dense boolean mask that
``scaled_dot_product_attention`` and the explicit path use, and could serve as a FlexAttention
``mask_mod`` (which calls it on index tensors) for the same rule on another backend.

Packed sequences (``data.packing=documents``) give each position a document id; their positions
restart at 0 in every document (``document_positions``), so causality and a window compare
positions within a document, and the document rule hides every other document's keys.

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
        """Whether every key is allowed by position (nothing to mask besides padding and documents)."""
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

    def dense(
        self, q_pos: Tensor, k_pos: Tensor, q_doc: Tensor | None = None, k_doc: Tensor | None = None
    ) -> Tensor | None:
        """The boolean mask (B or 1, 1, Tq, Tk) of positions (Tq,)/(B, Tq) and (Tk,)/(B, Tk), and of
        document ids (B, Tq)/(B, Tk) where given; None where every key is allowed."""
        if self.trivial and q_doc is None:
            return None
        q, k = _rows(q_pos).unsqueeze(-1), _rows(k_pos).unsqueeze(-2)
        if q_doc is None or k_doc is None:
            return self.allows(q, k).unsqueeze(1)
        return self.allows(q, k, _rows(q_doc).unsqueeze(-1), _rows(k_doc).unsqueeze(-2)).unsqueeze(1)


def _rows(t: Tensor) -> Tensor:
    """Positions or document ids as (B or 1, T)."""
    return t if t.dim() == 2 else t.unsqueeze(0)


def document_positions(document_ids: Tensor) -> Tensor:
    """Positions (B, T) that restart at 0 where each document starts, from document ids (B, T).

    A document is a run of equal ids; packed sequences use these positions so that every document
    sees the positions it would see alone (as Hugging Face and torchtune do for packed samples).
    Tensor operations only: no value is read on the host.
    """
    index = torch.arange(document_ids.shape[1], device=document_ids.device).expand_as(document_ids)
    starts = torch.ones_like(document_ids, dtype=torch.bool)
    starts[:, 1:] = document_ids[:, 1:] != document_ids[:, :-1]
    first = torch.where(starts, index, torch.zeros_like(index)).cummax(dim=1).values
    return index - first


def additive_mask(
    rule: KeyRule,
    q_pos: Tensor,
    k_pos: Tensor,
    *,
    key_padding_mask: Tensor | None,
    bias: Tensor | None,
    dtype: torch.dtype,
    document_ids: Tensor | None = None,
) -> Tensor | None:
    """Fold ``rule``, documents, key padding and a score bias into one additive float mask (or None).

    ``key_padding_mask`` is boolean (B, Tk), True where a key is a real token. ``document_ids`` (B, T)
    are the ids of queries and keys alike (self-attention over a packed sequence, no cache). Disallowed entries get the
    dtype's most negative finite value rather than -inf, so a fully masked row (a left-padded query)
    gives a uniform distribution instead of NaN.
    """
    allowed = rule.dense(q_pos, k_pos, document_ids, document_ids)
    if key_padding_mask is not None:
        keep = key_padding_mask.bool()[:, None, None, :]
        allowed = keep if allowed is None else allowed & keep
    if allowed is None:
        return bias.to(dtype) if bias is not None else None
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    mask = mask.masked_fill(~allowed, torch.finfo(dtype).min)
    return mask if bias is None else mask + bias.to(dtype)
