"""Two DDP ranks that would start training from different steps (each resolved ``ckpt_path=auto`` on its
own) are stopped before the first step, on every rank."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from attnlab.training.callbacks import RankConsistency


def start(rank: int, steps: list[int], init_file: str, results: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    trainer = SimpleNamespace(world_size=2, global_step=steps[rank])
    try:
        RankConsistency().on_train_start(trainer, torch.nn.Linear(1, 1))
        outcome = "started"
    except RuntimeError as err:
        outcome = str(err)
    finally:
        dist.destroy_process_group()
    Path(results, f"rank{rank}").write_text(outcome)


@pytest.mark.parametrize(
    ("steps", "outcome"), [([4, 4], "started"), ([4, 0], "optimizer steps by rank [4, 0]")]
)
def test_ranks_start_from_one_step(steps: list[int], outcome: str, tmp_path: Path) -> None:
    mp.start_processes(
        start, args=(steps, str(tmp_path / "init"), str(tmp_path)), nprocs=2, start_method="fork"
    )
    for rank in (0, 1):
        assert outcome in (tmp_path / f"rank{rank}").read_text()
