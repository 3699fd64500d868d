"""results.md is written from every section's last saved run: a section run again replaces its file,
one skipped or failing keeps its last figures, and the GPU runs' tables are shown as they are."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from benchmarks.common import Row, Settings
from benchmarks.saved import load

from benchmarks import run


def section(value: float) -> types.SimpleNamespace:
    """A section module whose run returns one ratio row of ``value``."""

    def measure(settings: Settings) -> list[Row]:
        return [Row("fake", "speed, a ÷ b", "tiny", value, value, value, "×")]

    return types.SimpleNamespace(run=measure)


def skipped(settings: Settings) -> list[Row]:
    settings.notes.append("fake: skipped (no checkout)")
    return []


def broken(settings: Settings) -> list[Row]:
    raise RuntimeError("the reference crashed")


@pytest.fixture
def fake_sections(monkeypatch: pytest.MonkeyPatch) -> dict:
    sections = {"one": section(1.5), "two": section(2.5)}
    monkeypatch.setattr(run, "SECTIONS", sections)
    monkeypatch.setattr(run, "TITLES", {"one": "The first thing", "two": "The second thing"})
    return sections


def write(out: Path, names: str) -> int:
    return run.main(["--tiny", "--no-memory", "--threads", "1", "--sections", names, "--out", str(out)])


def test_a_section_not_run_again_keeps_its_last_figures(tmp_path: Path, fake_sections: dict) -> None:
    assert write(tmp_path, "one,two") == 0
    fake_sections["one"] = section(3.0)
    assert write(tmp_path, "one") == 0
    assert [r.median for r in load(tmp_path / "saved" / "one.json").rows] == [3.0]
    assert [r.median for r in load(tmp_path / "saved" / "two.json").rows] == [2.5]
    text = (tmp_path / "results.md").read_text(encoding="utf-8")
    assert "| 3.00× |" in text and "| 2.50× |" in text and "| 1.50× |" not in text
    assert text.index("## The first thing (`--sections one`)") < text.index("## The second thing")
    assert "which ran `one`:" in text


def test_a_skipped_or_failing_section_keeps_its_saved_results(tmp_path: Path, fake_sections: dict) -> None:
    assert write(tmp_path, "one,two") == 0
    fake_sections["one"] = types.SimpleNamespace(run=skipped)
    fake_sections["two"] = types.SimpleNamespace(run=broken)
    assert write(tmp_path, "one,two") == 1
    assert [r.median for r in load(tmp_path / "saved" / "one.json").rows] == [1.5]
    assert [r.median for r in load(tmp_path / "saved" / "two.json").rows] == [2.5]
    assert "which ran no section:" in (tmp_path / "results.md").read_text(encoding="utf-8")


def test_the_gpu_runs_tables_are_shown_as_written(tmp_path: Path, fake_sections: dict) -> None:
    runs = tmp_path / "gpu_runs" / "2026-01-01-h100"
    runs.mkdir(parents=True)
    (runs / "recipe.md").write_text("# GPU benchmark\n\n| part | measure |\n|---|---|\n| a | wall time |\n")
    assert write(tmp_path, "one") == 0
    text = (tmp_path / "results.md").read_text(encoding="utf-8")
    gpu = text.split("## On a GPU: `benchmarks/gpu_runs/2026-01-01-h100`", 1)[1]
    assert "### recipe" in gpu and "| a | wall time |" in gpu and "# GPU benchmark" not in gpu


def test_a_standalone_script_s_section_is_shown_as_written(tmp_path: Path, fake_sections: dict) -> None:
    (tmp_path / "standalone").mkdir()
    (tmp_path / "standalone" / "shards.md").write_text("## Shards (`benchmarks/shards.py`)\n\n| a | 1 |\n")
    assert write(tmp_path, "one") == 0
    text = (tmp_path / "results.md").read_text(encoding="utf-8")
    assert "## Shards (`benchmarks/shards.py`)\n\n| a | 1 |\n" in text
    assert text.index("## The first thing") < text.index("## Shards")
