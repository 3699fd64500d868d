"""Evaluation in step over processes whose every forward is a collective (FSDP gathers each sharded
layer's weights from every process: ``models.parallel.gathers_weights``): a process that ran a forward
the others do not run would wait for them until the collective's timeout.

Each process scores its own samples, so the others' shards may hold a batch more than its own; the data
module ends such a shard with padding batches (``PADDING_BATCH``), which a task runs like any other but
scores in metrics that nothing reads (``metrics_for``). A decoding loop stops when its rows are done,
which differs by process; there every process runs as many steps as the longest
(``largest_over_processes``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torchmetrics import Metric

from attnlab.models.parallel import gathers_weights
from attnlab.schema.data import PADDING_BATCH


def metrics_for(
    batch: dict[str, Tensor], metrics: nn.ModuleDict, build: Callable[[], dict[str, Metric]]
) -> nn.ModuleDict:
    """The metrics that ``batch`` updates: ``metrics``, or for a padding batch fresh ones from ``build``
    (on the batch's device) that nothing reads, so that its forwards run and no value counts."""
    if PADDING_BATCH not in batch:
        return metrics
    return nn.ModuleDict(build()).to(batch[PADDING_BATCH].device)


def largest_over_processes(trainer: pl.Trainer | None, module: nn.Module) -> Callable[[int], int] | None:
    """Where ``module``'s forward is a collective over the processes of ``trainer``, the largest of a
    number over them (one all-reduce each call, which every process makes); None elsewhere (one
    process, or DDP, whose forwards are each process's own)."""
    if trainer is None or trainer.world_size == 1 or not gathers_weights(module):
        return None
    strategy = trainer.strategy

    def largest(n: int) -> int:
        return int(strategy.reduce(torch.tensor(n, device=strategy.root_device), reduce_op="max"))

    return largest
