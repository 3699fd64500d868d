"""A sharded checkpoint never runs code: its index (``.metadata``), the pickled values in its shards and
its ``meta.pt`` are each refused in the one line of a hostile plain checkpoint, by every reader (resume's
checks, the two loads of a resume, attnlab-consolidate, and eval, export and sample), and no marker file
is ever written; a checkpoint DCP wrote reads back whole."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import pytest
import torch
from train_cli import RunsCode, run_command

from attnlab.schema.errors import PICKLED_CODE, ConfigError
from attnlab.schema.rundir import SHARDED_INDEX, SHARDED_META
from attnlab.training.resume import read_run_state
from attnlab.training.sharded_files import read_sharded

WEIGHTS = {
    "layer.weight": torch.arange(12.0).reshape(3, 4),
    "layer.bias": torch.ones(3, dtype=torch.bfloat16),
}
OPTIMIZER = {
    "state": {"layer.weight": {"step": torch.tensor(3.0)}},
    "param_groups": [{"lr": 0.1, "params": ["layer.weight"]}],
}


def write_sharded(directory: Path, **extra: object) -> Path:
    """A sharded checkpoint as DCP and Lightning write one (weights, an optimizer, ``meta.pt``), with
    ``extra`` values stored beside them in the shards."""
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        dcp.save(
            {"state_dict": WEIGHTS, "optimizer_0": OPTIMIZER, **extra}, checkpoint_id=directory, no_dist=True
        )
    torch.save({"global_step": 3, "epoch": 0}, directory / SHARDED_META)
    return directory


def hostile(kind: str, tmp_path: Path) -> tuple[Path, Path]:
    """A sharded checkpoint whose ``kind`` (index, value or meta) would create the marker; both paths."""
    marker = tmp_path / "ran"
    checkpoint = write_sharded(
        tmp_path / "last.ckpt", **({"evil": RunsCode(marker)} if kind == "value" else {})
    )
    if kind == "index":
        (checkpoint / SHARDED_INDEX).write_bytes(pickle.dumps(RunsCode(marker)))
    if kind == "meta":
        torch.save({"global_step": 3, "evil": RunsCode(marker)}, checkpoint / SHARDED_META)
    return checkpoint, marker


KINDS = ["index", "value", "meta"]


def test_a_checkpoint_dcp_wrote_reads_back_whole(tmp_path: Path) -> None:
    saved, meta = read_sharded(write_sharded(tmp_path / "last.ckpt"))
    assert meta == {"global_step": 3, "epoch": 0}
    for name, tensor in WEIGHTS.items():
        assert (
            torch.equal(saved["state_dict"][name], tensor) and saved["state_dict"][name].dtype == tensor.dtype
        )
    assert saved["optimizer_0"]["param_groups"] == OPTIMIZER["param_groups"]


@pytest.mark.parametrize("kind", KINDS)
def test_resume_refuses_before_the_run_directory(kind: str, tmp_path: Path) -> None:
    """``read_run_state`` is what attnlab-train's validation reads a ``ckpt_path`` with."""
    checkpoint, marker = hostile(kind, tmp_path)
    with pytest.raises(ConfigError) as err:
        read_run_state(str(checkpoint))
    assert str(err.value) == f"ckpt_path={checkpoint}: {PICKLED_CODE}"
    assert not marker.exists()


@pytest.mark.parametrize("kind", KINDS)
def test_both_loads_of_a_resume_refuse(kind: str, tmp_path: Path) -> None:
    """Lightning's under fsdp2 (through the strategy), and the whole read of a run without sharding."""
    from attnlab.training.callbacks import AtomicCheckpointIO
    from attnlab.training.trainer import FullyShardedStrategy

    checkpoint, marker = hostile(kind, tmp_path)
    for load in (FullyShardedStrategy().load_checkpoint, AtomicCheckpointIO().load_checkpoint):
        with pytest.raises(ConfigError, match="could run code, so it is not loaded"):
            load(checkpoint)
    assert not marker.exists()


@pytest.mark.parametrize("kind", KINDS)
def test_consolidate_refuses_in_one_line(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from attnlab.cli.consolidate import main

    checkpoint, marker = hostile(kind, tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main([str(checkpoint)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines() == [f"error: checkpoint={checkpoint}: {PICKLED_CODE}"]
    assert not marker.exists() and not (tmp_path / "whole-last.ckpt").exists()


def test_an_index_naming_a_shard_outside_the_checkpoint_is_refused(tmp_path: Path) -> None:
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    checkpoint = write_sharded(tmp_path / "last.ckpt")
    with open(checkpoint / SHARDED_INDEX, "rb") as file:
        index = pickle.load(file)  # written just above by DCP
    place = next(iter(index.storage_data))
    index.storage_data[place] = _StorageInfo("../../secret", 0, 10)
    (checkpoint / SHARDED_INDEX).write_bytes(pickle.dumps(index))
    with pytest.raises(ConfigError, match=r"names a shard file outside it \('../../secret'\)"):
        read_run_state(str(checkpoint))


@pytest.mark.parametrize("command", ["eval", "export", "sample"])
def test_commands_that_read_one_file_refuse_a_sharded_one_unread(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib

    main = importlib.import_module(f"attnlab.cli.{command}").main
    checkpoint, marker = hostile("index", tmp_path)
    args = [f"ckpt_path={checkpoint}", *([f"out={tmp_path / 'out'}"] if command == "export" else [])]
    assert run_command(main, args, monkeypatch, capsys) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "sharded" in line and line.endswith(f"attnlab-consolidate {checkpoint}")
    assert not marker.exists() and not (tmp_path / "out").exists()


# -- where attnlab-consolidate writes ---------------------------------------------------------------


def consolidate(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], list[str]]:
    """attnlab-consolidate's exit status, stdout and stderr lines."""
    from attnlab.cli.consolidate import main

    capsys.readouterr()
    try:
        main(args)
        code = 0
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def test_consolidate_writes_whole_last_beside_it_and_never_over_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = write_sharded(tmp_path / "last.ckpt")
    assert consolidate([str(checkpoint)], capsys) == (0, [str(tmp_path / "whole-last.ckpt")], [])
    whole = torch.load(tmp_path / "whole-last.ckpt", weights_only=True)
    assert torch.equal(whole["state_dict"]["layer.weight"], WEIGHTS["layer.weight"])
    taken = tmp_path / "taken.ckpt"
    taken.write_bytes(b"someone's file")
    code, _, err = consolidate([str(checkpoint), "--out", str(taken)], capsys)
    assert (code, err) == (
        2,
        [f"error: --out={taken}: exists: name a new file, or add --overwrite to replace it"],
    )
    assert taken.read_bytes() == b"someone's file"
    assert consolidate([str(checkpoint), "--out", str(taken), "--overwrite"], capsys)[0] == 0
    assert torch.load(taken, weights_only=True)["global_step"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "taken.ckpt", "whole-last.ckpt"]


@pytest.mark.parametrize("name", ["last.ckpt", "last-v1.ckpt", "best-step000010.ckpt"])
def test_consolidate_never_writes_over_a_checkpoint_of_the_run(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--out`` as the run's own ``last.ckpt`` replaced the resumable checkpoint by an inference-only
    file and orphaned its shards, even with --overwrite."""
    checkpoint = write_sharded(tmp_path / "checkpoints.shards" / "last.ckpt.shards-1")
    link = tmp_path / "checkpoints.shards" / "last.ckpt"
    link.symlink_to(checkpoint.name, target_is_directory=True)
    code, _, err = consolidate([str(link), "--out", str(link.with_name(name)), "--overwrite"], capsys)
    assert code == 2 and len(err) == 1
    assert err[0].startswith(f"error: --out={link.with_name(name)}: is where the run keeps its checkpoints")
    assert link.is_symlink() and link.resolve() == checkpoint.resolve()


def test_consolidate_bad_paths_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = write_sharded(tmp_path / "last.ckpt")
    missing = tmp_path / "no" / "whole.ckpt"
    assert consolidate([], capsys)[1:] == (
        [],
        ["error: the following arguments are required: checkpoint (see attnlab-consolidate --help)"],
    )
    code, _, err = consolidate([str(checkpoint), "--out", str(missing)], capsys)
    assert (code, err) == (
        2,
        [f"error: --out={missing}: its folder {missing.parent} does not exist: create it first"],
    )
    code, _, err = consolidate([str(tmp_path / "none.ckpt")], capsys)
    assert (code, err) == (2, [f"error: checkpoint={tmp_path / 'none.ckpt'}: does not exist"])


def test_consolidate_into_a_folder_it_cannot_write_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only folder (as root, which writes anywhere, the refusal is simulated)."""
    import errno
    import os
    import tempfile

    checkpoint = write_sharded(tmp_path / "last.ckpt")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.access(locked, os.W_OK):

        def refused(*args: object, dir: str, **kwargs: object) -> None:
            raise PermissionError(errno.EACCES, "Permission denied", f"{dir}/whole.ckpt.x.tmp")

        monkeypatch.setattr(tempfile, "mkstemp", refused)
    code, _, err = consolidate([str(checkpoint), "--out", str(locked / "whole.ckpt")], capsys)
    assert code == 2 and len(err) == 1 and err[0].startswith(f"error: --out={locked}"), err
    assert "Permission denied" in err[0] and list(locked.iterdir()) == []


def test_train_refuses_to_resume_from_it_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole command (in this process): exit 2, the one line, no run directory, no marker."""
    from train_cli import TEXT, TINY, command_here

    checkpoint, marker = hostile("index", tmp_path)
    args = [*TINY, *TEXT, "model=gpt-tiny", f"ckpt_path={checkpoint}", "run_dir=run"]
    result = command_here(args, tmp_path, monkeypatch, capsys)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: ckpt_path={checkpoint}: {PICKLED_CODE}"]
    assert not marker.exists() and not (tmp_path / "run").exists()
