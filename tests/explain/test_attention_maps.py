"""Attention maps of every family, and attention rollout."""

from __future__ import annotations

import pytest
import torch

from attnlab.explain import attention_maps, attention_rollout, map_label, self_attention_layers

IDS = torch.tensor([[3, 7, 9, 4, 12, 5], [8, 2, 6, 0, 0, 0]])
MASK = IDS != 0


def batches() -> dict[str, dict[str, torch.Tensor]]:
    return {
        "gpt": {"input_ids": IDS},
        "bert": {"input_ids": IDS, "attention_mask": MASK},
        "seq2seq": {"src_ids": IDS, "src_mask": MASK, "tgt_in": IDS[:, :4]},
        "vit": {"pixel_values": torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(0))},
    }


@pytest.mark.parametrize("family", ["gpt", "bert", "seq2seq", "vit"])
def test_rows_sum_to_one(tiny_model, family: str) -> None:
    maps = attention_maps(tiny_model(family), batches()[family])
    assert len(maps) == {"gpt": 2, "bert": 2, "seq2seq": 6, "vit": 2}[family]
    for weights in maps.values():
        assert weights.shape[:2] == (2, 4)
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


@pytest.mark.parametrize(("family", "prefix"), [("gpt", "stack"), ("seq2seq", "decoder")])
def test_causal_maps_are_zero_above_the_diagonal(tiny_model, family: str, prefix: str) -> None:
    maps = attention_maps(tiny_model(family, "rope"), batches()[family])
    for weights in self_attention_layers(maps, prefix):
        t = weights.shape[-1]
        above = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        assert weights[..., above].abs().max() == 0
        assert weights[..., ~above].min() > 0  # the first row of the padded example included


def test_padded_keys_get_no_attention_and_cross_maps_span_the_source(tiny_model) -> None:
    maps = attention_maps(tiny_model("seq2seq"), batches()["seq2seq"])
    cross = maps["decoder.layers.1.cross_attn.fn"]
    assert cross.shape == (2, 4, 4, 6)
    assert cross[1, :, :, 3:].abs().max() == 0
    assert maps["encoder.layers.0.self_attn.fn"][1, :, :, 3:].abs().max() == 0


def test_map_labels() -> None:
    assert map_label("stack.layers.0.self_attn.fn") == "layer 0 self"
    assert map_label("decoder.layers.3.cross_attn.fn") == "decoder layer 3 cross"
    assert map_label("encoder.layers.1.self_attn.fn") == "encoder layer 1 self"


def test_rollout_matches_the_formula() -> None:
    a1 = torch.tensor([[0.5, 0.5], [0.2, 0.8]])
    a2 = torch.tensor([[1.0, 0.0], [0.6, 0.4]])
    layers = [a.expand(1, 2, 2, 2) for a in (a1, a2)]  # two identical heads
    eye = torch.eye(2)
    expected = (0.5 * (a2 + eye)) @ (0.5 * (a1 + eye))
    torch.testing.assert_close(attention_rollout(layers)[0], expected)
    torch.testing.assert_close(attention_rollout(layers, add_residual=False)[0], a2 @ a1)
    torch.testing.assert_close(attention_rollout(layers)[0].sum(-1), torch.ones(2))


def test_rollout_of_a_model_whose_attention_is_the_identity_is_the_identity(tiny_model) -> None:
    """ALiBi with huge slopes puts -inf-like biases off the diagonal: every head attends to itself."""
    model = tiny_model("bert", "alibi")
    for layer in model.stack.layers:
        assert layer.self_attn.fn.path == "sdpa"
    model.embed.pos.slopes.fill_(1e4)
    maps = attention_maps(model, {"input_ids": IDS[:1]})
    for weights in maps.values():
        torch.testing.assert_close(weights[0], torch.eye(6).expand(4, 6, 6))
    rollout = attention_rollout(self_attention_layers(maps))
    torch.testing.assert_close(rollout[0], torch.eye(6))


def test_rollout_refuses_cross_attention_maps() -> None:
    with pytest.raises(ValueError, match=r"self-attention maps \(B, H, T, T\), got shape \(1, 2, 3, 5\)"):
        attention_rollout([torch.ones(1, 2, 3, 5)])
    with pytest.raises(ValueError, match="no self-attention maps of a stack named 'encoder'"):
        self_attention_layers({"stack.layers.0.self_attn.fn": torch.ones(1)}, "encoder")
