"""Normalisation layers: LayerNorm (Ba et al. 2016) and RMSNorm (Zhang & Sennrich 2019)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

NORMS = ("layernorm", "rmsnorm")


class RMSNorm(nn.Module):
    """Scale by the root mean square, computed in float32 (as T5 and Llama do); no centring, no bias."""

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).to(x.dtype) * self.weight


def build_norm(name: str, d_model: int, eps: float = 1e-5, bias: bool = True) -> nn.Module:
    """``layernorm`` or ``rmsnorm`` of width ``d_model``."""
    if name == "layernorm":
        return nn.LayerNorm(d_model, eps=eps, bias=bias)
    if name == "rmsnorm":
        return RMSNorm(d_model, eps=eps)
    raise ValueError(f"model.norm={name!r} is not a norm; choose one of {', '.join(NORMS)}")
