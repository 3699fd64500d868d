"""Ablation: zeroing a head is the head gate at zero, mean ablation over the batch itself keeps a
constant activation, every family ablates, and bad targets are named in one line."""

from __future__ import annotations

import pytest
import torch

from attnlab.blocks.attention import attention_modules
from attnlab.explain import ablate, ablated, head_gates
from attnlab.explain.head_importance import example_losses

IDS = torch.randint(3, 23, (4, 9))
BATCH = {"input_ids": IDS[:, :-1], "labels": IDS[:, 1:]}


def mean_loss(model):
    return lambda batch: example_losses(model, batch).mean()


def batch_of(family: str) -> dict:
    if family == "vit":
        return {"pixel_values": torch.randn(4, 1, 8, 8), "labels": torch.tensor([0, 1, 2, 1])}
    if family == "seq2seq":
        return {"src_ids": IDS, "tgt_in": IDS[:, :4], "labels": IDS[:, 1:5]}
    return BATCH


def test_zeroing_a_head_is_its_gate_at_zero(tiny_model) -> None:
    model = tiny_model("gpt")
    scale = torch.tensor([1.0, 1.0, 0.0, 1.0])  # head 2 of layer 1 masked by the head-importance gate
    name = list(attention_modules(model))[1]
    with torch.no_grad(), head_gates(model, {name: scale}):
        gated = float(mean_loss(model)(BATCH))
    zeroed = ablated(model, BATCH, mean_loss(model), ["layers.1.attn_heads.2"])
    assert zeroed == pytest.approx(gated, abs=1e-6)
    result = ablate(model, BATCH, mean_loss(model), ["layers.1.attn_heads.2", "layers.0.ffn_out"])
    assert result.after["layers.1.attn_heads.2"] == zeroed
    assert abs(result.after["layers.0.ffn_out"] - result.before) > 1e-4
    every_head = [f"layers.0.attn_heads.{h}" for h in range(4)]
    assert ablate(model, BATCH, mean_loss(model), every_head).together == pytest.approx(
        ablated(model, BATCH, mean_loss(model), ["layers.0.attn_heads"]), abs=1e-6
    )


def test_mean_ablation_of_an_activation_that_never_varies_changes_nothing(tiny_model) -> None:
    model = tiny_model("gpt")
    same = torch.full((3, 6), 5)  # one token everywhere, but learned positions make the embeddings vary
    result = ablate(
        model, {"input_ids": same, "labels": same}, mean_loss(model), ["layers.0.resid_pre"], mode="mean"
    )
    assert abs(result.after["layers.0.resid_pre"] - result.before) > 1e-4
    one = {"input_ids": torch.full((3, 1), 5), "labels": torch.full((3, 1), 6)}  # one position, one token
    result = ablate(model, one, mean_loss(model), ["layers.0.resid_pre", "layers.1.attn_out"], mode="mean")
    assert result.together == pytest.approx(result.before, abs=1e-6)


@pytest.mark.parametrize("family", ["gpt", "bert", "seq2seq", "vit"])
def test_every_family_ablates_heads_and_sites(tiny_model, family: str) -> None:
    model = tiny_model(family)
    prefix = "decoder." if family == "seq2seq" else ""
    targets = [f"{prefix}layers.0.attn_heads.1", f"{prefix}layers.1.ffn_out"]
    for mode in ("zero", "mean"):
        result = ablate(model, batch_of(family), mean_loss(model), targets, mode=mode)
        assert set(result.after) == set(targets)
        assert all(abs(v - result.before) > 1e-6 for v in result.after.values())


@pytest.mark.parametrize(
    ("targets", "mode", "message"),
    [
        (
            ["layers.0.attn_heads.4"],
            "zero",
            r"ablate: head 4 of 'layers.0.attn_heads.4': layers.0.attn_heads has 4 heads",
        ),
        (["layers.0.ffn_out.1"], "zero", r"ablate: no site or head 'layers.0.ffn_out.1'"),
        (["layers.0.ffn_out"], "half", r"ablation='half': one of zero, mean"),
        ([], "zero", r"ablate: name at least one site or head"),
    ],
)
def test_bad_targets_are_named(tiny_model, targets: list[str], mode: str, message: str) -> None:
    model = tiny_model("gpt")
    with pytest.raises(ValueError, match=message):
        ablate(model, BATCH, mean_loss(model), targets, mode=mode)
