"""Fill-mask, class probabilities and image loading for encoders and ViT."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from attnlab.data.image_loading import load_images
from attnlab.generate import class_probabilities, fill_mask, image_probabilities

# Random untied weights and an init wide enough that argmax is decisive (the root tiny_model's init).
GENERATOR = dict(vocab_size=41, d_model=32, max_seq_len=64, tie_embeddings=False)

MASK = 4


def test_fill_mask_ranks_the_masked_positions_of_every_row(tiny_model) -> None:
    model = tiny_model("bert", **GENERATOR)
    ids = torch.tensor([[7, MASK, 9, MASK], [MASK, 11, 12, 0]])
    fills = fill_mask(model, ids, mask_id=MASK, attention_mask=ids != 0, top_k=3)
    assert [(f.row, f.position) for f in fills] == [(0, 1), (0, 3), (1, 0)]
    for f in fills:
        assert len(f.token_ids) == 3 and f.probs == sorted(f.probs, reverse=True)
    # the padded row predicts as it does alone
    alone = fill_mask(model, ids[1:, :3], mask_id=MASK, top_k=3)[0]
    assert alone.token_ids == fills[2].token_ids
    assert alone.probs == pytest.approx(fills[2].probs, abs=1e-5)


def test_fill_mask_without_a_mask_is_refused(tiny_model) -> None:
    with pytest.raises(ValueError, match=r"no mask token \(id 4\) in the input"):
        fill_mask(tiny_model("bert", **GENERATOR), torch.tensor([[5, 6]]), mask_id=MASK)


def test_class_probabilities_ignore_padding(tiny_model) -> None:
    model = tiny_model("bert", num_classes=3, mlm_head=False, pooling="mean", **GENERATOR)
    ids = torch.tensor([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]])
    probs = class_probabilities(model, ids, ids != 0)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2))
    torch.testing.assert_close(probs[0], class_probabilities(model, ids[:1, :3])[0], atol=1e-5, rtol=0)


def test_images_are_loaded_resized_and_normalised(tmp_path: Path) -> None:
    pixels = np.zeros((4, 4, 3), dtype=np.uint8)
    pixels[:, :, 0] = 255  # pure red
    Image.fromarray(pixels).save(tmp_path / "red.png")
    rgb = load_images([tmp_path / "red.png"], image_size=8, channels=3)
    assert rgb.shape == (1, 3, 8, 8)
    torch.testing.assert_close(rgb[0, :, 0, 0], torch.tensor([1.0, 0.0, 0.0]))
    grey = load_images([tmp_path / "red.png"], image_size=2, channels=1, mean=[0.25], std=[0.5])
    assert grey.shape == (1, 1, 2, 2)
    torch.testing.assert_close(grey, torch.full((1, 1, 2, 2), (0.299 - 0.25) / 0.5), atol=2e-3, rtol=0)


def test_image_probabilities_of_a_vit(tiny_model, tmp_path: Path) -> None:
    model = tiny_model("vit", num_classes=4, image_size=8, patch_size=4, channels=1)
    probs = image_probabilities(model, torch.rand(3, 1, 8, 8))
    assert probs.shape == (3, 4)
    torch.testing.assert_close(probs.sum(-1), torch.ones(3))


def test_bad_image_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"image file '.*missing\.png' does not exist"):
        load_images([tmp_path / "missing.png"], image_size=8, channels=1)
    (tmp_path / "notes.png").write_text("not an image")
    with pytest.raises(ValueError, match=r"notes\.png' is not an image file PIL can read"):
        load_images([tmp_path / "notes.png"], image_size=8, channels=1)
    Image.fromarray(np.zeros((2, 2), dtype=np.uint8)).save(tmp_path / "ok.png")
    with pytest.raises(ValueError, match="mean and std need 1 or 3 values"):
        load_images([tmp_path / "ok.png"], image_size=2, channels=3, mean=[0.5, 0.5], std=[1, 1])
