"""μP (Yang et al. 2021, "Tensor Programs V"): initialisation, output and learning rates that scale with
the width, so that settings tuned at ``model.mup_base_width`` hold at other widths.

With the width multiplier m = d_model / mup_base_width (1 at the base width, where μP is the standard
parametrisation), for Adam (the table 3 of the paper, in the readout-multiplier form of the ``mup``
package):

- **hidden** matrices (both dimensions grow with the width: attention's projections, cross-attention's
  included, the feed-forward networks, the dense layers of the heads): initial weights times m^-1/2
  (variance 1/fan-in) and Adam's learning rate times 1/m;
- **input** weights (token and position tables, ViT's patch projection: their fan-in does not grow) and
  vectors (norms, biases): unchanged;
- the **readout** (output head, tied or not, and a classifier): its logits times 1/m, its weights and
  rate unchanged;
- **attention** scores scaled by sqrt(d_head at the base width) / d_head (1/d_head, equal to the usual
  1/sqrt(d_head) at the base width; the number of heads stays, the heads widen), and the queries
  initialised at zero, so every width starts from uniform attention. Differential attention is
  softmax attention here (its λ vectors are vectors); latent attention's d_head is its query-key width,
  the position-free part and the decoupled RoPE part together (``qk_nope_head_dim + qk_rope_head_dim``);
  gated DeltaNet's queries and keys are L2-normed and its per-head output RMS-normed, so the scale of
  its queries cancels and nothing besides the roles changes (its convolution, decay and gate vectors
  are vectors, its projections hidden matrices).

Muon (``optim=muon``) updates the hidden matrices by an orthogonalised step whose spectral size is set
by the learning rate and the matrix's shape, not its width (the spectral condition that μP's
1/fan-in rate approximates for Adam; Bernstein & Newhouse 2024), so its rate is left unscaled: under
Muon, μP changes the initialisation and the readout only.

The scalings are data, ``MUP``: one ``RoleScaling`` per parameter role (``blocks.roles``), as powers
of m, read by the initialisation here and by every optimiser's parameter groups (``tasks.optim``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import nn

from attnlab.blocks import ClassificationHead, LMHead, MultiHeadAttention
from attnlab.blocks.mixers import GatedDeltaNet, LatentAttention
from attnlab.blocks.mixers.registry import deltanet_k_dim, latent_head_dims
from attnlab.blocks.roles import ParamRole, parameter_roles, params_with_role
from attnlab.schema.model import ModelConfig, Parametrization


@dataclass(frozen=True)
class RoleScaling:
    """What μP does to the parameters of one role, as powers of the width multiplier m."""

    init: float = 0.0  # initial weights times m**init
    adam_lr: float = 0.0  # Adam's (AdamW's) learning rate times m**adam_lr
    muon_lr: float = (
        0.0  # Muon's learning rate times m**muon_lr (its step's spectral size is already width-free)
    )
    zero_init: bool = False  # initialised at zero (the readout: logits start at zero at every width)


# Table 3 of Tensor Programs V (Adam) in the readout-multiplier form of the ``mup`` package: hidden
# matrices at 1/fan-in variance and rate; input weights (embeddings, position tables, the patch
# projection) and vectors unchanged; the readout at zero, its logits times 1/m (``apply_mup``).
MUP: dict[ParamRole, RoleScaling] = {
    ParamRole.embedding: RoleScaling(),
    ParamRole.position_table: RoleScaling(),
    ParamRole.input_matrix: RoleScaling(),
    ParamRole.hidden_matrix: RoleScaling(init=-0.5, adam_lr=-1.0),
    ParamRole.readout: RoleScaling(zero_init=True),
    ParamRole.vector: RoleScaling(),
}
OPTIMISER_RATES = {"adam": "adam_lr", "muon": "muon_lr"}  # which field of RoleScaling each optimiser reads


def is_mup(cfg: ModelConfig) -> bool:
    return cfg.parametrization == Parametrization.mup


def width_multiplier(cfg: ModelConfig) -> float:
    return cfg.d_model / cfg.mup_base_width


def hidden_matrices(model: nn.Module) -> list[nn.Parameter]:
    """The weights whose two dimensions grow with the width (role ``hidden_matrix``): every projection
    inside a transformer layer, and the dense layers of the output heads."""
    return params_with_role(model, ParamRole.hidden_matrix)


def apply_mup(model: nn.Module, cfg: ModelConfig) -> None:
    """Turn a freshly initialised standard-parametrised ``model`` into μP: each parameter's initial
    values scaled as its role says (``MUP``: hidden weights by m^-1/2, an untied readout at zero),
    logits by 1/m, attention scores by sqrt(base d_head)/d_head (unless ``model.attn_scale`` sets them)."""
    m = width_multiplier(cfg)
    roles = parameter_roles(model)
    for name, param in model.named_parameters():
        scaling = MUP[roles[name]]
        if scaling.zero_init:
            param.data.zero_()
        elif scaling.init:
            param.data.mul_(m**scaling.init)
    for module in model.modules():
        if isinstance(module, LMHead | ClassificationHead):
            module.scale = module.scale / m
        elif isinstance(module, MultiHeadAttention):
            zero_queries(module)
            if cfg.attn_scale is None:
                base_head_dim = cfg.mup_base_width / cfg.n_heads
                module.scale = math.sqrt(base_head_dim) / module.head_dim
        elif isinstance(module, LatentAttention):
            zero_latent_queries(module)
            if cfg.attn_scale is None:
                base_nope, base_rope = latent_head_dims(cfg, cfg.mup_base_width // cfg.n_heads)
                module.scale = math.sqrt(base_nope + base_rope) / (module.nope_dim + module.rope_dim)
        elif isinstance(module, GatedDeltaNet):
            base_k_dim = deltanet_k_dim(cfg, cfg.mup_base_width // cfg.n_heads)
            module.scale = math.sqrt(module.head_k_dim) / base_k_dim


def zero_queries(attention: MultiHeadAttention) -> None:
    """Queries initialised at zero (the paper's advice, section D.2): every width starts from uniform
    attention, where the 1/d_head scale would otherwise make wide models' attention flatter than
    narrow ones' and their averaged outputs smaller."""
    if "qkv_proj" in attention._modules:
        attention.qkv_proj.weight.data[: attention.split_sizes[0]].zero_()
    elif "q_proj" in attention._modules:
        attention.q_proj.weight.data.zero_()


def zero_latent_queries(attention: LatentAttention) -> None:
    """Latent attention's queries at zero, both parts (position-free and rotary), as ``zero_queries``:
    the last query projection (``q_proj``, or ``q_b_proj`` after the query latent) starts at zero."""
    last = attention.q_proj if attention.q_lora_rank is None else attention.q_b_proj
    last.weight.data.zero_()


def learning_rate_multipliers(model: nn.Module, optimiser: str = "adam") -> dict[int, float]:
    """The learning-rate multiplier (by ``id``) of each parameter of ``model`` that μP scales when
    ``optimiser`` (``adam`` or ``muon``) updates it: m**power, the power its role's ``RoleScaling``
    gives that optimiser (1/m for Adam's hidden matrices); empty under the standard parametrisation
    (every multiplier 1)."""
    cfg = getattr(model, "cfg", None)
    if cfg is None or not is_mup(cfg):
        return {}
    m, field = width_multiplier(cfg), OPTIMISER_RATES[optimiser]
    roles = parameter_roles(model)
    powers = {id(p): getattr(MUP[roles[name]], field) for name, p in model.named_parameters()}
    return {key: 1.0 / m**-power for key, power in powers.items() if power}  # 1/m exactly for power -1
