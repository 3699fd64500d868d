"""How a built model is split over processes: the parallel plan of attnlab's models, applied by the
task (``TaskModule.configure_model``) under Lightning's ``ModelParallelStrategy``.

Fully sharded data parallel (FSDP2, ``torch.distributed.fsdp.fully_shard``) shards every parameter
along its first dimension over the data-parallel processes (a DTensor per parameter). Each
transformer layer is one unit: its parameters are gathered just before its forward (and again
before its backward) and freed after, so a process holds the full weights of one layer at a time
plus its own 1/N of everything else (weights, gradients, optimizer moments). The root unit holds
what is left outside the layers (embeddings, final norm, heads).

Tensor parallel (``trainer.tensor_parallel_size``, Megatron's split, torch's ``parallelize_module``)
splits each transformer layer's projections over the tensor-parallel processes, which see the same
batch: attention's query, key and value projections by output columns (whole heads: a process runs
``n_heads / tp`` query heads and ``n_kv_heads / tp`` key/value heads) and its output projection by
input rows, whose partial products are summed (one all-reduce); the FFN's input and gate projections
by columns, its output projection by rows (one more all-reduce). Norms, embeddings and heads are
replicated. With ``sequence=True`` (sequence parallel, torchtitan's plan) the residual stream between
the projections is split along the sequence instead of replicated: each process runs the norms,
residual adds and dropout on its 1/TP of the positions (``SequenceParallel``), the input of attention
and of the FFN is all-gathered along the sequence (``PrepareModuleInput``: Shard(1) -> Replicate) and
the output projections reduce-scatter to that split (``RowwiseParallel(output_layouts=Shard(1))``)
instead of all-reducing: the same traffic, the activations outside the projections / TP. Attention
itself sees the whole sequence, so what needs every position (RoPE's positions, causal, padding and
document masks) is computed as without; each stack takes the whole sequence from the embeddings
(learned positions added there) and gives it whole to the heads and the loss. A fused projection (``qkv_proj``: the rows of queries, then keys, then values) is first
split into one module each, holding the same rows: split by columns as one matrix, a process would
get the queries of every head and none of the keys. Data parallelism (FSDP2, over the other mesh
dimension) then shards what each tensor-parallel process holds.

The plan lives here, next to what it describes, so that the Trainer code only picks the strategy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel, fully_shard
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    PrepareModuleInputOutput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from attnlab.blocks.attention import MultiHeadAttention
from attnlab.blocks.ffn import FeedForward
from attnlab.blocks.layers import Residual, TransformerStack
from attnlab.blocks.roles import ParamRole, parameter_roles
from attnlab.models import torch_shims
from attnlab.models.speedups import transformer_layers


def is_sharded(model: nn.Module) -> bool:
    """Whether ``fully_shard`` was applied to ``model`` (it is then an ``FSDPModule``)."""
    return isinstance(model, FSDPModule)


def gathers_weights(module: nn.Module) -> bool:
    """Whether running ``module`` is a collective: some part of it is sharded by FSDP (FSDP2's
    ``fully_shard``, FSDP1's wrapper), whose forward all-gathers its weights from every process of its
    group. No process may then run a forward that the others do not run too: it would wait for them."""
    return any(isinstance(m, (FSDPModule, FullyShardedDataParallel)) for m in module.modules())


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


def tensor_parallel(
    model: nn.Module, mesh: DeviceMesh, sequence: bool = False, asynchronous: bool = False
) -> nn.Module:
    """Split the projections of every transformer layer of ``model`` over the 1-D ``mesh`` in place
    (``attention_plan``, ``ffn_plan``); with ``sequence``, also the residual stream along the sequence
    (``sequence_plan``); with ``asynchronous``, torch's async tensor parallel (``enable_async_tp``).
    Returns ``model``."""
    check_split_roles(model)
    check_mixer_plans(model)
    for layer in transformer_layers(model).values():
        for module in list(layer.modules()):
            if isinstance(module, MultiHeadAttention):
                parallelize_module(module, mesh, attention_plan(module, mesh.size(), sequence))
            elif isinstance(module, FeedForward):
                parallelize_module(module, mesh, ffn_plan(module, sequence))
    if sequence:
        for stack in [m for m in model.modules() if isinstance(m, TransformerStack)]:
            parallelize_module(stack, mesh, sequence_plan(stack))
            stack.register_forward_pre_hook(whole_shards(mesh.size()), prepend=True)  # before the split
    if asynchronous:
        enable_async_tp()
    return model


# The projections the plans split (before a fused one is split into its parts), by module kind
SPLIT_PROJECTIONS = {
    MultiHeadAttention: ("qkv_proj", "q_proj", "kv_proj", "out_proj"),
    FeedForward: ("fc_in", "fc_gate", "fc_out"),
}


def check_mixer_plans(model: nn.Module) -> None:
    """A one-line ValueError for a mixer without a tensor-parallel plan (``blocks.mixers``: each says why)."""
    for name, module in model.named_modules():
        refusal = getattr(module, "tensor_parallel_refusal", "")
        if refusal:
            raise ValueError(f"tensor parallel cannot split {name}: {refusal}")


def check_split_roles(model: nn.Module) -> None:
    """A ValueError unless every weight the plans split is a hidden matrix (``blocks.roles``): tensor
    parallel splits the width x width projections and replicates embeddings, readouts and vectors."""
    roles = parameter_roles(model)
    for prefix, layer in transformer_layers(model).items():
        for name, module in layer.named_modules(prefix=prefix):
            split = [c for kind, cs in SPLIT_PROJECTIONS.items() if isinstance(module, kind) for c in cs]
            for weight in [f"{name}.{c}.weight" for c in split if module._modules.get(c) is not None]:
                role = roles.get(weight)  # None: a weight held elsewhere first (tied)
                if role != ParamRole.hidden_matrix:
                    raise ValueError(
                        f"tensor parallel would split {weight}, a {role.value if role else 'tied weight'}"
                    )


def sequence_plan(stack: TransformerStack) -> dict[str, ParallelStyle]:
    """The sequence-parallel placements of a stack (module paths relative to it): the whole sequence
    split on the way in and gathered on the way out (for the heads and the loss); each ``Residual``'s
    norm and the final norm on the local positions; each sublayer's input (its first argument;
    the encoder output, held by the view, stays whole) gathered along the sequence before its projections."""
    plan: dict[str, ParallelStyle] = {
        "": PrepareModuleInputOutput(  # the stack's arguments: (x, the AttentionView)
            input_layouts=(Replicate(), None),
            desired_input_layouts=(Shard(1), None),
            use_local_input=True,
            output_layouts=(Shard(1),),
            desired_output_layouts=(Replicate(),),
        )
    }
    for name, module in stack.named_modules():
        if isinstance(module, Residual):
            plan[f"{name}.norm"] = SequenceParallel(use_local_output=True)
            # attention sublayers take (x, the AttentionView, a cache); the feed-forward takes x alone
            attends = name.rsplit(".", 1)[-1] in ("self_attn", "cross_attn")
            arguments = (Shard(1), None, None) if attends else (Shard(1),)
            plan[f"{name}.fn"] = PrepareModuleInput(
                input_layouts=arguments,
                desired_input_layouts=tuple(Replicate() if a else None for a in arguments),
                use_local_output=True,
            )
    if stack.final_norm is not None:
        plan["final_norm"] = SequenceParallel(use_local_output=True)
    return plan


def whole_shards(size: int) -> Callable[[nn.Module, tuple], None]:
    """A forward pre-hook refusing an input whose sequence does not split into ``size`` equal parts:
    each process's part is taken as 1/``size`` of the whole."""

    def check(stack: nn.Module, args: tuple) -> None:
        length = args[0].shape[1]
        if length % size:
            raise ValueError(
                f"sequence parallel over {size} processes: a sequence of {length} positions does not "
                f"split into {size} equal parts (make every batch's length a multiple of {size})"
            )

    return check


def enable_async_tp() -> None:
    """torch's async tensor parallel: inductor rewrites each all-gather followed by a matrix product
    (and each product followed by a reduce-scatter) of a compiled graph into chunks that overlap the
    communication with the computation (``_micro_pipeline_tp``, as torchtitan sets it). It acts only
    on compiled code over CUDA's symmetric memory, which torch now enables for every process group
    itself (``enable_symm_mem_for_group`` is deprecated as a no-op need). A private setting: set by
    ``models.torch_shims``, off under a torch it was not checked against."""
    torch_shims.enable_async_tp()


def attention_plan(attn: MultiHeadAttention, size: int, sequence: bool = False) -> dict[str, ParallelStyle]:
    """Queries, keys and values by heads (columns), the output projection by rows (its sum
    reduce-scattered along the sequence with ``sequence``); the module is left counting the heads of
    one process. Fused projections are split first (``split_projection``)."""
    if attn.n_heads % size or attn.n_kv_heads % size:
        raise ValueError(f"{attn.n_heads} heads, {attn.n_kv_heads} key/value heads: not divisible by {size}")
    if "qkv_proj" in attn._modules:
        split_projection(attn, "qkv_proj", ("q_proj", "k_proj", "v_proj"), attn.split_sizes)
    if "kv_proj" in attn._modules:  # cross-attention: keys, then values
        kv = attn.split_sizes[1]
        split_projection(attn, "kv_proj", ("k_proj", "v_proj"), (kv, kv))
    attn.n_heads, attn.n_kv_heads = attn.n_heads // size, attn.n_kv_heads // size
    attn.head_splits = (attn.n_heads, attn.n_kv_heads, attn.n_kv_heads)
    columns = {name: ColwiseParallel() for name in ("q_proj", "k_proj", "v_proj")}
    return {**columns, "out_proj": rows(sequence)}


def ffn_plan(ffn: FeedForward, sequence: bool = False) -> dict[str, ParallelStyle]:
    """The hidden width split: input (and gate) projection by columns, output projection by rows."""
    gate = {"fc_gate": ColwiseParallel()} if ffn.fc_gate is not None else {}
    return {"fc_in": ColwiseParallel(), **gate, "fc_out": rows(sequence)}


def rows(sequence: bool) -> RowwiseParallel:
    """An output projection split by rows: its partial products all-reduced into the whole output, or
    with ``sequence`` reduce-scattered into each process's positions."""
    return RowwiseParallel(output_layouts=Shard(1)) if sequence else RowwiseParallel()


def split_projection(module: nn.Module, fused: str, names: tuple[str, ...], rows: tuple[int, ...]) -> None:
    """Replace ``module.<fused>`` (a linear layer) by one linear layer per block of its output rows,
    named ``names``, holding those rows, in its place among the module's children."""
    whole = module._modules[fused]
    weights = whole.weight.detach().split(rows)
    biases = whole.bias.detach().split(rows) if whole.bias is not None else (None,) * len(rows)
    parts = {}
    for name, weight, bias in zip(names, weights, biases, strict=True):
        part = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
        part.weight = nn.Parameter(weight.clone())
        if bias is not None:
            part.bias = nn.Parameter(bias.clone())
        parts[name] = part
    children = list(module._modules.items())
    module._modules.clear()
    for name, child in children:
        module._modules.update(parts if name == fused else {name: child})


# The projections split_projection makes, by the fused one they came from (cross-attention fuses only
# keys and values; its queries were always apart): in a state dict, cross-attention is under cross_attn.
SPLIT = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "kv_proj": ("k_proj", "v_proj")}


def fused_names(names: list[str]) -> dict[str, list[str]]:
    """{fused name: its parts' names, in row order} for the split projections among the parameter
    names ``names`` (a state dict of a tensor-parallel model: ``...self_attn.fn.q_proj.weight`` and
    its ``k_proj``, ``v_proj`` -> ``...self_attn.fn.qkv_proj.weight``)."""
    present, fused = set(names), {}
    for name in names:
        if name.count(".") < 2:
            continue
        module, proj, leaf = name.rsplit(".", 2)  # leaf: weight or bias
        kind = "kv_proj" if ".cross_attn." in f".{module}." else "qkv_proj"
        parts = [f"{module}.{p}.{leaf}" for p in SPLIT[kind]]
        if proj == SPLIT[kind][0] and all(p in present for p in parts):
            fused[f"{module}.{kind}.{leaf}"] = parts
    return fused


def fuse_projections(state: dict[str, Any]) -> dict[str, Any]:
    """A model state dict of a tensor-parallel model (whole tensors) in the layout of the unsplit
    model: each split projection's rows joined again, in the fused projection's place."""
    groups = fused_names(list(state))
    first = {parts[0]: name for name, parts in groups.items()}
    rest = {p for parts in groups.values() for p in parts[1:]}
    out: dict[str, Any] = {}
    for name, value in state.items():
        if name in first:
            out[first[name]] = torch.cat([state[p] for p in groups[first[name]]])
        elif name not in rest:
            out[name] = value
    return out


def fuse_optimizer_state(state: dict[str, Any]) -> dict[str, Any]:
    """An optimizer state keyed by parameter name (``get_optimizer_state_dict``'s form) of a
    tensor-parallel model in the unsplit model's layout: the moments of a split projection's parts
    joined by rows (their step counts are equal), and their names in the parameter groups replaced by
    the fused one, at the first part's place."""
    names = [n for g in state["param_groups"] for n in g["params"]]
    groups = fused_names(names)
    first = {parts[0]: name for name, parts in groups.items()}
    rest = {p for parts in groups.values() for p in parts[1:]}
    moments = {}
    for name, value in state["state"].items():
        if name in first:
            parts = [state["state"][p] for p in groups[first[name]]]
            moments[first[name]] = {
                k: torch.cat([part[k] for part in parts]) if v.dim() else v for k, v in value.items()
            }
        elif name not in rest:
            moments[name] = value
    params = [
        {**g, "params": [first.get(n, n) for n in g["params"] if n not in rest]}
        for g in state["param_groups"]
    ]
    return {"state": moments, "param_groups": params}


def average_replicated_gradients(model: nn.Module, mesh: DeviceMesh) -> None:
    """Average over the tensor-parallel ``mesh`` the gradients of the parameters that every process of
    it holds whole (norms, embeddings, heads: what ``tensor_parallel`` did not split), in one
    all-reduce. Each process computes them from the same numbers, but the reductions inside the kernels
    may round in another order: without this the copies drift apart by rounding (1e-9 after two steps
    of a tiny GPT). Call it after the backward pass, before clipping and the optimizer step."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    grads = []
    for p in model.parameters():
        names = (p.device_mesh.mesh_dim_names or ()) if isinstance(p, DTensor) else ()
        if p.grad is not None and mesh.mesh_dim_names[0] not in names:
            grads.append(p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad)
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=mesh.get_group())
    flat /= mesh.size()
    for g, value in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
        g.copy_(value.view_as(g))


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
    state = fuse_projections(get_model_state_dict(model, options=options))
    if dist.get_rank() != 0:
        return None
    device = next(model.parameters()).device
    copy = build_model(model.cfg)
    copy.load_state_dict(state)
    return copy.to(device).train(model.training)
