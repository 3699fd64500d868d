"""Parity with Hugging Face ``transformers``: the same numbers from independent implementations.

The cases (``experiments/parity/cases.py``, which ``experiments/parity/measure.py`` prints as a table)
build tiny, randomly initialised Hugging Face models from config objects (no downloads), perturb every
parameter, map them into attnlab with ``attnlab.models.hf`` and compare outputs in float32 eval mode on
random, padded batches; here each must hold to ``TOL`` and map to the expected settings.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from attnlab.schema.model import ModelConfig

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments" / "parity"))
from cases import CASES, ORIGINAL, TOL, WINDOW, diff, gemma2, ids, llama, mistral, right_padded, run

from attnlab.models.hf import from_transformers, hf_model_config

EXPECTED = {  # choices each mapping must make, beyond the family class's defaults
    "GPT-2": dict(family="gpt", pos="learned", norm_first=True, activation="gelu_tanh", tie_embeddings=True),
    "BERT (masked LM)": dict(
        family="bert", pos="learned", norm_first=False, embed_norm=True, type_vocab_size=2, mlm_head=True
    ),
    "BERT (classifier)": dict(
        family="bert", pos="learned", mlm_head=False, num_classes=3, classifier_hidden=True
    ),
    "ViT": dict(family="vit", pos="learned", norm_first=True, num_classes=5, image_size=16, patch_size=4),
    "Marian": dict(
        family="seq2seq",
        pos="sinusoidal",
        norm_first=False,
        embed_scale=True,
        lm_head_bias=True,
        activation="silu",
        n_decoder_layers=3,
    ),
    "T5 v1.0 (ReLU)": dict(
        family="seq2seq",
        pos="relative",
        norm="rmsnorm",
        bias=False,
        attn_scale=1.0,
        activation="relu",
        tied_output_scale=True,
    ),
    "T5 v1.1 (gated-gelu)": dict(
        family="seq2seq", pos="relative", activation="geglu_tanh", tied_output_scale=False
    ),
    "Llama (GQA)": dict(
        family="gpt", pos="rope", norm="rmsnorm", activation="swiglu", n_kv_heads=2, bias=False
    ),
    "BLOOM": dict(family="gpt", pos="alibi", embed_norm=True, n_heads=6),
    "Mistral (sliding window)": dict(
        family="gpt", pos="rope", norm="rmsnorm", n_kv_heads=2, attn_window=WINDOW, qk_norm=False
    ),
    "Qwen3 (QK-norm, GQA)": dict(family="gpt", pos="rope", n_kv_heads=2, qk_norm=True, attn_window=None),
    "Qwen3 (QK-norm, sliding window)": dict(qk_norm=True, attn_window=WINDOW),
    "Qwen3 (mixed sliding/full layer_types)": dict(
        qk_norm=True, attn_window=WINDOW, layout=["full", "sliding", "full", "sliding"]
    ),
    "SmolLM3 (NoPE every fourth layer)": dict(
        pos="rope", attn_window=WINDOW, layout=["full", "full", "full", "sliding+nope"] * 2
    ),
    "Gemma 2 (soft-capping, alternating windows)": dict(
        attn_softcap=2.0,
        logit_softcap=3.0,
        attn_backend="explicit",
        post_norms=True,
        embed_scale=True,
        activation="geglu_tanh",
        attn_scale=12**-0.5,
        attn_window=WINDOW,
        layout=["sliding", "full"] * 2,
    ),
    "Phi-3 (partial RoPE 0.5)": dict(pos="rope", rope_fraction=0.5, activation="swiglu", n_kv_heads=2),
    "Llama (RoPE linear)": dict(pos="rope", rope_scaling="linear", rope_factor=2.0, rope_base=100.0),
    "Llama (RoPE dynamic NTK)": dict(
        pos="rope", rope_scaling="ntk", rope_factor=3.0, rope_original_max_len=ORIGINAL
    ),
    "Llama (RoPE YaRN)": dict(
        pos="rope", rope_scaling="yarn", rope_factor=4.0, rope_original_max_len=ORIGINAL, max_seq_len=64
    ),
}


def setting(cfg: ModelConfig, key: str) -> object:
    """A ModelConfig field, ``pos`` as its name, or a ``rope_*`` field of ``pos``."""
    if key == "pos":
        return cfg.pos.name
    return getattr(cfg.pos, key) if key.startswith("rope_") else getattr(cfg, key)


@torch.no_grad()
def test_llama_refuses_a_partial_rotary_factor_it_does_not_apply() -> None:
    """transformers' Llama rotates every dimension whatever ``partial_rotary_factor`` says: loading it
    as partial RoPE would compute something else, so the loader names the architecture that applies it."""

    config = {**llama().config.to_dict(), "architectures": ["LlamaForCausalLM"]}
    config["rope_parameters"] = {**config["rope_parameters"], "partial_rotary_factor": 0.5}
    with pytest.raises(
        ValueError, match=r"partial_rotary_factor=0.5 is not applied by LlamaForCausalLM.*Phi3"
    ):
        hf_model_config(config)


@torch.no_grad()
def test_gemma2_soft_caps_act_in_the_reference() -> None:
    """Gemma 2's caps bend its scores and logits at these sizes: its parity is not that of caps too wide."""

    hf, x, mask = gemma2(), ids(), right_padded()
    capped = hf(x, attention_mask=mask).logits
    for layer in hf.model.layers:
        layer.self_attn.attn_logit_softcapping = None
    hf.config.final_logit_softcapping = None
    assert (capped - hf(x, attention_mask=mask).logits).abs().max() > 1e-2


@pytest.mark.parametrize("name", list(CASES))
def test_outputs_match_transformers(name: str) -> None:
    result = run(name)
    cfg = result.cfg
    assert {k: setting(cfg, k) for k in EXPECTED[name]} == EXPECTED[name]
    assert result.diffs
    for output, (value, _) in result.diffs.items():
        assert value <= TOL, f"{name} {output}: max abs difference {value:.2e} > {TOL:.0e}"


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@torch.no_grad()
def test_mistral_window_acts_in_the_reference_and_in_attnlab(implementation: str) -> None:
    """Hugging Face applies the sliding window with either attention implementation, and the window
    changes the logits of a LEN-token batch: parity is not the trivial parity of a window too wide.

    Compared at real tokens: a padded query whose window holds only padding sees no key at all, and
    there Hugging Face's SDPA path gives other (unused) outputs than its eager path and attnlab."""
    hf = mistral()
    ours = from_transformers(hf)
    hf.set_attn_implementation(implementation)
    x, mask = ids(), right_padded()
    real = mask.bool()
    windowed = hf(x, attention_mask=mask).logits
    assert diff(windowed[real], ours(x, attention_mask=mask)[real])[0] <= TOL
    hf.config.sliding_window = None
    full = hf(x, attention_mask=mask).logits
    assert (windowed - full)[real].abs().max() > 1e-2
