"""Lightning task modules: causal LM, masked LM, seq2seq and classification, with AdamW schedules.

Importing this package is torch-free (the schemas are validated before heavy imports); the
names below that need torch and Lightning are imported on first access.
"""

from __future__ import annotations

import importlib
from typing import Any

from attnlab.tasks.schema import (
    DEFAULT_TASKS,
    SCHEDULES,
    TASK_FAMILIES,
    TASKS,
    OptimConfig,
    TaskConfig,
    validate_optim_config,
    validate_task_config,
)

_LAZY = {
    "build_task": "attnlab.tasks.build",
    "load_task_from_checkpoint": "attnlab.tasks.build",
    "TaskModule": "attnlab.tasks.base",
    "CausalLMTask": "attnlab.tasks.causal_lm",
    "MaskedLMTask": "attnlab.tasks.mlm",
    "Seq2SeqTask": "attnlab.tasks.seq2seq",
    "ClassificationTask": "attnlab.tasks.classification",
    "ThroughputLogger": "attnlab.tasks.callbacks",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'attnlab.tasks' has no attribute {name!r}")


__all__ = [
    "DEFAULT_TASKS",
    "SCHEDULES",
    "TASKS",
    "TASK_FAMILIES",
    "OptimConfig",
    "TaskConfig",
    "validate_optim_config",
    "validate_task_config",
    *_LAZY,
]
