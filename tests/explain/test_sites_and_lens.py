"""Named activation sites and the logit lens."""

from __future__ import annotations

import pytest
import torch

from attnlab.explain import activation_sites, hooked, logit_lens, recorded

IDS = torch.tensor([[3, 4, 5, 6, 7], [8, 9, 10, 11, 12]])
SEQ2SEQ = {
    "src_ids": IDS,
    "tgt_in": torch.tensor([[1, 8, 9], [1, 4, 4]]),
    "labels": torch.tensor([[8, 9, 2], [4, 4, 2]]),
}


def test_sites_are_named_per_layer_and_per_stack(tiny_model) -> None:
    gpt = list(activation_sites(tiny_model("gpt")))
    assert gpt[:5] == [
        "layers.0.resid_pre",
        "layers.0.attn_heads",
        "layers.0.attn_out",
        "layers.0.ffn_out",
        "layers.0.resid_post",
    ]
    assert len(gpt) == 10
    seq2seq = activation_sites(tiny_model("seq2seq"))
    assert "encoder.layers.1.resid_post" in seq2seq and "decoder.layers.0.cross_attn_heads" in seq2seq
    assert len(seq2seq) == 10 + 14
    assert len(activation_sites(tiny_model("vit"))) == 10


def test_sites_record_the_residual_stream_and_leave_no_hooks(tiny_model) -> None:
    model = tiny_model("gpt")
    with (
        torch.no_grad(),
        recorded(model, ["layers.0.resid_post", "layers.1.resid_pre", "layers.1.attn_heads"]) as acts,
    ):
        logits = model.logits({"input_ids": IDS})
    assert torch.equal(acts["layers.0.resid_post"], acts["layers.1.resid_pre"])
    assert acts["layers.1.attn_heads"].shape == (2, 5, 16)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    with torch.no_grad():
        assert torch.equal(model.logits({"input_ids": IDS}), logits)


def test_a_replaced_site_changes_the_output_and_an_unknown_one_is_refused(tiny_model) -> None:
    model = tiny_model("gpt")
    with torch.no_grad(), hooked(model, {"layers.1.resid_post": torch.zeros_like}):
        logits = model.logits({"input_ids": IDS})
    with torch.no_grad():  # a zero residual stream through the final norm and head: its bias only
        expected = model.lm_head(model.stack.final_norm(torch.zeros(2, 5, 16)))
    torch.testing.assert_close(logits, expected, atol=0, rtol=0)
    unknown = pytest.raises(ValueError, match=r"no site 'layers\.7\.resid_post' in DecoderLM")
    with unknown, hooked(model, {"layers.7.resid_post": torch.zeros_like}):
        pass


@pytest.mark.parametrize("family", ["gpt", "bert", "seq2seq"])
def test_the_last_layers_lens_is_the_models_own_logits(tiny_model, family: str) -> None:
    model = tiny_model(family)
    batch = SEQ2SEQ if family == "seq2seq" else {"input_ids": IDS, "labels": IDS}
    lens = logit_lens(model, batch)
    with torch.no_grad():
        logits = model.logits(batch)
    assert lens.logits.shape == (2, *logits.shape)
    assert torch.equal(lens.logits[-1], logits)
    assert not torch.equal(lens.logits[0], logits)
    labels = batch["labels"]
    expected = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
    assert lens.losses is not None and torch.equal(lens.losses[-1], expected)
    assert torch.equal(lens.top_tokens()[-1, ..., 0], logits.argmax(-1))


def test_the_lens_refuses_a_model_that_predicts_classes(tiny_model) -> None:
    with pytest.raises(ValueError, match="ViT predicts classes on this batch, not tokens"):
        logit_lens(tiny_model("vit"), {"pixel_values": torch.randn(1, 1, 8, 8)})
