"""Per-layer layouts and attention hooks in whole decoders: cached decoding equals the full forward on a
left-padded batch (sliding layers included), the explicit, SDPA and FlexAttention paths agree wherever a
path computes the hook, each hook at its identity trains bit for bit as the plain block, and a layout
or a hook that cannot work is refused up front in one line."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlab.blocks import flex as flex_module
from attnlab.blocks.attention import use_attention_path
from attnlab.models import build_model
from attnlab.schema.errors import ConfigError
from attnlab.schema.model import GPTConfig, Seq2SeqConfig
from attnlab.schema.pos import LearnedPos, RopePos

ATOL = 1e-5
VOCAB, T = 40, 12
BASE = GPTConfig(
    vocab_size=VOCAB, d_model=32, n_layers=4, n_heads=4, n_kv_heads=2, max_seq_len=32, pos=RopePos()
)
SLIDING = dict(attn_window=3, layout="sliding full ...")
VARIANTS = {  # name -> settings on BASE
    "sliding:full layout": SLIDING,
    "NoPE every fourth layer": dict(layout="3*pos nope ..."),
    "3 sliding : 1 full+nope": dict(attn_window=3, layout="3*sliding full+nope ..."),
    "soft-capping": dict(attn_softcap=1.5, attn_backend="explicit", logit_softcap=2.0, **SLIDING),
    "learned sinks": dict(attn_sink="learned", attn_sink_init=0.5, **SLIDING),
    "off-by-one": dict(attn_sink="off_by_one"),
    "headwise gate": dict(attn_gate="headwise", **SLIDING),
    "elementwise gate": dict(attn_gate="elementwise"),
    "partial RoPE": dict(pos=RopePos(rope_fraction=0.5), **SLIDING),
    "value residual": dict(value_residual=0.5, **SLIDING),
    "post-norms": dict(post_norms=True, norm="rmsnorm"),
    "everything": dict(
        attn_softcap=1.5,
        attn_backend="explicit",
        attn_sink="learned",
        attn_gate="elementwise",
        value_residual=0.3,
        post_norms=True,
        pos=RopePos(rope_fraction=0.5),
        attn_window=3,
        layout="sliding+nope full ...",
    ),
}
CAPPED = {"soft-capping", "everything"}  # SDPA refuses soft-capping
# the variant whose flex path runs the compiled kernel: the one score modification of the hooks
COMPILED_FLEX = {"soft-capping"}


def model_of(settings: dict, seed: int = 0) -> nn.Module:
    """The decoder of ``settings`` with every parameter moved (sinks and mixes too), in eval mode."""
    cfg = replace(BASE, **settings)
    cfg.check()
    torch.manual_seed(seed)
    model = build_model(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def left_padded() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ids, a mask with row 1 left-padded by 3, and positions counting real tokens only."""
    ids = torch.randint(0, VOCAB, (2, T), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, T, dtype=torch.long)
    mask[1, :3] = 0
    positions = torch.stack([torch.arange(T), (torch.arange(T) - 3).clamp(min=0)])
    return ids, mask, positions


@torch.no_grad()
def cached(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Logits from a prefill of 5 tokens, then one token at a time through the KV cache."""
    cache, start, outs = model.new_cache(), 0, []
    for n in (5,) + (1,) * (T - 5):
        step = slice(start, start + n)
        outs.append(
            model(
                ids[:, step], attention_mask=mask[:, : start + n], positions=positions[:, step], cache=cache
            )
        )
        start += n
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_cached_decoding_equals_the_full_forward(name: str) -> None:
    model = model_of(VARIANTS[name])
    ids, mask, positions = left_padded()
    with torch.no_grad():
        full = model(ids, attention_mask=mask, positions=positions)
    real = mask.bool()
    assert full[real].abs().max() > 0.1
    torch.testing.assert_close(cached(model, ids, mask, positions)[real], full[real], atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_explicit_sdpa_and_flex_paths_agree(
    name: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """On a padded batch, at real tokens (a query that sees only padding is unused, and its output
    differs by path).

    The compiled kernel (``torch.compile(flex_attention)``, what eval and sampling run for prompts)
    fuses the mask and the score modification, and each distinct one is a compilation of seconds of
    g++. ``COMPILED_FLEX`` runs it for soft-capping's tanh over the window and causal masks of its
    sliding:full layout; the other hooks act outside the kernel (on queries and keys, values,
    outputs, norms: only the strides it sees change) or need the log-sum-exp that the compiled CPU
    kernel lacks (sinks), so they run the uncompiled kernel: the same ``mask_mod`` and ``score_mod``,
    evaluated over the whole score matrix. The compiled kernel without a score_mod runs in
    ``tests/blocks/test_mixers_hf.py`` (latent and differential attention, causal and padded), with
    ALiBi's and T5's in ``tests/blocks/test_flex.py`` (windowed and padded)."""
    if name in COMPILED_FLEX:
        request.getfixturevalue("fresh_compiler")
    else:
        monkeypatch.setattr(flex_module, "COMPILE_FROM", 10**9)
    model = model_of(VARIANTS[name])
    ids, mask, positions = left_padded()
    real = mask.bool()
    outputs = {}
    paths = ("explicit", "flex") if name in CAPPED else ("explicit", "sdpa", "flex")
    with torch.no_grad():
        for path in paths:
            with use_attention_path(model, path):
                outputs[path] = model(ids, attention_mask=mask, positions=positions)[real]
    for path in paths[1:]:
        torch.testing.assert_close(outputs[path], outputs["explicit"], atol=ATOL, rtol=0)


def test_sdpa_refuses_soft_capping_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^model.attn_backend=sdpa: SDPA cannot apply model.attn_softcap"):
        replace(BASE, attn_softcap=30.0).check()
    model = model_of(VARIANTS["soft-capping"])
    with use_attention_path(model, "sdpa"), pytest.raises(ValueError, match="SDPA cannot apply tanh"):
        model(torch.zeros(1, 3, dtype=torch.long))


def losses(settings: dict, path: str = "sdpa", steps: int = 20) -> list[float]:
    """Training losses of a tiny decoder over ``steps`` AdamW steps on fixed random batches."""
    cfg = replace(BASE, **settings)
    torch.manual_seed(0)
    model = build_model(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    data = torch.Generator().manual_seed(2)
    out = []
    with use_attention_path(model, path):
        for _ in range(steps):
            ids = torch.randint(0, VOCAB, (4, T + 1), generator=data)
            logits = model(ids[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.item())
    return out


IDENTITIES = {  # hook at its identity -> the path it is exact on
    "cap at infinity": (dict(attn_softcap=float("inf"), logit_softcap=float("inf")), "sdpa"),
    "gate open (offset +inf), headwise": (dict(attn_gate="headwise", attn_gate_offset=float("inf")), "sdpa"),
    "gate open (offset +inf), elementwise": (
        dict(attn_gate="elementwise", attn_gate_offset=float("inf")),
        "sdpa",
    ),
    "mix weight 0": (dict(value_residual=0.0, value_residual_learned=False), "sdpa"),
    "factor 1": (dict(pos=RopePos(rope_fraction=1.0)), "sdpa"),
    "sink at -inf": (dict(attn_sink="learned", attn_sink_init=float("-inf")), "explicit"),
    "explicit all-full layout": (dict(layout="full ..."), "sdpa"),
}


@pytest.mark.parametrize("name", list(IDENTITIES))
def test_a_hook_at_its_identity_trains_bit_for_bit_as_the_plain_block(name: str) -> None:
    settings, path = IDENTITIES[name]
    plain = losses({}, path)
    assert losses(settings, path) == plain
    assert plain[-1] < plain[0]  # it trains


def test_the_hooks_parameters_have_roles() -> None:
    from attnlab.blocks.roles import ParamRole, parameter_roles

    roles = parameter_roles(model_of(VARIANTS["everything"]))
    assert roles["stack.layers.1.self_attn.fn.sinks.logits"] == ParamRole.vector
    assert roles["stack.layers.1.self_attn.fn.gate.proj.weight"] == ParamRole.hidden_matrix
    assert roles["stack.layers.1.self_attn.fn.value_residual.mix"] == ParamRole.vector
    assert (
        "stack.layers.0.self_attn.fn.value_residual.mix" not in roles
    )  # the first layer's values are the mix's


def test_layers_follow_the_layout() -> None:
    model = model_of(dict(attn_window=3, layout="2*sliding full+nope ..."))
    attns = [layer.self_attn.fn for layer in model.stack.layers]
    assert [a.window for a in attns] == [3, 3, None, 3]
    assert [a.pos is not None for a in attns] == [True, True, False, True]
    cache = model.new_cache(reserve=100)
    assert [c.reserve for c in cache.self_attn] == [6, 6, 100, 6]  # a sliding layer keeps twice its window


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            dict(layout="sliding full"),
            "model.layout=sliding full: has 2 entries for n_layers=4; give one per layer",
        ),
        (
            dict(layout="full sliding ..."),
            "model.layout=full sliding ...: a sliding layer needs model.attn_window",
        ),
        (
            dict(layout=["full", "linear", "..."]),
            "model.layout=linear: unknown tag 'linear'; tags are full, sliding",
        ),
        (
            dict(layout="5*full ..."),
            "model.layout=5\\*full ...: a pattern of 5 entries is longer than n_layers=4",
        ),
        (dict(layout="0*full ..."), "model.layout=0\\*full: a repeated entry is N\\*entry"),
        (
            dict(layout="3*pos nope ...", pos=LearnedPos()),
            "model.layout=3\\*pos nope ...: nope drops a layer's positions, but pos=learned is added once",
        ),
        (
            dict(pos=RopePos(rope_fraction=0.4)),
            "model.pos.rope_fraction=0.4: in \\(0, 1\\], rotating an even number",
        ),
        (dict(value_residual=2.0), "model.value_residual=2.0: a mix weight in \\[0, 1\\]"),
    ],
)
def test_a_layout_or_hook_that_cannot_work_is_one_line(settings: dict, message: str) -> None:
    with pytest.raises(ConfigError, match="^" + message) as err:
        replace(BASE, **settings).check()
    assert "\n" not in str(err.value)


def test_seq2seq_refuses_a_layout() -> None:
    with pytest.raises(
        ConfigError, match=r"^model.layout=full \.\.\.: a layout describes one stack; seq2seq has two"
    ):
        Seq2SeqConfig(vocab_size=VOCAB, layout="full ...").check()


@pytest.mark.parametrize(
    ("name", "hook"),
    [
        ("soft-capping", "softcap"),
        ("learned sinks", "sinks"),
        ("off-by-one", "sinks"),
        ("headwise gate", "gate"),
        ("elementwise gate", "gate"),
        ("value residual", "value_residual"),
    ],
)
def test_each_hook_acts(name: str, hook: str) -> None:
    """The comparisons above are not vacuous: taking the hook out of every layer changes the logits."""
    model = model_of(VARIANTS[name])
    ids, mask, positions = left_padded()
    with torch.no_grad(), use_attention_path(model, "explicit"):
        hooked = model(ids, attention_mask=mask, positions=positions)
        for layer in model.stack.layers:
            setattr(layer.self_attn.fn, hook, None)
        plain = model(ids, attention_mask=mask, positions=positions)
    assert (hooked - plain)[mask.bool()].abs().max() > 1e-2
