"""RoPE's frequencies, and how each scaling stretches them to contexts longer than the trained one.

Rotary embeddings turn dimension pair ``i`` of a head by ``position * inv_freq[i]``, with
``inv_freq[i] = base^(-2i/d)``. Past the length a model was trained on (``original_max_len``) the
angles are new to it; a scaling maps them back into the trained range:

* ``linear``: position interpolation (Chen et al. 2023), every frequency divided by ``factor``;
* ``ntk``:    dynamic NTK-aware scaling (Hugging Face's ``dynamic``): the base grows with the
  current length ``L = max(position) + 1``, ``base * (factor * L / original - (factor - 1))^(d / (d - 2))``,
  and only once ``L`` exceeds ``original_max_len``;
* ``yarn``:   YaRN (Peng et al. 2023): high frequencies kept, low ones interpolated, a linear ramp
  between (set by ``beta_fast`` / ``beta_slow`` rotations), and cos/sin multiplied by an attention
  factor, ``0.1 ln(factor) + 1`` unless given.

Every function mirrors Hugging Face's ``modeling_rope_utils`` operation for operation in float32, so
``attnlab.load_hf`` reproduces a Llama with any of these ``rope_scaling`` types to float rounding.
Nothing here reads a tensor on the host: the dynamic length stays a tensor, so a compiled forward
pass has no graph break and a GPU no sync.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.schema.errors import ConfigError
from attnlab.schema.pos import RopePos, RopeScalingKind, check_rope_factor


@dataclass(frozen=True)
class RopeScaling:
    """One scaling and its parameters (the YaRN ones are read by ``yarn`` only).

    ``attention_factor`` None derives YaRN's factor from ``factor`` (and from ``mscale`` and
    ``mscale_all_dim`` when both are set, as DeepSeek's configs do); 0 means unset for those two.
    """

    kind: RopeScalingKind = RopePos.rope_scaling
    factor: float = RopePos.rope_factor
    original_max_len: int = 2048  # the schema's None means the model's max_seq_len (``rope_scaling``)
    beta_fast: float = RopePos.rope_beta_fast
    beta_slow: float = RopePos.rope_beta_slow
    attention_factor: float | None = RopePos.rope_attn_factor
    mscale: float = RopePos.rope_mscale
    mscale_all_dim: float = RopePos.rope_mscale_all_dim
    truncate: bool = RopePos.rope_truncate

    def __post_init__(self) -> None:
        if self.kind not in set(RopeScalingKind):
            raise ConfigError(
                "model.pos.rope_scaling", self.kind, f"choose one of {RopeScalingKind.listed()}"
            )
        object.__setattr__(self, "kind", RopeScalingKind(self.kind))
        if self.kind != RopeScalingKind.none:
            check_rope_factor(self.factor)


def rope_scaling(pos: RopePos, max_len: int) -> RopeScaling:
    """The scaling that ``pos`` sets; its original length defaults to ``max_len``, the trained one."""
    return RopeScaling(
        kind=pos.rope_scaling,
        factor=pos.rope_factor,
        original_max_len=pos.rope_original_max_len or max_len,
        beta_fast=pos.rope_beta_fast,
        beta_slow=pos.rope_beta_slow,
        attention_factor=pos.rope_attn_factor,
        mscale=pos.rope_mscale,
        mscale_all_dim=pos.rope_mscale_all_dim,
        truncate=pos.rope_truncate,
    )


def default_inv_freq(dim: int, base: float, device: torch.device | None = None) -> Tensor:
    """``base^(-2i/dim)`` in float32, computed per call: a buffer would be rounded by ``model.to(bfloat16)``."""
    exponents = torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() / dim
    return 1.0 / (base**exponents)


def ntk_inv_freq(dim: int, base: float, scaling: RopeScaling, positions: Tensor) -> Tensor:
    """Dynamic NTK frequencies for the current call: ``positions`` set the length ``L``.

    Hugging Face's rotary module recomputes its frequencies when ``L`` first exceeds the original
    length and keeps the longest length seen until a call shorter than the original resets it.
    Here they are a function of the call alone: the same for a fresh Hugging Face model's every call
    and for each step of cached decoding, where lengths only grow (keys keep the rotation they were
    cached with, as in Hugging Face's cache).
    """
    original = scaling.original_max_len
    length = positions.amax() + 1
    longer = torch.maximum(length, torch.tensor(original, dtype=length.dtype, device=length.device))
    grown = base * ((scaling.factor * longer / original) - (scaling.factor - 1)) ** (dim / (dim - 2))
    exponents = torch.arange(0, dim, 2, dtype=torch.int64, device=positions.device).float() / dim
    stretched = 1.0 / (grown**exponents)
    return torch.where(length > original, stretched, default_inv_freq(dim, base, positions.device))


def yarn_attention_factor(scaling: RopeScaling) -> float:
    """What YaRN multiplies cos and sin by: given, or ``0.1 * m * ln(factor) + 1`` (a ratio of two with mscales)."""
    if scaling.attention_factor is not None:
        return scaling.attention_factor

    def get_mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if scaling.mscale and scaling.mscale_all_dim:
        return get_mscale(scaling.factor, scaling.mscale) / get_mscale(scaling.factor, scaling.mscale_all_dim)
    return get_mscale(scaling.factor)


def _correction_dim(rotations: float, dim: int, base: float, original: int) -> float:
    """The dimension whose wavelength fits ``rotations`` full turns into the original length."""
    return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))


def yarn_inv_freq(dim: int, base: float, scaling: RopeScaling, device: torch.device | None = None) -> Tensor:
    """YaRN's frequencies: extrapolated above ``beta_fast`` turns, interpolated below ``beta_slow``."""
    low = _correction_dim(scaling.beta_fast, dim, base, scaling.original_max_len)
    high = _correction_dim(scaling.beta_slow, dim, base, scaling.original_max_len)
    if scaling.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as Hugging Face: no division by zero
    pos_freqs = base ** (torch.arange(0, dim, 2, device=device).float() / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (scaling.factor * pos_freqs)
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    keep = 1 - ramp.to(device)  # 1: extrapolate (high frequencies), 0: interpolate
    return interpolation * (1 - keep) + extrapolation * keep


def inv_freq(dim: int, base: float, scaling: RopeScaling, positions: Tensor) -> Tensor:
    """The frequencies (dim/2,) that rotate ``positions`` under ``scaling``."""
    if scaling.kind == RopeScalingKind.ntk:
        return ntk_inv_freq(dim, base, scaling, positions)
    if scaling.kind == RopeScalingKind.yarn:
        return yarn_inv_freq(dim, base, scaling, positions.device)
    freqs = default_inv_freq(dim, base, positions.device)
    return freqs / scaling.factor if scaling.kind == RopeScalingKind.linear else freqs


def attention_factor(scaling: RopeScaling) -> float:
    """What cos and sin are multiplied by: YaRN's factor, else 1."""
    return yarn_attention_factor(scaling) if scaling.kind == RopeScalingKind.yarn else 1.0
