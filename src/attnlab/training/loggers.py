"""The run's loggers (wandb offline by default, CSV, TensorBoard) from their ``_target_`` configs, all
writing under the run directory."""

from __future__ import annotations

import csv
import io
import os
import secrets
import sys
from itertools import count
from pathlib import Path

from hydra.utils import instantiate
from pytorch_lightning.loggers import Logger

from attnlab.schema.load import plain
from attnlab.schema.run import LoggerConfig, WandbLoggerConfig
from attnlab.training.files import write_atomically
from attnlab.training.rundir import is_rank_zero


def wandb_mode(cfg: WandbLoggerConfig) -> str:
    """``logger.wandb.mode``, else ``$WANDB_MODE``, else offline: no account is needed by default."""
    mode = str(cfg.mode or os.environ.get("WANDB_MODE") or "offline")
    return "offline" if mode == "dryrun" else mode


def new_wandb_id() -> str:
    return secrets.token_hex(4)


def build_loggers(
    cfg: LoggerConfig,
    run_dir: Path,
    *,
    name: str,
    group: str | None,
    wandb_id: str,
    config: dict,
    resume_step: int | None = None,
) -> list[Logger]:
    """Each logger of ``cfg`` that is set, instantiated from its ``_target_``, writing into ``run_dir``.
    ``name`` is the run's (unless the logger's config names it), ``group`` its multirun's, ``wandb_id``
    continues a resumed run's wandb curve, ``config`` is the run's, which wandb records, and
    ``resume_step`` the step of the checkpoint a resume in place starts from (``trim_csv_logs``)."""
    loggers: list[Logger] = []
    if cfg.wandb is not None:
        w = cfg.wandb
        quiet_wandb(wandb_mode(w))
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
        if resume_step is not None and is_rank_zero():
            trim_csv_logs(run_dir / cfg.csv.name, resume_step)
        loggers.append(
            _instantiate(cfg.csv, save_dir=str(run_dir), version=csv_version(run_dir / cfg.csv.name))
        )
    if cfg.tensorboard is not None:
        loggers.append(_instantiate(cfg.tensorboard, save_dir=str(run_dir), version=""))
    return loggers


def quiet_wandb(mode: str) -> None:
    """No wandb lines on the console (an offline run's history and summary were 33 lines; the run's
    own summary names its wandb folder, ``wandb_line``); online, only the essential ones (the run's
    URL). Set for the job unless the environment chose already (``WANDB_SILENT``, ``WANDB_QUIET``)."""
    if "WANDB_SILENT" not in os.environ and "WANDB_QUIET" not in os.environ:
        os.environ["WANDB_SILENT" if mode == "offline" else "WANDB_QUIET"] = "true"


def wandb_line(loggers: list[Logger]) -> str | None:
    """Where the run's wandb run is, for the end of the run: its URL online, else its offline folder
    and the command that uploads it; None without wandb."""
    from pytorch_lightning.loggers import WandbLogger

    for logger in loggers:
        if isinstance(logger, WandbLogger):
            run = logger.experiment
            if run.url:
                return run.url
            folder = Path(run.dir).parent  # .../wandb/offline-run-<time>-<id>/files
            return f"{folder} (offline; `wandb sync {folder}` uploads it)"
    return None


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


def trim_csv_logs(root: Path, resume_step: int) -> None:
    """Drop from the CSV logs of earlier starts (``root/**/metrics.csv``) the rows that a run resuming
    from optimizer step ``resume_step`` logs again: a kill after that checkpoint left the steps since
    in the old file, and the resumed file would repeat them. Lightning's CSV rows of a training step
    say ``step`` = optimizer steps done before it, a validation's and the test's the steps done: the
    rows kept are those before ``resume_step``, and its validation (the checkpoint came after it)."""
    for path in sorted(root.glob("**/metrics.csv")):
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            fields, rows = reader.fieldnames or [], list(reader)
        kept = [row for row in rows if _logged_before(row, resume_step)]
        if len(kept) == len(rows):
            continue
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(kept)
        write_atomically(path, out.getvalue())


def _logged_before(row: dict[str, str], resume_step: int) -> bool:
    try:
        step = int(float(row.get("step") or "nan"))
    except ValueError:
        return True  # not a row of a step: left as it is
    is_validation = any(key.startswith("val/") and value for key, value in row.items())
    return step < resume_step or (step == resume_step and is_validation)


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
