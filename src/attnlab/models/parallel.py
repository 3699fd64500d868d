"""How a built model is split over processes: the parallel plan of attnlab's models, applied by the
task (``TaskModule.configure_model``) under Lightning's ``ModelParallelStrategy``.

Fully sharded data parallel (FSDP2, ``torch.distributed.fsdp.fully_shard``) shards every parameter
along its first dimension over the data-parallel processes (a DTensor per parameter). Each
transformer layer is one unit: its parameters are gathered just before its forward (and again
before its backward) and freed after, so a process holds the full weights of one layer at a time
plus its own 1/N of everything else (weights, gradients, optimizer moments). The root unit holds
what is left outside the layers (embeddings, final norm, heads).

The plan lives here, next to what it describes, so that the Trainer code only picks the strategy.
"""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, fully_shard

from attnlab.models.speedups import transformer_layers


def is_sharded(model: nn.Module) -> bool:
    """Whether ``fully_shard`` was applied to ``model`` (it is then an ``FSDPModule``)."""
    return isinstance(model, FSDPModule)


def shard_layers(model: nn.Module, mesh: DeviceMesh) -> nn.Module:
    """Apply FSDP2 to ``model`` in place over the 1-D ``mesh``: each transformer layer a unit, then the
    root; returns ``model``. Parameters and gradients keep their dtype (float32): mixed precision is
    Lightning's autocast, as under the other strategies."""
    layers = transformer_layers(model)
    if not layers:
        raise ValueError(f"{type(model).__name__} has no transformer layers to shard one by one")
    for layer in layers.values():
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def gathered(model: nn.Module) -> nn.Module | None:
    """``model`` itself unless it is sharded; else, on the first process, a plain copy built from its
    config holding the whole weights (on the device of its shards), and None on the others. A
    collective under FSDP2: every process calls it. For what one process does alone with the trained
    model (sampling from it at the end of training)."""
    if not is_sharded(model):
        return model
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from attnlab.models import build_model

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)  # whole tensors on rank 0 only
    state = get_model_state_dict(model, options=options)
    if dist.get_rank() != 0:
        return None
    device = next(model.parameters()).device
    copy = build_model(model.cfg)
    copy.load_state_dict(state)
    return copy.to(device).train(model.training)
