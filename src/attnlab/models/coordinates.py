"""Activation size by layer group: what a coordinate check (Yang et al. 2021, "Tensor Programs V",
μP's check) measures at several widths to see whether a parametrisation keeps activations the same
size as the model widens.

A group is a kind of block output, whatever the family: the embeddings, each mixer's output (softmax,
latent or differential attention, gated DeltaNet), each feed-forward network's output, the residual
stream after each layer, and the output head's logits. Its size is the root mean square of a coordinate, averaged over the group's modules, so it
does not grow with the number of coordinates: under a width-stable parametrisation it stays flat as
the width doubles, and the slope of log RMS against log width is near 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
from torch import Tensor, nn

from attnlab.blocks import (
    ClassificationHead,
    FeedForward,
    LMHead,
    MaskedLMHead,
    MultiHeadAttention,
    TokenEmbedding,
    TransformerLayer,
)
from attnlab.blocks.mixers import GatedDeltaNet, LatentAttention

GROUPS: dict[str, tuple[type[nn.Module], ...]] = {
    "embedding": (TokenEmbedding,),
    "attention output": (MultiHeadAttention, LatentAttention, GatedDeltaNet),  # every mixer's output
    "feed-forward output": (FeedForward,),
    "residual stream": (TransformerLayer,),
    "logits": (LMHead, MaskedLMHead, ClassificationHead),
}


def group_of(module: nn.Module) -> str | None:
    return next((name for name, kinds in GROUPS.items() if isinstance(module, kinds)), None)


def first_tensor(output: object) -> Tensor:
    """A module's output tensor (a layer or an attention may return it with its cache)."""
    return output if isinstance(output, Tensor) else next(o for o in output if isinstance(o, Tensor))


@contextmanager
def recorded_sizes(model: nn.Module) -> Iterator[dict[str, list[float]]]:
    """Within the block, every forward pass of ``model`` adds each group module's output RMS to the
    yielded ``{group: [rms, ...]}``; the hooks are removed on leaving."""
    sizes: dict[str, list[float]] = {}
    handles = []
    for module in model.modules():
        group = group_of(module)
        if group is not None:

            def hook(_: nn.Module, __: object, output: object, group: str = group) -> None:
                out = first_tensor(output).detach().float()
                sizes.setdefault(group, []).append(float(out.pow(2).mean().sqrt()))

            handles.append(module.register_forward_hook(hook))
    try:
        yield sizes
    finally:
        for handle in handles:
            handle.remove()


def activation_rms(model: nn.Module, batch: dict[str, Tensor]) -> dict[str, float]:
    """The RMS of a coordinate of each group's outputs on ``batch`` (``model.logits``, no gradients),
    averaged over the group's modules."""
    with torch.no_grad(), recorded_sizes(model) as sizes:
        model.logits(batch)
    return {group: float(np.mean(values)) for group, values in sizes.items()}


def width_slope(widths: list[int], sizes: list[float]) -> float:
    """The least-squares slope of log size against log width: 0 when the size does not change with the
    width, 1 when it doubles with it."""
    if min(sizes) <= 0:  # a group initialised at zero (μP's readout) has no size to compare yet
        return float("nan")
    slope, _ = np.polyfit(np.log(widths), np.log(sizes), 1)
    return float(slope)
