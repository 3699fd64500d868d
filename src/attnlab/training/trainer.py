"""The Lightning Trainer of a run, instantiated from its trainer settings (``trainer._target_``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from hydra.utils import instantiate
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.loggers import Logger
from pytorch_lightning.profilers import AdvancedProfiler, PyTorchProfiler, SimpleProfiler
from pytorch_lightning.strategies import DDPStrategy, FSDPStrategy, Strategy

from attnlab.blocks.layers import TransformerLayer
from attnlab.schema.load import plain
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


# TrainerConfig fields that are not arguments of Lightning's Trainer: lightning_settings translates them.
ATTNLAB_SETTINGS = ("strategy", "val_every_n_steps", "profiler")


def lightning_settings(t: TrainerConfig, run_dir: Path) -> dict[str, Any]:
    """The Trainer arguments that attnlab's own trainer settings stand for: validation every
    ``val_every_n_steps`` optimizer steps, a strategy whose checkpoints are written whole or not at
    all, a profiler writing into the run directory, a run bounded by steps, and data modules that
    shard over ranks themselves (exact resume)."""
    return {
        "strategy": strategy(t),
        "plugins": [AtomicCheckpointIO()] if t.strategy not in ("ddp", "fsdp") else [],
        "val_check_interval": t.val_every_n_steps * t.accumulate_grad_batches,
        "check_val_every_n_epoch": None,
        "profiler": PROFILERS[t.profiler](dirpath=run_dir, filename="profile") if t.profiler else None,
        "max_epochs": -1,
        "enable_checkpointing": not t.fast_dev_run,
        "use_distributed_sampler": False,
        "default_root_dir": run_dir,
    }


def build_trainer(
    run: RunConfig, run_dir: Path, loggers: list[Logger], callbacks: list[Callback]
) -> pl.Trainer:
    """The Trainer of ``run.trainer._target_`` (Lightning's by default): its fields as the Trainer's
    arguments, with attnlab's own settings translated (``lightning_settings``)."""
    arguments = {k: v for k, v in plain(run.trainer).items() if k not in ATTNLAB_SETTINGS}
    return instantiate(
        arguments,
        **lightning_settings(run.trainer, run_dir),
        logger=loggers or False,
        callbacks=callbacks,
        _recursive_=False,
        _convert_="all",
    )
