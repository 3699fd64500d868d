"""Tiny models of every family for the explain tests, and one torch thread (tiny ops gain nothing from more)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch

from attnlab.config import ModelConfig, PosConfig
from attnlab.models import build_model

VOCAB = 23


def build(family: str, pos: str = "learned", **overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    settings = dict(
        family=family,
        vocab_size=VOCAB,
        d_model=16,
        n_layers=2,
        n_heads=4,
        max_seq_len=32,
        dropout=0.0,
        init_std=0.2,
        image_size=8,
        patch_size=2,
        channels=1,
        pos=PosConfig(name=pos),
    )
    settings.update(overrides)
    if family == "vit":
        settings.setdefault("num_classes", 3)
    return build_model(ModelConfig(**settings)).eval()


@pytest.fixture
def make_model() -> Callable[..., torch.nn.Module]:
    return build


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
