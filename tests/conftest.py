"""Suite-wide settings: nothing downloads, wandb stays offline, results are seeded; tiny models of every
family (``make_model``, which tests/tasks and tests/generate define for themselves)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tiny test models gain nothing from intra-op threads, and on a busy 2-core machine OpenMP's
# spinning threads make them up to 100x slower; subprocesses (DDP ranks, CLI runs) inherit this.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch

from attnlab.models import build_model
from attnlab.schema.model import ModelConfig, PosConfig

torch.set_num_threads(1)
VOCAB = 23


@pytest.fixture(autouse=True)
def seeded() -> None:
    """Seed torch before every test, so random models and inputs are the same on every run and in any order."""
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def no_inherited_wandb_service() -> Iterator[None]:
    """An in-process wandb run exports WANDB_SERVICE; commands started by later tests must not share it."""
    yield
    os.environ.pop("WANDB_SERVICE", None)


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
