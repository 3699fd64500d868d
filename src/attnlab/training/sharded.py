"""Sharded checkpoints (``trainer.strategy=fsdp2 checkpoint.sharded=true``), published atomically.

Lightning's ``ModelParallelStrategy`` writes a sharded checkpoint as a directory: every process its
shards of the weights and optimizer states (``torch.distributed.checkpoint``), rank 0 the index and
``meta.pt`` (the loops, callbacks, configs, tokenizer). Written in place, a kill mid-write would leave
``last.ckpt`` half old and half new. Here every process writes into ``<name>.tmp/``; once all are done,
rank 0 renames it to a version directory ``<name>.shards-<n>`` and points the link ``<name>`` at it
with one rename (``os.replace`` of a link), then removes the version the link pointed to before. A kill
at any moment leaves ``<name>`` pointing at a whole checkpoint, old or new; what it leaves beside
(a ``.tmp``, a version nothing points to) is removed when training starts (``stale_versions``).

The commands that read weights (``attnlab-eval``, ``-sample``, ``-compress``, ``-explain``) read one
file: ``consolidate`` writes it (``attnlab-consolidate <checkpoint>``).

Resuming on another number of processes: under ``trainer.strategy=fsdp2`` each process loads the
parts of the saved tensors its own shards cover (``torch.distributed.checkpoint`` reshards on load,
whatever the number of processes that wrote them); a run without sharding (one process, or DDP) reads
the whole checkpoint in every process (``load_whole``). A tensor-parallel run's checkpoint holds its
attention projections split (``models.parallel``): read whole, they are joined back into the unsplit
model's layout.
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from attnlab.models.parallel import fuse_optimizer_state, fuse_projections
from attnlab.schema.rundir import SHARDED_META, SHARDS_VERSION, WHOLE_PREFIX, points_elsewhere
from attnlab.training.files import TMP_SUFFIX, disk_full, is_disk_full, staged_new

VERSION = SHARDS_VERSION  # <name>.shards-<time in ns>: one written checkpoint, the target of <name>
OPTIMIZER_PREFIX = "optimizer_"  # Lightning's key of each optimizer's states in a sharded checkpoint
CONSOLIDATED_KEY = "attnlab_consolidated_from"  # in a consolidated file: the directory it was made from


def staging_dir(target: Path) -> Path:
    """Where every process writes its shards before ``publish`` (removed first, if a kill left one)."""
    return target.with_name(target.name + TMP_SUFFIX)


def publish(staging: Path, target: Path) -> None:
    """Make the whole checkpoint in ``staging`` the one at ``target`` in one atomic step (rank 0 only,
    after every process finished writing), then remove the one it replaces."""
    sync(staging / SHARDED_META)
    version = target.with_name(f"{target.name}{VERSION}{time.time_ns()}")
    os.rename(staging, version)
    link = target.with_name(target.name + ".link" + TMP_SUFFIX)
    link.unlink(missing_ok=True)
    os.symlink(version.name, link)  # relative: the run directory may move
    replaced = own_version(target)
    if target.is_dir() and not target.is_symlink():  # written in place by something else
        shutil.rmtree(target)
    os.replace(link, target)
    sync(target.parent)
    if replaced is not None and replaced != version.resolve():
        shutil.rmtree(replaced, ignore_errors=True)


def move(source: Path, target: Path) -> None:
    """Make the checkpoint at ``source`` (a file, or a sharded checkpoint's link) the one at ``target``
    in one rename, then remove the version ``target``'s link pointed to before."""
    replaced = target.resolve() if target.is_symlink() else None
    os.replace(source, target)
    sync(target.parent)
    if replaced is not None and replaced != target.resolve():
        shutil.rmtree(replaced, ignore_errors=True)


def remove(target: Path) -> None:
    """Remove the checkpoint at ``target``: a link and the version it points to, a directory, or a file."""
    if target.is_symlink():
        version = own_version(target)
        target.unlink()
        if version is not None:
            shutil.rmtree(version, ignore_errors=True)
    elif target.is_dir():
        shutil.rmtree(target)
    else:
        target.unlink(missing_ok=True)


def raise_disk_full(err: BaseException, target: Path, checkpoint: object = None) -> None:
    """DiskFullError naming ``target`` where the shards' write ``err`` (DCP's CheckpointException, which
    holds each failed rank's exception) found a full disk or the file size limit on any rank: one line
    instead of every rank's traceback, with the bytes of ``checkpoint``'s tensors (every rank's shards
    together) as the space needed. A rank whose write failed inside torch's zip writer reports only
    ``RuntimeError: ... unexpected pos``, the errno lost: it is taken for the limit where this process
    has one (``ulimit -f``), else for a full disk. Anything else is left to the caller."""
    import resource

    failures = [failure[0] for failure in getattr(err, "failures", {}).values()]
    cause = next((exc.errno for exc in failures if is_disk_full(exc)), None)
    if cause is None and any(
        isinstance(exc, RuntimeError) and "unexpected pos" in str(exc) for exc in failures
    ):
        limited = resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY
        cause = errno.EFBIG if limited else errno.ENOSPC
    if cause is not None:
        raise disk_full(target, tensor_bytes(checkpoint) or None, cause) from None


def tensor_bytes(obj: object) -> int:
    """The bytes of the tensors in ``obj`` (nested dicts, lists and tuples), a DTensor's whole."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(value) for value in obj.values())
    if isinstance(obj, list | tuple):
        return sum(tensor_bytes(value) for value in obj)
    return 0


def own_version(link: Path) -> Path | None:
    """The version directory the link ``link`` points to, where it is one that ``publish`` wrote beside
    it; None for anything else (no link, or a link elsewhere, outside the run directory included: only
    such a link is ever removed, never what it points to)."""
    return None if not link.is_symlink() or points_elsewhere(link) else link.resolve()


def stale_versions(dirpath: Path) -> list[Path]:
    """The version directories of ``dirpath`` that no link there points to (a kill between writing and
    publishing one, or before removing the one replaced)."""
    used = {p.resolve() for p in dirpath.iterdir() if p.is_symlink()}
    versions = [p for p in dirpath.glob(f"*{VERSION}*") if p.is_dir() and not p.is_symlink()]
    return [p for p in versions if p.resolve() not in used]


def sync(path: Path) -> None:
    """fsync ``path`` (a file, or a directory's entries)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def consolidated_path(checkpoint: Path) -> Path:
    """Where ``consolidate`` writes the one file of a sharded checkpoint: ``whole-<name>`` beside it
    (a name that neither ``ckpt_path=last`` nor the best checkpoints' cleanup picks up)."""
    return checkpoint.with_name(WHOLE_PREFIX + checkpoint.name)


def consolidate(checkpoint: Path, out: Path | None = None, overwrite: bool = True) -> Path:
    """Write the weights and run metadata of the sharded checkpoint ``checkpoint`` as one ordinary
    attnlab checkpoint file (whole tensors; written whole or not at all), without its optimizer state:
    a file for the commands that read weights, not for resuming. Returns its path. One process, no
    process group; nothing pickled in it runs code (``sharded_files``: ConfigError naming
    ``checkpoint``). Without ``overwrite``, FileExistsError where ``out`` exists when it is published."""
    from attnlab.training.sharded_files import read_sharded

    out = out or consolidated_path(checkpoint)
    saved, meta = read_sharded(checkpoint.resolve(), key="checkpoint")
    whole = {**meta, "state_dict": fuse_projections(saved["state_dict"]), CONSOLIDATED_KEY: str(checkpoint)}
    buffer = io.BytesIO()
    torch.save(whole, buffer)
    with staged_new(out, overwrite, needed=lambda: buffer.getbuffer().nbytes) as tmp, open(tmp, "wb") as file:
        file.write(buffer.getbuffer())
        file.flush()
        os.fsync(file.fileno())
    return out


def load_whole(checkpoint: Path) -> dict[str, Any]:
    """The sharded checkpoint ``checkpoint`` as a one-file checkpoint of an unsharded run: its metadata,
    the whole weights (``state_dict``) and the optimizer states keyed by parameter position, as
    ``Optimizer.state_dict`` keys them (``optimizer_states``). One process, no process group: every
    shard of every tensor is read, nothing pickled in it run (``sharded_files``)."""
    from attnlab.training.sharded_files import read_sharded

    whole, meta = read_sharded(checkpoint.resolve())
    optimizers = sorted(k for k in whole if k.startswith(OPTIMIZER_PREFIX))
    states = [by_position(fuse_optimizer_state(whole[k])) for k in optimizers]
    return {**meta, "state_dict": fuse_projections(whole["state_dict"]), "optimizer_states": states}


def by_position(state: dict[str, Any]) -> dict[str, Any]:
    """An optimizer state keyed by parameter name (``get_optimizer_state_dict``'s form, in which sharded
    checkpoints hold it) keyed instead by each parameter's position over the parameter groups."""
    names = [name for group in state["param_groups"] for name in group["params"]]
    position = {name: i for i, name in enumerate(names)}
    groups = [{**g, "params": [position[n] for n in g["params"]]} for g in state["param_groups"]]
    return {"state": {position[n]: s for n, s in state["state"].items()}, "param_groups": groups}
