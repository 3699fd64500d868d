"""nanoGPT-style progress lines, for logs and for consoles that are not terminals.

    step 100/300 | loss 2.0312 | lr 9.80e-04 | grad_norm 0.412 | tokens/s 9650 | elapsed 0:00:41
    step 100/300 | val/bpb 3.016 | val/loss 2.0941 | val/ppl 8.118 | elapsed 0:00:43

One line every ``trainer.log_every_n_steps`` optimizer steps (and at the last step), one after each
validation. They always go to the run's log files (``train.log``); to the console too when it is
not a terminal (a job's output file, a pipe), where no progress bar is drawn (``console_is_terminal``).
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

import pytorch_lightning as pl
from rich.console import Console

log = logging.getLogger("attnlab.progress")
# (logged name, shown name, format) of the values a training line shows, when they were logged.
TRAIN_VALUES = (
    ("train/loss", "loss", "{:.4f}"),
    ("lr", "lr", "{:.2e}"),
    ("train/grad_norm", "grad_norm", "{:.3g}"),
    ("train/tokens_per_s", "tokens/s", "{:.0f}"),
    ("train/samples_per_s", "samples/s", "{:.1f}"),
)


def console_is_terminal() -> bool:
    """Whether the console is a terminal (rich's test: stdout is a TTY, or FORCE_COLOR/TTY_* say so)."""
    return Console().is_terminal


def elapsed_text(seconds: float) -> str:
    return str(timedelta(seconds=int(seconds)))


class ProgressLines(pl.Callback):
    """Writes a line per logging step and per validation (rank 0 only): to the log files always, to
    stdout when ``to_console`` (default: when the console is not a terminal)."""

    def __init__(self, to_console: bool | None = None) -> None:
        super().__init__()
        self.to_console = (not console_is_terminal()) if to_console is None else to_console
        self.start = time.monotonic()
        self.last_step = -1

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.start = time.monotonic()
        self.last_step = trainer.global_step

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        step, every = trainer.global_step, max(trainer.log_every_n_steps, 1)
        if step == self.last_step or not (step % every == 0 or step == trainer.max_steps):
            return  # mid-accumulation, or not a logging step
        self.last_step = step
        metrics = trainer.callback_metrics
        parts = [
            f"{name} {fmt.format(float(metrics[key]))}" for key, name, fmt in TRAIN_VALUES if key in metrics
        ]
        if "train/mfu" in metrics:
            parts.append(f"mfu {100 * float(metrics['train/mfu']):.1f}%")
        self.write(trainer, parts)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        metrics = trainer.callback_metrics
        self.write(
            trainer, [f"{k} {float(v):.4g}" for k, v in sorted(metrics.items()) if k.startswith("val/")]
        )

    def write(self, trainer: pl.Trainer, parts: list[str]) -> None:
        if not trainer.is_global_zero:
            return
        total = trainer.max_steps if trainer.max_steps > 0 else trainer.estimated_stepping_batches
        elapsed = elapsed_text(time.monotonic() - self.start)
        line = " | ".join([f"step {trainer.global_step}/{total}", *parts, f"elapsed {elapsed}"])
        record = log.makeRecord(log.name, logging.INFO, __file__, 0, line, None, None)
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.FileHandler):
                handler.handle(record)
        if self.to_console:
            print(line, flush=True)
