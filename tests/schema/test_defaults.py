"""Defaults live only in the schema: ``attnlab-train`` with no overrides composes to the schema's
defaults, and no file in ``conf/`` restates a default (each preset holds only what it changes)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf

from attnlab.run.configs import COMMANDS, register_schemas
from attnlab.run.presets import config_dir
from attnlab.schema.eval import EvalConfig
from attnlab.schema.load import UNIONS, to_object
from attnlab.schema.pos import RelativePos, RopePos
from attnlab.schema.run import RUN_DIR, LoggerConfig, RunConfig, TrainerConfig

CONF = config_dir()
# The groups whose options are values of one schema class, and that class.
PLAIN_GROUPS = {"trainer": TrainerConfig, "logger": LoggerConfig}
# Where each group's option lands in the run's config.
PACKAGE = {"model": "model", "pos": "model.pos", "data": "data", "task": "task", "optim": "optim"}
PACKAGE.update({group: group for group in PLAIN_GROUPS})


def composed(*overrides: str, config: str = "train") -> DictConfig:
    register_schemas()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose(config, overrides=list(overrides))
    return cfg


def plain(node: Any) -> Any:
    return (
        OmegaConf.to_container(node, resolve=False, enum_to_str=True) if OmegaConf.is_config(node) else node
    )


def leaves(values: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every leaf of a nested mapping; lists are leaves."""
    if isinstance(values, dict):
        for key, value in values.items():
            yield from leaves(value, f"{prefix}{key}.")
    else:
        yield prefix.rstrip("."), values


def own_values(path: Path) -> tuple[list, dict]:
    """A preset's defaults list and the values it sets itself."""
    values = yaml.safe_load(path.read_text()) or {}
    return values.pop("defaults", []), values


def base_of(group: str, defaults: list) -> dict:
    """What a group option starts from: the schema class named first in its defaults list, or the
    option it extends (``gpt-tiny`` extends ``gpt``), or the group's one schema class."""
    names = [d for d in defaults if isinstance(d, str) and d != "_self_"]
    if group in PLAIN_GROUPS:
        return plain(OmegaConf.structured(PLAIN_GROUPS[group]))
    (name,) = names
    if name.endswith("_schema"):
        union = next(u for u in UNIONS if u.group.rpartition(".")[2] == group)
        return plain(OmegaConf.structured(union.schemas[name.removesuffix("_schema")]))
    return plain(OmegaConf.select(composed(f"{group}={name}"), PACKAGE[group]))


OPTIONS = sorted((group, path.stem) for group in PACKAGE for path in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_no_group_option_restates_a_default(group: str, option: str) -> None:
    defaults, values = own_values(CONF / group / f"{option}.yaml")
    base = dict(leaves(base_of(group, defaults)))
    restated = [key for key, value in leaves(values) if key in base and base[key] == value]
    assert restated == [], f"conf/{group}/{option}.yaml restates the defaults of {restated}"


@pytest.mark.parametrize("kind", ["experiment", "debug"])
def test_no_experiment_or_debug_preset_restates_a_default(kind: str) -> None:
    """A preset of the whole run, compared with the runs it starts from: those of its own model and data
    choices (an experiment), or the default run of each family (a debug preset, which fits any)."""
    for path in sorted((CONF / kind).glob("*.yaml")):
        defaults, values = own_values(path)
        values.pop("hydra", None)
        picks = [
            f"{k.split()[-1].strip('/')}={v}" for d in defaults for k, v in d.items() if "hydra" not in k
        ]
        runs = [picks] if picks else [[f"model={family}"] for family in ("gpt", "bert", "seq2seq", "vit")]
        bases = [dict(leaves(plain(composed(*run)))) for run in runs]
        restated = [key for key, value in leaves(values) if all(b.get(key, object()) == value for b in bases)]
        assert restated == [], f"conf/{kind}/{path.name} restates the defaults of {restated}"


@pytest.mark.parametrize(("command", "schema"), [("train", RunConfig), ("eval", EvalConfig)])
def test_a_command_without_overrides_composes_to_exactly_the_schema_defaults(
    command: str, schema: type
) -> None:
    cfg = composed(config=command)
    got = plain(cfg)
    got.pop("hydra", None)
    assert got == plain(OmegaConf.structured(schema()))
    assert COMMANDS[command] is schema


def test_the_default_run_is_the_schema_default_run_config() -> None:
    run = to_object(composed())
    assert re.fullmatch(r"outputs/\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d", run.run_dir)  # ${now:...} resolved
    assert replace(run, run_dir=RUN_DIR) == RunConfig()


@pytest.mark.parametrize(
    ("overrides", "pos_class", "key", "value"),
    [
        (("model=qwen3_next",), RopePos, "rope_fraction", 0.25),  # the preset switches pos and sets a field
        (("pos=relative", "model=bert", "model.pos.num_buckets=8"), RelativePos, "num_buckets", 8),
        (("pos=rope", "model=gpt", "model.pos.rope_base=500"), RopePos, "rope_base", 500.0),
    ],
)
def test_model_pos_keeps_the_class_pos_chose_through_the_model_preset(
    overrides: tuple[str, ...], pos_class: type, key: str, value: object
) -> None:
    """The model preset's class merges over model.pos after pos=<name>: the node keeps that class and
    its keys (typed PosConfig for OmegaConf, it would become a bare PosConfig: schema.pos.AnyPosConfig)."""
    cfg = composed(*overrides)
    assert OmegaConf.get_type(cfg.model.pos) is pos_class
    pos = to_object(cfg).model.pos
    assert type(pos) is pos_class and getattr(pos, key) == value


def test_a_key_of_another_encoding_is_refused_under_the_model_preset() -> None:
    with pytest.raises(ConfigCompositionException, match=r"model\.pos\.num_buckets"):
        composed("model=qwen3_next", "model.pos.num_buckets=8")


def test_type_checkers_read_model_pos_as_a_pos_config() -> None:
    """``AnyPosConfig`` is PosConfig where a type checker reads it (Any only for OmegaConf at run time)."""
    import ast
    import inspect

    import attnlab.schema.pos

    tree = ast.parse(inspect.getsource(attnlab.schema.pos))
    (block,) = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    assert [ast.unparse(statement) for statement in block.body] == ["AnyPosConfig = PosConfig"]
