"""The files of a run directory: the contract between the writer (training) and its readers (the commands).

    <run_dir>/config.yaml              the validated, resolved config of the run
    <run_dir>/checkpoints/last.ckpt    the latest state (best-step*.ckpt: the best by task.monitor)
    <run_dir>/tokenizer.json           the tokenizer of a text run
    <run_dir>/labels.json              the class names, where the labels were strings
    <run_dir>/test_metrics.json        the best checkpoint's metrics on the test split
    <run_dir>/summary.json             status, error line, size, time, throughput, best monitored value
    <run_dir>/metrics.jsonl            every logged value, one JSON object per line, whatever the logger
    <run_dir>/eval/<name>/metrics.json an evaluation of the run's checkpoint by ``attnlab-eval``
    <run_dir>/.hydra/overrides.yaml    the job's command-line overrides (Hydra's composed config beside it)
    <run_dir>/run.lock                 while a run writes the directory: its pid and host (one run at a time)

docs/run-directory.md describes each file; ``attnlab.report`` reads them all.
"""

from __future__ import annotations

import os
from pathlib import Path

CONFIG_FILE = "config.yaml"
CHECKPOINT_DIR = "checkpoints"
LAST = "last.ckpt"
TOKENIZER_FILE = "tokenizer.json"
LABELS_FILE = "labels.json"
TEST_METRICS_FILE = "test_metrics.json"
EVAL_METRICS_FILE = "metrics.json"
SUMMARY_FILE = "summary.json"
METRICS_FILE = "metrics.jsonl"
EVAL_DIR = "eval"
HYDRA_CONFIG_FILE = ".hydra/config.yaml"  # the composed config, all a job refused by validation leaves
OVERRIDES_FILE = ".hydra/overrides.yaml"
LOCK_FILE = "run.lock"  # held by the process writing the directory (training.lock)


def checkpoint_dir(run_dir: Path) -> Path:
    return run_dir / CHECKPOINT_DIR


def run_dir_of(ckpt_path: str | Path) -> Path:
    """The run directory of a checkpoint that lies in its ``checkpoints/`` folder."""
    return Path(ckpt_path).resolve().parent.parent


def eval_dir_of(ckpt_path: str | Path) -> Path | None:
    """Where evaluations of a checkpoint go: ``<run>/eval`` for a checkpoint in its run's
    ``checkpoints/`` folder (the run's ``config.yaml`` beside it); None for one found elsewhere."""
    path = Path(ckpt_path).resolve()
    run_dir = path.parent.parent
    if path.parent.name != CHECKPOINT_DIR or not (run_dir / CONFIG_FILE).is_file():
        return None
    return run_dir / EVAL_DIR


# A sharded checkpoint (trainer.strategy=fsdp2 checkpoint.sharded=true) is a directory written by
# torch.distributed.checkpoint: each process's shards, DCP's index, and Lightning's metadata file.
SHARDED_INDEX = ".metadata"  # torch.distributed.checkpoint's
SHARDED_META = "meta.pt"  # Lightning's: everything but the weights and optimizer states
WHOLE_PREFIX = "whole-"  # a sharded checkpoint consolidated into one file: whole-last.ckpt, ...
SHARDS_VERSION = (
    ".shards-"  # <name>.shards-<n>: one written sharded checkpoint, the target of the link <name>
)


def points_elsewhere(path: str | Path) -> bool:
    """Whether ``path`` is a link to anything but a version directory of a sharded checkpoint beside it
    (``<name>.shards-<n>``, a real directory, which training links ``<name>`` to): a link attnlab never
    writes, removes or reads a checkpoint through, since it may lead anywhere, outside the run
    directory included."""
    path = Path(path)
    if not path.is_symlink():
        return False
    target = path.resolve()
    beside = target.parent == path.parent.resolve() and SHARDS_VERSION in target.name
    return not (beside and target.is_dir() and not target.is_symlink())


def refuse_link(key: str, path: str | Path) -> None:
    """ConfigError naming ``key`` where ``path`` ``points_elsewhere``."""
    from attnlab.schema.errors import ConfigError

    if points_elsewhere(path):
        raise ConfigError(
            key, str(path), f"is a link (to {os.readlink(path)}): give the file itself, not a link to it"
        )


def is_sharded_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` is a sharded checkpoint's directory (or a link to one, as ``last.ckpt``)."""
    path = Path(path)
    return path.is_dir() and (path / SHARDED_INDEX).is_file() and (path / SHARDED_META).is_file()


def check_checkpoint_file(key: str, path: str | Path) -> None:
    """ConfigError naming ``key`` unless ``path`` is a checkpoint file; for a sharded checkpoint, the
    command that writes it as one file."""
    from attnlab.schema.errors import ConfigError

    refuse_link(key, path)
    if is_sharded_checkpoint(path):
        raise ConfigError(
            key,
            str(path),
            "is a sharded checkpoint (trainer.strategy=fsdp2 checkpoint.sharded=true): write it as one "
            f"file first with: attnlab-consolidate {path}",
        )
    if Path(path).is_dir():
        raise ConfigError(
            key, str(path), f"is a directory: give a checkpoint file (a run's {CHECKPOINT_DIR}/last.ckpt)"
        )
    if not Path(path).is_file():
        raise ConfigError(key, str(path), "no such checkpoint file")
