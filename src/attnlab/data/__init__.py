"""Data: tokenizers, loaders and Lightning DataModules, chosen by the ``data`` config group.

Importing this package does not import torch; ``build_datamodule`` imports the module of the chosen
kind on use. The schema of the group and the family/task/kind table are in ``attnlab.schema.data``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from attnlab.schema.checks import check_compatible
from attnlab.schema.data import DataConfig
from attnlab.schema.model import ModelConfig

if TYPE_CHECKING:
    from attnlab.data.module import AttnlabDataModule

MODULES = {  # data.kind -> "module:class", imported on use
    "text": "attnlab.data.text:TextDataModule",
    "listops": "attnlab.data.classification:ListOpsDataModule",
    "text_classification": "attnlab.data.classification:TextClassificationDataModule",
    "pairs": "attnlab.data.pairs:PairsDataModule",
    "dates": "attnlab.data.pairs:PairsDataModule",
    "numbers": "attnlab.data.pairs:PairsDataModule",
    "reverse": "attnlab.data.pairs:PairsDataModule",
    "digits": "attnlab.data.images:ImageDataModule",
    "images": "attnlab.data.images:ImageDataModule",
}


def build_datamodule(
    cfg: DataConfig, *, family: str, task: str, seed: int, model_cfg: ModelConfig
) -> AttnlabDataModule:
    """The DataModule of ``cfg.kind`` for a ``family`` model trained on ``task``.

    Call ``setup()`` on it to build the datasets and read ``tokenizer``, ``vocab_size``,
    ``num_classes`` and ``pad_id`` (e.g. to size the model); the Trainer's own ``setup`` call is
    then a no-op. Build the Trainer with ``use_distributed_sampler=False``: the module shards ranks.
    """
    cfg.check()
    check_compatible(family, task, cfg.kind)
    chosen = MODULES[cfg.kind]
    if getattr(cfg, "packing", "none") != "none":  # text as separate documents (data.packing)
        chosen = "attnlab.data.packing:DocumentDataModule"
    module_name, class_name = chosen.split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(cfg, seed=seed, model_cfg=model_cfg, task=task)


def load_tokenizer(path: str):
    """The tokenizer saved in a run directory (or at a tokenizer.json path)."""
    from attnlab.data.tokenizers import load_tokenizer as _load

    return _load(path)


def check_source(cfg: DataConfig, model_cfg: ModelConfig | None = None) -> None:
    """The cheap checks of the data a run names, for the commands' validation (before a run directory
    exists): see ``attnlab.data.checks.check_source``. Imports neither torch nor ``datasets``."""
    from attnlab.data.checks import check_source as _check

    _check(cfg, model_cfg)


__all__ = ["MODULES", "build_datamodule", "check_source", "load_tokenizer"]
