"""Figures, the HTML page, and explain_to_folder for every family."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from attnlab.explain import Example, explain_to_folder
from attnlab.explain.labels import display_token, quoted_token
from attnlab.explain.plots import (
    attention_figure,
    figure_to_array,
    head_importance_figure,
    image_patches_figure,
    save_figure,
    token_scores_figure,
)
from attnlab.explain.report import Section, scored_tokens_html, write_report


def png_size(path: Path) -> tuple[int, int]:
    with Image.open(path) as image:
        assert image.format == "PNG"
        return image.size


def test_figures_are_written_as_png_and_rendered_as_rgb(tmp_path: Path) -> None:
    weights = torch.rand(4, 6, 6).softmax(-1)
    figures = {
        "heads.png": attention_figure(weights, query_labels=list("abcdef"), key_labels=list("abcdef")),
        "one.png": attention_figure(weights[0]),
        "tokens.png": token_scores_figure(list("abc"), {"x": torch.tensor([1.0, -2.0, 0.5])}),
        "image.png": image_patches_figure(torch.rand(3, 8, 8), {"rollout": torch.rand(4, 4)}),
        "importance.png": head_importance_figure(torch.rand(2, 4), ["layer 0 self", "layer 1 self"]),
    }
    for name, fig in figures.items():
        width, height = png_size(save_figure(fig, tmp_path / name))
        assert width > 100 and height > 100
    pixels = figure_to_array(attention_figure(weights))
    assert pixels.dtype == np.uint8 and pixels.ndim == 3 and pixels.shape[2] == 3
    assert pixels.std() > 0  # not a blank canvas


def test_whitespace_tokens_are_made_visible() -> None:
    assert display_token(" a\n") == "␣a⏎"
    assert display_token("") == "∅"
    assert quoted_token(" ") == "'␣'"


def test_report_shows_sections_and_escapes_text(tmp_path: Path) -> None:
    page = write_report(tmp_path, "t<1>", [Section("maps", "a & b", ["attention/x.png"], "<table></table>")])
    text = page.read_text(encoding="utf-8")
    assert "<title>t&lt;1&gt;</title>" in text and "a &amp; b" in text
    assert '<img src="attention/x.png"' in text and "<table></table>" in text
    spans = scored_tokens_html(["<a>", "b"], torch.tensor([2.0, -1.0]))
    assert "&lt;a&gt;" in spans and "rgba(220,40,40,1.00)" in spans and "rgba(40,80,220,0.50)" in spans


def lm_batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(1, 23, (2, 9), generator=torch.Generator().manual_seed(0))
    return {"input_ids": ids[:, :-1], "labels": ids[:, 1:]}


def examples() -> dict[str, tuple[dict, Example, list[dict]]]:
    ids = torch.tensor([[5, 6, 4, 9, 11]])
    seq2seq_batch = {"src_ids": ids, "tgt_in": torch.tensor([[1, 7, 8]]), "labels": torch.tensor([[7, 8, 2]])}
    image = torch.rand(1, 8, 8)
    return {
        "gpt": ({}, Example({"input_ids": ids}, tokens=list("abcde"), description="next: x"), [lm_batch()]),
        "bert": ({}, Example({"input_ids": ids}, tokens=list("ab?de"), focus=2), [{**lm_batch()}]),
        "classifier": (
            {"num_classes": 2, "mlm_head": False},
            Example({"input_ids": ids}, tokens=list("abcde")),
            [{"input_ids": ids, "labels": torch.tensor([1])}],
        ),
        "seq2seq": (
            {},
            Example(seq2seq_batch, tokens=list("abcde"), target_tokens=["<bos>", "x", "y"]),
            [seq2seq_batch],
        ),
        "vit": (
            {},
            Example({"pixel_values": image[None]}, image=image),
            [{"pixel_values": image[None], "labels": torch.tensor([0])}],
        ),
    }


@pytest.mark.parametrize("name", ["bert", "seq2seq", "vit"])  # the commands' tests cover every family too
def test_explain_to_folder_writes_pictures_and_page(tiny_model, tmp_path: Path, name: str) -> None:
    overrides, example, batches = examples()[name]
    family = {"classifier": "bert"}.get(name, name)
    model = tiny_model(family, **overrides)
    page = explain_to_folder(model, example, tmp_path, layers=[-1], heads=[0, 3], importance_batches=batches)
    pngs = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.png"))
    expected_maps = {
        "seq2seq": [
            "attention/decoder_layer_1_cross.png",
            "attention/decoder_layer_1_self.png",
            "attention/encoder_layer_1_self.png",
        ],
    }.get(family, ["attention/layer_1_self.png"])
    pictures = ["image.png"] if family == "vit" else ["rollout.png", "tokens.png"]
    assert pngs == sorted([*expected_maps, *pictures, "head_importance.png"])
    html = page.read_text(encoding="utf-8")
    for png in pngs:
        assert f'src="{png}"' in html
    assert (tmp_path / "head_importance.csv").read_text().startswith("module,head 0,head 1,head 2,head 3")
    weights = np.load(tmp_path / "attention_weights.npz")
    assert len(weights.files) == (6 if family == "seq2seq" else 2)
    for name in weights.files:
        np.testing.assert_allclose(weights[name].sum(-1), 1.0, rtol=1e-5)


def test_bad_head_index_is_named(tiny_model, tmp_path: Path) -> None:
    _, example, _ = examples()["gpt"]
    with pytest.raises(ValueError, match=r"heads=\[7\]: the model has 4 heads \(0..3\)"):
        explain_to_folder(tiny_model("gpt"), example, tmp_path, heads=[7])
