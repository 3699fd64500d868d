"""Training FLOPs per token, counted nanoGPT's way and Chinchilla's, against both written out by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from attnlab.models import build_model
from attnlab.models.flops import chinchilla_flops_per_token, flop_counts
from attnlab.schema.model import GPTConfig, Seq2SeqConfig
from attnlab.schema.pos import pos_config

V, L, H, D, T = 50257, 12, 12, 768, 1024  # GPT-2 124M at its full context


def gpt2_small() -> torch.nn.Module:
    """GPT-2 124M on the meta device: its shapes without allocating its weights."""
    cfg = GPTConfig(
        d_model=D, n_layers=L, n_heads=H, d_ff=4 * D, activation="gelu_tanh", vocab_size=V,
        max_seq_len=T, pos=pos_config("learned"),
    )  # fmt: skip
    with torch.device("meta"):
        return build_model(cfg)


def nanogpt_estimate_mfu_flops_per_token() -> float:
    """nanoGPT's ``estimate_mfu``: ``6 N + 12 L H Q T`` with N = ``get_num_params()`` (the position
    table subtracted): token table (tied with the head), 12 d² + 13 d per block, the final layer norm."""
    n = V * D + L * (12 * D * D + 13 * D) + 2 * D
    assert n == 123_653_376  # what nanoGPT prints for GPT-2 with the 50257-token vocabulary, less wpe
    return 6 * n + 12 * L * H * (D // H) * T


def chinchilla_appendix_f_flops_per_token(ffw_size: int = 4 * D, key_size: int = D // H) -> float:
    """Hoffmann et al. 2022, appendix F, as written there (one sequence), then per token."""
    embeddings = 2 * T * V * D
    qkv = 2 * 3 * T * D * (key_size * H)
    key_query_logits = 2 * T * T * (key_size * H)
    softmax = 3 * H * T * T
    softmax_query_reduction = 2 * T * T * (key_size * H)
    final_linear = 2 * T * (key_size * H) * D
    attention = qkv + key_query_logits + softmax + softmax_query_reduction + final_linear
    dense_block = 2 * T * (D * ffw_size + D * ffw_size)
    final_logits = 2 * T * D * V
    forward = embeddings + L * (attention + dense_block) + final_logits
    return (forward + 2 * forward) / T


def test_gpt2_small_counted_as_nanogpt_estimate_mfu_does() -> None:
    counts = flop_counts(gpt2_small(), T)
    assert counts is not None
    assert counts.nanogpt == pytest.approx(nanogpt_estimate_mfu_flops_per_token(), rel=0.01)


def test_gpt2_small_counted_as_chinchilla_appendix_f() -> None:
    counts = flop_counts(gpt2_small(), T)
    assert counts.chinchilla == pytest.approx(chinchilla_appendix_f_flops_per_token(), rel=0.01)
    # The two ways differ by the token table counted as a product (6 V d) and the softmax (9 H T per
    # layer); biases and norms, which only nanoGPT's N holds, are a rounding error: 27% more here.
    assert counts.chinchilla - counts.nanogpt == pytest.approx(6 * V * D + 9 * H * T * L, rel=0.01)
    assert "appendix F" in counts.counts and "estimate_mfu" in counts.counts  # says how it counts


def test_gated_and_grouped_query_shapes_change_the_chinchilla_count() -> None:
    """A gated feed-forward network has three matrices; grouped-query keys and values cost less."""
    base = GPTConfig(d_model=64, n_layers=2, n_heads=4, vocab_size=100, pos=pos_config("rope"))
    plain = chinchilla_flops_per_token(base, 100, 32)
    gated = GPTConfig(**{**vars(base), "activation": "swiglu"})
    grouped = GPTConfig(**{**vars(base), "n_kv_heads": 1})
    ffn_matrix = 3 * 2 * 2 * 64 * 256  # one more d x d_ff matrix, forward + backward, in 2 layers
    assert chinchilla_flops_per_token(gated, 100, 32) - plain == pytest.approx(ffn_matrix)
    kv_saved = 3 * 2 * 2 * 2 * 64 * (64 - 16)  # keys and values 16 wide instead of 64, in 2 layers
    assert plain - chinchilla_flops_per_token(grouped, 100, 32) == pytest.approx(kv_saved)


def test_families_the_formulas_do_not_describe_have_no_count() -> None:
    cfg = Seq2SeqConfig(d_model=32, n_layers=1, n_decoder_layers=1, n_heads=2, vocab_size=50)
    cfg.pos = pos_config("sinusoidal")
    assert flop_counts(build_model(cfg), 16) is None


def test_the_chinchilla_count_follows_the_layout() -> None:
    """A sliding layer scores at most attn_window keys a query; a mixed layout counts each layer as its
    kind, so half sliding and half full sits halfway between all-full and all-sliding."""
    base = GPTConfig(vocab_size=100, d_model=64, n_layers=4, n_heads=4)
    full = chinchilla_flops_per_token(base, 100, 256)
    sliding = chinchilla_flops_per_token(replace(base, attn_window=32), 100, 256)
    mixed = chinchilla_flops_per_token(replace(base, attn_window=32, layout="sliding full ..."), 100, 256)
    assert sliding < full and mixed == (full + sliding) / 2
    gated = chinchilla_flops_per_token(replace(base, attn_gate="elementwise"), 100, 256)
    assert gated - full == 3 * 4 * 2 * 256 * 64 * 64 / 256  # x3 (backward), 4 layers, the d x d gate
