"""A Lightning callback that logs attention heat maps during validation every N epochs.

At the first validation batch of a due epoch it runs the model once more on the first example
(with the explicit attention path) and logs one image per selected layer: ``wandb.Image`` through
the WandbLogger, ``add_image`` through the TensorBoardLogger. Without either, it writes PNGs into
``save_dir`` if one is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
from pytorch_lightning.loggers import Logger, TensorBoardLogger, WandbLogger
from torch import Tensor

from attnlab.explain.attention import attention_maps, map_label, select_layers

SEQUENCE_KEYS = ("input_ids", "attention_mask", "token_type_ids", "src_ids", "src_mask", "tgt_in", "tgt_mask")


def first_example(batch: dict[str, Any], max_tokens: int) -> dict[str, Tensor]:
    """The batch's first example, its sequences cut to ``max_tokens`` so the picture stays legible."""
    example = {k: v[:1] for k, v in batch.items() if isinstance(v, Tensor)}
    for key in SEQUENCE_KEYS:
        if key in example:
            example[key] = example[key][:, :max_tokens]
    example.pop("labels", None)
    return example


def log_images(loggers: Sequence[Logger], images: dict[str, np.ndarray], step: int) -> int:
    """Send (H, W, 3) uint8 images to every logger that takes images; returns how many loggers did."""
    used = 0
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            for key, image in images.items():
                logger.log_image(key=key, images=[image], step=step)
            used += 1
        elif isinstance(logger, TensorBoardLogger):
            for key, image in images.items():
                logger.experiment.add_image(key, image, step, dataformats="HWC")
            used += 1
    return used


class AttentionMapLogger(pl.Callback):
    """Log attention heat maps of ``layers`` (default first and last) every ``every_n_epochs`` epochs."""

    def __init__(
        self,
        every_n_epochs: int,
        layers: Sequence[int] = (0, -1),
        max_tokens: int = 48,
        save_dir: str | Path | None = None,
    ) -> None:
        if every_n_epochs < 1:
            raise ValueError(
                f"task.log_attention_every_n_epochs={every_n_epochs}: must be >= 1 to log (0 turns it off)"
            )
        self.every_n_epochs = every_n_epochs
        self.layers = tuple(layers)
        self.max_tokens = max_tokens
        self.save_dir = Path(save_dir) if save_dir is not None else None
        self.logged_epoch = -1  # validation may run several times an epoch; log at its first run only

    def due(self, trainer: pl.Trainer) -> bool:
        epoch = trainer.current_epoch
        return (
            not trainer.sanity_checking
            and (epoch + 1) % self.every_n_epochs == 0
            and epoch != self.logged_epoch
        )

    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if batch_idx != 0 or dataloader_idx != 0 or not self.due(trainer) or not trainer.is_global_zero:
            return
        self.logged_epoch = trainer.current_epoch
        images = self.render(pl_module.model, first_example(batch, self.max_tokens), trainer.current_epoch)
        if not log_images(trainer.loggers, images, trainer.global_step) and self.save_dir is not None:
            self.save(images, trainer.current_epoch)

    def save(self, images: dict[str, np.ndarray], epoch: int) -> None:
        from PIL import Image

        self.save_dir.mkdir(parents=True, exist_ok=True)
        for key, image in images.items():
            Image.fromarray(image).save(self.save_dir / f"{key.replace('/', '_')}_epoch{epoch}.png")

    def render(self, model: Any, example: dict[str, Tensor], epoch: int) -> dict[str, np.ndarray]:
        """One image per selected attention module, keyed ``attention/<layer label>``."""
        from attnlab.explain.plots import attention_figure, figure_to_array  # matplotlib: only when drawing

        maps = attention_maps(model, example)
        images = {}
        for name in select_layers(list(maps), self.layers):
            label = map_label(name)
            fig = attention_figure(maps[name][0], title=f"{label} (epoch {epoch})")
            images[f"attention/{label.replace(' ', '_')}"] = figure_to_array(fig)
        return images
