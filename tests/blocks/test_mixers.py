"""The mixers' own promises: cached decoding equals the full forward pass, gated DeltaNet's recurrent
rule equals its chunked one, the latent cache holds ``kv_lora_rank + qk_rope_head_dim`` numbers per
token, the recurrent cache a constant number whatever the length; refusals in one line."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from attnlab.blocks.cache import AttentionCache
from attnlab.blocks.mixers import (
    DifferentialAttention,
    GatedDeltaNet,
    LatentAttention,
    LatentCache,
    RecurrentCache,
)
from attnlab.blocks.mixers.delta import chunked_delta_rule, l2norm, recurrent_delta_rule
from attnlab.blocks.positional import RotaryPositionalEncoding
from attnlab.blocks.view import AttentionView

TOL = 1e-5
B, T, D, PAD = 2, 10, 32, 3


def left_padded() -> Tensor:
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, :PAD] = False
    return mask


def perturb(module: nn.Module) -> None:
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))


def latent(**settings) -> LatentAttention:
    torch.manual_seed(0)
    module = LatentAttention(
        D,
        4,
        kv_lora_rank=12,
        qk_nope_head_dim=6,
        qk_rope_head_dim=4,
        v_head_dim=5,
        q_lora_rank=10,
        **settings,
    )
    perturb(module)
    return module.eval()


def differential() -> DifferentialAttention:
    torch.manual_seed(0)
    module = DifferentialAttention(D, 4, 2, layer=2, pos=RotaryPositionalEncoding(8))
    perturb(module)
    return module.eval()


def deltanet(chunk: int = 4) -> GatedDeltaNet:
    torch.manual_seed(0)
    module = GatedDeltaNet(D, 4, head_k_dim=8, head_v_dim=6, n_k_heads=2, chunk=chunk)
    perturb(module)
    return module.eval()


def decode(module: nn.Module, x: Tensor, padding: Tensor, cache, prefill: int) -> Tensor:
    """Run ``prefill`` tokens at once, then one token a step, through ``cache``: outputs (B, T, D)."""
    outs, start = [], 0
    for end in [prefill, *range(prefill + 1, x.shape[1] + 1)]:
        view = AttentionView(torch.arange(start, end), causal=True, padding=padding[:, :end])
        outs.append(module(x[:, start:end], view, cache))
        start = end
    return torch.cat(outs, dim=1)


CASES = {
    "latent": (latent, LatentCache),
    "latent absorbed": (lambda: latent(absorb=True), LatentCache),
    "differential": (differential, AttentionCache),
    "gated deltanet": (deltanet, RecurrentCache),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("prefill", [1, 4])
def test_cached_decoding_equals_the_full_forward(name: str, prefill: int) -> None:
    """Left-padded batch; one token a step after a prefill of ``prefill`` tokens."""
    build, cache_kind = CASES[name]
    module, padding = build(), left_padded()
    x = torch.randn(B, T, D)
    with torch.no_grad():
        full = module(x, AttentionView(torch.arange(T), causal=True, padding=padding))
        stepped = decode(module, x, padding, cache_kind(), prefill)
    assert (full - stepped)[padding].abs().max() <= TOL


def test_absorbed_latent_path_gives_the_plain_paths_tokens() -> None:
    """Greedy tokens of a tiny readout over each path's outputs agree, and the outputs to 1e-5."""
    plain, absorbed = latent(), latent(absorb=True)
    x, padding = torch.randn(B, T, D), left_padded()
    with torch.no_grad():
        a = decode(plain, x, padding, LatentCache(), 1)
        b = decode(absorbed, x, padding, LatentCache(), 1)
    readout = torch.randn(D, 50)
    assert torch.equal((a @ readout).argmax(-1)[padding], (b @ readout).argmax(-1)[padding])
    assert (a - b)[padding].abs().max() <= TOL


def test_latent_cache_holds_the_latent_and_the_rope_key_only() -> None:
    module, cache = latent(), LatentCache()
    x, padding = torch.randn(B, T, D), left_padded()
    with torch.no_grad():
        decode(module, x, padding, cache, 3)
    per_token = module.kv_lora_rank + module.rope_dim
    assert module.cache_numbers_per_token() == per_token == 12 + 4
    assert cache.numbers_per_token() == per_token
    assert cache.latent.numel() + cache.rope_key.numel() == B * T * per_token
    assert tuple(cache.latent.shape) == (B, 1, T, 12) and tuple(cache.rope_key.shape) == (B, 1, T, 4)


def test_recurrent_cache_stays_the_same_size() -> None:
    module, cache = deltanet(), RecurrentCache()
    x = torch.randn(B, T, D)
    sizes = []
    with torch.no_grad():
        for t in range(T):
            module(x[:, t : t + 1], AttentionView(torch.arange(t, t + 1), causal=True), cache)
            sizes.append(cache.numbers())
    assert sizes == [module.cache_numbers_per_row()] * T
    assert cache.seen == T


@pytest.mark.parametrize(("length", "chunk"), [(1, 4), (7, 4), (8, 4), (13, 5), (9, 64)])
def test_recurrent_rule_equals_the_chunked_rule(length: int, chunk: int) -> None:
    """From a nonzero state, any length against any chunk: outputs and final states agree."""
    torch.manual_seed(length)
    b, h, dk, dv = 2, 3, 5, 4
    q = l2norm(torch.randn(b, h, length, dk)) / dk**0.5
    k = l2norm(torch.randn(b, h, length, dk))
    v, beta = torch.randn(b, h, length, dv), torch.rand(b, h, length)
    g, state = -torch.rand(b, h, length), torch.randn(b, h, dk, dv)
    y1, s1 = recurrent_delta_rule(q, k, v, g, beta, state)
    y2, s2 = chunked_delta_rule(q, k, v, g, beta, state, chunk)
    assert (y1 - y2).abs().max() <= TOL and (s1 - s2).abs().max() <= TOL


def test_deltanet_step_equals_its_chunked_forward() -> None:
    """The module's recurrent step (a cache, one token) against its chunked pass over the same tokens."""
    module = deltanet(chunk=3)
    x = torch.randn(B, T, D)
    with torch.no_grad():
        chunked = module(x, AttentionView(torch.arange(T), causal=True))
        cache = RecurrentCache()
        steps = [
            module(x[:, t : t + 1], AttentionView(torch.arange(t, t + 1), causal=True), cache)
            for t in range(T)
        ]
    assert (chunked - torch.cat(steps, dim=1)).abs().max() <= TOL


def test_deltanet_refuses_what_it_cannot_mix() -> None:
    module, x = deltanet(), torch.randn(1, 4, D)
    with pytest.raises(ValueError, match="causal by nature"):
        module(x, AttentionView(torch.arange(4), causal=False))
    with pytest.raises(ValueError, match="packed documents"):
        module(x, AttentionView(torch.arange(4), causal=True, documents=torch.zeros(1, 4, dtype=torch.long)))


def test_differential_attention_needs_paired_heads() -> None:
    with pytest.raises(ValueError, match="n_heads=3"):
        DifferentialAttention(24, 3)


def test_lambda_init_follows_the_paper() -> None:
    from attnlab.blocks.mixers import lambda_init

    assert lambda_init(1) == pytest.approx(0.2)
    assert lambda_init(4) == pytest.approx(0.8 - 0.6 * torch.exp(torch.tensor(-0.9)).item())
