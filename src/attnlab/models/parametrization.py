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
  initialised at zero, so every width starts from uniform attention.

Muon (``optim=muon``) updates the hidden matrices by an orthogonalised step whose spectral size is set
by the learning rate and the matrix's shape, not its width (the spectral condition that μP's
1/fan-in rate approximates for Adam; Bernstein & Newhouse 2024), so its rate is left unscaled: under
Muon, μP changes the initialisation and the readout only.
"""

from __future__ import annotations

import math

from torch import nn

from attnlab.blocks import ClassificationHead, LMHead, MaskedLMHead, MultiHeadAttention, TransformerLayer
from attnlab.schema.model import ModelConfig, Parametrization


def is_mup(cfg: ModelConfig) -> bool:
    return cfg.parametrization == Parametrization.mup


def width_multiplier(cfg: ModelConfig) -> float:
    return cfg.d_model / cfg.mup_base_width


def hidden_matrices(model: nn.Module) -> list[nn.Parameter]:
    """The weights whose two dimensions grow with the width: every linear layer inside a transformer
    layer, and the dense layers of the output heads."""
    found: dict[int, nn.Parameter] = {}
    for module in model.modules():
        if isinstance(module, TransformerLayer):
            linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
        elif isinstance(module, MaskedLMHead):
            linears = [module.dense]
        elif isinstance(module, ClassificationHead):
            linears = [m for m in module.pre.modules() if isinstance(m, nn.Linear)]
        else:
            continue
        found.update({id(m.weight): m.weight for m in linears})
    return list(found.values())


def apply_mup(model: nn.Module, cfg: ModelConfig) -> None:
    """Turn a freshly initialised standard-parametrised ``model`` into μP: hidden weights scaled by
    m^-1/2, logits by 1/m, attention scores by sqrt(base d_head)/d_head (unless ``model.attn_scale``
    sets them)."""
    m = width_multiplier(cfg)
    for weight in hidden_matrices(model):
        weight.data.mul_(m**-0.5)
    for module in model.modules():
        if isinstance(module, LMHead | ClassificationHead):
            module.scale = module.scale / m
            zero_readout(module)
        elif isinstance(module, MultiHeadAttention):
            zero_queries(module)
            if cfg.attn_scale is None:
                base_head_dim = cfg.mup_base_width / cfg.n_heads
                module.scale = math.sqrt(base_head_dim) / module.head_dim


def zero_readout(head: LMHead | ClassificationHead) -> None:
    """An untied readout initialised at zero (the ``mup`` package's ``readout_zero_init``): logits
    start at zero at every width, instead of shrinking as 1/sqrt(width) under the 1/width multiplier.
    A tied one is the token table too, and keeps that table's initialisation."""
    weight = (
        head.classifier.weight if isinstance(head, ClassificationHead) else head.proj and head.proj.weight
    )
    if weight is not None:
        weight.data.zero_()


def zero_queries(attention: MultiHeadAttention) -> None:
    """Queries initialised at zero (the paper's advice, section D.2): every width starts from uniform
    attention, where the 1/d_head scale would otherwise make wide models' attention flatter than
    narrow ones' and their averaged outputs smaller."""
    if "qkv_proj" in attention._modules:
        attention.qkv_proj.weight.data[: attention.split_sizes[0]].zero_()
    elif "q_proj" in attention._modules:
        attention.q_proj.weight.data.zero_()


def learning_rate_multipliers(model: nn.Module) -> dict[int, float]:
    """Adam's learning rate multiplier of each parameter (by ``id``) that μP scales: 1/m for the hidden
    matrices; empty under the standard parametrisation (every multiplier 1)."""
    cfg = getattr(model, "cfg", None)
    if cfg is None or not is_mup(cfg):
        return {}
    m = width_multiplier(cfg)
    return {id(w): 1.0 / m for w in hidden_matrices(model)}
