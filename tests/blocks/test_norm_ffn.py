"""Norms, residual placement and feed-forward networks against their formulas."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attnlab.blocks.ffn import FeedForward, ffn_width
from attnlab.blocks.layers import Residual, TransformerLayer
from attnlab.blocks.norm import RMSNorm, build_norm
from attnlab.blocks.view import AttentionView
from attnlab.schema.model import Activation, ModelConfig, model_config

ATOL = 1e-5


def test_rmsnorm_matches_the_formula() -> None:
    """y = x / sqrt(mean(x^2) + eps) * w  (Zhang & Sennrich 2019): no centring, no bias."""
    norm = RMSNorm(6, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 2.0, 6))
    x = torch.randn(2, 3, 6) * 3 + 1
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * norm.weight
    torch.testing.assert_close(norm(x), expected, atol=ATOL, rtol=0)
    assert [n for n, _ in norm.named_parameters()] == ["weight"]


def test_build_norm_kinds_and_bias() -> None:
    assert isinstance(build_norm("rmsnorm", 8, 1e-6), RMSNorm)
    ln = build_norm("layernorm", 8, 1e-5)
    assert isinstance(ln, nn.LayerNorm) and ln.bias is not None and ln.eps == 1e-5
    assert build_norm("layernorm", 8, bias=False).bias is None
    with pytest.raises(ValueError, match=r"'batchnorm' is not a valid Norm"):
        build_norm("batchnorm", 8)


def cfg(norm_first: bool, norm: str = "layernorm") -> ModelConfig:
    return model_config("gpt", d_model=8, n_heads=2, d_ff=16, norm=norm, norm_first=norm_first)


def test_residual_placement() -> None:
    """Pre-norm: x + f(norm(x)); post-norm (the original paper): norm(x + f(x))."""
    torch.manual_seed(0)
    fn = nn.Linear(8, 8)
    x = torch.randn(2, 3, 8) * 4 + 2
    pre, post = Residual(fn, cfg(True)), Residual(fn, cfg(False))
    torch.testing.assert_close(pre(x), x + fn(pre.norm(x)), atol=ATOL, rtol=0)
    torch.testing.assert_close(post(x), post.norm(x + fn(x)), atol=ATOL, rtol=0)


@pytest.mark.parametrize("cross", [False, True])
def test_post_norm_layer_output_is_normalised_per_token(cross: bool) -> None:
    torch.manual_seed(0)
    layer = TransformerLayer(cfg(False), None, cross_attention=cross).eval()
    x = torch.randn(2, 5, 8) * 3 + 1
    memory = torch.randn(2, 4, 8) if cross else None
    view = AttentionView(torch.arange(5), causal=True, memory=memory)
    y = layer(x, view)
    torch.testing.assert_close(y.mean(-1), torch.zeros(2, 5), atol=ATOL, rtol=0)
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(2, 5), atol=1e-4, rtol=0)
    # pre-norm leaves the residual stream unnormalised
    pre = TransformerLayer(cfg(True), None, cross_attention=cross).eval()
    y = pre(x, view)
    assert y.mean(-1).abs().max() > 0.1


def gelu_exact(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


PLAIN = {
    "relu": lambda x: x.clamp(min=0),
    "gelu": gelu_exact,
    "gelu_tanh": gelu_tanh,
    "silu": lambda x: x * torch.sigmoid(x),
}
GATED = {"swiglu": lambda x: x * torch.sigmoid(x), "geglu": gelu_exact, "geglu_tanh": gelu_tanh}


@pytest.mark.parametrize("activation", list(PLAIN))
def test_plain_ffn_formula(activation: str) -> None:
    torch.manual_seed(0)
    ffn = FeedForward(8, 20, activation)
    assert ffn.fc_gate is None
    x = torch.randn(2, 3, 8)
    expected = ffn.fc_out(PLAIN[activation](ffn.fc_in(x)))
    torch.testing.assert_close(ffn(x), expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("activation", list(GATED))
@pytest.mark.parametrize("bias", [True, False])
def test_gated_ffn_formula(activation: str, bias: bool) -> None:
    """SwiGLU / GeGLU (Shazeer 2020): W_out (act(W_gate x) * W_in x)."""
    torch.manual_seed(0)
    ffn = FeedForward(8, 20, activation, bias=bias)
    assert (ffn.fc_in.bias is not None) == bias and ffn.fc_gate.out_features == 20
    x = torch.randn(2, 3, 8)
    h = GATED[activation](x @ ffn.fc_gate.weight.T + (ffn.fc_gate.bias if bias else 0))
    h = h * (x @ ffn.fc_in.weight.T + (ffn.fc_in.bias if bias else 0))
    expected = h @ ffn.fc_out.weight.T + (ffn.fc_out.bias if bias else 0)
    torch.testing.assert_close(ffn(x), expected, atol=ATOL, rtol=0)


def test_every_activation_of_the_schema_is_a_feed_forward() -> None:
    """The blocks implement exactly the schema's Activation members; anything else is refused."""
    for activation in Activation:
        ffn = FeedForward(8, 16, activation)
        assert ffn(torch.randn(1, 2, 8)).shape == (1, 2, 8)
        assert (ffn.fc_gate is not None) == (activation in GATED)
    with pytest.raises(ValueError, match=r"'tanh' is not a valid Activation"):
        FeedForward(8, 16, "tanh")


@pytest.mark.parametrize(
    ("d_model", "d_ff", "ffn_mult", "width"),
    [(16, None, 4.0, 64), (16, 40, 4.0, 40), (48, None, 8 / 3, 128), (10, None, 2.5, 25)],
)
def test_ffn_width_from_d_ff_or_multiple(d_model: int, d_ff: int | None, ffn_mult: float, width: int) -> None:
    assert ffn_width(d_model, d_ff, ffn_mult) == width
    layer = TransformerLayer(
        model_config("gpt", d_model=d_model, n_heads=2, d_ff=d_ff, ffn_mult=ffn_mult), None
    )
    assert layer.ffn.fn.fc_in.out_features == layer.ffn.fn.fc_out.in_features == width


def test_d_ff_zero_builds_attention_only_layers() -> None:
    """``model.d_ff=0``: no feed-forward sublayer; the layer is the attention's residual sublayer alone."""
    torch.manual_seed(0)
    assert ffn_width(16, 0, 4.0) == 0
    layer = TransformerLayer(model_config("gpt", d_model=8, n_heads=2, d_ff=0), None).eval()
    assert layer.ffn is None and not any("ffn" in name for name, _ in layer.named_parameters())
    x = torch.randn(2, 5, 8)
    view = AttentionView(torch.arange(5), causal=True)
    torch.testing.assert_close(layer(x, view), layer.self_attn(x, view), atol=0, rtol=0)
