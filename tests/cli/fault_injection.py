"""Callbacks that break a run on purpose (used through ``+callbacks.<name>={_target_: ...}``): an exception after some
optimizer steps, or SIGKILL at a chosen write or rename of a checkpoint."""

from __future__ import annotations

import builtins
import errno
import io
import os
import signal
import signal as signal_module
import time
from collections.abc import Callable
from pathlib import Path

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


class InjectFaults(pl.Callback):
    """Records every write, rename and removal of a checkpoint (or of ``test_metrics.json``) that the run
    makes, one line each in ``record``; with ``kill_at=k`` the process kills itself (SIGKILL) at the k-th
    of them (0-based): halfway through a write, or just before a rename or removal.

    With ``after=true`` a rename or removal is done first and the process dies right after it (a
    write still dies halfway): the moment between a checkpoint's publication and what follows it.

    Installed when the callback is built (``+callbacks.faults={_target_: fault_injection.InjectFaults, ...}``),
    before any checkpoint is written. The events are found by patching ``open`` (for writing),
    ``os.replace``, ``os.remove`` and ``os.unlink``: whatever writes them, nothing is guessed.
    """

    def __init__(self, record: str, kill_at: int = -1, after: bool = False) -> None:
        self.record = Path(record)
        self.kill_at = kill_at
        self.count = 0

        def patched(kind: str, fn: Callable) -> Callable:
            def call(path: object, *args: object, **kwargs: object) -> object:
                due = self.event(kind, path, *args)
                if due and not after:
                    self.die()
                try:
                    return fn(path, *args, **kwargs)
                finally:  # also after a removal of what is not there (unlink(missing_ok=True))
                    if due:
                        self.die()

            return call

        patch_open_for_writing(lambda path: self.event("write", path), self.die)
        os.replace = patched("rename", os.replace)
        os.remove = patched("remove", os.remove)
        os.unlink = patched("remove", os.unlink)

    def event(self, kind: str, path: object, *more: object) -> bool:
        """Record the event if it concerns a checkpoint; True if the process must die at it."""
        names = [Path(os.fsdecode(p)).name for p in (path, *more) if isinstance(p, (str, os.PathLike))]
        if not any(".ckpt" in n or n.startswith("test_metrics") for n in names):
            return False
        with open(self.record, "a", encoding="utf-8") as f:
            f.write(f"{self.count} {kind} {' '.join(names)}\n")
        self.count += 1
        return self.count - 1 == self.kill_at

    def die(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


def patch_open_for_writing(fails: Callable[[object], bool], fail: Callable[[], None]) -> None:
    """``open`` for writing a path where ``fails(path)``: the file's first write writes half of its
    bytes, then calls ``fail`` (which kills the process or raises)."""
    real_open = builtins.open

    def patched_open(file: object, mode: str = "r", *args: object, **kwargs: object) -> object:
        f = real_open(file, mode, *args, **kwargs)
        writing = any(m in mode for m in "wax") and isinstance(file, (str, os.PathLike))
        return FailingFile(f, fail) if writing and fails(file) else f

    builtins.open = patched_open


class FailingFile:
    def __init__(self, f: io.IOBase, fail: Callable[[], None]) -> None:
        self.f, self.fail = f, fail

    def write(self, data: object) -> int:
        data = bytes(data) if not isinstance(data, str) else data
        self.f.write(data[: len(data) // 2])
        self.f.flush()
        self.fail()
        return 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.f, name)

    def __enter__(self) -> FailingFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.f.close()


class SignalAtStep(pl.Callback):
    """Sends ``signal`` (a name: SIGINT, SIGTERM) to the run's own process once optimizer step ``step`` is done."""

    def __init__(self, step: int, signal: str) -> None:
        self.step = step
        self.signum = getattr(signal_module, signal)
        self.sent = False

    def on_train_batch_end(self, trainer: pl.Trainer, *args: object) -> None:
        if trainer.global_step == self.step and not self.sent:
            self.sent = True
            os.kill(os.getpid(), self.signum)


class DiskFullAtWrite(pl.Callback):
    """Makes the ``at``-th checkpoint write (0-based) fail as a full disk does: half of the bytes reach the
    file, then OSError(ENOSPC)."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.count = 0
        patch_open_for_writing(self.due, self.fail)

    def due(self, path: object) -> bool:
        if ".ckpt" not in os.fspath(path):
            return False
        self.count += 1
        return self.count - 1 == self.at

    def fail(self) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class KillOnceAtStep(pl.Callback):
    """SIGKILLs the process of global rank ``rank`` before optimizer step ``step + 1``, once per ``marker``
    (a file it creates): the restarted processes run the same command and must live on."""

    def __init__(self, step: int, rank: int, marker: str) -> None:
        self.step, self.rank, self.marker = step, rank, Path(marker)

    def on_train_batch_start(self, trainer: pl.Trainer, *args: object) -> None:
        if trainer.global_step == self.step and trainer.global_rank == self.rank and not self.marker.exists():
            self.marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)


class PauseAtStep(pl.Callback):
    """Once optimizer step ``step`` is done, creates the file ``paused`` and waits (a minute at most) until
    the file ``resume`` exists: a run held still mid-training while a test does something beside it."""

    def __init__(self, step: int, paused: str, resume: str) -> None:
        self.step, self.paused, self.resume = step, Path(paused), Path(resume)

    def on_train_batch_end(self, trainer: pl.Trainer, *args: object) -> None:
        if trainer.global_step != self.step or self.paused.exists():
            return
        self.paused.touch()
        deadline = time.monotonic() + 60
        while not self.resume.exists() and time.monotonic() < deadline:
            time.sleep(0.01)


class SignalInPhase(pl.Callback):
    """Sends ``signal`` (SIGINT, SIGTERM) to the run's own process once, in a phase of the run: ``start-up``
    (as the callbacks are built), ``setup`` (Lightning's setup of the fit), ``after-fit`` (after the
    last validation, as the training loop ends), ``test`` (at the first test batch) or ``sampling``
    (as the sample after training is generated)."""

    def __init__(self, phase: str, signal: str) -> None:
        self.phase, self.signum, self.sent = phase, getattr(signal_module, signal), False
        if phase == "sampling":
            import attnlab.generate.decoder as decoder  # sample_in_windows calls its module's generate

            original = decoder.generate

            def generate(*args: object, **kwargs: object) -> object:
                self.send("sampling")
                return original(*args, **kwargs)

            decoder.generate = generate
        self.send("start-up")

    def send(self, phase: str) -> None:
        if phase == self.phase and not self.sent:
            self.sent = True
            os.kill(os.getpid(), self.signum)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self.send("setup")

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.send("after-fit")

    def on_test_batch_start(self, trainer: pl.Trainer, *args: object) -> None:
        self.send("test")
