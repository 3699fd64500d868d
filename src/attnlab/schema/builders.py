"""What a layer builds from each class of a tagged union, keyed by the class itself (torch-free).

The schema names the choices (``MODELS``, ``TASKS``, ``POSITIONS``, ...); each layer above registers,
next to its builder, what it builds from one of them::

    MODEL_CLASSES = Builders(MODELS, "model class")      # in attnlab.models

    @MODEL_CLASSES.builds(GPTConfig)
    class DecoderLM(FamilyModel): ...

and finds it from a config with ``MODEL_CLASSES.of(cfg)``. No table keyed by the tag is written by
hand: ``by_tag()`` derives it from the registrations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from attnlab.schema.choice import TaggedUnion

T = TypeVar("T")


class Builders(Generic[T]):
    """Schema class -> what this layer builds from it (a class or a function)."""

    def __init__(self, union: TaggedUnion, what: str) -> None:
        self.union = union
        self.what = what
        self.table: dict[type, T] = {}

    def builds(self, schema: type) -> Callable[[T], T]:
        """A decorator registering its target as the builder of configs of class ``schema``."""

        def register(builder: T) -> T:
            if self.union.tag_of(schema) is None:
                raise ValueError(f"{schema.__name__} is not registered in {self.union.group} (@register)")
            if schema in self.table:
                raise ValueError(f"{schema.__name__} has a {self.what} already: {self.table[schema]!r}")
            self.table[schema] = builder
            return builder

        return register

    def of(self, cfg: object) -> T:
        """The builder of ``cfg``'s class (or of the nearest registered class it derives from)."""
        for cls in type(cfg).__mro__:
            if cls in self.table:
                return self.table[cls]
        tag = getattr(cfg, self.union.tag, cfg)
        raise ValueError(
            f"{self.union.group}.{self.union.tag}={tag}: no {self.what} is registered for "
            f"{type(cfg).__name__}; these are: {', '.join(map(str, self.by_tag()))}"
        )

    def __getitem__(self, tag: str) -> T:
        """The builder of the class whose tag is ``tag`` (KeyError if none is registered)."""
        return self.by_tag()[tag]

    def by_tag(self) -> dict[str, T]:
        """The builders keyed by their classes' tags, in the union's order."""
        return {tag: self.table[cls] for tag, cls in self.union.schemas.items() if cls in self.table}
