"""The pictures read correctly without the text around them: every heat map has a
colour bar with its range, signed maps are centred at zero, the title names the prediction, ViT maps
are drawn per patch with CLS/patch labels and integer ticks, and axes say what they hold."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from matplotlib.figure import Figure

from attnlab.explain import Example, explain_to_folder, token_attribution
from attnlab.explain import plots as plots_module
from attnlab.explain.pipeline import ATTRIBUTION_UNITS
from attnlab.explain.plots import attention_figure, image_patches_figure, token_scores_figure

PREDICTION = "predicted class 1 (p=0.87)"


def heat_maps(fig: Figure) -> list:
    """Every image drawn as a heat map (the grey input of a ViT picture is not one)."""
    return [im for ax in fig.axes for im in ax.images if im.get_cmap().name != "gray"]


def assert_every_heat_map_has_a_colour_bar(fig: Figure) -> None:
    bars = [im.colorbar for ax in fig.axes for im in ax.images if im.colorbar is not None]
    assert heat_maps(fig)
    for im in heat_maps(fig):
        scale = (im.norm.vmin, im.norm.vmax, im.get_cmap().name)
        # a colour bar drawn for this map, or for a panel that shares its scale exactly
        assert any(
            (b.mappable.norm.vmin, b.mappable.norm.vmax, b.mappable.get_cmap().name) == scale for b in bars
        )
        assert im.norm.vmax > im.norm.vmin


def vertical_lines(ax) -> list[float]:
    """The x positions of the vertical lines drawn on ``ax`` (in data coordinates)."""
    return sorted(float(x0) for x0, x1 in (line.get_xdata() for line in ax.lines) if x0 == x1)


def tick_texts(labels) -> list[str]:
    return [t.get_text() for t in labels]


def test_attention_panels_share_one_scale_with_its_colour_bar_and_integer_ticks() -> None:
    weights = torch.rand(3, 5, 5)
    weights[2, 0, 0] = 3.0  # the largest weight is in the last-but-one panel, not the last
    fig = attention_figure(weights)
    assert_every_heat_map_has_a_colour_bar(fig)
    assert {im.norm.vmax for im in heat_maps(fig)} == {3.0}
    assert {im.norm.vmin for im in heat_maps(fig)} == {0.0}
    first = fig.axes[0]
    assert first.get_ylabel() == "query" and fig.axes[2].get_xlabel() == "key"
    assert tick_texts(first.get_yticklabels()) == ["0", "1", "2", "3", "4"]
    assert list(first.get_yticks()) == [0, 1, 2, 3, 4]
    assert all(im.get_interpolation() == "nearest" for im in heat_maps(fig))


@pytest.mark.parametrize("values", [torch.tensor([0.5, 2.0, 1.0]), torch.tensor([0.5, -2.0, 1.0])])
def test_signed_strips_are_centred_at_zero_even_when_all_positive(values: torch.Tensor) -> None:
    fig = token_scores_figure(
        list("abc"), {"rollout": values.abs(), "grad × input": values}, signed={"grad × input"}, title="t"
    )
    assert_every_heat_map_has_a_colour_bar(fig)
    rollout, attribution = heat_maps(fig)
    assert attribution.get_cmap().name == "RdBu_r"
    assert attribution.norm.vmin == -attribution.norm.vmax == -2.0
    assert rollout.get_cmap().name == "viridis" and rollout.norm.vmin == 0.0


def test_image_maps_are_blocky_patches_beside_the_input_with_the_grid() -> None:
    scores = torch.arange(16.0).reshape(4, 4) - 4
    fig = image_patches_figure(
        torch.rand(1, 8, 8), {"rollout": scores.abs(), "grad": scores}, signed={"grad"}, title=PREDICTION
    )
    assert fig._suptitle.get_text() == PREDICTION
    assert_every_heat_map_has_a_colour_bar(fig)
    image_axes = [ax for ax in fig.axes if ax.images]
    assert len(image_axes) == 3 and all(len(ax.images) == 1 for ax in image_axes)  # nothing blended
    for im in heat_maps(fig):
        assert im.get_array().shape == (4, 4) and im.get_interpolation() == "nearest"
    grad = heat_maps(fig)[1]
    assert grad.norm.vmin == -grad.norm.vmax == -11.0
    for ax in image_axes:
        assert tick_texts(ax.get_xticklabels()) == ["0", "1", "2", "3"]
        assert ax.get_xlabel() == "patch column" and ax.get_ylabel() == "patch row"
        assert vertical_lines(ax) == [1.5, 3.5, 5.5]  # the patch grid, between pixels 1|2, 3|4, 5|6


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> dict[str, Figure]:
    """The figures explain_to_folder saves, by file name, as Figure objects."""
    figures: dict[str, Figure] = {}
    save = plots_module.save_figure

    def keep(fig: Figure, path: str | Path, dpi: int = 110) -> Path:
        figures[Path(path).name] = fig
        return save(fig, path, dpi)

    monkeypatch.setattr(plots_module, "save_figure", keep)
    return figures


def test_vit_pictures_name_the_prediction_patches_and_cls(tiny_model, tmp_path, captured) -> None:
    model = tiny_model("vit", pooling="cls")
    image = torch.rand(1, 8, 8, generator=torch.Generator().manual_seed(1))
    example = Example({"pixel_values": image[None]}, image=image, prediction=PREDICTION)
    explain_to_folder(model, example, tmp_path, layers=[-1])
    assert set(captured) == {"image.png", "layer_1_self.png"}
    for fig in captured.values():
        assert PREDICTION in fig._suptitle.get_text()
        assert_every_heat_map_has_a_colour_bar(fig)

    rollout, attribution = heat_maps(captured["image.png"])
    # gradient × input has no CLS entry: all 16 patches, in the image's layout
    expected = token_attribution(model, example.batch)[0].reshape(4, 4)
    torch.testing.assert_close(torch.as_tensor(attribution.get_array().data), expected)
    assert attribution.norm.vmin == -attribution.norm.vmax
    assert rollout.norm.vmin == 0.0 and rollout.get_cmap().name == "viridis"
    assert attribution.colorbar.ax.get_ylabel() == ATTRIBUTION_UNITS

    maps = captured["layer_1_self.png"]
    labels = tick_texts(maps.axes[0].get_yticklabels())
    assert labels[:3] == ["CLS", "p(0,0)", "p(0,1)"] and labels[-1] == "p(3,3)" and len(labels) == 17
    assert maps.axes[0].get_ylabel() == "query" and maps.axes[0].get_xlabel() == "key"


@pytest.mark.parametrize("family", ["gpt", "seq2seq"])
def test_text_pictures_name_the_prediction_and_the_axes(tiny_model, tmp_path, captured, family) -> None:
    ids = torch.tensor([[5, 6, 4, 9, 11]])
    batch = {"input_ids": ids}
    if family == "seq2seq":
        batch = {"src_ids": ids, "tgt_in": torch.tensor([[1, 7, 8]]), "labels": torch.tensor([[7, 8, 2]])}
    decoder = {"target_tokens": ["<bos>", "x", "y"], "output_tokens": ["x", "y", "<eos>"]}
    example = Example(batch, tokens=list("abcde"), **decoder, prediction=PREDICTION)
    explain_to_folder(tiny_model(family), example, tmp_path, layers=[-1], heads=[0])
    for fig in captured.values():
        assert PREDICTION in fig._suptitle.get_text()
        assert_every_heat_map_has_a_colour_bar(fig)
    strips = heat_maps(captured["tokens.png"])
    assert strips[1].get_cmap().name == "RdBu_r" and strips[1].norm.vmin == -strips[1].norm.vmax
    # each colour bar says what its values are
    assert [s.colorbar.ax.get_ylabel() for s in strips] == ["share of the input", ATTRIBUTION_UNITS]
    assert tick_texts(captured["tokens.png"].axes[0].get_yticklabels()) == [
        "rollout into 'e'" if family == "gpt" else "rollout, mean over positions"
    ]
    if family == "seq2seq":
        # a decoder query is labelled by the token it writes, a key by the token it reads
        cross = captured["decoder_layer_1_cross.png"].axes[0]
        assert cross.get_xlabel() == "key (source token)"
        assert cross.get_ylabel() == "query (writing output token)"
        assert tick_texts(cross.get_xticklabels()) == list("abcde")
        assert tick_texts(cross.get_yticklabels()) == ["x", "y", "<eos>"]
        own = captured["decoder_layer_1_self.png"].axes[0]
        assert own.get_xlabel() == "key (decoder input token)"
        assert tick_texts(own.get_xticklabels()) == ["<bos>", "x", "y"]
        assert tick_texts(own.get_yticklabels()) == ["x", "y", "<eos>"]
