"""Where images come from: scikit-learn's digits, a folder of class folders, Hugging Face image datasets,
and torchvision datasets (the optional ``vision`` extra).

A source's ``load(i)`` gives image i as a (C, H, W) float tensor in [0, 1] at its stored size, with
``channels`` channels (1 grey, 3 RGB); ``labels`` holds the class ids. The files of an image folder
are decoded once when the data set is built (``scan_folder``): a truncated or unreadable image is
named then, not in the middle of training, and the same pass measures what the data module infers
when it is not given: the channels, the typical size and the mean/std of the training images.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from attnlab.data.checks import images_in

GREY_BANDS = {("L",), ("L", "A"), ("1",), ("I",), ("F",), ("I;16",)}


def pil_to_tensor(image: Any, channels: int) -> Tensor:
    """A PIL image as a (C, H, W) float tensor in [0, 1], converted to grey or RGB."""
    array = np.asarray(image.convert("L" if channels == 1 else "RGB"), dtype=np.float32) / 255.0
    tensor = torch.from_numpy(array.copy())
    return tensor.unsqueeze(0) if channels == 1 else tensor.permute(2, 0, 1)


def is_grey(image: Any) -> bool:
    return image.getbands() in GREY_BANDS


class TensorImages:
    """Images already in memory, e.g. the digits."""

    def __init__(self, images: Tensor, labels: list[int]) -> None:
        self.images, self.labels, self.channels = images, labels, images.shape[1]

    def load(self, index: int) -> Tensor:
        return self.images[index]


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

    def image(self, index: int) -> Any:
        return self.dataset[index][self.column]

    def load(self, index: int) -> Tensor:
        return pil_to_tensor(self.image(index), self.channels)


class IndexedImages:
    """A subset of a dataset that returns (PIL image, label) pairs, e.g. a torchvision dataset."""

    def __init__(self, dataset: Any, indices: list[int], labels: list[int], channels: int) -> None:
        self.dataset, self.indices, self.labels, self.channels = dataset, indices, labels, channels

    def image(self, index: int) -> Any:
        return self.dataset[self.indices[index]][0]

    def load(self, index: int) -> Tensor:
        return pil_to_tensor(self.image(index), self.channels)


# -- an image folder, decoded once ---------------------------------------------------------------


@dataclass
class Scan:
    """What one pass over image files found: whether all are grey, their sizes, and the running
    per-channel sums of their RGB pixels (for the mean and std)."""

    grey: bool = True
    sizes: list[tuple[int, int]] = field(default_factory=list)
    sums: np.ndarray = field(default_factory=lambda: np.zeros((2, 3)))
    pixels: int = 0

    def add(self, image: Any) -> None:
        self.grey &= is_grey(image)
        self.sizes.append(image.size)
        rgb = np.asarray(image.convert("RGB"), dtype=np.float64).reshape(-1, 3) / 255.0
        self.sums += np.stack([rgb.sum(0), (rgb**2).sum(0)])
        self.pixels += len(rgb)

    def typical_size(self) -> tuple[int, int]:
        """The median width and height."""
        return int(statistics.median(w for w, _ in self.sizes)), int(
            statistics.median(h for _, h in self.sizes)
        )

    def mean_std(self, channels: int) -> tuple[Tensor, Tensor]:
        """Per-channel mean and std of the scanned pixels; for grey (1 channel), over all of them as luma
        would be (the three RGB channels of grey images are equal)."""
        mean = self.sums[0] / self.pixels
        std = np.sqrt(np.maximum(self.sums[1] / self.pixels - mean**2, 1e-12))
        if channels == 1:
            mean, std = mean[:1], std[:1]
        return torch.tensor(mean, dtype=torch.float32), torch.tensor(std, dtype=torch.float32)


def scan_folder(files: list[Path], scan: Scan | None = None) -> Scan | None:
    """Decode every file (naming the first one PIL cannot read in full); with ``scan``, also measure them."""
    from PIL import Image, UnidentifiedImageError

    for file in files:
        try:
            with Image.open(file) as image:
                image.load()
                if scan is not None:
                    scan.add(image)
        except (UnidentifiedImageError, OSError, SyntaxError) as err:
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise ValueError(f"{file} is not a readable image ({reason})") from None
    return scan


def folder_images(folder: Path, classes: list[str]) -> list[tuple[Path, int]]:
    """(file, class id) of the images in ``folder``/<class>/, in class order, then file name order."""
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
    items = [(file, label) for label, name in enumerate(classes) for file in images_in(folder / name)]
    if not items:
        raise ValueError(f"{folder} holds no images in its class folders")
    return items


def sample_indices(n: int, at_most: int) -> list[int]:
    """Up to ``at_most`` evenly spaced indices of ``n`` items (for statistics of large data sets)."""
    return sorted({int(i) for i in np.linspace(0, n - 1, min(n, at_most))})
