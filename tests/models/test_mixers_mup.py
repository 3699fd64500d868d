"""μP for each mixer: the roles of every parameter the mixers add (and so their initial scale and
learning rate), latent attention's score scale of 1/d over its whole query-key width (position-free
and decoupled RoPE parts), gated DeltaNet's query scale, and the coordinate check per mixer (slow)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from attnlab.blocks.mixers import DifferentialAttention, GatedDeltaNet, LatentAttention
from attnlab.blocks.roles import ParamRole, parameter_roles
from attnlab.models import build_model
from attnlab.models.parametrization import learning_rate_multipliers
from attnlab.schema.mixers import MixerSizes
from attnlab.schema.model import GPTConfig
from attnlab.schema.pos import RopePos

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments" / "mup"))
from coord_check import coordinate_check

BASE = 32


def gpt(mixer: str, width: int, parametrization: str = "mup", **overrides: object) -> torch.nn.Module:
    cfg = GPTConfig(
        mixer=mixer,
        pos=RopePos(),
        d_model=width,
        n_layers=2,
        n_heads=2,
        vocab_size=40,
        max_seq_len=16,
        parametrization=parametrization,
        mup_base_width=BASE,
        **overrides,
    )
    cfg.check()
    torch.manual_seed(0)
    return build_model(cfg)


def mixer_of(model: torch.nn.Module) -> torch.nn.Module:
    return model.stack.layers[0].self_attn.fn


def test_latent_scores_scale_as_one_over_their_whole_query_key_width() -> None:
    """At the base width the usual (nope + rope)^-1/2; at 4x the base, sqrt(base width) / width: 1/d,
    with d the position-free part and the decoupled rotary part together (both grow with the heads)."""
    base, wide = mixer_of(gpt("latent", BASE)), mixer_of(gpt("latent", 4 * BASE))
    base_dim, wide_dim = base.nope_dim + base.rope_dim, wide.nope_dim + wide.rope_dim
    assert (base.rope_dim, wide.rope_dim) == (8, 32)  # the RoPE part is counted, and it widens
    assert base.scale == pytest.approx(base_dim**-0.5)
    assert wide.scale == pytest.approx(math.sqrt(base_dim) / wide_dim)
    assert mixer_of(gpt("latent", 4 * BASE, "sp")).scale == pytest.approx(wide_dim**-0.5)


def test_latent_scale_counts_set_sizes_and_a_query_latent() -> None:
    """Sizes set in model.mixers do not grow: the scale stays the standard one; with a query latent
    the queries start at zero through its last projection."""
    sizes = MixerSizes(qk_nope_head_dim=16, qk_rope_head_dim=8, q_lora_rank=24)
    model = gpt("latent", 4 * BASE, mixers=sizes)
    latent = mixer_of(model)
    assert latent.scale == pytest.approx(24**-0.5)
    assert latent.q_b_proj.weight.abs().max() == 0 and latent.q_a_proj.weight.abs().max() > 0


@pytest.mark.parametrize("mixer", ["latent", "differential"])
def test_attention_mixers_start_from_zero_queries(mixer: str) -> None:
    """As softmax attention under μP: every width starts from uniform attention."""
    module = mixer_of(gpt(mixer, 2 * BASE))
    if isinstance(module, LatentAttention):
        assert module.q_proj.weight.abs().max() == 0
    else:
        assert isinstance(module, DifferentialAttention)
        assert module.qkv_proj.weight[: module.split_sizes[0]].abs().max() == 0
        assert module.scale == pytest.approx(math.sqrt(BASE / 2) / module.head_dim)


def test_deltanet_query_scale_keeps_the_rules_output_size() -> None:
    """Its queries and keys are L2-normed, so a random query-key product shrinks as d_k^-1/2 and the
    standard 1/sqrt(d_k) makes the rule's output shrink as 1/d_k, under its norm's epsilon at width;
    under μP the scale is sqrt(d_k) / d_k at the base width (the standard one there)."""
    assert mixer_of(gpt("deltanet", BASE)).scale == pytest.approx(16**-0.5)
    wide = mixer_of(gpt("deltanet", 4 * BASE))
    assert isinstance(wide, GatedDeltaNet)
    assert wide.scale == pytest.approx(math.sqrt(64) / 16)
    assert mixer_of(gpt("deltanet", 4 * BASE, "sp")).scale == pytest.approx(64**-0.5)


ROLES = {  # the parameters each mixer adds, by name within the mixer, and their roles
    "latent": {
        "q_proj.weight": ParamRole.hidden_matrix,
        "kv_a_proj_with_mqa.weight": ParamRole.hidden_matrix,
        "kv_a_layernorm.weight": ParamRole.vector,
        "kv_b_proj.weight": ParamRole.hidden_matrix,
        "out_proj.weight": ParamRole.hidden_matrix,
    },
    "differential": {f"lambda_{name}": ParamRole.vector for name in ("q1", "k1", "q2", "k2")},
    "deltanet": {
        "in_proj.weight": ParamRole.hidden_matrix,
        "conv_weight": ParamRole.vector,
        "A_log": ParamRole.vector,
        "dt_bias": ParamRole.vector,
        "norm.weight": ParamRole.vector,
        "out_proj.weight": ParamRole.hidden_matrix,
    },
}


@pytest.mark.parametrize("mixer", ROLES)
def test_each_new_parameter_has_its_role_and_mup_rate(mixer: str) -> None:
    """Hidden matrices at 1/m of Adam's rate, vectors (λ, decays, gates, the depthwise kernel) at 1."""
    model = gpt(mixer, 4 * BASE)
    roles, rates = parameter_roles(model), learning_rate_multipliers(model)
    params = dict(model.named_parameters())
    for name, role in ROLES[mixer].items():
        full = f"stack.layers.0.self_attn.fn.{name}"
        assert roles[full] == role, full
        assert rates.get(id(params[full]), 1.0) == (0.25 if role == ParamRole.hidden_matrix else 1.0), full


@pytest.mark.slow
@pytest.mark.parametrize("mixer", ["attention", "latent", "differential", "deltanet"])
def test_coordinate_check_of_each_mixer(mixer: str) -> None:
    """μP keeps every group's size as the model widens, with each mixer in every layer: the slopes of
    log RMS against log width (32 to 256, sizes averaged over 3 seeds) within ±0.1 at the start and
    after 5 AdamW steps (figures in experiments/mup/README.md). One seed, or widths to 128 only, move
    a slope by up to ±0.2 at these widths (softmax attention's too)."""
    _, slopes = coordinate_check(5, 3e-3, "mup", mixer=mixer, seeds=3)
    for step in (0, 5):
        sizes = {group: slope for group, slope in slopes[step].items() if not math.isnan(slope)}
        assert all(abs(slope) <= 0.1 for slope in sizes.values()), (step, sizes)
