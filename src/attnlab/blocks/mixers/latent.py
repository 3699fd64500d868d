"""Multi-head latent attention (MLA; DeepSeek-V2, Liu et al. 2024; DeepSeek-V3): keys and values
through a low-rank latent, RoPE on a separate key shared by every head.

Each token's keys and values are compressed into one latent ``c`` of ``kv_lora_rank`` numbers (an
RMSNorm after the down-projection), from which ``kv_b_proj`` expands every head's position-free key
part (``qk_nope_head_dim``) and its value (``v_head_dim``). Position enters through a second, small key
of ``qk_rope_head_dim`` numbers that RoPE rotates and that all heads share; each query has a matching
rotated part. A head's score is ``q_nope·k_nope + q_rope·k_rope``, scaled by ``(nope + rope)^-1/2``.
Queries go through their own low-rank latent (``q_lora_rank``) or, without one, a plain projection.

The decode cache holds only ``c`` and the rotated key: ``kv_lora_rank + qk_rope_head_dim`` numbers per
token and layer, where multi-head attention keeps ``2 * n_kv_heads * head_dim``. Decoding may also
skip the expansion (``absorb=True``, DeepSeek-V2 section 2.1.2): the key up-projection is multiplied
into the queries and the value up-projection applied after the weighted sum, so attention runs in the
latent space as multi-query attention over the cache itself; its tokens equal the plain path's.

Hugging Face's ``DeepseekV3Attention`` is this module with its parameter names (``q_a_proj``,
``q_a_layernorm``, ``q_b_proj`` or ``q_proj``, ``kv_a_proj_with_mqa``, ``kv_a_layernorm``, ``kv_b_proj``)
but for ``o_proj``, here ``out_proj``: the name the residual-output init and the activation sites
read. ``rope_interleave`` reads the rotary dimensions as interleaved pairs, as DeepSeek's checkpoints
store them.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn

from attnlab.blocks.backends import Keys, backend_named
from attnlab.blocks.cache import AttentionCache
from attnlab.blocks.masks import KeyRule
from attnlab.blocks.norm import RMSNorm
from attnlab.blocks.positional import RotaryPositionalEncoding, ScoreMod
from attnlab.blocks.roles import ParamRole, declare_roles
from attnlab.blocks.view import AttentionView
from attnlab.schema.mixers import MixerSizes
from attnlab.schema.model import ModelConfig
from attnlab.schema.pos import RopePos

LATENT_NORM_EPS = 1e-6  # DeepSeek's q_a_layernorm and kv_a_layernorm (not the model's norm_eps)


class LatentCache(AttentionCache):
    """A decode cache of latent attention: per token the normed latent (``k``, (B, 1, T, kv_lora_rank))
    and the rotated shared key (``v``, (B, 1, T, qk_rope_head_dim)), nothing else.

    It is an ``AttentionCache`` whose two tensors hold the latent and the RoPE key instead of keys and
    values, so that growing buffers, window trimming, beam reordering and ``seen`` work unchanged.
    """

    @property
    def latent(self) -> Tensor | None:
        """The normed latents (B, 1, T, kv_lora_rank) kept so far."""
        return self.k

    @property
    def rope_key(self) -> Tensor | None:
        """The rotated shared keys (B, 1, T, qk_rope_head_dim) kept so far."""
        return self.v

    def numbers_per_token(self) -> int:
        """The numbers kept per token (per batch row): ``kv_lora_rank + qk_rope_head_dim``."""
        return 0 if self.k is None else self.k.shape[-1] + self.v.shape[-1]


def deinterleave(x: Tensor) -> Tensor:
    """Rotary dimensions stored as pairs (x0, x1), (x2, x3), ... in the half-split layout (evens, odds)
    that ``rotate_half`` expects; queries and keys permuted alike leave every score unchanged."""
    return torch.cat([x[..., 0::2], x[..., 1::2]], dim=-1)


class LatentAttention(nn.Module):
    """MLA over ``d_model`` with ``n_heads`` heads; see the module's docstring for the shapes.

    ``q_lora_rank`` None projects queries directly. ``rope_base`` is the RoPE base of the decoupled key
    (``rope=False``: no rotation, a NoPE layer). ``window``: keys fewer than ``window`` positions back
    (None: all). ``absorb``: attention in the latent space (weights absorbed). ``backend``: ``sdpa``,
    ``explicit`` or ``flex``, as for ``SelfAttention``; the plain and absorbed paths run on any of them.
    """

    qk_clip_refusal: ClassVar[str] = "latent attention's logits come from its latents: no QK-clip rule yet"
    tensor_parallel_refusal: ClassVar[str] = (
        "latent attention: its latent projections have no tensor-parallel plan yet"
    )

    cross = False

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        kv_lora_rank: int,
        qk_nope_head_dim: int,
        qk_rope_head_dim: int,
        v_head_dim: int,
        q_lora_rank: int | None = MixerSizes.q_lora_rank,
        bias: bool = ModelConfig.bias,
        rope_base: float = RopePos.rope_base,
        rope: bool = True,
        rope_interleave: bool = False,
        window: int | None = ModelConfig.attn_window,
        scale: float | None = ModelConfig.attn_scale,
        absorb: bool = MixerSizes.absorb,
        backend: str = ModelConfig.attn_backend,
    ) -> None:
        super().__init__()
        for name, value in (("kv_lora_rank", kv_lora_rank), ("v_head_dim", v_head_dim)):
            if value < 1:
                raise ValueError(f"latent attention {name}={value}: must be positive")
        if qk_rope_head_dim < 2 or qk_rope_head_dim % 2:
            raise ValueError(f"latent attention qk_rope_head_dim={qk_rope_head_dim}: a positive even number")
        self.n_heads = self.n_kv_heads = n_heads  # every head has its own expanded key and value
        self.kv_lora_rank, self.q_lora_rank = kv_lora_rank, q_lora_rank
        self.nope_dim, self.rope_dim, self.v_dim = qk_nope_head_dim, qk_rope_head_dim, v_head_dim
        qk_dim = qk_nope_head_dim + qk_rope_head_dim
        self.scale = scale if scale is not None else qk_dim**-0.5
        self.window, self.absorb, self.rope_interleave = window, absorb, rope_interleave
        self.dropout = 0.0
        self.softcap = self.sinks = None  # the softmax layer's score hooks (blocks.hooks): not applied here
        self.rotary = RotaryPositionalEncoding(qk_rope_head_dim, base=rope_base) if rope else None
        if q_lora_rank is None:
            self.q_proj = nn.Linear(d_model, n_heads * qk_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(d_model, q_lora_rank, bias=bias)
            self.q_a_layernorm = RMSNorm(q_lora_rank, LATENT_NORM_EPS)
            self.q_b_proj = nn.Linear(q_lora_rank, n_heads * qk_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(d_model, kv_lora_rank + qk_rope_head_dim, bias=bias)
        self.kv_a_layernorm = RMSNorm(kv_lora_rank, LATENT_NORM_EPS)
        self.kv_b_proj = nn.Linear(kv_lora_rank, n_heads * (qk_nope_head_dim + v_head_dim), bias=False)
        self.out_proj = nn.Linear(n_heads * v_head_dim, d_model, bias=bias)
        for name in ("q_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "out_proj"):
            if name in self._modules:  # projections in and out of the latents: hidden matrices
                declare_roles(self._modules[name], weight=ParamRole.hidden_matrix)
        self.weights_probe = nn.Identity()  # the explicit backend passes its weights through it
        self.backend = backend_named(backend)

    @property
    def path(self) -> str:
        """The backend's name."""
        return self.backend.name

    def score_bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """No score bias: position is the decoupled rotary key's."""
        return None

    def score_mod(self, q_rows: Tensor, k_rows: Tensor) -> ScoreMod | None:
        return None

    def _queries(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Each head's position-free and rotary query parts (B, H, T, nope) and (B, H, T, rope)."""
        if self.q_lora_rank is None:
            q = self.q_proj(x)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        b, t, _ = x.shape
        q = q.view(b, t, self.n_heads, self.nope_dim + self.rope_dim).transpose(1, 2)
        return q.split((self.nope_dim, self.rope_dim), dim=-1)

    def _latents(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The normed latent (B, 1, T, kv_lora_rank) and the unrotated shared key (B, 1, T, rope)."""
        latent, rope_key = self.kv_a_proj_with_mqa(x).split((self.kv_lora_rank, self.rope_dim), dim=-1)
        return self.kv_a_layernorm(latent).unsqueeze(1), rope_key.unsqueeze(1)

    def _rotate(self, q_rope: Tensor, k_rope: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        if self.rotary is None:
            return q_rope, k_rope
        if self.rope_interleave:
            q_rope, k_rope = deinterleave(q_rope), deinterleave(k_rope)
        return self.rotary.rotate(q_rope, k_rope, positions, positions)

    def up_weights(self) -> tuple[Tensor, Tensor]:
        """``kv_b_proj``'s weight as per-head key and value up-projections (H, nope, r), (H, v, r)."""
        w = self.kv_b_proj.weight.view(self.n_heads, self.nope_dim + self.v_dim, self.kv_lora_rank)
        return w.split((self.nope_dim, self.v_dim), dim=1)

    def forward(self, x: Tensor, view: AttentionView, cache: AttentionCache | None = None) -> Tensor:
        """Attend from ``x`` (B, T, D) at ``view.positions`` to itself and the latents in ``cache``
        (a ``LatentCache``); ``view.padding`` covers cached and new tokens."""
        if view.documents is not None and cache is not None:
            raise ValueError("document ids apply without a cache (decode one document at a time)")
        q_nope, q_rope = self._queries(x)
        latent, k_rope = self._latents(x)
        q_rope, k_rope = self._rotate(q_rope, k_rope, view.positions)
        positions, padding, k_pos = view.positions, view.padding, view.positions
        if cache is not None:
            if padding is not None:
                padding = padding[:, cache.dropped :]
            latent, k_rope, k_pos = cache.append(
                latent, k_rope, positions, keep=self.window if view.causal else None
            )
        keys = Keys(
            positions, k_pos, KeyRule(causal=view.causal, window=self.window), padding, view.documents
        )
        if self.absorb:
            y = self._absorbed(q_nope, q_rope, latent, k_rope, keys, view)
        else:
            y = self._expanded(q_nope, q_rope, latent, k_rope, keys, view)
        return self.out_proj(y.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1))

    def _expanded(
        self, q_nope: Tensor, q_rope: Tensor, latent: Tensor, k_rope: Tensor, keys: Keys, view: AttentionView
    ) -> Tensor:
        """The plain path: every head's keys and values expanded from the latents, then attention."""
        b, _, tk, _ = latent.shape
        kv = self.kv_b_proj(latent.squeeze(1)).view(b, tk, self.n_heads, self.nope_dim + self.v_dim)
        k_nope, v = kv.transpose(1, 2).split((self.nope_dim, self.v_dim), dim=-1)
        k = torch.cat([k_nope, k_rope.expand(-1, self.n_heads, -1, -1)], dim=-1)
        q = torch.cat([q_nope, q_rope], dim=-1)
        return self.backend.attend(self, q, k, v, keys, view.masks)

    def _absorbed(
        self, q_nope: Tensor, q_rope: Tensor, latent: Tensor, k_rope: Tensor, keys: Keys, view: AttentionView
    ) -> Tensor:
        """The absorbed path: ``q_nope W_uk`` scores the latents directly (one key for all heads, as in
        multi-query attention), the weighted latents go through ``W_uv`` after the sum."""
        w_uk, w_uv = self.up_weights()
        q_latent = torch.einsum("bhtn,hnr->bhtr", q_nope, w_uk)
        q = torch.cat([q_latent, q_rope], dim=-1)
        k = torch.cat([latent, k_rope], dim=-1).expand(-1, self.n_heads, -1, -1)
        y_latent = self.backend.attend(self, q, k, latent.expand(-1, self.n_heads, -1, -1), keys, view.masks)
        return torch.einsum("bhtr,hvr->bhtv", y_latent, w_uv)

    def cache_numbers_per_token(self) -> int:
        """What a ``LatentCache`` of this module keeps per token: ``kv_lora_rank + qk_rope_head_dim``."""
        return self.kv_lora_rank + self.rope_dim
