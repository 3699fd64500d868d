"""A dataclass config as plain data, read straight from its fields: what ``OmegaConf.to_container(
OmegaConf.structured(config), enum_to_str=True)`` gives wherever every value already has its field's
type, at a tenth of the cost (OmegaConf builds and validates a node for every value first: 13 ms for
a run config, and a training command asks for several).

``plain_fields`` gives up (``Unusual``) on anything OmegaConf would convert or that it is not sure
to leave alone (an int in a float field, a string in an enum field that is no member's name, a union of
two types, a path, an enum in an untyped field); ``attnlab.schema.load.plain`` then asks OmegaConf.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from enum import Enum
from typing import Any

PRIMITIVES = (int, float, str, bool)


class Unusual(Exception):
    """A value that OmegaConf might convert: its answer is the one to give."""


@functools.cache
def field_types(cls: type) -> tuple[tuple[str, Any], ...]:
    """(name, type) of each field of the dataclass ``cls``, in order."""
    hints = typing.get_type_hints(cls)
    return tuple((field.name, hints[field.name]) for field in dataclasses.fields(cls))


def plain_fields(config: object) -> dict[str, Any]:
    """The dataclass ``config`` as a dict of plain data (enums as their names); Unusual where unsure."""
    try:
        types_of_fields = field_types(type(config))
    except (NameError, TypeError) as err:  # an annotation that does not resolve
        raise Unusual(str(err)) from None
    return {name: plain_value(getattr(config, name), kind) for name, kind in types_of_fields}


def plain_value(value: Any, kind: Any) -> Any:
    """``value`` of a field of type ``kind`` as plain data."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        others = [arg for arg in args if arg is not type(None)]
        if value is None and len(others) < len(args):
            return None
        if len(others) != 1:
            raise Unusual(f"{kind}")
        return plain_value(value, others[0])
    if kind is Any:
        return plain_untyped(value)
    if kind in PRIMITIVES:
        if type(value) is not kind:
            raise Unusual(f"{value!r} in a {kind.__name__} field")
        return value
    if isinstance(kind, type) and issubclass(kind, Enum):
        if isinstance(value, kind):
            return value.name
        if type(value) is str and value in kind.__members__:  # a member's name, as OmegaConf takes it
            return value
        raise Unusual(f"{value!r} in a {kind.__name__} field")
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        if not isinstance(value, kind):
            raise Unusual(f"{value!r} in a {kind.__name__} field")
        return plain_fields(value)
    if origin in (list, tuple) and isinstance(value, (list, tuple)):
        item = args[0] if args else Any
        if origin is tuple and args and (len(args) != 2 or args[1] is not Ellipsis):
            raise Unusual(f"{kind}")
        return [plain_value(v, item) for v in value]
    if origin is dict and isinstance(value, dict) and args and args[0] is str:
        if not all(type(key) is str for key in value):
            raise Unusual(f"{kind}")
        return {key: plain_value(v, args[1]) for key, v in value.items()}
    raise Unusual(f"{value!r} of {kind}")


def plain_untyped(value: Any) -> Any:
    """A value of a field typed ``Any``: primitives, dataclasses, lists and dicts of them."""
    if value is None or type(value) in PRIMITIVES:
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain_fields(value)
    if isinstance(value, (list, tuple)):
        return [plain_untyped(v) for v in value]
    if isinstance(value, dict) and all(type(key) is str for key in value):
        return {key: plain_untyped(v) for key, v in value.items()}
    raise Unusual(f"{value!r} in an untyped field")
