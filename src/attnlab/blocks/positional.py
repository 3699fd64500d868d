"""Positional encodings behind one interface with three hooks.

A positional encoding touches one of three places, so the interface has one hook for each,
all no-ops by default:

* ``embed``   adds to the token embeddings (sinusoidal, learned);
* ``rotate``  rotates queries and keys (RoPE);
* ``score_bias`` adds a bias to the attention scores (ALiBi, T5 relative); ``score_mod`` is the same
  bias as a function of one (batch, head, query, key) index, FlexAttention's ``score_mod``, so that
  backend never holds the (B, H, Tq, Tk) bias.

Every hook receives absolute positions, so a KV cache only has to carry the positions of the
keys it holds for cached decoding to see the same numbers as a full forward pass.
Positions are integer tensors of shape ``(T,)`` or ``(B, T)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.blocks.guards import check_index
from attnlab.blocks.roles import ParamRole, declare_own_init, declare_roles
from attnlab.blocks.rope_scaling import RopeScaling, attention_factor, inv_freq, rope_scaling
from attnlab.schema.builders import Builders
from attnlab.schema.pos import (
    POSITIONS,
    AlibiPos,
    Layout,
    LearnedPos,
    NoPos,
    PosConfig,
    RelativePos,
    RopePos,
    SinusoidalPos,
    check_rope_fraction,
    check_rope_head_size,
    check_sinusoidal_width,
    rotary_dims,
)

# FlexAttention's score_mod: (score, batch, head, query index, key index) -> score, on 0-d tensors
ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]


class PositionalEncoding(nn.Module):
    """Base class: every hook is the identity, so ``none`` is this class itself."""

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        """Return embeddings ``x`` (B, T, D) with position information added."""
        return x

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        """Return queries (B, H, Tq, hd) and keys (B, Hkv, Tk, hd) with positions applied."""
        return q, k

    def score_bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """Return a bias broadcastable to the scores (B, H, Tq, Tk), or None."""
        return None

    def score_mod(self, q_pos: Tensor, k_pos: Tensor) -> ScoreMod | None:
        """``score_bias`` as FlexAttention's ``score_mod(score, b, h, q, k)``, or None.

        ``q_pos`` (B, Tq) and ``k_pos`` (B, Tk) have one row per batch entry; the function adds to one
        score the bias of ``score_bias(q_pos, k_pos)[b, h, q, k]``, with elementwise operations only.
        """
        return None


def _per_batch(positions: Tensor) -> Tensor:
    """View positions as (B or 1, T) so that hooks broadcast the same way for both shapes."""
    return positions if positions.dim() == 2 else positions.unsqueeze(0)


class SinusoidalPositionalEncoding(PositionalEncoding):
    """Fixed sines and cosines (Vaswani et al. 2017).

    ``layout="interleaved"`` is the paper's (sin on even, cos on odd dimensions);
    ``layout="concat"`` puts all sines first, then all cosines (tensor2tensor, fairseq, Marian).
    """

    def __init__(self, d_model: int, base: float = 10000.0, layout: str = SinusoidalPos.layout) -> None:
        super().__init__()
        check_sinusoidal_width(d_model)
        self.layout, self.d_model, self.base = Layout(layout), d_model, base

    def table(self, positions: Tensor) -> Tensor:
        """Encodings for ``positions`` as a float32 tensor of shape (*positions.shape, D)."""
        # frequencies are computed here, not kept in a buffer that model.to(bfloat16) would round
        exponents = (
            torch.arange(0, self.d_model, 2, dtype=torch.float64, device=positions.device) / self.d_model
        )
        angles = positions.to(torch.float64).unsqueeze(-1) * self.base**-exponents
        sin, cos = angles.sin(), angles.cos()
        if self.layout == Layout.concat:
            out = torch.cat([sin, cos], dim=-1)
        else:
            out = torch.stack([sin, cos], dim=-1).flatten(-2)
        return out.to(torch.float32)

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return x + self.table(_per_batch(positions)).to(x.dtype)


class LearnedPositionalEncoding(PositionalEncoding):
    """A trained embedding per absolute position, up to ``max_len`` positions (GPT-2, BERT, ViT)."""

    def __init__(self, d_model: int, max_len: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.weight = nn.Parameter(torch.zeros(max_len, d_model))
        nn.init.normal_(self.weight, std=0.02)
        declare_roles(self, weight=ParamRole.position_table)
        declare_own_init(self, "weight")  # N(0, 0.02) whatever model.init_std

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        check_index(
            positions,
            self.max_len,
            "position",
            f"is beyond the learned positional table (pos=learned was built for max_seq_len={self.max_len}); "
            "use a shorter input or a larger model.max_seq_len",
        )
        # a lookup rather than indexing: embedding's backward is cheaper than index_put's
        return x + F.embedding(_per_batch(positions), self.weight).to(x.dtype)


def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) -> (-x2, x1) over the two halves of the last dimension."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


class RotaryPositionalEncoding(PositionalEncoding):
    """Rotary embeddings (Su et al. 2021) in the half-split layout used by GPT-NeoX and Llama.

    ``scaling`` stretches the frequencies for contexts longer than the trained one
    (``attnlab.blocks.rope_scaling``); it holds no weights, so a trained model can be rebuilt with
    another scaling and the same state dict.
    """

    def __init__(
        self,
        head_dim: int,
        base: float = RopePos.rope_base,
        scaling: RopeScaling | None = None,
        fraction: float = RopePos.rope_fraction,
    ) -> None:
        super().__init__()
        check_rope_head_size(head_dim)
        check_rope_fraction(fraction, head_dim)
        self.head_dim, self.base = head_dim, base
        self.rotary_dims = rotary_dims(head_dim, fraction)  # the first ones rotate, the rest pass (partial)
        self.scaling = scaling or RopeScaling()
        self.attention_factor = attention_factor(self.scaling)

    def _cos_sin(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        positions = _per_batch(positions)
        freqs = positions.float().unsqueeze(-1) * inv_freq(
            self.rotary_dims, self.base, self.scaling, positions
        )
        emb = torch.cat([freqs, freqs], dim=-1).unsqueeze(1)  # (B, 1, T, hd)
        cos, sin = emb.cos(), emb.sin()
        if self.attention_factor != 1.0:  # YaRN: in float32 before rounding, as Hugging Face does
            cos, sin = cos * self.attention_factor, sin * self.attention_factor
        return cos.to(dtype), sin.to(dtype)

    def apply_rotation(self, x: Tensor, positions: Tensor) -> Tensor:
        return self._rotated(x, *self._cos_sin(positions, x.dtype))

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        if q_pos is not k_pos or q.dtype != k.dtype:
            return self.apply_rotation(q, q_pos), self.apply_rotation(k, k_pos)
        cos, sin = self._cos_sin(q_pos, q.dtype)  # self-attention: one table for queries and keys
        return self._rotated(q, cos, sin), self._rotated(k, cos, sin)

    def _rotated(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """``x`` rotated in its first ``rotary_dims`` dimensions (all of them, but for partial RoPE)."""
        if self.rotary_dims == x.shape[-1]:
            return _rotated(x, cos, sin)
        turned, passed = x.split((self.rotary_dims, x.shape[-1] - self.rotary_dims), dim=-1)
        return torch.cat([_rotated(turned, cos, sin), passed], dim=-1)


def _rotated(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    return x * cos + rotate_half(x) * sin


def alibi_slopes(n_heads: int) -> Tensor:
    """Head slopes of Press et al. (2022), with their rule for head counts that are not powers of 2."""
    closest = 2 ** math.floor(math.log2(n_heads))
    base = 2 ** (-(2 ** -(math.log2(closest) - 3)))
    slopes = [base**p for p in range(1, closest + 1)]
    if closest != n_heads:
        extra_base = 2 ** (-(2 ** -(math.log2(2 * closest) - 3)))
        n_extra = min(closest, n_heads - closest)
        slopes += [extra_base**p for p in range(1, 2 * n_extra, 2)]
    return torch.tensor(slopes, dtype=torch.float32)


class ALiBiPositionalEncoding(PositionalEncoding):
    """Linear biases ``-slope_h * |i - j|`` on the scores (Press et al. 2022); no embeddings."""

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def score_bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        distance = (_per_batch(q_pos).unsqueeze(-1) - _per_batch(k_pos).unsqueeze(-2)).abs()  # (B, Tq, Tk)
        return -self.slopes.view(1, -1, 1, 1) * distance.unsqueeze(1).float()

    def score_mod(self, q_pos: Tensor, k_pos: Tensor) -> ScoreMod:
        slopes = self.slopes

        def alibi(score: Tensor, b: Tensor, h: Tensor, q: Tensor, k: Tensor) -> Tensor:
            return score + -slopes[h] * (q_pos[b, q] - k_pos[b, k]).abs().float()

        return alibi


def relative_position_bucket(
    relative_position: Tensor, bidirectional: bool, num_buckets: int, max_distance: int
) -> Tensor:
    """T5's buckets: exact for small offsets, logarithmic up to ``max_distance``, clipped beyond.
    Without in-place operations, so that FlexAttention's ``score_mod`` can call it on 0-d tensors."""
    if bidirectional:
        num_buckets //= 2
        buckets = (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        buckets = torch.zeros_like(relative_position)
        distance = -torch.clamp(relative_position, max=0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    log_ratio = torch.log(distance.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (log_ratio * (num_buckets - max_exact)).long()
    large = torch.clamp(large, max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


class RelativePositionBias(PositionalEncoding):
    """T5's learned bias per head and bucket of the key-minus-query offset (Raffel et al. 2020)."""

    def __init__(
        self,
        n_heads: int,
        num_buckets: int = RelativePos.num_buckets,
        max_distance: int = RelativePos.max_distance,
        bidirectional: bool = True,
    ):
        super().__init__()
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.bias = nn.Embedding(num_buckets, n_heads)
        declare_roles(self.bias, weight=ParamRole.position_table)

    def score_bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        offset = _per_batch(k_pos).unsqueeze(-2) - _per_batch(q_pos).unsqueeze(-1)  # (B, Tq, Tk)
        buckets = relative_position_bucket(offset, self.bidirectional, self.num_buckets, self.max_distance)
        return self.bias(buckets).permute(0, 3, 1, 2)  # (B, H, Tq, Tk)

    def score_mod(self, q_pos: Tensor, k_pos: Tensor) -> ScoreMod:
        table, buckets = self.bias.weight, (self.bidirectional, self.num_buckets, self.max_distance)

        def relative(score: Tensor, b: Tensor, h: Tensor, q: Tensor, k: Tensor) -> Tensor:
            return score + table[relative_position_bucket(k_pos[b, k] - q_pos[b, q], *buckets), h]

        return relative


def build_positional(
    pos: PosConfig, *, d_model: int, n_heads: int, max_len: int, causal: bool
) -> PositionalEncoding:
    """The positional encoding that ``pos`` describes; ``causal`` picks T5's one-sided buckets.
    ``max_len`` sizes a learned table and is the trained length that RoPE scaling stretches from."""
    if not isinstance(pos, PosConfig):
        raise TypeError(f"model.pos={pos!r} is not a PosConfig (attnlab.schema.pos_config(name) makes one)")
    return POSITIONAL.of(pos)(pos, d_model=d_model, n_heads=n_heads, max_len=max_len, causal=causal)


# Each encoding's builder, registered for its schema class: (pos, d_model, n_heads, max_len, causal).
POSITIONAL: Builders[Callable[..., PositionalEncoding]] = Builders(POSITIONS, "positional encoding")
POSITIONAL.builds(NoPos)(lambda pos, **_: PositionalEncoding())
POSITIONAL.builds(SinusoidalPos)(
    lambda pos, *, d_model, **_: SinusoidalPositionalEncoding(d_model, layout=pos.layout)
)
POSITIONAL.builds(LearnedPos)(
    lambda pos, *, d_model, max_len, **_: LearnedPositionalEncoding(d_model, max_len)
)
POSITIONAL.builds(RopePos)(
    lambda pos, *, d_model, n_heads, max_len, **_: RotaryPositionalEncoding(
        d_model // n_heads, base=pos.rope_base, scaling=rope_scaling(pos, max_len), fraction=pos.rope_fraction
    )
)
POSITIONAL.builds(AlibiPos)(lambda pos, *, n_heads, **_: ALiBiPositionalEncoding(n_heads))
POSITIONAL.builds(RelativePos)(
    lambda pos, *, n_heads, causal, **_: RelativePositionBias(
        n_heads, pos.num_buckets, pos.max_distance, bidirectional=not causal
    )
)
