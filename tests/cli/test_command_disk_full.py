"""A full disk (ENOSPC) or the process's file size limit (EFBIG, ``ulimit -f``) while attnlab-export,
-compress, -consolidate or -eval writes its output: one line naming the file and the space it needed,
exit 1, no traceback (torch's zip writer said ``RuntimeError: ... unexpected pos 29184 vs 29072``,
safetensors ``SafetensorError: ... (os error 27)``), and no half-written, temporary or zero-byte file.

In this process. ENOSPC is a write that gets half its bytes to the file and then fails (``open``, or
safetensors' writer, patched for the output's path); the file size limit is a real one, set on this
process for the command's duration (Python ignores SIGXFSZ, so a write past it fails with EFBIG).
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import resource
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from test_command_signal_phases import COMMON, RUNS
from train_cli import command_here, shared_tiny_checkpoints

pytestmark = pytest.mark.slow  # one tiny training run (shared), then each command in this process


@pytest.fixture(scope="module")
def checkpoint(built_once: Callable[..., Path]) -> Path:
    return shared_tiny_checkpoints(built_once, "command_signal_phases", RUNS, COMMON)("gpt")


class HalfWritten(io.RawIOBase):
    """A file opened for writing whose first write puts half its bytes on the disk, then finds it full."""

    def __init__(self, file: Any) -> None:
        self.file = file

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        data = bytes(data) if not isinstance(data, str) else data
        self.file.write(data[: len(data) // 2])
        self.file.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def close(self) -> None:
        self.file.close()
        super().close()


def full_disk_under(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Every file opened for writing under ``folder`` finds the disk full (after half its first write);
    so does safetensors' writer, whose files Python does not open."""
    import safetensors.torch
    from safetensors import SafetensorError

    real_open, real_save = builtins.open, safetensors.torch.save_file

    def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        opened = real_open(file, mode, *args, **kwargs)
        inside = isinstance(file, str | os.PathLike) and Path(file).absolute().is_relative_to(folder)
        return HalfWritten(opened) if inside and any(m in mode for m in "wax") else opened

    def save_file(tensors: dict, filename: Any, *args: Any, **kwargs: Any) -> None:
        real_save(tensors, filename, *args, **kwargs)
        size = Path(filename).stat().st_size
        os.truncate(filename, size // 2)
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(safetensors.torch, "save_file", save_file)


@contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """This process's file size limit (``ulimit -f``) at ``limit`` bytes meanwhile."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def assert_nothing_half_written(folder: Path) -> None:
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert not [p for p in files if p.name.endswith(".tmp") or ".tmp" in p.parts[-2:-1]], files
    assert not [p for p in files if p.stat().st_size == 0], files


def command_args(command: str, checkpoint: Path, out: Path) -> tuple[list[str], Path]:
    """The command line writing into ``out``, and the file or folder the error must name."""
    if command == "export":
        return [f"ckpt_path={checkpoint}", f"out={out / 'exported'}"], out / "exported"
    if command == "compress":
        return [f"ckpt_path={checkpoint}", "method=int8", f"out={out / 'small.ckpt'}"], out / "small.ckpt"
    return [f"ckpt_path={checkpoint}", f"hydra.run.dir={out / 'ev'}"], out / "ev" / "metrics.json"


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


@pytest.mark.parametrize("command", ["export", "compress", "eval"])
def test_a_full_disk_while_writing_the_output_is_one_line_naming_the_file(
    checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    args, named = command_args(command, checkpoint, out)
    target = named.parent if command == "eval" else out
    if command == "eval":  # its folder (Hydra's files, the tokenizer) is written; metrics.json finds no room
        real_open = builtins.open

        def open_(file: Any, mode: str = "r", *a: Any, **k: Any) -> Any:
            opened = real_open(file, mode, *a, **k)
            metrics = isinstance(file, str | os.PathLike) and Path(file).name.startswith("metrics.json")
            return HalfWritten(opened) if metrics and "w" in mode else opened

        monkeypatch.setattr(builtins, "open", open_)
    else:
        full_disk_under(monkeypatch, out)

    result = command_here(args, tmp_path, monkeypatch, capsys, command)

    monkeypatch.undo()
    assert result.returncode == 1, result.stderr
    lines = errors(result.stderr)
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(f"error: no space left on device to write {named}: needs "), lines[0]
    if command != "eval":
        assert "needs about 0.1" in lines[0], lines[0]  # the output's size, about 0.10-0.14 MB
        assert sorted(out.iterdir()) == []
    assert not named.exists()
    assert_nothing_half_written(target)


def test_consolidate_on_a_full_disk_is_one_line_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_sharded_files import write_sharded

    from attnlab.cli.consolidate import main

    sharded = write_sharded(tmp_path / "last.ckpt")
    out = tmp_path / "out"
    out.mkdir()
    full_disk_under(monkeypatch, out)
    with pytest.raises(SystemExit) as exit_:
        main([str(sharded), "--out", str(out / "whole.ckpt")])
    monkeypatch.undo()
    err = capsys.readouterr().err.splitlines()
    assert exit_.value.code == 1, err
    assert len(err) == 1 and err[0].startswith(
        f"error: no space left on device to write {out / 'whole.ckpt'}: "
    )
    assert "needs about " in err[0], err[0]
    assert sorted(out.iterdir()) == []


@pytest.mark.parametrize("command", ["export", "compress"])
def test_a_file_size_limit_while_writing_the_output_is_one_line(
    checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    """A real 50 KB limit: int8 gpt-tiny (about 100 KB) and its safetensors (about 140 KB) pass it."""
    out = tmp_path / "out"
    out.mkdir()
    args, named = command_args(command, checkpoint, out)
    with file_size_limit(50 * 1024):
        result = command_here(args, tmp_path, monkeypatch, capsys, command)
    assert result.returncode == 1, result.stderr
    lines = errors(result.stderr)
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(f"error: cannot write {named}: it needs about 0.1"), lines[0]
    assert lines[0].endswith(
        "MB, past this process's file size limit (0.05 MB, ulimit -f): raise the limit or free it"
    ), lines[0]
    assert sorted(out.iterdir()) == []


def test_eval_saving_its_tokenizer_on_a_full_disk_is_one_line_and_no_half_file(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tokenizer is written by a library in Rust, whose error names the errno in its text only
    (``Exception: No space left on device (os error 28)``): the line names the evaluation's folder, and
    no half ``tokenizer.json`` is left in it."""
    from attnlab.data.tokenizers import Tokenizer

    def half_then_full(self: Tokenizer, directory: str | Path) -> Path:
        path = Path(directory) / "tokenizer.json"
        path.write_text('{"version": "1.0", "trunc')
        raise Exception("No space left on device (os error 28)")  # what tokenizers raises

    monkeypatch.setattr(Tokenizer, "save", half_then_full)
    out = tmp_path / "ev"
    result = command_here(
        [f"ckpt_path={checkpoint}", f"hydra.run.dir={out}"], tmp_path, monkeypatch, capsys, "eval"
    )
    assert result.returncode == 1, result.stderr
    lines = errors(result.stderr)
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(f"error: no space left on device to write {out}: needs "), lines[0]
    assert not (out / "tokenizer.json").exists() and not (out / "metrics.json").exists()
    assert_nothing_half_written(out)
