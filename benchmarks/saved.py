"""Each section's last results, one JSON file per section (``benchmarks/saved/<section>.json``).

``python -m benchmarks.run`` saves the rows of every section it runs, with when, how and on what
machine they were measured, and writes ``results.md`` from all the saved files: a section not run
again (a long one, or one that needs nanoGPT's checkout) keeps its last figures. The history of the
figures is in git.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.common import Row


@dataclass
class SectionResult:
    """One section's rows and the run that measured them."""

    name: str  # the key of ``benchmarks.run.SECTIONS``
    measured: str  # "YYYY-MM-DD HH:MM UTC"
    command: str
    machine: str
    versions: str
    threads: int
    size: str  # full, quick or tiny
    minutes: float | None  # the section's own run time; None where not recorded
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def saved_dir(out_dir: Path) -> Path:
    return out_dir / "saved"


def save(result: SectionResult, out_dir: Path) -> Path:
    """Write ``result`` to ``<out_dir>/saved/<name>.json``, replacing the section's last results."""
    path = saved_dir(out_dir) / f"{result.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(result), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def load(path: Path) -> SectionResult:
    values = json.loads(path.read_text(encoding="utf-8"))
    rows = [Row(**row) for row in values.pop("rows")]
    return SectionResult(**values, rows=rows)


def load_all(out_dir: Path, order: list[str]) -> list[SectionResult]:
    """The saved results under ``out_dir`` in the order of ``order`` (names not saved are skipped)."""
    folder = saved_dir(out_dir)
    return [load(folder / f"{name}.json") for name in order if (folder / f"{name}.json").is_file()]
