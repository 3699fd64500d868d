"""Composition scores between attention heads of two layers, read from the weights (Elhage et al. 2021,
"A Mathematical Framework for Transformer Circuits").

A head's QK circuit ``W_QK = W_Q^T W_K`` (d_model x d_model) gives its attention score of a query
residual ``x`` on a key residual ``y`` as ``x^T W_QK y``; its OV circuit ``W_OV = W_O W_V`` is what it
writes into the residual stream from what it reads. A later head composes with an earlier one when it
reads what the earlier one wrote: through its keys (K-composition, ``W_QK W_OV``), its queries
(Q-composition, ``W_QK^T W_OV``) or its values (V-composition, ``W_OV' W_OV``). The score is the
Frobenius norm of the product over the product of the norms: 1 when the reader reads exactly the
direction the writer writes (both rank one), 0 when they are orthogonal.

The pre-norm layer norm's scale is folded into the matrices that read its output; its centring and its
division by the residual's size are left out (the latter is one number per token, which the ratio
cancels), and so are the biases. Rotary positions make ``W_QK`` depend on the distance between query
and key: ``offset`` is that distance (0: no rotation, the circuit of a token attending to itself).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab.blocks.attention import SelfAttention
from attnlab.blocks.positional import RotaryPositionalEncoding

KINDS = ("k", "q", "v")


def composition_score(reader: Tensor, writer: Tensor) -> float:
    """``||reader @ writer||_F / (||reader||_F ||writer||_F)``: how much of what ``writer`` writes ``reader`` reads."""
    return float(torch.linalg.norm(reader @ writer) / (torch.linalg.norm(reader) * torch.linalg.norm(writer)))


def _attention(model: nn.Module, layer: int, stack: str) -> tuple[SelfAttention, Tensor]:
    """Layer ``layer``'s self-attention and the scale of the norm before it (ones without a norm)."""
    residual = model.get_submodule(f"{stack}.layers.{layer}.self_attn")
    attn = residual.fn
    if not isinstance(attn, SelfAttention) or not hasattr(attn, "qkv_proj"):
        raise ValueError(f"composition: layer {layer} is not softmax self-attention with one qkv projection")
    if attn.q_norm is not None:
        raise ValueError("composition: QK-norm makes the QK circuit non-linear; no score is defined")
    norm = getattr(residual, "norm", None)
    scale = getattr(norm, "weight", None) if getattr(residual, "norm_first", False) else None
    width = attn.qkv_proj.in_features
    return attn, (scale.detach() if scale is not None else torch.ones(width))


def _head_rows(attn: SelfAttention, head: int) -> tuple[Tensor, Tensor, Tensor]:
    """One head's query, key and value projections (head_dim x d_model each; a key/value group's for GQA)."""
    q_dim, kv_dim, _ = attn.split_sizes
    group = head * attn.n_kv_heads // attn.n_heads
    weight = attn.qkv_proj.weight.detach()
    d = attn.head_dim
    return (
        weight[head * d : (head + 1) * d],
        weight[q_dim + group * d : q_dim + (group + 1) * d],
        weight[q_dim + kv_dim + group * d : q_dim + kv_dim + (group + 1) * d],
    )


def qk_circuit(model: nn.Module, layer: int, head: int, offset: int = 0, stack: str = "stack") -> Tensor:
    """``W_QK`` (d_model x d_model) of a head: its score of a query on a key ``offset`` positions before."""
    attn, scale = _attention(model, layer, stack)
    w_q, w_k, _ = (w * scale for w in _head_rows(attn, head))
    pos = attn.pos
    if isinstance(pos, RotaryPositionalEncoding) and offset:  # R_q^T R_k depends on q - k only
        turned = pos.apply_rotation(w_q.T[None, None], torch.tensor([[offset]]))[0, 0]
        return turned @ w_k
    return w_q.T @ w_k


def ov_circuit(model: nn.Module, layer: int, head: int, stack: str = "stack") -> Tensor:
    """``W_OV`` (d_model x d_model) of a head: what it writes into the residual stream from what it reads."""
    attn, scale = _attention(model, layer, stack)
    _, _, w_v = _head_rows(attn, head)
    d = attn.head_dim
    w_o = attn.out_proj.weight.detach()[:, head * d : (head + 1) * d]
    return w_o @ (w_v * scale)


def composition_scores(
    model: nn.Module, reader: int = 1, writer: int = 0, kind: str = "k", offset: int = 0, stack: str = "stack"
) -> Tensor:
    """(reader layer's heads, writer layer's heads): the ``kind`` composition score (``k``, ``q`` or ``v``)
    of each head of layer ``reader`` with each head of the earlier layer ``writer``."""
    if kind not in KINDS:
        raise ValueError(f"composition kind={kind!r}: one of {', '.join(KINDS)}")
    if writer >= reader:
        raise ValueError(f"composition: the writer layer ({writer}) must come before the reader ({reader})")
    heads = {layer: _attention(model, layer, stack)[0].n_heads for layer in (reader, writer)}
    with torch.no_grad():
        writes = [ov_circuit(model, writer, h, stack) for h in range(heads[writer])]
        reads = []
        for h in range(heads[reader]):
            qk = qk_circuit(model, reader, h, offset, stack)
            reads.append({"k": qk, "q": qk.T, "v": ov_circuit(model, reader, h, stack)}[kind])
        return torch.tensor([[composition_score(r, w) for w in writes] for r in reads])
