"""Image files outside a data set (an image to classify or explain), read as the data modules read images."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from attnlab.data.image_sources import pil_to_tensor
from attnlab.data.images import match_channels, resize


def load_images(
    paths: Sequence[str | Path],
    *,
    image_size: int,
    channels: int,
    mean: Sequence[float] | Tensor | None = None,
    std: Sequence[float] | Tensor | None = None,
) -> Tensor:
    """Image files as a batch (B, channels, image_size, image_size), read as the data modules read images.

    Each file becomes grey or RGB, values in [0, 1], bilinear-resized as in ``attnlab.data.images``; with
    ``mean``/``std`` (one value, or one per channel: the training run's) it is normalised too.
    """
    from PIL import Image, UnidentifiedImageError

    batch = []
    for path in paths:
        if not Path(path).is_file():
            raise FileNotFoundError(f"image file {str(path)!r} does not exist")
        try:
            with Image.open(path) as image:
                tensor = pil_to_tensor(image, channels)
        except UnidentifiedImageError:
            raise ValueError(f"{str(path)!r} is not an image file PIL can read") from None
        batch.append(resize(match_channels(tensor, channels), image_size))
    images = torch.stack(batch)
    if mean is None and std is None:
        return images
    mean, std = torch.as_tensor(mean, dtype=torch.float32), torch.as_tensor(std, dtype=torch.float32)
    if mean.numel() not in (1, channels) or std.numel() not in (1, channels):
        raise ValueError(
            f"mean and std need 1 or {channels} values (one per channel), got {mean.numel()} and {std.numel()}"
        )
    return (images - mean.view(1, -1, 1, 1)) / std.view(1, -1, 1, 1)
