"""The message of a full disk does not contradict itself when the free space, measured once the partial
file is gone, looks like enough (it said "needs about 0.46 MB, 0.46 MB free")."""

from __future__ import annotations

from pathlib import Path

from attnlab.training.files import disk_full


def test_a_write_smaller_than_the_free_space_names_the_overhead(tmp_path: Path) -> None:
    message = disk_full(tmp_path / "last.ckpt", needed=1).strerror
    assert message.startswith(
        f"no space left on device to write {tmp_path / 'last.ckpt'}: needs about 0.00 MB"
    )
    assert "less than free, but not with the file system's own overhead" in message


def test_a_write_larger_than_the_free_space_says_what_it_needs(tmp_path: Path) -> None:
    message = disk_full(tmp_path / "last.ckpt", needed=2**60).strerror
    assert ": needs about " in message and "overhead" not in message and message.endswith("free some space")
