"""No write or deletion follows a link out of a run directory or an output folder: a linked ``run.lock``,
``metrics.jsonl``, best checkpoint or ``ckpt_path`` is refused in one line naming it, and what the link
points to, outside, is left byte for byte as it was."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from train_cli import TEXT, TINY, command_here

from attnlab.schema.errors import ConfigError
from attnlab.schema.rundir import LOCK_FILE, METRICS_FILE, check_checkpoint_file
from attnlab.training.callbacks.checkpoints import remove_stale_files
from attnlab.training.files import write_atomically
from attnlab.training.lock import lock_run_dir, unlock_run_dirs
from attnlab.training.rundir import resolve_ckpt_path
from attnlab.training.sharded import remove


def fingerprint(path: Path) -> dict[str, str]:
    """Every file under ``path`` (or ``path`` itself) by its bytes' digest."""
    files = sorted(path.rglob("*")) if path.is_dir() else [path]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.is_file()}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside the run directory, with a file in it: what a link points to."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "precious.txt").write_text("not attnlab's\n")
    return folder


def test_removing_a_best_checkpoint_linked_outside_removes_only_the_link(
    tmp_path: Path, outside: Path
) -> None:
    """The clean-up of best checkpoints a resume does not know deleted the folder a link pointed to."""
    checkpoints = tmp_path / "run" / "checkpoints"
    checkpoints.mkdir(parents=True)
    before = fingerprint(outside)
    (checkpoints / "best-step000010.ckpt").symlink_to(outside, target_is_directory=True)
    (checkpoints / "last.ckpt.tmp").symlink_to(outside, target_is_directory=True)
    (checkpoints / "x.shards-1").symlink_to(outside, target_is_directory=True)  # not a version: a link
    remove_stale_files(checkpoints, keep=set())
    assert fingerprint(outside) == before
    assert sorted(p.name for p in checkpoints.iterdir()) == ["x.shards-1"]  # a link never removed as one
    (checkpoints / "best-step000020.ckpt").symlink_to(outside / "precious.txt")
    remove(checkpoints / "best-step000020.ckpt")
    assert fingerprint(outside) == before


@pytest.mark.parametrize(
    "name", [LOCK_FILE, METRICS_FILE, "summary.json", "checkpoints/best-step000010.ckpt", "config.yaml.tmp"]
)
def test_a_run_directory_holding_a_link_is_refused_before_anything_is_written(
    name: str, tmp_path: Path, outside: Path
) -> None:
    run_dir = tmp_path / "run"
    (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
    (run_dir / name).symlink_to(outside / "precious.txt")
    before = fingerprint(outside)
    try:
        with pytest.raises(ConfigError) as err:
            lock_run_dir(run_dir)
    finally:
        unlock_run_dirs()
    assert str(err.value) == (
        f"run_dir={run_dir}: holds a link, {name} (to {outside / 'precious.txt'}), where a run writes and "
        "removes files: remove the link, or give another run_dir"
    )
    assert fingerprint(outside) == before and (run_dir / name).is_symlink()


def test_a_linked_checkpoints_folder_is_refused(tmp_path: Path, outside: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "checkpoints").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ConfigError, match=f"holds a link, checkpoints \\(to {outside}\\), where"):
        lock_run_dir(run_dir)
    unlock_run_dirs()


def test_a_sharded_checkpoints_own_link_is_no_link_out(tmp_path: Path) -> None:
    """``last.ckpt`` -> ``last.ckpt.shards-<n>`` beside it is how sharded checkpoints are published."""
    checkpoints = tmp_path / "run" / "checkpoints"
    (checkpoints / "last.ckpt.shards-5").mkdir(parents=True)
    (checkpoints / "last.ckpt").symlink_to("last.ckpt.shards-5", target_is_directory=True)
    lock_run_dir(tmp_path / "run")
    unlock_run_dirs()


def test_a_ckpt_path_that_is_a_link_is_refused_in_one_line(tmp_path: Path, outside: Path) -> None:
    link = tmp_path / "last.ckpt"
    link.symlink_to(outside / "precious.txt")
    allowed = f"is a link (to {outside / 'precious.txt'}): give the file itself, not a link to it"
    for check in (
        lambda: resolve_ckpt_path(str(link), tmp_path),
        lambda: check_checkpoint_file("ckpt_path", link),
    ):
        with pytest.raises(ConfigError) as err:
            check()
        assert str(err.value) == f"ckpt_path={link}: {allowed}"
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").symlink_to(outside / "precious.txt")
    with pytest.raises(ConfigError, match="is a link"):
        resolve_ckpt_path("last", tmp_path)


def test_sample_and_explain_refuse_a_linked_checkpoint(tmp_path: Path, outside: Path) -> None:
    from attnlab.checkpoint import load_checkpoint

    link = tmp_path / "last.ckpt"
    link.symlink_to(outside / "precious.txt")
    with pytest.raises(FileNotFoundError, match="is a link"):
        load_checkpoint(link)


def test_a_leftover_temporary_link_is_never_written_through(tmp_path: Path, outside: Path) -> None:
    before = fingerprint(outside)
    (tmp_path / "summary.json.tmp").symlink_to(outside / "precious.txt")
    write_atomically(tmp_path / "summary.json", "{}")
    assert (tmp_path / "summary.json").read_text() == "{}" and fingerprint(outside) == before
    assert not (tmp_path / "summary.json.tmp").exists()


def test_train_refuses_a_linked_lock_in_one_line(
    tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole command (in this process): exit 2, one line, the file the link points to unchanged."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / LOCK_FILE).symlink_to(outside / "precious.txt")
    before = fingerprint(outside)
    args = [*TINY, *TEXT, "model=gpt-tiny", "logger=none", "run_dir=run"]
    result = command_here(args, tmp_path, monkeypatch, capsys)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: run_dir={tmp_path / 'run'}: holds a link, {LOCK_FILE} (to {outside / 'precious.txt'}), where "
        "a run writes and removes files: remove the link, or give another run_dir"
    ]
    assert fingerprint(outside) == before
