"""The run's loggers (wandb offline by default, CSV, TensorBoard), all writing under the run directory."""

from __future__ import annotations

import os
import secrets
import sys
from itertools import count
from pathlib import Path

from pytorch_lightning.loggers import CSVLogger, Logger, TensorBoardLogger, WandbLogger

from attnlab.schema.run import LoggerConfig


def wandb_mode(cfg: LoggerConfig) -> str:
    """``logger.mode``, else ``$WANDB_MODE``, else offline: no account is needed by default."""
    mode = str(cfg.mode or os.environ.get("WANDB_MODE") or "offline")
    return "offline" if mode == "dryrun" else mode


def new_wandb_id() -> str:
    return secrets.token_hex(4)


def build_loggers(
    cfg: LoggerConfig, run_dir: Path, *, group: str | None, wandb_id: str, config: dict
) -> list[Logger]:
    """One logger per name in ``cfg.names``; ``wandb_id`` continues a resumed run's wandb curve."""
    name = cfg.run_name or run_dir.name
    loggers: list[Logger] = []
    for kind in cfg.names:
        if kind == "wandb":
            loggers.append(
                WandbLogger(
                    name=name,
                    save_dir=str(run_dir),
                    id=wandb_id,
                    project=cfg.project,
                    group=cfg.group or group,
                    tags=list(cfg.tags),
                    mode=wandb_mode(cfg),
                    config=config,
                    resume="allow",
                )
            )
        elif kind == "csv":
            loggers.append(CSVLogger(save_dir=str(run_dir), name="csv", version=csv_version(run_dir / "csv")))
        elif kind == "tensorboard":
            loggers.append(
                TensorBoardLogger(
                    save_dir=str(run_dir), name="tensorboard", version="", default_hp_metric=False
                )
            )
    return loggers


def csv_version(root: Path) -> str:
    """``csv/metrics.csv`` for a new run; ``csv/resumed-<k>/metrics.csv`` for the k-th resume in place
    (Lightning's CSV logger would otherwise delete the metrics the run logged before)."""
    if not (root / "metrics.csv").exists():
        return ""
    return next(f"resumed-{k}" for k in count(1) if not (root / f"resumed-{k}").exists())


def finish_wandb(failed: bool) -> None:
    """End the wandb run of this process, if any, so the next job of a multirun starts clean."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        wandb.finish(exit_code=1 if failed else 0)
