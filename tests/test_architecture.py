"""The layers of docs/architecture.md hold: import-linter's contracts (pyproject.toml), no import cycle
among attnlab's modules, what importing a package loads in a fresh interpreter, and no module over 400 lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_are_kept() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint_imports), "--no-cache", "--no-logo", "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_no_module_imports_itself_through_others() -> None:
    """A cycle is a strongly connected component of more than one module in the import graph."""
    graph = grimp.build_graph("attnlab", cache_dir=None)
    imports = nx.DiGraph()
    for module in graph.modules:
        imports.add_node(module)
        imports.add_edges_from(
            (module, imported) for imported in graph.find_modules_directly_imported_by(module)
        )
    assert {"attnlab.cli.train", "attnlab.schema.model", "attnlab.models.hf"} <= set(imports)  # all was read
    cycles = [sorted(c) for c in nx.strongly_connected_components(imports) if len(c) > 1]
    assert cycles == []


def loaded_after(statement: str) -> set[str]:
    """The top-level names of the modules a fresh interpreter holds after ``statement``."""
    code = f"import sys; {statement}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return set(out.stdout.split())


@pytest.mark.parametrize(
    ("statement", "absent"),
    [
        ("import attnlab.schema", {"torch", "pytorch_lightning", "hydra"}),
        ("import attnlab.models", {"attnlab.data", "attnlab.tasks", "pytorch_lightning"}),
        ("import attnlab.explain", {"pytorch_lightning", "matplotlib"}),
        ("import attnlab.generate", {"pytorch_lightning", "attnlab.data", "attnlab.tasks"}),
        ("import attnlab.compress", {"pytorch_lightning", "attnlab.data", "attnlab.tasks", "torchao"}),
        ("import attnlab.report", {"torch", "pytorch_lightning", "hydra", "attnlab.models"}),
    ],
)
def test_importing_a_package_loads_only_what_lies_below_it(statement: str, absent: set[str]) -> None:
    loaded = loaded_after(statement)
    assert statement.split()[-1] in loaded
    assert not loaded & absent


MAX_MODULE_LINES = 400  # the house limit (nanoGPT's files are shorter): a longer module holds two ideas


def test_no_source_module_is_longer_than_the_house_limit() -> None:
    lengths = {
        p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in (ROOT / "src").rglob("*.py")
    }
    too_long = {path: n for path, n in lengths.items() if n > MAX_MODULE_LINES}
    assert too_long == {}, f"split these by idea (at most {MAX_MODULE_LINES} lines each): {too_long}"
