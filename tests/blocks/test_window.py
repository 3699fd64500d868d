"""Sliding-window attention: the rule, both attention paths, and a KV cache that keeps only the window."""

from __future__ import annotations

import pytest
import torch

from attnlab.blocks.attention import CrossAttention, SelfAttention, record_attention, use_attention_path
from attnlab.blocks.cache import AttentionCache
from attnlab.blocks.masks import KeyRule
from attnlab.blocks.positional import build_positional
from attnlab.blocks.view import AttentionView
from attnlab.schema.pos import PosName, pos_config

ATOL = 1e-5
D_MODEL, N_HEADS, WINDOW = 16, 4, 3


def test_rule_allows_keys_less_than_a_window_away() -> None:
    q, k = torch.arange(6).unsqueeze(-1), torch.arange(6).unsqueeze(0)
    causal = KeyRule(causal=True, window=WINDOW).allows(q, k)
    band = KeyRule(window=WINDOW).allows(q, k)
    for i in range(6):
        assert causal[i].nonzero().flatten().tolist() == list(range(max(0, i - WINDOW + 1), i + 1))
        assert band[i].nonzero().flatten().tolist() == list(range(max(0, i - WINDOW + 1), min(6, i + WINDOW)))
    docs = torch.tensor([0, 0, 0, 1, 1, 1])
    per_doc = KeyRule(causal=True).allows(q, k, docs.unsqueeze(-1), docs.unsqueeze(0))
    assert not per_doc[3:, :3].any() and per_doc[4, 3] and per_doc[1, 0]


def attention(pe: str, causal: bool, window: int | None = WINDOW, n_kv_heads: int | None = 2):
    settings = dict(num_buckets=8, max_distance=16) if pe == "relative" else {}
    pos = build_positional(
        pos_config(pe, **settings), d_model=D_MODEL, n_heads=N_HEADS, max_len=64, causal=causal
    )
    torch.manual_seed(0)
    return SelfAttention(D_MODEL, N_HEADS, n_kv_heads, window=window, pos=pos).eval()


@pytest.mark.parametrize("causal", [True, False], ids=["decoder", "encoder"])
def test_both_paths_mask_the_same_band(causal: bool) -> None:
    attn = attention("alibi", causal)
    x, t = torch.randn(2, 9, D_MODEL), 9
    kpm = torch.ones(2, t, dtype=torch.bool)
    kpm[1, 7:] = False
    run = lambda: attn(x, AttentionView(torch.arange(t), causal=causal, padding=kpm))  # noqa: E731
    fused = run()
    with record_attention(attn) as maps:
        explicit = run()
    torch.testing.assert_close(explicit, fused, atol=ATOL, rtol=0)
    weights = maps[""]
    allowed = KeyRule(causal=causal, window=WINDOW).allows(torch.arange(t)[:, None], torch.arange(t)[None])
    assert (weights[0][:, ~allowed] == 0).all() and (weights[0][:, allowed] > 0).all()
    assert (weights[1][..., 7:] == 0).all()


def test_window_wider_than_the_sequence_changes_nothing() -> None:
    x = torch.randn(2, 8, D_MODEL)
    outs = []
    for window in (None, 8, 3):
        attn = attention("rope", True, window)
        outs.append(attn(x, AttentionView(torch.arange(8), causal=True)))
    torch.testing.assert_close(outs[1], outs[0], atol=ATOL, rtol=0)
    assert (outs[2] - outs[0]).abs().max() > 1e-3  # and a narrower one does change the outputs


def test_cross_attention_is_never_windowed() -> None:
    """Every query sees the whole context: cross-attention takes no window at all."""
    assert CrossAttention(D_MODEL, N_HEADS).window is None
    with pytest.raises(TypeError, match="unexpected keyword argument 'window'"):
        CrossAttention(D_MODEL, N_HEADS, window=WINDOW)
    with pytest.raises(ValueError, match=r"^attention window=0: must be positive$"):
        SelfAttention(D_MODEL, N_HEADS, window=0)


@pytest.mark.parametrize("pe", list(PosName))
@pytest.mark.parametrize(
    "chunks", [(5, 1, 1, 1, 1, 1, 1), (1,) * 12, (4, 3, 5)], ids=["prefill", "steps", "chunks"]
)
def test_cached_windowed_attention_equals_full_pass(pe: str, chunks: tuple[int, ...]) -> None:
    """Positions are absolute, so RoPE, ALiBi and relative bias see true distances to the kept keys."""
    attn = attention(pe, True)
    t = sum(chunks)
    x = torch.randn(2, t, D_MODEL)
    kpm = torch.ones(2, t, dtype=torch.bool)
    kpm[1, :2] = False  # row 1 left-padded, its positions counting real tokens only (as generation does)
    positions = torch.stack([torch.arange(t), (torch.arange(t) - 2).clamp(min=0)])
    full = attn(x, AttentionView(positions, causal=True, padding=kpm))
    cache, outs, start = AttentionCache(), [], 0
    for n in chunks:
        step = slice(start, start + n)
        outs.append(
            attn(
                x[:, step], AttentionView(positions[:, step], causal=True, padding=kpm[:, : start + n]), cache
            )
        )
        start += n
        assert cache.length == min(start, WINDOW) and cache.seen == start
    torch.testing.assert_close(torch.cat(outs, 1)[kpm], full[kpm], atol=ATOL, rtol=0)


@pytest.mark.parametrize("path", ["sdpa", "explicit"])
def test_cache_memory_stays_flat_at_the_window(path: str) -> None:
    """However many tokens are decoded, the cache keeps W keys in storage for about 2W."""
    attn = attention("rope", True)
    plain = attention("rope", True, window=None)
    windowed, unwindowed, capacities = AttentionCache(), AttentionCache(), []
    with torch.no_grad(), use_attention_path(attn, path):
        for i in range(40):
            x, p = torch.randn(1, 1, D_MODEL), torch.tensor([i])
            attn(x, AttentionView(p, causal=True), windowed)
            plain(x, AttentionView(p, causal=True), unwindowed)
            assert windowed.length == min(i + 1, WINDOW)
            assert windowed.positions.flatten().tolist() == list(range(max(0, i + 1 - WINDOW), i + 1))
            capacities.append(windowed.capacity)
    assert max(capacities) <= 2 * (WINDOW + 1)
    assert unwindowed.length == 40 and unwindowed.capacity >= 40
