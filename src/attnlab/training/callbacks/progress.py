"""The progress bar of a run: optimizer steps over the whole run, with the whole run's ETA.

Lightning's bars count the batches of one epoch ("Epoch 3/-2", a bar that restarts every epoch and
counts micro-batches under gradient accumulation), while attnlab's runs are bounded by optimizer steps.
This bar is built on ``ProgressBar``, Lightning's documented base for custom bars, with public hooks
only; the metrics beside it are ``ProgressBar.get_metrics`` (those logged with ``prog_bar=True``).
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ProgressBar
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class StepProgressBar(ProgressBar):
    """``step 1308/2000 ━━━━━━━╸━━━ 0:03:10 < 0:01:32  train/loss=1.23 val/loss=1.41``: the optimizer step
    out of the run's total (``trainer.estimated_stepping_batches``: ``max_steps``, or the steps of
    ``max_epochs``), advanced once per optimizer step, resumed runs starting at their step."""

    def __init__(self, console: Console | None = None) -> None:
        super().__init__()
        self.enabled = True
        self.console = console
        self.progress: Progress | None = None
        self.task: TaskID | None = None
        self.shown: tuple[int, float] | None = None  # (step, total steps) last drawn

    def disable(self) -> None:
        self.enabled = False

    def enable(self) -> None:
        self.enabled = True

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.enabled or not trainer.is_global_zero:
            return
        self.progress = Progress(
            TextColumn("step"),
            MofNCompleteColumn(),
            BarColumn(),
            TimeElapsedColumn(),
            TextColumn("<"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[metrics]}"),
            console=self.console,
        )
        total = trainer.estimated_stepping_batches
        self.task = self.progress.add_task("train", total=total, completed=trainer.global_step, metrics="")
        self.progress.start()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        self.refresh(trainer, pl_module)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.refresh(trainer, pl_module)

    def refresh(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.progress is None or self.task is None:
            return
        metrics = self.get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        text = "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())
        self.progress.update(self.task, completed=trainer.global_step, metrics=text)
        self.shown = (trainer.global_step, trainer.estimated_stepping_batches)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.stop()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, err: BaseException) -> None:
        self.stop()

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
        self.progress = self.task = None
