"""Attention hooks: small components, each on one seam of softmax attention, each off by default.

    seam            hook                 origin
    scores          ``SoftCap``          cap * tanh(s / cap) (Gemma 2)
    denominator     ``Sinks``            a per-head logit in the softmax denominator (gpt-oss; off-by-one: 0)
    output          ``OutputGate``       sigmoid gate from the layer input before out_proj (Qwen3-Next)
    values          ``ValueResidual``    values mixed with the first layer's (ResFormer)

Which backend computes which (``blocks.backends``): soft-capping is a function of the scores, so the
explicit path applies it to the score matrix and FlexAttention in its ``score_mod``; SDPA's fused
kernels take only an additive mask and refuse it (``schema.model.hook_refusal``). Sinks rescale an
attention's output by ``sigmoid(lse - sink)``, which is exp(s) / (exp(sink) + sum exp(s)) written with
the log-sum-exp ``lse`` of the scores: the explicit path computes ``lse``, FlexAttention returns it, and
SDPA, which returns none, gets the sink as an extra key of score 0 and value 0 whose mask column is the
sink. A sink of -inf makes the factor exactly 1, a gate offset of +inf makes the gate exactly 1, a mix
weight of 0 leaves the values as they are: each hook's identity is the plain block, bit for bit, on
the paths that rescale (explicit, flex). Hooks draw their initial values without moving the global
random state, so a model with a hook at its identity is initialised exactly as one without it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab.blocks.positional import ScoreMod
from attnlab.blocks.roles import ParamRole, declare_roles
from attnlab.schema.hooks import AttnGate, AttnSink
from attnlab.schema.model import ModelConfig


@dataclass(frozen=True)
class AttentionHooks:
    """The hooks of one self-attention module, read from the model config (``of``)."""

    softcap: float | None = ModelConfig.attn_softcap
    sink: AttnSink = ModelConfig.attn_sink
    sink_init: float = ModelConfig.attn_sink_init
    gate: AttnGate = ModelConfig.attn_gate
    gate_offset: float = ModelConfig.attn_gate_offset
    value_residual: float | None = ModelConfig.value_residual
    value_learned: bool = ModelConfig.value_residual_learned

    @classmethod
    def of(cls, cfg: ModelConfig) -> AttentionHooks:
        return cls(
            cfg.attn_softcap,
            AttnSink(cfg.attn_sink),
            cfg.attn_sink_init,
            AttnGate(cfg.attn_gate),
            cfg.attn_gate_offset,
            cfg.value_residual,
            cfg.value_residual_learned,
        )


class SoftCap:
    """Scores squashed into (-cap, cap) by ``cap * tanh(s / cap)``; no weights."""

    def __init__(self, cap: float) -> None:
        self.cap = cap

    def __call__(self, scores: Tensor) -> Tensor:
        return self.cap * torch.tanh(scores / self.cap)

    def score_mod(self, inner: ScoreMod | None) -> ScoreMod:
        """FlexAttention's ``score_mod``: the cap first, then the positional bias ``inner`` (if any),
        the order of the explicit path (the bias is folded into its mask)."""
        cap = self.cap

        def capped(score: Tensor, b: Tensor, h: Tensor, q: Tensor, k: Tensor) -> Tensor:
            score = cap * torch.tanh(score / cap)
            return inner(score, b, h, q, k) if inner is not None else score

        return capped


def soft_cap(cap: float | None) -> SoftCap | None:
    """The hook of ``model.attn_softcap``; None where it is off (null or inf: tanh(s/inf) * inf is nan)."""
    return None if cap is None or cap == float("inf") else SoftCap(cap)


class Sinks(nn.Module):
    """One logit per head that joins the softmax denominator: learned (``logits``, a vector) or 0."""

    def __init__(self, kind: AttnSink, n_heads: int, init: float = ModelConfig.attn_sink_init) -> None:
        super().__init__()
        self.kind = AttnSink(kind)
        if self.kind == AttnSink.learned:
            self.logits = nn.Parameter(torch.full((n_heads,), init))
            declare_roles(self, logits=ParamRole.vector)
        else:
            self.register_buffer("logits", torch.zeros(n_heads), persistent=False)

    def factor(self, lse: Tensor) -> Tensor:
        """sum exp(s) / (exp(sink) + sum exp(s)) per (B, H, Tq), from the scores' log-sum-exp (B, H, Tq)."""
        return torch.sigmoid(lse - self.logits.view(1, -1, 1).to(lse.dtype))

    def extra_key(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Keys and values with a zero key and value appended, and the mask (B or 1, H or 1, Tq, Tk)
        with a column of the sinks (the zero key's score is 0): SDPA's form of the sink."""
        zeros = k.new_zeros((*k.shape[:2], 1, k.shape[3]))
        k, v = torch.cat([k, zeros], dim=2), torch.cat([v, zeros], dim=2)
        batch, tq = max(mask.shape[0], q.shape[0]), q.shape[2]
        mask = mask.expand(batch, q.shape[1], tq, -1)
        column = self.logits.to(mask.dtype).view(1, -1, 1, 1).expand(batch, -1, tq, 1)
        return k, v, torch.cat([mask, column], dim=-1)


class OutputGate(nn.Module):
    """``y * sigmoid(W x + offset)`` on the attention output (B, T, H, hd) before the output projection,
    ``W x`` from the layer input ``x``: one gate per head or per dimension. ``W`` is a hidden matrix."""

    def __init__(
        self, kind: AttnGate, d_model: int, n_heads: int, head_dim: int, offset: float = 0.0
    ) -> None:
        super().__init__()
        self.kind = AttnGate(kind)
        self.n_heads, self.offset = n_heads, offset
        width = n_heads if self.kind == AttnGate.headwise else n_heads * head_dim
        with torch.random.fork_rng(devices=[]):  # initialised by init_weights, without moving the RNG
            self.proj = nn.Linear(d_model, width, bias=False)
        declare_roles(self.proj, weight=ParamRole.hidden_matrix)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        b, t = x.shape[:2]
        logits = self.proj(x)
        if self.offset:
            logits = logits + self.offset
        gate = torch.sigmoid(logits).view(b, t, self.n_heads, -1)
        return y * gate


class ValueResidual(nn.Module):
    """``v + mix * (v_first - v)``: a layer's values (B, Hkv, T, hd) moved towards the first layer's, by
    one weight per key/value head, learned (a vector) or fixed."""

    def __init__(self, n_kv_heads: int, init: float, learned: bool) -> None:
        super().__init__()
        mix = torch.full((n_kv_heads,), float(init))
        if learned:
            self.mix = nn.Parameter(mix)
            declare_roles(self, mix=ParamRole.vector)
        else:
            self.register_buffer("mix", mix, persistent=False)

    def forward(self, v: Tensor, v_first: Tensor) -> Tensor:
        return v + self.mix.view(1, -1, 1, 1).to(v.dtype) * (v_first - v)
