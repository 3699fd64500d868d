"""Hooks against the attention modules of the models that introduced them, where the whole model needs
more than attnlab has (gpt-oss's mixture of experts, Qwen3-Next's linear-attention layers): gpt-oss's
learned sinks (``GptOssAttention``) and Qwen3-Next's gated full attention with partial RoPE
(``Qwen3NextAttention``), each with every parameter perturbed, float32, on a padded batch, through
attnlab's explicit, SDPA (sinks as an extra key) and, where it runs, FlexAttention paths."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab.blocks import flex as flex_module
from attnlab.blocks.attention import SelfAttention
from attnlab.blocks.hooks import AttentionHooks
from attnlab.blocks.positional import RotaryPositionalEncoding
from attnlab.blocks.view import AttentionView

transformers = pytest.importorskip("transformers")
from transformers.models.gpt_oss import modeling_gpt_oss  # noqa: E402
from transformers.models.qwen3_next import modeling_qwen3_next  # noqa: E402

TOL = 1e-5
D, HEADS, KV, HEAD_DIM, B, T, WINDOW = 32, 4, 2, 8, 3, 9, 4


def perturb(module: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.3 * torch.randn_like(p))
    return module.eval()


def padded() -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs (B, T, D) and a right-padding mask: rows of 9, 6 and 3 real tokens."""
    x = torch.randn(B, T, D, generator=torch.Generator().manual_seed(1))
    return x, (torch.arange(T) < torch.tensor([9, 6, 3])[:, None])


def hf_mask(padding: torch.Tensor, window: int | None) -> torch.Tensor:
    """Hugging Face's 4-D additive mask: causal, windowed (keys after ``q - window``), padded keys hidden."""
    q, k = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = (k <= q) & ((k > q - window) if window else True)
    allowed = allowed[None, None] & padding[:, None, None, :]
    return torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)


def ours(
    hooks: AttentionHooks, window: int | None, fraction: float, bias: bool, qk_norm: bool
) -> SelfAttention:
    pos = RotaryPositionalEncoding(HEAD_DIM, base=100.0, fraction=fraction)
    return SelfAttention(
        D, HEADS, KV, bias=bias, window=window, pos=pos, hooks=hooks, qk_norm=qk_norm, norm_eps=1e-6
    )


def compare(
    theirs: torch.Tensor, attn: SelfAttention, x: torch.Tensor, padding: torch.Tensor, paths: tuple
) -> None:
    real = padding
    view = AttentionView(torch.arange(T), causal=True, padding=padding)
    for path in paths:
        from attnlab.blocks.backends import backend_named

        attn.backend = backend_named(path)
        with torch.no_grad():
            mine = attn(x, view)
        assert theirs[real].abs().max() > 0.1
        assert (mine - theirs)[real].abs().max().item() <= TOL, path


@pytest.mark.parametrize("layer", [0, 1], ids=["sliding", "full"])
def test_learned_sinks_match_gpt_oss_attention(layer: int) -> None:
    config = transformers.GptOssConfig(
        hidden_size=D,
        num_attention_heads=HEADS,
        num_key_value_heads=KV,
        head_dim=HEAD_DIM,
        num_hidden_layers=2,
        sliding_window=WINDOW,
        rope_parameters={"rope_type": "default", "rope_theta": 100.0},
        attention_bias=True,
    )
    config._attn_implementation = "eager"
    hf = perturb(modeling_gpt_oss.GptOssAttention(config, layer))
    window = WINDOW if config.layer_types[layer] == "sliding_attention" else None
    x, padding = padded()
    cos, sin = modeling_gpt_oss.GptOssRotaryEmbedding(config)(x, torch.arange(T)[None])
    with torch.no_grad():
        theirs = hf(x, (cos, sin), hf_mask(padding, window))[0]
    attn = ours(AttentionHooks(sink="learned"), window, 1.0, bias=True, qk_norm=False)
    with torch.no_grad():
        attn.qkv_proj.weight.copy_(torch.cat([hf.q_proj.weight, hf.k_proj.weight, hf.v_proj.weight]))
        attn.qkv_proj.bias.copy_(torch.cat([hf.q_proj.bias, hf.k_proj.bias, hf.v_proj.bias]))
        attn.out_proj.load_state_dict(hf.o_proj.state_dict())
        attn.sinks.logits.copy_(hf.sinks)
    compare(theirs, attn, x, padding, ("explicit", "sdpa"))


def test_gated_partial_rope_attention_matches_qwen3_next(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flex runs its uncompiled kernel (the same ``mask_mod``, evaluated over the whole score matrix):
    the gate and the partial rotation act outside the kernel, whose compiled form for a causal, padded
    mask without a score_mod ``test_attention_hooks.py`` checks (a compilation of seconds of g++)."""
    monkeypatch.setattr(flex_module, "COMPILE_FROM", 10**9)
    config = transformers.Qwen3NextConfig(
        hidden_size=D,
        num_attention_heads=HEADS,
        num_key_value_heads=KV,
        head_dim=HEAD_DIM,
        num_hidden_layers=4,
        rope_parameters={"rope_type": "default", "rope_theta": 100.0, "partial_rotary_factor": 0.5},
    )
    config._attn_implementation = "eager"
    hf = perturb(modeling_qwen3_next.Qwen3NextAttention(config, 3))
    x, padding = padded()
    cos, sin = modeling_qwen3_next.Qwen3NextRotaryEmbedding(config)(x, torch.arange(T)[None])
    with torch.no_grad():
        theirs = hf(x, (cos, sin), hf_mask(padding, None))[0]
    attn = ours(AttentionHooks(gate="elementwise"), None, 0.5, bias=False, qk_norm=True)
    query, gate = hf.q_proj.weight.view(HEADS, 2, HEAD_DIM, D).unbind(
        1
    )  # per head: its query rows, its gate rows
    with torch.no_grad():
        attn.qkv_proj.weight.copy_(torch.cat([query.reshape(-1, D), hf.k_proj.weight, hf.v_proj.weight]))
        attn.gate.proj.weight.copy_(gate.reshape(-1, D))
        attn.out_proj.weight.copy_(hf.o_proj.weight)
        attn.q_norm.weight.copy_(1.0 + hf.q_norm.weight)  # Qwen3-Next's norms multiply by 1 + weight
        attn.k_norm.weight.copy_(1.0 + hf.k_norm.weight)
    compare(theirs, attn, x, padding, ("explicit", "sdpa", "flex"))
