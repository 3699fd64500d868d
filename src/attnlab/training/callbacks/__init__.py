"""Every Lightning callback of a training run, and the list a run starts with (``build_callbacks``)."""

from __future__ import annotations

from pathlib import Path

from hydra.utils import instantiate
from pytorch_lightning.callbacks import Callback, Checkpoint

from attnlab.schema.run import RunConfig
from attnlab.schema.rundir import checkpoint_dir
from attnlab.tasks.lightning_shims import STEP_HOOKS, without_idle_step_hooks
from attnlab.training.callbacks.attention_maps import AttentionMapLogger
from attnlab.training.callbacks.checkpoints import AtomicCheckpointIO, BestCheckpoint, LastCheckpoint
from attnlab.training.callbacks.final_validation import FinalValidation
from attnlab.training.callbacks.grad_norm import GradNormLogger
from attnlab.training.callbacks.model_summary import ModelSummary
from attnlab.training.callbacks.progress import StepProgressBar
from attnlab.training.callbacks.progress_lines import ProgressLines, console_is_terminal
from attnlab.training.callbacks.run_state import RankConsistency, RunState, StepSeeder
from attnlab.training.callbacks.target import StopAtTarget
from attnlab.training.callbacks.throughput import ThroughputLogger


def checkpoint_callbacks(run: RunConfig, run_dir: Path, run_id: str | None = None) -> list[Checkpoint]:
    """The best by ``task.monitor`` at each validation, then ``last.ckpt`` every
    ``checkpoint.every_n_steps`` and after each validation: in this order (see ``callbacks.checkpoints``).
    ``run_id``: the identity the run's checkpoints record (its wandb id)."""
    dirpath = checkpoint_dir(run_dir)
    best = BestCheckpoint(
        dirpath=dirpath,
        monitor=run.task.monitor,
        mode=str(run.task.monitor_mode),
        save_top_k=run.checkpoint.save_top_k,
        filename="best-step{step:06d}",
        auto_insert_metric_name=False,
        run_id=run_id,
    )
    return [best, LastCheckpoint(dirpath, run.checkpoint.every_n_steps)]


def build_callbacks(
    run: RunConfig,
    run_dir: Path,
    config: dict,
    wandb_id: str,
    history: list[dict] | None = None,
    console: bool = True,
) -> list[Callback]:
    """attnlab's callbacks and the run's own (``history``: its continuations with changed optimiser
    settings, kept in its checkpoints); without ``console`` (a job of a multirun) neither the
    progress lines nor the model summary reach the console (``train.log`` has the lines; a terminal
    still shows the bar, one line that is redrawn)."""
    callbacks: list[Callback] = [
        StepSeeder(run.seed),
        RunState(config, wandb_id, history),
        RankConsistency(),
        ThroughputLogger(),
        GradNormLogger(),
        FinalValidation(),
        ProgressLines() if console else ProgressLines(to_console=False),
    ]
    if not run.trainer.fast_dev_run:
        callbacks += checkpoint_callbacks(run, run_dir, wandb_id)
    if run.trainer.enable_progress_bar:  # a bar only on a terminal; elsewhere ProgressLines print
        callbacks += [StepProgressBar()] if console_is_terminal() else []
        callbacks += [ModelSummary(max_depth=2)] if console else []
    if run.trainer.target_metric is not None:  # time to a target: stop there, record what it took
        t = run.trainer
        callbacks.append(StopAtTarget(t.target_metric, t.target_value, t.target_direction()))
    if run.task.log_attention_every_n_epochs > 0:
        every = run.task.log_attention_every_n_epochs
        callbacks.append(AttentionMapLogger(every, save_dir=run_dir / "attention"))
    callbacks += [instantiate(c) for c in run.callbacks.values() if c is not None]
    return [without_idle_step_hooks(c) for c in callbacks]


__all__ = [
    "STEP_HOOKS",
    "AtomicCheckpointIO",
    "AttentionMapLogger",
    "BestCheckpoint",
    "FinalValidation",
    "GradNormLogger",
    "LastCheckpoint",
    "ModelSummary",
    "ProgressLines",
    "RankConsistency",
    "RunState",
    "StepProgressBar",
    "StepSeeder",
    "StopAtTarget",
    "ThroughputLogger",
    "build_callbacks",
    "checkpoint_callbacks",
    "without_idle_step_hooks",
]
