"""``checkpoint.async_save``: checkpoints written on a background thread keep what a synchronous save
guarantees: the state of the step that saved (not of a later one), one storage per tied tensor, writes
and removals in order, nothing written after a failed write, and the failure raised once."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest
import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

from attnlab.schema.run import RunConfig
from attnlab.training.callbacks import AtomicCheckpointIO
from attnlab.training.checkpoint_io import BackgroundCheckpointIO, snapshot
from attnlab.training.trainer import build_trainer


class HeldWrites(TorchCheckpointIO):
    """Records writes and removals; each waits until ``release`` is set, or fails where ``fail`` names the file."""

    def __init__(self, fail: str = "") -> None:
        self.release = threading.Event()
        self.events: list[str] = []
        self.fail = fail

    def save_checkpoint(self, checkpoint: dict, path: object, storage_options: object = None) -> None:
        self.release.wait(timeout=10)
        if Path(str(path)).name == self.fail:
            raise OSError(errno.ENOSPC, "no space left on device")
        self.events.append(f"write {Path(str(path)).name}")
        torch.save(checkpoint, str(path))

    def remove_checkpoint(self, path: object) -> None:
        self.release.wait(timeout=10)
        self.events.append(f"remove {Path(str(path)).name}")


def held(fail: str = "") -> tuple[BackgroundCheckpointIO, HeldWrites]:
    io = BackgroundCheckpointIO()
    inner = HeldWrites(fail)
    io._checkpoint_io = inner
    return io, inner


def test_the_file_holds_the_state_of_the_step_that_saved(tmp_path: Path) -> None:
    """Training changes the weights in place while the write waits: the file still has the old ones."""
    io, inner = held()
    weight = torch.arange(6.0)
    io.save_checkpoint({"state_dict": {"w": weight}, "global_step": 3}, tmp_path / "last.ckpt")
    weight.mul_(100)  # the next optimizer step
    inner.release.set()
    io.teardown()
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert torch.equal(saved["state_dict"]["w"], torch.arange(6.0)) and saved["global_step"] == 3


def test_a_snapshot_keeps_tied_tensors_on_one_storage(tmp_path: Path) -> None:
    """Tied embeddings are one storage in the file, as in a synchronous save (not a second copy)."""
    embed = torch.randn(50, 8)
    checkpoint = {"state_dict": {"embed": embed.detach(), "head": embed.detach(), "row": embed[3]}}
    copy = snapshot(checkpoint)["state_dict"]
    assert copy["embed"].untyped_storage().data_ptr() != embed.untyped_storage().data_ptr()
    assert copy["embed"].untyped_storage().data_ptr() == copy["head"].untyped_storage().data_ptr()
    assert torch.equal(copy["row"], embed[3]) and copy["row"].storage_offset() == 3 * 8
    io = BackgroundCheckpointIO()
    io.save_checkpoint(checkpoint, tmp_path / "async.ckpt")
    io.teardown()
    AtomicCheckpointIO().save_checkpoint(checkpoint, tmp_path / "sync.ckpt")
    assert (tmp_path / "async.ckpt").stat().st_size == (tmp_path / "sync.ckpt").stat().st_size


def test_writes_and_removals_reach_the_disk_in_the_order_asked(tmp_path: Path) -> None:
    """A new best, the removal of the best it replaces, then last.ckpt: the order a kill relies on."""
    io, inner = held()
    io.save_checkpoint({"step": 6}, tmp_path / "best-step000006.ckpt")
    io.remove_checkpoint(tmp_path / "best-step000003.ckpt")
    io.save_checkpoint({"step": 6}, tmp_path / "last.ckpt")
    assert inner.events == []  # still waiting: saving did not block the caller
    inner.release.set()
    io.teardown()
    assert inner.events == ["write best-step000006.ckpt", "remove best-step000003.ckpt", "write last.ckpt"]


def test_nothing_is_written_after_a_failed_write_and_the_failure_is_raised_once(tmp_path: Path) -> None:
    """last.ckpt would name a best checkpoint that never reached the disk: it is not written either."""
    io, inner = held(fail="best-step000006.ckpt")
    io.save_checkpoint({"step": 6}, tmp_path / "best-step000006.ckpt")
    io.remove_checkpoint(tmp_path / "best-step000003.ckpt")
    io.save_checkpoint({"step": 6}, tmp_path / "last.ckpt")
    inner.release.set()
    with pytest.raises(OSError, match="no space left"):
        io.teardown()
    assert inner.events == [] and not (tmp_path / "last.ckpt").exists()
    io.teardown()  # raised once: Lightning's teardown after the failure goes through
    io.save_checkpoint({"step": 7}, tmp_path / "last.ckpt")
    io.teardown()
    assert not (tmp_path / "last.ckpt").exists()  # a failed writer writes nothing more


def test_a_failed_write_is_raised_at_the_next_save(tmp_path: Path) -> None:
    io, inner = held(fail="last.ckpt")
    inner.release.set()
    io.save_checkpoint({"step": 3}, tmp_path / "last.ckpt")
    io._executor.submit(lambda: None).result()  # the failed write is done
    with pytest.raises(OSError, match="no space left"):
        io.save_checkpoint({"step": 6}, tmp_path / "last.ckpt")


@pytest.mark.parametrize(
    ("async_save", "io_class"), [(True, BackgroundCheckpointIO), (False, AtomicCheckpointIO)]
)
@pytest.mark.parametrize("strategy", ["auto", "ddp"])
def test_checkpoint_async_save_chooses_the_writer(
    async_save: bool, io_class: type, strategy: str, tmp_path: Path
) -> None:
    run = RunConfig()
    run.checkpoint.async_save = async_save
    run.trainer.strategy = strategy
    trainer = build_trainer(run, tmp_path, [], [])
    assert type(trainer.strategy.checkpoint_io) is io_class


def test_a_snapshot_copies_every_tensor_and_keeps_the_containers_and_values() -> None:
    from collections import OrderedDict, namedtuple

    Pair = namedtuple("Pair", "a b")
    weights = OrderedDict(w=torch.ones(2), b=torch.zeros(1))
    checkpoint = {
        "state_dict": weights,
        "optimizer_states": [{"state": {0: {"step": torch.tensor(3.0)}}, "param_groups": [{"lr": 0.1}]}],
        "loops": ({"n": 1}, Pair(torch.ones(1), "x")),
        "epoch": 2,
        "name": "run",
        "none": None,
    }
    copy = snapshot(checkpoint)
    assert type(copy["state_dict"]) is OrderedDict and list(copy["state_dict"]) == ["w", "b"]
    assert isinstance(copy["loops"], tuple) and type(copy["loops"][1]) is Pair and copy["loops"][1].b == "x"
    copied = [copy["state_dict"]["w"], copy["optimizer_states"][0]["state"][0]["step"], copy["loops"][1].a]
    originals = [
        weights["w"],
        checkpoint["optimizer_states"][0]["state"][0]["step"],
        checkpoint["loops"][1].a,
    ]
    for new, old in zip(copied, originals):
        assert torch.equal(new, old) and new.data_ptr() != old.data_ptr()
    weights["w"].add_(1)  # training goes on: the snapshot keeps the saved step's values
    assert torch.equal(copy["state_dict"]["w"], torch.ones(2))
    assert (copy["epoch"], copy["name"], copy["none"]) == (2, "run", None)
    assert copy["optimizer_states"][0]["param_groups"] == [{"lr": 0.1}]


def test_lightnings_async_writer_keeps_the_members_the_background_writer_uses(tmp_path: Path) -> None:
    """``BackgroundCheckpointIO`` subclasses Lightning's ``AsyncCheckpointIO`` and uses its private
    ``_executor`` (None until the first save) and ``_error`` (the first failed write): both set by
    Lightning's ``__init__``, and ``teardown`` is the one hook that must wait for the writes."""
    from pytorch_lightning.plugins.io import AsyncCheckpointIO

    theirs = AsyncCheckpointIO(TorchCheckpointIO())
    assert theirs._executor is None and theirs._error is None
    assert {"save_checkpoint", "teardown"} <= set(vars(AsyncCheckpointIO))
    ours = BackgroundCheckpointIO()
    ours.save_checkpoint({"w": torch.ones(2)}, tmp_path / "a.ckpt")
    assert ours._executor is not None
    ours.teardown()
    assert ours._executor is None and torch.equal(torch.load(tmp_path / "a.ckpt")["w"], torch.ones(2))
