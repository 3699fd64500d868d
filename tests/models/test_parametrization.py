"""μP (``model.parametrization=mup``): which parameters it scales and by how much, that a μP model is
still the same model to cached decoding and to every family, and what it refuses."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from attnlab.models import build_model
from attnlab.models.parametrization import hidden_matrices
from attnlab.schema.errors import ConfigError
from attnlab.schema.model import GPTConfig
from attnlab.schema.optim import AdamWConfig, MuonConfig
from attnlab.tasks.optim import adamw, muon

BASE = GPTConfig(
    d_model=32, n_layers=2, n_heads=2, vocab_size=40, max_seq_len=16, dropout=0.0, mup_base_width=32
)


def mup(width: int, **settings: object) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(replace(BASE, d_model=width, parametrization="mup", **settings))


def test_hidden_matrices_train_at_the_rate_over_the_width_multiplier_and_the_rest_at_the_rate() -> None:
    model = mup(128)  # m = 4
    optimizer = adamw(model, AdamWConfig(lr=1e-2, weight_decay=0.1), fused=False)
    rate = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
    hidden = {id(w) for w in hidden_matrices(model)}
    assert len(hidden) == 2 * 4  # per layer: qkv, out, fc_in, fc_out
    for name, param in model.named_parameters():
        assert rate[id(param)] == pytest.approx(2.5e-3 if id(param) in hidden else 1e-2), name
    decayed = {id(p) for g in optimizer.param_groups if g["weight_decay"] for p in g["params"]}
    assert hidden <= decayed  # weight decay groups kept


def test_muon_keeps_its_rate_and_the_standard_parametrisation_changes_nothing() -> None:
    optimizer = muon(mup(128), MuonConfig(lr=0.02), fused=False)
    assert {g["lr"] for g in optimizer.param_groups} == {0.02, 1e-3}  # Muon's and its AdamW's, unscaled
    sp = build_model(replace(BASE, d_model=128))
    assert {g["lr"] for g in adamw(sp, AdamWConfig(lr=1e-2), fused=False).param_groups} == {1e-2}


def test_initialisation_output_and_attention_scale_follow_the_width() -> None:
    torch.manual_seed(0)
    sp = build_model(replace(BASE, d_model=128))
    model = mup(128, tie_embeddings=False)
    sp_std = float(sp.stack.layers[0].ffn.fn.fc_in.weight.std())
    assert float(model.stack.layers[0].ffn.fn.fc_in.weight.std()) == pytest.approx(
        sp_std / 2, rel=0.05
    )  # m^-1/2
    assert model.lm_head.scale == 0.25 and not model.lm_head.weight.any()  # untied: the readout at zero
    assert mup(128).lm_head.weight.any()  # tied: the token table keeps its initialisation
    attention = model.stack.layers[0].self_attn.fn
    assert attention.scale == pytest.approx(math.sqrt(16) / 64)  # sqrt(base d_head) / d_head
    assert not attention.qkv_proj.weight[:128].any()  # queries at zero


def test_cached_decoding_of_a_mup_model_is_its_full_forward() -> None:
    from attnlab.generate import generate

    model = mup(64, tie_embeddings=True).eval()
    for p in model.parameters():  # out of the zero start, so the check sees real attention
        p.data.add_(torch.randn_like(p) * 0.05)
    prompt = torch.randint(0, 40, (2, 5))
    cached = generate(model, prompt, max_new_tokens=8, temperature=0.0)
    assert cached == generate(model, prompt, max_new_tokens=8, temperature=0.0, use_cache=False)


@pytest.mark.parametrize("family", ["gpt", "bert", "seq2seq", "vit"])
def test_every_family_builds_and_scales_its_hidden_matrices(tiny_model, family: str) -> None:
    sp = tiny_model(family)
    model = tiny_model(family, parametrization="mup", mup_base_width=4)  # m = 4 at d_model 16
    hidden = hidden_matrices(model)
    assert hidden and all(w.dim() == 2 for w in hidden)
    sp_sizes = sorted(float(w.std()) for w in hidden_matrices(sp))
    mup_sizes = sorted(float(w.std()) for w in hidden if w.any())
    assert max(mup_sizes) < max(sp_sizes)


def test_a_hugging_face_checkpoint_is_loaded_standard_parametrised() -> None:
    with pytest.raises(
        ConfigError, match=r"model\.parametrization=mup: model\.init_from=hf/gpt2 is a Hugging Face"
    ):
        replace(BASE, parametrization="mup", init_from="hf/gpt2").check()
