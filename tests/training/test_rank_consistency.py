"""Two DDP ranks that would start training from different steps (each resolved ``ckpt_path=auto`` on its
own) are stopped before the first step, on every rank."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

import processes
from attnlab.training.callbacks import RankConsistency

CASES = {"same": ([4, 4], "started"), "different": ([4, 0], "optimizer steps by rank [4, 0]")}


def start(rank: int, init_file: str, results: str) -> None:
    """On this rank, in one gloo group: RankConsistency's check of each case's steps, its outcome written."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        for case, (steps, _) in CASES.items():
            trainer = SimpleNamespace(world_size=2, global_step=steps[rank])
            try:
                RankConsistency().on_train_start(trainer, torch.nn.Linear(1, 1))
                outcome = "started"
            except RuntimeError as err:
                outcome = str(err)
            Path(results, f"{case}-rank{rank}").write_text(outcome)
    finally:
        dist.destroy_process_group()


@pytest.mark.process_contract("ranks")
def test_ranks_start_from_one_step(tmp_path: Path) -> None:
    """Two ranks forked from this process (only torch.distributed runs there: no autograd threads)."""
    processes.spawn_ranks(start, 2, str(tmp_path / "init"), str(tmp_path), start_method="fork")
    for case, (_, outcome) in CASES.items():
        for rank in (0, 1):
            assert outcome in (tmp_path / f"{case}-rank{rank}").read_text(), (case, rank)
