"""Tiny models for the generation tests: random untied weights, init wide enough that argmax is decisive."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch

from attnlab.models import build_model
from attnlab.schema.model import ModelConfig, PosConfig

VOCAB = 41


def build(family: str, pos: str = "learned", **overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = ModelConfig(
        family=family,
        vocab_size=VOCAB,
        d_model=32,
        n_layers=2,
        n_heads=4,
        max_seq_len=64,
        dropout=0.0,
        init_std=0.2,
        tie_embeddings=False,
        pos=PosConfig(name=pos, num_buckets=8, max_distance=16),
        **overrides,
    )
    return build_model(cfg).eval()


@pytest.fixture
def make_model() -> Callable[..., torch.nn.Module]:
    return build


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny models gain nothing from more threads, and lose much when other processes share the cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
