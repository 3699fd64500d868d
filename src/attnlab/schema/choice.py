"""The two shapes of a choice in the schema: a setting among identifiers (``Choice``), and a config
group whose fields depend on one tag (``TaggedUnion``: the model's family, the data's kind, ...)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from omegaconf import MISSING

from attnlab.schema.errors import ConfigError


class Choice(str, Enum):
    """A setting whose allowed values are identifiers. OmegaConf validates it and lists the members
    itself; a member equals, hashes and prints as its string (``Norm.rmsnorm == "rmsnorm"``), so
    code written against strings keeps working. Every member's name is its value."""

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:  # as the string it stands for, in messages that quote values with !r
        return repr(self.value)

    @classmethod
    def listed(cls) -> str:
        """The members, comma-separated, in their order of definition."""
        return ", ".join(member.value for member in cls)


@dataclass(frozen=True)
class TaggedUnion:
    """A config group whose schema class is picked by one field, the tag: ``schemas[tag value]``.

    Each class joins its union once, with ``@UNION.register`` above its ``@dataclass``: the tag's
    default names it, and every table keyed by the tag is read from ``schemas``. Hydra picks the class
    when it composes (each group option starts from its class's schema node); reading a saved config
    back picks it from the tag (``attnlab.schema.load``).
    """

    group: str  # the dotted key of the group in a run's config: "model", "model.pos", "data", ...
    tag: str  # the field that names the class: "family", "name", "kind"
    choose: str  # how a user picks a class on the command line, {} standing for the tag: "model={}"
    schemas: dict[str, type] = field(default_factory=dict)

    def register(self, schema: type) -> type:
        """Add ``schema`` (a dataclass) to the union under its tag's default value; a class decorator."""
        tag = next((f.default for f in fields(schema) if f.name == self.tag), MISSING)
        if missing(tag) or tag in self.schemas:
            raise ValueError(f"{schema.__name__}: {self.group}.{self.tag}={tag!r} is unset or taken")
        self.schemas[tag] = schema
        return schema

    def schema_of(self, values: Any) -> type:
        """The class named by the tag in ``values`` (a mapping); ConfigError if there is none."""
        name = values.get(self.tag, MISSING) if hasattr(values, "get") else MISSING
        for choice, schema in self.schemas.items():
            if name == choice:
                return schema
        allowed = ", ".join(str(choice) for choice in self.schemas)
        raise ConfigError(f"{self.group}.{self.tag}", name, f"choose one of {allowed}")

    def tag_of(self, schema: type) -> Choice | None:
        """The tag value of one of the union's classes (None for a class outside the union)."""
        return next((choice for choice, cls in self.schemas.items() if cls is schema), None)

    def check_tag(self, config: object) -> None:
        """The tag of ``config`` must name its own class. The class comes from the group option that
        composed it, so a tag changed alone (``model.family=vit`` under ``model=gpt``) would change
        nothing: the error says how to choose instead."""
        tag = getattr(config, self.tag)
        if tag not in self.schemas:
            allowed = ", ".join(str(choice) for choice in self.schemas)
            raise ConfigError(f"{self.group}.{self.tag}", tag, f"choose one of {allowed}")
        if self.schemas.get(tag) is not type(config):
            raise ConfigError(
                f"{self.group}.{self.tag}",
                tag,
                f"cannot be set alone; choose it with {self.choose.format(tag)}",
            )

    def owners(self, key: str) -> list[Choice]:
        """The tag values whose class has the field ``key``."""
        return [choice for choice, cls in self.schemas.items() if key in {f.name for f in fields(cls)}]


def missing(value: object) -> bool:
    """Whether ``value`` is OmegaConf's MISSING (``???``): a field nobody has set."""
    return isinstance(value, str) and value == MISSING
