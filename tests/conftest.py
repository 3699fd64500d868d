"""Suite-wide settings: nothing downloads, wandb stays offline, results are seeded."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch


@pytest.fixture(autouse=True)
def seeded() -> None:
    """Seed torch before every test, so random models and inputs are the same on every run and in any order."""
    torch.manual_seed(0)
