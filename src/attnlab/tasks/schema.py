"""Schemas of the ``task`` and optimisation settings (torch-free)."""

from __future__ import annotations

from dataclasses import dataclass, field

TASKS = ("causal_lm", "mlm", "seq2seq", "classification")
SCHEDULES = ("constant", "cosine", "linear", "noam")


@dataclass
class TaskConfig:
    name: str = "causal_lm"
    label_smoothing: float = 0.0
    monitor: str = "val/loss"  # metric for the best checkpoint and for sweeps
    monitor_mode: str = "min"
    log_attention_every_n_epochs: int = 0  # 0: off; else attention heat maps to the logger
    sample_every_n_epochs: int = 0


@dataclass
class OptimConfig:
    lr: float = 3e-4
    weight_decay: float = 0.1
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    eps: float = 1e-8
    schedule: str = "cosine"
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1  # cosine floor as a fraction of lr
    max_steps: int | None = None  # None: the trainer's max_steps
