"""Training FLOPs per token of a decoder, counted two ways, so that runs can be placed on a compute axis.

- **nanoGPT's** (PaLM, Chowdhery et al. 2022, appendix B; nanoGPT's ``estimate_mfu``):
  ``6 N + 12 L T d``: two FLOPs per multiply-add, forward and twice that backward, over the ``N``
  parameters that enter matrix products (the position table is a lookup), plus attention's scores and
  weighted sums over ``T`` positions in ``L`` layers of width ``d``.
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
    network has three matrices instead of two. Each layer follows the layout (``model.layout``): a
    sliding layer's queries score at most ``attn_window`` keys; an output gate (``model.attn_gate``)
    adds its projection."""
    t, d = seq_len, cfg.d_model
    d_ff = ffn_width(d, cfg.d_ff, cfg.ffn_mult)
    ffn_matrices = 3 if Activation(cfg.activation) in GATED else 2
    embeddings = 2 * t * vocab_size * d
    dense = 2 * t * ffn_matrices * d * d_ff
    layers = sum(
        attention_flops(cfg, t, min(t, cfg.attn_window) if kind.sliding else t) + dense
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
    nanogpt = flops_per_token(matmul_params(model), cfg.n_layers, seq_len, cfg.d_model)
    return FlopCounts(nanogpt, chinchilla_flops_per_token(cfg, cfg.vocab_size, seq_len), seq_len)


def steps_for_budget(budget: float, flops_per_token: float, tokens_per_step: int) -> int:
    """The optimizer steps that spend ``budget`` training FLOPs at ``flops_per_token``, with
    ``tokens_per_step`` tokens a step (batch x sequence length x accumulation x processes), rounded to
    the nearest step, at least one."""
    return max(1, round(budget / (flops_per_token * tokens_per_step)))
