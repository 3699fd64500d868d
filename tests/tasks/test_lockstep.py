"""Evaluation in step over processes whose every forward is a collective (FSDP: ``attnlab.tasks.lockstep``):
a padding batch runs each task's forwards, its decoding's included, into metrics that nothing reads;
decoding agrees its steps with the other processes exactly where FSDP shards the model (FSDP1's wrapper or
FSDP2's ``fully_shard``), not under DDP or in one process. The two-process runs that need it are
tests/cli/test_train_fsdp2.py's (a validation split whose shards make 3 and 2 batches)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from torch import Tensor, nn

from attnlab.data import build_datamodule
from attnlab.models.parallel import gathers_weights
from attnlab.models.speedups import transformer_layers
from attnlab.schema.data import PADDING_BATCH, data_config
from attnlab.schema.model import model_config
from attnlab.schema.optim import AdamWConfig
from attnlab.schema.task import task_config
from attnlab.tasks import build_task
from attnlab.tasks.lockstep import largest_over_processes

# (data kind, family, task): each task's evaluate, seq2seq's greedy decoding included
TASKS = [
    ("copy", "gpt", "causal_lm"),
    ("text", "bert", "mlm"),
    ("listops", "bert", "classification"),
    ("reverse", "seq2seq", "seq2seq"),
]


def task_and_batch(kind: str, family: str, name: str, tiny_model) -> tuple[nn.Module, dict[str, Tensor]]:
    """A tiny task module of ``name`` in eval mode, and the padding batch of its data's validation split."""
    needs = task_config(name).data_needs
    sizes = {"seq_len": 32} if kind in ("copy", "text") else {"num_train": 16, "num_val": 4, "num_test": 4}
    dm = build_datamodule(data_config(kind, **sizes), needs=needs, seed=0, model_cfg=model_config(family))
    dm.setup("fit")
    heads = {"num_classes": dm.num_classes} if dm.num_classes else {}
    heads |= {"mlm_head": True} if name == "mlm" else {}
    model = tiny_model(family, vocab_size=dm.vocab_size, max_seq_len=128, **heads)
    task = build_task(task_config(name), AdamWConfig(), model, max_steps=1, tokenizer=dm.tokenizer)
    return task.eval(), dm.padding_batch("val")


def layer_calls(task: nn.Module, run) -> int:
    """How many times ``run()`` runs the model's last transformer layer (a decoder's in seq2seq), each
    time a collective under FSDP."""
    calls = []
    layer = list(transformer_layers(task.model).values())[-1]
    handle = layer.register_forward_hook(lambda *_: calls.append(1))
    with torch.no_grad():
        run()
    handle.remove()
    return len(calls)


@pytest.mark.parametrize(("kind", "family", "name"), TASKS)
def test_a_padding_batch_runs_the_forwards_of_a_batch_and_updates_no_metric(
    tiny_model, kind: str, family: str, name: str
) -> None:
    """Validated or tested, a padding batch runs the model as often as the same batch unmarked does
    (seq2seq: the teacher-forced forward, then each greedy step), and leaves the stage's metrics
    untouched; the same batch unmarked updates them."""
    task, padding = task_and_batch(kind, family, name, tiny_model)
    real = {k: v for k, v in padding.items() if k != PADDING_BATCH}
    if name == "seq2seq":
        assert {"exact_match", "bleu", "chrf"} <= set(task.metrics["val"])  # it decodes
    for stage, step in (("val", task.validation_step), ("test", task.test_step)):
        padded = layer_calls(task, lambda step=step: step(padding, 0))
        assert not any(metric.update_called for metric in task.metrics[stage].values()), stage
        assert padded == layer_calls(task, lambda step=step: step(real, 0)) > 0, stage
        assert task.metrics[stage]["loss"].update_called, stage
    if name == "seq2seq":
        assert padded > 2  # each greedy step ran the decoder's layers again


@pytest.fixture
def one_process_group(tmp_path: Path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


class MaxWith:
    """A strategy's ``reduce`` where another process holds ``theirs``, recording what it was asked."""

    root_device = torch.device("cpu")

    def __init__(self, theirs: int) -> None:
        self.theirs, self.asked = theirs, []

    def reduce(self, tensor: Tensor, reduce_op: str) -> Tensor:
        self.asked.append((tensor.item(), reduce_op))
        return torch.maximum(tensor, torch.tensor(self.theirs))


@pytest.mark.filterwarnings("ignore:FSDP is switching to use `NO_SHARD`")
def test_decoding_agrees_its_steps_exactly_where_fsdp_shards_the_model(one_process_group: None) -> None:
    """``gathers_weights``: a module a part of which FSDP2 or FSDP1 shards; with several processes, only
    then does decoding take the largest of its numbers over them (an all-reduce of the maximum)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard

    plain, fsdp2, fsdp1 = (nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)) for _ in range(3))
    fully_shard(fsdp2[1], mesh=init_device_mesh("cpu", (1,)))
    fsdp1[1] = FullyShardedDataParallel(fsdp1[1], device_id=torch.device("cpu"))
    assert (gathers_weights(plain), gathers_weights(fsdp2), gathers_weights(fsdp1)) == (False, True, True)

    strategy = MaxWith(7)
    two, one = (SimpleNamespace(world_size=n, strategy=strategy) for n in (2, 1))
    assert largest_over_processes(None, fsdp2) is None  # no Trainer
    assert largest_over_processes(one, fsdp2) is None
    assert largest_over_processes(two, plain) is None  # DDP: each process's forwards its own
    assert strategy.asked == []
    for sharded in (fsdp2, fsdp1):
        assert largest_over_processes(two, sharded)(3) == 7
    assert strategy.asked == [(3, "max"), (3, "max")]
