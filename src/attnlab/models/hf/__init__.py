"""Hugging Face checkpoints as attnlab models: GPT-2, BERT, ViT, Marian, T5, Llama, BLOOM, Mistral, Qwen3,
SmolLM3, Gemma 2, Phi-3, and the mixers' models: DeepSeek-V3 (all dense), DiffLlama, Qwen3-Next (dense).

Each architecture is one module here with small functions and a ``register`` call: one function
reads its ``config.json`` into a ``ModelConfig``, one is a table saying where every attnlab module
finds its tensors in the checkpoint, and (for export) one writes a ``ModelConfig`` as its
``config.json``. Tables use the checkpoint's on-disk names, which are stable across ``transformers``
versions, and serve both directions. The machinery they share:

    spec.py         how a table entry reads and writes tensors (Same, Transposed, Fused, Tied, ...), table helpers
    config_keys.py  helpers for reading config.json keys and refusing options attnlab cannot reproduce
    convert.py      the registry, config lookup by ``model_type``, applying a table, the exactness checks
    export.py       the way back: the architecture that holds a ModelConfig, the table written backwards
    io.py           config.json and weight files (safetensors / .bin, single or sharded)

Adding an architecture means one new module (its config function, its table, ``register(...)``)
and its name in ``ARCHITECTURE_MODULES`` below, the one place that lists the modules. An explicit
list rather than discovery with ``pkgutil``: the list's order is the order in which ``SUPPORTED``
and every "unsupported architecture" message name the classes (GPT-2 first, as in docs/parity.md),
where discovery would make it alphabetical; and a module missing from it is caught by a test.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from torch import nn

from attnlab.models.hf.convert import (
    ARCHITECTURES,
    Architecture,
    build,
    convert_checkpoint,
    hf_model_config,
    register,
    supported_classes,
)
from attnlab.models.hf.io import read_config, read_weights
from attnlab.schema.model import ModelConfig

ARCHITECTURE_MODULES = (
    "gpt2",
    "bert",
    "vit",
    "marian",
    "t5",
    "llama",
    "bloom",
    "mistral",
    "qwen3",
    "smollm3",
    "gemma2",
    "phi3",
    "deepseek_v3",
    "diffllama",
    "qwen3_next",
)
for _name in ARCHITECTURE_MODULES:
    importlib.import_module(f"{__name__}.{_name}")  # each architecture module registers itself

SUPPORTED = supported_classes()


def model_config_from_hf(path: str | Path, **overrides: Any) -> ModelConfig:
    """The attnlab ModelConfig (family, sizes, options) of a local checkpoint; reads config.json only."""
    path = Path(path)
    return hf_model_config(read_config(path), where=str(path), **overrides)


def check_hf_checkpoint(path: str | Path) -> ModelConfig:
    """``model_config_from_hf``, with the weights checked against that config (every tensor found,
    with its shape, none left over) from the weight files' headers alone: the check of
    ``model.init_from`` before a run exists. ValueError or FileNotFoundError naming the file at fault."""
    path = Path(path)
    hf_config = read_config(path)
    cfg, _ = convert_checkpoint(hf_config, read_weights(path, shapes_only=True), where=str(path))
    return cfg


def load_hf(path: str | Path, **overrides: Any) -> nn.Module:
    """Load a local Hugging Face checkpoint directory into the matching attnlab model, in eval mode.

    ``overrides`` replace ModelConfig fields (e.g. ``dropout=0.0``, or ``num_classes=5`` to put a fresh
    classifier on a pretrained encoder).
    """
    path = Path(path)
    hf_config = read_config(path)
    cfg, state = convert_checkpoint(hf_config, read_weights(path), where=str(path), **overrides)
    return build(cfg, state)


def from_transformers(hf_model: nn.Module, **overrides: Any) -> nn.Module:
    """The attnlab twin of an in-memory ``transformers`` model (its weights copied), in eval mode."""
    tensors = hf_model.state_dict()
    try:  # transformers 5 renames some modules in memory; saving reverts that, and so do we
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:
        pass
    else:
        tensors = revert_weight_conversion(hf_model, tensors)
    name = type(hf_model).__name__
    hf_config = {**hf_model.config.to_dict(), "architectures": [name]}
    cfg, state = convert_checkpoint(hf_config, tensors, where=name, **overrides)
    return build(cfg, state)


__all__ = [
    "ARCHITECTURES",
    "ARCHITECTURE_MODULES",
    "SUPPORTED",
    "Architecture",
    "convert_checkpoint",
    "from_transformers",
    "hf_model_config",
    "load_hf",
    "model_config_from_hf",
    "read_weights",
    "register",
]
