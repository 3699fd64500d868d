"""The layers of docs/architecture.md hold: import-linter's contracts (pyproject.toml, checked in this
process), no import cycle among attnlab's modules, what importing a package loads in a fresh interpreter
(a process contract, ``interpreter``), and no module over 400 lines."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import grimp
import networkx as nx
import pytest

import processes

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_are_kept(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``lint-imports --no-cache --config pyproject.toml``, its function called here."""
    from importlinter.cli import lint_imports

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "path", list(sys.path))  # it puts the working directory first
    # it configures logging (dictConfig), which disables every logger made before: put them back after
    for logger in logging.Logger.manager.loggerDict.values():
        if isinstance(logger, logging.Logger):
            monkeypatch.setattr(logger, "disabled", logger.disabled)
    status = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    out = capsys.readouterr().out
    assert status == 0, out[-4000:]
    assert "0 broken" in out


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


def loaded_after(statement: str, cwd: Path) -> set[str]:
    """The names of the modules a fresh interpreter holds after ``statement``."""
    code = f"import sys; {statement}; print(' '.join(sorted(sys.modules)))"
    done = processes.run([sys.executable, "-c", code], cwd, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return set(done.stdout.split())


LOADS_NOT = (
    ("import attnlab.schema", {"torch", "pytorch_lightning", "hydra"}),
    ("import attnlab.data.tokenizers, attnlab.data.listops, attnlab.data.generated", {"torch"}),
    ("import attnlab.models", {"attnlab.data", "attnlab.tasks", "pytorch_lightning"}),
    ("import attnlab.explain", {"pytorch_lightning", "matplotlib"}),
    ("import attnlab.generate", {"pytorch_lightning", "attnlab.data", "attnlab.tasks"}),
    ("import attnlab.compress", {"pytorch_lightning", "attnlab.data", "attnlab.tasks", "torchao"}),
    ("import attnlab.report", {"torch", "pytorch_lightning", "hydra", "attnlab.models"}),
)


@pytest.mark.process_contract("interpreter")
def test_importing_a_package_loads_only_what_lies_below_it(tmp_path: Path) -> None:
    """Each package imported alone in a fresh interpreter: none of the modules above it."""
    for statement, absent in LOADS_NOT:
        loaded = loaded_after(statement, tmp_path)
        assert statement.split()[-1] in loaded
        assert not loaded & absent, statement


MAX_MODULE_LINES = 400  # the house limit (nanoGPT's files are shorter): a longer module holds two ideas


def test_no_source_module_is_longer_than_the_house_limit() -> None:
    lengths = {
        p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in (ROOT / "src").rglob("*.py")
    }
    too_long = {path: n for path, n in lengths.items() if n > MAX_MODULE_LINES}
    assert too_long == {}, f"split these by idea (at most {MAX_MODULE_LINES} lines each): {too_long}"
