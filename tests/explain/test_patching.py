"""Activation patching: exact at its ends, and local where the inputs differ at one token."""

from __future__ import annotations

import pytest
import torch

from attnlab.explain import activation_sites, logit_difference, patch_heads, patch_residual, patched_metric
from attnlab.explain.patching import clean_run

CLEAN = torch.tensor([[3, 4, 5, 6, 7], [8, 9, 10, 11, 12]])
CORRUPTED = torch.tensor([[3, 4, 15, 6, 7], [8, 9, 16, 11, 12]])  # position 2 differs
METRIC = logit_difference(answer=5, wrong=9)


def pair(family: str) -> tuple[dict, dict]:
    """A clean and a corrupted batch of ``family``'s layout."""
    if family == "vit":
        images = torch.randn(2, 1, 8, 8)
        return {"pixel_values": images}, {"pixel_values": images.flip(-1)}
    if family == "seq2seq":
        tgt = torch.tensor([[1, 8, 9], [1, 4, 4]])
        return {"src_ids": CLEAN, "tgt_in": tgt}, {"src_ids": CORRUPTED, "tgt_in": tgt}
    return {"input_ids": CLEAN}, {"input_ids": CORRUPTED}


@pytest.mark.parametrize("family", ["gpt", "bert", "seq2seq", "vit"])
def test_patching_every_site_gives_the_clean_metric_and_none_the_corrupted(tiny_model, family: str) -> None:
    model = tiny_model(family)
    clean, corrupted = pair(family)
    metric = logit_difference(answer=1, wrong=2)
    acts, clean_metric, corrupted_metric = clean_run(model, clean, corrupted, metric)
    assert abs(clean_metric - corrupted_metric) > 1e-3
    every = {name: (slice(None),) for name in activation_sites(model)}
    assert patched_metric(model, corrupted, metric, acts, every) == pytest.approx(clean_metric, abs=1e-5)
    with torch.no_grad():
        assert patched_metric(model, corrupted, metric, acts, {}) == float(metric(model.logits(corrupted)))


def test_the_residual_grid_is_local_to_the_token_that_differs(tiny_model) -> None:
    model = tiny_model("gpt")
    pre = patch_residual(model, {"input_ids": CLEAN}, {"input_ids": CORRUPTED}, METRIC)
    assert pre.sites == ["layers.0.resid_pre", "layers.1.resid_pre"] and pre.scores.shape == (2, 5)
    first = pre.scores[0].tolist()  # the embeddings differ at position 2 only
    assert first[2] == pytest.approx(pre.clean, abs=1e-5)
    assert all(first[t] == pre.corrupted for t in (0, 1, 3, 4))
    assert pre.restored()[0, 2].item() == pytest.approx(1.0, abs=1e-5)
    assert pre.strongest(1)[0][:2] == ("layers.0.resid_pre", 2)
    post = patch_residual(model, {"input_ids": CLEAN}, {"input_ids": CORRUPTED}, METRIC, kind="resid_post")
    last = post.scores[1].tolist()  # the last layer's output at the last position is the metric's input
    assert last[4] == pytest.approx(post.clean, abs=1e-5)
    assert all(last[t] == post.corrupted for t in range(4))


def test_head_patching_has_a_row_per_attention_and_a_column_per_head(tiny_model) -> None:
    model = tiny_model("seq2seq")
    clean, corrupted = pair("seq2seq")
    heads = patch_heads(model, clean, corrupted, METRIC)
    assert (
        heads.sites[0] == "encoder.layers.0.attn_heads" and "decoder.layers.1.cross_attn_heads" in heads.sites
    )
    assert heads.scores.shape == (6, 4) and heads.columns == "head"
    assert not heads.scores.isnan().any()
    decoder_self = heads.scores[heads.sites.index("decoder.layers.0.attn_heads")]
    assert torch.equal(
        decoder_self, torch.full((4,), heads.corrupted, dtype=torch.float64)
    )  # same target tokens


def test_batches_of_different_shapes_are_refused(tiny_model) -> None:
    with pytest.raises(ValueError, match="the corrupted batch's 'input_ids' must have the clean one's shape"):
        patch_residual(tiny_model("gpt"), {"input_ids": CLEAN}, {"input_ids": CLEAN[:, :3]}, METRIC)
