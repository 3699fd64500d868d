"""The Lightning Trainer of a run, from its trainer settings."""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.loggers import Logger
from pytorch_lightning.profilers import AdvancedProfiler, PyTorchProfiler, SimpleProfiler
from pytorch_lightning.strategies import DDPStrategy, FSDPStrategy, Strategy

from attnlab.blocks.layers import TransformerLayer
from attnlab.schema.run import RunConfig, TrainerConfig
from attnlab.training.callbacks import AtomicCheckpointIO

PROFILERS = {"simple": SimpleProfiler, "advanced": AdvancedProfiler, "pytorch": PyTorchProfiler}


def strategy(cfg: TrainerConfig) -> str | Strategy:
    """DDP without unused-parameter search (attnlab builds only the heads a task uses); FSDP with one
    unit per TransformerLayer."""
    if cfg.strategy == "ddp":
        return DDPStrategy(find_unused_parameters=False, checkpoint_io=AtomicCheckpointIO())
    if cfg.strategy == "fsdp":
        return FSDPStrategy(auto_wrap_policy={TransformerLayer}, state_dict_type="full")
    return str(cfg.strategy)


def build_trainer(
    run: RunConfig, run_dir: Path, loggers: list[Logger], callbacks: list[Callback]
) -> pl.Trainer:
    t = run.trainer
    profiler = PROFILERS[t.profiler](dirpath=run_dir, filename="profile") if t.profiler else None
    plugins = [AtomicCheckpointIO()] if t.strategy not in ("ddp", "fsdp") else []
    return pl.Trainer(
        accelerator=str(t.accelerator),
        devices=t.devices,
        num_nodes=t.num_nodes,
        strategy=strategy(t),
        precision=t.precision,
        max_steps=t.max_steps,
        max_epochs=-1,
        val_check_interval=t.val_every_n_steps * t.accumulate_grad_batches,
        check_val_every_n_epoch=None,
        limit_val_batches=t.limit_val_batches,
        limit_test_batches=t.limit_test_batches,
        num_sanity_val_steps=t.num_sanity_val_steps,
        gradient_clip_val=t.gradient_clip_val,
        accumulate_grad_batches=t.accumulate_grad_batches,
        log_every_n_steps=t.log_every_n_steps,
        enable_progress_bar=t.enable_progress_bar,
        enable_checkpointing=not t.fast_dev_run,
        deterministic=t.deterministic,
        fast_dev_run=t.fast_dev_run or False,
        overfit_batches=t.overfit_batches,
        profiler=profiler,
        logger=loggers or False,
        callbacks=callbacks,
        default_root_dir=run_dir,
        use_distributed_sampler=False,  # the data modules shard over ranks themselves (exact resume)
        plugins=plugins,
    )
