"""Attention weights of every layer and head, and attention rollout (Abnar & Zuidema 2020)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from attnlab.blocks.attention import record_attention
from attnlab.models.common import eval_mode


@torch.no_grad()
def attention_maps(model: nn.Module, batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """Weights (B, H, Tq, Tk) of every attention module for one forward pass over ``batch``.

    Keys are module names (``stack.layers.0.self_attn.fn``, ``decoder.layers.1.cross_attn.fn``...)
    in the order the model runs them. The explicit attention path runs, since the fused kernels
    return no weights.
    """
    with eval_mode(model), record_attention(model) as maps:
        model.logits(batch)
    return {name: weights.float() for name, weights in maps.items()}


def map_label(name: str) -> str:
    """A short label for a module name: ``layer 0 self``, ``decoder layer 1 cross``."""
    parts = name.split(".")
    if "layers" not in parts:
        return name
    i = parts.index("layers")
    stack = parts[i - 1] if i > 0 and parts[i - 1] != "stack" else ""
    kind = parts[i + 2].removesuffix("_attn") if len(parts) > i + 2 else ""
    return " ".join(p for p in (stack, "layer", parts[i + 1], kind) if p)


def select_layers(names: list[str], layers: Sequence[int]) -> list[str]:
    """The attention modules of the chosen layer indices (negative counts from the end) of each stack."""
    by_stack: dict[str, list[str]] = {}
    for name in names:
        stack = name.split(".layers.")[0] + "|" + name.rsplit(".", 2)[-2]  # e.g. "decoder|cross_attn"
        by_stack.setdefault(stack, []).append(name)
    chosen = []
    for group in by_stack.values():
        wanted = {i % len(group) for i in layers if -len(group) <= i < len(group)}
        chosen += [n for i, n in enumerate(group) if i in wanted]
    return chosen


def self_attention_layers(maps: dict[str, Tensor], stack: str = "stack") -> list[Tensor]:
    """The self-attention maps of one stack (``stack``, ``encoder`` or ``decoder``), first layer first."""
    prefix, suffix = f"{stack}.layers.", ".self_attn.fn"
    layers = {
        int(n[len(prefix) : -len(suffix)]): w
        for n, w in maps.items()
        if n.startswith(prefix) and n.endswith(suffix)
    }
    if not layers:
        raise ValueError(
            f"no self-attention maps of a stack named {stack!r} among {', '.join(maps) or 'none'}"
        )
    return [layers[i] for i in sorted(layers)]


def attention_rollout(layers: Sequence[Tensor], *, add_residual: bool = True) -> Tensor:
    """Attention rollout (B, T, T): row i is how much each input token flows into position i at the top.

    Each layer's weights (B, H, T, T) are averaged over heads; with ``add_residual`` the identity is
    added for the residual connection and rows renormalised, ``0.5 (A + I)``; the layers are then
    multiplied through, last layer leftmost: ``R = A_L ... A_2 A_1``.
    """
    if not layers:
        raise ValueError("attention_rollout needs the maps of at least one layer")
    rollout = None
    for weights in layers:
        if weights.dim() != 4 or weights.shape[-1] != weights.shape[-2]:
            raise ValueError(
                f"rollout needs self-attention maps (B, H, T, T), got shape {tuple(weights.shape)}"
            )
        a = weights.float().mean(dim=1)
        if add_residual:
            a = a + torch.eye(a.shape[-1], device=a.device)
            a = a / a.sum(dim=-1, keepdim=True)
        rollout = a if rollout is None else a @ rollout
    return rollout
