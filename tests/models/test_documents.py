"""Packed documents (``document_ids``): each document attends only to itself, its positions restarting at 0,
so its outputs equal those of the document alone, whatever the other documents of the window hold."""

from __future__ import annotations

import pytest
import torch

from attnlab.blocks.attention import use_attention_path
from attnlab.blocks.cache import KVCache
from attnlab.blocks.masks import KeyRule, additive_mask, document_positions
from attnlab.schema.pos import PosName, pos_config

ATOL = 1e-5
VOCAB = 23
LENGTHS = (5, 1, 7, 3)  # four documents of one packed row of 16 tokens (a one-token document included)


def packed_ids(lengths: tuple[int, ...] = LENGTHS) -> torch.Tensor:
    """Document ids (1, T): 0 for the first document's tokens, 1 for the next, ..."""
    return torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths)).unsqueeze(0)


def build(tiny_model, family: str, pe: str, **overrides):
    pos = pos_config(pe, num_buckets=8, max_distance=16) if pe == "relative" else pos_config(pe)
    model = tiny_model(family, pos, vocab_size=VOCAB, **overrides)
    with torch.no_grad():  # weights large enough that masks and positions matter
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(std=0.3)
    return model


def outputs(model, ids: torch.Tensor, documents: torch.Tensor | None) -> torch.Tensor:
    """GPT's logits (B, T, V) or BERT's hidden states (B, T, D)."""
    return model(ids, document_ids=documents)


def test_positions_restart_in_every_document() -> None:
    docs = torch.cat([packed_ids(), packed_ids((2, 14))])
    assert document_positions(docs).tolist() == [
        [0, 1, 2, 3, 4, 0, 0, 1, 2, 3, 4, 5, 6, 0, 1, 2],
        [0, 1, *range(14)],
    ]


def test_documents_alone_mask_the_other_documents_keys() -> None:
    docs = packed_ids()
    positions = document_positions(docs)
    allowed = KeyRule().dense(positions, positions, docs, docs)[0, 0]
    assert torch.equal(allowed, docs[0][:, None] == docs[0][None, :])
    causal = KeyRule(causal=True).dense(positions, positions, docs, docs)[0, 0]
    assert torch.equal(causal, allowed & torch.ones(16, 16, dtype=torch.bool).tril())
    assert KeyRule().dense(positions, positions) is None  # no documents, no rule: nothing to mask
    mask = additive_mask(
        KeyRule(), positions, positions, key_padding_mask=None, bias=None, dtype=torch.float32
    )
    assert mask is None


@pytest.mark.parametrize("path", ["sdpa", "explicit"])
@pytest.mark.parametrize("pe", list(PosName))
@pytest.mark.parametrize("family", ["gpt", "bert"])
def test_each_document_equals_itself_alone(tiny_model, family: str, pe: str, path: str) -> None:
    model = build(tiny_model, family, pe)
    ids = torch.randint(0, VOCAB, (1, sum(LENGTHS)))
    with use_attention_path(model, path), torch.no_grad():
        packed = outputs(model, ids, packed_ids())
        start = 0
        for length in LENGTHS:
            alone = outputs(model, ids[:, start : start + length], None)
            torch.testing.assert_close(packed[:, start : start + length], alone, atol=ATOL, rtol=0)
            start += length


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("pe", list(PosName))
@pytest.mark.parametrize("family", ["gpt", "bert"])
def test_changing_one_document_leaves_the_others_unchanged(tiny_model, family: str, pe: str, window) -> None:
    model = build(tiny_model, family, pe, attn_window=window, qk_norm=True)
    docs = packed_ids()
    ids = torch.randint(0, VOCAB, (2, sum(LENGTHS)))
    changed = ids.clone()
    changed[:, 6:13] = (changed[:, 6:13] + 1 + torch.arange(7)) % VOCAB  # the third document, every token
    with torch.no_grad():
        before = outputs(model, ids, docs.expand(2, -1))
        after = outputs(model, changed, docs.expand(2, -1))
        unmasked = outputs(model, changed, None)
    other = torch.ones(sum(LENGTHS), dtype=torch.bool)
    other[6:13] = False
    torch.testing.assert_close(after[:, other], before[:, other], atol=ATOL, rtol=0)
    assert (after[:, ~other] - before[:, ~other]).abs().max() > 1e-3  # the changed document did change
    # without the document mask, the documents after the changed one see it (the test can fail)
    assert (unmasked[:, 13:] - before[:, 13:]).abs().max() > 1e-3


def test_documents_and_padding_mask_together(tiny_model) -> None:
    """A packed row whose end is padding: the real tokens equal each document alone."""
    model = build(tiny_model, "gpt", "learned")
    ids = torch.randint(0, VOCAB, (1, 10))
    docs = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 2, 2, 2]])
    pad = torch.tensor([[True] * 7 + [False] * 3])
    with torch.no_grad():
        packed = model(ids, attention_mask=pad, document_ids=docs)
        torch.testing.assert_close(packed[:, 4:7], model(ids[:, 4:7]), atol=ATOL, rtol=0)


def test_document_ids_are_refused_with_a_cache_or_the_wrong_shape(tiny_model) -> None:
    model = build(tiny_model, "gpt", "rope")
    ids = torch.randint(0, VOCAB, (1, 16))
    with pytest.raises(ValueError, match="decode one document at a time"):
        model(ids, document_ids=packed_ids(), cache=KVCache.empty(2))
    with pytest.raises(ValueError, match=r"document_ids of shape \(1, 4\) do not match input_ids"):
        model(ids, document_ids=packed_ids((4,)))


def test_logits_read_the_batch_document_ids(tiny_model) -> None:
    model = build(tiny_model, "gpt", "sinusoidal")
    batch = {"input_ids": torch.randint(0, VOCAB, (1, 16)), "document_ids": packed_ids()}
    with torch.no_grad():
        torch.testing.assert_close(model.logits(batch), model(batch["input_ids"], document_ids=packed_ids()))
        assert (model.logits(batch) - model(batch["input_ids"])).abs().max() > 1e-3
