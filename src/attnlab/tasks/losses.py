"""The losses and counts that the task modules share: cross-entropy over labelled positions (compiled
on request), token hits, the labelled rows, the label count; ``IGNORE_INDEX`` marks an unlabelled one."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.schema.data import IGNORE_INDEX


def plain_cross_entropy(logits: Tensor, labels: Tensor, smoothing: float = 0.0) -> Tensor:
    """Mean cross-entropy of logits (..., V) over positions whose label is not IGNORE_INDEX."""
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        labels.reshape(-1),
        ignore_index=IGNORE_INDEX,
        label_smoothing=smoothing,
    )


@functools.cache
def _compiled_cross_entropy() -> Callable[..., Tensor]:
    return torch.compile(plain_cross_entropy)  # asked for at the first compiled loss: imports dynamo


def cross_entropy(
    logits: Tensor, labels: Tensor, smoothing: float = 0.0, *, compiled: bool = False
) -> Tensor:
    """``plain_cross_entropy``, compiled with ``compiled=True``. Under bf16 autocast the eager loss casts
    the (B, T, V) logits to float32 and keeps their float32 log-softmax for the backward pass, two
    copies of the largest tensor of a language model's step (2.3 GiB each for GPT-2 at B 12, T 1024);
    compiled, the cast happens inside fused kernels, as in nanoGPT, whose compiled forward holds its
    loss (a compiled GPT-2 step measured 2.3 GiB over nanoGPT's and 0.88x its speed without this)."""
    return (_compiled_cross_entropy() if compiled else plain_cross_entropy)(logits, labels, smoothing)


def is_compiled(module: nn.Module) -> bool:
    """Whether ``module.compile()`` was called (it compiles the module in place)."""
    return getattr(module, "_compiled_call_impl", None) is not None


def token_hits(logits: Tensor, labels: Tensor) -> Tensor:
    """1.0 where the argmax of ``logits`` equals a label that is not IGNORE_INDEX (a flat vector)."""
    keep = labels != IGNORE_INDEX
    return (logits.argmax(-1)[keep] == labels[keep]).float()


def labelled(logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """The rows of ``logits`` (..., C) whose label is not IGNORE_INDEX, as (N, C), and those labels (N,)."""
    keep = labels != IGNORE_INDEX
    return logits[keep], labels[keep]


def count_labels(labels: Tensor) -> Tensor:
    return (labels != IGNORE_INDEX).sum()
