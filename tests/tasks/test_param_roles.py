"""One table of parameter roles (``attnlab.blocks.roles``): every family's table against names written
here independently, and the readers of the table agreeing with it: weight decay, Muon's split, μP's
initialisation and learning rates (under AdamW and Muon), float8 eligibility, FLOP counting,
initialisation and the tensor-parallel plans."""

from __future__ import annotations

import math
import re

import pytest
import torch
from torch import nn

from attnlab.blocks.roles import ParamRole, declare_roles, parameter_roles
from attnlab.models.flops import matmul_params
from attnlab.models.parallel import check_split_roles
from attnlab.models.speedups import float8_eligible
from attnlab.schema.optim import AdamWConfig, Decay, MuonConfig
from attnlab.tasks.muon import hidden_matrices
from attnlab.tasks.optim import adamw, decayed_params, muon

# d_model and d_ff multiples of 16: every hidden matrix is float8-eligible
SIZES = dict(d_model=32, d_ff=32, n_heads=2)
CASES = [  # every family, with the positional encodings that hold parameters
    ("gpt", "learned", {}),
    ("gpt", "relative", {"tie_embeddings": False, "lm_head_bias": True}),
    ("bert", "learned", {"num_classes": 3, "classifier_hidden": True, "type_vocab_size": 2}),
    ("bert", "relative", {"num_classes": 3, "tie_embeddings": False}),
    ("seq2seq", "learned", {"embed_scale": False}),
    ("seq2seq", "relative", {"embed_scale": False, "tie_embeddings": False}),
    ("vit", "learned", {"classifier_hidden": True}),
    ("vit", "relative", {"pooling": "mean"}),
]
IDS = [f"{family}-{pos}-{i}" for i, (family, pos, _) in enumerate(CASES)]

# The roles by name, written independently of the declarations
NAMED_ROLES = {
    ParamRole.embedding: r"(embed|src_embed|tgt_embed)\.(tokens|segments)\.weight|cls_token",
    ParamRole.position_table: r"(\w+\.)?pos\.(bias\.)?weight",
    ParamRole.input_matrix: r"patches\.proj\.weight",
    ParamRole.hidden_matrix: r"(stack|encoder|decoder)\.layers\.\d+\.(self_attn|cross_attn|ffn)\.fn\.\w+_proj\.weight"
    r"|(stack|encoder|decoder)\.layers\.\d+\.ffn\.fn\.fc_\w+\.weight"
    r"|mlm_head\.dense\.weight|(cls_head|head)\.pre\.0\.weight",
    ParamRole.readout: r"lm_head\.proj\.weight|mlm_head\.decoder\.proj\.weight|(cls_head|head)\.classifier\.weight",
}
MATRICES = {ParamRole.input_matrix, ParamRole.hidden_matrix, ParamRole.readout}
DECAYED = {  # what each optim.decay means, in roles
    Decay.matrices: MATRICES,
    Decay.matrices_and_embeddings: MATRICES | {ParamRole.embedding, ParamRole.position_table},
    Decay.all: set(ParamRole),
}


def named_role(name: str) -> ParamRole:
    matches = [role for role, pattern in NAMED_ROLES.items() if re.fullmatch(pattern, name)]
    assert len(matches) <= 1, (name, matches)
    return matches[0] if matches else ParamRole.vector


def build(tiny_model, family: str, pos: str, overrides: dict, **settings: object) -> nn.Module:
    return tiny_model(family, pos, **SIZES, **overrides, **settings)


def names_with(model: nn.Module, roles: set[ParamRole]) -> set[str]:
    return {name for name, role in parameter_roles(model).items() if role in roles}


def names_of(model: nn.Module, params: list[nn.Parameter]) -> set[str]:
    by_id = {id(p): name for name, p in model.named_parameters()}
    return {by_id[id(p)] for p in params}


@pytest.mark.parametrize(("family", "pos", "overrides"), CASES, ids=IDS)
def test_every_parameter_has_the_role_its_name_says(tiny_model, family, pos, overrides):
    model = build(tiny_model, family, pos, overrides)
    roles = parameter_roles(model)
    assert list(roles) == [name for name, _ in model.named_parameters()]  # each (tied) parameter once
    assert roles == {name: named_role(name) for name in roles}
    params = dict(model.named_parameters())
    assert all(params[n].dim() <= 1 for n, role in roles.items() if role == ParamRole.vector)
    assert {ParamRole.embedding, ParamRole.hidden_matrix} <= set(roles.values()) or family == "vit"


@pytest.mark.parametrize(("family", "pos", "overrides"), CASES, ids=IDS)
def test_weight_decay_muon_float8_flops_and_parallel_plans_read_the_table(tiny_model, family, pos, overrides):
    model = build(tiny_model, family, pos, overrides)
    roles, params = parameter_roles(model), dict(model.named_parameters())
    hidden = names_with(model, {ParamRole.hidden_matrix})
    for decay, decayed_roles in DECAYED.items():
        assert names_of(model, decayed_params(model, decay)) == names_with(model, decayed_roles), decay
    optimizer = muon(model, MuonConfig(lr=0.02), fused=False)
    assert names_of(model, [p for g in optimizer.muon.param_groups for p in g["params"]]) == hidden
    assert names_of(model, hidden_matrices(model)) == hidden
    assert {f"{name}.weight" for name in float8_eligible(model)} == hidden
    tables = sum(params[n].numel() for n, role in roles.items() if role == ParamRole.position_table)
    assert tables and matmul_params(model) == sum(p.numel() for p in model.parameters()) - tables
    check_split_roles(model)  # the plans split hidden matrices only


@pytest.mark.parametrize(("family", "pos", "overrides"), CASES, ids=IDS)
def test_initialisation_follows_the_roles(tiny_model, family, pos, overrides):
    std, n_layers = 0.5, 2 * (2 if family == "seq2seq" else 1)  # init_std; residual outputs / sqrt(2L)
    model = build(tiny_model, family, pos, overrides, init_std=std)
    for name, param in model.named_parameters():
        role = parameter_roles(model)[name]
        if name.endswith("cls_token"):
            assert not param.any(), name  # initialised by its module: at zero
        elif role == ParamRole.position_table and pos == "learned":
            assert float(param.std()) == pytest.approx(0.02, rel=0.25), name  # by its module: N(0, 0.02)
        elif role == ParamRole.vector:
            assert param.eq(0).all() or param.eq(1).all(), name  # biases at zero, norm gains at one
        else:
            residual = name.endswith(("out_proj.weight", "fc_out.weight"))
            expected = std / math.sqrt(2 * n_layers) if residual else std
            assert float(param.std()) == pytest.approx(expected, rel=0.25), name


@pytest.mark.parametrize(("family", "pos", "overrides"), CASES, ids=IDS)
def test_mup_scales_each_role_as_its_table_says_under_adamw_and_muon(tiny_model, family, pos, overrides):
    m = 4  # d_model 32 over a base width of 8
    sp = build(tiny_model, family, pos, overrides)
    model = build(tiny_model, family, pos, overrides, parametrization="mup", mup_base_width=8)
    roles, sp_params = parameter_roles(model), dict(sp.named_parameters())
    for name, param in model.named_parameters():
        before = sp_params[name]
        if roles[name] == ParamRole.hidden_matrix:  # m^-1/2 (the queries at zero)
            assert torch.where(param == 0, 0.0, param - before * m**-0.5).abs().max() < 1e-6, name
            assert param.any() or name.endswith("q_proj.weight"), name
        elif roles[name] == ParamRole.readout:
            assert not param.any(), name  # an untied readout at zero
        else:
            assert torch.equal(param, before), name
    rate = {
        id(p): g["lr"]
        for g in adamw(model, AdamWConfig(lr=1e-2), fused=False).param_groups
        for p in g["params"]
    }
    for name, param in model.named_parameters():
        assert rate[id(param)] == (1e-2 / m if roles[name] == ParamRole.hidden_matrix else 1e-2), name
    optimizer = muon(model, MuonConfig(lr=0.02), fused=False)
    assert {g["lr"] for g in optimizer.muon.param_groups} == {0.02}  # Muon's step is width-free
    assert {g["lr"] for g in optimizer.adamw.param_groups} == {1e-3}  # no hidden matrix left to AdamW


@pytest.mark.parametrize(
    ("family", "overrides", "heads"),
    [
        ("bert", {"num_classes": 3, "classifier_hidden": True}, ["mlm_head.dense", "cls_head.pre.0"]),
        ("vit", {"classifier_hidden": True}, ["head.pre.0"]),
    ],
)
def test_mup_with_muon_scales_the_heads_dense_layers_as_hidden_matrices(tiny_model, family, overrides, heads):
    """The heads' dense layers are width x width: μP scales their initialisation, Muon takes them
    (before the roles table, Muon left them to AdamW at the unscaled rate)."""
    sp = build(tiny_model, family, "learned", overrides)
    model = build(tiny_model, family, "learned", overrides, parametrization="mup", mup_base_width=8)
    optimizer = muon(model, MuonConfig(lr=0.02), fused=False)
    in_muon = names_of(model, [p for g in optimizer.muon.param_groups for p in g["params"]])
    in_adamw = names_of(model, [p for g in optimizer.adamw.param_groups for p in g["params"]])
    params, sp_params = dict(model.named_parameters()), dict(sp.named_parameters())
    for head in heads:
        weight = f"{head}.weight"
        assert weight in in_muon and weight not in in_adamw
        assert torch.allclose(params[weight], sp_params[weight] * 0.5)  # m = 4: m^-1/2
    assert in_muon == names_with(model, {ParamRole.hidden_matrix})


def test_a_plan_that_would_split_another_role_is_refused(tiny_model):
    model = build(tiny_model, "gpt", "learned", {})
    declare_roles(model.stack.layers[0].ffn.fn.fc_in, weight=ParamRole.readout)
    with pytest.raises(ValueError, match=r"would split stack\.layers\.0\.ffn\.fn\.fc_in\.weight, a readout"):
        check_split_roles(model)


def test_a_role_declared_for_a_parameter_the_module_does_not_hold_is_an_error():
    linear = nn.Linear(4, 4)
    declare_roles(linear, weihgt=ParamRole.readout)
    with pytest.raises(ValueError, match=r"Linear at <root> declares roles for \['weihgt'\]"):
        parameter_roles(linear)
    with pytest.raises(TypeError, match="a ParamRole"):
        declare_roles(linear, weight="readout")
    unbiased = nn.Linear(4, 4, bias=False)  # an optional parameter left out (None) may be declared
    declare_roles(unbiased, weight=ParamRole.readout, bias=ParamRole.vector)
    assert parameter_roles(unbiased) == {"weight": ParamRole.readout}
