"""From an attnlab config and state dict to a Hugging Face config dict and state dict: ``load_hf``
backwards, through the same architecture modules.

An architecture expresses a configuration when reading its exported config.json back
(``Architecture.config``) gives the configuration again, in every setting that changes what the model
computes (``computed``): so each architecture's reader is also its exporter's check, and a setting it
cannot hold (ALiBi in GPT-2, a window on BERT, pruned heads) shows as a difference, named in one line
with the nearest architecture. The weights go through the very tables ``load_hf`` reads with, each
entry written by its spec's ``write``, the inverse of its ``read``.
"""

from __future__ import annotations

from dataclasses import asdict, fields, is_dataclass
from typing import Any

import torch
from torch import Tensor

from attnlab.blocks.ffn import ffn_width
from attnlab.models.common import has_final_norm, scales_embeddings
from attnlab.models.hf.convert import ARCHITECTURES, Architecture
from attnlab.models.hf.spec import Raw, as_spec, join_parts
from attnlab.schema.errors import ConfigError, show
from attnlab.schema.layout import explicit
from attnlab.schema.model import ModelConfig, Norm, TokenModelConfig

UNREADABLE = "<unreadable>"  # the difference of an architecture whose reader refuses the exported config
# Settings that change how a model trains or runs, not what it computes: never a reason to refuse.
NOT_COMPUTED = ("dropout", "attn_dropout", "ffn_dropout", "init_std", "init_from", "attn_backend", "ffn_mult")


def computed(cfg: ModelConfig) -> dict[str, Any]:
    """The settings of ``cfg`` that change its outputs, defaults resolved (``d_ff=None`` is its width,
    ``final_norm=None`` follows ``norm_first``, ...), as a flat ``{dotted key: value}``."""
    out = {f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name not in NOT_COMPUTED}
    out |= {
        "d_ff": ffn_width(cfg.d_model, cfg.d_ff, cfg.ffn_mult),
        "n_kv_heads": cfg.n_kv_heads or cfg.n_heads,
        "final_norm": has_final_norm(cfg),
    }
    if isinstance(cfg, TokenModelConfig):
        out["embed_scale"] = scales_embeddings(cfg)
    if out.get("num_classes") == 0:  # no classifier: how it would pool is moot
        del out["pooling"], out["classifier_hidden"]
    if out.get("type_vocab_size") == 0:
        out["type_vocab_size"] = 1  # no segments: one segment row of zeros (``zero_segments``)
    if cfg.norm == Norm.rmsnorm:
        del out["norm_bias"]  # RMSNorm has no bias
    kinds = cfg.layer_kinds()  # a layout by what each layer does, however it is written
    out["layout"] = explicit(kinds)  # each layer's mixer too: ``mixer`` is only its default
    del out["mixer"]
    sizes = cfg.mixers.resolved(cfg.n_heads, cfg.d_model // cfg.n_heads, {k.mixer for k in kinds})
    out |= {f"mixers.{k}": v for k, v in sizes.items()}  # the sizes of the mixers it has, and no others
    del out["mixers"]
    if not any(k.sliding for k in kinds):
        out["attn_window"] = None  # no layer slides: the width is moot
    if out.get("attn_softcap") == float("inf"):
        out["attn_softcap"] = None
    pos = out.pop("pos")  # first: the positions explain other differences (sinusoidal's embed_scale)
    out = {f"pos.{k}": v for k, v in (asdict(pos) if is_dataclass(pos) else {}).items()} | out
    if out.get("pos.rope_original_max_len", 0) is None:
        out["pos.rope_original_max_len"] = out.get("max_seq_len")
    return {key: str(v) if hasattr(v, "value") else v for key, v in out.items()}


def differences(cfg: ModelConfig, arch: Architecture) -> tuple[dict, list[tuple[str, Any, Any]]]:
    """``arch``'s config.json for ``cfg``, and the settings it does not hold: (key, ours, theirs)."""
    hf_config = arch.export(cfg)
    cls = hf_config["architectures"][0]
    try:
        back = arch.config({k: v for k, v in hf_config.items() if v is not None}, cls)
    except (KeyError, ValueError) as err:  # a value its reader refuses
        return hf_config, [(UNREADABLE, cfg.family, f"{cls} cannot read it back ({err})")]
    ours, theirs = computed(cfg), computed(back)
    return hf_config, [(k, v, theirs.get(k)) for k, v in ours.items() if theirs.get(k) != v]


def choose_architecture(cfg: ModelConfig) -> tuple[Architecture, dict]:
    """The first architecture of ``cfg``'s family that expresses it, and its config.json; else a
    ConfigError naming the first setting that the nearest one (the fewest differences) lacks."""
    if cfg.d_ff == 0:
        raise ConfigError(
            "model.d_ff",
            0,
            "attention-only layers: no Hugging Face architecture has a layer without a feed-forward",
        )
    tried = []
    for arch in ARCHITECTURES.values():
        if arch.export is None or arch.family != cfg.family:
            continue
        hf_config, diffs = differences(cfg, arch)
        if not diffs:
            return arch, hf_config
        unreadable = diffs[0][0] == UNREADABLE  # the farthest: nothing of it was compared
        tried.append((float("inf") if unreadable else len(diffs), hf_config["architectures"][0], diffs[0]))
    if not tried:
        raise ConfigError(
            "model.family", cfg.family, "no Hugging Face architecture of this family is exported"
        )
    _, cls, (key, ours, theirs) = min(tried, key=lambda t: t[0])
    if key == UNREADABLE:
        raise ConfigError("model.family", ours, f"no Hugging Face architecture holds this model: {theirs}")
    raise ConfigError(
        f"model.{key}",
        ours,
        f"no Hugging Face architecture holds this model; the nearest, {cls}, needs model.{key}={show(theirs)}",
    )


def zero_segments(cfg: ModelConfig) -> dict[str, Tensor]:
    """BERT adds a segment embedding whatever the input: a model without segments gets one row of
    zeros, which adds nothing (``type_vocab_size=1``)."""
    if getattr(cfg, "type_vocab_size", None) != 0:
        return {}
    return {"embed.segments.weight": torch.zeros(1, cfg.d_model)}


def export_checkpoint(cfg: ModelConfig, state: dict[str, Tensor]) -> tuple[dict, dict[str, Tensor]]:
    """The config.json dict and the checkpoint's tensors (on-disk names, without the base-model
    prefix) of an attnlab model; a ConfigError if no architecture expresses ``cfg``."""
    arch, hf_config = choose_architecture(cfg)
    table = arch.weights(cfg)
    state = {**{k: v for k, v in zero_segments(cfg).items() if k.rpartition(".")[0] in table}, **state}
    tensors: dict[str, Tensor] = {}
    used: set[str] = set()
    for ours, entry in table.items():
        spec = as_spec(entry)
        if isinstance(spec, Raw):
            module = {"": state[ours]} if ours in state else {}
            used.add(ours)
        else:
            module = {s: state[f"{ours}.{s}"] for s in ("weight", "bias") if f"{ours}.{s}" in state}
            used |= {f"{ours}.{s}" for s in module}
        if module:
            tensors |= spec.write(module)
    written = {t.data_ptr() for k, t in state.items() if k in used}
    left = [k for k, t in state.items() if k not in used and t.data_ptr() not in written]
    if left:  # a tensor the table has no place for: the architecture cannot hold it
        raise ConfigError(
            "model", cfg.family, f"{hf_config['architectures'][0]} has no place for {', '.join(left[:5])}"
        )
    return hf_config, join_parts(tensors)


__all__ = ["choose_architecture", "computed", "differences", "export_checkpoint"]
