"""Gradient × input attribution (Shrikumar et al. 2016; Denil et al. 2014) per input token or patch.

The input is the output of the model's embedding module (tokens with positions, or image
patches); the attribution of position t is ``sum_d x[t, d] * d score / d x[t, d]``. For a score
that is linear in the embeddings this is exactly each position's contribution to the score.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from attnlab.explain.inputs import family, input_embedding, run_model
from attnlab.generate.common import eval_mode


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


def _last_positions(batch: dict[str, Tensor]) -> Tensor:
    ids = batch["input_ids"]
    mask = batch.get("attention_mask")
    if mask is None:
        return torch.full((ids.shape[0],), ids.shape[1] - 1, device=ids.device)
    return mask.long().sum(dim=1) - 1  # right padding: the last real token


def attribution_score(
    model: nn.Module, batch: dict[str, Tensor], target: Tensor | None, position: Tensor | None
) -> Tensor:
    """The scores (B,) that attribution explains, family by family.

    gpt: the logit of ``target`` (default: the predicted token) after the last token; bert with a
    classifier, and vit: the logit of class ``target`` (default: the predicted class); bert MLM: the
    logit of ``target`` at ``position`` (B,); seq2seq: the log-likelihood of ``labels`` given the source.
    """
    logits = run_model(model, batch)
    kind = family(model)
    rows = torch.arange(logits.shape[0], device=logits.device)
    if kind == "seq2seq":
        labels = batch["labels"]
        logp = logits.float().log_softmax(dim=-1).gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        return (logp * (labels != -100)).sum(dim=1)
    if logits.dim() == 3:  # per-token logits: gpt, or bert's masked-LM head
        if kind == "gpt":
            position = _last_positions(batch)
        elif position is None:
            raise ValueError("masked-LM attribution needs the position (B,) of the token to explain")
        logits = logits[rows, position]
    if target is None:
        target = logits.argmax(dim=-1)
    return logits[rows, target]


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
            lambda: attribution_score(model, batch, target, position), input_embedding(model)
        )
