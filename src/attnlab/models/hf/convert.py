"""From a Hugging Face config and state dict to an attnlab config and state dict, checked.

The registry holds one ``Architecture`` per ``model_type``; each architecture module registers its
own. ``convert_checkpoint`` looks the architecture up, reads the config, applies the weight table and
checks that the checkpoint accounts exactly for the model: every parameter found, every shape right,
no tensor left over (bar the few an architecture declares it has no use for).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.models import build_model
from attnlab.models.hf.spec import Checkpoint, Table, as_spec
from attnlab.schema.model import ModelConfig

log = logging.getLogger(__name__)

# classifier layers a checkpoint may lack (a pretrained body for fine-tuning): they start from scratch
HEADS = ("cls_head.pre.", "cls_head.classifier.", "head.pre.", "head.classifier.")


@dataclass(frozen=True)
class Architecture:
    """One Hugging Face architecture: the classes it covers and how to read its config and weights."""

    model_type: str  # config.json's ``model_type``, the registry's key
    classes: tuple[str, ...]  # ``architectures`` entries of config.json that attnlab loads
    prefix: str  # base-model prefix of the checkpoint's names, removed when present
    config: Callable[[dict, str], ModelConfig]  # (config.json dict, class name) -> ModelConfig
    weights: Callable[[ModelConfig], Table]  # the weight table of a model with this config
    ignore: tuple[str, ...] = ()  # regexes: checkpoint tensors attnlab has no module for
    # ModelConfig -> config.json dict (with ``architectures``): the inverse of ``config``, for export
    export: Callable[[ModelConfig], dict] | None = None
    family: str = ""  # the attnlab family that ``config`` reads, and ``export`` takes
    # (config.json dict, on-disk tensors) -> the dict with what only the weights tell (T5's head tying)
    config_from_weights: Callable[[dict, Mapping[str, Tensor]], dict] | None = None


ARCHITECTURES: dict[str, Architecture] = {}  # by model_type, in the order registered


def register(arch: Architecture) -> Architecture:
    """Make ``arch`` loadable; each architecture module calls this once, at import."""
    if arch.model_type in ARCHITECTURES:
        raise ValueError(f"model_type {arch.model_type!r} is registered twice")
    ARCHITECTURES[arch.model_type] = arch
    return arch


def supported_classes() -> tuple[str, ...]:
    """Every ``architectures`` entry attnlab loads, in registration order."""
    return tuple(cls for arch in ARCHITECTURES.values() for cls in arch.classes)


def find_architecture(hf_config: dict, where: str) -> tuple[Architecture, str]:
    """The registered architecture of a config.json dict, and the class it names (else ValueError)."""
    model_type = hf_config.get("model_type")
    arch = ARCHITECTURES.get(model_type)
    cls = (hf_config.get("architectures") or [arch.classes[0] if arch else model_type])[0]
    if arch is None or cls not in arch.classes:
        raise ValueError(
            f"{where}: unsupported architecture {cls!r} (model_type {model_type!r}); "
            f"attnlab loads {', '.join(supported_classes())}"
        )
    return arch, cls


def _with_overrides(cfg: ModelConfig, overrides: dict[str, Any]) -> ModelConfig:
    known = {f.name for f in fields(cfg)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(
            f"unknown {type(cfg).__name__} override(s) {', '.join(unknown)}; fields are {', '.join(sorted(known))}"
        )
    if isinstance(overrides.get("pos"), dict):
        overrides = {**overrides, "pos": replace(cfg.pos, **overrides["pos"])}
    return replace(cfg, **overrides)


def hf_model_config(hf_config: dict, *, where: str = "checkpoint", **overrides: Any) -> ModelConfig:
    """The attnlab ModelConfig of a Hugging Face config dict, with ``overrides`` of ModelConfig fields."""
    arch, cls = find_architecture(hf_config, where)
    try:
        cfg = arch.config({k: v for k, v in hf_config.items() if v is not None}, cls)  # null = absent
    except KeyError as e:
        raise ValueError(f"{where}: config.json lacks {e.args[0]!r}, which {cls} needs") from None
    except ValueError as e:
        raise ValueError(f"{where}: {cls}: {e}") from None
    return _with_overrides(cfg, overrides)


def _few(keys: list[str], n: int = 5) -> str:
    return ", ".join(keys[:n]) + (f" and {len(keys) - n} more" if len(keys) > n else "")


def _check(
    cfg: ModelConfig, state: dict[str, Tensor], origin: dict[str, str], unused: list[str], where: str
) -> None:
    """Every parameter of the model found with its shape, every checkpoint tensor used (else ValueError)."""
    with torch.device("meta"):  # shapes only: nothing is allocated
        expected = {k: tuple(v.shape) for k, v in build_model(cfg).state_dict().items()}
    for key, t in state.items():
        if key not in expected:
            raise ValueError(
                f"{where}: checkpoint tensor {origin[key]} maps to {key}, which the model built from "
                "its config does not have"
            )
        if tuple(t.shape) != expected[key]:
            raise ValueError(
                f"{where}: shape mismatch for {key} (checkpoint {origin[key]}): checkpoint has "
                f"{tuple(t.shape)}, the model built from config.json has {expected[key]}"
            )
    missing = [k for k in expected if k not in state]
    fresh = [
        k for k in missing if any(k.startswith(h) and not any(s.startswith(h) for s in state) for h in HEADS)
    ]
    missing = [k for k in missing if k not in fresh]
    if missing:
        raise ValueError(f"{where}: missing in the checkpoint: {_few(missing)}")
    if unused:
        raise ValueError(
            f"{where}: unexpected tensors in the checkpoint (attnlab has no place for them): {_few(unused)}"
        )
    if fresh:
        log.warning("%s: no weights for %s in the checkpoint; they start from scratch", where, _few(fresh))


def convert_checkpoint(
    hf_config: dict, tensors: Mapping[str, Tensor], *, where: str = "checkpoint", **overrides: Any
) -> tuple[ModelConfig, dict[str, Tensor]]:
    """Map a Hugging Face config dict and state dict (on-disk names) to an attnlab config and state dict.

    Raises ValueError for an unsupported architecture or option, a shape mismatch, a missing parameter or
    a checkpoint tensor with no place in the model. Classifier heads the checkpoint lacks are left out.
    """
    arch, _ = find_architecture(hf_config, where)
    if arch.config_from_weights is not None:
        hf_config = arch.config_from_weights(hf_config, tensors)
    cfg = hf_model_config(hf_config, where=where, **overrides)
    ckpt = Checkpoint(tensors, arch.prefix)
    state, origin = {}, {}
    for ours, entry in arch.weights(cfg).items():
        spec = as_spec(entry)
        for suffix, t in spec.read(ckpt).items():
            key = f"{ours}.{suffix}" if suffix else ours
            sources = [f"{n}.{suffix}" if suffix else n for n in spec.names]
            state[key], origin[key] = t, " + ".join(n for n in sources if n in ckpt.tensors)
    _check(cfg, state, origin, ckpt.unused(arch.ignore), where)
    return cfg, state


def build(cfg: ModelConfig, state: dict[str, Tensor]) -> nn.Module:
    """The attnlab model of ``cfg`` holding a checked state dict, in eval mode."""
    model = build_model(cfg)
    model.load_state_dict(state, strict=False)  # strictness is _check's job: only fresh heads are absent
    return model.eval()
