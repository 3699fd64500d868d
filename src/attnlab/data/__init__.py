"""Data: tokenizers, loaders and Lightning DataModules, chosen by the ``data`` config group.

Importing this package does not import torch: the schema and the compatibility table are needed
for validation before anything heavy is loaded; ``build_datamodule`` imports the rest lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnlab.data.schema import (
    ACCEPTED_KINDS,
    DATA_KINDS,
    DataConfig,
    check_compatible,
    compatible,
    default_kind,
    validate_data_config,
)

if TYPE_CHECKING:
    from attnlab.config import ModelConfig
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
    import importlib

    validate_data_config(cfg)
    check_compatible(family, task, cfg.kind)
    module_name, class_name = MODULES[cfg.kind].split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(cfg, seed=seed, model_cfg=model_cfg, task=task)


def load_tokenizer(path: str):
    """The tokenizer saved in a run directory (or at a tokenizer.json path)."""
    from attnlab.data.tokenizers import load_tokenizer as _load

    return _load(path)


__all__ = [
    "ACCEPTED_KINDS",
    "DATA_KINDS",
    "MODULES",
    "DataConfig",
    "build_datamodule",
    "check_compatible",
    "compatible",
    "default_kind",
    "load_tokenizer",
    "validate_data_config",
]
