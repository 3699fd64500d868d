"""The data kinds of images: scikit-learn's bundled digits, and labelled images from a folder, a Hugging
Face dataset or torchvision; ``ImageData`` holds their sizes, augmentation and normalisation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from attnlab.schema.data import DATA, CarvedData, DataKind, SourcedData
from attnlab.schema.errors import ConfigError, not_negative, positive, show


@dataclass
class ImageData(CarvedData):
    image_size: int | None = None  # None: the model's image_size
    augment: bool = False  # random crop with padding (+ horizontal flip) on training images
    crop_padding: int = 4
    hflip: bool = True
    mean: list[float] = field(default_factory=list)  # empty: the digits' own statistics, else 0.5
    std: list[float] = field(default_factory=list)

    def check(self) -> None:
        super().check()
        positive("data.image_size", self.image_size, allow_none=True)
        not_negative("data.crop_padding", self.crop_padding)
        if len(self.mean) != len(self.std) or len(self.mean) not in (0, 1, 3):
            raise ConfigError(
                "data.mean",
                self.mean,
                f"with data.std={show(self.std)}: give both with 1 or 3 values, or leave both empty",
            )
        if any(s <= 0 for s in self.std):
            raise ConfigError("data.std", self.std, "must be positive")


@DATA.register
@dataclass
class DigitsData(ImageData):
    """scikit-learn's bundled 8x8 handwritten digits (1797 images, no download)."""

    kind: DataKind = DataKind.digits
    module: ClassVar[str] = "attnlab.data.images:ImageDataModule"
    batch_size: int = 64
    val_fraction: float = 0.1
    test_fraction: float = 0.1


@DATA.register
@dataclass
class ImagesData(ImageData, SourcedData):
    """Labelled images: a folder of class folders, a Hugging Face dataset, or a torchvision dataset."""

    kind: DataKind = DataKind.images
    module: ClassVar[str] = "attnlab.data.images:ImageDataModule"
    batch_size: int = 64
    val_fraction: float = 0.1
    test_fraction: float = 0.1
    augment: bool = True
    image_column: str = "image"  # of a Hugging Face dataset
    label_column: str = "label"
    torchvision: str | None = None  # a torchvision.datasets class name, e.g. "CIFAR10" (vision extra)

    source_fields: ClassVar[tuple[str, ...]] = ("path", "hf_name", "torchvision")
    needs: ClassVar[str | None] = "data.path (a folder of class folders), data.hf_name or data.torchvision"
