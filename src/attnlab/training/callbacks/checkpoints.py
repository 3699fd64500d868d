"""Checkpoints that no kill can turn into a run that cannot finish or a wrong result.

Every checkpoint write is staged as ``<name>.tmp`` beside its target and renamed over it (one atomic
step). At a step that validates, the writes come in this order (checkpoint callbacks run last, in
list order): the new best checkpoint, the removal of the best it replaces, then ``last.ckpt``, which
records in its callback states which checkpoint is best and that this validation ran. A kill after
any prefix of these writes leaves ``last.ckpt`` of an earlier step (the resume redoes the steps and the
validation, writing the same files again) or of this step (nothing is left to redo). What a kill can
leave behind that the resumed state does not know (a ``.tmp``, a best checkpoint written after
``last.ckpt``, a ``last.ckpt.pending`` never published) is removed when training starts, so it is
neither kept nor duplicated as ``-v1``.

``metrics.jsonl`` never lacks a row that a checkpoint claims: Lightning writes a step's training row
after the callbacks' ``on_train_batch_end``, so the state saved there (``checkpoint.every_n_steps``) is
written as ``last.ckpt.pending`` and renamed over ``last.ckpt`` only at the next hook, once the row is
on disk. A kill in between leaves the earlier ``last.ckpt``, and the resume drops the rows beyond it
and writes them again. A checkpoint saved after a validation follows its rows already.

A run directory that was moved or copied keeps its best checkpoints on resume: a best checkpoint
recorded under the old path is the one of the same name here if that file records this run's
identity (its wandb id) and step.
The best checkpoints are Lightning's ModelCheckpoint (its state key stays that of older checkpoints).
"""

from __future__ import annotations

import io
import logging
import os
import re
import signal
import warnings
from functools import cached_property
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from pytorch_lightning.callbacks import Checkpoint, ModelCheckpoint

from attnlab.schema.rundir import LAST, is_sharded_checkpoint
from attnlab.training import sharded
from attnlab.training.callbacks.final_validation import is_final_step
from attnlab.training.callbacks.interrupts import RunInterrupted, StopSignals
from attnlab.training.files import TMP_SUFFIX, write_bytes_durably
from attnlab.training.signals import policy

log = logging.getLogger("attnlab")
PENDING_SUFFIX = ".pending"  # last.ckpt.pending: saved, published once the step's metrics row is written


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's TorchCheckpointIO, staging the file beside its target instead of in the system's
    temporary directory: a kill there leaves an orphan that nobody cleans, and the final move from
    another file system is a copy, not an atomic rename. A failed write leaves no partial file.

    Like Lightning's, the checkpoint is serialised in memory first: torch's zip writer reports a full
    disk as an unexplained RuntimeError, a plain file write as OSError(ENOSPC).
    """

    def save_checkpoint(self, checkpoint: dict, path: str | os.PathLike, storage_options: Any = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        write_bytes_durably(path, buffer.getbuffer())

    def load_checkpoint(self, path: str | os.PathLike, **options: Any) -> dict[str, Any]:
        """A checkpoint file, or a sharded checkpoint read whole (resuming without sharding a run that
        was saved sharded, on any number of processes)."""
        if is_sharded_checkpoint(path):
            return sharded.load_whole(Path(path))
        return super().load_checkpoint(path, **options)

    def publish(self, staged: os.PathLike, target: os.PathLike) -> None:
        """Make the whole checkpoint at ``staged`` the one at ``target`` in one rename."""
        sharded.move(Path(staged), Path(target))


class BestCheckpoint(ModelCheckpoint):
    """Lightning's ModelCheckpoint that never keeps a checkpoint whose monitored value is not finite:
    Lightning's ranks a NaN as the worst value, yet saves it while fewer than ``save_top_k`` are kept,
    so a run whose first validation diverged would call it best. Its state key is ModelCheckpoint's,
    so checkpoints written before this class resume with their best checkpoints known. ``run_id``:
    the identity every checkpoint of the run records (its wandb id), by which the best checkpoints of
    a moved or copied run directory are recognised."""

    def __init__(self, *args: Any, run_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.run_id = run_id

    def check_monitor_top_k(self, trainer: pl.Trainer, current: torch.Tensor | None = None) -> bool:
        if current is not None and not bool(torch.isfinite(current).all()):
            log.warning(
                "%s=%s is not finite: no best checkpoint at step %d",
                self.monitor,
                current,
                trainer.global_step,
            )
            return False
        return super().check_monitor_top_k(trainer, current)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        """Nothing to do after a batch when it saves at validations only (as attnlab builds it: no
        ``every_n_train_steps``, no ``train_time_interval``); Lightning's hook still reads the loop's
        state and the clock at every step to find that out (~25 us a step on a CPU)."""
        if self._every_n_train_steps > 0 or self._train_time_interval is not None:
            super().on_train_batch_end(trainer, pl_module, *args)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """A run resumed into a new directory chooses its best checkpoints among its own validations,
        and says so in a line of its own rather than Lightning's warning ("The dirpath has changed from
        ... won't be reloaded"); the earlier run's best checkpoint stays where it is, unreferenced."""
        moved = state_dict.get("dirpath") not in (None, self.dirpath)
        if moved:
            here = state_moved_here(state_dict, Path(self.dirpath), self.run_id)
            if here is not None:  # the run directory was moved or copied: its best checkpoints are here
                state_dict, moved = here, False
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "The dirpath has changed from")
            super().load_state_dict(state_dict)
        if moved:
            self.best_model_path = ""
            log.info(
                "resumed into a new directory: its best checkpoints are chosen among its own validations "
                "(those of %s stay there)",
                state_dict["dirpath"],
            )

    @cached_property
    def state_key(self) -> str:
        """Built once: Lightning reads it at every hook call of every step (it names the call for its
        profiler), and ModelCheckpoint renders it from a dict of its settings, fixed at __init__."""
        return super().state_key.replace(type(self).__qualname__, ModelCheckpoint.__qualname__, 1)


def state_moved_here(state: dict[str, Any], dirpath: Path, run_id: str | None) -> dict[str, Any] | None:
    """ModelCheckpoint's ``state``, saved in another directory, with its paths in ``dirpath``, if every
    best checkpoint it names is in ``dirpath`` under the same name and is this run's (``belongs``);
    else None."""
    best = [Path(p) for p in state.get("best_k_models") or {}]
    if run_id is None or not all(belongs(dirpath / p.name, run_id) for p in best):
        return None

    def here(path: str | None) -> str:
        return str(dirpath / Path(path).name) if path else ""

    return {
        **state,
        "dirpath": str(dirpath),
        "best_model_path": here(state.get("best_model_path")),
        "kth_best_model_path": here(state.get("kth_best_model_path")),
        "last_model_path": here(state.get("last_model_path")),
        "best_k_models": {here(p): v for p, v in state["best_k_models"].items()},
    }


def belongs(path: Path, run_id: str) -> bool:
    """Whether the checkpoint at ``path`` was saved by the run ``run_id`` at the step its name says
    (``best-step<N>``): a file's own record, not where it lies."""
    from attnlab.training.resume import read_run_state

    try:
        state = read_run_state(str(path))
    except Exception:  # missing, damaged or foreign: not this run's
        return False
    step = re.search(r"step(\d+)", path.name)
    return state.get("wandb_id") == run_id and (step is None or int(step.group(1)) == state["global_step"])


def validation_follows(trainer: pl.Trainer) -> bool:
    """Whether Lightning validates right after the current training batch (batch-count validation,
    ``check_val_every_n_epoch=None``, as attnlab's trainer is built; and the last step, which
    ``FinalValidation`` validates)."""
    every = trainer.val_check_batch
    if not isinstance(every, int) or every < 1:
        return False
    if not (is_final_step(trainer) or (trainer.fit_loop.epoch_loop.total_batch_idx + 1) % every == 0):
        return False  # most steps: answered without enable_validation (Lightning's costs ~10 us)
    return trainer.enable_validation and not trainer.fast_dev_run


class LastCheckpoint(Checkpoint):
    """``last.ckpt``, what a resume continues from: every ``every_n_steps`` optimizer steps, after every
    validation but the last step's, at the end of fit, and at the step where SIGINT or SIGTERM stops the run
    (``RunInterrupted`` is raised after the save).

    At a step that validates it is written after the validation, never before: Lightning's resume from
    a checkpoint taken before the validation of its step skips that validation, losing its metrics and
    possibly the best checkpoint. Saved at the end of a batch, it is written as ``last.ckpt.pending``
    and published at the next hook, once the step's row of ``metrics.jsonl`` is written.
    """

    def __init__(self, dirpath: str | os.PathLike, every_n_steps: int) -> None:
        self.path = Path(dirpath) / LAST
        self.pending = Path(dirpath) / (LAST + PENDING_SUFFIX)
        self.every_n_steps = every_n_steps
        self.saved_step = -1
        self.staged = False  # last.ckpt.pending holds saved_step, not yet published
        self.step_before_batch = 0
        self.signals = StopSignals()
        self.stopped: RunInterrupted | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Before the first step: the checkpoint directory keeps only what the (resumed) state refers to."""
        self.signals.install()
        if trainer.is_global_zero:
            best = [c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint)]
            remove_stale_files(self.path.parent, keep={Path(p).name for c in best for p in c.best_k_models})

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, err: BaseException) -> None:
        self.signals.restore()

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        self.publish(trainer)  # the previous step's rows are written by now
        self.raise_if_stopped(trainer)
        self.step_before_batch = trainer.global_step

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        step = trainer.global_step
        if step == self.step_before_batch or validation_follows(trainer):
            return  # mid-accumulation, or to be saved after the validation of this step
        if self.every_n_steps > 0 and step % self.every_n_steps == 0:
            self.save(trainer, publish=False)  # published once Lightning has logged this step's row
        if self.signals.requested(trainer):
            self.stop(trainer)  # raised when the batch is done (its metrics are logged after this hook)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn == "fit" and not trainer.sanity_checking and not trainer.fast_dev_run:
            if self.signals.received is None and policy.deferred:
                policy.phase = "fit"
            if not is_final_step(trainer):
                # The last step's state is saved after fit (save_final), once the loop has counted the
                # step: saved here, a resume that extends max_steps logs its steps one behind.
                self.save(trainer)
            if self.signals.requested(trainer):
                self.stop(trainer)
                self.raise_if_stopped(trainer)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.publish(trainer)
        if self.signals.received is None and policy.deferred:
            policy.phase = "validation"  # named in the message of a signal that comes now

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.publish(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Signals stay deferred until the final state is saved (``save_final``, after fit)."""
        self.publish(trainer)
        self.raise_if_stopped(trainer)

    def save_final(self, trainer: pl.Trainer) -> None:
        """The state at the current step, unless it was written at this step already; on disk when this
        returns (the checkpoint IO's ``teardown`` waits for its background writes, raising one that failed)."""
        self.publish(trainer)
        if trainer.global_step != self.saved_step:
            self.save(trainer)
        trainer.strategy.checkpoint_io.teardown()

    def save(self, trainer: pl.Trainer, publish: bool = True) -> None:
        """The whole state (optimizer, schedule, loops, callbacks): as ``last.ckpt``, or with ``publish``
        false as ``last.ckpt.pending`` until ``publish``. ``weights_only=False`` is what to
        write, not how to read: left unset, Lightning logs "`weights_only` was not set, defaulting to
        `False`", which reads like an unsafe load (every load passes ``weights_only=True``)."""
        self.publish(trainer)
        trainer.save_checkpoint(self.path if publish else self.pending, weights_only=False)
        self.saved_step, self.staged = trainer.global_step, not publish

    def publish(self, trainer: pl.Trainer) -> None:
        """``last.ckpt.pending``, if a save left one, renamed over ``last.ckpt`` (by rank 0, behind the
        write itself when the checkpoint IO writes in the background)."""
        if not self.staged:
            return
        self.staged = False
        if trainer.is_global_zero:
            io = trainer.strategy.checkpoint_io
            getattr(io, "publish", sharded.move)(self.pending, self.path)

    def stop(self, trainer: pl.Trainer) -> None:
        """Save this step (published before the run ends); RunInterrupted at the next ``raise_if_stopped``."""
        if trainer.global_step != self.saved_step:
            self.save(trainer, publish=False)
        trainer.strategy.checkpoint_io.teardown()
        signum = self.signals.received or signal.SIGTERM
        self.stopped = RunInterrupted(signum, policy.phase, trainer.global_step, self.path)
        self.signals.stopping()

    def raise_if_stopped(self, trainer: pl.Trainer) -> None:
        if self.stopped is not None:
            self.publish(trainer)
            trainer.strategy.checkpoint_io.teardown()
            raise self.stopped


def remove_stale_files(dirpath: Path, keep: set[str]) -> list[Path]:
    """Remove ``*.tmp``, ``*.pending`` and best checkpoints (``best-*.ckpt``) not in ``keep`` from ``dirpath``, and
    the versions of sharded checkpoints that nothing points to (``training.sharded``)."""
    if not dirpath.is_dir():
        return []
    stale = [p for p in dirpath.glob("*" + TMP_SUFFIX)] + [p for p in dirpath.glob("*" + PENDING_SUFFIX)]
    stale += [p for p in dirpath.glob("best-*.ckpt") if p.name not in keep]
    for path in stale:
        log.info("removing %s: not part of the state this run continues from", path)
        sharded.remove(path)  # a file, or a sharded checkpoint's link and directory
    orphans = sharded.stale_versions(dirpath)
    for path in orphans:
        log.info("removing %s: not part of the state this run continues from", path)
        sharded.remove(path)
    return stale + orphans
