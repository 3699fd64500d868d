"""Files of a run written whole or not at all: a kill or a full disk leaves the old file or the new one,
never half of one, and no temporary file; a full disk is one error naming the file and the space needed."""

from __future__ import annotations

import errno
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

TMP_SUFFIX = ".tmp"


class DiskFullError(OSError):
    """A write failed for lack of space; the message names the file, the space it needed and what was free."""


def disk_full(path: Path, needed: int | None = None, cause: int = errno.ENOSPC) -> DiskFullError:
    """The error of a write of ``needed`` bytes to ``path`` that found the disk full (``cause`` ENOSPC or
    EDQUOT) or the process's file size limit (EFBIG: ``ulimit -f``). The free space is measured after
    the partial file was removed, so it can look like enough: a file system needs room beyond a file's
    bytes (blocks, metadata), and the message says so rather than contradict itself; sizes that would
    print alike are printed in bytes."""
    if cause == errno.EFBIG:
        return DiskFullError(errno.EFBIG, f"cannot write {path}: {past_the_size_limit(needed)}")
    where = path if path.is_dir() else path.parent
    free = shutil.disk_usage(where).free if where.exists() else 0
    wanted, there = sizes(needed or 0, free)
    if not needed:
        need = f"needs more space than the {there} free"
    elif needed < free:
        need = (
            f"needs about {wanted}, less than the {there} free, but not with the file system's own overhead"
        )
    else:
        need = f"needs about {wanted}; {there} free"
    return DiskFullError(errno.ENOSPC, f"no space left on device to write {path}: {need}: free some space")


def past_the_size_limit(needed: int | None) -> str:
    """What a write refused by the file size limit (EFBIG) needed, against the limit."""
    import resource

    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    shown = "none" if limit == resource.RLIM_INFINITY else sizes(limit, needed or 0)[0]
    need = f"it needs about {sizes(needed, limit)[0]}, " if needed else ""
    return f"{need}past this process's file size limit ({shown}, ulimit -f): raise the limit or free it"


def sizes(a: int, b: int) -> tuple[str, str]:
    """``a`` and ``b`` in MB, or in bytes where two decimals of MB would show them equal."""
    mb = f"{a / 2**20:.2f} MB", f"{b / 2**20:.2f} MB"
    return mb if mb[0] != mb[1] or a == b else (f"{a} bytes", f"{b} bytes")


def is_disk_full(err: BaseException) -> bool:
    """A write that found no room: the disk (ENOSPC), a quota (EDQUOT), the file size limit (EFBIG)."""
    return isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


# A Rust writer's I/O error (safetensors' ``save_file``, tokenizers' ``save``) carries the errno in its
# text only: Rust's io::Error reads "No space left on device (os error 28)".
OS_ERROR_IN_TEXT = re.compile(r"\(os error (\d+)\)")


def writer_os_error(err: BaseException) -> OSError | None:
    """The OSError behind a failed write: ``err`` itself, or the errno that a library writing in
    another language names in its message (safetensors: ``SafetensorError: ... No space left on
    device (os error 28)``); None for anything else."""
    if isinstance(err, OSError):
        return err
    found = OS_ERROR_IN_TEXT.search(str(err)) if isinstance(err, Exception) else None
    return OSError(int(found.group(1)), os.strerror(int(found.group(1)))) if found else None


def disk_full_line(err: OSError, where: Path) -> str:
    """The one line of a full disk: DiskFullError's (the file, the space), else the file named by
    ``err`` (or ``where``)."""
    if not isinstance(err, DiskFullError):
        err = disk_full(Path(err.filename) if err.filename else where, cause=err.errno)
    return err.strerror


@contextmanager
def disk_full_in_one_line(where: Path | None = None) -> Iterator[None]:
    """A full disk (or the file size limit) ends the command with one ``error:`` line naming the file
    (else ``where``, default the working directory) and status 1, no traceback."""
    try:
        yield
    except OSError as err:
        if not is_disk_full(err):
            raise
        print(f"error: {disk_full_line(err, where or Path.cwd())}", file=sys.stderr)
        sys.exit(1)


@contextmanager
def staged(path: Path, needed: Callable[[], int | None] = lambda: None) -> Iterator[Path]:
    """Yields ``<path>.tmp`` to write; renames it over ``path`` afterwards, removes it on any failure
    (a full disk becomes DiskFullError naming ``path``). A leftover ``<path>.tmp`` that is a link is
    removed first (the link, not what it points to): nothing is written through it."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    if tmp.is_symlink():
        tmp.unlink()
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if is_disk_full(err):
            raise disk_full(path, needed(), err.errno) from None
        raise


@contextmanager
def staged_new(
    path: Path, overwrite: bool = False, needed: Callable[[], int | None] = lambda: None
) -> Iterator[Path]:
    """Yields a temporary file of this process's own beside ``path`` (``<path>.<random>.tmp``, created
    here: never a leftover or a link) to write; then publishes it as ``path``: replacing what is there
    with ``overwrite``, else with a hard link, which fails (FileExistsError) where ``path`` exists, so
    that of two writers at once the second learns it. Nothing is left behind on any failure (a full
    disk becomes DiskFullError naming ``path`` and, where ``needed`` can tell, the bytes it needed)."""
    fd, name = tempfile.mkstemp(prefix=f"{path.name}.", suffix=TMP_SUFFIX, dir=path.parent)
    os.fchmod(fd, 0o666 & ~umask())  # mkstemp's is 0600: the mode any new file gets instead
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    except OSError as err:
        if is_disk_full(err):
            raise disk_full(path, needed(), err.errno) from None
        raise
    finally:
        tmp.unlink(missing_ok=True)


def torch_save(obj: object, path: Path) -> None:
    """``torch.save(obj, path)``, but a failed write raises what the file raised (an OSError: ENOSPC,
    EFBIG, ...; a signal's ``RunInterrupted`` arriving mid-write) instead of the RuntimeError torch's zip
    writer makes of it (``unexpected pos 29184 vs 29072``), which names neither the file nor the cause."""
    import torch

    with open(path, "wb") as file:
        recording = RecordingWriter(file)
        try:
            torch.save(obj, recording)
        except RuntimeError:
            from attnlab.training.signals import policy

            error = recording.error or (policy.raised if policy.stopping else None)
            if error is not None:  # a signal that landed in the writer outside its ``try``: the handler's
                raise error from None
            raise


class RecordingWriter:
    """A binary file's ``write`` (and ``flush``) that keeps the first exception a write raised, for
    ``torch_save`` to raise in place of torch's own."""

    def __init__(self, file: object) -> None:
        self.file, self.error = file, None

    def write(self, data: bytes) -> int:
        try:
            return self.file.write(data)
        except BaseException as err:
            self.error = self.error or err
            raise

    def flush(self) -> None:
        self.file.flush()


def saved_size(obj: object) -> int:
    """The bytes ``torch.save`` writes for ``obj``, counted without keeping them."""
    import torch

    counter = ByteCounter()
    torch.save(obj, counter)
    return counter.size


class ByteCounter:
    """A writable sink that keeps only the count of the bytes written to it."""

    size = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        return len(data)

    def flush(self) -> None:
        pass


def umask() -> int:
    """This process's file-creation mask (read by setting it, then set back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomically(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` through ``<path>.tmp``."""
    with staged(path, lambda: len(text.encode())) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def write_bytes_durably(path: Path, data: bytes | memoryview) -> Path:
    """Write ``data`` to ``path`` through ``<path>.tmp``, flushed to the disk (fsync) before the rename:
    a checkpoint that a crash right after would leave empty is no checkpoint."""
    with staged(path, lambda: len(data)) as tmp, open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return path


def save_into(directory: Path, save: Callable[[Path], object]) -> list[Path]:
    """Run ``save(staging_dir)`` and move the files it wrote into ``directory`` one rename each (for
    writers that write their files in place, such as a tokenizer's ``save``): a full disk leaves none
    of them, half-written or whole, and is a DiskFullError naming ``directory`` (also where the writer
    is a library in another language that names the errno in its message only)."""
    staging = directory / f".staging{TMP_SUFFIX}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        save(staging)
        moved = []
        for file in sorted(staging.iterdir()):
            os.replace(file, directory / file.name)
            moved.append(directory / file.name)
        return moved
    except Exception as err:
        cause = writer_os_error(err)
        if cause is not None and is_disk_full(cause):
            raise disk_full(directory, cause=cause.errno) from None
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
