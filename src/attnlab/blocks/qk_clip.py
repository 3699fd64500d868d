"""Each head's largest attention logit, and QK-clip: query and key weights scaled back where it is too large.

A head's logit is ``scale * q . k`` over the keys a query may see (before positional biases, caps and
the softmax). Recording it needs the (B, H, Tq, Tk) scores the fused kernels never return, so it is
computed beside the attention, without gradients, only while ``recording`` is on (``optim.log_max_logits``
logs it; ``optim.qk_clip`` reads it).

QK-clip (Kimi K2's MuonClip; Megatron-LM's ``optimizer/qk_clip.py``): after an optimizer step, a head
``h`` whose largest logit ``S_h`` exceeds the threshold ``tau`` has its logits scaled by
``gamma_h = tau / S_h``: its query rows of ``W_q`` (and bias) by ``gamma_h / sqrt(gamma_g)`` and its
key/value group's key rows by ``sqrt(gamma_g)``, ``gamma_g`` the smallest ``gamma`` of the group's
heads, so that under grouped-query attention each head's logits scale by exactly its own ``gamma``
and a head within the threshold is left as it is. RoPE (partial or not) rotates linearly, so it
commutes with the scaling; a QK-norm would normalise the scaling away, and is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from attnlab.blocks.attention import SelfAttention, attention_modules


def self_attentions(model: nn.Module) -> list[SelfAttention]:
    return [m for m in attention_modules(model).values() if isinstance(m, SelfAttention)]


@contextmanager
def recording(model: nn.Module) -> Iterator[dict[str, Tensor]]:
    """Record each self-attention's largest logit per head while the block runs; yields them by
    module name, filled by the forward passes (the largest over all of them)."""
    modules = {name: m for name, m in attention_modules(model).items() if isinstance(m, SelfAttention)}
    found: dict[str, Tensor] = {}
    for name, m in modules.items():
        m.logit_record = (found, name)
    try:
        yield found
    finally:
        for m in modules.values():
            m.logit_record = None


def check_clippable(model: nn.Module) -> None:
    """A ValueError (one line) where QK-clip cannot scale the logits by the projections (a mixer says
    why in ``qk_clip_refusal``; one without softmax logits, gated DeltaNet, has nothing to clip)."""
    for name, module in model.named_modules():
        if getattr(module, "qk_clip_refusal", ""):
            raise ValueError(f"optim.qk_clip: {name}: {module.qk_clip_refusal}")
    for attn in self_attentions(model):
        if attn.q_norm is not None:
            raise ValueError(
                "optim.qk_clip: model.qk_norm normalises queries and keys after the projections QK-clip "
                "scales; set model.qk_norm=false or optim.qk_clip=null"
            )
        if "qkv_proj" not in attn._modules:
            raise ValueError("optim.qk_clip: the projections are split by tensor parallel; not supported yet")


@torch.no_grad()
def clip_qk(model: nn.Module, threshold: float, measure: Callable[[], object]) -> dict[str, Tensor]:
    """Scale back the query and key rows of every head whose largest logit, measured by ``measure()``
    (a forward pass), exceeds ``threshold``; the measured logits by module name."""
    with recording(model) as found:
        measure()
    modules = attention_modules(model)
    for name, largest in found.items():
        gamma = (threshold / largest.clamp(min=1e-30)).clamp(max=1.0)
        if bool((gamma < 1.0).any()):
            _scale_heads(modules[name], gamma)
    return found


def _scale_heads(attn: SelfAttention, gamma: Tensor) -> None:
    """Head ``h``'s logits times ``gamma[h]``: queries by gamma / sqrt(gamma_group), keys by sqrt(gamma_group)."""
    group_gamma = gamma.view(attn.n_kv_heads, -1).amin(dim=1)  # the smallest of each key/value group
    q_factor = gamma / group_gamma.repeat_interleave(attn.n_heads // attn.n_kv_heads).sqrt()
    rows = torch.cat([q_factor, group_gamma.sqrt(), torch.ones(attn.n_kv_heads, device=gamma.device)])
    rows = rows.repeat_interleave(attn.head_dim).to(attn.qkv_proj.weight.dtype)
    attn.qkv_proj.weight.mul_(rows[:, None])
    if attn.qkv_proj.bias is not None:
        attn.qkv_proj.bias.mul_(rows)
