"""attnlab uses Hydra, OmegaConf, Lightning and torch as shipped: no module or class of theirs is
changed outside the guarded ``*_shims.py`` modules (``cli.hydra.hydra_shims``, ``tasks.lightning_shims``,
``models.torch_shims``: a checked version range, each shim off outside it, one contract test each),
no private state of another object is written, and Hydra's ``_internal`` package is imported by the
Hydra shims alone. Tests change a library only through ``monkeypatch`` (undone after the test), never
by assignment. Read from the source's syntax trees: no module is imported."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC, TESTS = ROOT / "src" / "attnlab", ROOT / "tests"
LIBRARIES = {"hydra", "omegaconf", "lightning", "pytorch_lightning", "lightning_fabric", "torch"}
OWN = {"self", "cls"}  # whose private attributes a method may write


def library_names(tree: ast.Module) -> set[str]:
    """The names a module binds to a library's modules, classes and functions (``torch``, ``pl``,
    ``ConfigStore``, ``nn``, ...)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {
                (a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] in LIBRARIES
            }
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").split(".")[0] in LIBRARIES
        ):
            names |= {a.asname or a.name for a in node.names}
    return names


def written_attributes(tree: ast.Module) -> Iterator[tuple[int, ast.Attribute]]:
    """Each attribute an assignment, augmented assignment, ``del``, ``setattr`` or ``delattr`` writes."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) in ("setattr", "delattr")
            and node.args
        ):
            name = (
                node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else "?"
            )
            targets = [ast.Attribute(value=node.args[0], attr=str(name))]
        else:
            continue
        for target in targets:
            for element in target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]:
                if isinstance(element, ast.Attribute):
                    yield node.lineno, element


def base_name(attribute: ast.Attribute) -> str | None:
    """``torch`` of ``torch._inductor.config.x``; None where the chain starts with a call or subscript."""
    node: ast.expr = attribute
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def library_writes(source: str, where: str, private_too: bool) -> list[str]:
    """``where:line: target`` of each write to an attribute of a library's module or class in ``source``;
    with ``private_too``, also of each write to a private attribute of an object other than
    ``self``/``cls`` (a library object's internal state, a scheduler's ``_last_lr``)."""
    tree = ast.parse(source)
    libraries = library_names(tree)
    found = []
    for line, attribute in written_attributes(tree):
        base = base_name(attribute)
        private = attribute.attr.startswith("_") and not attribute.attr.startswith("__") and base not in OWN
        if base in libraries or (private_too and private):
            found.append(f"{where}:{line}: {ast.unparse(attribute)}")
    return found


def python_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py"))


def writes_in(path: Path, private_too: bool) -> list[str]:
    return library_writes(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)), private_too)


def test_no_module_writes_a_librarys_attributes_outside_the_shims() -> None:
    found = [
        write
        for path in python_files(SRC)
        if not path.name.endswith("_shims.py")
        for write in writes_in(path, private_too=True)
    ]
    assert found == [], "move these into a guarded *_shims.py module with a contract test:\n" + "\n".join(
        found
    )


def test_tests_change_a_library_only_through_monkeypatch() -> None:
    found = [write for path in python_files(TESTS) for write in writes_in(path, private_too=False)]
    assert found == [], "use monkeypatch.setattr (undone after the test):\n" + "\n".join(found)


def test_hydras_internal_package_is_imported_by_the_hydra_shims_alone() -> None:
    """In the package and in the tests: what else needs Hydra's internals reaches them through
    ``cli/hydra/hydra_shims.py``, whose contract tests (``cli/test_hydra_shims.py``) alone import them."""
    importers = []
    for root in (SRC, TESTS):
        for path in python_files(root):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.module:
                    modules = [node.module]
                if any(m == "hydra._internal" or m.startswith("hydra._internal.") for m in modules):
                    importers.append(str(path.relative_to(root.parent)))
    assert set(importers) <= {"attnlab/cli/hydra/hydra_shims.py", "tests/cli/test_hydra_shims.py"}, importers


@pytest.mark.parametrize(
    ("source", "writes"),
    [
        ("import torch\ntorch.backends.flag = True", ["torch.backends.flag"]),
        ("from hydra._internal.hydra import Hydra\nHydra.get_help = f", ["Hydra.get_help"]),
        ("import pytorch_lightning as pl\nsetattr(pl.Trainer, 'fit', f)", ["pl.Trainer.fit"]),
        ("from omegaconf import OmegaConf\ndel OmegaConf.load", ["OmegaConf.load"]),
        ("scheduler._last_lr = [1.0]", ["scheduler._last_lr"]),
        ("self._cache = {}\nmodel.weight = w\nimport torch\nx = torch.zeros(1)", []),
    ],
)
def test_the_scan_finds_each_kind_of_write(source: str, writes: list[str]) -> None:
    assert [w.split(": ", 1)[1] for w in library_writes(source, "probe", private_too=True)] == writes
