"""Tiny models shared by the task tests: two layers of width 16, no dropout, seeded."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab.models import build_model
from attnlab.schema.model import ModelConfig

VOCAB = 16


def tiny_config(family: str, **overrides: object) -> ModelConfig:
    cfg = ModelConfig(
        family=family,
        vocab_size=VOCAB,
        d_model=16,
        n_layers=2,
        n_heads=2,
        d_ff=32,
        dropout=0.0,
        max_seq_len=32,
        image_size=8,
        patch_size=4,
        channels=3,
    )
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


def tiny_model(family: str, **overrides: object) -> nn.Module:
    torch.manual_seed(0)
    return build_model(tiny_config(family, **overrides))


@pytest.fixture
def make_model():
    """``make_model(family, **overrides)``: a seeded tiny model of ``family``."""
    return tiny_model


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models gain nothing from a second thread, and on a shared machine it costs waiting."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
