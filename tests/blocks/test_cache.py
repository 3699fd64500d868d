"""KV caches: bookkeeping, and cached attention equal to the full pass for every positional encoding."""

from __future__ import annotations

import pytest
import torch

from attnlab.blocks.attention import CrossAttention, SelfAttention
from attnlab.blocks.cache import AttentionCache, KVCache
from attnlab.blocks.positional import build_positional
from attnlab.blocks.view import AttentionView
from attnlab.schema.pos import PosName, pos_config

ATOL = 1e-5
D_MODEL, N_HEADS = 16, 4


def kv(b: int, t: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(b, 2, t, 4), torch.randn(b, 2, t, 4)


def test_append_accumulates_keys_values_and_positions() -> None:
    cache = AttentionCache()
    assert cache.length == 0
    k1, v1 = kv(2, 3)
    cache.append(k1, v1, torch.arange(3))
    k2, v2 = kv(2, 1)
    k, v, positions = cache.append(k2, v2, torch.tensor([3]))
    assert cache.length == 4
    torch.testing.assert_close(k, torch.cat([k1, k2], 2))
    torch.testing.assert_close(v, torch.cat([v1, v2], 2))
    assert positions.tolist() == [[0, 1, 2, 3]]


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        (torch.arange(3), torch.tensor([[3], [5]]), [[0, 1, 2, 3], [0, 1, 2, 5]]),
        (torch.tensor([[0, 0, 1], [0, 1, 2]]), torch.tensor([3]), [[0, 0, 1, 3], [0, 1, 2, 3]]),
        (torch.tensor([[0, 0, 1], [0, 1, 2]]), torch.tensor([[2], [3]]), [[0, 0, 1, 2], [0, 1, 2, 3]]),
    ],
    ids=["shared-then-per-row", "per-row-then-shared", "per-row-then-per-row"],
)
def test_append_mixes_shared_and_per_row_positions(first, second, expected) -> None:
    cache = AttentionCache()
    cache.append(*kv(2, 3), first)
    _, _, positions = cache.append(*kv(2, 1), second)
    assert positions.tolist() == expected


def test_reorder_keeps_the_selected_rows() -> None:
    cache = AttentionCache()
    k, v = kv(3, 2)
    cache.append(k, v, torch.tensor([[0, 1], [5, 6], [7, 8]]))
    cache.reorder(torch.tensor([2, 2, 0]))
    torch.testing.assert_close(cache.k, k[[2, 2, 0]])
    torch.testing.assert_close(cache.v, v[[2, 2, 0]])
    assert cache.positions.tolist() == [[7, 8], [7, 8], [0, 1]]


def test_a_reserved_cache_writes_every_step_into_its_first_buffers() -> None:
    """generate() reserves its whole length: no step allocates or copies what is cached (a static cache);
    past the reserve it grows as before."""
    cache, keys, values = AttentionCache(reserve=10), [], []
    for step, n in enumerate([3] + [1] * 7):
        k, v = kv(2, n)
        keys.append(k), values.append(v)
        cache.append(k, v, torch.arange(cache.seen, cache.seen + n))
        if step == 0:
            buffers = cache._buffers
        assert cache._buffers is buffers and cache.capacity == 10
    assert cache.positions.tolist() == [list(range(10))]
    assert cache.k.data_ptr() == buffers[0].data_ptr()
    k, v = kv(2, 1)
    keys.append(k), values.append(v)
    cache.append(k, v, torch.tensor([10]))  # beyond the reserve
    assert cache.capacity >= 11 and cache.positions.tolist() == [list(range(11))]
    torch.testing.assert_close(cache.k, torch.cat(keys, 2))
    torch.testing.assert_close(cache.v, torch.cat(values, 2))


def test_appending_after_a_reorder_keeps_the_reordered_rows() -> None:
    """A reorder makes new tensors: the next append must not write into (and view) the old buffers."""
    cache = AttentionCache(reserve=8)
    k1, v1 = kv(3, 2)
    cache.append(k1, v1, torch.arange(2))
    cache.reorder(torch.tensor([2, 0, 0]))
    k2, v2 = kv(3, 1)
    k, v, positions = cache.append(k2, v2, torch.tensor([2]))
    torch.testing.assert_close(k, torch.cat([k1[[2, 0, 0]], k2], 2))
    torch.testing.assert_close(v, torch.cat([v1[[2, 0, 0]], v2], 2))
    assert positions.tolist() == [[0, 1, 2]]


def test_kv_cache_offset_and_layers() -> None:
    cache = KVCache.empty(3, cross=True)
    assert len(cache.self_attn) == 3 and len(cache.cross_attn) == 3 and cache.offset == 0
    cache.self_attn[0].append(*kv(1, 4), torch.arange(4))
    assert cache.offset == 4
    assert KVCache.empty(2).cross_attn == []


def make(pe: str, causal: bool, n_kv_heads: int | None):
    torch.manual_seed(0)
    settings = dict(num_buckets=8, max_distance=16) if pe == "relative" else {}
    pos = build_positional(
        pos_config(pe, **settings), d_model=D_MODEL, n_heads=N_HEADS, max_len=32, causal=causal
    )
    torch.manual_seed(0)
    return SelfAttention(D_MODEL, N_HEADS, n_kv_heads, pos=pos).eval()


@pytest.mark.parametrize("pe", list(PosName))
@pytest.mark.parametrize("n_kv_heads", [None, 1], ids=["mha", "mqa"])
@pytest.mark.parametrize(
    "chunks", [(3, 1, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (2, 3, 2)], ids=["prefill", "steps", "chunks"]
)
def test_cached_self_attention_equals_full_pass(
    pe: str, n_kv_heads: int | None, chunks: tuple[int, ...]
) -> None:
    attn = make(pe, True, n_kv_heads)
    t = sum(chunks)
    x = torch.randn(2, t, D_MODEL)
    kpm = torch.ones(2, t, dtype=torch.bool)
    kpm[1, :2] = False  # row 1 left-padded
    full = attn(x, AttentionView(torch.arange(t), causal=True, padding=kpm))
    cache, outs, start = AttentionCache(), [], 0
    for n in chunks:
        positions = torch.arange(start, start + n)
        outs.append(
            attn(
                x[:, start : start + n],
                AttentionView(positions, causal=True, padding=kpm[:, : start + n]),
                cache,
            )
        )
        start += n
    assert cache.length == t
    # padded queries see no real key, so their (unused) outputs may differ; compare real tokens
    torch.testing.assert_close(torch.cat(outs, 1)[kpm], full[kpm], atol=ATOL, rtol=0)


def test_cross_attention_cache_projects_the_context_once() -> None:
    torch.manual_seed(0)
    attn = CrossAttention(D_MODEL, N_HEADS, 2).eval()
    calls = []
    attn.kv_proj.register_forward_hook(lambda *_: calls.append(1))
    x, memory = torch.randn(2, 4, D_MODEL), torch.randn(2, 6, D_MODEL)
    kpm = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    full = attn(x, AttentionView(torch.arange(4), memory=memory, memory_padding=kpm))
    calls.clear()
    cache = AttentionCache()
    steps = [attn(x[:, :1], AttentionView(torch.arange(1), memory=memory, memory_padding=kpm), cache)]
    steps += [
        attn(x[:, i : i + 1], AttentionView(torch.tensor([i]), memory_padding=kpm), cache)
        for i in range(1, 4)
    ]
    assert len(calls) == 1
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=ATOL, rtol=0)


def test_reorder_of_a_cross_attention_cache() -> None:
    """Cross-attention caches hold no positions; beam search still reorders them."""
    torch.manual_seed(0)
    attn = CrossAttention(D_MODEL, N_HEADS).eval()
    x, memory = torch.randn(2, 1, D_MODEL), torch.randn(2, 5, D_MODEL)
    cache = AttentionCache()
    attn(x, AttentionView(torch.arange(1), memory=memory), cache)
    k = cache.k
    cache.reorder(torch.tensor([1, 1, 0]))
    torch.testing.assert_close(cache.k, k[[1, 1, 0]])
    assert cache.positions is None


@pytest.mark.parametrize("shape", [(2, 1), (2, 7), (1, 4)])
def test_mask_that_does_not_cover_the_keys_is_a_clear_error(shape: tuple[int, int]) -> None:
    """A (B, 1) mask on a cached step would silently broadcast over every key."""
    attn = make("none", True, None)
    cache = AttentionCache()
    attn(torch.randn(2, 3, D_MODEL), AttentionView(torch.arange(3), causal=True), cache)
    with pytest.raises(
        ValueError, match=rf"attention mask of shape \({shape[0]}, {shape[1]}\) .* expected \(2, 4\)"
    ):
        padding = torch.ones(shape, dtype=torch.bool)
        attn(
            torch.randn(2, 1, D_MODEL), AttentionView(torch.tensor([3]), causal=True, padding=padding), cache
        )
