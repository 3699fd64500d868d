"""Shared fixtures of the data tests: offline, small, everything written under tmp_path."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest

from attnlab.data import build_datamodule
from attnlab.schema.data import SourcedData, data_config
from attnlab.schema.model import model_config
from attnlab.schema.task import task_config

FAMILY_TASK = {
    "text": ("gpt", "causal_lm"),
    "listops": ("bert", "classification"),
    "text_classification": ("bert", "classification"),
    "pairs": ("seq2seq", "seq2seq"),
    "dates": ("seq2seq", "seq2seq"),
    "numbers": ("seq2seq", "seq2seq"),
    "reverse": ("seq2seq", "seq2seq"),
    "copy": ("gpt", "causal_lm"),
    "passkey": ("gpt", "causal_lm"),
    "recall": ("gpt", "causal_lm"),
    "addition": ("gpt", "causal_lm"),
    "repeated_segments": ("gpt", "causal_lm"),
    "digits": ("vit", "classification"),
    "images": ("vit", "classification"),
    "tokens": ("gpt", "causal_lm"),
}


@pytest.fixture
def make_dm(tmp_path):
    """``make_dm(kind, task=None, model=None, **data_fields)``: a data module, set up."""

    def make(kind: str, *, task: str | None = None, model: dict | None = None, setup: bool = True, **fields):
        family, default_task = FAMILY_TASK[kind]
        if task == "mlm":
            family = "bert"
        cfg = data_config(kind, **fields)
        if isinstance(cfg, SourcedData) and cfg.cache_dir is None:
            cfg.cache_dir = str(tmp_path / "hf_cache")
        dm = build_datamodule(
            cfg,
            needs=task_config(task or default_task).data_needs,
            seed=0,
            model_cfg=model_config(family, **(model or {})),
        )
        if setup:
            dm.setup("fit")
        return dm

    return make
