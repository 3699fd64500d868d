"""``--help`` in about a second, with what each key means.

Hydra's ``--help`` fills every placeholder of Hydra's help template, the two lists of config groups
included, whether the template shows them or not; listing them composes the config once per group,
23 s on a busy 2-core machine. attnlab's templates (``conf/hydra/help/attnlab.yaml``,
``conf/eval.yaml``) list their groups themselves, so ``cli.hydra.hydra_shims.help_with_field_comments`` fills
only the placeholders a template uses (Hydra's help is private API: there, with its version guard).

The config it shows is annotated with the comment of each key's field in the schema's dataclasses
(``model.n_heads: 4  # ...``), read from their source: the schema is the one place the keys are
described (docs/architecture.md, "The config").
"""

from __future__ import annotations

import functools
import inspect
import re
from dataclasses import is_dataclass

from omegaconf import DictConfig, OmegaConf

FIELD = re.compile(r"^    (\w+): [^#]*?(?:  # (.*))?$")  # a field of a dataclass body, its inline comment
COMMENT = re.compile(r"^    # ?(.*)$")  # a comment line of a dataclass body
KEY = re.compile(r"^( *)([\w-]+):")  # a key of Hydra's YAML dump, indented two spaces a level


def described_yaml(cfg: DictConfig, resolve: bool = False) -> str:
    """``cfg`` as Hydra dumps it, each key of a typed node followed by its field's comment."""
    lines = OmegaConf.to_yaml(cfg, resolve=resolve).splitlines()
    path: list[str] = []
    for i, line in enumerate(lines):
        match = KEY.match(line)
        if match is None:
            continue
        depth, key = len(match.group(1)) // 2, match.group(2)
        path = [*path[:depth], key]
        note = field_note(cfg, path)
        if note:
            lines[i] = f"{line}  # {note}"
    return "\n".join(lines) + "\n"


def field_note(cfg: DictConfig, path: list[str]) -> str | None:
    """The comment of the field ``path`` in the dataclass of its parent node, if it has one."""
    parent = OmegaConf.select(cfg, ".".join(path[:-1])) if len(path) > 1 else cfg
    if not isinstance(parent, DictConfig):
        return None
    schema = OmegaConf.get_type(parent)
    return field_notes(schema).get(path[-1]) if is_dataclass(schema) else None


@functools.cache
def field_notes(schema: type) -> dict[str, str]:
    """``{field: comment}`` of a dataclass and its bases: a field's inline comment, else the first
    sentence of the comment lines right above it (the rest tells how, for readers of the source)."""
    notes: dict[str, str] = {}
    for klass in reversed(schema.__mro__):
        if not is_dataclass(klass):
            continue
        try:
            source = inspect.getsource(klass).splitlines()
        except (OSError, TypeError):
            continue
        above: list[str] = []
        for line in source:
            comment, field = COMMENT.match(line), FIELD.match(line)
            if comment:
                above.append(comment.group(1).strip())
            elif field:
                note = field.group(2) or first_sentence(" ".join(above))
                if note:
                    notes[field.group(1)] = note.strip()
                above = []
            else:
                above = []
    return notes


def first_sentence(text: str) -> str:
    return re.split(r"(?<=\.)\s+(?=[A-Z])", text, maxsplit=1)[0]
