"""The run's loggers (wandb offline by default, CSV, TensorBoard) from their ``_target_`` configs, all
writing under the run directory."""

from __future__ import annotations

import os
import secrets
import sys
from itertools import count
from pathlib import Path

from hydra.utils import instantiate
from pytorch_lightning.loggers import Logger

from attnlab.schema.load import plain
from attnlab.schema.run import LoggerConfig, WandbLoggerConfig


def wandb_mode(cfg: WandbLoggerConfig) -> str:
    """``logger.wandb.mode``, else ``$WANDB_MODE``, else offline: no account is needed by default."""
    mode = str(cfg.mode or os.environ.get("WANDB_MODE") or "offline")
    return "offline" if mode == "dryrun" else mode


def new_wandb_id() -> str:
    return secrets.token_hex(4)


def build_loggers(
    cfg: LoggerConfig, run_dir: Path, *, name: str, group: str | None, wandb_id: str, config: dict
) -> list[Logger]:
    """Each logger of ``cfg`` that is set, instantiated from its ``_target_``, writing into ``run_dir``.
    ``name`` is the run's (unless the logger's config names it), ``group`` its multirun's, ``wandb_id``
    continues a resumed run's wandb curve, and ``config`` is the run's, which wandb records."""
    loggers: list[Logger] = []
    if cfg.wandb is not None:
        w = cfg.wandb
        wandb_logger = _instantiate(
            w,
            save_dir=str(run_dir),
            name=w.name or name,
            group=w.group or group,
            mode=wandb_mode(w),
            tags=list(cfg.tags),
            id=wandb_id,
            config=config,
            resume="allow",
        )
        drop_anonymous_setting(wandb_logger)
        loggers.append(wandb_logger)
    if cfg.csv is not None:
        loggers.append(
            _instantiate(cfg.csv, save_dir=str(run_dir), version=csv_version(run_dir / cfg.csv.name))
        )
    if cfg.tensorboard is not None:
        loggers.append(_instantiate(cfg.tensorboard, save_dir=str(run_dir), version=""))
    return loggers


def drop_anonymous_setting(logger: Logger) -> None:
    """Lightning's WandbLogger passes ``anonymous=None`` to ``wandb.init``, and wandb prints "The
    anonymous setting has no effect and will be removed" for any value given: leave it unset. (Its
    arguments for wandb.init are a private dict; a logger without one is left as it is.)"""
    init = getattr(logger, "_wandb_init", None)
    if isinstance(init, dict) and init.get("anonymous") is None:
        init.pop("anonymous", None)


def _instantiate(cfg: object, **run_settings: object) -> Logger:
    """The logger of ``cfg._target_``, its fields and ``run_settings`` as arguments."""
    # Not recursive: the run's config that wandb records holds _target_ nodes (trainer, loggers,
    # callbacks) that are data here, not objects to build. wandb's `config` is no kwarg of instantiate.
    return instantiate({**plain(cfg), **run_settings}, _recursive_=False, _convert_="all")


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


def flat(config: dict, prefix: str = "") -> dict[str, object]:
    """``{"model.n_heads": 4, ...}``: a nested config as dotted keys, the way overrides name them."""
    items: dict[str, object] = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            items.update(flat(value, f"{prefix}{key}."))
        else:
            items[f"{prefix}{key}"] = value
    return items


def log_results(
    loggers: list[Logger], *, hparams: dict, monitor: str, best: float, sample: str | None, step: int
) -> None:
    """What compares finished runs: the flattened config with the best value of ``monitor``, which
    TensorBoard's HParams tab tabulates (``best/<monitor>``; wandb has the config from its start and
    gets the best value in its summary), and the final sample text."""
    import math

    from pytorch_lightning.loggers import TensorBoardLogger, WandbLogger

    best_value = {f"best/{monitor}": best} if math.isfinite(best) else {}
    for logger in loggers:
        if isinstance(logger, TensorBoardLogger):
            logger.log_hyperparams(flat(hparams), metrics=best_value or None)
            if sample is not None:
                logger.experiment.add_text("sample", sample, step)
            logger.experiment.flush()
        elif isinstance(logger, WandbLogger):
            logger.experiment.summary.update({**best_value, **({"sample": sample} if sample else {})})
