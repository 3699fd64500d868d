"""RoPE scaling in whole models: cached decoding as in Hugging Face, cached = full decoding where the
scaling does not depend on the length, and trained weights rebuilt under another scaling."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from cases import CASES, VOCAB
from torch import nn

from attnlab.models import build_model
from attnlab.models.hf import from_transformers
from attnlab.schema.model import GPTConfig
from attnlab.schema.pos import RopePos, RopeScalingKind

ATOL = 1e-5
ORIGINAL = 8
BASE = GPTConfig(
    vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=ORIGINAL, dropout=0.0
)


def scaled(kind: str, factor: float = 4.0) -> GPTConfig:
    return replace(BASE, pos=RopePos(rope_scaling=RopeScalingKind(kind), rope_factor=factor))


def random_model(cfg: GPTConfig) -> nn.Module:
    """Weights large enough that positions matter, the same for every scaling."""
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(std=0.3)
    return model


def ids(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def cached_logits(model: nn.Module, x: torch.Tensor, prefill: int) -> torch.Tensor:
    """Logits of ``x`` from a prefill of ``prefill`` tokens, then one token at a time through a cache."""
    cache = model.new_cache()
    steps = [model(x[:, :prefill], cache=cache)]
    steps += [model(x[:, t : t + 1], cache=cache) for t in range(prefill, x.shape[1])]
    return torch.cat(steps, dim=1)


@pytest.mark.parametrize("kind", ["none", "linear", "yarn"])
def test_cached_decoding_equals_full_forward_past_the_original_length(kind: str) -> None:
    model, x = random_model(scaled(kind)), ids(2, 3 * ORIGINAL)
    with torch.no_grad():
        full = model(x)
    torch.testing.assert_close(cached_logits(model, x, prefill=5), full, atol=ATOL, rtol=0)


def test_ntk_decoding_keeps_each_keys_rotation_past_the_original_length() -> None:
    """Dynamic NTK rotates by the length of the current call (Hugging Face's definition): within the
    original length cached = full decoding; past it a cached key keeps the rotation of the step that
    made it, where a full forward pass rotates every key for the whole length."""
    model, x = random_model(scaled("ntk")), ids(2, 3 * ORIGINAL)
    cached = cached_logits(model, x, prefill=5)
    with torch.no_grad():
        within, full = model(x[:, :ORIGINAL]), model(x)
        unscaled = random_model(scaled("none"))(x[:, :ORIGINAL])
    torch.testing.assert_close(cached[:, :ORIGINAL], within, atol=ATOL, rtol=0)
    torch.testing.assert_close(within, unscaled, atol=ATOL, rtol=0)
    assert not torch.allclose(cached[:, ORIGINAL:], full[:, ORIGINAL:], atol=1e-3)


def hf_step(hf: nn.Module, x: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, past: object):
    out = hf(
        input_ids=x, attention_mask=mask.long(), position_ids=positions, past_key_values=past, use_cache=True
    )
    return out.logits[:, -1], out.past_key_values


@pytest.mark.parametrize("case", ["Llama (RoPE linear)", "Llama (RoPE dynamic NTK)", "Llama (RoPE YaRN)"])
@torch.no_grad()
def test_cached_decoding_matches_hugging_face(case: str) -> None:
    """Left-padded prompts shorter than the original context, decoded to 2.5 times it, both with caches."""
    hf = CASES[case][0]()
    ours = from_transformers(hf)
    original = ours.cfg.pos.rope_original_max_len
    lengths, total = (10, 6), int(2.5 * original)
    rows = [ids(total - 10 + n, seed=n) for n in lengths]  # each: a prompt of n tokens, then the rest
    width = max(lengths)
    prompt = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, (row, n) in enumerate(zip(rows, lengths)):
        prompt[i, width - n :], mask[i, width - n :] = row[:n], True
    positions = (mask.long().cumsum(1) - 1).clamp(min=0)
    cache = ours.new_cache()
    expected, past = hf_step(hf, prompt, mask, positions, None)
    torch.testing.assert_close(
        ours(prompt, attention_mask=mask, positions=positions, cache=cache)[:, -1],
        expected,
        atol=ATOL,
        rtol=0,
    )
    for k in range(total - 10):
        token = torch.stack([row[n + k] for row, n in zip(rows, lengths)])[:, None]
        mask = torch.cat([mask, torch.ones(len(rows), 1, dtype=torch.bool)], dim=1)
        positions = positions[:, -1:] + 1
        expected, past = hf_step(hf, token, mask, positions, past)
        got = ours(token, attention_mask=mask, positions=positions, cache=cache)[:, -1]
        torch.testing.assert_close(got, expected, atol=ATOL, rtol=0, msg=lambda m, k=k: f"step {k}: {m}")
    assert positions.max() + 1 > 2 * original


@pytest.mark.parametrize("kind", ["linear", "ntk", "yarn"])
def test_trained_weights_are_rebuilt_under_another_scaling(kind: str) -> None:
    """RoPE scaling holds no weights: the state dict of an unscaled model loads strictly into a scaled
    one, which stretches positions past the original length (for ``ntk`` only there)."""
    trained = random_model(scaled("none"))
    rebuilt = build_model(scaled(kind)).eval()
    rebuilt.load_state_dict(trained.state_dict())  # strict
    short, long = ids(2, ORIGINAL), ids(2, 4 * ORIGINAL)
    with torch.no_grad():
        assert not torch.allclose(rebuilt(long), trained(long), atol=1e-3)
        same_within = torch.allclose(rebuilt(short), trained(short), atol=ATOL, rtol=0)
    assert same_within == (kind == "ntk")
