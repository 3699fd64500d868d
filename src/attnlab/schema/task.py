"""Schemas of the ``task`` and optimisation settings, and their checks (torch-free)."""

from __future__ import annotations

from dataclasses import dataclass, field

TASKS = ("causal_lm", "mlm", "seq2seq", "classification")
SCHEDULES = ("constant", "cosine", "linear", "noam")

# Which model families each task can train, and the task a family trains when none is named.
TASK_FAMILIES = {
    "causal_lm": ("gpt",),
    "mlm": ("bert",),
    "seq2seq": ("seq2seq",),
    "classification": ("bert", "vit"),
}
DEFAULT_TASKS = {"gpt": "causal_lm", "bert": "mlm", "seq2seq": "seq2seq", "vit": "classification"}


@dataclass
class TaskConfig:
    name: str = "causal_lm"
    label_smoothing: float = 0.0  # applied to the training loss; val/test losses are plain NLL
    eval_decode: bool = True  # seq2seq: greedy-decode val/test batches for exact match, BLEU, chrF
    monitor: str = "val/loss"  # metric for the best checkpoint and for sweeps
    monitor_mode: str = "min"
    log_attention_every_n_epochs: int = 0  # 0: off; else attention heat maps to the logger
    sample_every_n_epochs: int = 0


@dataclass
class OptimConfig:
    lr: float = 3e-4  # peak learning rate; for ``noam`` a multiplier of the paper's formula
    weight_decay: float = 0.1
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    eps: float = 1e-8
    schedule: str = "cosine"
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1  # cosine floor as a fraction of lr
    max_steps: int | None = None  # None: the trainer's max_steps


def validate_task_config(cfg: TaskConfig, family: str) -> None:
    """Raise ValueError naming the bad key when ``cfg`` cannot train a model of ``family``."""
    if cfg.name not in TASKS:
        raise ValueError(f"task.name={cfg.name!r} is not a task; choose one of {', '.join(TASKS)}")
    allowed = TASK_FAMILIES[cfg.name]
    if family not in allowed:
        raise ValueError(
            f"task.name={cfg.name!r} cannot train model.family={family!r}; it trains {', '.join(allowed)}"
        )
    if not 0.0 <= cfg.label_smoothing < 1.0:
        raise ValueError(f"task.label_smoothing={cfg.label_smoothing} must be in [0, 1)")
    if cfg.monitor_mode not in ("min", "max"):
        raise ValueError(f"task.monitor_mode={cfg.monitor_mode!r} must be 'min' or 'max'")


def validate_optim_config(cfg: OptimConfig) -> None:
    """Raise ValueError naming the bad key when the optimisation settings are unusable."""
    if cfg.schedule not in SCHEDULES:
        raise ValueError(
            f"optim.schedule={cfg.schedule!r} is not a schedule; choose one of {', '.join(SCHEDULES)}"
        )
    if cfg.lr <= 0:
        raise ValueError(f"optim.lr={cfg.lr} must be positive")
    if cfg.weight_decay < 0:
        raise ValueError(f"optim.weight_decay={cfg.weight_decay} must be >= 0")
    if len(cfg.betas) != 2 or not all(0.0 <= b < 1.0 for b in cfg.betas):
        raise ValueError(f"optim.betas={list(cfg.betas)} must be two numbers in [0, 1)")
    if cfg.warmup_steps < 0:
        raise ValueError(f"optim.warmup_steps={cfg.warmup_steps} must be >= 0")
    if cfg.schedule == "noam" and cfg.warmup_steps == 0:
        raise ValueError("optim.warmup_steps=0: the noam schedule needs warmup_steps > 0")
    if not 0.0 <= cfg.min_lr_ratio <= 1.0:
        raise ValueError(f"optim.min_lr_ratio={cfg.min_lr_ratio} must be in [0, 1]")
    if cfg.max_steps is not None and cfg.max_steps <= 0:
        raise ValueError(f"optim.max_steps={cfg.max_steps} must be positive (or null for the trainer's)")
