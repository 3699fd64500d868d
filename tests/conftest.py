"""Suite-wide settings: nothing downloads, wandb stays offline, results are seeded."""

from __future__ import annotations

import os
from collections.abc import Iterator

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

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def seeded() -> None:
    """Seed torch before every test, so random models and inputs are the same on every run and in any order."""
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def no_inherited_wandb_service() -> Iterator[None]:
    """An in-process wandb run exports WANDB_SERVICE; commands started by later tests must not share it."""
    yield
    os.environ.pop("WANDB_SERVICE", None)
