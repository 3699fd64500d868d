"""Suite-wide settings: nothing downloads, wandb stays offline, results are seeded; ``tiny_model``, the
one factory of tiny models of every family."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# wandb.init lists every installed package for the run (0.45 CPU-s each time); no test reads that list
os.environ.setdefault("WANDB__SAVE_REQUIREMENTS", "false")
# Tiny test models gain nothing from intra-op threads, and on a busy 2-core machine OpenMP's
# spinning threads make them up to 100x slower; subprocesses (DDP ranks, CLI runs) inherit this.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch
from filelock import FileLock

import processes
from attnlab.models import build_model
from attnlab.schema.model import MODELS, Family, Seq2SeqConfig, TokenModelConfig, ViTConfig
from attnlab.schema.pos import PosConfig, pos_config

torch.set_num_threads(1)
TINY = dict(d_model=16, n_layers=2, n_heads=4, dropout=0.0, init_std=0.2)  # every family; a wide init
TINY_TOKENS = dict(vocab_size=23, max_seq_len=32)  # the families that read tokens
TINY_IMAGES = dict(image_size=8, patch_size=2, channels=1, num_classes=3)  # 4x4 grey patches, 3 classes


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
    """The test that runs now (fixtures included), for ``processes`` to check its process-contract marker."""
    with processes.running(item):
        return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every collected test's process-contract kind, before ``-m``/``-k`` deselect any (``processes``)."""
    processes.collected(items)


@pytest.fixture(autouse=True)
def seeded() -> None:
    """Seed torch before every test, so random models and inputs are the same on every run and in any order."""
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def no_inherited_wandb_service() -> Iterator[None]:
    """An in-process wandb run exports WANDB_SERVICE; commands started by later tests must not share it."""
    yield
    os.environ.pop("WANDB_SERVICE", None)


def tiny(family: str, pos: str | PosConfig = "learned", **overrides: object) -> torch.nn.Module:
    """A seeded tiny model of ``family`` in eval mode, built from its schema class: the TINY sizes where
    the family has such fields, then ``pos`` (a name, or a PosConfig with its settings) and ``overrides``."""
    schema = MODELS.schemas[Family(family)]
    settings = dict(TINY)
    if issubclass(schema, TokenModelConfig):
        settings.update(TINY_TOKENS)
    if issubclass(schema, Seq2SeqConfig):
        settings.update(n_decoder_layers=None)  # as deep as the encoder
    if issubclass(schema, ViTConfig):
        settings.update(TINY_IMAGES)
    settings["pos"] = pos_config(pos) if isinstance(pos, str) else pos
    torch.manual_seed(0)
    return build_model(schema(**{**settings, **overrides})).eval()


@pytest.fixture(scope="session")
def tiny_model() -> Callable[..., torch.nn.Module]:
    """``tiny_model(family, pos="learned", **overrides)``: see ``tiny``."""
    return tiny


@pytest.fixture
def fresh_compiler() -> None:
    """Dynamo without the graphs that earlier tests of this process compiled, for a test of the compiled
    FlexAttention kernel. A compiled function that meets a second shape recompiles it with dynamic
    sizes, and torch 2.13's CPU flex kernel for a dynamic sequence length can fail to build (g++:
    ``cur_kvSplitSize2`` was not declared; test_attention_hooks' soft-capping case at 12 tokens, then
    test_flex's compiled ones at 9), so such a test would pass or fail by which test its worker ran
    before it."""
    torch.compiler.reset()


@pytest.fixture(scope="session")
def built_once(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Callable[..., Path]:
    """``built_once(name, build)``: the directory ``name``, filled by ``build(directory)`` once per test
    session and shared by every pytest-xdist worker (a module-scoped fixture runs again on each worker
    that gets one of its module's tests: an expensive training run twice). A file lock makes the other
    workers wait for the first; a build that failed leaves no marker, so the next caller builds again
    (and fails the same way, in its own test)."""
    root = tmp_path_factory.getbasetemp()
    if worker_id != "master":  # every worker's base is a child of this session's directory
        root = root.parent

    def build_once(name: str, build: Callable[[Path], None]) -> Path:
        directory = root / f"built-once-{name}"
        with FileLock(f"{directory}.lock"):
            if not (directory / ".complete").exists():
                shutil.rmtree(directory, ignore_errors=True)
                directory.mkdir()
                build(directory)
                (directory / ".complete").touch()
        return directory

    return build_once
