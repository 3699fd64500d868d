"""Gradient × input attribution."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab.explain import gradient_x_input, token_attribution


def test_attribution_recovers_a_known_linear_dependence() -> None:
    """score = sum_t w_t · x_t: each token's attribution must be exactly w_t · x_t."""
    torch.manual_seed(0)
    embed = nn.Embedding(10, 5)
    weights = torch.randn(4, 5)
    ids = torch.tensor([[1, 7, 3, 3], [0, 2, 9, 4]])
    attribution = gradient_x_input(lambda: (embed(ids) * weights).sum(dim=(1, 2)), embed)
    torch.testing.assert_close(attribution, (embed(ids) * weights).sum(-1).detach())
    torch.testing.assert_close(
        attribution.sum(1), (embed(ids) * weights).sum(dim=(1, 2)).detach()
    )  # completeness


def test_attribution_needs_no_parameter_gradients(tiny_model) -> None:
    model = tiny_model("gpt")
    model.requires_grad_(False)
    with torch.no_grad():
        scores = token_attribution(model, {"input_ids": torch.tensor([[3, 4, 5, 6]])})
    assert scores.shape == (1, 4)
    assert scores.abs().min() > 0
    assert all(p.grad is None for p in model.parameters())


def test_padded_tokens_get_zero_attribution(tiny_model) -> None:
    model = tiny_model("bert", num_classes=3, mlm_head=False)
    batch = {
        "input_ids": torch.tensor([[1, 5, 6, 7, 0, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1, 0, 0]]),
    }
    scores = token_attribution(model, batch)[0]
    assert scores[4:].abs().max() == 0
    assert scores[:4].abs().min() > 0


def test_every_family_gets_one_score_per_input_position(tiny_model) -> None:
    ids = torch.tensor([[3, 4, 5, 6, 7]])
    mask_position = torch.tensor([2])
    assert token_attribution(tiny_model("bert"), {"input_ids": ids}, position=mask_position).shape == (1, 5)
    seq2seq = {"src_ids": ids, "tgt_in": torch.tensor([[1, 8, 9]]), "labels": torch.tensor([[8, 9, 2]])}
    assert token_attribution(tiny_model("seq2seq"), seq2seq).shape == (1, 5)
    images = {"pixel_values": torch.randn(2, 1, 8, 8)}
    assert token_attribution(tiny_model("vit"), images).shape == (2, 16)  # 4 x 4 patches, no CLS


def test_masked_lm_attribution_without_a_position_is_refused(tiny_model) -> None:
    with pytest.raises(ValueError, match="masked-LM attribution needs the position"):
        token_attribution(tiny_model("bert"), {"input_ids": torch.tensor([[3, 4]])})
