"""A sample longer than the trained context: chunks of ``generate`` that restart from the last half window."""

from __future__ import annotations

import torch

from attnlab.generate import generate, sample_in_windows

GENERATOR = dict(vocab_size=41, d_model=32, max_seq_len=64, tie_embeddings=False)


def test_each_chunk_continues_the_last_half_window_greedily(tiny_model) -> None:
    """window 8, prompt 3, 10 new tokens: chunks of 5 (from the prompt), 4 and 1 (from 4 tokens each)."""
    model = tiny_model("gpt", "rope", **GENERATOR)
    prompt = [5, 9, 2]
    ids = sample_in_windows(
        model, prompt, window=8, max_new_tokens=10, temperature=0, top_k=None, generator=torch.Generator()
    )
    assert len(ids) == 13
    assert ids[:8] == prompt + generate(model, [prompt], max_new_tokens=5, temperature=0)[0]
    assert ids[8:12] == generate(model, [ids[4:8]], max_new_tokens=4, temperature=0)[0]
    assert ids[12:] == generate(model, [ids[8:12]], max_new_tokens=1, temperature=0)[0]


def test_a_long_prompt_is_cropped_to_half_the_window(tiny_model) -> None:
    model = tiny_model("gpt", "rope", **GENERATOR)
    prompt = list(range(1, 21))
    ids = sample_in_windows(
        model, prompt, window=8, max_new_tokens=3, temperature=0, top_k=None, generator=torch.Generator()
    )
    assert ids[:4] == prompt[-4:]
    assert ids[4:] == generate(model, [prompt[-4:]], max_new_tokens=3, temperature=0)[0]


def test_a_seeded_generator_gives_the_same_sample_twice(tiny_model) -> None:
    model = tiny_model("gpt", "rope", **GENERATOR)

    def sample(seed: int) -> list[int]:
        g = torch.Generator().manual_seed(seed)
        return sample_in_windows(
            model, [1, 2], window=6, max_new_tokens=12, temperature=1.0, top_k=5, generator=g
        )

    assert sample(0) == sample(0)
    assert sample(0) != sample(1)
