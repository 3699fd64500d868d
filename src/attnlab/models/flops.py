"""Training FLOPs per token of a decoder, counted two ways, so that runs can be placed on a compute axis.

- **nanoGPT's** (PaLM, Chowdhery et al. 2022, appendix B; nanoGPT's ``estimate_mfu``):
  ``6 N + 12 L T d``: two FLOPs per multiply-add, forward and twice that backward, over the ``N``
  parameters that enter matrix products (the position table is a lookup), plus attention's scores and
  weighted sums over ``T`` positions in ``L`` layers of width ``d``. A layer whose mixer is not
  softmax attention (``schema.mixers``) counts its own token mixing in place of ``12 T d``: twice it
  for differential attention, its head widths for latent attention, the chunked delta rule for
  gated DeltaNet (``context_flops``).
- **Chinchilla's** (Hoffmann et al. 2022, appendix F): every matrix product of the forward pass from
  the shapes (embeddings as a one-hot product, Q/K/V projections, logits, softmax, the weighted sum,
  the output projection, the feed-forward block, the final logits), backward counted as twice the
  forward; norms, biases and nonlinearities are left out, as in the paper.

Both are per token at sequence length ``T``; the second is what the scaling fits put on the C axis.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from torch import nn

from attnlab.blocks.ffn import GATED, ffn_width
from attnlab.blocks.roles import ParamRole, parameter_roles
from attnlab.models.decoder import DecoderLM
from attnlab.schema.hooks import AttnGate
from attnlab.schema.mixers import Mixer
from attnlab.schema.model import Activation, ModelConfig

COUNTS_NOTE = (
    "training FLOPs per token (forward + backward) at seq_len: nanogpt = 6 N + 12 L T d (PaLM appendix B, "
    "nanoGPT estimate_mfu; N the parameters in matrix products), chinchilla = every matrix product of the "
    "forward pass from the shapes, x3 for forward + backward (Hoffmann et al. 2022, appendix F)"
)


def flops_per_token(n_params: int, n_layers: int, seq_len: int, d_model: int) -> float:
    """nanoGPT's count: ``6 * N`` for the matrix products of the forward and backward passes over
    ``N`` parameters, plus ``12 * L * T * d`` for attention over ``T`` positions in ``L`` layers."""
    return 6.0 * n_params + 12.0 * n_layers * seq_len * d_model


def matmul_params(module: nn.Module) -> int:
    """Parameters that enter matrix products: all but position tables (``blocks.roles``; lookups, not
    products), as nanoGPT counts them (token tables included: the tied output is a product)."""
    roles = parameter_roles(module)
    return sum(p.numel() for name, p in module.named_parameters() if roles[name] != ParamRole.position_table)


def chinchilla_flops_per_token(cfg: ModelConfig, vocab_size: int, seq_len: int) -> float:
    """Hoffmann et al. 2022, appendix F, per token: the forward pass of one sequence of ``seq_len``
    tokens through a decoder of ``cfg``'s shape, times 3 (backward = 2x forward), over ``seq_len``.
    Grouped-query attention projects keys and values to ``n_kv_heads`` heads; a gated feed-forward
    network has three matrices instead of two. Each layer follows the layout (``model.layout``): its
    mixer counts its own projections and token mixing (``mixer_flops``), a sliding layer's queries
    score at most ``attn_window`` keys, an output gate (``model.attn_gate``) adds its projection."""
    t, d = seq_len, cfg.d_model
    d_ff = ffn_width(d, cfg.d_ff, cfg.ffn_mult)
    ffn_matrices = 3 if Activation(cfg.activation) in GATED else 2
    embeddings = 2 * t * vocab_size * d
    dense = 2 * t * ffn_matrices * d * d_ff
    layers = sum(
        mixer_flops(cfg, kind.mixer, t, min(t, cfg.attn_window) if kind.sliding else t) + dense
        for kind in cfg.layer_kinds()
    )
    logits = 2 * t * d * vocab_size
    return 3.0 * (embeddings + layers + logits) / t


def attention_flops(cfg: ModelConfig, t: int, keys: int) -> int:
    """One attention layer's forward FLOPs over ``t`` queries that each score ``keys`` keys."""
    d, d_head = cfg.d_model, cfg.d_model // cfg.n_heads
    q_width, kv_width = cfg.n_heads * d_head, (cfg.n_kv_heads or cfg.n_heads) * d_head
    gate_width = {AttnGate.none: 0, AttnGate.headwise: cfg.n_heads, AttnGate.elementwise: q_width}
    return (
        2 * t * d * (q_width + 2 * kv_width)  # query, key and value projections
        + 2 * t * keys * q_width  # query @ key logits
        + 3 * cfg.n_heads * t * keys  # softmax
        + 2 * t * keys * q_width  # softmax @ value reductions
        + 2 * t * q_width * d  # output projection
        + 2 * t * d * gate_width[AttnGate(cfg.attn_gate)]  # the output gate's projection
    )


def mixer_flops(cfg: ModelConfig, mixer: str, t: int, keys: int) -> float:
    """Forward FLOPs of one layer's mixer over ``t`` tokens whose queries see ``keys`` keys: softmax
    attention's (``attention_flops``), or the mixer's projections and token mixing (``context_flops``
    per token, the softmax counted as Chinchilla does)."""
    if mixer == Mixer.attention:
        return attention_flops(cfg, t, keys)
    return mixer_projection_flops(cfg, mixer, t) + t * context_flops(cfg, mixer, keys, softmax=True)


def mixer_projection_flops(cfg: ModelConfig, mixer: str, t: int) -> float:
    """Forward FLOPs of a mixer's projections (in, out, convolution) over ``t`` tokens."""
    d, hd, sizes = cfg.d_model, cfg.d_model // cfg.n_heads, cfg.mixers
    if mixer == Mixer.latent:
        qk, dv, rank, rope = (
            (sizes.qk_nope_head_dim or hd) + sizes.rope_dim(hd),
            sizes.v_head_dim or hd,
            sizes.kv_lora_rank or 2 * hd,
            sizes.rope_dim(hd),
        )
        h = cfg.n_heads
        q = d * h * qk if sizes.q_lora_rank is None else sizes.q_lora_rank * (d + h * qk)
        kv = d * (rank + rope) + rank * h * (qk - rope + dv)
        return 2 * t * (q + kv + h * dv * d)
    if mixer == Mixer.deltanet:
        h, kd, vd = deltanet_sizes(cfg)
        channels = 2 * kd + vd
        return 2 * t * (d * (channels + vd + 2 * h) + channels * sizes.conv_kernel + vd * d)
    q_width, kv_width = cfg.n_heads * hd, (cfg.n_kv_heads or cfg.n_heads) * hd
    return 2 * t * d * (q_width + 2 * kv_width) + 2 * t * q_width * d


def context_flops(cfg: ModelConfig, mixer: str, t: int, softmax: bool) -> float:
    """Forward FLOPs per token of a mixer's token mixing over ``t`` keys a query sees (no projections):
    scores and weighted sums for the softmax kinds (``softmax``: Chinchilla's 3 per score too), the
    chunked delta rule (per-chunk products and solves, reads and writes of the state) for DeltaNet."""
    hd, sizes, h = cfg.d_model // cfg.n_heads, cfg.mixers, cfg.n_heads
    if mixer == Mixer.deltanet:
        h, kd, vd = deltanet_sizes(cfg)
        dk, dv, c = kd // h, vd // h, min(sizes.chunk, t)
        return h * (4 * c * dk + c * (dk + dv) + 2 * c * dv + 6 * dk * dv)
    if mixer == Mixer.latent:
        qk, dv = (sizes.qk_nope_head_dim or hd) + sizes.rope_dim(hd), sizes.v_head_dim or hd
        scores_and_sums = 2 * t * h * (qk + dv)
    else:
        scores_and_sums = 4 * t * (h * hd if softmax else cfg.d_model)
    maps = 2 if mixer == Mixer.differential else 1  # two softmax maps, each over every value half
    return maps * (scores_and_sums + (3 * h * t if softmax else 0))


def deltanet_sizes(cfg: ModelConfig) -> tuple[int, int, int]:
    """Gated DeltaNet's value heads, key width and value width (all heads) under ``cfg``."""
    hd, sizes = cfg.d_model // cfg.n_heads, cfg.mixers
    h = sizes.linear_heads or cfg.n_heads
    return h, (sizes.linear_k_heads or h) * (sizes.linear_k_dim or hd), h * (sizes.linear_v_dim or hd)


@dataclass
class FlopCounts:
    """A decoder's training FLOPs per token at ``seq_len``, both ways; ``counts`` says how."""

    nanogpt: float
    chinchilla: float
    seq_len: int
    counts: str = COUNTS_NOTE

    def as_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def flop_counts(model: nn.Module, seq_len: int) -> FlopCounts | None:
    """Both counts for a decoder-only language model; None for the other families, whose inputs (two
    stacks, image patches, a bidirectional classifier) these formulas do not describe."""
    if not isinstance(model, DecoderLM):
        return None
    cfg = model.cfg
    nanogpt = flops_per_token(matmul_params(model), 0, seq_len, cfg.d_model) + 3 * sum(
        context_flops(cfg, mixer, seq_len, softmax=False) for mixer in cfg.layer_mixers()
    )
    return FlopCounts(nanogpt, chinchilla_flops_per_token(cfg, cfg.vocab_size, seq_len), seq_len)


def steps_for_budget(budget: float, flops_per_token: float, tokens_per_step: int) -> int:
    """The optimizer steps that spend ``budget`` training FLOPs at ``flops_per_token``, with
    ``tokens_per_step`` tokens a step (batch x sequence length x accumulation x processes), rounded to
    the nearest step, at least one."""
    return max(1, round(budget / (flops_per_token * tokens_per_step)))
