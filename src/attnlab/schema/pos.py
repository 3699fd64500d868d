"""The positional encodings' schemas (``model.pos``, chosen with ``pos=<name>``), and the rules that
the blocks share with the config (a RoPE head size, a sinusoidal width)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omegaconf import MISSING

from attnlab.schema.choice import Choice, TaggedUnion
from attnlab.schema.errors import ConfigError, positive


class PosName(Choice):
    none = "none"
    sinusoidal = "sinusoidal"
    learned = "learned"
    rope = "rope"
    alibi = "alibi"
    relative = "relative"


class Layout(Choice):
    """Where a sinusoidal table puts its sines and cosines."""

    interleaved = "interleaved"  # the paper's: sin on even, cos on odd dimensions
    concat = "concat"  # all sines, then all cosines (tensor2tensor, fairseq, Marian)


class RopeScalingKind(Choice):
    """How RoPE stretches to contexts longer than the trained one (``attnlab.blocks.rope_scaling``)."""

    none = "none"
    linear = "linear"  # position interpolation: every frequency divided by the factor
    ntk = "ntk"  # dynamic NTK-aware (Hugging Face's "dynamic"): the base grows with the length
    yarn = "yarn"  # YaRN: high frequencies kept, low ones interpolated, an attention factor


POSITIONS = TaggedUnion("model.pos", "name", "pos={}")


@dataclass
class PosConfig:
    """A positional encoding; ``name`` is the tag, chosen with ``pos=<name>``."""

    name: str = MISSING  # a str, not the PosName enum: an encoding registered outside attnlab has its own

    def check(self, d_model: int, n_heads: int) -> None:
        """The encoding's own settings, and whether it fits a model of that width and head count."""


@POSITIONS.register
@dataclass
class NoPos(PosConfig):
    """No positional information at all."""

    name: PosName = PosName.none


@POSITIONS.register
@dataclass
class SinusoidalPos(PosConfig):
    """Fixed sines and cosines added to the embeddings (Vaswani et al. 2017)."""

    name: PosName = PosName.sinusoidal
    layout: Layout = Layout.interleaved

    def check(self, d_model: int, n_heads: int) -> None:
        check_sinusoidal_width(d_model)


@POSITIONS.register
@dataclass
class LearnedPos(PosConfig):
    """A trained vector per absolute position (GPT-2, BERT, ViT)."""

    name: PosName = PosName.learned


@POSITIONS.register
@dataclass
class RopePos(PosConfig):
    """Rotary embeddings of queries and keys (Su et al. 2021).

    ``rope_scaling`` stretches them by ``rope_factor`` from ``rope_original_max_len`` (None:
    ``model.max_seq_len``, the length the model was trained for); the fields after it are YaRN's,
    with Hugging Face's defaults. Scaling holds no weights: a checkpoint rebuilds under another one.
    """

    name: PosName = PosName.rope
    rope_base: float = 10000.0
    rope_scaling: RopeScalingKind = RopeScalingKind.none
    rope_factor: float = 1.0
    rope_original_max_len: int | None = None
    rope_beta_fast: float = 32.0
    rope_beta_slow: float = 1.0
    rope_attn_factor: float | None = None  # None: 0.1 ln(rope_factor) + 1 (or the mscale ratio)
    rope_mscale: float = 0.0  # with rope_mscale_all_dim (both non-zero): DeepSeek's attention factor
    rope_mscale_all_dim: float = 0.0
    rope_truncate: bool = True  # round YaRN's ramp ends to whole dimensions
    # Partial RoPE (HF partial_rotary_factor: GPT-NeoX, Phi, Qwen3-Next 0.25): the first
    # int(head_dim * rope_fraction) dimensions of each head rotate, the others pass unchanged.
    rope_fraction: float = 1.0

    def check(self, d_model: int, n_heads: int) -> None:
        positive("model.pos.rope_base", self.rope_base)
        check_rope_head_size(d_model // n_heads)
        check_rope_fraction(self.rope_fraction, d_model // n_heads)
        check_rope_scaling(self)


@POSITIONS.register
@dataclass
class AlibiPos(PosConfig):
    """Linear biases on the attention scores (Press et al. 2022)."""

    name: PosName = PosName.alibi


@POSITIONS.register
@dataclass
class RelativePos(PosConfig):
    """T5's learned bias per head and bucket of offsets (Raffel et al. 2020)."""

    name: PosName = PosName.relative
    num_buckets: int = 32
    max_distance: int = 128

    def check(self, d_model: int, n_heads: int) -> None:
        positive("model.pos.num_buckets", self.num_buckets)
        positive("model.pos.max_distance", self.max_distance)


if TYPE_CHECKING:
    AnyPosConfig = PosConfig
else:
    # ``model.pos``'s annotation: any registered PosConfig class to a reader and a type checker, Any to
    # OmegaConf. A model preset's class (GPTConfig, its pos MISSING) merges over the run's model node
    # after pos=<name> has put a RopePos there; OmegaConf 2.3 then retypes a field declared PosConfig
    # as a bare PosConfig (basecontainer._map_merge replaces a MISSING structured source by a prototype
    # of the declared class and gives the node that class), and rope_base would be an unknown key.
    # Declared Any, the node keeps the class pos=<name> chose, whose keys OmegaConf checks;
    # ``ModelConfig.check`` refuses anything else, and ``OmegaConf.to_object`` builds that class.
    AnyPosConfig = Any


def pos_config(name: str, **settings: object) -> PosConfig:
    """The positional encoding called ``name`` with ``settings`` (its other fields at their defaults)."""
    return POSITIONS.schema_of({"name": name})(**settings)


def check_rope_head_size(head_dim: int) -> None:
    """RoPE rotates pairs of dimensions within a head."""
    if head_dim % 2:
        raise ConfigError(
            "model.pos.name", PosName.rope, f"rope needs an even head size, d_model/n_heads={head_dim}"
        )


def rotary_dims(head_dim: int, fraction: float) -> int:
    """The dimensions of a head that partial RoPE rotates (Hugging Face's ``int(head_dim * factor)``)."""
    return int(head_dim * fraction)


def check_rope_fraction(fraction: float, head_dim: int) -> None:
    """Partial RoPE rotates a positive, even number of each head's dimensions."""
    dims = rotary_dims(head_dim, fraction)
    if not 0.0 < fraction <= 1.0 or dims < 2 or dims % 2:
        raise ConfigError(
            "model.pos.rope_fraction",
            fraction,
            f"in (0, 1], rotating an even number of the {head_dim} dimensions of a head (here {dims})",
        )


def check_rope_factor(factor: float) -> None:
    """A scaling stretches RoPE's frequencies, never compresses them (1: no stretch)."""
    if factor < 1.0:
        raise ConfigError("model.pos.rope_factor", factor, "must be at least 1 (1: no stretch)")


def check_rope_scaling(pos: RopePos) -> None:
    """The scaling's factor, original length and YaRN's settings (read only when a scaling is set)."""
    if pos.rope_scaling == RopeScalingKind.none:
        return
    check_rope_factor(pos.rope_factor)
    positive("model.pos.rope_original_max_len", pos.rope_original_max_len, allow_none=True)
    positive("model.pos.rope_beta_slow", pos.rope_beta_slow)
    if pos.rope_beta_fast < pos.rope_beta_slow:
        raise ConfigError(
            "model.pos.rope_beta_fast",
            pos.rope_beta_fast,
            f"must be at least model.pos.rope_beta_slow={pos.rope_beta_slow}",
        )
    positive("model.pos.rope_attn_factor", pos.rope_attn_factor, allow_none=True)


def check_sinusoidal_width(d_model: int) -> None:
    """A sinusoidal table pairs a sine with a cosine of each frequency."""
    if d_model % 2:
        raise ConfigError(
            "model.pos.name", PosName.sinusoidal, f"sinusoidal needs an even model.d_model, got {d_model}"
        )
