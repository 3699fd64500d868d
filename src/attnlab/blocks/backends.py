"""The kernels that compute softmax(q k^T * scale + bias) v, each a small object an attention module holds.

``Sdpa`` (``model.attn_backend=sdpa``, the default) calls ``scaled_dot_product_attention`` so that
PyTorch's flash / memory-efficient kernels run. ``Explicit`` computes the softmax itself and passes
the weights through the module's ``weights_probe`` (an identity), whose forward hooks can read them:
``record_attention`` switches to it while it records. ``Flex`` (``model.attn_backend=flex``) runs
FlexAttention (``attnlab.blocks.flex``): masks and score biases as functions of positions, never a
(B, H, Tq, Tk) tensor. All three mask with the same ``KeyRule`` (causality, a sliding window, packed
documents; ``attnlab.blocks.masks``). A backend holds no state of its own, so one object serves
every module; a caller may hand a module another (``attnlab.generate`` does, for decoding).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.blocks.flex import MaskMemo, PassMask, block_mask, flex, per_row
from attnlab.blocks.hooks import Sinks, SoftCap
from attnlab.blocks.masks import KeyRule, additive_mask
from attnlab.blocks.positional import ScoreMod
from attnlab.schema.model import AttnBackend

SOFTCAP_ON_SDPA = (
    "model.attn_softcap: SDPA cannot apply tanh to the scores; use attn_backend=explicit or flex"
)


class AttentionHeads(Protocol):
    """What a backend reads of the attention module it serves (``blocks.attention.MultiHeadAttention``)."""

    training: bool
    cross: bool
    scale: float
    dropout: float
    n_heads: int
    n_kv_heads: int
    weights_probe: nn.Module
    softcap: SoftCap | None
    sinks: Sinks | None

    def score_bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor | None: ...

    def score_mod(self, q_rows: Tensor, k_rows: Tensor) -> ScoreMod | None: ...


class Keys(NamedTuple):
    """What one attention call's queries see: their positions and the keys', which keys ``rule``
    allows, the keys' ``padding`` (B, Tk; True at real ones) and the tokens' ``documents`` (B, T)."""

    q_pos: Tensor
    k_pos: Tensor
    rule: KeyRule
    padding: Tensor | None
    documents: Tensor | None


class Sdpa:
    """The fused kernels of ``F.scaled_dot_product_attention`` with a dense additive mask."""

    name = "sdpa"

    def attend(
        self, attn: AttentionHeads, q: Tensor, k: Tensor, v: Tensor, keys: Keys, masks: MaskMemo
    ) -> Tensor:
        """Attention (B, H, Tq, hd) of queries (B, H, Tq, hd) over keys and values (B, Hkv, Tk, hd)."""
        if attn.softcap is not None:
            raise ValueError(SOFTCAP_ON_SDPA)
        mask, is_causal = dense_mask(attn, q, k, keys, fused=attn.sinks is None)
        if attn.sinks is not None:  # the sink as a key of score 0 and value 0, its logit in the mask
            mask = mask if mask is not None else q.new_zeros((1, 1, q.shape[2], k.shape[2]))
            k, v, mask = attn.sinks.extra_key(q, k, v, mask)
        return F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=attn.dropout if attn.training else 0.0,
            is_causal=is_causal,
            scale=attn.scale,
            enable_gqa=attn.n_kv_heads != attn.n_heads,
        )


class Explicit:
    """Softmax attention written out; the weights (B, H, Tq, Tk) pass through ``attn.weights_probe``."""

    name = "explicit"

    def attend(
        self, attn: AttentionHeads, q: Tensor, k: Tensor, v: Tensor, keys: Keys, masks: MaskMemo
    ) -> Tensor:
        mask, _ = dense_mask(attn, q, k, keys, fused=False)
        groups = attn.n_heads // attn.n_kv_heads
        if groups > 1:
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        scores = (q @ k.transpose(-2, -1)) * attn.scale
        if attn.softcap is not None:
            scores = attn.softcap(scores)
        if mask is not None:
            scores = scores + mask
        weights = scores.float().softmax(dim=-1)
        if attn.sinks is not None:  # exp(s) / (exp(sink) + sum exp(s))
            weights = weights * attn.sinks.factor(scores.float().logsumexp(dim=-1)).unsqueeze(-1)
        weights = attn.weights_probe(weights.to(q.dtype))
        dropout = attn.dropout if attn.training else 0.0
        return F.dropout(weights, p=dropout, training=dropout > 0) @ v


class Flex:
    """FlexAttention with the key rule, padding and documents as a block mask (the forward pass's, from
    ``masks``, where another layer built it) and the positional score bias as a ``score_mod``."""

    name = "flex"

    def attend(
        self, attn: AttentionHeads, q: Tensor, k: Tensor, v: Tensor, keys: Keys, masks: MaskMemo
    ) -> Tensor:
        kind = "cross" if attn.cross else f"self/{keys.rule.window}"  # one block mask per window
        if kind not in masks:
            q_rows, k_rows = per_row(keys.q_pos, q.shape[0]), per_row(keys.k_pos, q.shape[0])
            mask = block_mask(keys.rule, q_rows, k_rows, keys.padding, keys.documents)
            masks[kind] = PassMask(mask, q_rows, k_rows)
        mask, q_rows, k_rows = masks[kind]
        score_mod = attn.score_mod(q_rows, k_rows)
        if attn.sinks is None:
            return flex(q, k, v, mask=mask, score_mod=score_mod, scale=attn.scale)
        y, lse = flex(q, k, v, mask=mask, score_mod=score_mod, scale=attn.scale, return_lse=True)
        return y * attn.sinks.factor(lse.to(y.dtype)).unsqueeze(-1)


def dense_mask(
    attn: AttentionHeads, q: Tensor, k: Tensor, keys: Keys, fused: bool
) -> tuple[Tensor | None, bool]:
    """The additive mask (or None) of ``keys`` with the module's score bias folded in, and whether the
    fused kernels' own causal mask replaces it (a plain causal square: their fast path)."""
    bias = attn.score_bias(keys.q_pos, keys.k_pos)
    plain_causal = (
        keys.rule.causal
        and keys.rule.window is None
        and bias is None
        and keys.padding is None
        and keys.documents is None
    )
    if plain_causal and q.shape[2] == 1:
        return None, False  # one new query sees every cached key
    if plain_causal and q.shape[2] == k.shape[2] and fused:
        return None, True
    mask = additive_mask(
        keys.rule,
        keys.q_pos,
        keys.k_pos,
        key_padding_mask=keys.padding,
        bias=bias,
        dtype=q.dtype,
        document_ids=keys.documents,
    )
    return mask, False


@torch.no_grad()
def max_logits(q: Tensor, k: Tensor, keys: Keys, scale: float) -> Tensor:
    """The largest logit (H,) of each head over the batch, the queries and the keys they may see."""
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1) if groups > 1 else k
    scores = (q @ k.transpose(-2, -1)).float() * scale
    allowed = keys.rule.dense(keys.q_pos, keys.k_pos, keys.documents, keys.documents)
    if keys.padding is not None:
        keep = keys.padding.bool()[:, None, None, :]
        allowed = keep if allowed is None else allowed & keep
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.amax(dim=(0, 2, 3))


SDPA, EXPLICIT, FLEX = Sdpa(), Explicit(), Flex()
BACKENDS = {backend.name: backend for backend in (SDPA, EXPLICIT, FLEX)}  # by name: ATTENTION_PATHS
CONFIGURABLE = tuple(AttnBackend)  # model.attn_backend's choices


def backend_named(name: str) -> Sdpa | Explicit | Flex:
    """The backend of ``name``, one of ``BACKENDS``; a ValueError naming the choices otherwise."""
    if name not in BACKENDS:
        raise ValueError(f"attention backend {name!r} is not one of {', '.join(BACKENDS)}")
    return BACKENDS[name]
