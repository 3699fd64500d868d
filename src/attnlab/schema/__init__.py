"""Typed, torch-free schemas of every config, and their rules: the bottom layer of attnlab.

``model`` (and ``pos``), ``data`` and ``task`` hold one dataclass per choice of a config group, picked
by a tag (``model.family``, ``model.pos.name``, ``data.kind``, ``task.name``, ``optim.name``); ``run``
the trainer, loggers and the run as a whole; ``commands`` the commands that read a checkpoint. Each
class's ``check`` holds its group's rules, ``checks`` the rules between groups; ``load`` turns composed
and saved configs into these dataclasses and back; ``rundir`` names the files of a run directory.
Importing it loads neither torch nor Lightning nor Hydra, so a bad config is refused in a fraction of
a second.
"""

from attnlab.schema.checks import check_run, validate
from attnlab.schema.commands import (
    CompressCommand,
    CompressMethod,
    ExplainCommand,
    ExportCommand,
    ExportFormat,
    SampleCommand,
)
from attnlab.schema.data import DATA, DataConfig, DataKind, data_config
from attnlab.schema.errors import ConfigError
from attnlab.schema.eval import EvalConfig
from attnlab.schema.image_data import ImageData  # its kinds join DATA
from attnlab.schema.load import plain, read_run_config, to_object
from attnlab.schema.model import MODELS, Family, ModelConfig, model_config
from attnlab.schema.optim import OPTIMIZERS, OptimConfig
from attnlab.schema.pos import POSITIONS, PosConfig, PosName, pos_config
from attnlab.schema.run import CheckpointConfig, LoggerConfig, RunConfig, SampleConfig, TrainerConfig
from attnlab.schema.synthetic_data import SyntheticData  # its kinds join DATA
from attnlab.schema.task import TASKS, TaskConfig
from attnlab.schema.token_data import TokensData  # its kind joins DATA

__all__ = [
    "DATA",
    "MODELS",
    "OPTIMIZERS",
    "POSITIONS",
    "TASKS",
    "CheckpointConfig",
    "CompressCommand",
    "CompressMethod",
    "ConfigError",
    "DataConfig",
    "DataKind",
    "EvalConfig",
    "ExplainCommand",
    "ExportCommand",
    "ExportFormat",
    "Family",
    "ImageData",
    "LoggerConfig",
    "ModelConfig",
    "OptimConfig",
    "PosConfig",
    "PosName",
    "RunConfig",
    "SampleCommand",
    "SampleConfig",
    "SyntheticData",
    "TaskConfig",
    "TokensData",
    "TrainerConfig",
    "check_run",
    "data_config",
    "model_config",
    "plain",
    "pos_config",
    "read_run_config",
    "to_object",
    "validate",
]
