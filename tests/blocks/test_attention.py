"""MultiHeadAttention: the fused (SDPA) path, the explicit path and a hand-written reference agree."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.blocks.attention import (
    CrossAttention,
    MultiHeadAttention,
    SelfAttention,
    record_attention,
    use_attention_path,
)
from attnlab.blocks.backends import BACKENDS, backend_named
from attnlab.blocks.cache import KVCache
from attnlab.blocks.positional import build_positional
from attnlab.blocks.view import AttentionView
from attnlab.schema.pos import pos_config

ATOL = 1e-5
D_MODEL, N_HEADS = 16, 4


def make_attention(
    n_kv_heads: int | None = None,
    scale: float | None = None,
    cross: bool = False,
    bias: bool = True,
    pos=None,
) -> MultiHeadAttention:
    torch.manual_seed(0)
    if cross:
        return CrossAttention(D_MODEL, N_HEADS, n_kv_heads, scale=scale, bias=bias).eval()
    return SelfAttention(D_MODEL, N_HEADS, n_kv_heads, scale=scale, bias=bias, pos=pos).eval()


def make_pos(name: str, causal: bool):
    torch.manual_seed(1)
    pos = pos_config(name, num_buckets=8, max_distance=16) if name == "relative" else pos_config(name)
    pe = build_positional(pos, d_model=D_MODEL, n_heads=N_HEADS, max_len=64, causal=causal)
    if name == "relative":  # the default N(0, 1) init is fine, but make the bias clearly non-zero
        torch.nn.init.normal_(pe.bias.weight, std=2.0)
    return pe


def padding_mask(lengths: list[int], t: int, left: bool = False) -> torch.Tensor:
    """Boolean (B, T): True at real tokens, right-padded (or left-padded)."""
    idx = torch.arange(t)
    mask = torch.stack([idx < n for n in lengths])
    return mask.flip(-1) if left else mask


def run_both(attn: MultiHeadAttention, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Output of the fused path, output of the explicit path, and the recorded weights."""
    fused = attn(*args, **kwargs)
    with record_attention(attn) as maps:
        explicit = attn(*args, **kwargs)
    return fused, explicit, maps[""]


def reference(
    attn: MultiHeadAttention,
    x: torch.Tensor,
    positions: torch.Tensor,
    pos,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T * scale + bias + mask) V written out; -inf marks disallowed keys."""
    b, t, _ = x.shape
    h, hkv, hd = attn.n_heads, attn.n_kv_heads, attn.head_dim
    qkv = x @ attn.qkv_proj.weight.T
    if attn.qkv_proj.bias is not None:
        qkv = qkv + attn.qkv_proj.bias
    q, k, v = qkv[..., : h * hd], qkv[..., h * hd : (h + hkv) * hd], qkv[..., (h + hkv) * hd :]
    q = q.reshape(b, t, h, hd).transpose(1, 2)
    k = k.reshape(b, t, hkv, hd).transpose(1, 2)
    v = v.reshape(b, t, hkv, hd).transpose(1, 2)
    if pos is not None:
        q, k = pos.rotate(q, k, positions, positions)
    k = k.repeat_interleave(h // hkv, dim=1)  # query head i reads key/value head i // (h / hkv)
    v = v.repeat_interleave(h // hkv, dim=1)
    scores = torch.einsum("bhid,bhjd->bhij", q, k) * attn.scale
    if pos is not None and (sb := pos.score_bias(positions, positions)) is not None:
        scores = scores + sb
    allowed = torch.ones(b, 1, t, t, dtype=torch.bool)
    for i in range(t):
        for j in range(t):
            if causal and j > i:
                allowed[:, :, i, j] = False
            if key_padding_mask is not None:
                allowed[:, 0, i, j] &= key_padding_mask[:, j]
    weights = scores.masked_fill(~allowed, -math.inf).softmax(-1)
    out = (weights @ v).transpose(1, 2).reshape(b, t, h * hd)
    return attn.out_proj(out), weights


MASKS = [(True, False), (False, True), (True, True), (False, False)]
MASK_IDS = ["causal", "padding", "causal+padding", "none"]


@pytest.mark.parametrize(("causal", "padded"), MASKS, ids=MASK_IDS)
@pytest.mark.parametrize("pe", ["none", "rope", "alibi", "relative"])
@pytest.mark.parametrize("n_kv_heads", [None, 2, 1], ids=["mha", "gqa2", "mqa"])
def test_fused_equals_explicit_equals_reference(
    causal: bool, padded: bool, pe: str, n_kv_heads: int | None
) -> None:
    pos = make_pos(pe, causal)
    attn = make_attention(n_kv_heads, pos=pos)
    t = 6
    x = torch.randn(3, t, D_MODEL)
    positions = torch.arange(t)
    kpm = padding_mask([6, 4, 2], t) if padded else None
    fused, explicit, weights = run_both(attn, x, AttentionView(positions, causal=causal, padding=kpm))
    ref_out, ref_weights = reference(attn, x, positions, pos, causal, kpm)
    torch.testing.assert_close(fused, explicit, atol=ATOL, rtol=0)
    torch.testing.assert_close(explicit, ref_out, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights, ref_weights.expand_as(weights), atol=ATOL, rtol=0)


@settings(max_examples=15, deadline=None)
@given(scale=st.floats(0.05, 2.0), t=st.integers(1, 7), seed=st.integers(0, 2**16))
def test_custom_scale_matches_reference(scale: float, t: int, seed: int) -> None:
    attn = make_attention(scale=scale)
    assert attn.scale == scale
    torch.manual_seed(seed)
    x = torch.randn(2, t, D_MODEL)
    positions = torch.arange(t)
    fused, explicit, _ = run_both(attn, x, AttentionView(positions, causal=True))
    ref_out, _ = reference(attn, x, positions, None, True, None)
    torch.testing.assert_close(fused, ref_out, atol=ATOL, rtol=0)
    torch.testing.assert_close(explicit, ref_out, atol=ATOL, rtol=0)


def test_default_scale_is_inverse_sqrt_head_dim() -> None:
    assert make_attention().scale == pytest.approx(1 / math.sqrt(D_MODEL // N_HEADS))


def test_projections_without_bias() -> None:
    attn = make_attention(bias=False)
    assert attn.qkv_proj.bias is None and attn.out_proj.bias is None
    x = torch.randn(2, 5, D_MODEL)
    positions = torch.arange(5)
    ref_out, _ = reference(attn, x, positions, None, True, None)
    torch.testing.assert_close(attn(x, AttentionView(positions, causal=True)), ref_out, atol=ATOL, rtol=0)


@settings(max_examples=15, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    causal=st.booleans(),
    pe=st.sampled_from(["none", "rope", "alibi", "relative"]),
)
def test_weights_are_distributions_and_causal_maps_are_lower_triangular(lengths, causal, pe) -> None:
    attn = make_attention(pos=make_pos(pe, causal))
    x = torch.randn(len(lengths), 6, D_MODEL)
    kpm = padding_mask(lengths, 6)
    with record_attention(attn) as maps:
        attn(x, AttentionView(torch.arange(6), causal=causal, padding=kpm))
    weights = maps[""]
    assert weights.shape == (len(lengths), N_HEADS, 6, 6)
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=ATOL, rtol=0)
    assert (weights >= 0).all()
    real_rows = weights.masked_select(~kpm[:, None, None, :] & kpm[:, None, :, None])
    assert (real_rows == 0).all(), "a real query gave weight to a padded key"
    if causal:
        assert (weights.triu(diagonal=1) == 0).all(), "a causal map has weight above the diagonal"


def test_fully_padded_query_row_gives_no_nan() -> None:
    """Left padding with a causal mask: the first query sees only padded keys, yet stays finite."""
    attn = make_attention()
    x = torch.randn(2, 5, D_MODEL)
    kpm = padding_mask([3, 5], 5, left=True)
    fused, explicit, weights = run_both(attn, x, AttentionView(torch.arange(5), causal=True, padding=kpm))
    assert torch.isfinite(fused).all() and torch.isfinite(explicit).all() and torch.isfinite(weights).all()
    torch.testing.assert_close(fused, explicit, atol=ATOL, rtol=0)
    loss = fused.sum()
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in attn.parameters())


def test_weights_recording_stops_after_the_block() -> None:
    attn = make_attention()
    x = torch.randn(1, 4, D_MODEL)
    with record_attention(attn) as maps:
        attn(x, AttentionView(torch.arange(4)))
    assert set(maps) == {""} and attn.path == "sdpa" and not attn.weights_probe._forward_hooks


@pytest.mark.parametrize("n_kv_heads", [None, 2, 1], ids=["mha", "gqa2", "mqa"])
def test_cross_attention_against_reference(n_kv_heads: int | None) -> None:
    attn = make_attention(n_kv_heads, cross=True)
    x, memory = torch.randn(2, 3, D_MODEL), torch.randn(2, 5, D_MODEL)
    kpm = padding_mask([5, 2], 5)
    view = AttentionView(torch.arange(3), memory=memory, memory_padding=kpm)
    fused, explicit, weights = run_both(attn, x, view)
    h, hkv, hd = N_HEADS, attn.n_kv_heads, attn.head_dim
    q = attn.q_proj(x).reshape(2, 3, h, hd).transpose(1, 2)
    k, v = attn.kv_proj(memory).reshape(2, 5, 2, hkv, hd).permute(2, 0, 3, 1, 4)
    k, v = k.repeat_interleave(h // hkv, 1), v.repeat_interleave(h // hkv, 1)
    scores = (q @ k.transpose(-1, -2)) * attn.scale
    ref_weights = scores.masked_fill(~kpm[:, None, None, :], -math.inf).softmax(-1)
    ref = attn.out_proj((ref_weights @ v).transpose(1, 2).reshape(2, 3, h * hd))
    torch.testing.assert_close(fused, explicit, atol=ATOL, rtol=0)
    torch.testing.assert_close(explicit, ref, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights, ref_weights, atol=ATOL, rtol=0)


def test_cross_attention_without_context_or_cache_is_a_clear_error() -> None:
    attn = make_attention(cross=True)
    with pytest.raises(ValueError, match="cross-attention needs a context"):
        attn(torch.randn(1, 2, D_MODEL), AttentionView(torch.arange(2)))


def test_indivisible_heads_are_clear_errors() -> None:
    with pytest.raises(ValueError, match=r"^model.d_model=18: must be divisible by model.n_heads=4$"):
        SelfAttention(18, 4)
    with pytest.raises(ValueError, match=r"^model.n_kv_heads=3: must divide model.n_heads=4$"):
        CrossAttention(16, 4, 3)


def test_backend_is_an_object_shared_by_name() -> None:
    """The backend is a stateless object named by ``model.attn_backend``; switching a path swaps the
    object and gives the previous one back; an unknown or non-configurable name is one clear line."""
    attn = make_attention()
    assert attn.backend is BACKENDS["sdpa"] and attn.path == "sdpa"
    with use_attention_path(attn, "explicit"):
        assert attn.backend is BACKENDS["explicit"]
    assert attn.backend is BACKENDS["sdpa"]
    with pytest.raises(ValueError, match=r"^attention backend 'fast' is not one of sdpa, explicit, flex$"):
        backend_named("fast")
    with pytest.raises(ValueError, match=r"^attention backend 'fused' is not one of sdpa, flex, explicit$"):
        SelfAttention(D_MODEL, N_HEADS, backend="fused")
    assert (
        SelfAttention(D_MODEL, N_HEADS, backend="explicit").path == "explicit"
    )  # model.attn_backend=explicit


def test_the_positional_encoding_is_referenced_not_registered() -> None:
    """Self-attention applies the stack's encoding, given at build time; its weights stay the
    embedding's alone (state dict, parameters and submodules unchanged by the reference)."""
    pos = make_pos("relative", causal=True)
    attn = make_attention(pos=pos)
    assert attn.pos is pos and make_attention().pos is None and make_attention(cross=True).pos is None
    assert not any(name.startswith("pos") for name in attn.state_dict())
    assert all(m is not pos for m in attn.modules())
    x, view = torch.randn(2, 4, D_MODEL), AttentionView(torch.arange(4), causal=True)
    ref_out, _ = reference(attn, x, torch.arange(4), pos, True, None)
    torch.testing.assert_close(attn(x, view), ref_out, atol=ATOL, rtol=0)


def test_a_view_hands_each_layer_its_caches() -> None:
    cache = KVCache.empty(2, cross=True)
    view = AttentionView(torch.arange(3), cache=cache)
    assert view.layer_caches(1) == (cache.self_attn[1], cache.cross_attn[1])
    assert view.layer_caches(1)[0] is cache.self_attn[1]
    assert AttentionView(torch.arange(3), cache=KVCache.empty(2)).layer_caches(0)[1] is None
    assert AttentionView(torch.arange(3)).layer_caches(0) == (None, None)
