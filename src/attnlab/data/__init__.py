"""Data: tokenizers, loaders and Lightning DataModules, chosen by the ``data`` config group.

Importing this package does not import torch; ``build_datamodule`` imports the module of the chosen
kind on use (each kind's schema class names it: ``DataConfig.module``). A data module learns what
the task needs from a ``DataNeeds`` (the task schema's ``data_needs``), never the task's name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from attnlab.schema.data import DATA, DataConfig, DataNeeds, TextData
from attnlab.schema.model import ModelConfig

if TYPE_CHECKING:
    from attnlab.data.module import AttnlabDataModule


def modules() -> dict[str, str]:
    """data.kind -> the "module:class" of its data module, imported on use."""
    return {kind: schema.module for kind, schema in DATA.schemas.items()}


def build_datamodule(
    cfg: DataConfig, *, needs: DataNeeds, seed: int, model_cfg: ModelConfig
) -> AttnlabDataModule:
    """The DataModule of ``cfg.kind`` for a task that ``needs`` what it says (``TaskConfig.data_needs``),
    feeding a model of config ``model_cfg``. That the model's family reads this kind for this task is
    checked between the groups (``attnlab.schema.checks.check_compatible``).

    Call ``setup()`` on it to build the datasets and read ``tokenizer``, ``vocab_size``,
    ``num_classes`` and ``pad_id`` (e.g. to size the model); the Trainer's own ``setup`` call is
    then a no-op. Build the Trainer with ``use_distributed_sampler=False``: the module shards ranks.
    """
    cfg.check()
    chosen = type(cfg).module
    if isinstance(cfg, TextData) and cfg.packing != "none":  # text as separate documents (data.packing)
        chosen = "attnlab.data.packing:DocumentDataModule"
    module_name, class_name = chosen.split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(cfg, seed=seed, model_cfg=model_cfg, needs=needs)


def load_tokenizer(path: str):
    """The tokenizer saved in a run directory (or at a tokenizer.json path)."""
    from attnlab.data.tokenizers import load_tokenizer as _load

    return _load(path)


def check_source(cfg: DataConfig, model_cfg: ModelConfig | None = None) -> None:
    """The cheap checks of the data a run names, for the commands' validation (before a run directory
    exists): see ``attnlab.data.checks.check_source``. Imports neither torch nor ``datasets``."""
    from attnlab.data.checks import check_source as _check

    _check(cfg, model_cfg)


__all__ = ["build_datamodule", "check_source", "load_tokenizer", "modules"]
