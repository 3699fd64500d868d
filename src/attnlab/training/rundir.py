"""Run directories: which process writes, how DDP ranks find the directory, where checkpoints live.

Rank 0 decides the run directory (Hydra's output directory) and writes everything into it. Lightning's
DDP launcher starts the other ranks by re-running the command; they find the directory, and the
validated config saved in it, through an environment variable that rank 0 sets before launching them.
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from attnlab.schema.errors import ConfigError
from attnlab.schema.rundir import (
    CHECKPOINT_DIR,
    CONFIG_FILE,
    checkpoint_dir,
    is_sharded_checkpoint,
    refuse_link,
)
from attnlab.training.files import write_atomically

RUN_DIR_ENV = "ATTNLAB_DDP_RUN_DIR"  # set by rank 0 for the DDP ranks it launches


def is_rank_zero() -> bool:
    """Whether this process writes (rank 0 of Lightning's, torchrun's or SLURM's ranks, or alone)."""
    return all(
        int(os.environ.get(name, 0)) == 0 for name in ("RANK", "SLURM_PROCID", "LOCAL_RANK", "NODE_RANK")
    )


def rank_suffix() -> str:
    """``_rank<k>`` for a process of rank k > 0, for its own log file; "" for rank 0 (or alone)."""
    if is_rank_zero():
        return ""
    return f"_rank{os.environ.get('RANK', os.environ.get('SLURM_PROCID', '?'))}"


def external_world_size() -> int:
    """Processes started by an outside launcher (torchrun, SLURM) for one run; 1 when there is none."""
    for name in ("WORLD_SIZE", "SLURM_NTASKS"):
        if name in os.environ and RUN_DIR_ENV not in os.environ:
            return int(os.environ[name])
    return 1


def ddp_child_run_dir() -> Path | None:
    """The run directory when this process is a DDP rank > 0 that Lightning launched; else None."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    if run_dir and int(os.environ.get("LOCAL_RANK", 0)) > 0:
        return Path(run_dir)
    return None


def announce_run_dir(run_dir: Path) -> None:
    """Tell the DDP ranks that Lightning will launch from this process where the run lives."""
    os.environ[RUN_DIR_ENV] = str(run_dir)


def save_config(config: DictConfig, run_dir: Path) -> Path:
    """Write the resolved config as ``config.yaml`` (what the DDP ranks and attnlab-eval read back)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    return write_atomically(run_dir / CONFIG_FILE, OmegaConf.to_yaml(config, resolve=True))


def load_config(run_dir: Path) -> DictConfig:
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: not an attnlab run directory")
    return OmegaConf.load(path)


def resolve_ckpt_path(ckpt_path: str | None, run_dir: Path) -> str | None:
    """``last`` -> the newest ``last*.ckpt`` of ``run_dir``; ``auto`` -> the same if there is one,
    else None (start fresh: what a job restarted by torchrun or a scheduler wants); a file must exist.
    ConfigError otherwise. Every rank decides before the processes join (no checkpoint can be
    written before that), so all ranks of one start see the same run directory and decide alike."""
    if ckpt_path is None:
        return None
    if ckpt_path in ("last", "auto"):
        candidates = sorted(checkpoint_dir(run_dir).glob("last*.ckpt"), key=lambda p: p.stat().st_mtime)
        if not candidates and ckpt_path == "auto":
            return None
        if not candidates:
            raise ConfigError(
                "ckpt_path",
                "last",
                f"no {CHECKPOINT_DIR}/last.ckpt in {run_dir}; give run_dir=<the run to resume>",
            )
        refuse_link("ckpt_path", candidates[-1])
        return str(candidates[-1].resolve())
    path = Path(ckpt_path)
    refuse_link("ckpt_path", path)
    if is_sharded_checkpoint(path):  # trainer.strategy=fsdp2 checkpoint.sharded=true
        return str(path.resolve())
    if path.is_dir():
        raise ConfigError(
            "ckpt_path", ckpt_path, f"is a directory: give a checkpoint file (its {CHECKPOINT_DIR}/last.ckpt)"
        )
    if not path.is_file():
        raise ConfigError(
            "ckpt_path", ckpt_path, "no such checkpoint file (or ckpt_path=last|auto with run_dir=<dir>)"
        )
    return str(path.resolve())
