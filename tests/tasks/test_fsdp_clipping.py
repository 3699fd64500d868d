"""``trainer=fsdp`` clips gradients by norm: through FSDP's own ``clip_grad_norm_`` (the norm over every
rank's shards), where Lightning's FSDP precision plugin refuses to clip by norm at all.

One process, a gloo group of one, FSDP on the CPU: FSDP's arithmetic over shards is torch's (tested
there); what is tested here is that the task calls it, with ``trainer.gradient_clip_val``, and checks the
norm it returns."""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from pytorch_lightning.plugins.precision import FSDPPrecision
from pytorch_lightning.utilities.enums import GradClipAlgorithmType
from torch.distributed.fsdp import FullyShardedDataParallel

from attnlab.schema.optim import AdamWConfig
from attnlab.schema.task import task_config
from attnlab.tasks import build_task
from attnlab.tasks.nonfinite import NonFiniteGuard


@pytest.fixture
def one_process_group(tmp_path: Path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def backward(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    return loss.detach()


@pytest.mark.filterwarnings("ignore:FSDP is switching to use `NO_SHARD`")
@pytest.mark.parametrize("algorithm", ["norm", None, GradClipAlgorithmType.NORM])  # None: Lightning's default
def test_fsdp_clips_through_its_own_global_norm(
    one_process_group: None, tiny_model, monkeypatch: pytest.MonkeyPatch, algorithm: object
) -> None:
    task = build_task(task_config("causal_lm"), AdamWConfig(), tiny_model("gpt", n_heads=2), max_steps=4)
    task.nonfinite = NonFiniteGuard("stop", 1)
    reference = copy.deepcopy(task.model)
    sharded = FullyShardedDataParallel(task.model, device_id=torch.device("cpu"))
    ids = torch.randint(task.model.cfg.vocab_size, (4, 9), generator=torch.Generator().manual_seed(0))
    task.step_loss = backward(sharded, ids)
    backward(reference, ids)
    calls = []
    clip = FullyShardedDataParallel.clip_grad_norm_

    def recorded(self: FullyShardedDataParallel, max_norm: float, *args: object) -> torch.Tensor:
        calls.append(max_norm)
        return clip(self, max_norm, *args)

    monkeypatch.setattr(FullyShardedDataParallel, "clip_grad_norm_", recorded)
    task._trainer = SimpleNamespace(
        precision_plugin=FSDPPrecision("32-true"),  # its own clip_grad_by_norm raises
        strategy=SimpleNamespace(model=sharded),
        world_size=1,
        global_step=0,
    )
    optimizer = torch.optim.AdamW(sharded.parameters())
    task.configure_gradient_clipping(optimizer, gradient_clip_val=0.05, gradient_clip_algorithm=algorithm)

    assert calls == [0.05]
    expected = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.05)
    assert expected > 0.05  # the gradients were clipped, not left alone
    grads = [p.grad for p in sharded.parameters()]
    assert torch.nn.utils.get_total_norm(grads).item() == pytest.approx(0.05, rel=1e-4)
    assert task.nonfinite.skipped == 0
