"""The mixer seam: one registration per mixer kind, read by the layers, the model's caches and FLOPs.

A layer is (mixer, feed-forward); ``MIXERS[kind]`` says how to build the kind's module from the model
config (``build``) and which decode cache it keeps (``new_cache``: keys and values, the latent and the
rotary key, or a recurrent state). Each module declares its parameters' roles where it makes them,
sits at the layer's ``attn_out`` activation site (``layer.self_attn.fn``), and names in
``tensor_parallel_refusal`` why tensor parallel has no plan for it yet (empty: it has one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from attnlab.blocks.attention import SelfAttention
from attnlab.blocks.cache import AttentionCache
from attnlab.blocks.hooks import AttentionHooks
from attnlab.blocks.mixers.delta import GatedDeltaNet, RecurrentCache
from attnlab.blocks.mixers.differential import DifferentialAttention
from attnlab.blocks.mixers.latent import LatentAttention, LatentCache
from attnlab.blocks.positional import PositionalEncoding, RotaryPositionalEncoding
from attnlab.schema.layout import LayerKind
from attnlab.schema.mixers import Mixer
from attnlab.schema.model import ModelConfig
from attnlab.schema.pos import RopePos


@dataclass(frozen=True)
class MixerKind:
    """How to build one kind of mixer: ``build(cfg, window, pos, index, settings)`` with the layer's
    window (None: full) and positional encoding (None: none), ``index`` its place in the stack (from 0)
    and ``settings`` what every attention takes (``layers.attention_settings``); and the cache its
    decoding keeps, from the entries a growing cache reserves."""

    build: Callable[[ModelConfig, int | None, PositionalEncoding | None, int, dict[str, Any]], nn.Module]
    new_cache: Callable[[int], Any]


def head_dim(cfg: ModelConfig) -> int:
    return cfg.d_model // cfg.n_heads


def build_attention(
    cfg: ModelConfig, window: int | None, pos: PositionalEncoding | None, index: int, settings: dict
) -> nn.Module:
    """Softmax attention with the model's hooks; the first layer shares its values for a value residual."""
    return SelfAttention(
        cfg.d_model,
        cfg.n_heads,
        window=window,
        pos=pos,
        hooks=AttentionHooks.of(cfg),
        shares_values=index == 0 and cfg.value_residual is not None,
        **settings,
    )


def build_differential(
    cfg: ModelConfig, window: int | None, pos: PositionalEncoding | None, index: int, settings: dict
) -> nn.Module:
    settings = {**settings, "norm_eps": cfg.norm_eps}
    return DifferentialAttention(
        cfg.d_model, cfg.n_heads, layer=index + 1, window=window, pos=pos, **settings
    )


def latent_head_dims(cfg: ModelConfig, hd: int) -> tuple[int, int]:
    """Latent attention's (position-free, rotary) query-key widths per head for a head of ``hd``:
    ``model.mixers``' sizes, or those derived from ``hd`` (μP reads them at the base width too)."""
    return cfg.mixers.qk_nope_head_dim or hd, cfg.mixers.rope_dim(hd)


def build_latent(
    cfg: ModelConfig, window: int | None, pos: PositionalEncoding | None, index: int, settings: dict
) -> nn.Module:
    sizes = cfg.mixers.resolved(cfg.n_heads, head_dim(cfg), {Mixer.latent})
    rope = pos if isinstance(pos, RotaryPositionalEncoding) else None
    return LatentAttention(
        cfg.d_model,
        cfg.n_heads,
        **sizes,
        bias=cfg.bias,
        rope_base=rope.base if rope is not None else RopePos.rope_base,
        rope=rope is not None,
        window=window,
        scale=cfg.attn_scale,
        absorb=cfg.mixers.absorb,
        backend=settings["backend"],
    )


def deltanet_k_dim(cfg: ModelConfig, hd: int) -> int:
    """Gated DeltaNet's query/key width per head for a head of ``hd`` (μP reads it at the base width)."""
    return cfg.mixers.linear_k_dim or hd


def build_deltanet(
    cfg: ModelConfig, window: int | None, pos: PositionalEncoding | None, index: int, settings: dict
) -> nn.Module:
    sizes = cfg.mixers.resolved(cfg.n_heads, head_dim(cfg), {Mixer.deltanet})
    return GatedDeltaNet(
        cfg.d_model,
        sizes["linear_heads"],
        head_k_dim=sizes["linear_k_dim"],
        head_v_dim=sizes["linear_v_dim"],
        n_k_heads=sizes["linear_k_heads"],
        conv_kernel=sizes["conv_kernel"],
        chunk=cfg.mixers.chunk,
        norm_eps=cfg.norm_eps,
    )


MIXERS: dict[str, MixerKind] = {
    Mixer.attention: MixerKind(build_attention, lambda reserve: AttentionCache(reserve=reserve)),
    Mixer.latent: MixerKind(build_latent, lambda reserve: LatentCache(reserve=reserve)),
    Mixer.differential: MixerKind(build_differential, lambda reserve: AttentionCache(reserve=reserve)),
    Mixer.deltanet: MixerKind(build_deltanet, lambda reserve: RecurrentCache()),  # constant size
}


def mixer_kind(name: str) -> MixerKind:
    """The registration of ``name``; a ValueError naming the kinds otherwise."""
    if name not in MIXERS:
        raise ValueError(f"mixer {name!r} is not one of {', '.join(MIXERS)}")
    return MIXERS[name]


def build_mixer(
    cfg: ModelConfig, kind: LayerKind, pos: PositionalEncoding | None, index: int, settings: dict[str, Any]
) -> nn.Module:
    """Layer ``index``'s mixer as its layout entry ``kind`` says (mixer, window, positions); pruned
    heads (``settings['head_ids']``) only for softmax attention."""
    if kind.mixer != Mixer.attention and settings.get("head_ids") is not None:
        raise ValueError(
            f"model.kept_heads prunes softmax attention heads; layer {index} is a {kind.mixer} mixer"
        )
    window = cfg.attn_window if kind.sliding else None
    return mixer_kind(kind.mixer).build(cfg, window, pos if kind.positions else None, index, settings)


def layer_caches(mixers: Sequence[str], reserves: Sequence[int]) -> list[Any]:
    """An empty decode cache for each layer's mixer; ``reserves``: each growing cache's first allocation."""
    return [mixer_kind(name).new_cache(r) for name, r in zip(mixers, reserves, strict=True)]
