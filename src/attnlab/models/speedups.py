"""Faster or leaner training of a built model, results unchanged beyond rounding: each transformer
layer compiled on its own, float8 matrix products in the layers' projections, and activation
checkpointing per layer.

Compiling layer by layer (as torchtitan does) compiles one graph per distinct layer and reuses it for
the others of the same shape, where whole-model compilation traces every layer into one large graph:
compile time falls, and each layer stays a unit that FSDP2 and activation checkpointing can wrap.
``nn.Module.compile`` works in place, so parameter names and checkpoints are those of the plain model.

Float8 training is torchao's ``convert_to_float8_training`` (the maintained implementation): the
``nn.Linear`` layers whose weights are hidden matrices (``blocks.roles``: the projections inside the
transformer layers, the heads' dense layers) become ``Float8Linear``, whose matrix products run in
float8 with dynamic per-tensor scales. Embeddings, readouts (output heads, classifiers) and any
projection whose dimensions are not multiples of 16 (what float8 kernels need) stay as they are: the
output head's logits are the most sensitive to rounding, and torchtitan keeps it in higher precision too.

Activation checkpointing (``full``) keeps of each transformer layer only its input for the backward
pass and runs its forward again there to get the rest (``selective``: also the outputs of its matrix
products and attention, so that only elementwise ops run again): the activations inside the layers (attention inputs,
the FFN's hidden width) are no longer held for the whole step, for about one more forward pass of
compute. It is torch's composable ``checkpoint`` (non-reentrant, random state restored, so dropout
masks repeat), which adds hooks and leaves parameter names and checkpoints as they are.
"""

from __future__ import annotations

import torch
from torch import nn

from attnlab.blocks.layers import TransformerLayer
from attnlab.blocks.roles import ParamRole, parameter_roles

FLOAT8_MULTIPLE = 16  # float8 matrix products need both dimensions of the weight divisible by this


def transformer_layers(model: nn.Module) -> dict[str, TransformerLayer]:
    """Every transformer layer of ``model`` (encoder and decoder layers alike) by module name."""
    return {name: m for name, m in model.named_modules() if isinstance(m, TransformerLayer)}


def compile_layers(model: nn.Module, **compile_options: object) -> nn.Module:
    """Compile each transformer layer of ``model`` in place (``torch.compile`` options passed on);
    returns ``model``, whose other modules (embeddings, heads) run eagerly."""
    layers = transformer_layers(model)
    if not layers:
        raise ValueError(f"{type(model).__name__} has no transformer layers to compile one by one")
    for layer in layers.values():
        layer.compile(**compile_options)
    return model


def float8_eligible(model: nn.Module) -> list[str]:
    """Names of the linear layers that float8 training converts: those whose weight is a hidden matrix
    (``blocks.roles``), with both weight dimensions multiples of 16."""
    roles = parameter_roles(model)
    return [
        name
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear)
        and roles.get(f"{name}.weight") == ParamRole.hidden_matrix
        and m.in_features % FLOAT8_MULTIPLE == 0
        and m.out_features % FLOAT8_MULTIPLE == 0
    ]


def convert_to_float8(model: nn.Module, *, emulate: bool = False, sharded: bool = False) -> list[str]:
    """Swap the eligible projections of ``model`` for torchao's ``Float8Linear`` in place; returns their
    names. ``emulate=True`` computes the float8 products in higher precision (a CPU, or a GPU before
    compute capability 8.9), for tests; without it a GPU without float8 support is refused.
    ``sharded=True`` (the model is to be sharded by FSDP2): FSDP2 all-gathers those weights already cast
    to float8, half the bytes of bf16 (torchao's ``enable_fsdp_float8_all_gather``, as torchtitan does)."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    if not emulate:
        check_float8_device()
    names = set(float8_eligible(model))
    if not names:
        raise ValueError(
            f"{type(model).__name__} has no projection that float8 training can convert (linear layers "
            f"inside transformer layers with dimensions divisible by {FLOAT8_MULTIPLE})"
        )
    config = Float8LinearConfig(emulate=emulate, enable_fsdp_float8_all_gather=sharded)
    convert_to_float8_training(model, module_filter_fn=lambda _m, fqn: fqn in names, config=config)
    return sorted(names)


def check_float8_device() -> None:
    """Raise a one-line ValueError unless a CUDA GPU of compute capability 8.9 or more is present."""
    if not torch.cuda.is_available():
        raise ValueError(
            "float8 training needs a CUDA GPU of compute capability 8.9+ (H100, L4, ...); none here"
        )
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < (8, 9):
        name = torch.cuda.get_device_name()
        raise ValueError(
            f"float8 training needs compute capability 8.9+ (H100, L4, ...): {name} has {major}.{minor}"
        )


def checkpoint_layers(model: nn.Module, *, selective: bool = False) -> nn.Module:
    """Recompute each transformer layer of ``model`` in the backward pass instead of keeping its
    activations (in place; returns ``model``). ``selective``: keep the outputs of its matrix products
    and attention (``SAVED_OPS``), recompute only the cheap elementwise ops between them (norms,
    activations, residual adds, RoPE): less memory than keeping everything for almost no extra compute
    (torch's selective checkpointing, as torchtitan's op-level policy)."""
    from functools import partial

    from torch.distributed._composable import checkpoint
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    layers = transformer_layers(model)
    if not layers:
        raise ValueError(f"{type(model).__name__} has no transformer layers to checkpoint")
    options = {"context_fn": partial(create_selective_checkpoint_contexts, saved_ops())} if selective else {}
    for layer in layers.values():
        checkpoint(layer, **options)
    return model


def saved_ops() -> list[object]:
    """The ops whose outputs selective activation checkpointing keeps: matrix products and the fused
    attention kernels (each device's), the costly part of a layer's forward."""
    aten = torch.ops.aten
    names = (
        "mm",
        "addmm",
        "bmm",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
    )
    return [getattr(aten, name).default for name in names if hasattr(aten, name)]
