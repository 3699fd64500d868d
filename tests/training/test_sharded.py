"""Publishing sharded checkpoints (``attnlab.training.sharded``): ``<name>`` always points at a whole
checkpoint; what a kill leaves beside it is found and removed; a file is no sharded checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnlab.cli.consolidate import main as consolidate_main
from attnlab.schema.rundir import SHARDED_INDEX, SHARDED_META, is_sharded_checkpoint
from attnlab.training.callbacks.checkpoints import remove_stale_files
from attnlab.training.sharded import VERSION, publish, remove, staging_dir, stale_versions


def write_shards(directory: Path, text: str) -> Path:
    """A stand-in for what every process writes: the index, a shard, Lightning's metadata."""
    directory.mkdir()
    for name in (SHARDED_INDEX, "__0_0.distcp", SHARDED_META):
        (directory / name).write_text(text)
    return directory


def test_publish_replaces_the_checkpoint_in_one_step_and_removes_the_old_one(tmp_path: Path) -> None:
    target = tmp_path / "last.ckpt"
    publish(write_shards(staging_dir(target), "step 10"), target)
    first = target.resolve()
    assert target.is_symlink() and is_sharded_checkpoint(target)
    assert (target / SHARDED_META).read_text() == "step 10"
    publish(write_shards(staging_dir(target), "step 20"), target)
    assert (target / SHARDED_META).read_text() == "step 20"
    assert not first.exists() and not staging_dir(target).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", target.resolve().name]


def test_what_a_kill_leaves_is_stale_and_removed_at_the_next_start(tmp_path: Path) -> None:
    target = tmp_path / "last.ckpt"
    publish(write_shards(staging_dir(target), "step 10"), target)
    write_shards(staging_dir(target), "half of step 20")  # killed while writing
    orphan = write_shards(tmp_path / f"last.ckpt{VERSION}123", "killed before the link moved")
    best = tmp_path / "best-step000010.ckpt"
    publish(write_shards(staging_dir(best), "best, no longer kept"), best)
    assert stale_versions(tmp_path) == [orphan]
    removed = remove_stale_files(tmp_path, keep=set())
    assert {p.name for p in removed} >= {"last.ckpt.tmp", best.name, orphan.name}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", target.resolve().name]
    assert (target / SHARDED_META).read_text() == "step 10"


def test_remove_takes_the_link_and_its_version(tmp_path: Path) -> None:
    target = tmp_path / "best-step000010.ckpt"
    publish(write_shards(staging_dir(target), "x"), target)
    remove(target)
    assert list(tmp_path.iterdir()) == []


def test_consolidate_refuses_what_is_not_a_sharded_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "last.ckpt").write_bytes(b"a file")
    with pytest.raises(SystemExit) as exit_:
        consolidate_main([str(tmp_path / "last.ckpt")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"error: checkpoint={tmp_path / 'last.ckpt'}: not a sharded checkpoint")
        and err.count("\n") == 1
    )
