"""Between OmegaConf and the schema's dataclasses, in one place:

* ``to_object``: a config that Hydra composed against its schema, as the schema's dataclass (the one
  merge with the schema is Hydra's; this only refuses the keys ``+key=`` slipped in, and converts);
* ``read_run_config`` and friends: a config saved as plain data (``config.yaml``, a checkpoint), as
  dataclasses again, each tagged group's class picked by its tag;
* ``from_format_1``: a run config saved before the schema had one class per family, kind, task and
  optimiser, in today's shape, so the runs and checkpoints of earlier versions still load;
* ``plain``: a dataclass as plain data (enums as strings), what a checkpoint may hold;
* ``config_error``: an OmegaConf error as a one-line ConfigError, from the exception's own fields.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from difflib import get_close_matches
from enum import Enum
from typing import Any, get_args, get_type_hints

from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    MissingMandatoryValue,
    OmegaConfBaseException,
)
from omegaconf.nodes import EnumNode

from attnlab.schema.choice import TaggedUnion
from attnlab.schema.data import DATA
from attnlab.schema.errors import ConfigError, finite
from attnlab.schema.model import MODELS, ModelConfig
from attnlab.schema.optim import OPTIMIZERS, OptimConfig
from attnlab.schema.plain_data import Unusual, plain_fields
from attnlab.schema.pos import POSITIONS
from attnlab.schema.run import RunConfig
from attnlab.schema.task import TASKS, TaskConfig

UNIONS = (MODELS, POSITIONS, DATA, TASKS, OPTIMIZERS)


def to_object(cfg: DictConfig) -> Any:
    """The dataclass instance of a config composed against a schema (Hydra's ``hydra`` node left out);
    ConfigError at a key the schema lacks, a value it refuses, or a number that is not finite."""
    if "hydra" in cfg:
        cfg = copy.deepcopy(cfg)
        with read_write(cfg), open_dict(cfg):
            del cfg["hydra"]
    refuse_unknown_keys(cfg)
    try:
        config = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as err:
        raise config_error(err, value_at(cfg, err.full_key)) from None
    finite(config)  # before any field's own rule, which NaN would pass
    return config


def refuse_unknown_keys(node: DictConfig, prefix: str = "") -> None:
    """``+key=value`` opens a schema node to any key, and ``to_object`` would drop it without a word:
    a key that the node's class does not have is a ConfigError."""
    schema = OmegaConf.get_type(node)
    known = {f.name for f in fields(schema)} if is_dataclass(schema) else None
    for key, value in node.items_ex(resolve=False):
        if known is not None and key not in known:
            raise unknown_key(f"{prefix}{key}", value, schema)
        if isinstance(value, DictConfig) and not value._is_none():  # a typed null (eval.data) has no keys
            refuse_unknown_keys(value, f"{prefix}{key}.")


def read_run_config(values: Mapping) -> RunConfig:
    """A run's config saved as plain data (``config.yaml``, a checkpoint's run config), of any format."""
    if is_format_1(values):
        values = from_format_1(values)
    values = with_logger_targets(values)
    node = OmegaConf.structured(RunConfig)
    node.model = _model_node(_group(values, "model"))
    for name, union in (("data", DATA), ("task", TASKS), ("optim", OPTIMIZERS)):
        node[name] = OmegaConf.structured(union.schema_of(_group(values, name)))
    return _read(node, values)


def read_model_config(values: Mapping) -> ModelConfig:
    """A model config saved as plain data (a checkpoint's), as its family's class."""
    return _read(OmegaConf.create({"model": _model_node(values)}), {"model": values})["model"]


def read_task_config(values: Mapping) -> TaskConfig:
    return _read(OmegaConf.create({"task": _tagged_node(TASKS, values)}), {"task": values})["task"]


def read_optim_config(values: Mapping) -> OptimConfig:
    return _read(OmegaConf.create({"optim": _tagged_node(OPTIMIZERS, values)}), {"optim": values})["optim"]


# Keys of format-1 configs that no class has any more (accepted then, never read).
REMOVED_KEYS = {"task": {"sample_every_n_epochs"}}


def is_format_1(run: Mapping) -> bool:
    """Whether a saved run config predates the tagged groups: its optimiser has no ``name`` tag."""
    optim = run.get("optim") if isinstance(run, Mapping) else None
    return isinstance(optim, Mapping) and "name" not in optim


def from_format_1(run: Mapping) -> dict:
    """A run config of format 1 (flat classes holding every key of every family, data kind, task and
    positional encoding; an untagged optimiser) in today's shape: the optimiser gets its tag and each
    group keeps the keys of its own class. A key that no class has stays, so it is still an error."""
    upgraded = dict(run)
    for name in ("model", "task", "optim"):
        if isinstance(run.get(name), Mapping):
            upgraded[name] = upgrade_group(name, run[name])
    if isinstance(run.get("data"), Mapping):
        upgraded["data"] = _own_keys(DATA, run["data"])
    return upgraded


def with_logger_targets(run: Mapping) -> Mapping:
    """A run config saved before loggers and callbacks were ``_target_`` configs (``logger.names``, a
    list of callbacks: formats 1 and 2) in today's shape: a config per logger named, the callbacks by
    their position."""
    logger, callbacks = run.get("logger"), run.get("callbacks")
    upgraded = dict(run)
    if isinstance(logger, Mapping) and "names" in logger:
        names = list(logger["names"] or [])
        wandb = {k: logger[k] for k in ("project", "group", "mode") if k in logger}
        upgraded["logger"] = {
            "wandb": {**wandb, "name": logger.get("run_name")} if "wandb" in names else None,
            "csv": {} if "csv" in names else None,
            "tensorboard": {} if "tensorboard" in names else None,
            "tags": list(logger.get("tags") or []),
        }
    if isinstance(callbacks, list):
        upgraded["callbacks"] = {f"callback_{i}": c for i, c in enumerate(callbacks)}
    return upgraded


def upgrade_group(name: str, values: Mapping) -> dict:
    """One group (``model``, ``task`` or ``optim``) of a format-1 config in today's shape."""
    if name == "optim":
        return {"name": "adamw", **values}
    if name == "task":
        return _own_keys(TASKS, values, REMOVED_KEYS["task"])
    model = _own_keys(MODELS, values)
    if isinstance(values.get("pos"), Mapping):
        model["pos"] = _own_keys(POSITIONS, values["pos"])
    return model


def _own_keys(union: TaggedUnion, values: Mapping, removed: set[str] = frozenset()) -> dict:
    """``values`` without the keys that belong only to the other classes of ``union`` (or to none now)."""
    own = {f.name for f in fields(union.schema_of(values))}
    known = {f.name for schema in union.schemas.values() for f in fields(schema)} | set(removed)
    return {key: value for key, value in values.items() if key in own or key not in known}


def _group(values: Mapping, name: str) -> Mapping:
    group = values.get(name) if isinstance(values, Mapping) else None
    if not isinstance(group, Mapping):
        raise ConfigError(name, group, "a saved run config holds every group: this one has none")
    return group


def _tagged_node(union: TaggedUnion, values: Mapping) -> DictConfig:
    return OmegaConf.structured(union.schema_of(values))


def _model_node(values: Mapping) -> DictConfig:
    node = _tagged_node(MODELS, values)
    node.pos = _tagged_node(POSITIONS, _group(values, "pos"))
    return node


def _read(node: DictConfig, values: Mapping) -> Any:
    try:
        return OmegaConf.to_object(OmegaConf.merge(node, values))
    except OmegaConfBaseException as err:
        raise config_error(err, value_at(OmegaConf.create(dict(values)), err.full_key)) from None


def plain(config: Any) -> dict:
    """A dataclass config as plain data, enums as their names: what checkpoints and loggers are given
    (``torch.load(weights_only=True)`` reads back nothing else). OmegaConf's conversion, read straight
    from the fields where no value needs converting (``attnlab.schema.plain_data``)."""
    try:
        return plain_fields(config)
    except Unusual:
        return plain_by_omegaconf(config)


def plain_by_omegaconf(config: Any) -> dict:
    return OmegaConf.to_container(OmegaConf.structured(config), enum_to_str=True)


def value_at(cfg: DictConfig, key: str | None) -> object:
    """The value at a dotted ``key`` of ``cfg`` as plain data, or ``?`` where there is none."""
    if not key:
        return "?"
    value = OmegaConf.select(cfg, key, default="?", throw_on_missing=False, throw_on_resolution_failure=False)
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


def config_error(err: OmegaConfBaseException, value: object) -> ConfigError:
    """A one-line ConfigError for an OmegaConf error about ``value``: the key the exception names, and
    what is allowed there from the schema (the enum's members, the class's keys)."""
    key = err.full_key or "config"
    if isinstance(err, MissingMandatoryValue):
        return ConfigError(key, "???", "a value is required")
    if isinstance(err, ConfigKeyError | ConfigAttributeError):
        return unknown_key(key, value, err.object_type)
    members = enum_members(err)
    if members is not None:
        return ConfigError(key, value, f"choose one of {members}")
    return ConfigError(key, value, str(err).splitlines()[0])


def enum_members(err: OmegaConfBaseException) -> str | None:
    """The members of the enum typing the node ``err`` is about (a field, or a list's elements)."""
    enum = err.child_node.enum_type if isinstance(err.child_node, EnumNode) else None
    element = get_args(err.ref_type)
    if enum is None and element and isinstance(element[0], type) and issubclass(element[0], Enum):
        enum = element[0]
    return None if enum is None else ", ".join(member.name for member in enum)


def unknown_key(key: str, value: object, schema: type | None) -> ConfigError:
    """``key`` is not a field of ``schema``: say which classes of its union have it, or the closest
    key, or the keys there are."""
    *path, name = key.split(".")
    group = ".".join(path)
    union = next((u for u in UNIONS if u.tag_of(schema) is not None), None)
    owners = union.owners(name) if union is not None else []
    block = nested_block(schema, name)
    mean = f" (did you mean {'.'.join([*path, block, name])}?)" if block else ""
    if owners:
        tagged = f"{group}.{union.tag}"
        how = f" (choose it with {union.choose.format(owners[0])})" if len(owners) == 1 else ""
        return ConfigError(
            key,
            value,
            f"not a key of {tagged}={union.tag_of(schema)}{mean}; it is a key of "
            f"{tagged}={', '.join(str(o) for o in owners)}{how}",
        )
    known = [f.name for f in fields(schema)] if is_dataclass(schema) else []
    close = get_close_matches(name, known, n=1)
    if close:
        return ConfigError(key, value, f"not a known key; did you mean {'.'.join([*path, close[0]])}?")
    return ConfigError(
        key, value, f"not a known key; allowed keys: {', '.join(known)}" if known else "not a known key"
    )


def nested_block(schema: type | None, name: str) -> str | None:
    """The field of ``schema`` holding a block whose class has the key ``name`` (``optim=muon``'s
    ``adamw`` block has ``betas``), or None."""
    if not is_dataclass(schema):
        return None
    for key, kind in get_type_hints(schema).items():
        if is_dataclass(kind) and name in {f.name for f in fields(kind)}:
            return key
    return None
