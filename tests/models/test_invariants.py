"""Invariants every family must keep: causality, padding independence, cached = full decoding."""

from __future__ import annotations

from functools import cache

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attnlab.blocks.heads import pool
from attnlab.schema.model import Pooling
from attnlab.schema.pos import PosName, pos_config

ATOL = 1e-5
VOCAB = 31
POSITIONAL_ENCODINGS = list(PosName)
SETTINGS = settings(max_examples=8, deadline=None)


def small_buckets(pe: str):
    """The positional encoding ``pe``; T5's buckets small enough that short offsets reach the log range."""
    return pos_config(pe, num_buckets=8, max_distance=16) if pe == "relative" else pos_config(pe)


@pytest.fixture(scope="module")
def model(tiny_model):
    """``model(family, pe, n_kv_heads=None, **overrides)``: a tiny model in eval mode with weights large
    enough that positions and masks matter (built once per arguments)."""

    @cache
    def build(family: str, pe: str, n_kv_heads: int | None = None, **overrides) -> nn.Module:
        m = tiny_model(
            family, small_buckets(pe), vocab_size=VOCAB, max_seq_len=24, n_kv_heads=n_kv_heads, **overrides
        )
        with torch.no_grad():  # the generator goes on from the build, which tiny_model seeded
            for p in m.parameters():
                if p.dim() >= 2:
                    p.normal_(std=0.3)
        return m

    return build


def ids(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


# --- causality ------------------------------------------------------------------------------


@pytest.mark.parametrize("pe", POSITIONAL_ENCODINGS)
@SETTINGS
@given(t=st.integers(0, 8), seed=st.integers(0, 2**16))
def test_gpt_logits_ignore_future_tokens(model, pe: str, t: int, seed: int) -> None:
    m = model("gpt", pe)
    x = ids(2, 10, seed=seed)
    y = x.clone()
    y[:, t + 1 :] = (y[:, t + 1 :] + 1) % VOCAB
    with torch.no_grad():
        a, b = m(x), m(y)
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], atol=ATOL, rtol=0)
    assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :], atol=ATOL), (
        "the change did not reach later logits"
    )


@pytest.mark.parametrize("pe", POSITIONAL_ENCODINGS)
@SETTINGS
@given(t=st.integers(0, 6), seed=st.integers(0, 2**16))
def test_seq2seq_decoder_logits_ignore_future_target_tokens(model, pe: str, t: int, seed: int) -> None:
    m = model("seq2seq", pe)
    src, tgt = ids(2, 7, seed=seed), ids(2, 8, seed=seed + 1)
    changed = tgt.clone()
    changed[:, t + 1 :] = (changed[:, t + 1 :] + 1) % VOCAB
    with torch.no_grad():
        a, b = m(src, tgt), m(src, changed)
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], atol=ATOL, rtol=0)
    assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :], atol=ATOL)


# --- padding --------------------------------------------------------------------------------


def right_pad(x: torch.Tensor, n: int, pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` with ``n`` pad tokens appended, and the matching attention mask."""
    padded = torch.cat([x, torch.full((x.shape[0], n), pad_id)], dim=1)
    mask = torch.ones_like(padded, dtype=torch.bool)
    mask[:, x.shape[1] :] = False
    return padded, mask


@pytest.mark.parametrize("pe", POSITIONAL_ENCODINGS)
@SETTINGS
@given(length=st.integers(1, 10), n_pad=st.integers(1, 8), pad_id=st.integers(0, VOCAB - 1))
def test_bert_outputs_ignore_right_padding(model, pe: str, length: int, n_pad: int, pad_id: int) -> None:
    m = model("bert", pe, num_classes=3, pooling="mean", norm_first=False, embed_norm=True)
    x = ids(2, length, seed=length)
    padded, mask = right_pad(x, n_pad, pad_id)
    with torch.no_grad():
        alone = m(x, attention_mask=torch.ones_like(x, dtype=torch.bool))
        hidden = m(padded, attention_mask=mask)
        torch.testing.assert_close(hidden[:, :length], alone, atol=ATOL, rtol=0)
        torch.testing.assert_close(m.mlm_logits(hidden)[:, :length], m.mlm_logits(alone), atol=ATOL, rtol=0)
        torch.testing.assert_close(m.classify(hidden, mask), m.classify(alone), atol=ATOL, rtol=0)
        for how in Pooling:
            torch.testing.assert_close(pool(hidden, mask, how), pool(alone, None, how), atol=ATOL, rtol=0)
        unmasked = m(padded)  # guard: without the mask the padding does change the outputs
    assert not torch.allclose(unmasked[:, :length], alone, atol=ATOL)


@pytest.mark.parametrize("pe", POSITIONAL_ENCODINGS)
def test_seq2seq_outputs_ignore_source_padding(model, pe: str) -> None:
    m = model("seq2seq", pe)
    src, tgt = ids(2, 6, seed=3), ids(2, 5, seed=4)
    with torch.no_grad():
        alone = m(src, tgt)
        for n_pad in (1, 4):
            padded, mask = right_pad(src, n_pad, pad_id=7)
            torch.testing.assert_close(m(padded, tgt, src_mask=mask), alone, atol=ATOL, rtol=0)


# --- cached decoding ------------------------------------------------------------------------


WINDOWS = pytest.mark.parametrize("window", [None, 3], ids=["full", "window3"])


@pytest.mark.parametrize("pe", POSITIONAL_ENCODINGS)
@pytest.mark.parametrize("n_kv_heads", [None, 2, 1], ids=["mha", "gqa", "mqa"])
@WINDOWS
def test_gpt_cached_decoding_equals_full_forward(
    model, pe: str, n_kv_heads: int | None, window: int | None
) -> None:
    """With a window, the cache keeps only the last 3 keys and the outputs stay those of the full pass."""
    m = model("gpt", pe, n_kv_heads, attn_window=window)
    x = ids(2, 9, seed=5)
    with torch.no_grad():
        full = m(x)
        cache = m.new_cache()
        steps = [m(x[:, :4], cache=cache)]  # prefill longer than the window, then one token at a time
        steps += [m(x[:, t : t + 1], cache=cache) for t in range(4, 9)]
    assert cache.offset == 9 and all(c.length == (window or 9) for c in cache.self_attn)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=ATOL, rtol=0)


@pytest.mark.parametrize("pe", POSITIONAL_ENCODINGS)
@pytest.mark.parametrize("n_kv_heads", [None, 1], ids=["mha", "mqa"])
@WINDOWS
def test_seq2seq_cached_decoding_equals_full_forward(
    model, pe: str, n_kv_heads: int | None, window: int | None
) -> None:
    """A window bands the encoder and slides over the decoder; cross-attention still sees every source."""
    m = model("seq2seq", pe, n_kv_heads, attn_window=window)
    src, tgt = ids(2, 7, seed=6), ids(2, 6, seed=7)
    src_mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    with torch.no_grad():
        full = m(src, tgt, src_mask=src_mask)
        memory = m.encode(src, src_mask)
        cache = m.new_cache()
        steps = [m.decode(tgt[:, :1], memory, src_mask, cache=cache)]
        # the encoder's keys and values are cached: later steps need no memory
        steps += [m.decode(tgt[:, t : t + 1], None, src_mask, cache=cache) for t in range(1, 6)]
    assert cache.offset == 6 and all(c.length == 7 for c in cache.cross_attn)
    assert all(c.length == (window or 6) for c in cache.self_attn)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=ATOL, rtol=0)


@pytest.mark.parametrize("family", ["gpt", "seq2seq"])
def test_reordered_cache_continues_the_reordered_batch(model, family: str) -> None:
    """Beam search reorders (and duplicates) cache rows; decoding then continues the chosen rows."""
    m = model(family, "rope" if family == "gpt" else "relative", 2)
    src, tgt = ids(2, 5, seed=8), ids(2, 6, seed=9)
    index = torch.tensor([1, 1, 0])
    with torch.no_grad():
        cache = m.new_cache()
        if family == "gpt":
            m(tgt[:, :3], cache=cache)
            cache.reorder(index)
            cached = torch.cat([m(tgt[index, t : t + 1], cache=cache) for t in range(3, 6)], dim=1)
            full = m(tgt[index])[:, 3:]
        else:
            m.decode(tgt[:, :3], m.encode(src), cache=cache)
            cache.reorder(index)
            cached = torch.cat(
                [m.decode(tgt[index, t : t + 1], None, cache=cache) for t in range(3, 6)], dim=1
            )
            full = m(src[index], tgt[index])[:, 3:]
    torch.testing.assert_close(cached, full, atol=ATOL, rtol=0)


# --- left padding ---------------------------------------------------------------------------

LENGTHS = (6, 4, 1)


def left_padded_batch(rows: list[torch.Tensor], pad_id: int = 0) -> tuple[torch.Tensor, ...]:
    """Left-padded ids, mask, and per-row positions counting from the first real token."""
    width = max(len(r) for r in rows)
    batch = torch.full((len(rows), width), pad_id)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        batch[i, width - len(r) :], mask[i, width - len(r) :] = r, True
    positions = (mask.long().cumsum(1) - 1).clamp(min=0)
    return batch, mask, positions


@pytest.mark.parametrize("pe", POSITIONAL_ENCODINGS)
def test_gpt_left_padded_batch_equals_each_row_alone(model, pe: str) -> None:
    m = model("gpt", pe)
    rows = [ids(1, n, seed=10 + n)[0] for n in LENGTHS]
    batch, mask, positions = left_padded_batch(rows, pad_id=3)
    with torch.no_grad():
        logits = m(batch, attention_mask=mask, positions=positions)
        for i, row in enumerate(rows):
            torch.testing.assert_close(logits[i][mask[i]], m(row[None])[0], atol=ATOL, rtol=0)
        # the padding matters when it is not masked: the test is not vacuous
        assert not torch.allclose(m(batch, positions=positions)[2, -1], m(rows[2][None])[0, -1], atol=ATOL)


@pytest.mark.parametrize("pe", POSITIONAL_ENCODINGS)
def test_gpt_left_padded_cached_decoding_equals_each_row_alone(model, pe: str) -> None:
    """Generation's contract: prefill a left-padded batch, then step with per-row positions."""
    m = model("gpt", pe, 2)
    rows = [ids(1, n + 3, seed=20 + n)[0] for n in LENGTHS]  # each row: prompt + 3 continuation tokens
    batch, mask, positions = left_padded_batch([r[:-3] for r in rows])
    with torch.no_grad():
        cache = m.new_cache()
        steps = [m(batch, attention_mask=mask, positions=positions, cache=cache)[:, -1:]]
        for k in range(3):
            token = torch.stack([r[len(r) - 3 + k] for r in rows])[:, None]
            mask = torch.cat([mask, torch.ones(len(rows), 1, dtype=torch.bool)], dim=1)
            positions = positions[:, -1:] + 1
            steps.append(m(token, attention_mask=mask, positions=positions, cache=cache))
        cached = torch.cat(steps, dim=1)  # logits of the last prompt token and the 3 new ones
        for i, row in enumerate(rows):
            torch.testing.assert_close(cached[i], m(row[None])[0, -4:], atol=ATOL, rtol=0)
