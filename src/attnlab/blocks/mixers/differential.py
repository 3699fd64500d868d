"""Differential attention (Diff Transformer, Ye et al., ICLR 2025), as Hugging Face's DiffLlama computes it.

Two softmax maps over the same keys, their difference weighting the values: noise that both maps give
to irrelevant tokens cancels. The heads come in pairs, head ``i`` and head ``i + H/2``: each pair's
output is ``A_i V - λ A_{i+H/2} V`` with ``V`` the two value halves side by side (twice a head's width),
then an RMSNorm per pair without a gain, scaled by ``1 - λ_init``. λ is re-parametrised per layer,

    λ = exp(λ_q1 · λ_k1) - exp(λ_q2 · λ_k2) + λ_init,    λ_init = 0.8 - 0.6 exp(-0.3 (l - 1)),

with ``l`` the layer's number counted from 1 and the four λ vectors of a head's width learned.

The two maps are two calls of the module's attention backend (SDPA, explicit or FlexAttention) with
the same queries, keys and mask, one per value half: Hugging Face's two-call form (the first half of
the key/value heads, tiled back to all of them, then the second half). Queries, keys and values, RoPE,
the KV cache and the window are ``SelfAttention``'s; only what happens after the keys differs.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.blocks.attention import SelfAttention, written_only
from attnlab.blocks.backends import Keys
from attnlab.blocks.cache import AttentionCache
from attnlab.blocks.masks import KeyRule
from attnlab.blocks.roles import ParamRole, declare_own_init, declare_roles
from attnlab.blocks.view import AttentionView
from attnlab.schema.model import ModelConfig

LAMBDA_STD = 0.1  # DiffLlama's lambda_std_dev: the λ vectors start at N(0, 0.1)


def lambda_init(layer: int) -> float:
    """λ_init of layer ``layer`` (counted from 1): 0.8 - 0.6 exp(-0.3 (layer - 1))."""
    return 0.8 - 0.6 * math.exp(-0.3 * (layer - 1))


class DifferentialAttention(SelfAttention):
    """Differential self-attention; ``layer`` (from 1) sets λ_init, ``norm_eps`` the pair norm's epsilon.

    ``n_heads`` and ``n_kv_heads`` must be even (heads pair up; the values split into halves by head).
    Other arguments are ``SelfAttention``'s (QK-norm and the hooks of a softmax layer are not applied).
    """

    tensor_parallel_refusal: ClassVar[str] = (
        "differential attention: its head pairs (i, i + H/2) would land on different ranks; no plan yet"
    )

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = ModelConfig.n_kv_heads,
        *,
        layer: int = 1,
        norm_eps: float = ModelConfig.norm_eps,
        **settings: Any,
    ) -> None:
        kv = n_kv_heads or n_heads
        if n_heads % 2 or kv % 2:
            raise ValueError(
                f"differential attention n_heads={n_heads}, n_kv_heads={kv}: both must be even (heads pair up)"
            )
        if layer < 1:
            raise ValueError(f"differential attention layer={layer}: layers count from 1")
        super().__init__(d_model, n_heads, n_kv_heads, norm_eps=norm_eps, **settings)
        self.lambda_init = lambda_init(layer)
        self.pair_eps = norm_eps
        for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
            setattr(self, name, nn.Parameter(torch.randn(self.head_dim) * LAMBDA_STD))
        names = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")
        declare_roles(self, **dict.fromkeys(names, ParamRole.vector))
        declare_own_init(self, *names)  # N(0, 0.1) whatever model.init_std

    def lam(self) -> Tensor:
        """λ = exp(λ_q1·λ_k1) - exp(λ_q2·λ_k2) + λ_init (a scalar, summed in float32 as HF does)."""
        first = torch.exp(torch.sum(self.lambda_q1 * self.lambda_k1, dtype=torch.float32))
        second = torch.exp(torch.sum(self.lambda_q2 * self.lambda_k2, dtype=torch.float32))
        return first - second + self.lambda_init

    def forward(self, x: Tensor, view: AttentionView, cache: AttentionCache | None = None) -> Tensor:
        """As ``SelfAttention.forward``, the weighted sum replaced by the difference of two maps."""
        if view.documents is not None and cache is not None:
            raise ValueError("document ids apply without a KV cache (decode one document at a time)")
        q, k, v = self._qkv_heads(x)
        positions, padding, pos = view.positions, view.padding, self.pos
        if pos is not None:
            q, k = pos.rotate(q, k, positions, positions)
        k_pos = positions
        if cache is not None:
            if padding is not None:
                padding = padding[:, cache.dropped :]
            k, v, k_pos = cache.append(k, v, positions, keep=self.window if view.causal else None)
            padding = written_only(cache, padding, q.shape[0])
        keys = Keys(
            positions, k_pos, KeyRule(causal=view.causal, window=self.window), padding, view.documents
        )
        if self.logit_record is not None:  # QK-clip and its metric: both maps share these logits
            self._record_max_logits(q, k, keys)
        y = self._differential(q, k, v, keys, view)  # (B, T, H/2, 2 hd)
        return self.out_proj(y.reshape(x.shape[0], x.shape[1], -1))

    def _differential(self, q: Tensor, k: Tensor, v: Tensor, keys: Keys, view: AttentionView) -> Tensor:
        """Both maps (two backend calls sharing the mask), each pair's difference, its norm and scale."""
        halves = [half.repeat(1, 2, 1, 1) for half in v.chunk(2, dim=1)]  # each half on every kv head
        y = torch.cat([self.backend.attend(self, q, k, h, keys, view.masks) for h in halves], dim=-1)
        first, second = y.transpose(1, 2).chunk(2, dim=2)  # heads i and i + H/2: (B, T, H/2, 2 hd)
        diff = first - self.lam().to(q.dtype) * second
        return (1 - self.lambda_init) * F.rms_norm(diff, (diff.shape[-1],), eps=self.pair_eps)
