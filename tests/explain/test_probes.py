"""Linear probes: high where a layer must encode the property, at chance for shuffled labels and for a
property no layer can know; refused in one line where a family has no such labels."""

from __future__ import annotations

import pytest
import torch

from attnlab.explain import probe_layers
from attnlab.explain.probes import held_out_accuracy, probe_data


def token_batches(n: int = 6, vocab: int = 23) -> list[dict[str, torch.Tensor]]:
    ids = torch.randint(3, vocab, (n, 16, 17))
    return [{"input_ids": x[:, :-1], "labels": x[:, 1:]} for x in ids]


def three_digits() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's 8x8 digits 0, 1 and 2 (bundled, no download), scaled to about [0, 1]."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    keep = torch.as_tensor(digits.target) < 3
    images = torch.as_tensor(digits.images, dtype=torch.float32)[keep].unsqueeze(1) / 16.0
    return images, torch.as_tensor(digits.target)[keep]


@pytest.mark.parametrize("family", ["gpt", "bert"])
def test_every_layer_encodes_the_current_token_and_the_control_does_not(tiny_model, family: str) -> None:
    result = probe_layers(tiny_model(family), token_batches(), "token")
    assert result.sites == ["layers.0.resid_post", "layers.1.resid_post"]
    assert min(result.accuracy) > 0.9  # 20 tokens; chance is about 1/20
    assert result.chance < 0.1 and max(result.control) < result.chance + 0.08


def test_no_layer_of_a_causal_model_knows_the_next_random_token(tiny_model) -> None:
    """The same vectors that give the current token give the next one, drawn at random, at chance."""
    model = tiny_model("gpt")
    batches = token_batches()
    _, feats, tokens = probe_data(model, batches, "token")
    nexts = torch.cat([b["labels"].flatten() for b in batches]).numpy()
    train = torch.rand(len(nexts)).numpy() > 0.25
    assert held_out_accuracy(feats[-1].numpy(), tokens[-1].numpy(), train) > 0.9
    assert held_out_accuracy(feats[-1].numpy(), nexts, train) < 0.12


def test_a_vits_cls_encodes_the_digit_it_reads(tiny_model) -> None:
    """The class is in the pixels that the CLS token attends over: a linear read of its last layer
    finds it (chance a third); shuffled labels leave the probe at chance."""
    images, labels = three_digits()
    batches = [
        {"pixel_values": images[i : i + 100], "labels": labels[i : i + 100]} for i in range(0, 500, 100)
    ]
    result = probe_layers(tiny_model("vit", init_std=0.02), batches, "class")
    assert result.sites == ["layers.0.resid_post", "layers.1.resid_post"]
    assert result.accuracy[-1] > 0.85
    assert 0.25 < result.chance < 0.45 and max(result.control) < 0.45


def test_seq2seq_probes_the_tokens_of_both_stacks(tiny_model) -> None:
    ids = torch.randint(3, 23, (4, 8, 12))
    batches = [{"src_ids": x, "tgt_in": x[:, :6], "labels": x[:, 1:7]} for x in ids]
    result = probe_layers(tiny_model("seq2seq"), batches, "token")
    assert (
        result.sites[0] == "encoder.layers.0.resid_post" and result.sites[-1] == "decoder.layers.1.resid_post"
    )
    assert min(result.accuracy) > 0.8


@pytest.mark.parametrize(
    ("family", "prop", "message"),
    [
        ("vit", "token", r"probe=token: ViT reads no tokens \('input_ids'\): probe=class"),
        ("gpt", "class", r"probe=class: DecoderLM's batches carry no class labels: probe=token"),
        ("gpt", "colour", r"probe='colour': one of token, class"),
    ],
)
def test_a_property_the_family_lacks_is_refused(tiny_model, family: str, prop: str, message: str) -> None:
    batch = {"pixel_values": torch.randn(2, 1, 8, 8), "labels": torch.tensor([0, 1])}
    with pytest.raises(ValueError, match=message):
        probe_layers(tiny_model(family), [batch if family == "vit" else token_batches(1)[0]], prop)


def test_the_probe_figure_names_its_axes_lines_and_chance() -> None:
    from attnlab.explain.plots import probe_figure

    figure = probe_figure(["layers.0.resid_post", "layers.1.resid_post"], [0.9, 0.8], [0.1, 0.05], 0.07)
    ax = figure.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("site (layer)", "held-out accuracy")
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["probe", "control (shuffled labels)", "chance (0.07)"]
    assert ax.get_ylim() == (-0.05, 1.1)  # accuracy on one fixed 0-1 scale
    assert [t.get_text() for t in ax.get_xticklabels()] == ["layers.0.resid_post", "layers.1.resid_post"]
