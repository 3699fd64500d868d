"""Output heads: language-model logits, BERT's masked-LM head, pooled classification."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.blocks.ffn import ACTIVATIONS
from attnlab.blocks.norm import build_norm
from attnlab.blocks.roles import ParamRole, declare_roles
from attnlab.schema.model import Activation, Pooling


class LMHead(nn.Module):
    """Hidden states to vocabulary logits; ``tied_to`` shares the token embedding matrix.

    ``scale`` multiplies the hidden states first (T5 scales by d_model**-0.5 when tied).
    ``bias`` adds a logits bias (Marian's ``final_logits_bias``).
    """

    def __init__(
        self,
        d_model: int,
        vocab_size: int,
        tied_to: nn.Embedding | None = None,
        *,
        bias: bool,
        scale: float = 1.0,
    ) -> None:
        super().__init__()
        self.tied_to = [tied_to] if tied_to is not None else None  # a list keeps it out of submodules
        self.proj = None if tied_to is not None else nn.Linear(d_model, vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(vocab_size)) if bias else None
        self.scale = scale
        if self.proj is not None:  # a tied readout is the token table: an embedding
            declare_roles(self.proj, weight=ParamRole.readout)

    @property
    def weight(self) -> Tensor:
        return self.tied_to[0].weight if self.tied_to is not None else self.proj.weight

    def forward(self, x: Tensor) -> Tensor:
        # F.linear is one fused product (+ bias) for any leading shape, where ``x @ w.t()`` reshapes around it
        return F.linear(x * self.scale if self.scale != 1.0 else x, self.weight, self.bias)


class MaskedLMHead(nn.Module):
    """BERT's head: dense, activation, norm, then tied (or untied) projection to the vocabulary + bias."""

    def __init__(
        self,
        d_model: int,
        vocab_size: int,
        tied_to: nn.Embedding | None,
        *,
        activation: str,
        norm: str,
        norm_eps: float,
        norm_bias: bool,
    ) -> None:
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)
        declare_roles(self.dense, weight=ParamRole.hidden_matrix)
        self.act = ACTIVATIONS.get(Activation(activation), ACTIVATIONS[Activation.gelu])  # gated: plain GELU
        self.norm = build_norm(norm, d_model, norm_eps, norm_bias)
        self.decoder = LMHead(d_model, vocab_size, tied_to, bias=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.decoder(self.norm(self.act(self.dense(x))))


def pool(hidden: Tensor, mask: Tensor | None, how: str) -> Tensor:
    """Reduce (B, T, D) to (B, D): first token (``cls``), or mean/max over real tokens (``Pooling``)."""
    how = Pooling(how)
    if how == Pooling.cls:
        return hidden[:, 0]
    if mask is None:
        mask = torch.ones(hidden.shape[:2], dtype=torch.bool, device=hidden.device)
    keep = mask.bool().unsqueeze(-1)
    if how == Pooling.mean:
        return (hidden * keep).sum(1) / keep.sum(1).clamp(min=1)
    return hidden.masked_fill(~keep, torch.finfo(hidden.dtype).min).amax(1)


class ClassificationHead(nn.Module):
    """Pool, then optionally BERT's pooler (dense + tanh), dropout and a linear classifier; ``scale``
    multiplies the classifier's input (1, or μP's 1/width multiplier: ``models.parametrization``)."""

    def __init__(self, d_model: int, num_classes: int, pooling: str, hidden: bool, dropout: float) -> None:
        super().__init__()
        self.pooling = Pooling(pooling)
        self.pre = nn.Sequential(nn.Linear(d_model, d_model), nn.Tanh()) if hidden else nn.Identity()
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(d_model, num_classes)
        self.scale = 1.0
        if hidden:
            declare_roles(self.pre[0], weight=ParamRole.hidden_matrix)
        declare_roles(self.classifier, weight=ParamRole.readout)

    def forward(self, hidden: Tensor, mask: Tensor | None = None) -> Tensor:
        pooled = self.dropout(self.pre(pool(hidden, mask, self.pooling)))
        return self.classifier(pooled * self.scale if self.scale != 1.0 else pooled)
