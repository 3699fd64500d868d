"""Images for the ViT: scikit-learn's digits (offline default), a folder of class folders, Hugging
Face image datasets, and torchvision datasets when the optional ``vision`` extra is installed.

Every image is brought to the model: ``model.channels`` (grey <-> RGB), ``model.image_size``
(bilinear resize), then optional augmentation (random crop with zero padding, horizontal flip;
seeded by (seed, epoch, index)) and normalisation by ``data.mean``/``data.std``. Batches hold
``pixel_values`` (B, C, H, W) float and ``labels`` (B,).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import Dataset

from attnlab.data.classification import label_ids
from attnlab.data.module import AttnlabDataModule
from attnlab.data.sampling import Key, split_key, torch_generator
from attnlab.data.sources import (
    SPLIT_NAMES,
    carve_indices,
    check_columns,
    complete_splits,
    existing,
    hf_splits,
)

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
GREY_WEIGHTS = torch.tensor([0.299, 0.587, 0.114]).view(3, 1, 1)  # ITU-R BT.601 luma


# -- sources: ``load(i)`` gives a (C, H, W) float tensor in [0, 1] at the stored size ---------------


class TensorImages:
    """Images already in memory, e.g. the digits."""

    def __init__(self, images: Tensor, labels: list[int]) -> None:
        self.images, self.labels = images, labels

    def load(self, index: int) -> Tensor:
        return self.images[index]


def pil_to_tensor(image: Any, channels: int) -> Tensor:
    """A PIL image as a (C, H, W) float tensor in [0, 1], converted to grey or RGB."""
    array = np.asarray(image.convert("L" if channels == 1 else "RGB"), dtype=np.float32) / 255.0
    tensor = torch.from_numpy(array.copy())
    return tensor.unsqueeze(0) if channels == 1 else tensor.permute(2, 0, 1)


class FileImages:
    """Image files read with PIL when needed."""

    def __init__(self, files: list[Path], labels: list[int], channels: int) -> None:
        self.files, self.labels, self.channels = files, labels, channels

    def load(self, index: int) -> Tensor:
        from PIL import Image

        with Image.open(self.files[index]) as image:
            return pil_to_tensor(image, self.channels)


class HFImages:
    """A Hugging Face split whose ``column`` decodes to PIL images."""

    def __init__(self, dataset: Any, column: str, labels: list[int], channels: int) -> None:
        self.dataset, self.column, self.labels, self.channels = dataset, column, labels, channels

    def load(self, index: int) -> Tensor:
        return pil_to_tensor(self.dataset[index][self.column], self.channels)


class IndexedImages:
    """A subset of a dataset that returns (PIL image, label) pairs, e.g. a torchvision dataset."""

    def __init__(self, dataset: Any, indices: list[int], labels: list[int], channels: int) -> None:
        self.dataset, self.indices, self.labels, self.channels = dataset, indices, labels, channels

    def load(self, index: int) -> Tensor:
        return pil_to_tensor(self.dataset[self.indices[index]][0], self.channels)


# -- bringing an image to the model -------------------------------------------------------------


def match_channels(image: Tensor, channels: int) -> Tensor:
    if image.shape[0] == channels:
        return image
    if image.shape[0] == 1:
        return image.expand(channels, -1, -1)
    if image.shape[0] == 3 and channels == 1:
        return (image * GREY_WEIGHTS).sum(0, keepdim=True)
    raise ValueError(f"cannot turn {image.shape[0]}-channel images into model.channels={channels}")


def resize(images: Tensor, size: int) -> Tensor:
    """(C, H, W) or (N, C, H, W) images resized (bilinear; antialiased when shrinking) to size x size."""
    if images.shape[-2:] == (size, size):
        return images
    batch = images if images.dim() == 4 else images[None]
    shrink = min(images.shape[-2:]) > size
    out = F.interpolate(batch, size=(size, size), mode="bilinear", align_corners=False, antialias=shrink)
    return out if images.dim() == 4 else out[0]


def augment(image: Tensor, padding: int, hflip: bool, generator: torch.Generator) -> Tensor:
    """Random crop of the zero-padded image back to its size, then a horizontal flip half the time."""
    if padding:
        size = image.shape[-2:]
        padded = F.pad(image, (padding, padding, padding, padding))
        top, left = torch.randint(2 * padding + 1, (2,), generator=generator).tolist()
        image = padded[:, top : top + size[0], left : left + size[1]]
    if hflip and torch.rand((), generator=generator) < 0.5:
        image = image.flip(-1)
    return image


class ImageDataset(Dataset):
    def __init__(
        self,
        source: Any,
        *,
        size: int,
        channels: int,
        mean: Tensor,
        std: Tensor,
        augment: bool = False,
        padding: int = 0,
        hflip: bool = False,
        seed: int = 0,
    ) -> None:
        self.source, self.size, self.channels, self.mean, self.std = source, size, channels, mean, std
        self.augment, self.padding, self.hflip, self.seed = augment, padding, hflip, seed

    def __len__(self) -> int:
        return len(self.source.labels)

    def raw(self, index: int) -> Tensor:
        """The image at the model's channels and size, before augmentation and normalisation."""
        return resize(match_channels(self.source.load(index), self.channels), self.size)

    def __getitem__(self, key: Key) -> dict[str, Any]:
        epoch, index = split_key(key)
        image = self.raw(index)
        if self.augment:
            image = augment(image, self.padding, self.hflip, torch_generator(self.seed, epoch, index))
        return {"pixel_values": (image - self.mean) / self.std, "labels": self.source.labels[index]}


# -- the data module ------------------------------------------------------------------------------


class ImageDataModule(AttnlabDataModule):
    """``data.kind=digits`` or ``data.kind=images`` (``data.path``, ``data.hf_name`` or ``data.torchvision``)."""

    def build(self) -> dict[str, Dataset]:
        cfg, channels = self.cfg, self.model_cfg.channels
        if cfg.kind == "digits":
            sources = self.digits()
        elif cfg.torchvision:
            sources = self.torchvision_sources(channels)
        elif cfg.hf_name:
            sources = self.hf_sources(channels)
        else:
            sources = self.folder_sources(channels)
        size = self.model_cfg.image_size
        mean, std = self.normalisation(sources["train"], channels)
        return {
            split: ImageDataset(
                source,
                size=size,
                channels=channels,
                mean=mean,
                std=std,
                augment=cfg.augment and split == "train",
                padding=cfg.crop_padding,
                hflip=cfg.hflip,
                seed=self.seed,
            )
            for split, source in sources.items()
        }

    def check_model(self) -> None:
        model = self.model_cfg
        if self.cfg.image_size is not None and self.cfg.image_size != model.image_size:
            raise ValueError(
                f"data.image_size={self.cfg.image_size} does not match model.image_size={model.image_size}; "
                "leave data.image_size null to resize the images to the model"
            )
        if model.channels not in (1, 3):
            raise ValueError(f"model.channels={model.channels}: images are loaded as grey (1) or RGB (3)")
        super().check_model()

    def normalisation(self, train: Any, channels: int) -> tuple[Tensor, Tensor]:
        """``data.mean``/``data.std``; if empty, the digits' own statistics (at the model's size), else 0.5/0.5."""
        if self.cfg.mean:
            mean, std = torch.tensor(self.cfg.mean), torch.tensor(self.cfg.std)
        elif isinstance(
            train, TensorImages
        ):  # grey digits at the model's size: one statistic for all channels
            images = resize(train.images, self.model_cfg.image_size)
            mean, std = images.mean().reshape(1), images.std().reshape(1)
        else:
            mean, std = torch.full((channels,), 0.5), torch.full((channels,), 0.5)
        if len(mean) not in (1, channels):
            raise ValueError(
                f"data.mean={list(self.cfg.mean)} has {len(mean)} values for model.channels={channels}"
            )
        return mean.float().view(-1, 1, 1), std.float().view(-1, 1, 1)

    def digits(self) -> dict[str, TensorImages]:
        """scikit-learn's 1797 8x8 handwritten digits (values 0-16, scaled to [0, 1])."""
        from sklearn.datasets import load_digits

        bunch = load_digits()
        images = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
        labels = [int(y) for y in bunch.target]
        self.num_classes = 10
        parts = carve_indices(
            len(labels), self.cfg.val_fraction, self.cfg.test_fraction, self.seed, shuffle=True
        )
        return {split: TensorImages(images[idx], [labels[i] for i in idx]) for split, idx in parts.items()}

    def folder_sources(self, channels: int) -> dict[str, FileImages]:
        """``data.path``/<class>/<image>, or ``data.path``/{train,val,test}/<class>/<image>."""
        root = existing(self.cfg.path)
        if not root.is_dir():
            raise ValueError(
                f"data.path={self.cfg.path!r} is a file; data.kind=images needs a folder of class folders"
            )
        split_dirs = {}
        for split, names in SPLIT_NAMES.items():
            folder = next((root / n for n in names if (root / n).is_dir()), None)
            if folder is not None:
                split_dirs[split] = folder
        if "train" not in split_dirs:  # no split folders: the classes are right under data.path
            split_dirs = {"train": root}
        classes = class_folders(split_dirs["train"])
        self.label_names, self.num_classes = classes, len(classes)
        found = {split: image_files(folder, classes) for split, folder in split_dirs.items()}
        found = complete_splits(
            found, self.cfg, self.seed, shuffle=True, take=lambda fl, idx: [fl[i] for i in idx]
        )
        return {
            split: FileImages([f for f, _ in fl], [y for _, y in fl], channels) for split, fl in found.items()
        }

    def hf_sources(self, channels: int) -> dict[str, HFImages]:
        cfg = self.cfg
        wanted = {"data.image_column": cfg.image_column, "data.label_column": cfg.label_column}
        splits = hf_splits(cfg, self.seed, shuffle=True)
        for ds in splits.values():
            check_columns(ds.column_names, wanted, f"data.hf_name={cfg.hf_name!r}")
        labels, names = label_ids(
            {s: list(ds[cfg.label_column]) for s, ds in splits.items()}, f"data.hf_name={cfg.hf_name!r}"
        )
        feature = splits["train"].features[cfg.label_column]
        names = names or getattr(feature, "names", None)
        self.label_names = names
        self.num_classes = len(names) if names else max(max(ys, default=0) for ys in labels.values()) + 1
        return {s: HFImages(ds, cfg.image_column, labels[s], channels) for s, ds in splits.items()}

    def torchvision_sources(self, channels: int) -> dict[str, IndexedImages]:
        """A ``torchvision.datasets`` class, downloaded into ``data.cache_dir`` (default ./data_cache/torchvision)."""
        datasets = import_torchvision().datasets
        name = self.cfg.torchvision
        cls = getattr(datasets, name, None)
        if not isinstance(cls, type):
            raise ValueError(f"data.torchvision={name!r} is not a dataset class of torchvision.datasets")
        root = str(Path(self.cfg.cache_dir or "data_cache") / "torchvision")
        train, test = (torchvision_split(cls, root, split) for split in ("train", "test"))
        full = {"train": train, "test": test}
        labels = {s: dataset_labels(ds) for s, ds in full.items()}
        names = list(getattr(train, "classes", []) or [])
        self.label_names = names or None
        self.num_classes = len(names) if names else max(max(ys) for ys in labels.values()) + 1
        parts = carve_indices(len(train), self.cfg.val_fraction, 0.0, self.seed, shuffle=True)
        return {
            "train": IndexedImages(
                train, parts["train"], [labels["train"][i] for i in parts["train"]], channels
            ),
            "val": IndexedImages(train, parts["val"], [labels["train"][i] for i in parts["val"]], channels),
            "test": IndexedImages(test, list(range(len(test))), labels["test"], channels),
        }


def class_folders(folder: Path) -> list[str]:
    classes = sorted(d.name for d in folder.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not classes:
        raise ValueError(
            f"{folder} has no class folders; data.kind=images expects <data.path>/<class>/<image files>"
        )
    return classes


def image_files(folder: Path, classes: list[str]) -> list[tuple[Path, int]]:
    """(file, class id) of the images in ``folder``/<class>/; each file's header is checked now, so an
    unreadable one is named here rather than failing in a loader worker.
    """
    from PIL import Image, UnidentifiedImageError

    extra = sorted(
        d.name
        for d in folder.iterdir()
        if d.is_dir() and not d.name.startswith(".") and d.name not in classes
    )
    if extra:
        raise ValueError(
            f"{folder} has class folders that training lacks: {', '.join(extra)}; training classes: "
            f"{', '.join(classes)}"
        )
    items = []
    for label, name in enumerate(classes):
        for file in sorted((folder / name).glob("*")) if (folder / name).is_dir() else []:
            if file.suffix.lower() not in IMAGE_SUFFIXES:
                continue
            try:
                with Image.open(file):
                    pass
            except (UnidentifiedImageError, OSError) as err:
                raise ValueError(f"{file} is not a readable image ({type(err).__name__})") from None
            items.append((file, label))
    if not items:
        raise ValueError(f"{folder} holds no images ({', '.join(IMAGE_SUFFIXES)}) in its class folders")
    return items


def import_torchvision():
    try:
        import torchvision
    except ImportError:
        raise ImportError(
            "data.torchvision needs torchvision, which attnlab keeps optional: pip install 'attnlab[vision]' "
            "(choose a torchvision build matching your torch), or use data.hf_name / data.path instead"
        ) from None
    return torchvision


def torchvision_split(cls: type, root: str, split: str) -> Any:
    """Most torchvision datasets take ``train=``; some (SVHN, ...) take ``split=``."""
    try:
        return cls(root, train=split == "train", download=True)
    except TypeError:
        return cls(root, split=split, download=True)


def dataset_labels(dataset: Any) -> list[int]:
    targets = getattr(dataset, "targets", None)
    if targets is None:
        targets = getattr(dataset, "labels", None)
    if targets is None:
        targets = [dataset[i][1] for i in range(len(dataset))]
    return [int(t) for t in targets]
