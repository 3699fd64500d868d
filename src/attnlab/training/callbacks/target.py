"""Time to a target: stop a run at the first validation where a metric reaches a value, and record
what it took (``trainer.target_metric``, ``trainer.target_value``, ``trainer.target_mode``).

"Which variant reaches val/loss 3.28 first, in steps, tokens, FLOPs and wall time" is how speedruns
compare (modded-nanogpt's target is 3.28 on FineWeb). The wall time is the ``time_s`` of the
validation's line in ``metrics.jsonl``: its clock continues from before a kill when a run resumes
(``training.metrics_file``), and the tokens counted are kept in every checkpoint, so a resumed run
records the time and tokens of the whole run.
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback

from attnlab.training.callbacks.throughput import tensor_parallel_size
from attnlab.training.metrics_file import MetricsFileLogger


class StopAtTarget(Callback):
    """Stops training at the first validation where ``metric`` is at or below ``value`` (``mode`` min;
    at or above for max); ``reached`` then holds the step, the tokens trained on over all processes,
    and the wall time (``metrics.jsonl``'s clock) at that validation."""

    def __init__(self, metric: str, value: float, mode: str = "min") -> None:
        self.metric = metric
        self.value = value
        self.mode = mode
        self.tokens = 0.0  # trained on over all processes since the run began (kept in checkpoints)
        self.reached: dict[str, Any] | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A run resumed from a checkpoint written after it reached the target stops at once."""
        if self.reached is not None:
            trainer.should_stop = True

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        share = tensor_parallel_size(pl_module)  # tensor parallel: the processes of a group share a batch
        self.tokens += pl_module.batch_work(batch).tokens * trainer.world_size / share

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        value = trainer.callback_metrics.get(self.metric)
        if trainer.sanity_checking or self.reached is not None or value is None:
            return
        value = float(value)
        if value <= self.value if self.mode == "min" else value >= self.value:
            self.reached = {
                "step": trainer.global_step,
                "metric_value": value,
                "tokens": int(self.tokens),
                "wall_time_s": logged_time(trainer),
            }
            trainer.should_stop = True

    def state_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "reached": self.reached}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.tokens = float(state_dict.get("tokens", 0.0))
        self.reached = state_dict.get("reached")

    def record(self, flops_per_token: float | None) -> dict[str, Any]:
        """What ``summary.json`` says of the target: what it was, whether the run reached it, and if it
        did, the steps, tokens, FLOPs (tokens x Chinchilla's FLOPs per token) and wall time to it."""
        record: dict[str, Any] = {
            "metric": self.metric,
            "value": self.value,
            "mode": self.mode,
            "reached": self.reached is not None,
        }
        if self.reached is not None:
            record.update(self.reached)
            record["flops"] = self.reached["tokens"] * flops_per_token if flops_per_token else None
        return record


def logged_time(trainer: pl.Trainer) -> float | None:
    """The ``time_s`` of the line ``metrics.jsonl`` last wrote (None on ranks other than 0, which
    write none)."""
    for logger in trainer.loggers:
        if isinstance(logger, MetricsFileLogger):
            return logger.last_time_s
    return None
