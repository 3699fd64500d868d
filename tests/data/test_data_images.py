"""Images: digits, a folder of class folders, HF image datasets, torchvision (optional), augmentation."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from PIL import Image

from attnlab.data.images import augment, match_channels, resize

VIT = {"image_size": 16, "patch_size": 4, "channels": 3}


def test_digits_batches_are_normalised_and_fit_the_model(make_dm):
    dm = make_dm("digits", model=VIT, val_fraction=0.1, test_fraction=0.1, batch_size=64)
    assert dm.tokenizer is None and dm.vocab_size == 0 and dm.num_classes == 10
    assert [len(dm.datasets[s]) for s in ("train", "val", "test")] == [1439, 179, 179]
    batch = next(iter(dm.train_dataloader()))
    assert batch["pixel_values"].shape == (64, 3, 16, 16) and batch["pixel_values"].dtype == torch.float32
    assert batch["labels"].dtype == torch.long and set(batch["labels"].tolist()) <= set(range(10))
    train = dm.datasets["train"]
    raw = torch.stack([train.source.load(i) for i in range(len(train))])
    assert raw.min() == 0.0 and raw.max() == 1.0  # 0..16 scaled to [0, 1]
    pixels = torch.stack([train[i]["pixel_values"] for i in range(0, len(train), 7)])
    assert abs(pixels.mean().item()) < 0.1 and abs(pixels.std().item() - 1.0) < 0.15
    assert torch.equal(pixels[0, 0], pixels[0, 2])  # grey repeated over the model's 3 channels


def test_digits_at_native_size_on_one_channel(make_dm):
    dm = make_dm("digits", model={"image_size": 8, "patch_size": 2, "channels": 1})
    sample = dm.datasets["test"][0]
    from sklearn.datasets import load_digits

    images = torch.tensor(load_digits().images, dtype=torch.float32) / 16
    raw = dm.datasets["test"].raw(0)[0]
    assert any(torch.equal(raw, img) for img in images)  # no resize when the sizes agree
    assert sample["pixel_values"].shape == (1, 8, 8)


def test_resize_and_channels():
    image = torch.rand(3, 32, 32)
    assert resize(image, 16).shape == (3, 16, 16)
    assert torch.allclose(resize(torch.ones(1, 8, 8), 32), torch.ones(1, 32, 32))
    grey = match_channels(torch.ones(3, 4, 4) * torch.tensor([1.0, 0.0, 0.0]).view(3, 1, 1), 1)
    assert torch.allclose(grey, torch.full((1, 4, 4), 0.299))


def test_augmentation_is_seeded_and_keeps_the_size(make_dm):
    image = torch.arange(1.0, 65.0).view(1, 8, 8)
    padded = torch.nn.functional.pad(image, (2, 2, 2, 2))
    windows = [padded[:, t : t + 8, u : u + 8] for t in range(5) for u in range(5)]
    crops = [augment(image, 2, True, torch.Generator().manual_seed(s)) for s in range(200)]
    flipped = 0
    for crop in crops:  # every output is a window of the zero-padded image, flipped or not
        plain = any(torch.equal(crop, w) for w in windows)
        mirrored = any(torch.equal(crop, w.flip(-1)) for w in windows)
        assert plain or mirrored
        flipped += mirrored and not plain
    assert 60 < flipped < 140
    assert len({tuple(c.flatten().tolist()) for c in crops}) > 40
    dm = make_dm("digits", model=VIT, augment=True, crop_padding=2)
    train, val = dm.datasets["train"], dm.datasets["val"]
    assert torch.equal(train[(1, 5)]["pixel_values"], train[(1, 5)]["pixel_values"])
    assert any(
        not torch.equal(train[(1, i)]["pixel_values"], train[(2, i)]["pixel_values"]) for i in range(5)
    )
    assert not val.augment and torch.equal(val[(1, 0)]["pixel_values"], val[(2, 0)]["pixel_values"])


def make_folder(root, classes=("cat", "dog", "eel"), per_class=4, size=(10, 12)):
    for c, name in enumerate(classes):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            mode = "RGB" if i % 2 else "L"
            colour = (40 * c, 100, 20 * i) if mode == "RGB" else 60 * c
            Image.new(mode, size, colour).save(root / name / f"{i}.png")
    return root


def test_image_folder(make_dm, tmp_path):
    root = make_folder(tmp_path / "pets", per_class=10)
    (root / "cat" / "notes.txt").write_text("not an image, skipped")
    before = sorted(p.name for p in root.rglob("*"))
    dm = make_dm("images", path=str(root), model=VIT, val_fraction=0.2, test_fraction=0.2, batch_size=6)
    assert dm.label_names == ["cat", "dog", "eel"] and dm.num_classes == 3
    assert [len(dm.datasets[s]) for s in ("train", "val", "test")] == [18, 6, 6]
    batch = next(iter(dm.train_dataloader()))
    assert batch["pixel_values"].shape == (6, 3, 16, 16)
    dm.save_tokenizer(tmp_path / "run")
    assert (tmp_path / "run" / "labels.json").exists()
    assert sorted(p.name for p in root.rglob("*")) == before  # nothing written into the data folder


def test_image_folder_with_split_folders(make_dm, tmp_path):
    make_folder(tmp_path / "ds" / "train", per_class=3)
    make_folder(tmp_path / "ds" / "val", per_class=1)
    make_folder(tmp_path / "ds" / "test", classes=("cat", "eel"), per_class=2)
    dm = make_dm("images", path=str(tmp_path / "ds"), model=VIT)
    assert [len(dm.datasets[s]) for s in ("train", "val", "test")] == [9, 3, 4]
    assert sorted(dm.datasets["test"].source.labels) == [0, 0, 2, 2]


def test_hf_imagefolder_offline(make_dm, tmp_path):
    root = make_folder(tmp_path / "pets", per_class=6)
    dm = make_dm(
        "images",
        hf_name="imagefolder",
        hf_data_files=str(root / "**"),
        model=VIT,
        val_fraction=0.25,
        test_fraction=0.25,
    )
    assert dm.label_names == ["cat", "dog", "eel"] and dm.num_classes == 3
    batch = next(iter(dm.val_dataloader()))
    assert batch["pixel_values"].shape[1:] == (3, 16, 16)
    with pytest.raises(
        ValueError,
        match=r"data.image_column='img' is not a column of data.hf_name='imagefolder'; "
        r"available: image, label",
    ):
        make_dm(
            "images", hf_name="imagefolder", hf_data_files=str(root / "**"), image_column="img", model=VIT
        )


def test_torchvision_is_optional(make_dm, monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision", None)  # as if not installed
    with pytest.raises(
        ImportError, match=r"data.torchvision needs torchvision.*pip install 'attnlab\[vision\]'"
    ):
        make_dm("images", torchvision="CIFAR10", model=VIT)


def test_torchvision_dataset_adapter(make_dm, monkeypatch, tmp_path):
    calls = []

    class Toy:
        classes = ("a", "b")

        def __init__(self, root, train, download):
            calls.append((root, train, download))
            self.targets = [i % 2 for i in range(20 if train else 6)]

        def __len__(self):
            return len(self.targets)

        def __getitem__(self, i):
            return Image.new("L", (28, 28), 200 * self.targets[i]), self.targets[i]

    fake = types.ModuleType("torchvision")
    fake.datasets = types.SimpleNamespace(Toy=Toy)
    monkeypatch.setitem(sys.modules, "torchvision", fake)
    dm = make_dm("images", torchvision="Toy", model=VIT, val_fraction=0.25)
    assert [len(dm.datasets[s]) for s in ("train", "val", "test")] == [15, 5, 6]
    assert calls == [
        (str(tmp_path / "hf_cache" / "torchvision"), True, True),
        (str(tmp_path / "hf_cache" / "torchvision"), False, True),
    ]
    sample = dm.datasets["test"][1]
    assert sample["labels"] == 1 and sample["pixel_values"].shape == (3, 16, 16)
    with pytest.raises(
        ValueError, match=r"data.torchvision='Nope' is not a dataset class of torchvision.datasets"
    ):
        make_dm("images", torchvision="Nope", model=VIT)


def test_image_bad_inputs(make_dm, tmp_path):
    root = make_folder(tmp_path / "pets")
    (root / "dog" / "broken.png").write_bytes(b"not really a png")
    with pytest.raises(ValueError, match=r"broken.png is not a readable image"):
        make_dm("images", path=str(root), model=VIT)
    with pytest.raises(
        ValueError, match=r"data.image_size=32 does not match model.image_size=16; leave data.image_size"
    ):
        make_dm("digits", image_size=32, model=VIT)
    with pytest.raises(
        ValueError,
        match=r"^model.num_classes=5: the data has 10 classes \(data.kind=digits\); set at least 10",
    ):
        make_dm("digits", model={**VIT, "num_classes": 5})
    (tmp_path / "flat").mkdir()
    Image.new("L", (4, 4)).save(tmp_path / "flat" / "x.png")
    with pytest.raises(ValueError, match=r"flat has no class folders; data.kind=images expects"):
        make_dm("images", path=str(tmp_path / "flat"), model=VIT)


def grey_folder(root, size=(12, 12), per_class=3):
    """Two classes of grey images: class 0 dark (value 50), class 1 bright (value 200)."""
    for c, value in enumerate((50, 200)):
        (root / f"c{c}").mkdir(parents=True)
        for i in range(per_class):
            Image.new("L", size, value).save(root / f"c{c}" / f"{i}.png")
    return root


def test_channels_and_normalisation_are_taken_from_grey_images(make_dm, tmp_path):
    """model.channels=0 and an empty data.mean: one grey channel, normalised by the training pixels' own
    mean and std (half the pixels at 50/255, half at 200/255 -> mean 125/255, std 75/255)."""
    root = grey_folder(tmp_path / "grey", per_class=10)
    dm = make_dm(  # no augmentation: the padding of its random crops would darken the pixels
        "images",
        path=str(root),
        model={**VIT, "channels": 0},
        val_fraction=0.2,
        test_fraction=0.0,
        augment=False,
    )
    assert dm.channels == 1
    train = dm.datasets["train"]
    assert train.mean.flatten().tolist() == pytest.approx([125 / 255], abs=0.05)
    pixels = torch.stack([train[i]["pixel_values"] for i in range(len(train))])
    assert pixels.shape[1:] == (1, 16, 16)
    assert pixels.mean().item() == pytest.approx(0.0, abs=0.2) and pixels.std().item() == pytest.approx(
        1.0, abs=0.2
    )


def test_given_channels_are_kept_and_colour_images_give_three(make_dm, tmp_path):
    grey = grey_folder(tmp_path / "grey", per_class=10)
    dm = make_dm("images", path=str(grey), model=VIT, val_fraction=0.2)
    assert dm.channels == 3 and dm.datasets["train"][0]["pixel_values"].shape == (3, 16, 16)  # grey to RGB
    colour = make_folder(tmp_path / "pets", per_class=10)
    assert make_dm("images", path=str(colour), model={**VIT, "channels": 0}, val_fraction=0.2).channels == 3


def test_colour_images_are_normalised_per_channel(make_dm, tmp_path):
    """An RGB folder with empty data.mean/std: one mean per channel, the training pixels' own."""
    for c in range(2):
        (tmp_path / "rgb" / f"c{c}").mkdir(parents=True)
        for i in range(10):
            Image.new("RGB", (16, 16), (200, 50, 100 + 50 * c)).save(tmp_path / "rgb" / f"c{c}" / f"{i}.png")
    dm = make_dm(
        "images", path=str(tmp_path / "rgb"), model={**VIT, "channels": 0}, val_fraction=0.2, augment=False
    )
    assert dm.channels == 3
    assert dm.datasets["train"].mean.flatten().tolist() == pytest.approx(
        [200 / 255, 50 / 255, 125 / 255], abs=0.05
    )


def test_a_resize_that_destroys_the_images_is_refused(make_dm, tmp_path):
    root = grey_folder(tmp_path / "big", size=(64, 48))
    with pytest.raises(
        ValueError,
        match=r"model.image_size=16: the images are 64x48 .* shrinks them 3x .* set model.image_size=48 "
        r"model.patch_size=12",
    ):
        make_dm("images", path=str(root), model=VIT)


def test_a_truncated_image_is_named_when_the_data_set_is_built(make_dm, tmp_path):
    root = make_folder(tmp_path / "pets")
    whole = (root / "dog" / "1.png").read_bytes()
    (root / "dog" / "1.png").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ValueError, match=r"dog/1.png is not a readable image"):
        make_dm("images", path=str(root), model=VIT)
