"""Each family, task, data kind, optimiser and positional encoding is registered once: its schema class
in its union, its builder in each layer keyed by that class. Nothing outside a descriptor module
switches on a family's or a task's name."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from attnlab.blocks.positional import POSITIONAL
from attnlab.data import modules
from attnlab.models import MODEL_CLASSES
from attnlab.run.families import FAMILY_COMMANDS
from attnlab.schema.data import DATA
from attnlab.schema.model import MODELS
from attnlab.schema.optim import OPTIMIZERS
from attnlab.schema.pos import POSITIONS
from attnlab.schema.task import TASKS, DistillTask
from attnlab.tasks import TASK_CLASSES
from attnlab.tasks.optim import OPTIMIZER_BUILDERS

SRC = Path(__file__).resolve().parents[1] / "src" / "attnlab"
# Where families and tasks are named: their schema classes (the descriptors).
DESCRIPTORS = {"schema/model.py", "schema/task.py"}


@pytest.mark.parametrize(
    ("builders", "union", "left_out"),
    [
        (MODEL_CLASSES, MODELS, set()),
        (FAMILY_COMMANDS, MODELS, set()),
        (TASK_CLASSES, TASKS, {DistillTask}),  # a wrapper over the other tasks' modules
        (OPTIMIZER_BUILDERS, OPTIMIZERS, set()),
        (POSITIONAL, POSITIONS, set()),
    ],
    ids=["models", "commands", "tasks", "optimizers", "positions"],
)
def test_every_class_of_a_union_has_its_builder(builders, union, left_out) -> None:
    assert set(builders.table) == set(union.schemas.values()) - left_out
    assert list(builders.by_tag()) == [tag for tag, cls in union.schemas.items() if cls not in left_out]


def test_every_data_kind_names_a_data_module_that_exists() -> None:
    assert set(modules()) == set(DATA.schemas)
    for kind, path in modules().items():
        module, name = path.split(":")
        assert hasattr(importlib.import_module(module), name), kind


def test_a_family_accepts_only_registered_tasks_and_kinds() -> None:
    for family, schema in MODELS.schemas.items():
        assert schema.trains, family
        for task, kinds in schema.trains.items():
            assert task in TASKS.schemas and all(kind in DATA.schemas for kind in kinds), (family, task)


def test_a_second_registration_of_a_tag_or_class_is_refused() -> None:
    gpt = MODELS.schemas["gpt"]
    with pytest.raises(ValueError, match="taken"):
        MODELS.register(gpt)
    with pytest.raises(ValueError, match="has a model class already"):
        MODEL_CLASSES.builds(gpt)(object)


def names_compared(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """The lines where a family's or task's name is compared (==, !=, in): a string constant among
    ``names``, a member of ``Family`` or ``TaskName``, or a ``.family`` attribute against a constant."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare) or not all(
            isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops
        ):
            continue
        sides = [node.left, *node.comparators]
        items = [i for s in sides for i in (s.elts if isinstance(s, (ast.Tuple, ast.List, ast.Set)) else [s])]
        named = any(isinstance(i, ast.Constant) and i.value in names for i in items)
        member = any(
            isinstance(i, ast.Attribute)
            and isinstance(i.value, ast.Name)
            and i.value.id in ("Family", "TaskName")
            for i in items
        )
        family = any(isinstance(s, ast.Attribute) and s.attr == "family" for s in sides) and any(
            isinstance(i, ast.Constant) for i in items
        )
        if named or member or family:
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_family_or_task_name_is_compared_outside_its_descriptor() -> None:
    names = {str(tag) for tag in [*MODELS.schemas, *TASKS.schemas]}
    found = [
        f"{path.relative_to(SRC)}:{line}: {code}"
        for path in sorted(SRC.rglob("*.py"))
        if str(path.relative_to(SRC)) not in DESCRIPTORS
        for line, code in names_compared(ast.parse(path.read_text(encoding="utf-8")), names)
    ]
    assert not found, "ask the config's class or the model instead:\n" + "\n".join(found)


def test_the_scan_finds_the_switches_it_forbids() -> None:
    code = (
        'a = task == "mlm"\nb = cfg.family != "x"\nc = name in ("gpt", "vit")\nd = n == TaskName.mlm\n'
        "e = theirs.family == ours.family\n"  # the same family on both sides: no name switched on
    )
    assert [line for line, _ in names_compared(ast.parse(code), {"mlm", "gpt", "vit"})] == [1, 2, 3, 4]
