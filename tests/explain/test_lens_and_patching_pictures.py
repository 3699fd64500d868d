"""The logit lens and activation patching as pictures and sections of index.html."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from attnlab.explain import Example, explain_to_folder, logit_difference

IDS = torch.tensor([[3, 4, 5, 6, 7]])


def test_gpt_page_links_the_lens_and_the_patching_pictures(tiny_model, tmp_path: Path) -> None:
    example = Example({"input_ids": IDS, "labels": torch.tensor([[4, 5, 6, 7, 8]])}, tokens=list("abcde"))
    page = explain_to_folder(
        tiny_model("gpt"),
        example,
        tmp_path,
        layers=[-1],  # one attention map: what this test reads is the lens and the patching
        lens=True,
        token_text=lambda i: f"t{i}",
        corrupted={"input_ids": torch.tensor([[3, 4, 15, 6, 7]])},
        metric=logit_difference(answer=5, wrong=9),
    )
    text = page.read_text(encoding="utf-8")
    for picture in ("logit_lens.png", "patching_resid.png", "patching_heads.png"):
        assert f'<img src="{picture}"' in text
        with Image.open(tmp_path / picture) as image:
            assert image.size[0] > 300 and image.size[1] > 150
    assert "Loss per layer: " in text and "layers.0.resid_pre</td><td>2</td>" in text


def test_vit_patching_pictures_and_a_lens_refused_in_one_line(tiny_model, tmp_path: Path) -> None:
    images = torch.randn(1, 1, 8, 8)
    model = tiny_model("vit")
    metric = logit_difference(answer=0, wrong=1)
    explain_to_folder(
        model,
        Example({"pixel_values": images}),
        tmp_path,
        layers=[-1],  # one attention map: what this test reads is the patching
        corrupted={"pixel_values": -images},
        metric=metric,
    )
    assert (tmp_path / "patching_resid.png").exists() and (tmp_path / "patching_heads.png").exists()
    with pytest.raises(ValueError, match="ViT predicts classes on this batch, not tokens"):
        # no attention maps (layers=[]): the refusal comes after them, and they are not what is tested
        explain_to_folder(model, Example({"pixel_values": images}), tmp_path, layers=[], lens=True)
