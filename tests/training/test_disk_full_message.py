"""The message of a full disk names the file and the space it needed without contradicting itself: when
the free space, measured once the partial file is gone, looks like enough (it said "needs about 0.46 MB,
0.46 MB free"), or when two sizes would print alike; a write past the file size limit (``ulimit -f``,
EFBIG) says so. Any command turns such an error into one line (``disk_full_in_one_line``)."""

from __future__ import annotations

import errno
import resource
from pathlib import Path

import pytest

from attnlab.training.files import disk_full, disk_full_in_one_line, is_disk_full, sizes


def test_a_write_smaller_than_the_free_space_names_the_overhead(tmp_path: Path) -> None:
    message = disk_full(tmp_path / "last.ckpt", needed=1).strerror
    assert message.startswith(
        f"no space left on device to write {tmp_path / 'last.ckpt'}: needs about 0.00 MB"
    )
    assert "free, but not with the file system's own overhead" in message


def test_a_write_larger_than_the_free_space_says_what_it_needs(tmp_path: Path) -> None:
    message = disk_full(tmp_path / "last.ckpt", needed=2**60).strerror
    assert ": needs about " in message and "overhead" not in message and message.endswith("free some space")


def test_sizes_that_would_print_alike_are_printed_in_bytes() -> None:
    assert sizes(482_000, 481_000) == ("482000 bytes", "481000 bytes")
    assert sizes(2 * 2**20, 2**20) == ("2.00 MB", "1.00 MB")


def test_a_write_past_the_file_size_limit_says_so(tmp_path: Path) -> None:
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    error = disk_full(tmp_path / "last.ckpt", needed=3 * 2**20, cause=errno.EFBIG)
    assert is_disk_full(error) and is_disk_full(OSError(errno.EFBIG, "File too large"))
    shown = "none" if limit == resource.RLIM_INFINITY else sizes(limit, 3 * 2**20)[0]
    assert error.strerror == (
        f"cannot write {tmp_path / 'last.ckpt'}: it needs about 3.00 MB, past this process's file size "
        f"limit ({shown}, ulimit -f): raise the limit or free it"
    )


def test_any_commands_full_disk_is_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ended, disk_full_in_one_line():
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "metrics.json"))
    assert ended.value.code == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: no space left on device to write {tmp_path / 'metrics.json'}: ")
