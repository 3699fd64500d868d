"""Gradient × input attribution (Shrikumar et al. 2016; Denil et al. 2014) per input token or patch.

The input is the output of the model's embedding module (tokens with positions, or image
patches); the attribution of position t is ``sum_d x[t, d] * d score / d x[t, d]``. For a score
that is linear in the embeddings this is exactly each position's contribution to the score.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from attnlab.models.common import eval_mode
from attnlab.schema.data import IGNORE_INDEX


def gradient_x_input(score_fn: Callable[[], Tensor], embedding: nn.Module) -> Tensor:
    """Attribution (B, T) of the scores (B,) that ``score_fn`` computes to the output of ``embedding``.

    ``score_fn`` runs the model; the embedding's output (B, T, D) is captured as a leaf tensor,
    so the gradient reaches it even when the parameters do not require gradients.
    """
    captured: list[Tensor] = []

    def capture(_module: nn.Module, _inputs: object, output: Tensor) -> Tensor:
        leaf = output.detach().requires_grad_(True)
        captured.append(leaf)
        return leaf

    handle = embedding.register_forward_hook(capture)
    try:
        with torch.enable_grad():
            scores = score_fn()
            if len(captured) != 1:
                raise ValueError(f"the embedding module ran {len(captured)} times in one pass; expected once")
            (grad,) = torch.autograd.grad(scores.sum(), captured[0])
    finally:
        handle.remove()
    return (grad * captured[0]).sum(dim=-1).detach()


def attribution_score(
    model: nn.Module, batch: dict[str, Tensor], target: Tensor | None, position: Tensor | None
) -> Tensor:
    """The scores (B,) that attribution explains, read from the model's ``logits(batch)``.

    Per-example logits (classifiers, ViT): the logit of class ``target`` (default: the predicted
    class). Per-position logits: at ``position`` (B,), else at the model's readout position (gpt:
    the last real token), the logit of ``target`` (default: the predicted token); where the model
    has no readout position and none is given, the log-likelihood of ``labels`` (seq2seq: the
    target given the source).
    """
    logits = model.logits(batch)
    rows = torch.arange(logits.shape[0], device=logits.device)
    if logits.dim() == 3:
        position = position if position is not None else model.readout_positions(batch)
        if position is None:
            return _log_likelihood(logits, batch)
        logits = logits[rows, position]
    if target is None:
        target = logits.argmax(dim=-1)
    return logits[rows, target]


def _log_likelihood(logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
    """Sum over positions of log p(label) (B,); labels of IGNORE_INDEX are left out."""
    labels = batch.get("labels")
    if labels is None:
        raise ValueError(
            "masked-LM attribution needs the position (B,) of the token to explain; "
            "a sequence output needs its labels (B, T)"
        )
    logp = logits.float().log_softmax(dim=-1).gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (logp * (labels != IGNORE_INDEX)).sum(dim=1)


def token_attribution(
    model: nn.Module,
    batch: dict[str, Tensor],
    *,
    target: Tensor | None = None,
    position: Tensor | None = None,
) -> Tensor:
    """Gradient × input (B, T) over input tokens (source tokens for seq2seq) or image patches (vit).

    See ``attribution_score`` for what is explained; ``target`` and ``position`` are (B,) tensors.
    """
    with eval_mode(model):
        return gradient_x_input(
            lambda: attribution_score(model, batch, target, position), model.input_embedding()
        )
