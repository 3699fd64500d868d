"""A callback that fails a run on purpose after some optimizer steps (used through ``callbacks=[...]``)."""

from __future__ import annotations

import os

import pytorch_lightning as pl


class FailAtStep(pl.Callback):
    """Fail once ``step`` optimizer steps are done; with ``seed``, only in the run of that seed (so that
    one job of a sweep fails while its config stays that of its seed's siblings)."""

    def __init__(self, step: int, seed: int | None = None) -> None:
        self.step = step
        self.seed = seed

    def on_train_batch_end(self, trainer: pl.Trainer, *args: object) -> None:
        chosen = self.seed is None or os.environ.get("PL_GLOBAL_SEED") == str(self.seed)
        if chosen and trainer.global_step >= self.step:
            raise RuntimeError(f"deliberate failure at step {trainer.global_step}")
