"""A callback that fails a run on purpose after some optimizer steps (used through ``callbacks=[...]``)."""

from __future__ import annotations

import pytorch_lightning as pl


class FailAtStep(pl.Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: pl.Trainer, *args: object) -> None:
        if trainer.global_step >= self.step:
            raise RuntimeError(f"deliberate failure at step {trainer.global_step}")
