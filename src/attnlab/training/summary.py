"""``summary.json``: how a run went, in one small file written when it starts and when it ends.

    {"status": "completed", "error": null, "n_params": 837632, "wall_time_s": 252.4,
     "tokens_per_s": 9540.2, "train_tokens": 2457600, "final_step": 300,
     "best": {"metric": "val/loss", "value": 2.06, "step": 300},
     "target": {"metric": "val/loss", "value": 2.1, "mode": "min", "reached": true, "step": 250,
                "metric_value": 2.09, "tokens": 2048000, "flops": 1.1e13, "wall_time_s": 201.7},
     "flops_per_token": {"nanogpt": 5.1e6, "chinchilla": 5.6e6, "seq_len": 64, "counts": "..."},
     "started": "2025-01-01T12:00:00+00:00", "ended": "2025-01-01T12:04:12+00:00"}

``flops_per_token`` (decoder-only models) is written when the model is built: training FLOPs per token
at ``data.seq_len`` counted two ways, and ``counts`` says how (``attnlab.models.flops``).

``target`` (runs with ``trainer.target_metric``): what the target was and, where the run reached it,
the step of the first validation at or past it, the tokens and FLOPs to it and the wall time (the
``time_s`` of that validation's line in ``metrics.jsonl``, counting the time before a resume).

``status`` is ``running`` until the end, then ``completed``, ``failed`` (``error``: the one line the
console printed) or ``interrupted``; a run killed with SIGKILL keeps ``running``. Each write goes
through a temporary file and a rename, so a reader never sees half of it.
"""

from __future__ import annotations

import json
import math
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnlab.schema.errors import ConfigError
from attnlab.schema.run import TrainerConfig
from attnlab.schema.rundir import SUMMARY_FILE

if TYPE_CHECKING:  # Lightning is imported where a fit is summarised: a job refused by validation needs none
    import pytorch_lightning as pl

STATUSES = ("running", "completed", "failed", "interrupted")


class RunSummary:
    """The summary of the run in ``run_dir``; written at once with status ``running``."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / SUMMARY_FILE
        self._start = time.monotonic()
        self.fields: dict[str, Any] = {
            "status": "running",
            "error": None,
            "n_params": None,
            "wall_time_s": None,
            "tokens_per_s": None,
            "final_step": None,
            "best": None,
            "started": _now(),
            "ended": None,
        }
        self._write()

    def update(self, **fields: Any) -> None:
        """Record what the run knows so far (its size once built, its results once fitted)."""
        self.fields.update(fields)
        self._write()

    def finish(self, status: str, error: str | None = None, **fields: Any) -> None:
        """The final write: the status, the error line of a failed run, the wall time of the job, and
        ``fields`` (the ``phase`` an interrupted run was in)."""
        if status not in STATUSES[1:]:
            raise ValueError(f"status={status!r}: choose one of {', '.join(STATUSES[1:])}")
        wall = round(self.elapsed_s, 3)
        self.update(status=status, error=error, wall_time_s=wall, ended=_now(), **fields)

    @property
    def elapsed_s(self) -> float:
        """Seconds since the job started."""
        return time.monotonic() - self._start

    def _write(self) -> None:
        from attnlab.training.files import write_atomically  # a full disk: one error naming the file

        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, json.dumps(self.fields, indent=1) + "\n")


def fit_results(trainer: pl.Trainer, monitor: str, flops_per_token: dict | None = None) -> dict[str, Any]:
    """What a finished fit adds to the summary: the final step, the best value of ``monitor`` and the
    step of its checkpoint, the mean throughput (``tokens_per_s``, or ``samples_per_s`` for images) and
    the tokens (samples) trained on over all devices since this fit started (``train_tokens``: with
    ``flops_per_token``, a run's compute); with a target (``trainer.target_metric``), ``target``: the
    steps, tokens, FLOPs (Chinchilla's count of ``flops_per_token``) and wall time to it."""
    from attnlab.training.callbacks.target import StopAtTarget
    from attnlab.training.callbacks.throughput import ThroughputLogger

    results: dict[str, Any] = {"final_step": trainer.global_step, "best": best_of(trainer, monitor)}
    for callback in trainer.callbacks:
        if isinstance(callback, StopAtTarget):
            results["target"] = callback.record((flops_per_token or {}).get("chinchilla"))
        if isinstance(callback, ThroughputLogger) and callback.mean_rate is not None:
            results[f"{callback.unit}_per_s"] = round(callback.mean_rate, 3)
            results[f"train_{callback.unit}"] = callback.count_seen * trainer.world_size
    return results


def best_of(trainer: pl.Trainer, monitor: str) -> dict[str, Any] | None:
    """``{"metric", "value", "step"}`` of the best checkpoint by ``monitor``; None if it has none."""
    from pytorch_lightning.callbacks import ModelCheckpoint

    for callback in trainer.callbacks:
        if isinstance(callback, ModelCheckpoint) and callback.monitor == monitor and callback.best_model_path:
            step = re.search(r"step(\d+)", Path(callback.best_model_path).name)  # best-step{step:06d}.ckpt
            value = callback.best_model_score
            return {
                "metric": monitor,
                "value": float(value) if value is not None else None,
                "step": int(step.group(1)) if step else None,
            }
    return None


def check_monitor_logged(trainer: pl.Trainer, monitor: str, settings: TrainerConfig) -> None:
    """A fit that never logged ``monitor`` (no validation ran: ``trainer.limit_val_batches=0``, an
    empty validation split) has no best checkpoint and no value for a search to compare: an error
    naming the settings, rather than a NaN that Optuna cannot record. A resumed fit that had nothing
    left to train (killed after its last checkpoint) logged it before the kill: its best-checkpoint
    callback restored the value."""
    if settings.fast_dev_run or monitor in trainer.callback_metrics:
        return
    if not math.isnan(best_score(trainer, monitor)):
        return
    raise ConfigError(
        "task.monitor",
        monitor,
        f"was never logged: no validation ran (trainer.val_every_n_steps={settings.val_every_n_steps}, "
        f"trainer.limit_val_batches={settings.limit_val_batches}); validate at least once",
    )


def best_score(trainer: pl.Trainer, monitor: str) -> float:
    """The best value of ``monitor`` seen by the best-checkpoint callback (else its last value, else NaN)."""
    from pytorch_lightning.callbacks import ModelCheckpoint

    for callback in trainer.callbacks:
        if (
            isinstance(callback, ModelCheckpoint)
            and callback.monitor == monitor
            and callback.best_model_score is not None
        ):
            return float(callback.best_model_score)
    value = trainer.callback_metrics.get(monitor)
    return float(value) if value is not None else math.nan


def best_checkpoint(trainer: pl.Trainer) -> str | None:
    from pytorch_lightning.callbacks import ModelCheckpoint

    paths = [c.best_model_path for c in trainer.callbacks if isinstance(c, ModelCheckpoint) and c.monitor]
    return next((p for p in paths if p), None)


def count_parameters(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
