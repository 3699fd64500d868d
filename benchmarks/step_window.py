"""The CPU and wall time a training run spends between two of its steps, recorded from inside the run.

The step-cost section (``benchmarks.step_cost``) times the steps between ``first`` and ``last`` of one
run: the interpreter's start, imports, config, data, the first steps (allocations, warm-up) and the end
of the run (validation, test, sample) all lie outside the window, so none of their noise enters the
figure, as it did when two whole runs of different lengths were subtracted. ``StepWindow`` is the
callback for ``attnlab-train`` (``+callbacks.step_window={_target_: benchmarks.step_window.StepWindow,
...}``) and the bare Trainer; the plain loop calls ``WindowClock.at_step`` itself.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl


class WindowClock:
    """Reads the clocks when step ``first`` starts and when step ``last`` starts, then writes
    ``{"steps": last - first, "wall": seconds, "cpu": seconds}`` to ``out`` (CPU: this process, all
    its threads)."""

    def __init__(self, first: int, last: int, out: str) -> None:
        if not 0 <= first < last:
            raise ValueError(f"the window needs 0 <= first < last, got first={first}, last={last}")
        self.first, self.last, self.out = first, last, Path(out)
        self.start: tuple[float, float] | None = None

    def at_step(self, step: int) -> None:
        """Call at the start of every step with the number of steps done so far."""
        if step == self.first:
            self.start = (time.perf_counter(), time.process_time())
        elif step == self.last and self.start is not None:
            wall, cpu = time.perf_counter() - self.start[0], time.process_time() - self.start[1]
            self.out.write_text(json.dumps({"steps": self.last - self.first, "wall": wall, "cpu": cpu}))


class StepWindow(pl.Callback):
    """``WindowClock`` at the start of each training batch (Lightning's ``global_step`` then counts the
    steps done)."""

    def __init__(self, first: int, last: int, out: str) -> None:
        self.clock = WindowClock(first, last, out)

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        self.clock.at_step(trainer.global_step)
