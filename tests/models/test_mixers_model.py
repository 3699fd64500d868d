"""Each mixer inside a whole GPT: it trains, stays causal, decodes from its cache as the full forward
pass (left-padded batch), a 3 linear : 1 full hybrid included; its parameters' roles, its FLOPs, its
``attn_out`` activation site and its refusals (tensor parallel, families, positions) in one line."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from attnlab.blocks.mixers import DifferentialAttention, GatedDeltaNet, LatentAttention
from attnlab.blocks.roles import ParamRole, parameter_roles
from attnlab.explain.sites import activation_sites
from attnlab.models import build_model
from attnlab.models.decoder import DecoderLM
from attnlab.models.flops import chinchilla_flops_per_token, context_flops, flop_counts
from attnlab.models.parallel import check_mixer_plans
from attnlab.schema.errors import ConfigError
from attnlab.schema.model import GPTConfig, model_config
from attnlab.schema.pos import pos_config

VOCAB = 40
TINY = GPTConfig(
    d_model=32,
    n_layers=4,
    n_heads=4,
    vocab_size=VOCAB,
    max_seq_len=64,
    norm="rmsnorm",
    pos=pos_config("rope"),
)
MIXERS = ["attention", "latent", "differential", "deltanet"]
HYBRID = ["deltanet", "deltanet", "deltanet", "attention"]  # Qwen3-Next's 3 linear : 1 full


def tiny(mixer: str | list[str], seed: int = 0, **overrides) -> DecoderLM:
    """A 4-layer GPT with ``mixer`` in every layer, or a list of one mixer per layer."""
    torch.manual_seed(seed)
    if isinstance(mixer, str):
        cfg = replace(TINY, mixer=mixer, **overrides)
    else:
        cfg = replace(TINY, layout=list(mixer), **overrides)  # the layout's mixer tags, one per layer
    cfg.check()
    return build_model(cfg).eval()


CASES = {name: name for name in MIXERS} | {"hybrid 3:1": HYBRID}


@pytest.mark.parametrize("case", CASES)
def test_each_mixer_trains(case: str) -> None:
    """20 AdamW steps on one short repeated sequence: finite losses, the last far below the first."""
    model = tiny(CASES[case]).train()
    ids = torch.arange(8).repeat(1, 4) % VOCAB  # (1, 32): a period-8 sequence
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(20):
        loss = F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < 0.5 * losses[0], losses


@pytest.mark.parametrize("case", CASES)
def test_past_logits_ignore_the_future(case: str) -> None:
    model = tiny(CASES[case])
    a = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
    b = a.clone()
    b[:, 7:] = torch.randint(0, VOCAB, (2, 5), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (model(a)[:, :7] - model(b)[:, :7]).abs().max() <= 1e-6


@pytest.mark.parametrize("case", CASES)
def test_cached_decoding_equals_the_full_forward(case: str) -> None:
    """A left-padded batch: a prefill of 4 tokens, then one token a step, through ``new_cache``."""
    model = tiny(CASES[case])
    ids = torch.randint(1, VOCAB, (2, 11), generator=torch.Generator().manual_seed(2))
    mask = torch.ones(2, 11, dtype=torch.bool)
    mask[1, :3] = False
    with torch.no_grad():
        full = model(ids, attention_mask=mask)
        cache = model.new_cache()
        steps = [model(ids[:, :4], attention_mask=mask[:, :4], cache=cache)]
        steps += [
            model(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], cache=cache) for t in range(4, 11)
        ]
    assert (full - torch.cat(steps, dim=1))[mask].abs().max() <= 1e-5


def test_each_layer_keeps_its_mixers_cache_kind() -> None:
    from attnlab.blocks.cache import AttentionCache
    from attnlab.blocks.mixers import LatentCache, RecurrentCache

    model = tiny(["latent", "deltanet", "differential", "attention"])
    kinds = [type(c) for c in model.new_cache().self_attn]
    assert kinds == [LatentCache, RecurrentCache, AttentionCache, AttentionCache]


def test_mixers_parameters_have_their_roles() -> None:
    roles = {}
    for mixer in ("latent", "differential", "deltanet"):
        roles |= parameter_roles(tiny(mixer))
    vectors = [n for n, r in roles.items() if r == ParamRole.vector]
    matrices = [n for n, r in roles.items() if r == ParamRole.hidden_matrix]
    for suffix in ("conv_weight", "A_log", "dt_bias", "lambda_q1", "lambda_k2", "kv_a_layernorm.weight"):
        assert any(n.endswith(suffix) for n in vectors), suffix
    for suffix in ("in_proj.weight", "kv_b_proj.weight", "kv_a_proj_with_mqa.weight", "qkv_proj.weight"):
        assert any(n.endswith(suffix) for n in matrices), suffix


def test_own_initialised_vectors_stay_as_built() -> None:
    """The model's init draws matrices; λ (N(0, 0.1)) and the decay parameters keep their own values."""
    model = tiny("deltanet")
    net = model.stack.layers[0].self_attn.fn
    assert isinstance(net, GatedDeltaNet)
    assert bool((net.A_log.exp() >= 1).all() and (net.A_log.exp() <= 16).all())
    dt = F.softplus(net.dt_bias)
    assert bool((dt >= 1e-4).all() and (dt <= 0.1 + 1e-6).all())
    diff = tiny("differential").stack.layers[2].self_attn.fn
    assert isinstance(diff, DifferentialAttention)
    assert diff.lambda_init == pytest.approx(0.8 - 0.6 * torch.exp(torch.tensor(-0.6)).item())
    assert 0.02 < float(diff.lambda_q1.detach().std()) < 0.3  # N(0, 0.1), not init_std's 0.02


@pytest.mark.parametrize("mixer", MIXERS)
def test_attn_out_site_is_the_mixer(mixer: str) -> None:
    model = tiny(mixer)
    sites = activation_sites(model)
    assert sites["layers.0.attn_out"].module is model.stack.layers[0].self_attn.fn
    assert "layers.0.attn_heads" in sites


@pytest.mark.parametrize("mixer", ["latent", "differential", "deltanet"])
def test_tensor_parallel_refuses_in_one_line(mixer: str) -> None:
    with pytest.raises(
        ValueError, match=r"tensor parallel cannot split stack\.layers\.0\.self_attn\.fn: "
    ) as err:
        check_mixer_plans(tiny(mixer))
    assert "\n" not in str(err.value)
    check_mixer_plans(tiny("attention"))  # softmax attention has its plan


def test_flops_follow_each_layers_mixer() -> None:
    cfg = replace(TINY, mixer="attention")
    base = chinchilla_flops_per_token(cfg, VOCAB, 64)
    assert chinchilla_flops_per_token(replace(TINY, mixer="differential"), VOCAB, 64) > base
    linear = replace(TINY, mixer="deltanet")
    # the linear mixer's token mixing does not grow with the length past a chunk; attention's does
    assert context_flops(linear, "deltanet", 4096, True) == context_flops(linear, "deltanet", 8192, True)
    assert context_flops(cfg, "attention", 8192, True) > context_flops(cfg, "attention", 4096, True)
    counts = {m: flop_counts(tiny(m), 64) for m in MIXERS}
    assert all(c.nanogpt > 0 and c.chinchilla > 0 for c in counts.values())
    assert counts["differential"].nanogpt > counts["attention"].nanogpt


def test_latent_model_decodes_with_the_absorbed_path() -> None:
    """A latent GPT built with ``mixers.absorb`` gives the plain one's greedy tokens."""
    plain = tiny("latent")
    absorbed = tiny("latent")
    for layer in absorbed.stack.layers:
        layer.self_attn.fn.absorb = True
    assert isinstance(absorbed.stack.layers[0].self_attn.fn, LatentAttention)
    ids = torch.randint(0, VOCAB, (2, 6), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        for _ in range(6):
            a, b = plain(ids)[:, -1].argmax(-1), absorbed(ids)[:, -1].argmax(-1)
            assert torch.equal(a, b)
            ids = torch.cat([ids, a[:, None]], dim=1)


def test_refusals_name_the_setting() -> None:
    with pytest.raises(ConfigError, match="causal by nature"):
        model_config("bert", mixer="deltanet").check()
    with pytest.raises(ConfigError, match="pos=rope"):
        model_config("gpt", mixer="latent", pos=pos_config("alibi")).check()
    with pytest.raises(ConfigError, match="pairs heads"):
        model_config("gpt", mixer="differential", n_heads=1, d_model=32).check()
    with pytest.raises(ConfigError, match="seq2seq"):
        model_config("seq2seq", mixer="latent", pos=pos_config("rope")).check()
    with pytest.raises(ValueError, match="static KV cache"):
        tiny("deltanet").new_static_cache(1, 8)


@pytest.mark.parametrize("case", CASES)
def test_generate_decodes_the_same_tokens_with_and_without_the_cache(case: str) -> None:
    """``attnlab.generate`` over prompts of two lengths (left-padded), greedy: each layer's cache kind
    gives the tokens that recomputing the whole sequence gives."""
    from attnlab.generate import generate

    model = tiny(CASES[case])
    prompts = [[3, 7, 1, 9, 4], [5, 2]]
    cached = generate(model, prompts, max_new_tokens=8, temperature=0.0)
    uncached = generate(model, prompts, max_new_tokens=8, temperature=0.0, use_cache=False)
    assert cached == uncached and all(len(row) == 8 for row in cached)


@pytest.mark.parametrize("mixer", ["latent", "differential", "deltanet"])
def test_muon_takes_the_mixers_matrices_and_adamw_the_rest(mixer: str) -> None:
    """Muon orthogonalises the hidden matrices only: the depthwise kernel, λ and the decays go to AdamW."""
    from attnlab.schema.optim import MuonConfig
    from attnlab.tasks.optim import muon

    model = tiny(mixer).train()
    optimizer = muon(model, MuonConfig(), fused=False)
    in_muon = {id(p) for group in optimizer.muon.param_groups for p in group["params"]}
    roles = parameter_roles(model)
    params = dict(model.named_parameters())
    assert {n for n in params if id(params[n]) in in_muon} == {
        n for n, r in roles.items() if r == ParamRole.hidden_matrix
    }
    ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(4))
    F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten()).backward()
    optimizer.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())


def qwen3_next_like(**overrides) -> DecoderLM:
    """Qwen3-Next's pattern by layout: 3 DeltaNet : 1 attention, the attention layer gated, QK-normed,
    with partial RoPE; ``overrides`` change the rest."""
    settings = dict(
        layout="3*deltanet attention ...", attn_gate="elementwise", qk_norm=True, pos=pos_config("rope")
    )
    settings["pos"].rope_fraction = 0.25
    torch.manual_seed(0)
    cfg = replace(TINY, **(settings | overrides))
    cfg.check()
    return build_model(cfg).eval()


@pytest.mark.parametrize(
    "overrides",
    [{}, {"layout": "deltanet sliding+attention latent+nope differential", "attn_window": 4}],
    ids=["qwen3-next", "sliding and nope layers"],
)
def test_a_hybrid_layout_with_hooks_decodes_as_its_full_forward(overrides: dict) -> None:
    model = qwen3_next_like(**overrides)
    kinds = [type(layer.self_attn.fn).__name__ for layer in model.stack.layers]
    if not overrides:
        assert kinds == ["GatedDeltaNet"] * 3 + ["SelfAttention"]
        assert model.stack.layers[3].self_attn.fn.gate is not None  # the hook on the attention layer
    ids = torch.randint(1, VOCAB, (2, 11), generator=torch.Generator().manual_seed(5))
    mask = torch.ones(2, 11, dtype=torch.bool)
    mask[0, :2] = False
    with torch.no_grad():
        full = model(ids, attention_mask=mask)
        cache = model.new_cache()
        steps = [model(ids[:, :3], attention_mask=mask[:, :3], cache=cache)]
        steps += [
            model(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], cache=cache) for t in range(3, 11)
        ]
    assert (full - torch.cat(steps, dim=1))[mask].abs().max() <= 1e-5


def test_layout_refusals_name_the_entry() -> None:
    with pytest.raises(ConfigError, match="deltanet layer has no window"):
        replace(TINY, layout="deltanet+sliding attention ...", attn_window=4).check()
    with pytest.raises(ConfigError, match="first layer must be attention"):
        replace(TINY, layout="deltanet attention ...", value_residual=0.5).check()
    with pytest.raises(ConfigError, match="unknown tag 'mamba'"):
        replace(TINY, layout="mamba attention ...").check()


def test_qk_clip_bounds_differential_logits_and_refuses_latent() -> None:
    """Differential attention records the logits both maps share, so QK-clip scales its heads back;
    latent attention is refused in one line; gated DeltaNet has no softmax logits to clip."""
    from attnlab.blocks.qk_clip import check_clippable, clip_qk, recording

    model = tiny(["differential", "deltanet", "differential", "attention"])
    check_clippable(model)
    with torch.no_grad():
        model.stack.layers[0].self_attn.fn.qkv_proj.weight.mul_(30.0)  # logits far past the threshold
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(6))
    with torch.no_grad(), recording(model) as before:
        model(ids)
    assert set(before) == {
        "stack.layers.0.self_attn.fn",
        "stack.layers.2.self_attn.fn",
        "stack.layers.3.self_attn.fn",
    }
    assert float(before["stack.layers.0.self_attn.fn"].max()) > 5.0
    clip_qk(model, 5.0, lambda: model(ids))
    with torch.no_grad(), recording(model) as after:
        model(ids)
    assert all(float(v.max()) <= 5.0 * (1 + 1e-5) for v in after.values())
    with pytest.raises(
        ValueError, match=r"optim.qk_clip: stack.layers.0.self_attn.fn: latent attention"
    ) as err:
        check_clippable(tiny("latent"))
    assert "\n" not in str(err.value)
