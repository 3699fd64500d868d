"""Images for the ViT: scikit-learn's digits (offline default), a folder of class folders, Hugging
Face image datasets, and torchvision datasets when the optional ``vision`` extra is installed.

Every image is brought to the model: its channels (grey <-> RGB), ``model.image_size`` (bilinear
resize), then optional augmentation (random crop with zero padding, horizontal flip; seeded by
(seed, epoch, index)) and normalisation by ``data.mean``/``data.std``. What is not given is taken
from the data: ``model.channels=0`` becomes 1 when every training image is grey, else 3; an empty
``data.mean`` becomes the training images' own per-channel mean and std. A resize that would shrink
the images by more than 2x is refused, naming the sizes to set. Batches hold ``pixel_values``
(B, C, H, W) float and ``labels`` (B,).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import Dataset

from attnlab.data.checks import check_columns, check_shrink, class_folders, existing, image_split_folders
from attnlab.data.classification import label_ids
from attnlab.data.image_sources import (
    FileImages,
    HFImages,
    IndexedImages,
    Scan,
    TensorImages,
    folder_images,
    sample_indices,
    scan_folder,
)
from attnlab.data.module import AttnlabDataModule
from attnlab.data.sampling import Key, split_key, torch_generator
from attnlab.data.sources import carve_indices, complete_splits, hf_splits

GREY_WEIGHTS = torch.tensor([0.299, 0.587, 0.114]).view(3, 1, 1)  # ITU-R BT.601 luma
STATS_IMAGES = 1000  # HF and torchvision sets: the mean/std of this many training images


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


class ImageDataModule(AttnlabDataModule):
    """``data.kind=digits`` or ``data.kind=images`` (``data.path``, ``data.hf_name`` or ``data.torchvision``)."""

    channels = 0  # after setup: the channels of the model's input (model.channels, or inferred)

    def build(self) -> dict[str, Dataset]:
        cfg = self.cfg
        self.channels = self.model_cfg.channels
        if cfg.kind == "digits":
            sources, stats = self.digits(), None
        elif cfg.torchvision:
            sources, stats = self.sampled(self.torchvision_sources())
        elif cfg.hf_name:
            sources, stats = self.sampled(self.hf_sources())
        else:
            sources, stats = self.folder_sources()
        mean, std = self.normalisation(sources["train"], stats)
        return {
            split: ImageDataset(
                source,
                size=self.model_cfg.image_size,
                channels=self.channels,
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
        if self.channels not in (1, 3):
            raise ValueError(
                f"model.channels={self.channels}: images are loaded as grey (1) or RGB (3), or 0 to take "
                "them from the data"
            )
        super().check_model()

    def normalisation(self, train: Any, stats: tuple[Tensor, Tensor] | None) -> tuple[Tensor, Tensor]:
        """``data.mean``/``data.std`` when given; else the digits' one statistic at the model's size, or
        the training images' per-channel mean and std."""
        if self.cfg.mean:
            mean, std = torch.tensor(self.cfg.mean), torch.tensor(self.cfg.std)
        elif isinstance(
            train, TensorImages
        ):  # grey digits at the model's size: one statistic for all channels
            images = resize(train.images, self.model_cfg.image_size)
            mean, std = images.mean().reshape(1), images.std().reshape(1)
        else:
            mean, std = stats
        if len(mean) not in (1, self.channels):
            raise ValueError(
                f"data.mean={list(self.cfg.mean)} has {len(mean)} values for {self.channels}-channel images "
                "(model.channels); give 1 or one per channel, or leave data.mean and data.std empty to "
                "measure them on the training images"
            )
        return mean.float().view(-1, 1, 1), std.float().view(-1, 1, 1)

    def digits(self) -> dict[str, TensorImages]:
        """scikit-learn's 1797 8x8 handwritten digits (values 0-16, scaled to [0, 1])."""
        from sklearn.datasets import load_digits

        bunch = load_digits()
        images = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
        labels = [int(y) for y in bunch.target]
        self.num_classes, self.channels = 10, self.channels or 1
        parts = carve_indices(
            len(labels), self.cfg.val_fraction, self.cfg.test_fraction, self.seed, shuffle=True
        )
        return {split: TensorImages(images[idx], [labels[i] for i in idx]) for split, idx in parts.items()}

    def folder_sources(self) -> tuple[dict[str, FileImages], tuple[Tensor, Tensor]]:
        """``data.path``/<class>/<image>, or ``data.path``/{train,val,test}/<class>/<image>; every file is
        decoded once here, and the training images measured."""
        root = existing(self.cfg.path)
        if not root.is_dir():
            raise ValueError(
                f"data.path={self.cfg.path!r} is a file; data.kind=images needs a folder of class folders"
            )
        split_dirs = image_split_folders(root)
        classes = class_folders(split_dirs["train"])
        self.label_names, self.num_classes = classes, len(classes)
        found = {split: folder_images(folder, classes) for split, folder in split_dirs.items()}
        scan = scan_folder([f for f, _ in found["train"]], Scan())
        for split in set(found) - {"train"}:
            scan_folder([f for f, _ in found[split]])
        width, height = scan.typical_size()
        check_shrink(width, height, found["train"][0][0], self.model_cfg)
        self.channels = self.channels or (1 if scan.grey else 3)
        found = complete_splits(
            found, self.cfg, self.seed, shuffle=True, take=lambda fl, idx: [fl[i] for i in idx]
        )
        sources = {
            split: FileImages([f for f, _ in fl], [y for _, y in fl], self.channels)
            for split, fl in found.items()
        }
        return sources, scan.mean_std(self.channels)

    def sampled(self, sources: dict[str, Any]) -> tuple[dict[str, Any], tuple[Tensor, Tensor] | None]:
        """Channels and statistics of a large set, where not given, from a sample of its training images."""
        if self.channels and self.cfg.mean:
            return sources, None
        train = sources["train"]
        scan = Scan()
        for i in sample_indices(len(train.labels), STATS_IMAGES):
            scan.add(train.image(i))
        if not self.channels:
            self.channels = 1 if scan.grey else 3
            for source in sources.values():
                source.channels = self.channels
        return sources, scan.mean_std(self.channels)

    def hf_sources(self) -> dict[str, HFImages]:
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
        return {s: HFImages(ds, cfg.image_column, labels[s], self.channels) for s, ds in splits.items()}

    def torchvision_sources(self) -> dict[str, IndexedImages]:
        """A ``torchvision.datasets`` class, downloaded into ``data.cache_dir`` (default ./data_cache/torchvision)."""
        datasets = import_torchvision().datasets
        name = self.cfg.torchvision
        cls = getattr(datasets, name, None)
        if not isinstance(cls, type):
            raise ValueError(f"data.torchvision={name!r} is not a dataset class of torchvision.datasets")
        root = str(Path(self.cfg.cache_dir or "data_cache") / "torchvision")
        train, test = (torchvision_split(cls, root, split) for split in ("train", "test"))
        labels = {"train": dataset_labels(train), "test": dataset_labels(test)}
        names = list(getattr(train, "classes", []) or [])
        self.label_names = names or None
        self.num_classes = len(names) if names else max(max(ys) for ys in labels.values()) + 1
        parts = carve_indices(len(train), self.cfg.val_fraction, 0.0, self.seed, shuffle=True)
        return {
            "train": IndexedImages(
                train, parts["train"], [labels["train"][i] for i in parts["train"]], self.channels
            ),
            "val": IndexedImages(
                train, parts["val"], [labels["train"][i] for i in parts["val"]], self.channels
            ),
            "test": IndexedImages(test, list(range(len(test))), labels["test"], self.channels),
        }


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
