"""A command's config composed as its command line composes it (Hydra's compose API over attnlab's
``conf/`` and schemas), then typed: nothing runs and no directory is made."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from omegaconf import DictConfig

from attnlab.run.presets import config_dir
from attnlab.run.pretrained import explicit_model_keys, resolve_init_from
from attnlab.schema.checks import validate
from attnlab.schema.load import to_object
from attnlab.schema.run import RunConfig


def compose(command: str, overrides: Sequence[str] = ()) -> DictConfig:
    """The config of ``attnlab-<command> <overrides>`` (``train``, ``eval``, ``sample``, ``explain``,
    ``compress``, ``export``), without Hydra's own ``hydra`` node."""
    from attnlab.cli.hydra.app import register_schemas

    register_schemas()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        return hydra_compose(command, overrides=list(overrides))


def run_config(overrides: Sequence[str] = ()) -> RunConfig:
    """The validated run of ``attnlab-train <overrides>``: types, the rules between fields, and the
    pretrained model of ``model.init_from`` read; ConfigError naming the key where one is bad."""
    return resolve_init_from(validate(compose("train", overrides)), explicit_model_keys(list(overrides)))


def command_config(command: str, overrides: Sequence[str] = ()) -> Any:
    """The typed, checked config of a command that reads a checkpoint (``SampleCommand`` for
    ``sample``, ``ExplainCommand``, ``CompressCommand``, ``ExportCommand``)."""
    config = to_object(compose(command, overrides))
    if hasattr(config, "check"):
        config.check()
    return config
