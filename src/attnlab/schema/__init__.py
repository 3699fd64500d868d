"""Typed, torch-free schemas of every config, and their validation: the bottom layer of attnlab.

``model``, ``data``, ``task`` and ``run`` hold the dataclasses of the config groups, ``commands`` those
of the commands that read a checkpoint, ``checks`` the rules between fields, ``typed`` the merge of a
composed DictConfig into a dataclass, ``rundir`` the file names of a run directory. Importing it loads
neither torch nor Lightning nor Hydra, so a bad config is refused in a fraction of a second.
"""

from attnlab.schema.checks import check_model, check_run, validate
from attnlab.schema.commands import ExplainCommand, SampleCommand
from attnlab.schema.data import DataConfig
from attnlab.schema.errors import ConfigError
from attnlab.schema.model import ModelConfig, PosConfig
from attnlab.schema.run import (
    CheckpointConfig,
    EvalConfig,
    LoggerConfig,
    RunConfig,
    SampleConfig,
    TrainerConfig,
)
from attnlab.schema.task import OptimConfig, TaskConfig
from attnlab.schema.typed import typed

__all__ = [
    "CheckpointConfig",
    "ConfigError",
    "DataConfig",
    "EvalConfig",
    "ExplainCommand",
    "LoggerConfig",
    "ModelConfig",
    "OptimConfig",
    "PosConfig",
    "RunConfig",
    "SampleCommand",
    "SampleConfig",
    "TaskConfig",
    "TrainerConfig",
    "check_model",
    "check_run",
    "typed",
    "validate",
]
