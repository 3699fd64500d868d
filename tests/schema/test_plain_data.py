"""``plain``: a config as plain data read straight from its fields is what OmegaConf's conversion gives,
for every class of every group (all the field types there are) and a composed run, and OmegaConf's own
answer where a value would be converted."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from attnlab.run.configs import register_schemas
from attnlab.run.presets import config_dir
from attnlab.schema.checks import validate
from attnlab.schema.commands import CompressCommand, ExplainCommand, ExportCommand, SampleCommand
from attnlab.schema.eval import EvalConfig
from attnlab.schema.load import UNIONS, plain, plain_by_omegaconf
from attnlab.schema.model import MODELS
from attnlab.schema.plain_data import Unusual, plain_fields
from attnlab.schema.pos import POSITIONS
from attnlab.schema.run import RunConfig

COMMANDS = [EvalConfig, SampleCommand, ExplainCommand, CompressCommand, ExportCommand]


@functools.cache
def composed_run() -> RunConfig:
    """``attnlab-train``'s run config, as composing and validating leave it (enum fields as strings)."""
    register_schemas()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        return validate(compose("train", overrides=["model=gpt-tiny", "logger=wandb"]))


def every_group_class() -> list[tuple[str, object]]:
    """(group, an instance of each class of a tagged group, defaults only; a model with each encoding)."""
    configs = []
    for union in UNIONS:
        for schema in union.schemas.values():
            if union is MODELS:
                configs += [("model", schema(pos=pos())) for pos in POSITIONS.schemas.values()]
            else:
                configs.append((union.group.rpartition(".")[2], schema()))
    return configs


def test_a_composed_run_and_every_class_of_every_group_are_read_as_omegaconf_converts_them() -> None:
    run = composed_run()
    assert plain_fields(run) == plain_by_omegaconf(run)  # the fields read, not OmegaConf's fallback
    for group, config in every_group_class():
        if group == "pos":
            continue  # inside each model
        with_it = dataclasses.replace(run, **{group: config})
        assert plain_fields(with_it) == plain_by_omegaconf(with_it), type(config).__name__


@pytest.mark.parametrize("command", COMMANDS, ids=[c.__name__ for c in COMMANDS])
def test_each_commands_defaults_are_read_as_omegaconf_converts_them(command: type) -> None:
    config = command()
    assert plain(config) == plain_by_omegaconf(config)


def test_a_value_that_omegaconf_converts_is_left_to_it() -> None:
    """An int in a float field becomes a float, a path a string: OmegaConf's answer, not a copy."""
    run = composed_run()
    with_int = dataclasses.replace(run, optim=dataclasses.replace(run.optim, lr=1))
    with pytest.raises(Unusual, match="1 in a float field"):
        plain_fields(with_int)
    assert type(plain(with_int)["optim"]["lr"]) is float
    assert plain(with_int) == plain_by_omegaconf(with_int)
    with_path = dataclasses.replace(run, run_dir=Path("runs/a"))
    assert plain(with_path) == plain_by_omegaconf(with_path)
