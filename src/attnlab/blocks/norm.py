"""Normalisation layers: LayerNorm (Ba et al. 2016) and RMSNorm (Zhang & Sennrich 2019)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.schema.model import ModelConfig, Norm


class RMSNorm(nn.Module):
    """Scale by the root mean square, computed in float32 (as T5 and Llama do); no centring, no bias."""

    def __init__(self, d_model: int, eps: float = ModelConfig.norm_eps) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).to(x.dtype) * self.weight


def build_norm(
    name: str, d_model: int, eps: float = ModelConfig.norm_eps, bias: bool = ModelConfig.norm_bias
) -> nn.Module:
    """``layernorm`` or ``rmsnorm`` (``Norm``) of width ``d_model``."""
    if Norm(name) == Norm.layernorm:
        return nn.LayerNorm(d_model, eps=eps, bias=bias)
    return RMSNorm(d_model, eps=eps)
