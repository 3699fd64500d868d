"""The models' FSDP2 plan (``attnlab.models.parallel``) on two CPU processes over gloo: each process
holds half of every layer's parameters, gradients and AdamW moments, the sharded model computes the
unsharded model's loss and gradients, and ``gathered`` rebuilds the whole model on the first process."""

from __future__ import annotations

import copy
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

pytestmark = pytest.mark.slow  # two processes: a few seconds
SIZE = dict(vocab_size=64, d_model=32, n_heads=2, n_layers=2, max_seq_len=32, tie_embeddings=False)


def lm_loss(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())


def shard_and_compare(rank: int, port: int, out: Path) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    from attnlab.models.parallel import gathered, is_sharded, shard_layers
    from conftest import tiny

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        torch.manual_seed(0)
        plain = tiny("gpt", "rope", **SIZE).train()
        sharded = shard_layers(copy.deepcopy(plain), init_device_mesh("cpu", (2,)))
        assert is_sharded(sharded) and all(isinstance(p, DTensor) for p in sharded.parameters())
        # each process's half of the global batch; the plain model sees it all
        ids = torch.randint(0, 64, (4, 17), generator=torch.Generator().manual_seed(1))
        lm_loss(sharded, ids[2 * rank : 2 * rank + 2]).backward()
        lm_loss(plain, ids).backward()
        optimizer = torch.optim.AdamW(sharded.parameters())
        optimizer.step()
        local = sum(p.to_local().numel() for p in sharded.parameters())
        moments = sum(s["exp_avg"].to_local().numel() for s in optimizer.state.values())
        for (name, p), q in zip(plain.named_parameters(), sharded.parameters()):
            torch.testing.assert_close(q.grad.full_tensor(), p.grad, atol=1e-6, rtol=1e-5, msg=name)
        whole = gathered(sharded)
        full = {k: v.full_tensor() for k, v in sharded.state_dict().items()}  # a collective: both ranks
        (out / f"sizes{rank}").write_text(f"{local} {moments} {sum(p.numel() for p in plain.parameters())}")
        if rank == 0:
            assert not is_sharded(whole)
            for name, value in whole.state_dict().items():
                torch.testing.assert_close(value, full[name], atol=0, rtol=0, msg=name)
        else:
            assert whole is None
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_hold_half_each_and_compute_the_unsharded_gradients(tmp_path: Path) -> None:
    mp.spawn(shard_and_compare, args=(free_port(), tmp_path), nprocs=2, join=True)
    sizes = [tuple(map(int, (tmp_path / f).read_text().split())) for f in ("sizes0", "sizes1")]
    total = sizes[0][2]
    assert sum(local for local, _, _ in sizes) == total  # every element once, none replicated
    for local, moments, _ in sizes:
        assert local <= total // 2 + 64 and moments == local  # half each, up to a row of padding
