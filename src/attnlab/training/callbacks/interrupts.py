"""The training loop's side of the run's signal policy (``training.signals``): SIGINT (Ctrl-C), SIGTERM (a
scheduler's pre-emption) or SIGUSR1 (SLURM's warning before a requeue, ``training.slurm``) stop it at a
step a resume continues exactly.

While the loop runs, the handlers only note the signal; the loop stops at the end of the current
optimizer step (after its validation, if it validates), once ``last.ckpt`` holds that step
(``LastCheckpoint``). A second signal interrupts at once, for a run that must stop now.
"""

from __future__ import annotations

import pytorch_lightning as pl

from attnlab.training.signals import SIGNALS, RunInterrupted, policy

__all__ = ["SIGNALS", "RunInterrupted", "StopSignals"]


class StopSignals:
    """The policy's signals deferred while the loop runs; ``requested`` asks every rank."""

    @property
    def received(self) -> int | None:
        return policy.received

    def install(self) -> None:
        """From the first step on, a signal stops the loop at the end of its step."""
        policy.install()  # a rank that Lightning launched, or a test that fits in its own process
        policy.defer("fit")

    def restore(self) -> None:
        """The loop failed: signals interrupt at once again."""
        policy.deferred = False

    def stopping(self) -> None:
        """The step is saved and the run is on its way out: one more signal ends the process at once."""
        policy.deferred, policy.stopping = False, True

    def requested(self, trainer: pl.Trainer) -> bool:
        """Whether any rank received a signal (one collective per call under DDP, none alone)."""
        stop = policy.received is not None
        if trainer.world_size > 1:
            stop = trainer.strategy.reduce_boolean_decision(stop, all=False)
        return stop
