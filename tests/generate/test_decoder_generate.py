"""Decoder-only generation: cache vs no cache, left padding, sampling controls, stop tokens, errors."""

from __future__ import annotations

import pytest
import torch

from attnlab.generate import generate
from attnlab.schema.pos import PosName

# Random untied weights and an init wide enough that argmax is decisive (the root tiny_model's init).
GENERATOR = dict(vocab_size=41, d_model=32, max_seq_len=64, tie_embeddings=False)

PROMPTS = [[5, 9, 2, 7, 1, 3], [4], [8, 8, 3]]


@pytest.mark.parametrize("window", [None, 4], ids=["full", "window4"])
@pytest.mark.parametrize("pos", list(PosName))
def test_greedy_with_cache_equals_without_cache(tiny_model, pos: str, window: int | None) -> None:
    """Left-padded prompts; with a window the cache keeps 4 keys while 20 tokens are generated."""
    model = tiny_model("gpt", pos, attn_window=window, **GENERATOR)
    cached = generate(model, PROMPTS, max_new_tokens=20, temperature=0)
    uncached = generate(model, PROMPTS, max_new_tokens=20, temperature=0, use_cache=False)
    assert cached == uncached
    assert all(len(row) == 20 for row in cached)


@pytest.mark.parametrize("window", [None, 4], ids=["full", "window4"])
@pytest.mark.parametrize("pos", list(PosName))
def test_sampling_with_cache_equals_without_cache(tiny_model, pos: str, window: int | None) -> None:
    """Sampled sequences wander more than greedy ones, so they exercise more cache states."""
    model = tiny_model("gpt", pos, attn_window=window, **GENERATOR)
    kwargs = dict(max_new_tokens=20, temperature=1.0, seed=0, repetition_penalty=1.3)
    assert generate(model, PROMPTS, **kwargs) == generate(model, PROMPTS, use_cache=False, **kwargs)


def test_greedy_cache_with_grouped_query_heads(tiny_model) -> None:
    model = tiny_model("gpt", "rope", n_kv_heads=2, **GENERATOR)
    prompt = torch.tensor([[1, 2, 3, 4]])
    assert generate(model, prompt, max_new_tokens=12, temperature=0) == generate(
        model, prompt, max_new_tokens=12, temperature=0, use_cache=False
    )


@pytest.mark.parametrize("pos", list(PosName))
def test_left_padded_batch_equals_one_prompt_at_a_time(tiny_model, pos: str) -> None:
    model = tiny_model("gpt", pos, **GENERATOR)
    kwargs = dict(max_new_tokens=15, temperature=0, repetition_penalty=3.0, pad_id=3)
    batched = generate(model, PROMPTS, **kwargs)
    single = [generate(model, [p], **kwargs)[0] for p in PROMPTS]
    assert batched == single
    assert all(len(set(row)) > 5 for row in batched)  # the penalty keeps the sequences from looping


def test_tensor_prompts_with_left_padding_mask_equal_lists(tiny_model) -> None:
    model = tiny_model("gpt", "alibi", **GENERATOR)
    ids = torch.tensor([[0, 0, 4, 6], [1, 2, 3, 4]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert generate(model, ids, attention_mask=mask, max_new_tokens=8, temperature=0) == generate(
        model, [[4, 6], [1, 2, 3, 4]], max_new_tokens=8, temperature=0
    )


def test_top_k_one_sampling_equals_greedy(tiny_model) -> None:
    model = tiny_model("gpt", "rope", **GENERATOR)
    greedy = generate(model, PROMPTS, max_new_tokens=15, temperature=0)
    sampled = generate(model, PROMPTS, max_new_tokens=15, temperature=1.5, top_k=1, seed=3)
    assert sampled == greedy


def test_seed_makes_sampling_reproducible(tiny_model) -> None:
    model = tiny_model("gpt", "learned", **GENERATOR)
    kwargs = dict(max_new_tokens=20, temperature=2.0, num_samples=2)
    first = generate(model, PROMPTS, seed=7, **kwargs)
    assert first == generate(model, PROMPTS, seed=7, **kwargs)
    assert first != generate(model, PROMPTS, seed=8, **kwargs)
    assert first[0] != first[1]  # two samples of one prompt differ


def test_num_samples_rows_are_prompt_major(tiny_model) -> None:
    model = tiny_model("gpt", "sinusoidal", **GENERATOR)
    greedy = generate(model, PROMPTS, max_new_tokens=6, temperature=0)
    repeated = generate(model, PROMPTS, max_new_tokens=6, temperature=0, num_samples=3)
    assert repeated == [row for row in greedy for _ in range(3)]


def test_stop_tokens_end_each_row_at_its_first_stop(tiny_model) -> None:
    model = tiny_model("gpt", "rope", **GENERATOR)
    free = generate(model, PROMPTS, max_new_tokens=20, temperature=0)
    stop = free[0][4]
    stopped = generate(model, PROMPTS, max_new_tokens=20, temperature=0, stop_tokens=[stop])
    for row, full in zip(stopped, free):
        assert row == (full[: full.index(stop)] if stop in full else full)
    assert stop not in stopped[0]


def test_top_p_and_repetition_penalty_change_nothing_at_their_neutral_values(tiny_model) -> None:
    model = tiny_model("gpt", "rope", **GENERATOR)
    base = generate(model, PROMPTS, max_new_tokens=10, temperature=0.9, seed=1)
    assert base == generate(model, PROMPTS, max_new_tokens=10, temperature=0.9, seed=1, top_p=1.0)
    assert base == generate(
        model, PROMPTS, max_new_tokens=10, temperature=0.9, seed=1, repetition_penalty=1.0
    )


def test_generation_leaves_the_training_flag_alone(tiny_model) -> None:
    model = tiny_model("gpt", **GENERATOR).train()
    generate(model, [[1, 2]], max_new_tokens=2)
    assert model.training


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -1.0}, "temperature=-1.0 must be >= 0"),
        ({"top_k": 0}, "top_k=0 must be a positive integer"),
        ({"top_p": 1.5}, r"top_p=1.5 must be in \(0, 1\]"),
        ({"repetition_penalty": 0.0}, "repetition_penalty=0.0 must be > 0"),
        ({"num_samples": 0}, "num_samples=0 must be at least 1"),
        ({"max_new_tokens": 0}, "max_new_tokens=0 must be at least 1"),
        ({"max_new_tokens": 70}, "exceeds model.max_seq_len=64"),
    ],
)
def test_bad_arguments_are_named(tiny_model, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        generate(tiny_model("gpt", **GENERATOR), [[1, 2, 3]], **kwargs)


def test_bad_prompts_and_models_are_named(tiny_model) -> None:
    gpt = tiny_model("gpt", **GENERATOR)
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        generate(gpt, [[1], []])
    with pytest.raises(ValueError, match="attention_mask must describe left padding"):
        generate(gpt, torch.tensor([[1, 2]]), attention_mask=torch.tensor([[1, 0]]))
    with pytest.raises(ValueError, match=r"needs a decoder-only model .*got 'seq2seq'"):
        generate(tiny_model("seq2seq", **GENERATOR), [[1, 2]])


def test_prompts_are_padded_on_the_left_and_sources_on_the_right():
    from attnlab.generate import pad_batch

    ids, mask = pad_batch([[5, 6, 7], [8]], 0, left=True)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    ids, mask = pad_batch([[5, 6, 7], [8]], 9, left=False)
    assert ids.tolist() == [[5, 6, 7], [8, 9, 9]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    with pytest.raises(ValueError, match="prompt 1 is empty: it needs at least one token"):
        pad_batch([[1], []], 0, left=True, what="prompt")


def test_a_windowed_cache_reserves_twice_the_window_not_the_whole_length(tiny_model) -> None:
    """generate reserves its whole length in the cache, except under a sliding window, whose cache keeps
    only the window's last keys: its memory must not grow with the number of tokens generated."""
    full, windowed = (
        tiny_model("gpt", "rope", **GENERATOR),
        tiny_model("gpt", "rope", attn_window=4, **GENERATOR),
    )
    assert [c.reserve for c in full.new_cache(reserve=1000).self_attn] == [1000] * len(full.stack.layers)
    cache = windowed.new_cache(reserve=1000)
    assert {c.reserve for c in cache.self_attn} == {8}
    prompt = torch.tensor([[1, 2, 3]])
    windowed(prompt, cache=cache)
    for t in range(3, 30):
        windowed(torch.tensor([[t % 20]]), positions=torch.tensor([t]), cache=cache)
    assert max(c.capacity for c in cache.self_attn) <= 2 * (4 + 1)
