"""Compiled decoding with a static KV cache (``generate(..., compile=True)``): the eager path's
tokens for every positional encoding, grouped-query and multi-query heads, sliding windows, a
left-padded batch and a sliding context, from two graphs (the prompt's and one token's) however many
tokens are decoded.

On a cold cache each compiled graph costs seconds of inductor and one g++ run (~1 CPU-s) per distinct
C++ kernel; inductor keys its kernels by their source, into which it bakes the shapes
(``dynamic=False``). So every compiled case decodes the same batch to the same length (``PROMPTS``,
``NEW_TOKENS``), the cases that repeat a model reuse its graphs (sampling, the graph count) or most of
its kernels (the sliding context), and the head and window settings ride on the encodings' cases rather than on models of
their own: grouped-query and multi-query heads are one code path (each key/value head serves
``n_heads // n_kv_heads`` query heads), and a window is one more rule of the attention mask, alike
for every encoding."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from attnlab.generate import generate
from attnlab.schema.pos import PosName

GENERATOR = dict(vocab_size=41, d_model=32, max_seq_len=96, tie_embeddings=False)
PROMPTS = [[5, 9, 2, 7, 1, 3], [4], [8, 8, 3]]  # three lengths: a left-padded batch
NEW_TOKENS = 24  # one cache length (6 + 24 columns) for every case of the shapes above
ATTENTION = {  # encoding -> the heads and window its compiled case runs with (4 query heads)
    PosName.none: {},
    PosName.sinusoidal: {},
    PosName.learned: {},  # the plain model of the sampling, graph-count and sliding-context cases
    PosName.rope: dict(n_kv_heads=2, attn_window=5),  # grouped-query heads, a window: rotated keys
    PosName.alibi: dict(n_kv_heads=1, attn_window=3),  # multi-query heads, a window shorter than the padding
    PosName.relative: dict(n_kv_heads=2),  # T5's bucketed bias over grouped heads
}


@pytest.mark.parametrize("pos", list(PosName))
def test_compiled_greedy_equals_eager_for_every_encoding(tiny_model, pos: PosName) -> None:
    """Each encoding once, with the heads and window of ``ATTENTION``: rope and alibi place their
    positions on cached keys or scores, so their windows also slide past the left padding (row 1 has 5
    padded columns; alibi's window of 3 sees none of them once it moves on)."""
    model = tiny_model("gpt", pos, **GENERATOR, **ATTENTION[pos])
    eager = generate(model, PROMPTS, max_new_tokens=NEW_TOKENS, temperature=0)
    assert generate(model, PROMPTS, max_new_tokens=NEW_TOKENS, temperature=0, compile=True) == eager
    assert all(len(set(row)) > 1 for row in eager)  # not a constant sequence that any model would give


def test_compiled_sampling_with_penalty_and_stops_equals_eager(tiny_model) -> None:
    """The learned case's model and shapes: its graphs again (sampling runs outside them)."""
    model = tiny_model("gpt", "learned", **GENERATOR)
    kwargs = dict(max_new_tokens=NEW_TOKENS, temperature=1.0, seed=0, repetition_penalty=1.3, stop_tokens=[7])
    assert generate(model, PROMPTS, compile=True, **kwargs) == generate(model, PROMPTS, **kwargs)


def test_one_graph_for_the_prompt_and_one_for_every_token(tiny_model) -> None:
    """24 new tokens (23 steps) after a prompt: two graphs, and a second call of the same shapes
    compiles none. The shapes of the learned case above: dynamo traces anew after reset(), inductor's
    kernels come from its cache."""
    torch._dynamo.reset()
    model = tiny_model("gpt", "learned", **GENERATOR)
    before = counters["stats"]["unique_graphs"]  # dynamo's counters outlive reset(): count the growth
    first = generate(model, PROMPTS, max_new_tokens=NEW_TOKENS, temperature=0, compile=True)
    assert counters["stats"]["unique_graphs"] - before == 2, dict(counters["stats"])
    again = generate(model, PROMPTS, max_new_tokens=NEW_TOKENS, temperature=0, compile=True)
    assert counters["stats"]["unique_graphs"] - before == 2, dict(counters["stats"])
    assert first == again == generate(model, PROMPTS, max_new_tokens=NEW_TOKENS, temperature=0)


def test_compile_without_a_cache_is_refused(tiny_model) -> None:
    model = tiny_model("gpt", "rope", **GENERATOR)
    with pytest.raises(ValueError, match=r"compile=True .* use_cache=False"):
        generate(model, [[1, 2]], max_new_tokens=2, compile=True, use_cache=False)


def cropped_greedy(model, prompt: list[int], new: int, window: int) -> list[int]:
    """nanoGPT's sample.py: every token from the model run on the last ``window`` tokens, no cache."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(new):
            context = torch.tensor([ids[-window:]])
            ids.append(int(model(context)[0, -1].argmax()))
    return ids[len(prompt) :]


@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_a_sliding_context_crops_as_nanogpt_does(tiny_model, pos: str) -> None:
    """40 tokens from a model of max_seq_len 16: inside the context the cached path, then cropping."""
    model = tiny_model("gpt", pos, **{**GENERATOR, "max_seq_len": 16})
    prompt = [5, 9, 2, 7]
    slid = generate(model, [prompt], max_new_tokens=40, temperature=0, max_context=16)[0]
    assert slid == cropped_greedy(model, prompt, 40, 16)
    assert (
        slid[:12] == generate(model, [prompt], max_new_tokens=12, temperature=0)[0]
    )  # the exact cached path


def test_a_compiled_sliding_context_decodes_the_eager_tokens(tiny_model) -> None:
    """Compiled, the cached path inside the context runs on a static cache as long as the context,
    then cropping takes over as in the eager path (the cases above: nanoGPT's crop). A context of
    the learned case's 30 columns over its left-padded batch: its shapes, so its kernels but the few
    that read the mask and positions (here slices of longer rows, of other strides)."""
    model = tiny_model("gpt", "learned", **GENERATOR)
    context = len(PROMPTS[0]) + NEW_TOKENS
    slid = generate(model, PROMPTS, max_new_tokens=NEW_TOKENS + 12, temperature=0, max_context=context)
    compiled = generate(
        model, PROMPTS, max_new_tokens=NEW_TOKENS + 12, temperature=0, max_context=context, compile=True
    )
    assert compiled == slid
    unslid = generate(model, PROMPTS, max_new_tokens=NEW_TOKENS + 12, temperature=0)
    assert [row[:NEW_TOKENS] for row in slid] == [row[:NEW_TOKENS] for row in unslid]  # the cached path
    assert slid != unslid  # then the cropped context: other tokens


def test_a_prompt_longer_than_the_context_is_cropped_from_the_first_token(tiny_model) -> None:
    model = tiny_model("gpt", "learned", **{**GENERATOR, "max_seq_len": 16})
    prompt = list(range(1, 21))  # 20 tokens, the table holds 16
    assert generate(model, [prompt], max_new_tokens=6, temperature=0, max_context=16)[0] == cropped_greedy(
        model, prompt, 6, 16
    )


def test_learned_positions_past_their_table_point_to_max_context(tiny_model) -> None:
    model = tiny_model("gpt", "learned", **{**GENERATOR, "max_seq_len": 16})
    with pytest.raises(ValueError, match=r"exceeds model.max_seq_len=16.*max_context=16"):
        generate(model, [[1, 2, 3]], max_new_tokens=20)
    with pytest.raises(ValueError, match="max_context=17 must be between 1 and 16"):
        generate(model, [[1, 2, 3]], max_new_tokens=20, max_context=17)
