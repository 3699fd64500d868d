"""Gated DeltaNet (Yang, Kautz and Hatamizadeh, ICLR 2025): the linear layers of Qwen3-Next.

Each value head keeps a matrix state ``S`` (key width x value width) in place of a KV cache. Per token
the state decays by ``exp(g)``, then the delta rule writes: what ``S`` already predicts for the key is
replaced, at the rate ``β``, by the value,

    S ← exp(g) S;   S ← S + β k (v - kᵀ S)ᵀ;   o = qᵀ S,

with ``q``, ``k`` L2-normed and ``q`` scaled by ``1/sqrt(head_k_dim)`` (``scale``). The gates come from the input:
``β = sigmoid(b)`` and ``g = -exp(A_log) softplus(a + dt_bias)`` (Mamba-2's decay, one per head).
Before the rule, queries, keys and values pass a short causal depthwise convolution (SiLU after it);
after it, an RMSNorm per head gated by ``silu(z)``, then the output projection.

Training runs the rule in chunks (``chunked_delta_rule``: within a chunk a triangular solve, the WY
form of the updates; across chunks the state), decoding one token at a time (``recurrent_delta_rule``);
both give the same outputs and final state. The cache (``RecurrentCache``) is that state and the
convolution's last inputs: a constant size however long the sequence. fla's Triton kernels replace
both on a CUDA device where ``fla`` is installed; everywhere else the torch code here runs.

Hugging Face's ``Qwen3NextGatedDeltaNet`` is this module; its fused projections group q, k, v, z (and
b, a) by key head, ours lay them out one after the other (``hf_projection_order`` maps between them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.blocks.roles import ParamRole, declare_own_init, declare_roles
from attnlab.blocks.view import AttentionView
from attnlab.schema.mixers import MixerSizes
from attnlab.schema.model import ModelConfig


@dataclass
class RecurrentCache:
    """Gated DeltaNet's decode cache: the convolution's last ``kernel - 1`` inputs (B, C, K-1) and the
    recurrent state (B, H, head_k_dim, head_v_dim), with the count of tokens seen (their positions)."""

    conv: Tensor | None = None
    state: Tensor | None = None
    seen: int = 0
    dropped: int = 0  # nothing is trimmed; read where a KV cache's trimmed count is

    def reorder(self, index: Tensor) -> None:
        """Keep the batch rows in ``index`` (beam search)."""
        if self.state is not None:
            self.conv, self.state = self.conv.index_select(0, index), self.state.index_select(0, index)

    def numbers(self) -> int:
        """The numbers held per batch row, whatever the number of tokens seen."""
        if self.state is None:
            return 0
        return self.conv[0].numel() + self.state[0].numel()


def l2norm(x: Tensor, eps: float = 1e-6) -> Tensor:
    """``x / sqrt(|x|² + eps)`` over the last dimension (fla's and Hugging Face's form)."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def causal_conv(x: Tensor, weight: Tensor, state: Tensor | None) -> tuple[Tensor, Tensor]:
    """SiLU of the depthwise causal convolution of ``x`` (B, C, T) with ``weight`` (C, K), continuing
    from ``state`` (the previous K-1 inputs, zeros at the start), and the new state."""
    kernel = weight.shape[-1]
    if state is None:
        state = x.new_zeros(x.shape[0], x.shape[1], kernel - 1)
    full = torch.cat([state.to(x.dtype), x], dim=-1)
    out = F.conv1d(full, weight.unsqueeze(1), groups=x.shape[1])
    return F.silu(out), full[:, :, full.shape[-1] - (kernel - 1) :]


def recurrent_delta_rule(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor
) -> tuple[Tensor, Tensor]:
    """The rule token by token: outputs (B, H, T, dv) and the final state (B, H, dk, dv), from queries
    and keys (B, H, T, dk, normed and q scaled), values (B, H, T, dv), gates (B, H, T), float32."""
    out = []
    for t in range(q.shape[2]):
        state = state * g[:, :, t].exp()[..., None, None]
        predicted = torch.einsum("bhk,bhkv->bhv", k[:, :, t], state)
        delta = (v[:, :, t] - predicted) * beta[:, :, t, None]
        state = state + k[:, :, t, :, None] * delta[:, :, None, :]
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], state))
    return torch.stack(out, dim=2), state


def chunked_delta_rule(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor, chunk: int = 64
) -> tuple[Tensor, Tensor]:
    """The rule in chunks of ``chunk`` tokens, equal to ``recurrent_delta_rule`` (same arguments).

    Within a chunk, the delta rule's sequential writes are one unit lower-triangular solve (the WY
    representation, DeltaNet's ``UT`` transform): ``u`` the values to write and ``w`` the decayed keys
    that read the state the chunk starts from. Across chunks a loop carries the state: T/chunk steps.
    """
    length = q.shape[2]
    pad = (-length) % chunk
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    b, h, n = q.shape[0], q.shape[1], q.shape[2] // chunk
    q, k, v = (x.view(b, h, n, chunk, x.shape[-1]) for x in (q, k, v))
    g, beta = g.view(b, h, n, chunk), beta.view(b, h, n, chunk)
    decay = g.cumsum(dim=-1)  # log of the decay from the chunk's start to each token
    later = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).triu(1)
    between = (decay[..., :, None] - decay[..., None, :]).masked_fill(later, float("-inf")).exp()
    k_beta, v_beta = k * beta[..., None], v * beta[..., None]
    system = (k_beta @ k.transpose(-1, -2)) * between  # its strict lower part couples the writes
    u = torch.linalg.solve_triangular(system, v_beta, upper=False, unitriangular=True)
    w = torch.linalg.solve_triangular(
        system, k_beta * decay.exp()[..., None], upper=False, unitriangular=True
    )
    within = (q @ k.transpose(-1, -2)) * between
    q_read = q * decay.exp()[..., None]  # a query reads the chunk's initial state decayed to its token
    k_write = k * (decay[..., -1:] - decay).exp()[..., None]  # a key's write decayed to the chunk's end
    chunk_decay = decay[..., -1].exp()[..., None, None]
    out = []
    for i in range(n):
        new = u[:, :, i] - w[:, :, i] @ state  # the writes, less what the initial state predicts
        out.append(q_read[:, :, i] @ state + within[:, :, i] @ new)
        state = state * chunk_decay[:, :, i] + k_write[:, :, i].transpose(-1, -2) @ new
    return torch.cat(out, dim=2)[:, :, :length], state


@cache
def fla_kernels() -> tuple[object, object] | None:
    """fla's chunked and fused recurrent gated delta rule kernels (Triton, CUDA only), or None."""
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
    except ImportError:
        return None
    return chunk_gated_delta_rule, fused_recurrent_gated_delta_rule


class GatedRMSNorm(nn.Module):
    """RMSNorm of each head's output (gain ``weight``), then times ``silu(gate)`` (Qwen3-Next, fla)."""

    def __init__(self, dim: int, eps: float = ModelConfig.norm_eps) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor, gate: Tensor) -> Tensor:
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).to(x.dtype) * self.weight
        return (normed * F.silu(gate.float())).to(x.dtype)


class GatedDeltaNet(nn.Module):
    """Gated DeltaNet over ``d_model``: ``n_heads`` value heads of ``head_v_dim``, ``n_k_heads`` (a
    divisor of ``n_heads``; None: as many) query/key heads of ``head_k_dim``, each serving
    ``n_heads / n_k_heads`` consecutive value heads. ``conv_kernel``: the short convolution's width;
    ``chunk``: the training chunk; ``norm_eps``: the gated norm's epsilon.

    Causal by nature: a non-causal view, packed documents and windows are refused in one line.
    """

    tensor_parallel_refusal: ClassVar[str] = (
        "gated DeltaNet: its fused projection and convolution have no tensor-parallel plan yet"
    )

    cross = False
    window = None

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        head_k_dim: int,
        head_v_dim: int,
        n_k_heads: int | None = MixerSizes.linear_k_heads,
        conv_kernel: int = MixerSizes.conv_kernel,
        chunk: int = MixerSizes.chunk,
        norm_eps: float = ModelConfig.norm_eps,
    ) -> None:
        super().__init__()
        n_k_heads = n_k_heads or n_heads
        if n_heads % n_k_heads:
            raise ValueError(f"gated DeltaNet n_k_heads={n_k_heads}: must divide n_heads={n_heads}")
        if conv_kernel < 1 or chunk < 1:
            raise ValueError(f"gated DeltaNet conv_kernel={conv_kernel}, chunk={chunk}: both positive")
        self.n_heads, self.n_k_heads, self.head_k_dim, self.head_v_dim = (
            n_heads,
            n_k_heads,
            head_k_dim,
            head_v_dim,
        )
        self.key_dim, self.value_dim = n_k_heads * head_k_dim, n_heads * head_v_dim
        self.conv_dim = 2 * self.key_dim + self.value_dim  # q, k and v pass the convolution
        self.chunk = chunk
        self.scale = head_k_dim**-0.5  # the queries' scale (μP sets its own: models.parametrization)
        # one product for q, k, v (the convolution's channels), z (the output gate), b and a (β, decay)
        self.splits = (self.conv_dim, self.value_dim, n_heads, n_heads)
        self.in_proj = nn.Linear(d_model, sum(self.splits), bias=False)
        self.conv_weight = nn.Parameter(torch.empty(self.conv_dim, conv_kernel))
        nn.init.uniform_(self.conv_weight, -1 / math.sqrt(conv_kernel), 1 / math.sqrt(conv_kernel))
        self.A_log = nn.Parameter(torch.empty(n_heads).uniform_(1, 16).log())  # decay rates (fla's range)
        dt = torch.empty(n_heads).uniform_(math.log(1e-3), math.log(1e-1)).exp().clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt at a = 0
        self.norm = GatedRMSNorm(head_v_dim, norm_eps)
        self.out_proj = nn.Linear(self.value_dim, d_model, bias=False)
        declare_roles(self.in_proj, weight=ParamRole.hidden_matrix)
        declare_roles(self.out_proj, weight=ParamRole.hidden_matrix)
        # The depthwise kernel is a vector role: each channel's K taps scale that channel only (fan-in
        # K, fixed, not the width), like a gain over time: no weight decay, Adam not Muon, μP's vector lr.
        declare_roles(self, conv_weight=ParamRole.vector, A_log=ParamRole.vector, dt_bias=ParamRole.vector)
        declare_own_init(self, "conv_weight", "A_log", "dt_bias")

    def gates(self, b: Tensor, a: Tensor) -> tuple[Tensor, Tensor]:
        """β = sigmoid(b) and the log-decay g = -exp(A_log) softplus(a + dt_bias), in float32 (B, T, H)."""
        return b.float().sigmoid(), -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias.float())

    def forward(self, x: Tensor, view: AttentionView, cache: RecurrentCache | None = None) -> Tensor:
        """Mix ``x`` (B, T, D) causally, continuing from ``cache`` (updated in place); ``view.padding``
        (B, cached + T) zeroes the padded tokens' inputs, so left padding leaves the state at zero."""
        check_view(view)
        bsz, t, _ = x.shape
        if view.padding is not None:
            x = x * view.padding[:, -t:, None].to(x.dtype)
        mixed, z, b, a = self.in_proj(x).split(self.splits, dim=-1)
        mixed, conv = causal_conv(mixed.transpose(1, 2), self.conv_weight, cache.conv if cache else None)
        q, k, v = mixed.transpose(1, 2).split((self.key_dim, self.key_dim, self.value_dim), dim=-1)
        beta, g = self.gates(b, a)
        state = cache.state if cache is not None else None
        y, state = self.delta_rule(q, k, v, g, beta, state, recurrent=cache is not None and t == 1)
        if cache is not None:
            cache.conv, cache.state, cache.seen = conv, state, cache.seen + t
        y = self.norm(y.to(x.dtype), z.view(bsz, t, self.n_heads, self.head_v_dim))
        return self.out_proj(y.reshape(bsz, t, self.value_dim))

    def delta_rule(
        self, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor | None, recurrent: bool
    ) -> tuple[Tensor, Tensor]:
        """Outputs (B, T, H, dv) and final state of q, k (B, T, Hk*dk), v (B, T, H*dv), g, β (B, T, H):
        fla's kernels on CUDA where installed, else ``recurrent_delta_rule`` or ``chunked_delta_rule``."""
        bsz, t, _ = q.shape
        q, k = q.view(bsz, t, self.n_k_heads, -1), k.view(bsz, t, self.n_k_heads, -1)
        v = v.view(bsz, t, self.n_heads, -1)
        if self.n_k_heads != self.n_heads:  # each query/key head serves consecutive value heads
            q, k = (x.repeat_interleave(self.n_heads // self.n_k_heads, dim=2) for x in (q, k))
        kernels = fla_kernels() if q.is_cuda else None
        if kernels is not None:
            kernel = kernels[1] if recurrent else kernels[0]
            return kernel(
                q,
                k,
                v,
                g=g,
                beta=beta,
                scale=self.scale,
                initial_state=state,
                output_final_state=True,
                use_qk_l2norm_in_kernel=True,
            )
        q, k, v, g, beta = (x.transpose(1, 2).float() for x in (q, k, v, g, beta))
        q, k = l2norm(q) * self.scale, l2norm(k)
        if state is None:
            state = q.new_zeros(bsz, self.n_heads, self.head_k_dim, self.head_v_dim)
        if recurrent:
            y, state = recurrent_delta_rule(q, k, v, g, beta, state.float())
        else:
            y, state = chunked_delta_rule(q, k, v, g, beta, state.float(), self.chunk)
        return y.transpose(1, 2), state

    def cache_numbers_per_row(self) -> int:
        """What a ``RecurrentCache`` of this module holds per batch row, at any length."""
        return (
            self.conv_dim * (self.conv_weight.shape[-1] - 1)
            + self.n_heads * self.head_k_dim * self.head_v_dim
        )


def check_view(view: AttentionView) -> None:
    """A one-line refusal of what a recurrent mixer cannot do (a non-causal view, packed documents)."""
    if not view.causal:
        raise ValueError("gated DeltaNet is causal by nature: it cannot mix a non-causal (encoder) view")
    if view.documents is not None:
        raise ValueError("gated DeltaNet over packed documents (document_ids) is not supported: pack none")


def hf_projection_order(
    n_k_heads: int, head_k_dim: int, head_v_dim: int, ratio: int
) -> tuple[Tensor, Tensor]:
    """Row indices that take Hugging Face's per-key-head grouped ``in_proj_qkvz`` rows ([q k v z] per
    key head) and ``in_proj_ba`` rows ([b a] per key head) to our layout (all q, all k, all v, all z;
    all b, all a)."""
    group = 2 * head_k_dim + 2 * ratio * head_v_dim
    parts = (head_k_dim, head_k_dim, ratio * head_v_dim, ratio * head_v_dim)
    starts = [sum(parts[:i]) for i in range(4)]
    qkvz = [
        torch.arange(h * group + s, h * group + s + size)
        for s, size in zip(starts, parts)
        for h in range(n_k_heads)
    ]
    ba = [
        torch.arange(h * 2 * ratio + s, h * 2 * ratio + s + ratio)
        for s in (0, ratio)
        for h in range(n_k_heads)
    ]
    return torch.cat(qkvz), torch.cat(ba)
