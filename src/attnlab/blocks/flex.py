"""FlexAttention: the masks and score biases of the SDPA path, as functions of one (query, key) pair.

``torch.nn.attention.flex_attention`` takes which keys a query sees as a ``mask_mod`` (turned into a
block-sparse ``BlockMask``: blocks that are all hidden are skipped) and a score bias as a
``score_mod``. Both are built here from the same descriptions the dense path uses: ``KeyRule``
(causality, a window, documents) with key padding for the mask, and the positional encoding's
``score_mod`` hook (ALiBi, T5 relative) for the bias, so no (B, H, Tq, Tk) tensor exists.

The block mask depends only on positions, padding and documents, which every layer of a stack
shares: ``MaskMemo`` keeps it for one forward pass (one per self- and cross-attention).

On the CPU the compiled kernel (``torch.compile(flex_attention)``) is what keeps memory flat; the
uncompiled one evaluates the full score matrix. The compiled kernel is used for prompts and full
passes; single-token decoding steps, whose score row is small and whose key length changes every
step (a recompilation each), run the uncompiled one. In torch 2.13 neither has a backward on the
CPU, so there FlexAttention serves evaluation and sampling only.

Where a query sees no key at all (a left-padded position of a decoder), FlexAttention returns zeros
while SDPA's finite mask averages every value: both are outputs at padding that nothing reads.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from attnlab.blocks.masks import KeyRule
from attnlab.blocks.positional import ScoreMod
from attnlab.schema.model import FLEX_CPU_BACKWARD

MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


class PassMask(NamedTuple):
    """One forward pass's block mask of self- or cross-attention, with the (B, T) position rows it was
    built over: every layer passes these same tensors to its ``score_mod``, so that dynamo's guards on
    the ``mask_mod`` and ``score_mod`` closures (whether both hold one tensor) are alike in every layer
    and the layers share one graph (new rows in each layer would trace a second one for layers 2+)."""

    mask: BlockMask | None
    q_rows: Tensor
    k_rows: Tensor


MaskMemo = dict[str, PassMask]  # one forward pass's block masks, by "self" / "cross"
COMPILE_FROM = 2  # queries from which the compiled kernel runs (a decoding step has 1)


def per_row(positions: Tensor, batch: int) -> Tensor:
    """Positions (T,) or (B or 1, T) as (B, T), so a ``mask_mod`` may index them by batch entry."""
    rows = positions if positions.dim() == 2 else positions.unsqueeze(0)
    return rows.expand(batch, -1)


def mask_mod(
    rule: KeyRule,
    q_pos: Tensor,
    k_pos: Tensor,
    key_padding_mask: Tensor | None = None,
    document_ids: Tensor | None = None,
) -> MaskMod:
    """``rule`` and key padding (B, Tk; True at real tokens) as a ``mask_mod(b, h, q, k)``: whether
    query ``q`` of batch entry ``b`` sees key ``k``. Positions are (B, T) rows; ``document_ids`` (B, T)
    are those of queries and keys alike (a packed sequence without a cache)."""
    keep = key_padding_mask.bool() if key_padding_mask is not None else None

    def allowed(b: Tensor, h: Tensor, q: Tensor, k: Tensor) -> Tensor:
        docs = (document_ids[b, q], document_ids[b, k]) if document_ids is not None else (None, None)
        visible = rule.allows(q_pos[b, q], k_pos[b, k], *docs)
        return visible & keep[b, k] if keep is not None else visible

    return allowed


def block_mask(
    rule: KeyRule,
    q_pos: Tensor,
    k_pos: Tensor,
    key_padding_mask: Tensor | None = None,
    document_ids: Tensor | None = None,
) -> BlockMask | None:
    """The ``BlockMask`` of ``rule``, padding and documents over positions (B, Tq) and (B, Tk); None
    where every key is visible. Built for every batch entry only where entries differ (padding,
    documents, per-row positions); otherwise once, shared by the batch (the kernel still calls the
    ``mask_mod`` with every batch index for its partial blocks, so the positions keep their B rows)."""
    if rule.trivial and key_padding_mask is None and document_ids is None:
        return None
    shared = key_padding_mask is None and document_ids is None and q_pos.stride(0) == k_pos.stride(0) == 0
    fn = mask_mod(rule, q_pos, k_pos, key_padding_mask, document_ids)
    batch = None if shared else q_pos.shape[0]
    return create_block_mask(fn, batch, None, q_pos.shape[1], k_pos.shape[1], device=q_pos.device)


@functools.cache
def compiled_flex() -> Callable[..., Tensor]:
    """``flex_attention`` compiled once per process (shapes marked dynamic after a change)."""
    return torch.compile(flex_attention)


def flex(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: BlockMask | None,
    score_mod: ScoreMod | None,
    scale: float,
    return_lse: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Attention (B, H, Tq, hd) of queries (B, H, Tq, hd) over keys and values (B, Hkv, Tk, hd); with
    ``return_lse``, also the scores' log-sum-exp (B, H, Tq) (sinks rescale by it)."""
    if q.device.type == "cpu" and torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise NotImplementedError(f"model.attn_backend=flex: {FLEX_CPU_BACKWARD}")
    args: dict[str, Any] = dict(
        score_mod=score_mod, block_mask=mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
    )
    if return_lse:
        args["return_lse"] = True
    # the compiled CPU kernel has no return_lse in torch 2.13: sinks on the CPU run the uncompiled one
    lse_on_cpu = return_lse and q.device.type == "cpu"
    if q.shape[2] >= COMPILE_FROM and not lse_on_cpu:
        return compiled_flex()(q, k, v, **args)
    with warnings.catch_warnings():  # "called without torch.compile()": chosen here for one query
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return flex_attention(q, k, v, **args)
