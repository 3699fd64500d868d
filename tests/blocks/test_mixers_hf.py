"""Each mixer against the Hugging Face module of the model that introduced it, weights copied across.

Float32 on the CPU, every parameter perturbed (norm gains and λ included), a batch whose second row is
left-padded: DeepSeek-V3's latent attention (``DeepseekV3Attention``, with and without a query latent,
interleaved rotary pairs or not), DiffLlama's differential attention (``DiffLlamaAttention``, eager and
SDPA) and Qwen3-Next's gated DeltaNet (``Qwen3NextGatedDeltaNet``). Outputs are compared at the real
tokens; the largest difference must stay within ``TOL``.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from attnlab.blocks.backends import backend_named
from attnlab.blocks.mixers import DifferentialAttention, GatedDeltaNet, LatentAttention
from attnlab.blocks.mixers.delta import hf_projection_order
from attnlab.blocks.positional import RotaryPositionalEncoding
from attnlab.blocks.view import AttentionView

pytest.importorskip("transformers")

TOL = 1e-5
B, T, D = 2, 9, 32
PAD = 3  # left padding of the second row


def padding_mask() -> Tensor:
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, :PAD] = False
    return mask


def hf_mask(padding: Tensor) -> Tensor:
    """HF's eager 4D additive mask (B, 1, T, T): causal and padded keys at the dtype's minimum."""
    allowed = torch.ones(T, T, dtype=torch.bool).tril() & padding[:, None, None, :]
    return torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)


def perturb(module: nn.Module, seed: int = 0) -> None:
    """Every parameter moved off its initial value (gains off one, biases off zero)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))


def real(y: Tensor, padding: Tensor) -> Tensor:
    """The outputs at real tokens (a padded query's output is not a prediction)."""
    return y[padding]


def view_of(padding: Tensor) -> AttentionView:
    return AttentionView(torch.arange(T), causal=True, padding=padding)


# --- latent attention (DeepSeek-V3) ---------------------------------------------------------------


def deepseek_config(q_lora_rank: int | None, interleave: bool, implementation: str):
    from transformers import DeepseekV3Config

    cfg = DeepseekV3Config(
        vocab_size=64,
        hidden_size=D,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=q_lora_rank,
        kv_lora_rank=12,
        qk_nope_head_dim=6,
        qk_rope_head_dim=4,
        v_head_dim=5,
        first_k_dense_replace=1,
        rope_interleave=interleave,
        attention_bias=True,
        rope_parameters={"rope_type": "default", "rope_theta": 500.0},
    )
    cfg._attn_implementation = implementation
    return cfg


def latent_from_hf(hf: nn.Module, cfg, **settings) -> LatentAttention:
    ours = LatentAttention(
        D,
        cfg.num_attention_heads,
        kv_lora_rank=cfg.kv_lora_rank,
        qk_nope_head_dim=cfg.qk_nope_head_dim,
        qk_rope_head_dim=cfg.qk_rope_head_dim,
        v_head_dim=cfg.v_head_dim,
        q_lora_rank=cfg.q_lora_rank,
        bias=cfg.attention_bias,
        rope_base=cfg.rope_parameters["rope_theta"],
        rope_interleave=cfg.rope_interleave,
        **settings,
    )
    state = {k.replace("o_proj", "out_proj"): v for k, v in hf.state_dict().items()}
    ours.load_state_dict(state, strict=True)
    return ours


def deepseek_cos_sin(cfg, positions: Tensor) -> tuple[Tensor, Tensor]:
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RotaryEmbedding

    rotary = DeepseekV3RotaryEmbedding(cfg)
    return rotary(torch.zeros(1, dtype=torch.float32), positions.unsqueeze(0))


LATENT_CASES = [  # (q_lora_rank, interleave, path): every setting on SDPA and explicit; flex once (it compiles)
    *[(rank, inter, path) for rank in (None, 10) for inter in (False, True) for path in ("sdpa", "explicit")],
    (10, True, "flex"),
]


@pytest.mark.parametrize(("q_lora_rank", "interleave", "path"), LATENT_CASES)
def test_latent_attention_equals_deepseek_v3(
    q_lora_rank: int | None, interleave: bool, path: str, request: pytest.FixtureRequest
) -> None:
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    if path == "flex":
        request.getfixturevalue("fresh_compiler")  # its compiled kernel

    torch.manual_seed(0)
    cfg = deepseek_config(q_lora_rank, interleave, "eager")
    hf = DeepseekV3Attention(cfg, layer_idx=0).eval()
    perturb(hf)
    ours = latent_from_hf(hf, cfg, backend=path).eval()
    x, padding = torch.randn(B, T, D), padding_mask()
    with torch.no_grad():
        expected, _ = hf(x, deepseek_cos_sin(cfg, torch.arange(T)), hf_mask(padding))
        got = ours(x, view_of(padding))
        absorbed = latent_from_hf(hf, cfg, backend=path, absorb=True).eval()(x, view_of(padding))
    assert (real(got, padding) - real(expected, padding)).abs().max() <= TOL
    assert (real(absorbed, padding) - real(expected, padding)).abs().max() <= TOL


# --- differential attention (DiffLlama) -----------------------------------------------------------


def diffllama_config(implementation: str, n_kv_heads: int):
    from transformers import DiffLlamaConfig

    cfg = DiffLlamaConfig(
        vocab_size=64,
        hidden_size=D,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=n_kv_heads,
        attention_bias=True,
        rope_parameters={"rope_type": "default", "rope_theta": 500.0},
    )
    cfg._attn_implementation = implementation
    return cfg


def differential_from_hf(hf: nn.Module, cfg, layer_idx: int, path: str) -> DifferentialAttention:
    rope = RotaryPositionalEncoding(D // cfg.num_attention_heads, base=cfg.rope_parameters["rope_theta"])
    ours = DifferentialAttention(
        D,
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        layer=layer_idx + 1,  # HF counts layers from 0
        norm_eps=cfg.rms_norm_eps,
        bias=cfg.attention_bias,
        pos=rope,
    )
    ours.backend = backend_named(path)  # explicit is a probe's path, not a configurable one
    state = hf.state_dict()
    names = ("q_proj", "k_proj", "v_proj")
    mapped = {
        "qkv_proj.weight": torch.cat([state[f"{n}.weight"] for n in names]),
        "qkv_proj.bias": torch.cat([state[f"{n}.bias"] for n in names]),
        "out_proj.weight": state["o_proj.weight"],
        "out_proj.bias": state["o_proj.bias"],
        **{n: state[n] for n in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")},
    }
    ours.load_state_dict(mapped, strict=True)
    return ours


DIFFERENTIAL_CASES = [  # (HF implementation, n_kv_heads, our path); flex once (it compiles)
    *[(impl, kv, path) for impl in ("eager", "sdpa") for kv in (4, 2) for path in ("sdpa", "explicit")],
    ("eager", 2, "flex"),
]


@pytest.mark.parametrize(("implementation", "n_kv_heads", "path"), DIFFERENTIAL_CASES)
def test_differential_attention_equals_diffllama(
    implementation: str, n_kv_heads: int, path: str, request: pytest.FixtureRequest
) -> None:
    from transformers.models.diffllama.modeling_diffllama import DiffLlamaAttention, DiffLlamaRotaryEmbedding

    if path == "flex":
        request.getfixturevalue("fresh_compiler")  # its compiled kernel

    torch.manual_seed(0)
    cfg = diffllama_config(implementation, n_kv_heads)
    layer_idx = 2
    hf = DiffLlamaAttention(cfg, layer_idx=layer_idx).eval()
    perturb(hf)
    ours = differential_from_hf(hf, cfg, layer_idx, path).eval()
    assert ours.lambda_init == pytest.approx(0.8 - 0.6 * __import__("math").exp(-0.3 * 2))
    x, padding = torch.randn(B, T, D), padding_mask()
    cos_sin = DiffLlamaRotaryEmbedding(cfg)(x, torch.arange(T).unsqueeze(0))
    with torch.no_grad():
        expected, _ = hf(x, cos_sin, hf_mask(padding))
        got = ours(x, view_of(padding))
    assert (real(got, padding) - real(expected, padding)).abs().max() <= TOL


# --- gated DeltaNet (Qwen3-Next) ------------------------------------------------------------------


def qwen3_next_config(n_k_heads: int):
    from transformers import Qwen3NextConfig

    return Qwen3NextConfig(
        vocab_size=64,
        hidden_size=D,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        layer_types=["linear_attention"],
        linear_num_value_heads=4,
        linear_num_key_heads=n_k_heads,
        linear_key_head_dim=8,
        linear_value_head_dim=6,
        linear_conv_kernel_dim=4,
        num_experts=0,
    )


def delta_from_hf(hf: nn.Module, cfg, chunk: int) -> GatedDeltaNet:
    ours = GatedDeltaNet(
        D,
        cfg.linear_num_value_heads,
        head_k_dim=cfg.linear_key_head_dim,
        head_v_dim=cfg.linear_value_head_dim,
        n_k_heads=cfg.linear_num_key_heads,
        conv_kernel=cfg.linear_conv_kernel_dim,
        chunk=chunk,
        norm_eps=cfg.rms_norm_eps,
    )
    state = hf.state_dict()
    ratio = cfg.linear_num_value_heads // cfg.linear_num_key_heads
    qkvz, ba = hf_projection_order(
        cfg.linear_num_key_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim, ratio
    )
    mapped = {
        "in_proj.weight": torch.cat([state["in_proj_qkvz.weight"][qkvz], state["in_proj_ba.weight"][ba]]),
        "conv_weight": state["conv1d.weight"].squeeze(1),
        "A_log": state["A_log"],
        "dt_bias": state["dt_bias"],
        "norm.weight": state["norm.weight"],
        "out_proj.weight": state["out_proj.weight"],
    }
    ours.load_state_dict(mapped, strict=True)
    return ours


@pytest.mark.parametrize("n_k_heads", [4, 2])
@pytest.mark.parametrize("chunk", [64, 4])
def test_gated_deltanet_equals_qwen3_next(n_k_heads: int, chunk: int) -> None:
    """HF runs its chunked rule in one chunk of 64; ours also in chunks of 4 (three of them here)."""
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet

    torch.manual_seed(0)
    cfg = qwen3_next_config(n_k_heads)
    hf = Qwen3NextGatedDeltaNet(cfg, layer_idx=0).eval()
    perturb(hf)
    ours = delta_from_hf(hf, cfg, chunk).eval()
    x, padding = torch.randn(B, T, D), padding_mask()
    with torch.no_grad():
        expected = hf(x, attention_mask=padding.long())
        got = ours(x, view_of(padding))
    assert (real(got, padding) - real(expected, padding)).abs().max() <= TOL
