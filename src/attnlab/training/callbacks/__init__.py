"""Every Lightning callback of a training run, and the list a run starts with (``build_callbacks``)."""

from __future__ import annotations

from pathlib import Path

from hydra.utils import instantiate
from pytorch_lightning.callbacks import Callback, ModelCheckpoint, RichModelSummary

from attnlab.schema.run import RunConfig
from attnlab.schema.rundir import checkpoint_dir
from attnlab.training.callbacks.attention_maps import AttentionMapLogger
from attnlab.training.callbacks.progress import StepProgressBar
from attnlab.training.callbacks.run_state import AtomicCheckpointIO, RankConsistency, RunState, StepSeeder
from attnlab.training.callbacks.throughput import ThroughputLogger


def checkpoint_callbacks(run: RunConfig, run_dir: Path) -> list[ModelCheckpoint]:
    """``last.ckpt`` every ``checkpoint.every_n_steps``, and the best by ``task.monitor`` at each validation."""
    dirpath = checkpoint_dir(run_dir)
    last = ModelCheckpoint(
        dirpath=dirpath, save_last=True, save_top_k=0, every_n_train_steps=run.checkpoint.every_n_steps
    )
    best = ModelCheckpoint(
        dirpath=dirpath,
        monitor=run.task.monitor,
        mode=run.task.monitor_mode,
        save_top_k=run.checkpoint.save_top_k,
        filename="best-step{step:06d}",
        auto_insert_metric_name=False,
    )
    return [last, best]


def build_callbacks(run: RunConfig, run_dir: Path, config: dict, wandb_id: str) -> list[Callback]:
    callbacks: list[Callback] = [
        StepSeeder(run.seed),
        RunState(config, wandb_id),
        RankConsistency(),
        ThroughputLogger(),
    ]
    if not run.trainer.fast_dev_run:
        callbacks += checkpoint_callbacks(run, run_dir)
    if run.trainer.enable_progress_bar:
        callbacks += [StepProgressBar(leave=True), RichModelSummary(max_depth=2)]
    if run.task.log_attention_every_n_epochs > 0:
        every = run.task.log_attention_every_n_epochs
        callbacks.append(AttentionMapLogger(every, save_dir=run_dir / "attention"))
    callbacks += [instantiate(c) for c in run.callbacks]
    return callbacks


__all__ = [
    "AtomicCheckpointIO",
    "AttentionMapLogger",
    "RankConsistency",
    "RunState",
    "StepProgressBar",
    "StepSeeder",
    "ThroughputLogger",
    "build_callbacks",
    "checkpoint_callbacks",
]
