"""The one error type of bad configuration values, whose message is one line: ``key=value: allowed``."""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad configuration value: ``str()`` is one line, ``key=value: what is allowed``."""

    def __init__(self, key: str, value: object, allowed: str) -> None:
        super().__init__(f"{key}={show(value)}: {allowed}")
        self.key = key


def show(value: object) -> str:
    """A value as the command line spells it: ``null`` for None, lists without spaces."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(show(v) for v in value) + "]"
    return "null" if value is None else str(value)
