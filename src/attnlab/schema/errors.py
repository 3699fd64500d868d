"""The one error type of bad configuration values, whose message is one line: ``key=value: allowed``,
and the small rules that many fields share (finite, positive, a fraction, at least one)."""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass

# why a plain or sharded checkpoint that would run code is refused (every reader of one says the same)
PICKLED_CODE = (
    "not a checkpoint of attnlab: it holds pickled objects beyond tensors and plain data, which could "
    "run code, so it is not loaded"
)


class ConfigError(ValueError):
    """A bad configuration value: ``str()`` is one line, ``key=value: what is allowed``."""

    def __init__(self, key: str, value: object, allowed: str) -> None:
        super().__init__(f"{key}={show(value)}: {allowed}")
        self.key = key
        self.value = value
        self.allowed = allowed


def show(value: object) -> str:
    """A value as the command line spells it: ``null`` for None, ``true``/``false``, lists without spaces."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(show(v) for v in value) + "]"
    return "null" if value is None else str(value)


def positive(key: str, value: float | None, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if value is None or value <= 0:
        raise ConfigError(key, value, "must be positive")


def at_least_one(key: str, value: int) -> None:
    if value < 1:
        raise ConfigError(key, value, "must be at least 1")


def not_negative(key: str, value: float) -> None:
    if value < 0:
        raise ConfigError(key, value, "must be 0 or more")


def fraction(key: str, value: float) -> None:
    """A probability that leaves something: in [0, 1)."""
    if not 0.0 <= value < 1.0:
        raise ConfigError(key, value, "must be in [0, 1)")


def finite(config: object, key: str = "") -> None:
    """Every number of a config (a dataclass, walked with its lists and nested classes) is finite.

    NaN passes every comparison (``nan <= 0`` is false) and infinity most, so each field's own rule
    would let ``optim.lr=nan`` or ``data.std=[inf]`` through to a run that fails late or trains to
    nothing. One rule here, for all fields, refuses them first. The free-form arguments of ``_target_``
    configs (dicts) are their classes' to check."""
    if isinstance(config, float) and not math.isfinite(config):
        raise ConfigError(key, config, "must be a finite number (not nan, inf or -inf)")
    if is_dataclass(config) and not isinstance(config, type):
        for f in fields(config):
            finite(getattr(config, f.name), f"{key}.{f.name}" if key else f.name)
    elif isinstance(config, list | tuple):
        if any(isinstance(v, float) and not math.isfinite(v) for v in config):
            raise ConfigError(key, list(config), "must hold finite numbers (not nan, inf or -inf)")
        for i, value in enumerate(config):
            finite(value, f"{key}[{i}]")
