"""A full disk ends a run with one line naming the file and the space it needed: no traceback on the
console, no partial or temporary file, the checkpoints written before intact, a non-zero exit. The runs
are attnlab-train in this process (``command_here``: its exit status and what it printed)."""

from __future__ import annotations

import ctypes
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from in_process import restored
from train_cli import TEXT, TINY, command_here

pytestmark = pytest.mark.slow
ARGS = [*TINY, *TEXT, "model=gpt-tiny", "logger=csv", "sample.max_new_tokens=0"]


def assert_failed_cleanly(result: subprocess.CompletedProcess, run_dir: Path) -> str:
    """The one error line; checks that nothing partial is left in ``run_dir``."""
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert "Traceback" not in result.stderr and "Logging error" not in result.stderr, result.stderr
    assert "no space left on device to write" in errors[0], errors[0]
    assert not list(run_dir.rglob("*.tmp")), sorted(run_dir.rglob("*"))
    empty = [p for p in run_dir.rglob("*") if p.is_file() and p.stat().st_size == 0]
    assert not empty, empty
    for ckpt in (run_dir / "checkpoints").glob("*.ckpt"):
        assert torch.load(ckpt, weights_only=True)["global_step"] > 0
    return errors[0]


def test_a_failed_checkpoint_write_keeps_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The third checkpoint write (step 6's best) fails half-way; last.ckpt of step 3 stays as it was.
    The callback replaces ``open`` (ENOSPC at that write) until ``restored`` puts it back."""
    fail = "+callbacks.fault={_target_:fault_injection.DiskFullAtWrite,at:2}"
    with restored():
        result = command_here([*ARGS, "run_dir=run", fail], tmp_path, monkeypatch, capsys)
    error = assert_failed_cleanly(result, tmp_path / "run")
    assert f"{tmp_path / 'run' / 'checkpoints'}" in error and "MB free" in error, error
    last = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 3


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MB tmpfs (the size of two checkpoints of gpt-tiny), where this test may mount one: mounted by
    the C library's ``mount`` here, not by a ``mount`` process (a test starts processes only for a
    process contract)."""
    libc = ctypes.CDLL(None, use_errno=True)
    mount = tmp_path / "disk"
    mount.mkdir()
    if libc.mount(b"tmpfs", bytes(mount), b"tmpfs", 0, b"size=1m") != 0:
        pytest.skip(f"cannot mount a tmpfs here: {os.strerror(ctypes.get_errno())}")
    yield mount
    assert libc.umount(bytes(mount)) == 0, os.strerror(ctypes.get_errno())


def test_a_run_that_fills_the_disk_ends_in_one_line(
    small_disk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with restored():
        result = command_here([*ARGS, f"run_dir={small_disk / 'run'}"], tmp_path, monkeypatch, capsys)
    error = assert_failed_cleanly(result, small_disk / "run")
    assert str(small_disk / "run") in error, error
