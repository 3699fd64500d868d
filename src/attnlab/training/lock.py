"""One run per directory: the process that writes a run directory holds its lock file, ``run.lock``.

Two runs writing one directory at once interleave their checkpoints, logs and summaries into a
directory that belongs to neither, and the loser may even report ``completed``. So rank 0 claims the
directory before anything is written into it (validation's last step, before Hydra makes its files),
and a second run on it stops with one line, touching nothing.

The lock is an advisory ``flock`` on the file, which the kernel drops when its process ends however
it ends (SIGKILL, a crash, a lost node): a lock file that nobody holds is the stale one of a dead
run, and the next run takes it over. The file says who holds it (pid, host, start time) for the
message of the run refused; it is removed when its run ends.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import json
import os
import socket
from contextlib import suppress
from datetime import datetime, timezone
from pathlib import Path

from attnlab.schema.errors import ConfigError
from attnlab.schema.rundir import LOCK_FILE, checkpoint_dir, points_elsewhere
from attnlab.training.files import disk_full, is_disk_full

HYDRA_DIR = ".hydra"  # Hydra's files of the job
_held: dict[Path, int] = {}  # the run directories this process holds: their lock files' descriptors


def lock_run_dir(run_dir: Path, key: str = "run_dir") -> None:
    """Hold ``run_dir`` (created if missing) for this process until ``unlock_run_dirs``; again for a
    directory already held is nothing. ConfigError naming ``key`` when another live process holds it,
    when it is a file, or when it cannot be written (a full disk included)."""
    run_dir = Path(run_dir).absolute()
    if run_dir in _held:
        return
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(key, run_dir, "is a file, not a directory: give a directory for the run")
    check_no_live_run_above(run_dir, key)
    made = not run_dir.exists()
    refuse_links(run_dir, key)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        _held[run_dir] = _lock(run_dir / LOCK_FILE, key, run_dir)
    except OSError as err:
        if made:  # a full disk leaves no empty run directory behind
            with suppress(OSError):
                run_dir.rmdir()
        if is_disk_full(err):
            raise ConfigError(key, run_dir, disk_full(run_dir, cause=err.errno).strerror) from None
        raise ConfigError(key, run_dir, f"cannot be written: {err.strerror or err}") from None


def refuse_links(run_dir: Path, key: str) -> None:
    """ConfigError naming ``key`` where ``run_dir``, its ``checkpoints/`` or ``.hydra/`` hold a link
    (``points_elsewhere``: any but a sharded checkpoint's to its version beside it): a run writes and
    removes its files there (the lock, metrics, summary, checkpoints and their clean-up), and through
    a link it would write or delete what the link points to, outside the run directory included."""
    for folder in (run_dir, checkpoint_dir(run_dir), run_dir / HYDRA_DIR):  # a linked folder: in run_dir's
        for path in sorted(folder.iterdir()) if folder.is_dir() and not folder.is_symlink() else []:
            if points_elsewhere(path):
                raise ConfigError(
                    key,
                    run_dir,
                    f"holds a link, {path.relative_to(run_dir)} (to {os.readlink(path)}), where a run writes "
                    "and removes files: remove the link, or give another run_dir",
                )


def check_no_live_run_above(run_dir: Path, key: str = "run_dir") -> None:
    """ConfigError if a folder above ``run_dir`` is held by another live process: a sweep holds its
    sweep folder, and its job folders are its own (a run there would mix its files with the job's, or
    be overwritten by it). Its lock is tried, not taken: released at once if nobody holds it."""
    for parent in run_dir.parents:
        lock = parent / LOCK_FILE
        if parent in _held or lock.is_symlink() or not lock.is_file():
            continue
        try:
            fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(
                key,
                run_dir,
                f"is inside {parent}, which another run holds ({_owner(fd)}, its {LOCK_FILE}): a live "
                "sweep's job folders are its own; give a run_dir outside it",
            ) from None
        finally:
            os.close(fd)


def _lock(path: Path, key: str, run_dir: Path) -> int:
    """The descriptor of ``path``, locked by this process and naming it; ConfigError if a live process
    holds it. A lock file removed by its owner between our open and our lock is opened again."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)  # never through a link
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _owner(fd)
            os.close(fd)
            raise ConfigError(
                key,
                run_dir,
                f"is in use by another run ({owner}, its {LOCK_FILE}): one run per directory; "
                "wait for it to end, or give another run_dir",
            ) from None
        if _same_file(fd, path):
            break
        os.close(fd)  # its owner ended and removed it meanwhile: lock the file that is there now
    try:
        _write_owner(fd)
    except OSError:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    return fd


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _write_owner(fd: int) -> None:
    """Who holds the lock: what the message of a refused run shows."""
    owner = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    data = (json.dumps(owner) + "\n").encode()
    os.ftruncate(fd, 0)
    if os.pwrite(fd, data, 0) != len(data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _owner(fd: int) -> str:
    """``pid <pid> on <host> since <time>`` from a held lock file, as far as it says."""
    try:
        owner = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {owner['pid']} on {owner['host']} since {owner['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not said who it is yet"


def new_dir(path: Path) -> Path:
    """``path``, else ``<path>_2``, ``<path>_3``, ...: the first that did not exist, made here. ``mkdir``
    fails on a folder that exists, so two processes never get the same one."""
    for n in itertools.count(1):
        folder = path if n == 1 else path.with_name(f"{path.name}_{n}")
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
    raise AssertionError("unreachable")


def unlock_run_dirs() -> None:
    """Remove and unlock the lock files this process holds (the kernel unlocks them at exit anyway)."""
    while _held:
        run_dir, fd = _held.popitem()
        (run_dir / LOCK_FILE).unlink(missing_ok=True)
        os.close(fd)
