"""Where the commands write: an output folder this user may not write (read-only) is one line naming the
setting, exit 2, before any work, for eval, explain, export, compress and consolidate (they ended in
tracebacks); attnlab-eval's metrics.json is whole or absent. Tests run as root, who writes anywhere, so
a folder's permission is what ``os.access`` reports: the check is what is tested."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from train_cli import TEXT, run_command, tiny_checkpoints

COMMON = ["trainer.max_steps=2", "logger=none", "test_after_fit=false", "sample.max_new_tokens=0"]
RUNS = {"gpt": ["model=gpt-tiny", *TEXT, "data.batch_size=4", "trainer.val_every_n_steps=2"]}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    return tiny_checkpoints(tmp_path_factory, RUNS, COMMON)


@pytest.fixture
def read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder that ``os.access`` says this user may not write."""
    folder = tmp_path / "read-only"
    folder.mkdir(mode=0o555)
    access = os.access

    def no_write_here(path: str | os.PathLike, mode: int, **kwargs: object) -> bool:
        if Path(path) == folder and mode & os.W_OK:
            return False
        return access(path, mode, **kwargs)

    monkeypatch.setattr(os, "access", no_write_here)
    return folder


@pytest.mark.parametrize(
    ("command", "args", "key"),
    [
        ("eval", ["hydra.run.dir={out}"], "hydra.run.dir"),
        ("explain", ["input=hi", "out_dir={out}"], "out_dir"),
        ("export", ["out={out}"], "out"),
        ("compress", ["out={out}"], "out"),
    ],
)
def test_a_read_only_output_folder_is_one_line(
    command: str,
    args: list[str],
    key: str,
    checkpoint: Callable[[str], Path],
    read_only: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = read_only / "out"
    main = importlib.import_module(f"attnlab.cli.{command}").main
    argv = [f"ckpt_path={checkpoint('gpt')}", *(a.format(out=out) for a in args)]
    assert run_command(main, argv, monkeypatch, capsys) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: {key}={out}: {read_only} cannot be written by this user: choose another folder, or change "
        "its permissions"
    ]
    assert list(read_only.iterdir()) == []


def test_consolidate_into_a_read_only_folder_is_one_line(
    read_only: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_sharded_files import write_sharded

    from attnlab.cli.consolidate import main

    checkpoint = write_sharded(tmp_path / "last.ckpt")
    with pytest.raises(SystemExit) as exit_:
        main([str(checkpoint), "--out", str(read_only / "whole.ckpt")])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: --out={read_only / 'whole.ckpt'}: {read_only} cannot be written by this user: choose another "
        "folder, or change its permissions"
    ]


class Killed(BaseException):
    """Stands for a kill at the moment it is raised."""


def test_eval_killed_while_writing_its_metrics_leaves_no_half_file(
    checkpoint: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``metrics.json`` is written whole beside itself, then renamed: a kill before the rename leaves no
    ``metrics.json`` (it left a 0-byte one, which made attnlab-report refuse the whole run tree)."""
    import attnlab.training.files as files
    from attnlab.cli.eval import main

    rename = os.replace

    def killed_at_the_rename(src: str | os.PathLike, dst: str | os.PathLike) -> None:
        if Path(dst).name == "metrics.json":
            raise Killed
        rename(src, dst)

    monkeypatch.setattr(files.os, "replace", killed_at_the_rename)
    out = tmp_path / "ev"
    with pytest.raises(Killed):
        run_command(main, [f"ckpt_path={checkpoint('gpt')}", f"hydra.run.dir={out}"], monkeypatch)
    assert out.is_dir() and not (out / "metrics.json").exists()
    assert not list(out.glob("*.tmp"))
