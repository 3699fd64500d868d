"""QK-norm: an RMSNorm over each head's queries and keys, applied before RoPE (as Qwen3 does)."""

from __future__ import annotations

import pytest
import torch

from attnlab.blocks.attention import MultiHeadAttention, SelfAttention
from attnlab.blocks.positional import RotaryPositionalEncoding
from attnlab.blocks.view import AttentionView

ATOL = 1e-5
D_MODEL, N_HEADS = 16, 4


def scaled_queries_and_keys(attn: MultiHeadAttention, factor: float) -> None:
    """Multiply the query and key rows of the projection (weights and biases) by ``factor``."""
    q_dim, kv_dim, _ = attn.split_sizes
    with torch.no_grad():
        for t in (attn.qkv_proj.weight, attn.qkv_proj.bias):
            t[: q_dim + kv_dim] *= factor


@pytest.mark.parametrize("qk_norm", [True, False])
def test_qk_norm_makes_attention_blind_to_the_scale_of_queries_and_keys(qk_norm: bool) -> None:
    torch.manual_seed(0)
    rope = RotaryPositionalEncoding(D_MODEL // N_HEADS)
    attn = SelfAttention(
        D_MODEL, N_HEADS, 2, qk_norm=qk_norm, norm_eps=1e-6, pos=rope
    ).eval()  # tight invariance
    x, view = torch.randn(2, 7, D_MODEL), AttentionView(torch.arange(7), causal=True)
    before = attn(x, view)
    scaled_queries_and_keys(attn, 5.0)
    after = attn(x, view)
    if qk_norm:
        torch.testing.assert_close(after, before, atol=ATOL, rtol=0)
    else:
        assert (after - before).abs().max() > 1e-2


def test_qk_norm_is_per_head_and_comes_before_rope() -> None:
    """The queries RoPE receives have unit RMS in every head (norm weights at one)."""
    torch.manual_seed(0)
    rope, seen = RotaryPositionalEncoding(D_MODEL // N_HEADS), {}
    attn = SelfAttention(D_MODEL, N_HEADS, qk_norm=True, norm_eps=1e-6, pos=rope).eval()

    def rotate(q, k, q_pos, k_pos):
        seen["q"], seen["k"] = q, k
        return RotaryPositionalEncoding.rotate(rope, q, k, q_pos, k_pos)

    rope.rotate = rotate
    attn(torch.randn(2, 5, D_MODEL) * 3, AttentionView(torch.arange(5), causal=True))
    for t in seen.values():
        torch.testing.assert_close(t.pow(2).mean(-1).sqrt(), torch.ones(t.shape[:-1]), atol=1e-4, rtol=0)
    assert attn.q_norm.weight.shape == (D_MODEL // N_HEADS,)
