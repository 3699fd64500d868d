"""Training runs in one process taking turns step by step: the step-cost section's measurement.

On a small shared machine the speed of one program drifts by 30-40% within a few hundred steps (a
bare ``pl.Trainer`` timed every 100 steps of one run: 2.7 to 4.7 ms a step), so runs timed one
after another, even in alternating order, compare different moments of the machine more than
different programs. Here the contenders run at once, each in its own thread, and a ``Relay`` lets
one of them run at a time, one training step each in a fixed order: a drift of the machine then
slows each of them alike, step for step.

A contender calls ``Relay.step(name, steps_done)`` at the start of each training step; that ends its
turn (timing the step it just ran, if in the window ``first <= step < last``) and waits for its next
one. At ``last`` it leaves the relay and finishes its run unpaced. A turn's wall time holds all a
step costs its own thread (data, hooks, logging, checkpoint snapshots); work a contender hands to
background threads (attnlab's checkpoint writer and wandb's sender) runs on the machine's other core.
The CPU clock is the contender's thread's (``time.thread_time``): it leaves that background work out.
The contenders run one torch thread each (``benchmarks.step_cost.rounds`` sets it): with more, each Python
thread would have its own OpenMP team, whose workers spin on the cores while another team computes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytorch_lightning as pl

TIMEOUT_S = 600.0  # a contender waiting this long for its turn means another one hangs


class Relay:
    """Turns of one training step each, for ``names`` in that order (see the module's docstring);
    ``times[name]`` is ``{"steps", "wall", "cpu"}`` summed over the name's steps ``first`` to ``last - 1``."""

    def __init__(self, names: Sequence[str], first: int, last: int) -> None:
        if not 0 <= first < last:
            raise ValueError(f"the window needs 0 <= first < last, got first={first}, last={last}")
        self.order, self.first, self.last = list(names), first, last
        self.active = set(self.order)
        self.turn: str | None = None  # whose turn it is; None: the first to arrive takes it
        self.running: str | None = None  # who took the turn and runs its step now
        self.clock: tuple[float, float] | None = None  # the clocks when a timed step started
        self.times = {name: {"steps": 0, "wall": 0.0, "cpu": 0.0} for name in self.order}
        self.lock = threading.Condition()

    def step(self, name: str, steps_done: int) -> None:
        """``name`` starts a training step, ``steps_done`` steps into its run: its turn ends here and,
        unless its window is over, the next one begins when the others have run a step each."""
        with self.lock:
            if name not in self.active:
                return
            if self.running == name:
                self._end_turn(name)
            if steps_done >= self.last:
                self._leave(name)
                return
            if not self.lock.wait_for(lambda: self.turn in (None, name), timeout=TIMEOUT_S):
                raise TimeoutError(f"{name} waited {TIMEOUT_S:.0f} s for its turn (held by {self.turn})")
            self.turn = self.running = name
            in_window = self.first <= steps_done < self.last
            self.clock = (time.perf_counter(), time.thread_time()) if in_window else None

    def leave(self, name: str) -> None:
        """``name`` runs no more steps (its run ended, or failed): the others go on without it."""
        with self.lock:
            if name in self.active:
                self._leave(name)

    def _end_turn(self, name: str) -> None:
        if self.clock is not None:
            wall, cpu = time.perf_counter() - self.clock[0], time.thread_time() - self.clock[1]
            spent = self.times[name]
            spent["steps"], spent["wall"], spent["cpu"] = (
                spent["steps"] + 1,
                spent["wall"] + wall,
                spent["cpu"] + cpu,
            )
        self.clock, self.running = None, None
        self._pass_on(name)

    def _leave(self, name: str) -> None:
        if self.running == name:  # it stopped during its step: that step is not counted
            self.clock, self.running = None, None
        if self.turn == name:
            self._pass_on(name)
        self.active.discard(name)
        if self.turn == name:  # it was the last one
            self.turn = None

    def _pass_on(self, name: str) -> None:
        at = self.order.index(name)
        after = self.order[at + 1 :] + self.order[: at + 1]
        self.turn = next((n for n in after if n in self.active and n != name), name)
        self.lock.notify_all()


RELAY: Relay | None = None  # the relay of this process's round: RelayCallback finds it here


class RelayCallback(pl.Callback):
    """Takes part in this process's ``RELAY`` as ``name``: a turn per training batch (Lightning's
    ``global_step`` counts the steps done); ``attnlab-train`` gets it as
    ``+callbacks.relay={_target_: benchmarks.step_cost.relay.RelayCallback, name: ...}``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        if RELAY is not None:
            RELAY.step(self.name, trainer.global_step)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if RELAY is not None:
            RELAY.leave(self.name)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, err: BaseException) -> None:
        if RELAY is not None:
            RELAY.leave(self.name)
