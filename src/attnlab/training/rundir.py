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
    METRICS_FILE,
    SUMMARY_FILE,
    TEST_METRICS_FILE,
    checkpoint_dir,
    is_sharded_checkpoint,
    refuse_link,
)
from attnlab.training.files import write_atomically

RUN_DIR_ENV = "ATTNLAB_DDP_RUN_DIR"  # set by rank 0 for the DDP ranks it launches
RUN_FILES = (CONFIG_FILE, SUMMARY_FILE, METRICS_FILE, TEST_METRICS_FILE)  # with checkpoints/: a run was here


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


def files_of_a_run(run_dir: Path) -> list[str]:
    """The files in ``run_dir`` that a run wrote (its config, summary, metrics, test metrics, a
    non-empty ``checkpoints/``): empty for a new folder, or one that only Hydra or a lock wrote into."""
    found = [name for name in RUN_FILES if (run_dir / name).exists()]
    checkpoints = checkpoint_dir(run_dir)
    if checkpoints.is_dir() and any(checkpoints.iterdir()):
        found.append(f"{CHECKPOINT_DIR}/")
    return found


def continues_run_in(ckpt_path: str | None, run_dir: Path) -> bool:
    """Whether ``ckpt_path`` continues the run of ``run_dir``: ``last`` or ``auto``, or a checkpoint in
    its ``checkpoints/`` folder (a sharded one's link included)."""
    if ckpt_path in ("last", "auto"):
        return True
    if ckpt_path is None:
        return False
    return Path(ckpt_path).absolute().parent.resolve() == checkpoint_dir(run_dir).absolute().resolve()


def check_run_dir_free(run_dir: Path, ckpt_path: str | None, run_dir_exists: str = "refuse") -> None:
    """A new run (or a resume from another directory's checkpoint) into a ``run_dir`` that holds another
    run would overwrite its config, metrics and summary and remove its checkpoints: ConfigError, unless
    ``run_dir_exists=overwrite`` asks for that. Called under the directory's lock (``training.lock``),
    so no other run can start writing between the look and the run's first file."""
    if str(run_dir_exists) == "overwrite" or continues_run_in(ckpt_path, run_dir):
        return
    found = files_of_a_run(run_dir)
    if found:
        raise ConfigError(
            "run_dir",
            str(run_dir),
            f"holds another run ({', '.join(found)}): continue it with ckpt_path=last, name another "
            "folder, or add run_dir_exists=overwrite to replace it",
        )
