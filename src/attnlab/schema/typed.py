"""A composed DictConfig as a typed dataclass, and OmegaConf's errors about it as one-line ConfigErrors."""

from __future__ import annotations

from collections.abc import Mapping
from difflib import get_close_matches
from typing import TypeVar

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    MissingMandatoryValue,
    OmegaConfBaseException,
)

from attnlab.schema.errors import ConfigError

T = TypeVar("T")


def typed(cfg: DictConfig | Mapping, schema: type[T]) -> T:
    """``cfg`` merged into the dataclass ``schema``: wrong types, unknown keys and missing values become
    ConfigError. A ``hydra`` node (Hydra's own settings) is left out."""
    if isinstance(cfg, DictConfig):  # plain values: a typed node that "+key=" opened must not hide the key
        cfg = OmegaConf.to_container(cfg, resolve=False)
    cfg = {k: v for k, v in cfg.items() if k != "hydra"}
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), cfg))
    except OmegaConfBaseException as err:
        value = "?"
        if err.full_key:
            value = OmegaConf.select(
                OmegaConf.create(cfg), err.full_key, default="?", throw_on_resolution_failure=False
            )
        raise config_error(err, value, schema) from None


def config_error(err: OmegaConfBaseException, value: object, schema: type | None) -> ConfigError:
    """One line from OmegaConf's multi-line message about ``value``: the key, the value, what is allowed."""
    key = err.full_key or "config"
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value)
    if isinstance(err, MissingMandatoryValue):
        return ConfigError(key, "???", "a value is required")
    if isinstance(err, ConfigKeyError | ConfigAttributeError):
        *path, name = key.split(".")
        parent = OmegaConf.structured(schema) if schema is not None else OmegaConf.create()
        node = OmegaConf.select(parent, ".".join(path)) if path else parent
        known = list(node) if isinstance(node, DictConfig) else []
        close = get_close_matches(name, known, n=1)
        if close:
            return ConfigError(key, value, f"not a known key; did you mean {'.'.join([*path, close[0]])}?")
        return ConfigError(
            key, value, f"not a known key; allowed keys: {', '.join(known)}" if known else "not a known key"
        )
    return ConfigError(key, value, str(err).splitlines()[0])
