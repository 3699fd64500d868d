"""One signal policy for every command: SIGINT (Ctrl-C), SIGTERM (a scheduler's pre-emption), SIGHUP (the
terminal closed) and SIGUSR1 (SLURM's warning before a requeue) end it promptly in any phase, with
``RunInterrupted``: one line, no traceback, the exit status a shell gives a process ended by the signal
(130, 143, 129, 138). The commands other than training end at once (``interrupted``).

``attnlab-train`` installs the handlers first thing. While the training loop runs (``defer``, from the
first step to the final checkpoint), a signal is only noted: the loop stops at the end of the current
optimizer step, once ``last.ckpt`` holds it (``callbacks.LastCheckpoint``), so that the resume
continues exactly. In every other phase (start-up, test, sampling) no training state is unsaved, and
the handler raises ``RunInterrupted`` at once. A second signal while the loop is deferred raises at
once too (a run that must stop now); one more while the run is already stopping ends the process at
once, with the same exit status and no traceback.

Torch-free: the commands import it before anything heavy.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

REQUEUE_SIGNAL = signal.SIGUSR1  # Lightning's default requeue signal: sbatch --signal=USR1@120
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, REQUEUE_SIGNAL)


class RunInterrupted(BaseException):
    """The run stopped on signal ``signum`` during ``phase``; ``path``: the checkpoint that holds optimizer
    step ``step`` (None when nothing was saved because of the signal). A BaseException, so that no
    ``except Exception`` on the way up mistakes it for a failure."""

    def __init__(self, signum: int, phase: str, step: int | None = None, path: Path | None = None) -> None:
        self.signum, self.phase, self.step, self.path = signum, phase, step, path
        name = signal.Signals(signum).name
        if path is None:
            super().__init__(f"{name} during {phase}")
        else:
            super().__init__(f"{name} at step {step} during {phase}: saved {path}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # what a shell reports for a process ended by the signal: 130, 143, 129, 138


class SignalPolicy:
    """The process's handlers of ``SIGNALS``, and the phase the run is in (``phase``: start-up, fit,
    validation, test, sampling), which the commands set as they go and the messages name."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """A new run starts (the next job of a multirun): in start-up, nothing received."""
        self.phase = "start-up"
        self.deferred = False
        self.received: int | None = None  # the first signal noted while deferred
        self.stopping = False  # RunInterrupted was raised by a handler: the run is on its way out
        self.raised: RunInterrupted | None = None  # what the handler raised (a library may swallow it)

    def install(self) -> dict[int, Any]:
        """Handle ``SIGNALS`` from now on (in the main thread only, where Python runs handlers); returns
        the handlers replaced, for ``uninstall``."""
        replaced = {}
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                replaced[signum] = signal.signal(signum, self.handle)
        return replaced

    @staticmethod
    def uninstall(replaced: dict[int, Any]) -> None:
        """Put back the handlers ``install`` replaced (a process that runs commands in turn, the tests')."""
        for signum, handler in replaced.items():
            signal.signal(signum, handler)

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:  # already stopping, and asked again: now
            os._exit(128 + signum)
        if self.deferred and self.received is None:
            self.received = signum
            return
        self.stopping = True
        self.raised = RunInterrupted(self.received or signum, self.phase)
        raise self.raised

    def defer(self, phase: str = "fit") -> None:
        """From now on a signal is noted, for the training loop to stop at the end of its step."""
        self.phase, self.deferred = phase, True

    def end_deferral(self, step: int | None = None, path: Path | None = None) -> None:
        """Signals raise at once again; RunInterrupted now if one was noted (``path`` holds ``step``)."""
        self.deferred = False
        if self.received is not None:
            self.stopping = True
            raise RunInterrupted(self.received, self.phase, step, path)


policy = SignalPolicy()  # the one of this process


@contextmanager
def interrupted_in_one_line(command: str) -> Iterator[None]:
    """A command other than training (``command``: its name, the phase its message names): the policy's
    handlers from here on, and a signal ends it with one line and the signal's exit status."""
    policy.reset()  # a command starts with no signal received (a process that runs commands in turn)
    replaced = policy.install()
    policy.phase = command
    try:
        yield
    except RunInterrupted as stop:
        print(f"interrupted by {stop}", file=sys.stderr)
        sys.exit(stop.exit_code)
    finally:
        policy.uninstall(replaced)
