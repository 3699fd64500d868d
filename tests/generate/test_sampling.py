"""Logit processors against hand-computed values."""

from __future__ import annotations

import math

import torch

from attnlab.generate.sampling import next_token, penalize_repetition, top_k_filter, top_p_filter

NEG = float("-inf")


def test_top_k_keeps_the_k_largest() -> None:
    logits = torch.tensor([[1.0, 4.0, 3.0, 2.0]])
    assert top_k_filter(logits, 2).tolist() == [[NEG, 4.0, 3.0, NEG]]
    assert top_k_filter(logits, 9).tolist() == logits.tolist()


def test_top_p_keeps_the_smallest_set_reaching_p() -> None:
    logits = torch.tensor([[0.5, 0.05, 0.3, 0.15]]).log()
    kept = lambda p: torch.isfinite(top_p_filter(logits, p)).tolist()  # noqa: E731
    assert kept(0.7) == [[True, False, True, False]]  # 0.5 < 0.7, 0.5 + 0.3 reaches it
    assert kept(0.5) == [[True, False, False, False]]
    assert kept(0.81) == [[True, False, True, True]]
    assert kept(0.01) == [[True, False, False, False]]  # the top token always stays


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits() -> None:
    logits = torch.tensor([[2.0, -1.0, 3.0]])
    seen = torch.tensor([[True, True, False]])
    assert penalize_repetition(logits, seen, 2.0).tolist() == [[1.0, -2.0, 3.0]]


def test_sampling_follows_the_softmax() -> None:
    logits = torch.tensor([[0.0, math.log(3.0)]]).expand(4000, -1)
    draws = next_token(
        logits, temperature=1.0, top_k=None, top_p=None, generator=torch.Generator().manual_seed(0)
    )
    assert abs(draws.float().mean().item() - 0.75) < 0.03
    assert next_token(logits, temperature=0, top_k=None, top_p=None, generator=None).unique().tolist() == [1]
