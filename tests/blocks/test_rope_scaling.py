"""RoPE scaling: frequencies and attention factors equal to Hugging Face's, no graph break, clear errors."""

from __future__ import annotations

import pytest
import torch

from attnlab.blocks.positional import RotaryPositionalEncoding
from attnlab.blocks.rope_scaling import RopeScaling, attention_factor, inv_freq
from attnlab.schema.errors import ConfigError
from attnlab.schema.pos import RopeScalingKind

transformers = pytest.importorskip("transformers")
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

HEAD_DIM, BASE, ORIGINAL = 16, 100.0, 16


def hf_config(rope: dict, max_positions: int = ORIGINAL) -> object:
    """A Llama config whose heads are HEAD_DIM wide, with ``rope`` as its rope_parameters."""
    return transformers.LlamaConfig(
        hidden_size=4 * HEAD_DIM,
        num_attention_heads=4,
        max_position_embeddings=max_positions,
        rope_parameters={"rope_theta": BASE, **rope},
    )


def ours(kind: str, length: int, **params: object) -> tuple[torch.Tensor, float]:
    scaling = RopeScaling(kind=kind, original_max_len=ORIGINAL, **params)
    return inv_freq(HEAD_DIM, BASE, scaling, torch.arange(length)), attention_factor(scaling)


def test_linear_divides_every_frequency_by_the_factor() -> None:
    freqs, factor = ours("linear", 40, factor=2.5)
    expected, hf_factor = ROPE_INIT_FUNCTIONS["linear"](hf_config({"rope_type": "linear", "factor": 2.5}))
    torch.testing.assert_close(freqs, expected, rtol=0, atol=0)
    assert factor == hf_factor == 1.0


@pytest.mark.parametrize("length", [1, ORIGINAL - 1, ORIGINAL, ORIGINAL + 1, 3 * ORIGINAL, 100])
def test_ntk_follows_the_current_length_beyond_the_original(length: int) -> None:
    """Hugging Face's ``dynamic``: unscaled up to the original length, a larger base after it."""
    config = hf_config({"rope_type": "dynamic", "factor": 3.0})
    if length > ORIGINAL:  # what its rotary module computes once a call is longer than the original
        expected, _ = ROPE_INIT_FUNCTIONS["dynamic"](config, seq_len=torch.tensor(length))
    else:  # the frequencies it was built with
        expected, _ = ROPE_INIT_FUNCTIONS["dynamic"](config)
    freqs, factor = ours("ntk", length, factor=3.0)
    torch.testing.assert_close(freqs, expected, rtol=0, atol=0)
    assert factor == 1.0
    if length > ORIGINAL:
        assert (freqs[1:] < ours("none", length)[0][1:]).all()  # slower turns: a larger base


def test_ntk_length_is_the_largest_position_of_any_row() -> None:
    scaling = RopeScaling(kind="ntk", factor=2.0, original_max_len=ORIGINAL)
    rows = torch.tensor([[0, 1, 2, 3], [30, 31, 32, 33]])
    torch.testing.assert_close(
        inv_freq(HEAD_DIM, BASE, scaling, rows), inv_freq(HEAD_DIM, BASE, scaling, torch.arange(34))
    )


YARN_CASES = {
    "defaults": dict(factor=4.0),
    "betas, no truncation": dict(factor=8.0, beta_fast=16.0, beta_slow=2.0, truncate=False),
    "given attention factor": dict(factor=4.0, attention_factor=1.3),
    "DeepSeek mscales": dict(factor=40.0, mscale=1.0, mscale_all_dim=0.707),
}
HF_YARN_KEYS = {"attention_factor": "attention_factor", "beta_fast": "beta_fast", "beta_slow": "beta_slow"}


@pytest.mark.parametrize("case", list(YARN_CASES))
def test_yarn_matches_hugging_face(case: str) -> None:
    params = YARN_CASES[case]
    hf_params = {"rope_type": "yarn", "original_max_position_embeddings": ORIGINAL, **params}
    expected, hf_factor = ROPE_INIT_FUNCTIONS["yarn"](hf_config(hf_params, max_positions=4 * ORIGINAL))
    freqs, factor = ours("yarn", 100, **params)
    torch.testing.assert_close(freqs, expected, rtol=0, atol=0)
    assert factor == pytest.approx(hf_factor, rel=1e-12)
    unscaled = ours("none", 100)[0]
    assert freqs[0] == unscaled[0]  # the fastest frequency is kept
    torch.testing.assert_close(freqs[-1], unscaled[-1] / params["factor"])  # the slowest is interpolated


def test_yarn_scales_cos_and_sin_by_its_attention_factor() -> None:
    scaling = RopeScaling(kind="yarn", factor=4.0, original_max_len=ORIGINAL)
    rope = RotaryPositionalEncoding(HEAD_DIM, BASE, scaling)
    x = torch.randn(1, 2, 5, HEAD_DIM)
    rotated, _ = rope.rotate(x, x, torch.arange(5), torch.arange(5))
    expected = 0.1 * torch.log(torch.tensor(4.0)).item() + 1.0
    torch.testing.assert_close(rotated.norm(dim=-1), expected * x.norm(dim=-1))


@pytest.mark.parametrize("kind", list(RopeScalingKind))
def test_scaled_rope_compiles_without_graph_break(kind: str) -> None:
    scaling = RopeScaling(kind=kind, factor=2.0, original_max_len=4)
    rope = RotaryPositionalEncoding(HEAD_DIM, BASE, scaling)
    q = torch.randn(2, 2, 9, HEAD_DIM)
    explained = torch._dynamo.explain(rope.rotate)(q, q, torch.arange(9), torch.arange(9))
    assert explained.graph_break_count == 0, explained.break_reasons


def test_bad_scaling_is_named() -> None:
    with pytest.raises(
        ConfigError, match=r"^model.pos.rope_scaling=llama3: choose one of none, linear, ntk, yarn$"
    ):
        RopeScaling(kind="llama3")
    with pytest.raises(
        ConfigError, match=r"^model.pos.rope_factor=0.5: must be at least 1 \(1: no stretch\)$"
    ):
        RopeScaling(kind="linear", factor=0.5)
