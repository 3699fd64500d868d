"""The models' FSDP2 plan (``attnlab.models.parallel``) on two CPU processes over gloo: each process
holds half of every layer's parameters, gradients and AdamW moments, the sharded model computes the
unsharded model's loss and gradients, and ``gathered`` rebuilds the whole model on the first process.
The tensor-parallel plan with the sequence split (learned positions added before the split, RoPE
inside attention) computes the unsplit model's loss and gradients, and refuses a sequence that does
not split evenly.

The two-process checks share one pair of ranks (``processes.spawn_ranks``: two new interpreters, a
process contract), each rank running them one after another in one gloo group."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

import processes

pytestmark = pytest.mark.slow  # two processes: a few seconds each
SIZE = dict(vocab_size=64, d_model=32, n_heads=2, n_layers=2, max_seq_len=32, tie_embeddings=False)


def lm_loss(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())


def tiny_builder() -> Callable[..., torch.nn.Module]:
    """tests/conftest.py's ``tiny``, loaded by its path: in a spawned process ``import conftest`` finds
    the conftest of this test's own folder first."""
    spec = importlib.util.spec_from_file_location("root_conftest", Path(__file__).parents[1] / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.tiny


def shard_and_compare(rank: int, out: Path) -> None:
    """FSDP2's plan on this rank: half of every parameter, gradient and moment; the unsharded gradients."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    from attnlab.models.parallel import gathered, is_sharded, shard_layers

    tiny = tiny_builder()
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


def shard_vit_and_compare(rank: int) -> None:
    """FSDP2's plan on a ViT (patch embedding, class token, layers, head): each rank's half of a batch of
    images gives the gradients of the unsharded model on the whole batch (the classifier's CLI run on
    two processes: test_train_fsdp2.py runs the token families, whose losses average over tokens)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    from attnlab.models.parallel import shard_layers

    plain = tiny_builder()("vit").train()
    sharded = shard_layers(copy.deepcopy(plain), init_device_mesh("cpu", (2,)))
    assert all(isinstance(p, DTensor) for p in sharded.parameters())
    generator = torch.Generator().manual_seed(3)
    images, labels = (
        torch.randn(4, 1, 8, 8, generator=generator),
        torch.randint(0, 3, (4,), generator=generator),
    )
    half = slice(2 * rank, 2 * rank + 2)
    F.cross_entropy(sharded(images[half]), labels[half]).backward()
    F.cross_entropy(plain(images), labels).backward()
    for (name, p), q in zip(plain.named_parameters(), sharded.parameters()):
        torch.testing.assert_close(q.grad.full_tensor(), p.grad, atol=1e-6, rtol=1e-5, msg=name)


def split_sequence_and_compare(rank: int, pos: str) -> None:
    """Tensor parallel with the sequence split, on both processes: the unsplit model's loss and every
    parameter's gradient (the split ones gathered), and a sequence of odd length refused."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    from attnlab.models.parallel import average_replicated_gradients, tensor_parallel

    shape = {**SIZE, "n_heads": 4, "n_kv_heads": 2, "activation": "swiglu"}
    plain = tiny_builder()("gpt", pos, **shape).train()
    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("tensor_parallel",))
    split = tensor_parallel(copy.deepcopy(plain), mesh, sequence=True)
    ids = torch.randint(0, 64, (4, 17), generator=torch.Generator().manual_seed(1))
    loss, expected = lm_loss(split, ids), lm_loss(plain, ids)
    torch.testing.assert_close(loss, expected, atol=1e-6, rtol=0)
    loss.backward()
    expected.backward()
    average_replicated_gradients(split, mesh)
    grads = {n: p.grad for n, p in split.named_parameters()}
    for name, p in plain.named_parameters():
        if name in grads:  # the fused qkv_proj is split into q/k/v_proj: compared through the rest
            g = grads[name].full_tensor() if isinstance(grads[name], DTensor) else grads[name]
            torch.testing.assert_close(g, p.grad, atol=1e-6, rtol=1e-5, msg=name)
    assert any(isinstance(g, DTensor) for g in grads.values())
    with pytest.raises(ValueError, match="a sequence of 15 positions does not split into 2 equal parts"):
        split(ids[:, :15])


FLOAT8_STEPS = 200
LR = 1e-3  # a gradual descent: float8's rounding shifts a steep drop by a step or two


def float8_losses(rank: int, world: int) -> list[float]:
    """The per-step losses (mean over all processes' batches) of a tiny GPT trained ``FLOAT8_STEPS``
    AdamW steps with torchao's float8 projections (emulated), from ``float32_losses``' weights on its
    batches; under FSDP2 (each layer a unit) when ``world`` > 1, this process taking its part."""
    from torch.distributed.device_mesh import init_device_mesh
    from torchao.float8.float8_linear import Float8Linear

    from attnlab.models.parallel import shard_layers
    from attnlab.models.speedups import convert_to_float8

    converted = tiny_builder()("gpt", "rope", **SIZE).train()  # seeded: float32_losses' weights
    convert_to_float8(converted, emulate=True, sharded=world > 1)
    assert not isinstance(converted.lm_head, Float8Linear)  # the output head stays in higher precision
    float8 = [m for m in converted.stack.modules() if isinstance(m, Float8Linear)]
    assert float8
    # under FSDP2 the shards are all-gathered as float8
    assert all(m.config.enable_fsdp_float8_all_gather == (world > 1) for m in float8)
    if world > 1:
        converted = shard_layers(converted, init_device_mesh("cpu", (world,)))
    return trained_losses(converted, rank, world)


@pytest.fixture(scope="module")
def float32_losses(built_once: Callable[..., Path]) -> list[float]:
    """The per-step losses of the tiny GPT trained ``FLOAT8_STEPS`` AdamW steps in float32 in one
    process on the whole batch: the reference of both float8 tests (with and without FSDP2), trained
    once per session (``built_once``) rather than once in each (2 CPU-s)."""

    def train(directory: Path) -> None:
        losses = trained_losses(tiny_builder()("gpt", "rope", **SIZE).train(), 0, 1)
        (directory / "losses.json").write_text(json.dumps(losses))

    return json.loads((built_once("float8-float32-reference", train) / "losses.json").read_text())


def trained_losses(model: torch.nn.Module, rank: int, world: int) -> list[float]:
    """The per-step losses (mean over all processes' batches) of ``model`` trained ``FLOAT8_STEPS`` AdamW
    steps on a seeded random walk, this process taking its ``rank``'s part of every batch."""
    generator = torch.Generator().manual_seed(2)
    # a random walk: each token 1 to 8 past the one before, a floor of ln 8 that keeps the loss off zero
    steps = torch.randint(1, 9, (FLOAT8_STEPS, 8, 17), generator=generator)
    batches = steps.cumsum(-1) % 64
    torch.manual_seed(0)
    # AdamW's multi-tensor implementation (the same update): a few ops a step instead of a few per
    # parameter, each of which costs a DTensor dispatch under FSDP2 (a quarter of the loop's time)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, foreach=True)
    losses = []
    for batch in batches:
        loss = lm_loss(model, batch.chunk(world)[rank])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        mean = loss.detach().clone()
        if world > 1:
            dist.all_reduce(mean)
        losses.append(mean.item() / world)
    return losses


def assert_within_two_percent(float8: list[float], float32: list[float]) -> None:
    assert len(float8) == len(float32) == FLOAT8_STEPS
    assert float32[-1] < 0.6 * float32[0]  # it learned: a loss that does not move would prove nothing
    for step, (ours, reference) in enumerate(zip(float8, float32, strict=True), start=1):
        assert ours == pytest.approx(reference, rel=0.02), f"step {step}"


def test_float8_trains_within_two_percent_of_float32_for_200_steps(float32_losses: list[float]) -> None:
    assert_within_two_percent(float8_losses(0, 1), float32_losses)


def every_two_rank_check(rank: int, port: int, out: Path) -> None:
    """On each of the two ranks, in one gloo group: FSDP2's plan (``shard_and_compare``), the sequence
    split with learned positions and with RoPE, and float8 under FSDP2 (its losses written by rank 0)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        shard_and_compare(rank, out)
        shard_vit_and_compare(rank)
        for pos in ("learned", "rope"):
            split_sequence_and_compare(rank, pos)
        float8 = float8_losses(rank, 2)
        if rank == 0:
            (out / "losses.txt").write_text(f"{float8}")
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.process_contract("ranks")
def test_two_processes_shard_split_and_train_float8_as_one_process(
    tmp_path: Path, float32_losses: list[float]
) -> None:
    """FSDP2: each process holds half of every element (none replicated, up to a row of padding) and
    computes the unsharded gradients, of a GPT and of a ViT; the sequence split computes the unsplit loss and gradients
    (``split_sequence_and_compare``); float8 under FSDP2 trains within 2% of float32 in one process on
    the whole batch: the losses of float32 under FSDP2 (the mean of the two halves' losses, the
    gradients averaged: test_train_fsdp2.py; here within 1e-6 of each other at every step), without
    training float32 on two processes as well."""
    import ast

    processes.spawn_ranks(every_two_rank_check, 2, free_port(), tmp_path)
    sizes = [tuple(map(int, (tmp_path / f).read_text().split())) for f in ("sizes0", "sizes1")]
    total = sizes[0][2]
    assert sum(local for local, _, _ in sizes) == total  # every element once, none replicated
    for local, moments, _ in sizes:
        assert local <= total // 2 + 64 and moments == local  # half each, up to a row of padding
    float8 = ast.literal_eval((tmp_path / "losses.txt").read_text())
    assert_within_two_percent(float8, float32_losses)
