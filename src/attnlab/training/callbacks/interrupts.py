"""Stopping on SIGINT (Ctrl-C), SIGTERM (a scheduler's pre-emption) or SIGUSR1 (SLURM's warning before a
requeue, ``training.slurm``) at a step a resume continues exactly.

The handlers only note the signal; the training loop stops at the end of the current optimizer step
(after its validation, if it validates), once ``last.ckpt`` holds that step (``LastCheckpoint``). A
second signal interrupts at once (KeyboardInterrupt), for a run that must stop now.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType

import pytorch_lightning as pl

from attnlab.training.slurm import REQUEUE_SIGNAL

SIGNALS = (signal.SIGINT, signal.SIGTERM, REQUEUE_SIGNAL)


class RunInterrupted(BaseException):
    """The run stopped on a signal after saving ``path`` at optimizer step ``step``. A BaseException, so
    that no ``except Exception`` on the way up mistakes it for a failure."""

    def __init__(self, signum: int, step: int, path: Path) -> None:
        self.signum, self.step, self.path = signum, step, path
        super().__init__(f"{signal.Signals(signum).name} at step {step}: saved {path}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # what a shell reports for a process ended by the signal: 130, 143, 138


class StopSignals:
    """SIGINT and SIGTERM handlers that note the first signal; ``requested`` asks every rank."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.previous: dict[int, object] = {}

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self.handle) for s in SIGNALS}

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous = {}

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:
            self.restore()
            raise KeyboardInterrupt
        self.received = signum

    def requested(self, trainer: pl.Trainer) -> bool:
        """Whether any rank received a signal (one collective per call under DDP, none alone)."""
        stop = self.received is not None
        if trainer.world_size > 1:
            stop = trainer.strategy.reduce_boolean_decision(stop, all=False)
        return stop
